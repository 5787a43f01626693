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
    if soft >= want {
        return Ok(soft);
    }
    if want > hard && setrlimit(Resource::RLIMIT_NOFILE, want, want).is_ok() {
        return Ok(want);
    }
    let soft = want.min(hard);
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).context("raising RLIMIT_NOFILE")?;
    Ok(soft)
}

#[cfg(test)]
mod tests {
    use super::*;

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
