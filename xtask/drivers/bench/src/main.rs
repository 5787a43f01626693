//! holdfast-bench: the retry, gateway, forward and spec-check benchmark drivers, run by
//! `cargo xtask bench retry [--warm-up-secs S] [--measurement-secs S] [--keys N]`,
//! `cargo xtask bench gateway [--connections N]`, `cargo xtask bench forward [--quick] [--iperf] [--profile]`
//! and `cargo xtask bench spec-check [--scale 1,10,30]`.
//!
//! Each builds its crate's bench binaries with cargo (`bench_retry`: holdfast-retry's `gate`,
//! `memory` and `herd` benches; `bench_gateway`: holdfast-gateway's `gateway_bench` example in
//! release; `bench_forward`: holdfast-forward's `relay` bench), runs them, turns its
//! raw `RESULT` line into a summary with the targets and whether this run met them, writes
//! it under `target/bench/` and prints a table; `bench_spec` times the xtask binary it is given
//! (xtask passes its own) on generated trees. They are a crate of their own, outside the
//! workspace's `default-members`, so that xtask (the spec gate) builds none of this.

mod bench_forward;
mod bench_gateway;
mod bench_retry;
mod bench_spec;
mod iperf;

use std::process::{Command, ExitCode};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "holdfast-bench",
    bin_name = "cargo xtask bench",
    about = "The retry, gateway, forward and spec-check benchmark drivers (cargo xtask bench retry|gateway|forward|spec-check)"
)]
struct Cli {
    #[command(subcommand)]
    suite: Suite,
}

#[derive(Subcommand)]
enum Suite {
    /// holdfast-retry: keyed gate vs governor, memory per key, herd simulation.
    Retry(bench_retry::Args),
    /// holdfast-gateway: memory per idle connection, broadcast beside a bare server, drains.
    Gateway {
        /// Clients per fleet (at least one: the figures are per connection).
        #[arg(long, default_value_t = 10_000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        connections: usize,
    },
    /// holdfast-forward: raw quinn against the same load through a forward.
    Forward {
        /// A bounded run (well under a minute) for CI.
        #[arg(long)]
        quick: bool,
        /// Also iperf 2's UDP at 200 Mbit/s and 1 Gbit/s, direct and through a forward.
        #[arg(long)]
        iperf: bool,
        /// Also each side's cost per datagram (system calls, allocations, context switches,
        /// CPU), raw quinn beside the forward; each side on a runtime of its own.
        #[arg(long)]
        profile: bool,
    },
    /// spec-check, trace and spec-report (of the xtask binary given) on generated trees 1, 10 and
    /// 30 times the workspace's size.
    SpecCheck(bench_spec::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.suite) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            // xtask's usage error: a run that could not do its job at all.
            ExitCode::from(2)
        }
    }
}

fn run(suite: Suite) -> anyhow::Result<ExitCode> {
    let root = holdfast_harness::root::find(None)
        .map_err(|message| anyhow::anyhow!("bench: {message}"))?;
    holdfast_harness::output::print(&holdfast_harness::root::banner(&root));
    match suite {
        Suite::Retry(args) => bench_retry::run(
            &cargo,
            &root,
            &holdfast_harness::root::target_dir(&root),
            &args,
        ),
        Suite::Gateway { connections } => bench_gateway::run(
            cargo(),
            &root,
            &holdfast_harness::root::target_dir(&root),
            connections,
        ),
        Suite::Forward {
            quick,
            iperf,
            profile,
        } => {
            let target = holdfast_harness::root::target_dir(&root);
            let measure = || -> anyhow::Result<serde_json::Value> {
                let example = build_forward_example(&root, &target)?;
                iperf::run(&example, &target.join("bench/iperf"), quick)
            };
            bench_forward::run(
                cargo(),
                &root,
                &target,
                bench_forward::Mode { quick, profile },
                iperf.then_some(&measure as bench_forward::Iperf<'_>),
            )
        }
        Suite::SpecCheck(args) => bench_spec::run(&root, &args),
    }
}

/// holdfast-forward's `forward` example (a node and a client by hand) in release; its path.
fn build_forward_example(
    root: &std::path::Path,
    target: &std::path::Path,
) -> anyhow::Result<std::path::PathBuf> {
    eprintln!("bench: building holdfast-forward's forward example (release)");
    let status = forward_example_build(cargo(), root)
        .status()
        .map_err(|e| anyhow::anyhow!("running cargo build --example forward: {e}"))?;
    if !status.success() {
        anyhow::bail!("cargo build -p holdfast-forward --example forward failed: {status}");
    }
    Ok(target.join("release/examples/forward"))
}

/// `cargo build --release` of holdfast-forward's `forward` example, naming the packages the relay
/// bench's build names so that it reuses that build.
// i[impl bench.forward.shared-build+2]
fn forward_example_build(mut cargo: Command, root: &std::path::Path) -> Command {
    cargo
        .current_dir(root)
        .args(["build", "--release"])
        .args(bench_forward::PACKAGES)
        .args(["--example", "forward"]);
    cargo
}

/// The cargo the benches are built and run with: the caller's, without what `cargo run` set for
/// this driver (`i[bench.no-rebuild+2]`).
fn cargo() -> Command {
    holdfast_harness::root::cargo()
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify bench.forward.shared-build+2]
    #[test]
    fn the_forward_example_builds_with_the_relay_bench_s_packages() {
        let c = forward_example_build(Command::new("cargo"), std::path::Path::new("/w"));
        let args: Vec<_> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "build",
                "--release",
                "-p",
                "holdfast-gateway",
                "-p",
                "holdfast-forward",
                "--example",
                "forward"
            ]
        );
    }

    #[test]
    fn the_gateway_suite_refuses_zero_connections() {
        assert!(Cli::try_parse_from(["holdfast-bench", "gateway", "--connections", "0"]).is_err());
        let cli = Cli::try_parse_from(["holdfast-bench", "gateway", "--connections", "2"]).unwrap();
        assert!(matches!(cli.suite, Suite::Gateway { connections: 2 }));
    }
}
