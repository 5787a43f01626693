//! The admin API answers only for its own authority: a DNS-rebinding page (its name resolved to
//! 127.0.0.1 after the page loaded) reaches the TCP listener with its own name in `Host`, and is
//! refused before any handler runs. Names the operator lists in `admin.allowed_hosts` (a
//! scraper's, a health probe's) are answered too.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use crate::config::AllowedHost;
use crate::metrics::Metrics;

/// The port a client leaves out of `Host` (RFC 9110 §4.2.1: `http`'s default).
const DEFAULT_HTTP_PORT: u16 = 80;

/// What the TCP listener answers for: its own address and `localhost`, and the operator's
/// `admin.allowed_hosts`.
#[derive(Debug, Clone)]
pub(super) struct HostCheck {
    listener: SocketAddr,
    allowed: Vec<AllowedHost>,
}

impl HostCheck {
    pub(super) fn new(listener: SocketAddr, allowed: Vec<AllowedHost>) -> Self {
        Self { listener, allowed }
    }

    // i[impl node.admin.host+2]
    /// Whether `authority` (a `Host` header's value, or an absolute request target's authority)
    /// names the TCP listener: `localhost` or a listed entry, with the listener's port or none,
    /// or an IP literal with the listener's port (none on port 80) whose address is a loopback
    /// one, the bound one, or any when the listener is bound to the unspecified address. A name
    /// is trusted only when the operator listed it: under DNS rebinding any name can resolve
    /// here.
    pub(super) fn allows(&self, authority: &str) -> bool {
        let Some((host, port)) = split(authority) else {
            return false;
        };
        let listener = self.listener;
        // The port as the listener's own, digit for digit: no sign, no leading zero.
        let same_port = port.is_some_and(|p| p == listener.port().to_string());
        let own_or_none = same_port || port.is_none();
        match host {
            Host::Name(name) => {
                own_or_none
                    && (name.eq_ignore_ascii_case("localhost")
                        || self.allowed.iter().any(|a| match a {
                            AllowedHost::Name(listed) => name.eq_ignore_ascii_case(listed),
                            AllowedHost::Ip(_) => false,
                        }))
            }
            Host::Ip(ip) if self.allowed.contains(&AllowedHost::Ip(ip)) => own_or_none,
            Host::Ip(ip) => {
                (same_port || (port.is_none() && listener.port() == DEFAULT_HTTP_PORT))
                    && (ip.is_loopback() || ip == listener.ip() || listener.ip().is_unspecified())
            }
        }
    }
}

enum Host<'a> {
    Name(&'a str),
    Ip(IpAddr),
}

/// Splits `[v6]:port`, `v4:port`, `name:port` or a bare host; `None` for anything malformed
/// (a bare IPv6 address without brackets included: its colons are ambiguous).
fn split(authority: &str) -> Option<(Host<'_>, Option<&str>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let ip: std::net::Ipv6Addr = inside.parse().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        return Some((Host::Ip(IpAddr::V6(ip)), port));
    }
    let (host, port) = match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    if host.is_empty() || port.is_some_and(|p| p.contains(':')) {
        return None;
    }
    match host.parse::<std::net::Ipv4Addr>() {
        Ok(ip) => Some((Host::Ip(IpAddr::V4(ip)), port)),
        Err(_) => Some((Host::Name(host), port)),
    }
}

/// The authority a request is for: an absolute-form target's (which overrides `Host`, RFC 9112
/// §3.2.2), else the `Host` header's; `None` when it has neither (or a `Host` that is not text).
fn authority(request: &Request) -> Option<&str> {
    if let Some(authority) = request.uri().authority() {
        return Some(authority.as_str());
    }
    request.headers().get(header::HOST)?.to_str().ok()
}

