//! What a hostname may be: a DNS name, listed once. The module refuses anything else at start, and
//! the node's config check asks the same question here, so a config the node accepts is one the
//! module starts with.

/// Why a list of hostnames is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostnameError {
    /// The name is not a DNS name (see [`is_dns_name`]).
    #[error(
        "{0:?} is not a DNS name (letters, digits, '-' and '_' in dot-separated labels of 1 to 63 \
         characters, at most 253 in all, optionally after `*.`)"
    )]
    NotDnsName(String),
    /// The name (compared case-insensitively) is listed at an earlier index too.
    #[error("{name:?} is listed more than once (also entry {first})")]
    Duplicate {
        /// The name as written here.
        name: String,
        /// The index of its first listing.
        first: usize,
    },
}

/// Whether `name` is a DNS name as a hostname must be: dot-separated labels of 1 to 63 letters,
/// digits, `-` and `_` (no label starts or ends with `-`), at most 253 characters in all, with one
/// optional leading `*.` (a local provider may hand out a wildcard). Nothing is trimmed: a hostname
/// names a file under the data directory and a path on the local provider, so `/`, `..` and
/// whitespace must never reach either.
// r[impl issue.hostnames]
pub fn is_dns_name(name: &str) -> bool {
    let name = name.strip_prefix("*.").unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The first refused hostname of `names`, with its index: one that is not a DNS name, or one
/// listed before (case-insensitively: two entries for one name would be two attempts at once).
// r[impl issue.hostnames]
pub fn check<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<(), (usize, HostnameError)> {
    let mut seen = std::collections::HashMap::new();
    for (i, name) in names.into_iter().enumerate() {
        if !is_dns_name(name) {
            return Err((i, HostnameError::NotDnsName(name.to_owned())));
        }
        if let Some(first) = seen.insert(name.to_ascii_lowercase(), i) {
            return Err((
                i,
                HostnameError::Duplicate {
                    name: name.to_owned(),
                    first,
                },
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify issue.hostnames]
    #[test]
    fn a_dns_name_is_dot_separated_labels_within_their_lengths() {
        let long_label = "a".repeat(63);
        let fits = format!("{long_label}.{long_label}.{long_label}.{}", "b".repeat(61));
        assert_eq!(fits.len(), 253);
        for ok in [
            "a.example",
            "*.a.example",
            "x",
            "a-b_c.example",
            "A9.EXAMPLE",
            long_label.as_str(),
            fits.as_str(),
        ] {
            assert!(is_dns_name(ok), "{ok:?}");
        }
        let too_long_label = "a".repeat(64);
        let too_long = format!("{fits}a");
        for bad in [
            "",
            "*.",
            "a/b.example",
            "..",
            "a..example",
            ".a.example",
            "a.example.",
            " a.example",
            "a .example",
            "-a.example",
            "a-.example",
            "a.*.example",
            "a%2f.example",
            too_long_label.as_str(),
            too_long.as_str(),
        ] {
            assert!(!is_dns_name(bad), "{bad:?}");
        }
    }

    // r[verify issue.hostnames]
    #[test]
    fn the_first_refused_hostname_is_named_by_its_index() {
        assert_eq!(check(["a.example", "b.example"]), Ok(()));
        assert_eq!(
            check(["a.example", "a/b.example"]),
            Err((1, HostnameError::NotDnsName("a/b.example".into())))
        );
        assert_eq!(
            check(["a.example", "b.example", "B.Example"]),
            Err((
                2,
                HostnameError::Duplicate {
                    name: "B.Example".into(),
                    first: 1
                }
            ))
        );
        assert_eq!(
            HostnameError::Duplicate {
                name: "B.Example".into(),
                first: 1
            }
            .to_string(),
            "\"B.Example\" is listed more than once (also entry 1)"
        );
    }
}
