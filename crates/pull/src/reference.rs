//! Image references, read by the distribution reference grammar Docker uses (oci-spec's
//! `Reference`, a port of distribution's `reference` package), never split by hand.
//!
//! What this module adds to the crate's parse: a repository with an uppercase letter is refused
//! (the crate's port predates Docker's rule that reads such a first component as a registry
//! host, so accepting it would send the pull's credentials to the wrong registry), and the name
//! is kept as it was written (`busybox`, not `docker.io/library/busybox`), so the daemon stores
//! and lists the image under the name the operator wrote. The crate's grammar has no bracketed
//! IPv6 host (youki-dev/oci-spec-rs#329), so a leading `[ADDRESS]` or `[ADDRESS]:PORT` host is
//! split off here and the rest handed to it.

use std::borrow::Cow;
use std::fmt;
use std::net::Ipv6Addr;

use oci_spec::distribution::{ParseError, Reference};

/// The registry an image reference without a registry host is pulled from.
pub const DOCKER_HUB: &str = "docker.io";

/// Why a text is not an image reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not an image reference ({reason})")]
pub struct ReferenceError {
    /// The text as given.
    pub text: String,
    /// What the grammar found wrong with it.
    pub reason: String,
}

/// An image reference: the name as written, the registry it names and its tag or digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageReference {
    /// The name as written, without its tag and digest.
    name: String,
    /// The registry host, Docker Hub's other names read as [`DOCKER_HUB`].
    registry: String,
    /// The tag, `latest` when neither a tag nor a digest was written.
    tag: Option<String>,
    digest: Option<String>,
}

// r[impl actuate.image.reference]
/// Reads `text` as Docker reads an image reference (`[HOST[:PORT]/]PATH[:TAG][@DIGEST]`).
pub fn parse(text: &str) -> Result<ImageReference, ReferenceError> {
    let refuse = |reason: String| ReferenceError {
        text: text.to_owned(),
        reason,
    };
    let lowercase = || refuse("repository name must be lowercase".to_owned());
    // As distribution's `ParseNormalizedNamed`: 64 hexadecimal digits alone are an image ID's
    // form, never a repository the registry would serve.
    if text.len() == 64 && text.bytes().all(is_lower_hex) {
        return Err(refuse(
            "a repository name cannot be 64 hexadecimal digits".to_owned(),
        ));
    }
    let (ipv6_host, readable) = match split_ipv6_host(text) {
        Ok(Some((host, rest))) => (Some(host), Cow::Owned(rest)),
        Ok(None) => (None, Cow::Borrowed(text)),
        Err(reason) => return Err(refuse(reason)),
    };
    let parsed = match Reference::try_from(readable.as_ref()) {
        Ok(parsed) => parsed,
        // As distribution's `Parse` says: a text that does not match the grammar but would in
        // lowercase has an uppercase name. Only then: another error (an unsupported digest
        // algorithm such as `SHA256`) is reported as itself.
        Err(ParseError::ReferenceInvalidFormat)
            if Reference::try_from(readable.to_ascii_lowercase().as_str()).is_ok() =>
        {
            return Err(lowercase());
        }
        Err(e) => return Err(refuse(e.to_string())),
    };
    if parsed.repository().chars().any(|c| c.is_ascii_uppercase()) {
        return Err(lowercase());
    }
    // The crate's grammar takes any hexadecimal digit; go-digest, which the daemon checks a
    // digest with, only lowercase ones.
    let encoded = parsed
        .digest()
        .and_then(|d| d.split_once(':'))
        .map(|(_, e)| e);
    if encoded.is_some_and(|e| !e.bytes().all(is_lower_hex)) {
        return Err(refuse(ParseError::DigestInvalidFormat.to_string()));
    }
    let digest = parsed.digest().map(str::to_owned);
    // The crate fills in `latest` when neither was written (never beside a digest, so a tag
    // beside one was written); the written name is the text less what was written after it.
    let written_tag = match (parsed.tag(), &digest) {
        (Some(tag), None) if text.ends_with(&format!(":{tag}")) => Some(tag),
        (Some(tag), Some(_)) => Some(tag),
        _ => None,
    };
    let suffix =
        written_tag.map_or(0, |t| t.len() + 1) + digest.as_ref().map_or(0, |d| d.len() + 1);
    let name = text[..text.len() - suffix].to_owned();
    let registry = ipv6_host
        .unwrap_or_else(|| hub_alias(parsed.registry()))
        .to_owned();
    Ok(ImageReference {
        name,
        registry,
        tag: parsed.tag().map(str::to_owned),
        digest,
    })
}