// i[impl node.admin.host+2]
/// The TCP listener's middleware: a request for any other authority, or with none, is answered
/// 421 Misdirected Request and counted (`holdfast_admin_refused_total{reason="host"}`).
pub(super) async fn guard(
    check: Arc<HostCheck>,
    metrics: Metrics,
    request: Request,
    next: Next,
) -> Response {
    if authority(&request).is_some_and(|a| check.allows(a)) {
        return next.run(request).await;
    }
    metrics.admin_refusal("host");
    // The listed names are not echoed: a rebinding page reads this answer.
    let listener = check.listener;
    (
        StatusCode::MISDIRECTED_REQUEST,
        format!(
            "this is the holdfast admin API at {listener}: address it as {listener} or \
             localhost:{} (or a name in admin.allowed_hosts)\n",
            listener.port()
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MAX_NAME_LEN;
    use proptest::prelude::*;

    const PORT: u16 = 7480;

    fn on_loopback() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], PORT))
    }

    /// The check with no `admin.allowed_hosts`.
    fn allowed(authority: &str, listener: SocketAddr) -> bool {
        HostCheck::new(listener, Vec::new()).allows(authority)
    }

    fn listing(entries: &[&str]) -> HostCheck {
        let allowed = entries
            .iter()
            .map(|e| AllowedHost::parse(e).unwrap())
            .collect();
        HostCheck::new(on_loopback(), allowed)
    }

    // i[verify node.admin.host+2]
    #[test]
    fn a_listed_name_is_allowed_in_any_case_with_the_listeners_port_or_none() {
        let check = listing(&["Metrics.Internal", "203.0.113.5", "[2001:db8::1]"]);
        for good in [
            "metrics.internal",
            "metrics.internal:7480",
            "METRICS.INTERNAL:7480",
            "203.0.113.5",
            "203.0.113.5:7480",
            "[2001:db8::1]",
            "[2001:db8::1]:7480",
            "localhost:7480",
            "127.0.0.1:7480",
        ] {
            assert!(check.allows(good), "{good} refused");
        }
        for bad in [
            "metrics.internal:80",
            "metrics.internal:",
            "metrics.internal:07480",
            "metrics.internal.",
            "metrics.internal.evil.example",
            "evil.metrics.internal",
            "other.internal:7480",
            "evil.example",
            "203.0.113.6:7480",
            "203.0.113.5:80",
            "[2001:db8::2]:7480",
            "127.0.0.1",
        ] {
            assert!(!check.allows(bad), "{bad} allowed");
        }
    }

    // i[verify node.admin.host+2]
    #[test]
    fn an_allowed_hosts_entry_is_a_dns_name_or_an_address_without_a_port() {
        assert_eq!(
            AllowedHost::parse("Probe-1.Example.ORG"),
            Ok(AllowedHost::Name("probe-1.example.org".into()))
        );
        assert_eq!(
            AllowedHost::parse("metrics"),
            Ok(AllowedHost::Name("metrics".into()))
        );
        for (entry, ip) in [
            ("10.0.0.5", "10.0.0.5"),
            ("::1", "::1"),
            ("[2001:db8::1]", "2001:db8::1"),
        ] {
            assert_eq!(
                AllowedHost::parse(entry),
                Ok(AllowedHost::Ip(ip.parse().unwrap()))
            );
        }
        for port in ["metrics.internal:9090", "10.0.0.5:80", "[::1]:7480"] {
            let err = AllowedHost::parse(port).unwrap_err();
            assert!(err.contains("must not carry a port"), "{port}: {err}");
        }
        let long_label = format!("{}.example", "a".repeat(64));
        let long_name = format!("{}example", "abcdefgh.".repeat(28));
        for bad in [
            "",
            "*",
            "*.internal",
            "evil example",
            "-bad.example",
            "bad-.example",
            "a..b",
            ".example",
            "example.",
            "under_score.example",
            "256.1.1.1",
            "10.0.0",
            "http://metrics.internal",
            "metrics.internal/",
            "[::1",
            "[metrics.internal]",
            "fe80::1%eth0",
            "m\u{e9}trics.internal",
            &long_label,
            &long_name,
        ] {
            assert!(AllowedHost::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    // i[verify node.admin.host+2]
    #[test]
    fn only_the_listeners_own_authority_is_allowed() {
        let l = on_loopback();
        for good in [
            "127.0.0.1:7480",
            "[::1]:7480",
            "localhost",
            "localhost:7480",
            "LocalHost:7480",
            "127.0.0.2:7480",
        ] {
            assert!(allowed(good, l), "{good} refused");
        }
        for bad in [
            "evil.example",
            "evil.example:7480",
            "127.0.0.1.evil.example",
            "127.0.0.1.evil.example:7480",
            "localhost.evil.example:7480",
            "127.0.0.1",
            "127.0.0.1:80",
            "127.0.0.1:",
            "127.0.0.1:+7480",
            "127.0.0.1:07480",
            "localhost:80",
            "localhost:",
            "[::1]",
            "::1:7480",
            "[::1]x:7480",
            "10.0.0.5:7480",
            "",
            ":7480",
        ] {
            assert!(!allowed(bad, l), "{bad} allowed");
        }
        // Bound to one address: that address too; bound to every address: any IP literal.
        let bound = SocketAddr::from(([10, 0, 0, 5], PORT));
        assert!(allowed("10.0.0.5:7480", bound));
        assert!(!allowed("10.0.0.6:7480", bound));
        let any = SocketAddr::from(([0, 0, 0, 0], PORT));
        assert!(allowed("10.0.0.6:7480", any));
        assert!(!allowed("evil.example:7480", any));
    }

    // i[verify node.admin.host+2]
    #[test]
    fn on_port_80_an_address_without_a_port_is_the_listeners_own() {
        // What curl sends for http://127.0.0.1/: the default port is left out.
        let l = SocketAddr::from(([127, 0, 0, 1], 80));
        for good in [
            "127.0.0.1",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:80",
            "localhost",
        ] {
            assert!(allowed(good, l), "{good} refused");
        }
        for bad in ["127.0.0.1:", "127.0.0.1:7480", "evil.example", "10.0.0.5"] {
            assert!(!allowed(bad, l), "{bad} allowed");
        }
        // On any other port the port stays required.
        assert!(!allowed("127.0.0.1", on_loopback()));
    }

    proptest! {
        // i[verify node.admin.host+2]
        #[test]
        fn no_name_but_localhost_is_ever_allowed(
            host in prop_oneof!["[ -~]{0,40}", "(localhost|127\\.0\\.0\\.1|\\[::1\\])[.:a-z0-9]{0,12}"]
        ) {
            let lower = host.to_ascii_lowercase();
            let is_localhost = lower == "localhost" || lower == format!("localhost:{PORT}");
            let is_loopback_literal = host
                .parse::<SocketAddr>()
                .is_ok_and(|a| a.ip().is_loopback() && a.port() == PORT);
            if allowed(&host, on_loopback()) {
                prop_assert!(is_localhost || is_loopback_literal, "{host:?} allowed");
            }
        }

        // i[verify node.admin.host+2]
        #[test]
        fn a_listed_name_allows_itself_and_nothing_else(host in prop_oneof![
            "[ -~]{0,40}",
            "(?i:metrics\\.internal)[.:a-z0-9]{0,8}",
        ]) {
            let lower = host.to_ascii_lowercase();
            let listed = lower == "metrics.internal" || lower == format!("metrics.internal:{PORT}");
            let own = allowed(&host, on_loopback());
            prop_assert_eq!(listing(&["metrics.internal"]).allows(&host), listed || own, "{:?}", host);
        }

        // i[verify node.admin.host+2]
        #[test]
        fn an_accepted_entry_is_an_address_or_a_lowercase_dns_name(entry in "[ -~]{0,70}") {
            match AllowedHost::parse(&entry) {
                Ok(AllowedHost::Name(name)) => {
                    prop_assert!(name.len() <= MAX_NAME_LEN);
                    prop_assert!(name.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.')), "{:?}", name);
                    prop_assert_eq!(name, entry.to_ascii_lowercase());
                }
                Ok(AllowedHost::Ip(_)) | Err(_) => {}
            }
        }

        // i[verify node.admin.host+2]
        #[test]
        fn any_loopback_literal_with_the_port_is_allowed(a in 0u8.., b in 0u8.., c in 0u8.., v6 in any::<bool>()) {
            let addr = if v6 {
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, PORT))
            } else {
                SocketAddr::from(([127, a, b, c], PORT))
            };
            prop_assert!(allowed(&addr.to_string(), on_loopback()));
        }
    }
}
