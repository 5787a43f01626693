//! `cargo xtask dist ...`: runs holdfast-dist (`xtask/dist`), which builds the node's Debian
//! package with cargo-deb, with the same command line (`dist deb [--debug] [--out DIR]
//! [--no-build]`). It is a crate of its own outside the workspace's `default-members`, so the
//! spec gate's build never compiles it.

use std::ffi::OsString;
use std::process::ExitCode;

/// Everything after `dist`, passed to holdfast-dist as it is (`--help` included).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// holdfast-dist's arguments: deb [--debug] [--out DIR] [--no-build] (see `cargo xtask dist
    /// --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::drivers::run("holdfast-dist", &args.args)
}
