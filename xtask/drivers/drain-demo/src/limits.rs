//! The file-descriptor limit: N clients in this process and up to N connections in each replica
//! (which inherit the limit) need far more than the usual soft limit of 1024. The raising itself
//! is the harness's (`holdfast_harness::limits`), shared with the gateway bench.

/// The descriptors `clients` need: one socket each here, one each on the replica holding it,
/// plus room for everything else.
pub fn needed(clients: usize) -> u64 {
    (2 * clients as u64 + 1024).max(4096)
}

/// The most clients a descriptor limit of `limit` allows (the inverse of [`needed`]).
fn largest(limit: u64) -> u64 {
    limit.saturating_sub(1024) / 2
}

/// Raises the soft RLIMIT_NOFILE to `want` (the hard one too when allowed, e.g. with
/// CAP_SYS_RESOURCE); returns the soft limit in force afterwards, or an error saying how many
/// clients the hard limit allows and how to raise it.
// i[impl xtask.drain-demo.scale+2]
pub fn raise_nofile(want: u64) -> anyhow::Result<u64> {
    Ok(holdfast_harness::limits::raise_nofile(
        want,
        "--clients",
        largest,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::resource::{Resource, getrlimit};

    // i[verify xtask.drain-demo.scale+2]
    #[test]
    fn the_soft_limit_is_raised_to_what_the_clients_need() {
        assert_eq!(needed(1000), 4096);
        assert_eq!(needed(10_000), 21_024);
        for clients in [1000, 1536, 9_488, 10_000] {
            assert!(needed(largest(needed(clients)) as usize) <= needed(clients));
        }
        assert_eq!(largest(20_000), 9_488);
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let clients = largest(hard).min(1000) as usize;
        let got = raise_nofile(needed(clients)).unwrap();
        let (soft_now, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(got, soft_now);
        assert!(got >= needed(clients), "soft {got}, hard {hard}");
    }

    // i[verify xtask.drain-demo.scale+2]
    #[test]
    fn clients_past_a_hard_limit_that_cannot_be_raised_fail_with_the_largest_count() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        if hard == nix::sys::resource::RLIM_INFINITY || holdfast_harness::limits::may_raise_hard() {
            eprintln!("SKIP: this process may raise RLIMIT_NOFILE's hard limit ({hard})");
            return;
        }
        let clients = largest(hard) as usize + 1;
        let text = raise_nofile(needed(clients)).unwrap_err().to_string();
        assert!(text.contains(&format!("hard limit is {hard}")), "{text}");
        assert!(text.contains("CAP_SYS_RESOURCE"), "{text}");
        assert!(
            text.contains(&format!("--clients is at most {}", largest(hard))),
            "{text}"
        );
    }
}
