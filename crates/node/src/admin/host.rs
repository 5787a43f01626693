//! The admin API answers only for its own authority: a DNS-rebinding page (its name resolved to
//! 127.0.0.1 after the page loaded) reaches the TCP listener with its own name in `Host`, and is
//! refused before any handler runs.

use std::net::{IpAddr, SocketAddr};

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::metrics::Metrics;

// i[impl node.admin.host]
/// Whether `authority` (a `Host` header's value, or an absolute request target's authority)
/// names the TCP listener bound at `listener`: `localhost` with or without the listener's port,
/// or an IP literal with the listener's port whose address is a loopback one, the bound one, or
/// any when the listener is bound to the unspecified address. A name is never trusted: under DNS
/// rebinding any name can resolve here.
pub(super) fn allowed(authority: &str, listener: SocketAddr) -> bool {
    let Some((host, port)) = split(authority) else {
        return false;
    };
    // The port as the listener's own, digit for digit: no sign, no leading zero.
    let port_ok = |port: Option<&str>| port.is_some_and(|p| p == listener.port().to_string());
    match host {
        Host::Name(name) if name.eq_ignore_ascii_case("localhost") => {
            port.is_none() || port_ok(port)
        }
        Host::Name(_) => false,
        Host::Ip(ip) => {
            port_ok(port)
                && (ip.is_loopback() || ip == listener.ip() || listener.ip().is_unspecified())
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

// i[impl node.admin.host]
/// The TCP listener's middleware: a request for any other authority, or with none, is answered
/// 421 Misdirected Request and counted (`holdfast_admin_refused_total{reason="host"}`).
pub(super) async fn guard(
    listener: SocketAddr,
    metrics: Metrics,
    request: Request,
    next: Next,
) -> Response {
    if authority(&request).is_some_and(|a| allowed(a, listener)) {
        return next.run(request).await;
    }
    metrics.admin_refusal("host");
    (
        StatusCode::MISDIRECTED_REQUEST,
        format!(
            "this is the holdfast admin API at {listener}: address it as {listener} or \
             localhost:{}\n",
            listener.port()
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PORT: u16 = 7480;

    fn on_loopback() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], PORT))
    }

    // i[verify node.admin.host]
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

    proptest! {
        // i[verify node.admin.host]
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

        // i[verify node.admin.host]
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