fn is_lower_hex(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'a'..=b'f')
}

/// Stands in for a bracketed IPv6 host while oci-spec reads the rest of a reference: a host its
/// grammar reads as a registry, and one no real registry has (`.invalid` is reserved, RFC 6761).
const IPV6_STAND_IN: &str = "ipv6.invalid";

/// A leading `[ADDRESS]` or `[ADDRESS]:PORT` registry host, as distribution's grammar writes an
/// IPv6 one (hexadecimal digits and colons, no zone): the host as written and the reference with
/// [`IPV6_STAND_IN`] in its place; `None` for a text that does not start with `[`.
fn split_ipv6_host(text: &str) -> Result<Option<(&str, String)>, String> {
    let Some(after_bracket) = text.strip_prefix('[') else {
        return Ok(None);
    };
    let form = "an IPv6 registry host is written [ADDRESS]/ or [ADDRESS]:PORT/";
    let Some((address, after_address)) = after_bracket.split_once(']') else {
        return Err(form.to_owned());
    };
    let in_grammar = address.chars().all(|c| c.is_ascii_hexdigit() || c == ':');
    if !in_grammar || address.parse::<Ipv6Addr>().is_err() {
        return Err(format!("{address:?} is not an IPv6 address"));
    }
    let Some((port, path)) = after_address.split_once('/') else {
        return Err(form.to_owned());
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()));
    if !port_ok {
        return Err(form.to_owned());
    }
    let host = &text[..1 + address.len() + 1 + port.len()];
    Ok(Some((host, format!("{IPV6_STAND_IN}{port}/{path}"))))
}

/// Docker Hub's other names are Docker Hub.
pub(crate) fn hub_alias(host: &str) -> &str {
    match host {
        "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB,
        host => host,
    }
}

impl ImageReference {
    /// The registry host the image is pulled from (Docker Hub as [`DOCKER_HUB`]).
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The name as written, without tag or digest.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Pinned by a digest: its content can never change under it.
    pub fn is_pinned(&self) -> bool {
        self.digest.is_some()
    }

    /// The Engine API's `fromImage` and `tag` for a pull, as `docker pull` sends them: a
    /// reference with a digest goes whole in `fromImage` with no tag, any other with its tag
    /// (`latest` when none was written).
    pub fn pull_parameters(&self) -> (String, String) {
        match &self.digest {
            Some(_) => (self.to_string(), String::new()),
            None => (
                self.name.clone(),
                self.tag.clone().unwrap_or_else(|| "latest".to_owned()),
            ),
        }
    }
}

