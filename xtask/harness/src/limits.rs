//! The file-descriptor limit the drivers need: a bench or a demo with N connections holds far
//! more descriptors than the usual soft limit of 1024, in itself and in the children that inherit
//! its limit. One function raises it for all of them, and says what to do when it cannot.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Why RLIMIT_NOFILE could not be brought to what a run needs.
#[derive(Debug, thiserror::Error)]
pub enum NofileError {
    /// The limits could not be read or set for a reason other than the hard limit.
    #[error("RLIMIT_NOFILE: {0}")]
    Os(#[from] nix::Error),
    /// The hard limit is below what is wanted, and this process may not raise it.
    #[error(
        "RLIMIT_NOFILE's hard limit is {hard} and this run needs {want} descriptors per process; \
         this process may not raise a hard limit (that needs CAP_SYS_RESOURCE{cap}), so raise it \
         where it is set: `ulimit -Hn {want}` in a shell that may (e.g. root with \
         CAP_SYS_RESOURCE), or LimitNOFILE={want} in the systemd unit / `--ulimit nofile={want}` \
         for the container; with the hard limit at {hard}, {flag} is at most {largest}"
    )]
    HardLimit {
        /// The hard limit in force.
        hard: u64,
        /// The descriptors the run needs.
        want: u64,
        /// The flag that sets the run's size (`--connections`, `--clients`).
        flag: String,
        /// The largest value of `flag` that `hard` allows.
        largest: u64,
        /// Whether this process has CAP_SYS_RESOURCE, as words for the message.
        cap: &'static str,
    },
}

/// Raises the soft RLIMIT_NOFILE to `want` (children inherit it), and the hard limit too when
/// `want` is past it and this process may raise it; returns the soft limit in force afterwards.
/// When the hard limit is below `want` and cannot be raised, nothing is changed and the error
/// names the hard limit, what raising it needs, and the largest `flag` value the hard limit
/// allows (`largest(hard)`). A `want` the soft limit already allows changes nothing.
// i[impl bench.gateway.limits]
pub fn raise_nofile(
    want: u64,
    flag: &str,
    largest: impl Fn(u64) -> u64,
) -> Result<u64, NofileError> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    match plan(soft, hard, want) {
        Plan::Enough => Ok(soft),
        Plan::Soft => {
            setrlimit(Resource::RLIMIT_NOFILE, want, hard)?;
            Ok(want)
        }
        Plan::Hard => match setrlimit(Resource::RLIMIT_NOFILE, want, want) {
            Ok(()) => Ok(want),
            // EPERM is the hard limit; anything else is not, and says so itself.
            Err(nix::Error::EPERM) => Err(NofileError::HardLimit {
                hard,
                want,
                flag: flag.to_owned(),
                largest: largest(hard),
                cap: if may_raise_hard() {
                    ", which this process has, but the raise was refused"
                } else {
                    ", which this process lacks"
                },
            }),
            Err(e) => Err(e.into()),
        },
    }
}

/// What raising the soft limit to `want` takes, given the limits in force.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// The soft limit already allows `want`.
    Enough,
    /// The soft limit alone, within the hard one (any process may).
    Soft,
    /// The hard limit too (only a process with CAP_SYS_RESOURCE may).
    Hard,
}

fn plan(soft: u64, hard: u64, want: u64) -> Plan {
    if soft >= want {
        Plan::Enough
    } else if want <= hard {
        Plan::Soft
    } else {
        Plan::Hard
    }
}

/// Whether this process may raise its hard RLIMIT_NOFILE: CAP_SYS_RESOURCE (bit 24) in its
/// effective capabilities. Tests that need a refused raise skip when it may.
pub fn may_raise_hard() -> bool {
    const CAP_SYS_RESOURCE: u32 = 24;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify bench.gateway.limits]
    #[test]
    fn only_a_want_past_the_hard_limit_touches_the_hard_limit() {
        assert_eq!(plan(4096, 8192, 4096), Plan::Enough);
        assert_eq!(plan(5000, 8192, 4096), Plan::Enough);
        assert_eq!(plan(1024, 8192, 4096), Plan::Soft);
        assert_eq!(plan(1024, 4096, 4096), Plan::Soft);
        assert_eq!(plan(1024, 4095, 4096), Plan::Hard);
    }

    // i[verify bench.gateway.limits]
    #[test]
    fn a_want_the_soft_limit_allows_changes_nothing() {
        let before = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let got = raise_nofile(before.0.min(64), "--connections", |h| h).unwrap();
        assert_eq!(got, before.0);
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), before);
    }

    // i[verify bench.gateway.limits]
    #[test]
    fn a_want_past_a_hard_limit_that_cannot_be_raised_says_what_to_run() {
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        if hard == nix::sys::resource::RLIM_INFINITY || may_raise_hard() {
            eprintln!(
                "SKIP: this process may raise RLIMIT_NOFILE's hard limit ({hard}): \
                 the refusal cannot be seen here"
            );
            return;
        }
        let want = hard + 1000;
        let err = raise_nofile(want, "--connections", |h| h.saturating_sub(64)).unwrap_err();
        assert!(
            matches!(err, NofileError::HardLimit { hard: h, want: w, largest, .. }
                if h == hard && w == want && largest == hard - 64),
            "{err:?}"
        );
        let text = err.to_string();
        for part in [
            format!("hard limit is {hard}"),
            format!("needs {want} descriptors"),
            "CAP_SYS_RESOURCE, which this process lacks".to_owned(),
            format!("`ulimit -Hn {want}`"),
            format!("LimitNOFILE={want}"),
            format!("--connections is at most {}", hard - 64),
        ] {
            assert!(text.contains(&part), "{part:?} not in {text:?}");
        }
        // Nothing was changed by the refused raise.
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (soft, hard));
    }
}
