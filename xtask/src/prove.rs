//! `cargo xtask prove`: the command line over spec-prove (`xtask/prove`), which plans each rule's
//! mutation run from the engine's tree and runs cargo-mutants; a revision's tree
//! (`--changed-since`) is read by spec-git.

use std::path::Path;
use std::process::ExitCode;

/// Arguments of `cargo xtask prove`.
#[derive(clap::Args)]
pub struct Args {
    /// Rules to prove (`retry.schedule`, with or without `r[...]`); default: every rule.
    #[arg(value_name = "RULE")]
    rules: Vec<String>,
    /// Only the rules implemented in this package.
    #[arg(long = "crate", value_name = "PACKAGE", conflicts_with = "rules")]
    package: Option<String>,
    /// Only the rules whose fingerprint (the rule's text, its implementing and its verifying
    /// items, normalised) differs from this git revision's: a reformat or a comment chooses none.
    #[arg(long, value_name = "REV", conflicts_with = "rules")]
    changed_since: Option<String>,
    /// Only the rules whose recorded proof is stale: its fingerprint (the rule's text, its
    /// implementing and its verifying items, normalised) no longer matches the tree.
    #[arg(long, conflicts_with_all = ["rules", "changed_since"])]
    stale: bool,
    /// Root of the tree (default: the cargo workspace above the current directory).
    #[arg(long, value_name = "DIR")]
    root: Option<std::path::PathBuf>,
    /// Print each rule's plan (items, mutant patterns, test filter) and run nothing.
    #[arg(long)]
    list: bool,
    /// Test timeout per mutant, in seconds (cargo-mutants' --timeout).
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// Write docs/audit/proof.md from the proofs under target/prove/ (merged over the file's
    /// earlier rows) and run nothing.
    #[arg(long, conflicts_with_all = ["list", "max_mutants", "budget", "stale"])]
    summary: bool,
    /// CI's run: the rules touched since `HOLDFAST_PROVE_BASE`, else since HEAD's first parent,
    /// with caps of 40 mutants and 240 s unless `--max-mutants`/`--budget` say otherwise.
    #[arg(long, conflicts_with_all = ["rules", "package", "changed_since", "stale", "summary"])]
    ci: bool,
    /// Start no rule whose mutants would take the run past this many mutants.
    #[arg(long, value_name = "N")]
    max_mutants: Option<usize>,
    /// Start no rule once this many seconds have passed, or when its mutants would take the run
    /// past them at the run's pace so far.
    #[arg(long, value_name = "SECS")]
    budget: Option<u64>,
}

impl From<Args> for spec_prove::Options {
    fn from(args: Args) -> Self {
        Self {
            rules: args.rules,
            package: args.package,
            changed_since: args.changed_since,
            tree_at: Some(changed_since_tree),
            stale: args.stale,
            root: args.root,
            list: args.list,
            timeout: args.timeout,
            summary: args.summary,
            ci: args.ci,
            max_mutants: args.max_mutants,
            budget: args.budget,
        }
    }
}

/// The files of the revision `rev` of the workspace at `root`, read as `spec-check --base` reads
/// them (spec-git): what `--changed-since REV` compares the tree with.
// i[impl prove.changed+2]
fn changed_since_tree(root: &Path, rev: &str) -> Result<spec_engine::Memory, String> {
    spec_git::read(root, rev)
        .map(spec_git::Revision::into_memory)
        .map_err(|error| format!("--changed-since {error}"))
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    Ok(spec_prove::run(args.into())?)
}