impl fmt::Display for ImageReference {
    /// The reference with its implied tag, as the daemon's store names it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    // r[verify actuate.image.reference]
    #[test]
    fn a_reference_is_read_as_docker_reads_it_and_keeps_its_written_name() {
        for (text, registry, pull, stored) in [
            (
                "busybox",
                "docker.io",
                ("busybox", "latest"),
                "busybox:latest",
            ),
            (
                "busybox:1.36",
                "docker.io",
                ("busybox", "1.36"),
                "busybox:1.36",
            ),
            (
                "org/app",
                "docker.io",
                ("org/app", "latest"),
                "org/app:latest",
            ),
            (
                "index.docker.io/org/app:1",
                "docker.io",
                ("index.docker.io/org/app", "1"),
                "index.docker.io/org/app:1",
            ),
            (
                "registry-1.docker.io/org/app",
                "docker.io",
                ("registry-1.docker.io/org/app", "latest"),
                "registry-1.docker.io/org/app:latest",
            ),
            (
                "127.0.0.1:5000/holdfast/busybox",
                "127.0.0.1:5000",
                ("127.0.0.1:5000/holdfast/busybox", "latest"),
                "127.0.0.1:5000/holdfast/busybox:latest",
            ),
            (
                "localhost/app:v2",
                "localhost",
                ("localhost/app", "v2"),
                "localhost/app:v2",
            ),
            (
                "ghcr.io/o/a:latest",
                "ghcr.io",
                ("ghcr.io/o/a", "latest"),
                "ghcr.io/o/a:latest",
            ),
        ] {
            let parsed = parse(text).unwrap();
            assert_eq!(parsed.registry(), registry, "{text}");
            assert_eq!(
                parsed.pull_parameters(),
                (pull.0.to_owned(), pull.1.to_owned()),
                "{text}"
            );
            assert_eq!(parsed.to_string(), stored, "{text}");
            assert!(!parsed.is_pinned(), "{text}");
        }
        let pinned = parse(&format!("localhost:5000/app@{DIGEST}")).unwrap();
        assert!(pinned.is_pinned());
        assert_eq!(pinned.registry(), "localhost:5000");
        assert_eq!(
            pinned.pull_parameters(),
            (format!("localhost:5000/app@{DIGEST}"), String::new())
        );
        for (text, registry, pull) in [
            ("[::1]:5000/app", "[::1]:5000", ("[::1]:5000/app", "latest")),
            ("[fe80::1]/app:tag", "[fe80::1]", ("[fe80::1]/app", "tag")),
            (
                "[2001:DB8::5]:443/example.com/app:1",
                "[2001:DB8::5]:443",
                ("[2001:DB8::5]:443/example.com/app", "1"),
            ),
        ] {
            let parsed = parse(text).unwrap();
            assert_eq!(parsed.registry(), registry, "{text}");
            assert_eq!(
                parsed.pull_parameters(),
                (pull.0.to_owned(), pull.1.to_owned()),
                "{text}"
            );
        }
        let pinned_v6 = parse(&format!("[::1]:5000/app@{DIGEST}")).unwrap();
        assert_eq!(pinned_v6.registry(), "[::1]:5000");
        assert_eq!(
            pinned_v6.pull_parameters(),
            (format!("[::1]:5000/app@{DIGEST}"), String::new())
        );
        let both = parse(&format!("app:1@{DIGEST}")).unwrap();
        assert!(both.is_pinned());
        assert_eq!(both.name(), "app");
        assert_eq!(both.to_string(), format!("app:1@{DIGEST}"));
    }

    // r[verify actuate.image.reference]
    #[test]
    fn what_the_grammar_refuses_is_not_a_reference_and_says_why() {
        for text in [
            "",
            "busy box",
            "http://registry.example/app",
            "Nginx",
            "Registry/app",
            "org/App:1",
            "app:",
            "app:-bad",
            "app@sha256:abc",
            "app@md5:0123456789abcdef0123456789abcdef",
            "a//b",
            "/app",
            "[::1/app",
            "[::1]",
            "[::1]:5000",
            "[::1]x/app",
            "[::1]:/app",
            "[::1]:50a/app",
            "[]/app",
            "[zz::1]/app",
            "[::ffff:1.2.3.4]/app",
            "[fe80::1%eth0]/app",
            "[::1]/",
            "[::1]/App",
            // go-digest's hexadecimal digits are lowercase.
            "app@sha256:0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF",
            // An image ID's form, not a repository.
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            let err = parse(text).unwrap_err();
            assert_eq!(err.text, text);
            assert!(
                err.to_string().contains("is not an image reference ("),
                "{err}"
            );
        }
        assert!(
            parse("Nginx")
                .unwrap_err()
                .to_string()
                .contains("must be lowercase")
        );
        // Only a text the grammar would take in lowercase has an uppercase name.
        for text in ["busy box", "a//b", "app:"] {
            assert_eq!(
                parse(text).unwrap_err().reason,
                "invalid reference format",
                "{text}"
            );
        }
        let algorithm = DIGEST.replace("sha256:", "app@SHA256:");
        assert_eq!(
            parse(&algorithm).unwrap_err().reason,
            "unsupported digest algorithm"
        );
        assert_eq!(
            parse("app@sha256:0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF")
                .unwrap_err()
                .reason,
            "invalid checksum digest format"
        );
        // Only the name alone: as a tag or a path component, 64 hexadecimal digits are fine.
        let hex = "0123456789abcdef".repeat(4);
        assert!(parse(&format!("{hex}:1")).is_ok());
        assert!(parse(&format!("org/{hex}")).is_ok());
        assert!(parse(&format!("app:{hex}")).is_ok());
    }

