//! `cargo xtask drain-demo ...`: runs the drain demo, which lives in its own crate
//! (`xtask/drivers/drain-demo`, package holdfast-drain-demo), with the same command line.

use std::ffi::OsString;
use std::process::ExitCode;

/// Everything after `drain-demo`, passed to the driver as it is (`--help` included).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The drain demo's arguments: [--clients N] [--rate R] [--lease-ttl-secs S]
    /// [--arm control|graceful|recovery]... [--holdfast PATH] [--release] (see `cargo xtask drain-demo --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::drivers::run("holdfast-drain-demo", &args.args)
}
