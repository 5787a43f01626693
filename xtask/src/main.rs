//! `cargo xtask`: the maintainers' tasks for holdfast.
//!
//! - `spec-check` — the traceability gate: every rule in `docs/spec/` has an `impl` and a `verify`
//!   reference, no reference is stale or unknown, and (given test results) every rule is verified by
//!   a test that ran and passed.
//! - `tracey-parity` — the gate's counts beside a real tracey 1.3.0's, on spec-engine's workspace
//!   shapes and this tree (`docs/audit/tracey-parity.md`); spec-parity (`xtask/parity`) runs it.
//! - `test` — starts the real services the suites need (dockerd, a registry, pebble, etcd, redis),
//!   runs the workspace's tests against them, stops them, and ends with the test-backed spec-check.
//! - `bench` — runs the criterion benches and writes their summaries under `target/bench/`.
//! - `trace` — walks an audit finding (or one rule) to its rules, their code, their tests and the
//!   tests' results.
//! - `spec-report` — one self-contained HTML page of the spec's coverage, rules and findings.
//! - `dist deb` — the node's Debian package (cargo-deb), with its unit, man pages and completions;
//!   holdfast-dist (`xtask/dist`) builds it.
//! - `drain-demo` — two node replicas on real etcd and Redis, N clients, one replica stopped without
//!   and with a drain; the figures under `target/drain-demo/`.
//!
//! `spec-check`, `trace` and `spec-report` are command lines over the spec-engine library
//! (`xtask/engine`), and `spec-check --base` over spec-git (`xtask/git`), which reads a git
//! revision's tree; `prove` plans from the tree it reads. The drivers are crates of their own,
//! run the same way (`cargo run -p`, see `drivers`): the drain demo and the retry, gateway, forward
//! and spec-check benchmark drivers under `xtask/drivers/`, holdfast-dist (`xtask/dist/`)
//! and spec-parity (`xtask/parity/`). The real services and processes that the test runner and
//! the drain demo both start are holdfast-harness (`xtask/harness/`), over holdfast-command
//! (`xtask/command/`: the root, cargo and printing every command shares); `test` is a command line
//! over holdfast-test-runner (`xtask/runner/`).

mod attack;
mod bench;
mod dist;
mod drain_demo;
mod drivers;
mod harness;
mod prove;
mod read_cache;
mod spec_check;
mod spec_report;
mod trace;
mod tracey_parity;

// Finding the root and printing are shared with the drivers.
use holdfast_harness::{output, root};

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "holdfast maintainers' tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check that every spec rule is implemented, verified, and referenced correctly.
    SpecCheck(spec_check::Args),
    /// Compare the gate's counts with a real tracey 1.3.0's on the workspace shapes and this tree.
    #[command(disable_help_flag = true)]
    TraceyParity(tracey_parity::Args),
    /// Start the real services, run the workspace's tests against them, then the test-backed spec-check.
    Test(harness::Args),
    /// Run benchmarks and write their summaries to target/bench/.
    Bench(bench::Args),
    /// Trace an audit finding to the rules that close it, their code, tests and test results.
    Trace(trace::Args),
    /// Write a self-contained HTML report of the spec's coverage (target/spec-report.html).
    SpecReport(spec_report::Args),
    /// Mutation-backed proof: mutate each rule's implementing items, run only its verifying tests.
    Prove(prove::Args),
    /// Two replicas, N clients, one replica stopped with and without a drain (target/drain-demo/).
    #[command(disable_help_flag = true)]
    DrainDemo(drain_demo::Args),
    /// Bounded floods from loopback against a real node, judged by docs/security.md (target/attack/).
    Attack(attack::Args),
    /// Build the node's packages (`dist deb`: a .deb with the unit, man pages and completions).
    #[command(disable_help_flag = true)]
    Dist(dist::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    read_cache::enable();
    let outcome = match cli.command {
        Command::SpecCheck(args) => spec_check::run(args),
        Command::TraceyParity(args) => tracey_parity::run(args),
        Command::Test(args) => harness::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Trace(args) => trace::run(args),
        Command::SpecReport(args) => spec_report::run(args),
        Command::Prove(args) => prove::run(args),
        Command::DrainDemo(args) => drain_demo::run(args),
        Command::Attack(args) => attack::run(args),
        Command::Dist(args) => dist::run(args),
    };
    match outcome {
        Ok(code) => code,
        // A command that could not do its job at all is a fatal error, never "problems found".
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(spec_check::USAGE_ERROR)
        }
    }
}