    proptest::proptest! {
        // r[verify actuate.image.reference]
        #[test]
        fn a_parsed_reference_prints_back_with_its_implied_tag_and_parses_to_itself(
            host in proptest::option::of(
                "([a-z0-9]{1,8}\\.){1,3}[a-z]{2,5}(:[0-9]{1,5})?|localhost(:[0-9]{1,5})?"
            ),
            path in "[a-z0-9]{1,8}(/[a-z0-9]{1,8}){0,3}",
            tag in proptest::option::of("[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}"),
            digest in proptest::option::of("[0-9a-f]{64}"),
        ) {
            let name = match &host {
                Some(host) => format!("{host}/{path}"),
                None => path.clone(),
            };
            let mut text = name.clone();
            if let Some(tag) = &tag {
                text = format!("{text}:{tag}");
            }
            if let Some(digest) = &digest {
                text = format!("{text}@sha256:{digest}");
            }
            let parsed = parse(&text).unwrap();
            proptest::prop_assert_eq!(parsed.name(), name.as_str());
            let expected = match host.as_deref() {
                None => DOCKER_HUB.to_owned(),
                Some("index.docker.io" | "registry-1.docker.io") => DOCKER_HUB.to_owned(),
                Some(h) => h.to_owned(),
            };
            proptest::prop_assert_eq!(parsed.registry(), expected.as_str());
            proptest::prop_assert_eq!(parsed.is_pinned(), digest.is_some());
            let again = parse(&parsed.to_string()).unwrap();
            proptest::prop_assert_eq!(&again, &parsed);
        }

        // r[verify actuate.image.reference]
        #[test]
        fn a_bracketed_ipv6_host_is_the_registry(
            segments in proptest::prelude::any::<[u16; 8]>(),
            port in proptest::option::of(0u16..),
            path in "[a-z0-9]{1,8}(\\.[a-z0-9]{1,8})?(/[a-z0-9]{1,8}){0,3}",
            tag in proptest::option::of("[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}"),
        ) {
            // The compressed form where std writes one, else all eight groups (std would write
            // an IPv4-mapped address with dots, which distribution's grammar has not).
            let address = Ipv6Addr::from(segments).to_string();
            let address = if address.contains('.') {
                segments.map(|s| format!("{s:x}")).join(":")
            } else {
                address
            };
            let host = match port {
                Some(port) => format!("[{address}]:{port}"),
                None => format!("[{address}]"),
            };
            let name = format!("{host}/{path}");
            let text = match &tag {
                Some(tag) => format!("{name}:{tag}"),
                None => name.clone(),
            };
            let parsed = parse(&text).unwrap();
            proptest::prop_assert_eq!(parsed.registry(), host.as_str());
            proptest::prop_assert_eq!(parsed.name(), name.as_str());
            let again = parse(&parsed.to_string()).unwrap();
            proptest::prop_assert_eq!(&again, &parsed);
        }
    }
}
