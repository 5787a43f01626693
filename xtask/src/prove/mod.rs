//! `cargo xtask prove [RULE… | --crate C | --changed-since REV]` — mutation-backed proof: for each
//! rule, cargo-mutants mutates only the items under the rule's `impl` annotations and runs only the
//! rule's `verify` tests against each mutant. A mutant that survives is code the rule's tests do
//! not check. Results per rule go to `target/prove/RULE.json` (and cargo-mutants' own output to
//! `target/prove/RULE/mutants.out/`).
//!
//! Mutants run in place (`--in-place`) so they reuse the warm target directory; cargo-mutants
//! restores each file after its mutant, and the tree must not be edited while a proof runs.

mod outcomes;
mod plan;

use std::path::Path;
use std::process::{Command, ExitCode};

use serde::Serialize;

use crate::spec_check::{self, config};

pub use self::outcomes::Proof;
use self::plan::Plan;

/// Arguments of `cargo xtask prove`.
#[derive(clap::Args)]
pub struct Args {
    /// Rules to prove (`retry.schedule`, with or without `r[...]`); default: every rule.
    #[arg(value_name = "RULE")]
    rules: Vec<String>,
    /// Only the rules implemented in this package.
    #[arg(long = "crate", value_name = "PACKAGE", conflicts_with = "rules")]
    package: Option<String>,
    /// Only the rules whose implementing items changed since this git revision.
    #[arg(long, value_name = "REV", conflicts_with = "rules")]
    changed_since: Option<String>,
    /// Root of the tree (default: the cargo workspace above the current directory).
    #[arg(long, value_name = "DIR")]
    root: Option<std::path::PathBuf>,
    /// Print each rule's plan (items, mutant patterns, test filter) and run nothing.
    #[arg(long)]
    list: bool,
    /// Test timeout per mutant, in seconds (cargo-mutants' --timeout).
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
}

/// The last recorded proof of the rule `id` under `root`, if `prove` ran on this version of it.
// i[impl prove.shown]
pub fn recorded(root: &Path, id: &tracey_core::RuleId) -> Option<Proof> {
    let text =
        std::fs::read_to_string(root.join("target/prove").join(format!("{id}.json"))).ok()?;
    serde_json::from_str(&text).ok()
}

/// A rule's result as `target/prove/RULE.json` holds it.
#[derive(Debug, Serialize)]
struct Written<'a> {
    rule: &'a str,
    #[serde(flatten)]
    proof: &'a Proof,
}

