//! `[gateway]` validated: beyond its types, each refusal located.

use std::ops::Range;
use std::time::Duration;

use holdfast_gateway::{GatewayConfig, KeyKind, KeySource, TokenKey};
use toml::Spanned;

use super::gateway::{
    ClusterSection, GatewaySection, MAX_HISTORY_SIZE, MAX_HISTORY_TTL, MAX_LEEWAY,
    MAX_MESSAGE_SIZE, MAX_SEND_QUEUE, TlsSection,
};
use super::gateway_convert::{duration, read_token_secret};
use crate::config::ConfigError;

type At<'a> = &'a dyn Fn(Option<Range<usize>>, &str, String) -> ConfigError;

// i[impl node.gateway.config+4]
/// `[gateway]` beyond its types: a token key file that is safe, readable and long enough; sizes
/// and durations in range; an idle timeout longer than the ping interval; a TLS source that is
/// one pair or one issuance hostname (of `issuance_hosts`); cluster endpoints that are URLs.
pub fn validate(
    section: &Spanned<GatewaySection>,
    issuance_hosts: &[String],
    at: At<'_>,
) -> Result<(), ConfigError> {
    let g = section.get_ref();
    if let Some(tls) = &g.tls {
        validate_tls(tls, issuance_hosts, at)?;
    }
    if let Some(cluster) = &g.cluster {
        validate_cluster(cluster, at)?;
    }
    if let Some(id) = &g.replica_id {
        if id.get_ref().trim().is_empty() {
            return Err(at(
                Some(id.span()),
                "gateway.replica_id",
                "must not be empty (remove it to use the node id)".into(),
            ));
        }
    }
    if let Some(a) = &g.advertise {
        if a.get_ref().trim().is_empty() {
            return Err(at(
                Some(a.span()),
                "gateway.advertise",
                "must not be empty (remove it to advertise the bound address)".into(),
            ));
        }
    }
    validate_auth(section, at)?;
    // i[impl node.gateway.publish]
    if let Some(f) = &g.publish_token_file {
        if let Err(message) = crate::config::token::read(f.get_ref()) {
            return Err(at(Some(f.span()), "gateway.publish_token_file", message));
        }
    }
    if let Some(size) = &g.max_message_size {
        if !(1..=MAX_MESSAGE_SIZE).contains(size.get_ref()) {
            return Err(at(
                Some(size.span()),
                "gateway.max_message_size",
                format!("must be between 1 and {MAX_MESSAGE_SIZE} bytes"),
            ));
        }
    }
    if let Some(queue) = &g.send_queue {
        if !(1..=MAX_SEND_QUEUE).contains(queue.get_ref()) {
            return Err(at(
                Some(queue.span()),
                "gateway.send_queue",
                format!("must be between 1 and {MAX_SEND_QUEUE}"),
            ));
        }
    }
    if let Some(size) = &g.history_size {
        if *size.get_ref() > MAX_HISTORY_SIZE {
            return Err(at(
                Some(size.span()),
                "gateway.history_size",
                format!("must be at most {MAX_HISTORY_SIZE} (0: no history)"),
            ));
        }
    }
    if let Some(bytes) = &g.history_max_bytes {
        if *bytes.get_ref() == 0 {
            return Err(at(
                Some(bytes.span()),
                "gateway.history_max_bytes",
                "must be at least 1 (history_size = 0 turns history off)".into(),
            ));
        }
    }
    if let Some(ttl) = &g.history_ttl {
        if ttl.get_ref().get() > MAX_HISTORY_TTL {
            return Err(at(
                Some(ttl.span()),
                "gateway.history_ttl",
                "must be at most 24h".into(),
            ));
        }
    }
    for (key, d) in [
        ("gateway.history_ttl", &g.history_ttl),
        ("gateway.ping_interval", &g.ping_interval),
        ("gateway.idle_timeout", &g.idle_timeout),
        ("gateway.drain.total", &g.drain.total),
        ("gateway.drain.retry_after", &g.drain.retry_after),
    ] {
        if let Some(d) = d {
            if d.get_ref().get().is_zero() {
                return Err(at(Some(d.span()), key, "must be longer than zero".into()));
            }
        }
    }
    let defaults = GatewayConfig::new(*g.listen.get_ref(), "-", TokenKey::new(Vec::<u8>::new()));
    let ping = duration(&g.ping_interval, defaults.ping_interval);
    let idle = duration(&g.idle_timeout, defaults.idle_timeout);
    if idle <= ping {
        let span = g
            .idle_timeout
            .as_ref()
            .or(g.ping_interval.as_ref())
            .map(Spanned::span);
        return Err(at(
            span,
            "gateway.idle_timeout",
            format!(
                "must be longer than gateway.ping_interval ({ping:?}): a client answering every \
                 ping would still be closed as idle"
            ),
        ));
    }
    if let Some(total) = &g.drain.total {
        if total.get_ref().get() > Duration::from_secs(600) {
            return Err(at(
                Some(total.span()),
                "gateway.drain.total",
                "must be at most 10m".into(),
            ));
        }
    }
    Ok(())
}

