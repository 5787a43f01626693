//! `holdfast-dist` (run as `cargo xtask dist deb`): the command line. It prints the path of the
//! `.deb` on its last line; exit 1 when no package was made (no cargo-deb, a refused binary, a
//! failed step), 2 on a command line clap refuses.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use holdfast_dist::{Error, Profile, steps};

#[derive(Parser)]
#[command(
    name = "holdfast-dist",
    bin_name = "cargo xtask dist",
    about = "Build the node's packages (`dist deb`: a .deb with the unit, man pages and completions)"
)]
struct Cli {
    #[command(subcommand)]
    what: What,
}

/// What to build.
#[derive(Debug, Subcommand)]
enum What {
    /// A .deb of the node (cargo-deb; install it with `cargo install --locked cargo-deb`).
    Deb(DebArgs),
}

/// `cargo xtask dist deb`'s flags.
#[derive(Debug, clap::Args)]
struct DebArgs {
    /// Package a debug build (faster to build; CI's install test uses it). Default: release.
    #[arg(long)]
    debug: bool,
    /// Where the .deb goes (default: target/debian/).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Build nothing: package the `holdfast` an earlier build left in target/PROFILE/ (CI's
    /// `cargo xtask test --no-run`, with the suite's features), which must have every feature.
    #[arg(long)]
    no_build: bool,
}

fn main() -> ExitCode {
    let What::Deb(deb) = Cli::parse().what;
    match run(deb) {
        Ok(package) => {
            println!("{}", package.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            // i[dist.deb+2] and i[dist.deb.no-build] say 1: the run was judged and no package made.
            ExitCode::FAILURE
        }
    }
}

// i[impl dist.deb+2]
/// Builds (or checks) the binary, writes its docs, and packages it; returns the `.deb`.
fn run(deb: DebArgs) -> Result<PathBuf, Error> {
    let workspace = holdfast_command::root::find(None)
        .map_err(|message| Error::Failed(format!("dist: {message}")))?;
    holdfast_command::output::print(&holdfast_command::root::banner(&workspace));
    let target = holdfast_command::root::target_dir(&workspace);
    let profile = Profile::of(deb.debug);
    steps::cargo_deb_present()?;
    let products = target.join(profile.dir());
    let binary = products.join("holdfast");
    if deb.no_build {
        steps::prebuilt_has_every_feature(
            &binary,
            profile,
            steps::git_commit(&workspace).as_deref(),
        )?;
    } else {
        steps::build(&workspace, profile)?;
    }
    steps::generate_docs(&binary, &products.join("dist"))?;
    let out = deb.out.unwrap_or_else(|| target.join("debian"));
    std::fs::create_dir_all(&out).map_err(|source| Error::Write {
        what: "creating",
        path: out.clone(),
        source,
    })?;
    steps::package(&workspace, profile, &out)
}