/// Runs `prove`; exit 0 when every viable mutant of every proven rule was caught, 1 when one
/// survived (or a rule cannot be proven), 2 for usage errors.
// i[impl prove.run]
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let usage = |message: String| {
        eprintln!("error: prove: {message}");
        Ok(ExitCode::from(spec_check::USAGE_ERROR))
    };
    let root = match crate::root::find(args.root.as_deref()) {
        Ok(root) => root,
        Err(message) => return usage(message),
    };
    crate::output::print(&crate::root::banner(&root));
    let config = match config::load(&root) {
        Ok(config) => config,
        Err(problem) => return usage(problem.to_string()),
    };
    let tree = spec_check::read_tree(&root, &config.config);
    let all = plan::plans(&root, &tree);
    let chosen = match select(&root, &args, all) {
        Ok(chosen) => chosen,
        Err(message) => return usage(message),
    };
    if args.list {
        crate::output::print(&list(&chosen));
        return Ok(ExitCode::SUCCESS);
    }
    if !cargo_mutants_installed() {
        return usage(
            "cargo-mutants is not installed: run `cargo install --locked cargo-mutants`".to_owned(),
        );
    }
    let out_dir = root.join("target/prove");
    std::fs::create_dir_all(&out_dir)?;
    let mut all_proven = true;
    let mut lines = Vec::new();
    for plan in &chosen {
        let proof = if plan.targets.is_empty() || plan.judges.is_empty() {
            Proof::not_provable(plan)
        } else {
            prove_one(&root, &out_dir, plan, args.timeout)?
        };
        all_proven &= proof.proven();
        let written = Written {
            rule: &plan.rule,
            proof: &proof,
        };
        std::fs::write(
            out_dir.join(format!("{}.json", plan.id)),
            serde_json::to_string_pretty(&written)? + "\n",
        )?;
        let line = proof.line(&plan.rule);
        crate::output::print(&format!("{line}\n"));
        lines.push(line);
    }
    crate::output::print(&format!(
        "\nprove: {} rule{}, {} proven; results in {}\n",
        chosen.len(),
        if chosen.len() == 1 { "" } else { "s" },
        lines.iter().filter(|l| l.contains(": proven")).count(),
        out_dir.display()
    ));
    Ok(if all_proven {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The rules `args` asks for.
fn select(root: &Path, args: &Args, all: Vec<Plan>) -> Result<Vec<Plan>, String> {
    if !args.rules.is_empty() {
        let mut chosen = Vec::new();
        for wanted in &args.rules {
            let id = match wanted.trim().split_once('[') {
                Some((_, rest)) => rest.trim_end_matches(']').to_owned(),
                None => wanted.trim().to_owned(),
            };
            let base = id.split('+').next().unwrap_or_default().to_owned();
            let plan = all
                .iter()
                .find(|p| p.id.split('+').next() == Some(base.as_str()))
                .ok_or_else(|| format!("no spec defines the rule `{id}`"))?;
            chosen.push(plan.clone());
        }
        return Ok(chosen);
    }
    if let Some(package) = &args.package {
        let chosen: Vec<Plan> = all
            .into_iter()
            .filter(|p| {
                p.targets
                    .iter()
                    .any(|t| t.package.as_ref() == Some(package))
            })
            .collect();
        if chosen.is_empty() {
            return Err(format!("no rule is implemented in package `{package}`"));
        }
        return Ok(chosen);
    }
    if let Some(rev) = &args.changed_since {
        let changed = plan::changed_lines(root, rev)?;
        return Ok(all
            .into_iter()
            .filter(|p| {
                p.targets.iter().any(|t| {
                    changed.get(&t.file).is_some_and(|ranges| {
                        ranges
                            .iter()
                            .any(|&(start, end)| start <= t.lines.1 && t.lines.0 <= end)
                    })
                })
            })
            .collect());
    }
    Ok(all)
}

fn list(plans: &[Plan]) -> String {
    let mut out = String::new();
    for plan in plans {
        out.push_str(&format!("{}\n", plan.rule));
        if plan.targets.is_empty() {
            out.push_str("  mutate  (no annotated Rust item)\n");
        }
        for target in &plan.targets {
            out.push_str(&format!(
                "  mutate  {}:{}-{}  {}\n",
                target.file, target.lines.0, target.lines.1, target.item
            ));
        }
        if plan.judges.is_empty() {
            out.push_str("  judge   (no verifying test)\n");
        } else {
            out.push_str(&format!("  judge   {}\n", plan.test_filter()));
        }
    }
    out
}

fn cargo_mutants_installed() -> bool {
    Command::new("cargo")
        .args(["mutants", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// One cargo-mutants run: the rule's items, the rule's tests.
fn prove_one(
    root: &Path,
    out_dir: &Path,
    plan: &Plan,
    timeout: Option<u64>,
) -> anyhow::Result<Proof> {
    let rule_dir = out_dir.join(&plan.id);
    let _ = std::fs::remove_dir_all(&rule_dir);
    std::fs::create_dir_all(&rule_dir)?;
    let mut command = Command::new("cargo");
    // Run from inside a nextest run (the prove suite under `cargo xtask test`), the parent's
    // NEXTEST_* variables would select its profile (`ci`) in the tree being proved, which may not
    // have one: cargo-mutants' baseline would then fail before any mutant is tried.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("NEXTEST") {
            command.env_remove(&name);
        }
    }
    command
        .args([
            "mutants",
            "--no-shuffle",
            "--in-place",
            "--test-tool",
            "nextest",
        ])
        .args(["--colors", "never"])
        .arg("--output")
        .arg(&rule_dir)
        .current_dir(root);
    for file in plan
        .targets
        .iter()
        .map(|t| t.file.as_str())
        .collect::<std::collections::BTreeSet<_>>()
    {
        command.args(["--file", file]);
    }
    for pattern in plan.name_patterns() {
        command.args(["--re", &pattern]);
    }
    // Build only the packages that hold the rule's tests: far fewer test binaries per mutant.
    match plan.test_packages() {
        Some(packages) => {
            for package in packages {
                command.args(["--test-package", &package]);
            }
        }
        None => {
            command.args(["--test-workspace", "true"]);
        }
    }
    if let Some(timeout) = timeout {
        command.args(["--timeout", &timeout.to_string()]);
    }
    command.args(["--", "-E", &plan.test_filter()]);
    let log = std::fs::File::create(rule_dir.join("cargo-mutants.log"))?;
    let status = command.stdout(log.try_clone()?).stderr(log).status()?;
    // 0: all caught; 2: survivors; 3: timeouts. Anything else (usage, a failing baseline, an
    // interrupt) is no proof, and nothing is recorded.
    match status.code() {
        Some(0 | 2 | 3) => {
            outcomes::read(&rule_dir.join("mutants.out/outcomes.json"), status.code())
        }
        code => anyhow::bail!(
            "cargo-mutants ended with {code:?} for {}; see {}",
            plan.rule,
            rule_dir.join("cargo-mutants.log").display()
        ),
    }
}
