//! `cargo xtask tracey-parity ...`: runs spec-parity (`xtask/parity`), which compares the gate's
//! counts with a real tracey's, with the same command line. It is a crate of its own outside the
//! workspace's `default-members`, so the gate's build never compiles it.

use std::ffi::OsString;
use std::process::ExitCode;

/// Everything after `tracey-parity`, passed to spec-parity as it is (`--help` included).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// spec-parity's arguments: [--root DIR] [--tracey BIN] [--out FILE] (see `cargo xtask
    /// tracey-parity --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::drivers::run("spec-parity", &args.args)
}
