//! The file-descriptor limit: N clients in this process and up to N connections in each replica
//! (which inherit the limit) need far more than the usual soft limit of 1024.

use anyhow::Context as _;
use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The descriptors `clients` need: one socket each here, one each on the replica holding it,
/// plus room for everything else.
pub fn needed(clients: usize) -> u64 {
    (2 * clients as u64 + 1024).max(4096)
}

/// Raises the soft RLIMIT_NOFILE to `want` (and the hard one too when allowed, e.g. as root);
/// returns the soft limit in force afterwards.
// i[impl xtask.drain-demo.scale]
pub fn raise_nofile(want: u64) -> anyhow::Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("reading RLIMIT_NOFILE")?;
    let (first, fallback) = match attempts(soft, hard, want) {
        Attempts::Enough => return Ok(soft),
        Attempts::Raise { first, fallback } => (first, fallback),
    };
    if let Some((new_soft, new_hard)) = first
        && setrlimit(Resource::RLIMIT_NOFILE, new_soft, new_hard).is_ok()
    {
        return Ok(new_soft);
    }
    let (new_soft, new_hard) = fallback;
    setrlimit(Resource::RLIMIT_NOFILE, new_soft, new_hard).context("raising RLIMIT_NOFILE")?;
    Ok(new_soft)
}

/// The (soft, hard) limits to ask for, in order.
#[derive(Debug, PartialEq, Eq)]
enum Attempts {
    /// The soft limit already allows `want`: change nothing.
    Enough,
    /// Try `first` (raising the hard limit too, which only a privileged process may), else the
    /// `fallback` within the hard limit, which any process may.
    Raise {
        first: Option<(u64, u64)>,
        fallback: (u64, u64),
    },
}

// i[impl xtask.drain-demo.scale]
fn attempts(soft: u64, hard: u64, want: u64) -> Attempts {
    if soft >= want {
        return Attempts::Enough;
    }
    Attempts::Raise {
        first: (want > hard).then_some((want, want)),
        fallback: (want.min(hard), hard),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify xtask.drain-demo.scale]
    #[test]
    fn the_hard_limit_is_raised_only_when_the_want_is_past_it() {
        assert_eq!(attempts(4096, 8192, 4096), Attempts::Enough);
        assert_eq!(attempts(5000, 8192, 4096), Attempts::Enough);
        assert_eq!(
            attempts(1024, 8192, 4096),
            Attempts::Raise {
                first: None,
                fallback: (4096, 8192)
            }
        );
        assert_eq!(
            attempts(1024, 4096, 4096),
            Attempts::Raise {
                first: None,
                fallback: (4096, 4096)
            }
        );
        assert_eq!(
            attempts(1024, 4095, 4096),
            Attempts::Raise {
                first: Some((4096, 4096)),
                fallback: (4095, 4095)
            }
        );
    }

    // i[verify xtask.drain-demo.scale]
    #[test]
    fn the_soft_limit_is_raised_as_far_as_the_hard_limit_allows() {
        assert_eq!(needed(1000), 4096);
        assert_eq!(needed(10_000), 21_024);
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let want = needed(1000);
        let got = raise_nofile(want).unwrap();
        let (soft_now, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(got, soft_now);
        assert!(
            got >= want.min(hard),
            "soft {got}, wanted {want}, hard {hard}"
        );
    }
}
