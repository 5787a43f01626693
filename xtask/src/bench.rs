//! `cargo xtask bench SUITE`: the command line of the benchmarks. Every suite is holdfast-bench's
//! (`xtask/drivers/bench`, run with `cargo run -p`, see `drivers`), which builds and runs each
//! suite's benches and writes its summary under `target/bench/`; the spec-check suite times this
//! xtask binary (passed on with its build profile) on generated trees.

use std::process::ExitCode;

use anyhow::Context;

/// Which benchmark suite to run.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Suite {
    /// holdfast-retry: keyed gate vs governor, memory per key, herd simulation.
    Retry,
    /// spec-check, trace and spec-report on generated trees 1, 10 and 30 times the workspace's size.
    SpecCheck,
    /// holdfast-gateway: memory per idle connection, broadcast beside a bare server, drains.
    Gateway,
    /// holdfast-forward: raw quinn against the same load through a forward.
    Forward,
}

/// Arguments of `cargo xtask bench`.
#[derive(clap::Args)]
pub struct Args {
    /// The suite to run.
    #[arg(value_enum)]
    suite: Suite,
    // The driver's flags are passed on only when given: holdfast-bench owns their defaults, and
    // `cargo run -p holdfast-bench -- retry --help` shows them.
    /// retry suite: criterion warm-up time per benchmark, in seconds (default: holdfast-bench's).
    #[arg(long)]
    warm_up_secs: Option<u64>,
    /// retry suite: criterion measurement time per benchmark, in seconds (default: holdfast-bench's).
    #[arg(long)]
    measurement_secs: Option<u64>,
    /// retry suite: number of failing keys in the gate benches (default: holdfast-bench's).
    #[arg(long)]
    keys: Option<u64>,
    /// spec-check suite: the generated trees' sizes as multiples of this workspace's (default:
    /// holdfast-bench's, 1,10,30).
    #[arg(long, alias = "scales", value_delimiter = ',')]
    scale: Vec<usize>,
    /// spec-check suite: keeps the generated trees (their paths are printed), for a profiler's
    /// run on the same tree.
    #[arg(long)]
    keep_trees: bool,
    /// gateway suite: clients per fleet (at least one: the figures are per connection; default:
    /// holdfast-bench's).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    connections: Option<usize>,
    /// forward suite: a bounded run (well under a minute) for CI.
    #[arg(long)]
    quick: bool,
    /// forward suite: also iperf 2's UDP at 200 Mbit/s and 1 Gbit/s, direct and through a
    /// forward (installs Debian's iperf when missing, as root).
    #[arg(long)]
    iperf: bool,
    /// forward suite: also each side's cost per datagram (system calls, allocations, context
    /// switches, CPU), raw quinn beside the forward.
    #[arg(long)]
    profile: bool,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    forward_flags_only_for_forward(&args)?;
    let mut line = driver_args(&args);
    // The spec-check suite times this very binary: the driver is told where it is and how it was
    // built.
    if matches!(args.suite, Suite::SpecCheck) {
        let exe = std::env::current_exe().context("finding the xtask binary")?;
        line.push("--xtask".into());
        line.push(exe.into());
        line.push("--xtask-profile".into());
        line.push(PROFILE.into());
    }
    // Every suite is holdfast-bench's (xtask/drivers/bench), which prints the banner itself.
    crate::drivers::run("holdfast-bench", &line)
}

/// This binary's build profile, as the spec-check suite's table names it.
const PROFILE: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};

/// `--quick`, `--iperf` and `--profile` change the forward suite alone: given to another, they
/// would be ignored, so they are refused.
// i[impl bench.forward.profile]
fn forward_flags_only_for_forward(args: &Args) -> anyhow::Result<()> {
    if matches!(args.suite, Suite::Forward) {
        return Ok(());
    }
    for (given, flag) in [
        (args.quick, "--quick"),
        (args.iperf, "--iperf"),
        (args.profile, "--profile"),
    ] {
        if given {
            anyhow::bail!(
                "bench: {flag} is the forward suite's (cargo xtask bench forward {flag})"
            );
        }
    }
    Ok(())
}

