//! `cargo xtask spec-check` — placeholder until the spec gate lands.

use std::process::ExitCode;

/// Arguments of `cargo xtask spec-check`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("spec-check is not implemented yet")
}
