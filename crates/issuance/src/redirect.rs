//! What the HTTP-01 responder answers outside its challenges: 404 (the default), or — with
//! `http01_other = "redirect"` — a 308 to `https://HOST/PATH?QUERY`, but only for a `Host` that is
//! one of the node's configured names, so no peer can point a browser at a host of its choosing.

use std::collections::HashSet;
use std::sync::Arc;

/// `[issuance.acme] http01_other`: what the responder answers to a request that is not a
/// challenge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Http01Other {
    /// 404 (the default).
    #[default]
    NotFound,
    /// 308 to the same path and query over https, for a configured name.
    Redirect,
}

/// The names a redirect may go to: each configured name (compared case-insensitively), and one
/// label under each wildcard name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedirectNames {
    exact: HashSet<String>,
    /// The part after `*.` of each wildcard name.
    wildcard: HashSet<String>,
}

impl RedirectNames {
    /// The names of every configured certificate.
    pub fn new<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Self {
        let mut out = Self::default();
        for name in names {
            let name = name.as_ref().to_ascii_lowercase();
            match name.strip_prefix("*.") {
                Some(parent) => out.wildcard.insert(parent.to_owned()),
                None => out.exact.insert(name),
            };
        }
        out
    }

    /// Whether `host` (lowercase) is a configured name or one label under a wildcard one.
    pub fn contains(&self, host: &str) -> bool {
        self.exact.contains(host)
            || host
                .split_once('.')
                .is_some_and(|(_, parent)| self.wildcard.contains(parent))
    }
}

/// What the responder does with a request that is not a challenge.
#[derive(Debug, Clone, Default)]
pub enum OtherRequests {
    /// 404.
    #[default]
    NotFound,
    /// 308 to https for these names; 404 for other well-formed hosts, 400 for malformed ones.
    Redirect(Arc<RedirectNames>),
}

impl OtherRequests {
    /// From the config's setting and every configured name.
    pub fn new<S: AsRef<str>>(other: Http01Other, names: impl IntoIterator<Item = S>) -> Self {
        match other {
            Http01Other::NotFound => OtherRequests::NotFound,
            Http01Other::Redirect => OtherRequests::Redirect(Arc::new(RedirectNames::new(names))),
        }
    }
}

/// The answer to a request that is not a challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OtherAnswer {
    /// 404 Not Found.
    NotFound,
    /// 400 Bad Request: the `Host` is missing or malformed.
    BadRequest,
    /// 308 Permanent Redirect to this `Location`.
    Redirect(String),
}

/// The host of a `Host` header: a DNS name (not a wildcard), lowercased, with an optional numeric
/// port dropped. `None`: malformed.
// r[impl issue.responder.redirect]
pub fn parse_host(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?;
    let host = match text.rsplit_once(':') {
        Some((host, port)) => {
            let ok = !port.is_empty()
                && port.len() <= 5
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u16>().is_ok();
            if !ok {
                return None;
            }
            host
        }
        None => text,
    };
    if host.starts_with("*.") || !crate::hostname::is_dns_name(host) {
        return None;
    }
    Some(host.to_ascii_lowercase())
}

