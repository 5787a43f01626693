//! `cargo xtask bench` — placeholder until the benches land.

use std::process::ExitCode;

/// Arguments of `cargo xtask bench`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bench is not implemented yet")
}