// i[impl node.gateway.auth]
fn validate_auth(section: &Spanned<GatewaySection>, at: At<'_>) -> Result<(), ConfigError> {
    let g = section.get_ref();
    let a = &g.auth;
    if let Some(f) = &g.token_key_file {
        if let Err(message) = read_token_secret(f.get_ref()) {
            return Err(at(Some(f.span()), "gateway.token_key_file", message));
        }
    }
    let none = Vec::new();
    let secrets = a.secrets.as_ref().map_or(&none, |k| k.get_ref());
    let public = a.public_keys.as_ref().map_or(&none, |k| k.get_ref());
    if g.token_key_file.is_none() && secrets.is_empty() && public.is_empty() {
        return Err(at(
            a.secrets
                .as_ref()
                .or(a.public_keys.as_ref())
                .map(Spanned::span)
                .or(Some(section.span())),
            "gateway.auth",
            "no token key: give gateway.token_key_file, or files in [gateway.auth] secrets \
             (HS256 secrets) or public_keys (PEM public keys, JWKS)"
                .into(),
        ));
    }
    for (key, list, kind) in [
        ("gateway.auth.secrets", &a.secrets, KeyKind::Secret),
        ("gateway.auth.public_keys", &a.public_keys, KeyKind::Public),
    ] {
        if let Some(l) = list {
            for f in l.get_ref() {
                let source = KeySource {
                    path: f.clone(),
                    kind,
                };
                if let Err(e) = holdfast_gateway::token::load_source(&source) {
                    return Err(at(Some(l.span()), key, e.to_string()));
                }
            }
        }
    }
    if let Some(aud) = &a.audience {
        if aud.get_ref().iter().any(|s| s.trim().is_empty()) {
            return Err(at(
                Some(aud.span()),
                "gateway.auth.audience",
                "an audience must not be empty".into(),
            ));
        }
    }
    if let Some(iss) = &a.issuer {
        if iss.get_ref().trim().is_empty() {
            return Err(at(
                Some(iss.span()),
                "gateway.auth.issuer",
                "must not be empty (remove it to accept any issuer)".into(),
            ));
        }
    }
    if let Some(l) = &a.leeway {
        if l.get_ref().get() > MAX_LEEWAY {
            return Err(at(
                Some(l.span()),
                "gateway.auth.leeway",
                "must be at most 5m".into(),
            ));
        }
    }
    if let Some(r) = &a.reload_interval {
        if r.get_ref().get().is_zero() {
            return Err(at(
                Some(r.span()),
                "gateway.auth.reload_interval",
                "must be longer than zero".into(),
            ));
        }
    }
    Ok(())
}

fn validate_tls(
    section: &Spanned<TlsSection>,
    issuance_hosts: &[String],
    at: At<'_>,
) -> Result<(), ConfigError> {
    let t = section.get_ref();
    let span = Some(section.span());
    match (&t.from_issuance, &t.cert, &t.key) {
        (Some(host), None, None) => {
            // The store's file is named as the [issuance] section spells the hostname, so a
            // spelling differing in case only would name a file that is never written.
            if let Some(spelt) = issuance_hosts
                .iter()
                .find(|h| h.eq_ignore_ascii_case(host) && *h != host)
            {
                return Err(at(
                    span,
                    "gateway.tls.from_issuance",
                    format!(
                        "{host:?}: write the hostname as the [issuance] section does ({spelt:?}), \
                         which names its certificate file"
                    ),
                ));
            }
            if !issuance_hosts.iter().any(|h| h == host) {
                return Err(at(
                    span,
                    "gateway.tls.from_issuance",
                    format!(
                        "{host:?} is not a hostname of the [issuance] section: add it as an \
                         [[issuance.hostname]], or give cert and key"
                    ),
                ));
            }
            Ok(())
        }
        (None, Some(_), Some(_)) => Ok(()),
        (Some(_), _, _) => Err(at(
            span,
            "gateway.tls",
            "give either from_issuance or cert and key, not both".into(),
        )),
        (None, _, _) => Err(at(
            span,
            "gateway.tls",
            "needs both cert and key (PEM files), or from_issuance".into(),
        )),
    }
}

fn validate_cluster(section: &Spanned<ClusterSection>, at: At<'_>) -> Result<(), ConfigError> {
    let c = section.get_ref();
    let no_endpoints = Vec::new();
    let etcd = c.etcd.as_ref().map_or(&no_endpoints, |e| e.get_ref());
    let etcd_span = c.etcd.as_ref().map(Spanned::span);
    if let Some(bad) = etcd
        .iter()
        .find(|e| !(e.starts_with("http://") || e.starts_with("https://")))
    {
        return Err(at(
            etcd_span.clone(),
            "gateway.cluster.etcd",
            format!("invalid endpoint {bad:?}: write http://HOST:PORT"),
        ));
    }
    if !etcd.is_empty() && !holdfast_gateway::ETCD_SUPPORTED {
        return Err(at(
            etcd_span,
            "gateway.cluster.etcd",
            "this holdfast was built without etcd support (cargo feature `etcd`, which needs \
             protoc): rebuild with --features etcd (or holdfast-gateway/etcd), or remove etcd to keep the registry in memory"
                .into(),
        ));
    }
    if let Some(redis) = &c.redis {
        let url = redis.get_ref();
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(at(
                Some(redis.span()),
                "gateway.cluster.redis",
                format!("invalid URL {url:?}: write redis://HOST:PORT"),
            ));
        }
    }
    for (key, d) in [
        ("gateway.cluster.lease_ttl", &c.lease_ttl),
        ("gateway.cluster.timeout", &c.timeout),
    ] {
        if let Some(d) = d {
            if d.get_ref().get().is_zero() {
                return Err(at(Some(d.span()), key, "must be longer than zero".into()));
            }
        }
    }
    Ok(())
}
