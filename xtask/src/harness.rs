//! `cargo xtask test` — placeholder until the harness lands.

use std::process::ExitCode;

/// Arguments of `cargo xtask test`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("test is not implemented yet")
}