/// holdfast-bench's command line for the retry, gateway, forward or spec-check suite.
fn driver_args(args: &Args) -> Vec<std::ffi::OsString> {
    let mut line: Vec<std::ffi::OsString> = Vec::new();
    match args.suite {
        Suite::Gateway => {
            line.push("gateway".into());
            given(&mut line, "--connections", args.connections);
        }
        Suite::Forward => {
            line.push("forward".into());
            if args.quick {
                line.push("--quick".into());
            }
            if args.iperf {
                line.push("--iperf".into());
            }
            if args.profile {
                line.push("--profile".into());
            }
        }
        Suite::Retry => {
            line.push("retry".into());
            given(&mut line, "--warm-up-secs", args.warm_up_secs);
            given(&mut line, "--measurement-secs", args.measurement_secs);
            given(&mut line, "--keys", args.keys);
        }
        Suite::SpecCheck => {
            line.push("spec-check".into());
            if !args.scale.is_empty() {
                let scales: Vec<String> = args.scale.iter().map(ToString::to_string).collect();
                line.push("--scale".into());
                line.push(scales.join(",").into());
            }
            if args.keep_trees {
                line.push("--keep-trees".into());
            }
        }
    }
    line
}

/// `FLAG VALUE` on `line` when the user gave the flag.
fn given(line: &mut Vec<std::ffi::OsString>, flag: &str, value: Option<impl ToString>) {
    if let Some(value) = value {
        line.push(flag.into());
        line.push(value.to_string().into());
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::Args,
    }

    #[test]
    fn the_retry_gateway_and_forward_suites_pass_their_flags_to_holdfast_bench() {
        let line = |argv: &[&str]| -> Vec<String> {
            let cli = Cli::try_parse_from(argv).unwrap();
            super::driver_args(&cli.args)
                .into_iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            line(&["bench", "gateway", "--connections", "1000"]),
            ["gateway", "--connections", "1000"]
        );
        // Only what was given: the driver owns the defaults.
        assert_eq!(line(&["bench", "gateway"]), ["gateway"]);
        assert_eq!(
            line(&["bench", "retry", "--keys", "1000"]),
            ["retry", "--keys", "1000"]
        );
        assert_eq!(line(&["bench", "retry"]), ["retry"]);
        assert_eq!(
            line(&[
                "bench",
                "retry",
                "--warm-up-secs",
                "2",
                "--measurement-secs",
                "5"
            ]),
            ["retry", "--warm-up-secs", "2", "--measurement-secs", "5"]
        );
        assert_eq!(
            line(&["bench", "forward", "--quick"]),
            ["forward", "--quick"]
        );
        assert_eq!(line(&["bench", "forward"]), ["forward"]);
        assert_eq!(
            line(&["bench", "spec-check", "--scale", "1,10"]),
            ["spec-check", "--scale", "1,10"]
        );
        assert_eq!(
            line(&["bench", "spec-check", "--scales", "3"]),
            ["spec-check", "--scale", "3"]
        );
        assert_eq!(line(&["bench", "spec-check"]), ["spec-check"]);
        assert_eq!(
            line(&["bench", "spec-check", "--scale", "10", "--keep-trees"]),
            ["spec-check", "--scale", "10", "--keep-trees"]
        );
        assert_eq!(
            line(&["bench", "forward", "--quick", "--iperf"]),
            ["forward", "--quick", "--iperf"]
        );
        assert_eq!(
            line(&["bench", "forward", "--quick", "--profile"]),
            ["forward", "--quick", "--profile"]
        );
    }

    // i[verify bench.forward.profile]
    #[test]
    fn the_forward_suites_flags_are_refused_for_the_other_suites() {
        let checked = |argv: &[&str]| {
            let cli = Cli::try_parse_from(argv).unwrap();
            super::forward_flags_only_for_forward(&cli.args).map_err(|e| e.to_string())
        };
        for suite in ["gateway", "retry", "spec-check"] {
            for flag in ["--profile", "--iperf", "--quick"] {
                let err = checked(&["bench", suite, flag]).expect_err(flag);
                assert!(
                    err.contains(flag) && err.contains("forward suite"),
                    "{suite} {flag}: {err}"
                );
            }
            assert!(checked(&["bench", suite]).is_ok());
        }
        assert!(checked(&["bench", "forward", "--quick", "--iperf", "--profile"]).is_ok());
    }

    #[test]
    fn the_gateway_suite_refuses_zero_connections() {
        assert!(Cli::try_parse_from(["bench", "gateway", "--connections", "0"]).is_err());
        let cli = Cli::try_parse_from(["bench", "gateway", "--connections", "2"]).unwrap();
        assert_eq!(cli.args.connections, Some(2));
    }
}