/// The answer to a request for `uri` with `host` (its `Host` header) that is not a challenge.
// r[impl issue.responder.redirect]
pub fn answer(other: &OtherRequests, host: Option<&[u8]>, uri: &hyper::Uri) -> OtherAnswer {
    let OtherRequests::Redirect(names) = other else {
        return OtherAnswer::NotFound;
    };
    let Some(host) = host.and_then(parse_host) else {
        return OtherAnswer::BadRequest;
    };
    // An absolute request target names its own host: it must be the same one.
    if let Some(authority) = uri.authority()
        && !authority.host().eq_ignore_ascii_case(&host)
    {
        return OtherAnswer::BadRequest;
    }
    if !names.contains(&host) {
        return OtherAnswer::NotFound;
    }
    let path = uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .filter(|pq| pq.starts_with('/'))
        .unwrap_or("/");
    OtherAnswer::Redirect(format!("https://{host}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn redirect(names: &[&str]) -> OtherRequests {
        OtherRequests::new(Http01Other::Redirect, names.iter().copied())
    }

    // r[verify issue.responder.redirect]
    #[test]
    fn only_a_configured_well_formed_host_is_redirected() {
        let other = redirect(&["a.example", "www.a.example", "*.apps.example"]);
        let uri = |u: &str| u.parse::<hyper::Uri>().unwrap();
        for (host, target, want) in [
            (
                "a.example",
                "/x/y?q=1&r",
                OtherAnswer::Redirect("https://a.example/x/y?q=1&r".into()),
            ),
            (
                "WWW.A.example:80",
                "/",
                OtherAnswer::Redirect("https://www.a.example/".into()),
            ),
            (
                "one.apps.example",
                "/p",
                OtherAnswer::Redirect("https://one.apps.example/p".into()),
            ),
            ("two.one.apps.example", "/p", OtherAnswer::NotFound),
            ("apps.example", "/p", OtherAnswer::NotFound),
            ("evil.example", "/", OtherAnswer::NotFound),
            ("a.example.evil.example", "/", OtherAnswer::NotFound),
            ("a.example:", "/", OtherAnswer::BadRequest),
            ("a.example:99999", "/", OtherAnswer::BadRequest),
            ("a.example:8x", "/", OtherAnswer::BadRequest),
            ("a.example/evil.example", "/", OtherAnswer::BadRequest),
            ("a.example@evil.example", "/", OtherAnswer::BadRequest),
            ("*.apps.example", "/", OtherAnswer::BadRequest),
            ("[::1]:80", "/", OtherAnswer::BadRequest),
            ("", "/", OtherAnswer::BadRequest),
            // An absolute target that names another host than Host.
            (
                "a.example",
                "http://evil.example/x",
                OtherAnswer::BadRequest,
            ),
            (
                "a.example",
                "http://a.example/x?y",
                OtherAnswer::Redirect("https://a.example/x?y".into()),
            ),
            // `OPTIONS *`: no path to keep.
            (
                "a.example",
                "*",
                OtherAnswer::Redirect("https://a.example/".into()),
            ),
        ] {
            assert_eq!(
                answer(&other, Some(host.as_bytes()), &uri(target)),
                want,
                "{host} {target}"
            );
        }
        assert_eq!(
            answer(&other, None, &uri("/")),
            OtherAnswer::BadRequest,
            "no Host"
        );
        assert_eq!(
            answer(&other, Some(b"a.ex\xffample"), &uri("/")),
            OtherAnswer::BadRequest
        );
        // The default never redirects.
        assert_eq!(
            answer(&OtherRequests::NotFound, Some(b"a.example"), &uri("/")),
            OtherAnswer::NotFound
        );
        let config: Http01Other = serde_json::from_value(serde_json::json!("redirect")).unwrap();
        assert_eq!(config, Http01Other::Redirect);
        assert_eq!(Http01Other::default(), Http01Other::NotFound);
        assert!(serde_json::from_value::<Http01Other>(serde_json::json!("301")).is_err());
    }

    proptest! {
        // r[verify issue.responder.redirect]
        #[test]
        fn no_host_header_redirects_anywhere_but_a_configured_name(
            host in proptest::collection::vec(any::<u8>(), 0..40),
            prefix in "[a-zA-Z0-9.:*@/\\[\\]-]{0,12}",
            path in "/[a-zA-Z0-9/?&=.%-]{0,20}",
        ) {
            let other = redirect(&["a.example", "*.apps.example"]);
            let uri: hyper::Uri = path.parse().unwrap();
            let mut with_prefix = prefix.into_bytes();
            with_prefix.extend_from_slice(b"a.example");
            for value in [host, with_prefix] {
                if let OtherAnswer::Redirect(location) = answer(&other, Some(&value), &uri) {
                    let rest = location.strip_prefix("https://").unwrap();
                    let (to, kept) = rest.split_at(rest.find('/').unwrap());
                    prop_assert!(
                        to == "a.example"
                            || to.strip_suffix(".apps.example").is_some_and(|l| !l.contains('.')),
                        "{location}"
                    );
                    prop_assert_eq!(kept, uri.path_and_query().unwrap().as_str());
                }
            }
        }
    }

    /// Sends `request` as raw bytes to `addr` and reads the whole answer.
    async fn raw(addr: std::net::SocketAddr, request: &str) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    // r[verify issue.responder.redirect]
    // r[verify issue.acme.http01]
    #[tokio::test]
    async fn the_responder_redirects_plain_requests_and_still_answers_challenges() {
        let r = crate::Http01Responder::bind_serving(
            "127.0.0.1:0".parse().unwrap(),
            crate::ResponderLimits::default(),
            redirect(&["a.example", "www.a.example"]),
        )
        .await
        .unwrap();
        r.challenges().insert("tok", "tok.thumb");
        let challenge = raw(
            r.addr(),
            "GET /.well-known/acme-challenge/tok HTTP/1.1\r\nHost: a.example\r\n\r\n",
        )
        .await;
        assert!(
            challenge.starts_with("HTTP/1.1 200") && challenge.ends_with("tok.thumb"),
            "{challenge}"
        );
        // An unknown token is a challenge request: 404, never a redirect.
        let unknown = raw(
            r.addr(),
            "GET /.well-known/acme-challenge/nope HTTP/1.1\r\nHost: a.example\r\n\r\n",
        )
        .await;
        assert!(unknown.starts_with("HTTP/1.1 404"), "{unknown}");
        let plain = raw(
            r.addr(),
            "GET /shop/cart?id=7&x=y HTTP/1.1\r\nHost: WWW.a.example:80\r\n\r\n",
        )
        .await;
        assert!(plain.starts_with("HTTP/1.1 308"), "{plain}");
        assert!(
            plain
                .to_ascii_lowercase()
                .contains("\r\nlocation: https://www.a.example/shop/cart?id=7&x=y\r\n"),
            "{plain}"
        );
        // Any method.
        let post = raw(
            r.addr(),
            "POST /form HTTP/1.1\r\nHost: a.example\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert!(post.starts_with("HTTP/1.1 308"), "{post}");
        // A host the node is not configured with: 404; a malformed one or none: 400.
        let foreign = raw(r.addr(), "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n").await;
        assert!(foreign.starts_with("HTTP/1.1 404"), "{foreign}");
        assert!(
            !foreign.to_ascii_lowercase().contains("location"),
            "{foreign}"
        );
        let malformed = raw(
            r.addr(),
            "GET / HTTP/1.1\r\nHost: a.example@evil.example\r\n\r\n",
        )
        .await;
        assert!(malformed.starts_with("HTTP/1.1 400"), "{malformed}");
        let absolute = raw(
            r.addr(),
            "GET http://evil.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
        )
        .await;
        assert!(absolute.starts_with("HTTP/1.1 400"), "{absolute}");
        let http10 = raw(r.addr(), "GET / HTTP/1.0\r\n\r\n").await;
        assert!(
            http10.starts_with("HTTP/1.0 400") || http10.starts_with("HTTP/1.1 400"),
            "{http10}"
        );
    }

    // r[verify issue.responder.redirect]
    #[tokio::test]
    async fn by_default_the_responder_answers_404_to_anything_but_a_challenge() {
        let r = crate::Http01Responder::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let plain = raw(r.addr(), "GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n").await;
        assert!(plain.starts_with("HTTP/1.1 404"), "{plain}");
    }
}
