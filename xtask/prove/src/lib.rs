//! `cargo xtask prove [RULE… | --crate C | --changed-since REV | --stale]` — mutation-backed proof: for each
//! rule, cargo-mutants mutates only the items under the rule's `impl` annotations and runs only the
//! rule's `verify` tests against each mutant. A mutant that survives is code the rule's tests do
//! not check. Results per rule go to `target/prove/RULE.json` (and cargo-mutants' own output to
//! `target/prove/RULE/mutants.out/`).
//!
//! Each result carries the rule's evidence fingerprint (its text, implementing and verifying items,
//! normalised: `spec_engine::spec_check::fingerprint`), so a proof whose evidence changed since
//! is shown stale; `--stale` chooses those rules. `--changed-since REV` (and `--ci`) compares the
//! same fingerprints between REV's tree, which the command line reads with git ([`TreeAt`]), and
//! the work tree.
//!
//! `--summary` writes the checked-in `docs/audit/proof.md` from those results; survivors justified
//! in `docs/audit/survivors.toml` do not count as missed. `--max-mutants` and `--budget` bound a
//! run (CI's), and the rules they leave unrun are named.
//!
//! Mutants run in place (`--in-place`) so they reuse the warm target directory; cargo-mutants
//! restores each file after its mutant, and the tree must not be edited while a proof runs.
//!
//! spec-prove sits on the spec-engine crate (the tree, the rules' sites, the proof records) and
//! nothing sits on it but xtask's command line, which parses [`Options`] and calls [`run`].
//! Planning is pure: `plan` (each rule's items, mutant patterns and test filter, from the
//! engine's tree), `budget` (which rules a bounded run starts) and `justified` (survivors judged
//! harmless). The I/O: `ci` (which commits CI covers, from git), `group` (a child in its own
//! process group, ended at a deadline), `pristine` (the tree left as found), `services` (rules
//! whose tests need a real service), `outcomes` (cargo-mutants' `outcomes.json`) and [`run`]
//! itself (cargo-mutants per rule, `target/prove/RULE.json`, the summary).

mod budget;
mod ci;
mod error;
mod group;
mod justified;
mod outcomes;
mod plan;
mod pristine;
pub mod services;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, ExitCode};

use serde::Serialize;

use spec_engine::spec_check::{self, config};

pub use self::error::Error;
use self::plan::Plan;
pub use spec_engine::model::proof::Proof;

/// Reads the files of the revision `rev` of the workspace at `root` into a memory tree.
pub type TreeAt = fn(&Path, &str) -> Result<spec_engine::Memory, String>;

/// The exit code of a usage or fatal error: nothing was judged (the spec gate's too).
pub const USAGE_ERROR: u8 = 2;
use spec_engine::model::proof::local;
use spec_engine::model::proof_summary as summary;

/// What `cargo xtask prove` was asked to do (its command line, parsed by xtask).
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// Rules to prove (`retry.schedule`, with or without `r[...]`); default: every rule.
    pub rules: Vec<String>,
    /// Only the rules implemented in this package.
    pub package: Option<String>,
    /// Only the rules whose fingerprint (text, implementing items, verifying tests) differs
    /// from this git revision's.
    pub changed_since: Option<String>,
    /// Reads a git revision's files as `spec-check --base` does (the command line, which runs
    /// git, gives it): what `changed_since` and `ci` compare the tree with.
    pub tree_at: Option<TreeAt>,
    /// Only the rules whose recorded proof is stale: its fingerprint no longer matches the tree.
    pub stale: bool,
    /// Root of the tree (default: the cargo workspace above the current directory).
    pub root: Option<std::path::PathBuf>,
    /// Print each rule's plan (items, mutant patterns, test filter) and run nothing.
    pub list: bool,
    /// Test timeout per mutant, in seconds (cargo-mutants' --timeout).
    pub timeout: Option<u64>,
    /// Write docs/audit/proof.md from the proofs under target/prove/ (merged over the file's
    /// earlier rows) and run nothing.
    pub summary: bool,
    /// CI's run: the rules touched since `HOLDFAST_PROVE_BASE`, else since HEAD's first parent,
    /// with caps of 40 mutants and 240 s unless `--max-mutants`/`--budget` say otherwise.
    pub ci: bool,
    /// Start no rule whose mutants would take the run past this many mutants.
    pub max_mutants: Option<usize>,
    /// Start no rule once this many seconds have passed, or when its mutants would take the run
    /// past them at the run's pace so far.
    pub budget: Option<u64>,
}

/// The text of `docs/audit/proof.md` for `proofs` (marker, proof), as `prove --summary` writes it.
pub fn render_summary(proofs: &[(String, Proof)]) -> String {
    summary::render(proofs)
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
// i[impl prove.run+2]
pub fn run(mut args: Options) -> error::Result<ExitCode> {
    let usage = |message: String| {
        eprintln!("error: prove: {message}");
        Ok(ExitCode::from(USAGE_ERROR))
    };
    let root = match holdfast_harness::root::find(args.root.as_deref()) {
        Ok(root) => root,
        Err(message) => return usage(message),
    };
    holdfast_harness::output::print(&holdfast_harness::root::banner(&root));
    let disk = spec_engine::Disk::new(&root);
    if let Err(message) = spec_engine::model::paths::load(&disk) {
        return usage(message.to_string());
    }
    if args.ci {
        let from_env = std::env::var("HOLDFAST_PROVE_BASE").ok();
        match ci::base(&root, from_env.as_deref()) {
            Ok(Some(base)) => {
                holdfast_harness::output::print(&format!(
                    "prove: CI run, rules touched since {base}\n"
                ));
                args.changed_since = Some(base);
                args.max_mutants = args.max_mutants.or(Some(ci::MAX_MUTANTS));
                args.budget = args.budget.or(Some(ci::BUDGET_SECS));
            }
            Ok(None) => {
                holdfast_harness::output::print(
                    "prove: CI run: HEAD has no parent (or this is no git checkout): nothing to compare\n",
                );
                return Ok(ExitCode::SUCCESS);
            }
            Err(message) => return usage(message),
        }
    }
    let config = match config::load(&disk) {
        Ok(config) => config,
        Err(problem) => return usage(problem.to_string()),
    };
    let tree = spec_check::read_tree(&disk, &config.config);
    let all = plan::plans(&disk, &tree);
    if args.summary {
        return write_summary(&disk, &all);
    }
    let justified = match justified::load(&disk) {
        Ok(justified) => justified,
        Err(message) => return usage(message),
    };
    let all = if args.stale {
        stale_only(&disk, &tree, all)
    } else {
        all
    };
    let chosen = match select(&root, &args, &tree, all) {
        Ok(chosen) => chosen,
        Err(message) => return usage(message),
    };
    if args.list {
        holdfast_harness::output::print(&list(&chosen));
        return Ok(ExitCode::SUCCESS);
    }
    if !cargo_mutants_installed() {
        return usage(
            "cargo-mutants is not installed: run `cargo install --locked cargo-mutants`".to_owned(),
        );
    }
    let out_dir = root.join("target/prove");
    std::fs::create_dir_all(&out_dir)?;
    let mut bound = budget::Budget::new(args.max_mutants, args.budget);
    // A bounded run knows every rule's size before it starts one, and takes the smallest first.
    let counts = if bound.bounded() {
        Some(count_mutants(&root, &chosen)?)
    } else {
        None
    };
    let order = counts
        .as_deref()
        .map_or_else(|| (0..chosen.len()).collect(), budget::order);
    let mut tally = Tally::default();
    let mut unserved = Vec::new();
    let (commit, date) = (head_commit(&root), timestamp_now());
    for index in order {
        let plan = &chosen[index];
        let provable = plan.provable();
        let count = counts.as_ref().map(|counts| counts[index]);
        if let Err(why) = bound.admit_rule(provable, count.unwrap_or(0)) {
            holdfast_harness::output::print(&format!("{}: NOT RUN — {why}\n", plan.rule));
            bound.left_unrun(&plan.rule);
            continue;
        }
        // A rule whose level demands no proof is proved all the same, but fails no run.
        let demanded = tree
            .rules()
            .iter()
            .find(|rule| rule.marker() == plan.rule)
            .is_none_or(|rule| spec_check::levels::Level::of(rule).demands().proven);
        let started = std::time::Instant::now();
        let mut proof = if provable {
            match prove_one(&root, &out_dir, plan, args.timeout, bound.deadline(started))? {
                Run::Done(proof) => proof,
                Run::CutOff(mut tried) => {
                    // The time cap holds inside a rule too: the first rule has no pace to be
                    // judged by, and one slow rule must not take CI's step past its bound.
                    if let Some(tried) = tried.as_mut() {
                        justified::apply(tried, &plan.id, &justified);
                    }
                    tally.cut_off(tried.as_ref(), demanded);
                    let why = budget::cut_off_reason(&tried, count, started.elapsed());
                    holdfast_harness::output::print(&format!("{}: NOT RUN — {why}\n", plan.rule));
                    bound.ran(tried.as_ref().map_or(0, Proof::tried), started.elapsed());
                    bound.left_unrun(&plan.rule);
                    continue;
                }
            }
        } else {
            outcomes::not_provable(plan)
        };
        if provable {
            bound.ran(proof.tried(), started.elapsed());
            // A test that skipped for want of a service passes with every mutant: that run
            // judged nothing, so it is no proof (neither caught nor missed) and is named.
            let needed = services::skipped(&out_dir.join(&plan.id).join(services::LEDGER));
            if !needed.is_empty() {
                let why = services::reason(&needed);
                holdfast_harness::output::print(&format!("{}: NOT RUN — {why}\n", plan.rule));
                let _ = std::fs::remove_file(out_dir.join(format!("{}.json", plan.id)));
                unserved.push(plan.rule.clone());
                continue;
            }
        }
        justified::apply(&mut proof, &plan.id, &justified);
        proof.commit = commit.clone();
        proof.date = Some(date.clone());
        // What this proof judged, as the tree was read before any mutant ran.
        proof.fingerprint = tree
            .rules()
            .iter()
            .find(|rule| rule.marker() == plan.rule)
            .map(|rule| spec_check::fingerprint::of(&tree, rule));
        tally.record(&plan.rule, &proof, demanded);
        let written = Written {
            rule: &plan.rule,
            proof: &proof,
        };
        std::fs::write(
            out_dir.join(format!("{}.json", plan.id)),
            serde_json::to_string_pretty(&written)? + "\n",
        )?;
        holdfast_harness::output::print(&format!("{}\n", proof.line(&plan.rule)));
    }
    holdfast_harness::output::print(&format!(
        "\nprove: {} rule{}, {} proven; results in {}\n",
        chosen.len(),
        if chosen.len() == 1 { "" } else { "s" },
        tally.proven,
        out_dir.display()
    ));
    for warning in [
        bound.warning(),
        services::warning(&unserved),
        tally.unjudged_warning(args.ci),
    ]
    .into_iter()
    .flatten()
    {
        // Loud on both streams: a CI log reader and a job summary must both see it.
        holdfast_harness::output::print(&format!("{warning}\n"));
        eprintln!("{warning}");
    }
    Ok(if tally.passed(args.ci) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What the rules a run recorded (and those it cut off) add up to: its exit and its warning.
#[derive(Debug, Default)]
struct Tally {
    /// Rules recorded as proven.
    proven: usize,
    /// Whether a rule was recorded unproven.
    unproven: bool,
    /// Whether a recorded rule, or a cut-off one, showed an unjustified survivor.
    survived: bool,
    /// Rules recorded unproven without a survivor (no viable mutant, nothing to mutate or judge).
    unjudged: Vec<String>,
}

impl Tally {
    /// A rule's proof, as recorded. `demanded`: whether the rule's level demands proof; one that
    /// does not (SHOULD, MAY, informative) is proved and recorded, but fails no run.
    // i[impl prove.run+2]
    // i[impl spec-check.levels]
    fn record(&mut self, rule: &str, proof: &Proof, demanded: bool) {
        if proof.proven() {
            self.proven += 1;
        } else if demanded {
            self.unproven = true;
            if proof.missed == 0 {
                self.unjudged.push(rule.to_owned());
            }
        }
        self.survived |= demanded && proof.missed > 0;
    }

    /// What a cut-off rule had judged, when that can be read: a survivor seen is one whatever
    /// the untried mutants would have shown.
    // i[impl prove.run+2]
    fn cut_off(&mut self, tried: Option<&Proof>, demanded: bool) {
        self.survived |= demanded && tried.is_some_and(|tried| tried.missed > 0);
    }

    /// Whether the run passes: CI's fails on a survivor only (a touched rule with no viable
    /// mutant, or none to make, shows no weakened test and is warned of instead); any other run
    /// fails unless every recorded rule is proven.
    // i[impl prove.run+2]
    fn passed(&self, ci: bool) -> bool {
        if ci { !self.survived } else { !self.unproven }
    }

    /// CI's warning naming the touched rules recorded unproven without a survivor.
    // i[impl ci.prove+2]
    fn unjudged_warning(&self, ci: bool) -> Option<String> {
        (ci && !self.unjudged.is_empty()).then(|| {
            format!(
                "prove: WARNING: {} rule{} touched but not proven (no viable mutant, or nothing to mutate or judge): {}",
                self.unjudged.len(),
                if self.unjudged.len() == 1 { "" } else { "s" },
                self.unjudged.join(", ")
            )
        })
    }
}

/// `--summary`: the proof summary (docs/audit/proof.md unless configured) from target/prove/
/// over the file's earlier rows, for the current rules in spec order.
fn write_summary(disk: &spec_engine::Disk, all: &[Plan]) -> error::Result<ExitCode> {
    use spec_engine::Tree as _;
    let root = disk.root();
    let earlier = summary::read(disk);
    let mut proofs = Vec::new();
    for plan in all {
        let proof = local(disk, &plan.id).or_else(|| earlier.get(&plan.rule).cloned());
        if let Some(proof) = proof {
            proofs.push((plan.rule.clone(), proof));
        }
    }
    let file = spec_engine::model::paths::of(disk).proof;
    let path = root.join(&file);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&path, summary::render(&proofs))?;
    holdfast_harness::output::print(&format!(
        "prove: wrote {} ({} of {} rules recorded, {} proven)\n",
        file,
        proofs.len(),
        all.len(),
        proofs.iter().filter(|(_, p)| p.proven()).count()
    ));
    Ok(ExitCode::SUCCESS)
}

/// The short commit of `root`'s HEAD, `-dirty` when tracked files differ from it.
fn head_commit(root: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let head = git(&["rev-parse", "--short", "HEAD"])?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

fn timestamp_now() -> String {
    spec_engine::model::timestamp::utc(std::time::SystemTime::now())
}

/// `--stale`: the plans of the rules whose recorded proof no longer matches the tree.
// i[impl prove.stale]
fn stale_only(disk: &spec_engine::Disk, tree: &spec_check::Tree, all: Vec<Plan>) -> Vec<Plan> {
    let stale: std::collections::BTreeSet<String> = tree
        .rules()
        .iter()
        .filter(|rule| {
            spec_check::fingerprint::recorded(disk, tree, rule).is_some_and(|p| p.stale.is_some())
        })
        .map(spec_engine::spec_check::rules::Rule::marker)
        .collect();
    all.into_iter()
        .filter(|p| stale.contains(&p.rule))
        .collect()
}

/// The rules `args` asks for, of the work tree `tree` (at `root`).
fn select(
    root: &Path,
    args: &Options,
    tree: &spec_check::Tree,
    all: Vec<Plan>,
) -> Result<Vec<Plan>, String> {
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
        let tree_at = args
            .tree_at
            .ok_or("--changed-since: this build cannot read a revision's files")?;
        let then = tree_at(root, rev)?;
        return match plan::since(rev, plan::changed_since(&then, tree))? {
            plan::Since::Changed(changed) => Ok(all
                .into_iter()
                .filter(|p| changed.contains(&p.rule))
                .collect()),
            plan::Since::All { warning } => {
                eprintln!("{warning}");
                Ok(all)
            }
        };
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

/// The cargo-mutants arguments that choose the mutants of `plans`: their items' files and lines.
fn select_mutants(command: &mut Command, plans: &[&Plan]) {
    for file in plans
        .iter()
        .flat_map(|plan| plan.targets.iter().map(|t| t.file.as_str()))
        .collect::<std::collections::BTreeSet<_>>()
    {
        command.args(["--file", file]);
    }
    for pattern in plans.iter().flat_map(|plan| plan.name_patterns()) {
        command.args(["--re", &pattern]);
    }
}

/// Builds only the test binaries that hold the rule's verifying tests, in the baseline and for
/// every mutant: `--cargo-arg` reaches cargo-mutants' build phase (`nextest run --no-run`) and
/// its test phase alike, where arguments after `--` reach the test phase only. Building every
/// test binary of the package costs each mutant a compile of code no judging test runs.
// i[impl prove.targets]
fn select_test_targets(command: &mut Command, plan: &Plan) {
    for target in plan.test_targets().unwrap_or_default() {
        command.arg(format!("--cargo-arg={target}"));
    }
}

/// How many mutants each of `plans` makes (0 for one not provable), from one `cargo mutants
/// --list` over them all (no build, no test): a listing per rule costs a second or two, and a big
/// merge touches hundreds of rules.
// i[impl prove.budget+3]
fn count_mutants(root: &Path, plans: &[Plan]) -> error::Result<Vec<usize>> {
    let provable: Vec<&Plan> = plans.iter().filter(|p| p.provable()).collect();
    if provable.is_empty() {
        return Ok(vec![0; plans.len()]);
    }
    let mut command = Command::new("cargo");
    command
        .args(["mutants", "--list", "--json", "--colors", "never"])
        .current_dir(root);
    select_mutants(&mut command, &provable);
    let output = command.output()?;
    if !output.status.success() {
        return Err(Error::ListFailed {
            rules: provable
                .iter()
                .map(|p| p.rule.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    let listed = plan::listed(&output.stdout)?;
    Ok(plans
        .iter()
        .map(|p| {
            if p.provable() {
                p.mutants_among(&listed)
            } else {
                0
            }
        })
        .collect())
}

/// How one rule's cargo-mutants run ended.
enum Run {
    /// It judged every mutant.
    Done(Proof),
    /// The run's time cap ended it first; what it had judged by then, when that can be read.
    CutOff(Option<Proof>),
}

/// One cargo-mutants run: the rule's items, the rule's tests; ended (cargo-mutants reverts the
/// mutant it has applied, then exits) if still running at `deadline`.
fn prove_one(
    root: &Path,
    out_dir: &Path,
    plan: &Plan,
    timeout: Option<u64>,
    deadline: Option<std::time::Instant>,
) -> error::Result<Run> {
    let rule_dir = out_dir.join(&plan.id);
    let _ = std::fs::remove_dir_all(&rule_dir);
    // An earlier run's result must not stand for this one when this one fails (a failing
    // baseline, cargo-mutants' error): the rule then has no proof.
    let _ = std::fs::remove_file(out_dir.join(format!("{}.json", plan.id)));
    std::fs::create_dir_all(&rule_dir)?;
    let mut command = mutants_command(root, &rule_dir, plan);
    let baseline_test = match baseline(root, &rule_dir, plan, deadline)? {
        Baseline::Passed(took) => took,
        Baseline::CutOff => return Ok(Run::CutOff(None)),
    };
    command.args([
        "--timeout",
        &test_timeout(timeout, baseline_test).to_string(),
    ]);
    command.args(["--", "-E", &plan.test_filter()]);
    let log = std::fs::File::create(rule_dir.join("cargo-mutants.log"))?;
    // i[impl prove.pristine]
    let snapshot = pristine::Snapshot::take(root, plan.targets.iter().map(|t| t.file.as_str()));
    let ended = wait_or_cut_off(&mut command, log, plan, &outcomes_json(&rule_dir), deadline);
    // Whatever became of the run, the files it may have mutated are as they were.
    snapshot.ensure_restored(&plan.rule)?;
    let status = match ended? {
        Ended::Exited(status) => status,
        Ended::CutOff(tried) => return Ok(Run::CutOff(tried.map(|tried| *tried))),
    };
    let outcomes_json = outcomes_json(&rule_dir);
    // 0: all caught; 2: survivors; 3: timeouts. Anything else (usage, a failing baseline, an
    // interrupt) is no proof, and nothing is recorded.
    match status.code() {
        Some(0 | 2 | 3) => outcomes::read(&outcomes_json, status.code(), &|file, line| {
            plan.covers(file, line)
        })
        .map(Run::Done),
        code => Err(Error::MutantsFailed {
            code,
            rule: plan.rule.clone(),
            log: rule_dir.join("cargo-mutants.log"),
        }),
    }
}

/// The cargo-mutants command for the rule's mutants, before its `--timeout` and test filter. The
/// cargo it runs gets its environment: without what `cargo xtask` set for running xtask, so its
/// builds are a plain cargo's (`i[bench.no-rebuild+2]`).
// i[impl bench.no-rebuild+2]
fn mutants_command(root: &Path, rule_dir: &Path, plan: &Plan) -> Command {
    let mut command = holdfast_harness::root::cargo();
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
        .arg(rule_dir)
        .current_dir(root);
    select_mutants(&mut command, &[plan]);
    // Every feature on: an item or a test behind a feature (`#[cfg(feature = "tracing")]`) is
    // judged, never a survivor because its test was not compiled. Features here are additive.
    command.arg("--all-features");
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
    select_test_targets(&mut command, plan);
    // The rule's own skip ledger: a test that skips for want of a service is recorded there, so
    // the run is known to have judged nothing (`services::skipped`).
    command.env(services::LEDGER_VAR, rule_dir.join(services::LEDGER));
    pristine::quiet(&mut command);
    // cargo-mutants' own baseline builds and tests the mutated packages, not the test packages
    // each mutant gets: ours runs the rule's tests with the mutants' selection instead.
    command.args(["--baseline", "skip"]);
    // The baseline builds with the caller's rustflags: so must each mutant, whatever a
    // `.cargo/mutants.toml` says (capped lints would rebuild every dependency, twice per rule).
    command.args(["--cap-lints", "false"]);
    command
}

/// How the baseline (the rule's tests on the unmutated tree) ended, if it did not fail.
enum Baseline {
    /// It passed; its test phase took this long.
    Passed(std::time::Duration),
    /// The run's time cap ended it first.
    CutOff,
}

/// The `cargo nextest run` arguments each mutant of the rule is built and tested with (after
/// `nextest run`, before `-E`): the test packages, every feature, the test binaries.
// i[impl prove.targets]
fn nextest_selection(plan: &Plan) -> Vec<String> {
    let mut args: Vec<String> = match plan.test_packages() {
        Some(packages) => packages.iter().map(|p| format!("--package={p}")).collect(),
        None => vec!["--workspace".to_owned()],
    };
    args.push("--all-features".to_owned());
    args.extend(plan.test_targets().unwrap_or_default());
    args
}

/// Runs the rule's tests on the unmutated tree, built as each mutant is (`baseline_command`, so
/// the mutants reuse its build): a failure, or no test run, is an error and no proof. Logged to the rule's `baseline.log`.
// i[impl prove.targets]
fn baseline(
    root: &Path,
    rule_dir: &Path,
    plan: &Plan,
    deadline: Option<std::time::Instant>,
) -> error::Result<Baseline> {
    let log_path = rule_dir.join("baseline.log");
    let log = std::fs::File::create(&log_path)?;
    let mut test_took = std::time::Duration::ZERO;
    for phase in [Phase::Build, Phase::Test] {
        let mut command = baseline_command(root, rule_dir, plan, phase);
        // The command first, as cargo-mutants' logs have it, for a reader of the log.
        writeln!(&log, "*** {command:?}")?;
        let started = std::time::Instant::now();
        let mut child = group::spawn(command.stdout(log.try_clone()?).stderr(log.try_clone()?))?;
        let Some(status) = group::wait_until(&mut child, deadline)? else {
            return Ok(Baseline::CutOff);
        };
        if !status.success() {
            return Err(Error::UnmutatedFailed {
                phase: phase.name().to_owned(),
                rule: plan.rule.clone(),
                status: status.to_string(),
                log: log_path.clone(),
            });
        }
        test_took = started.elapsed();
    }
    Ok(Baseline::Passed(test_took))
}

/// A phase of the baseline, as cargo-mutants runs each mutant in two.
#[derive(Clone, Copy)]
enum Phase {
    /// `nextest run --no-run`.
    Build,
    /// `nextest run` with the rule's filter.
    Test,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Build => "build",
            Phase::Test => "test",
        }
    }
}

/// The baseline's cargo command for `phase`: cargo-mutants' own for a mutant (`cargo_argv` and
/// the environment of its `run_cargo`, with `--cap-lints false` as `prove_one` pins it): the same
/// selection, and the caller's rustflags untouched, so the mutants reuse the baseline's build and
/// the warm target directory. `--verbose`, which only changes the output, is left out. Like the
/// mutants' cargo, it runs without what `cargo xtask` set for running xtask
/// (`i[bench.no-rebuild+2]`).
// i[impl prove.targets]
// i[impl bench.no-rebuild+2]
fn baseline_command(root: &Path, rule_dir: &Path, plan: &Plan, phase: Phase) -> Command {
    let mut command = holdfast_harness::root::cargo();
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("NEXTEST") {
            command.env_remove(&name);
        }
    }
    command.args(["nextest", "run"]);
    if let Phase::Build = phase {
        command.arg("--no-run");
    }
    command.args(nextest_selection(plan));
    if let Phase::Test = phase {
        // No test run is no baseline: the filter names tests these binaries do not hold.
        command.args(["--no-tests=fail", "-E", &plan.test_filter()]);
    }
    command
        .env("INSTA_UPDATE", "no")
        .env("INSTA_FORCE_PASS", "0")
        .env(services::LEDGER_VAR, rule_dir.join(services::LEDGER))
        // cargo-mutants gives its cargo no stdin either: a test reading it sees its end.
        .stdin(std::process::Stdio::null())
        .current_dir(root);
    pristine::quiet(&mut command);
    command
}

/// The test timeout per mutant: the one given, else cargo-mutants' own rule from the baseline
/// (five times its test phase, at least 20 s).
fn test_timeout(given: Option<u64>, baseline_test: std::time::Duration) -> u64 {
    given.unwrap_or_else(|| (baseline_test.as_secs_f64() * 5.0).ceil().max(20.0) as u64)
}

fn outcomes_json(rule_dir: &Path) -> std::path::PathBuf {
    rule_dir.join("mutants.out/outcomes.json")
}

/// How cargo-mutants' process ended.
enum Ended {
    Exited(std::process::ExitStatus),
    // Boxed: a proof is far larger than an exit status.
    CutOff(Option<Box<Proof>>),
}

/// Runs cargo-mutants to its end, or ends it at `deadline`.
fn wait_or_cut_off(
    command: &mut Command,
    log: std::fs::File,
    plan: &Plan,
    outcomes_json: &Path,
    deadline: Option<std::time::Instant>,
) -> error::Result<Ended> {
    let mut child = command.stdout(log.try_clone()?).stderr(log).spawn()?;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Ended::Exited(status));
        }
        if deadline.is_some_and(|at| std::time::Instant::now() >= at) {
            // SIGTERM, not SIGKILL: cargo-mutants (ctrlc's termination handler) stops its cargo,
            // reverts the mutated file in place and exits; the caller checks that it did.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            child.wait()?;
            let tried = std::fs::read_to_string(outcomes_json)
                .ok()
                .and_then(|text| {
                    outcomes::parse(&text, &|file, line| plan.covers(file, line)).ok()
                });
            return Ok(Ended::CutOff(tried.map(Box::new)));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            rule: "r[a.b]".into(),
            id: "a.b".into(),
            targets: Vec::new(),
            judges: vec![plan::Judge {
                binary: Some("a::t".into()),
                name: "t".into(),
                package: Some("a".into()),
                file: "crates/a/tests/t.rs".into(),
                lines: None,
            }],
        }
    }

    fn args(command: &Command) -> Vec<String> {
        command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    // i[verify prove.targets]
    #[test]
    fn the_baseline_builds_with_the_mutants_rustflags_and_selection() {
        let (root, rule_dir) = (Path::new("/r"), Path::new("/r/target/prove/a.b"));
        let mutants = args(&mutants_command(root, rule_dir, &plan()));
        // cargo-mutants sets rustflags only with capped lints: pinned off, whatever its config.
        assert!(
            mutants.windows(2).any(|w| w == ["--cap-lints", "false"]),
            "{mutants:?}"
        );
        assert!(
            mutants.contains(&"--cargo-arg=--test=t".to_owned()),
            "{mutants:?}"
        );
        for phase in [Phase::Build, Phase::Test] {
            let command = baseline_command(root, rule_dir, &plan(), phase);
            for (name, value) in command.get_envs() {
                assert!(
                    name != "CARGO_ENCODED_RUSTFLAGS" && name != "RUSTFLAGS",
                    "the baseline must build as the mutants do: {name:?}={value:?}"
                );
            }
            let argv = args(&command);
            for wanted in ["--package=a", "--all-features", "--test=t"] {
                assert!(argv.contains(&wanted.to_owned()), "{argv:?}");
            }
            // A filter that matches nothing on the unmutated tree is no baseline.
            let test_phase = matches!(phase, Phase::Test);
            assert_eq!(
                argv.contains(&"--no-tests=fail".to_owned()),
                test_phase,
                "{argv:?}"
            );
            assert_eq!(argv.contains(&plan().test_filter()), test_phase, "{argv:?}");
        }
    }

    // i[verify bench.no-rebuild+2]
    #[test]
    fn the_baseline_and_the_mutants_build_without_what_cargo_set_for_running_xtask() {
        // `cargo test` sets these for this binary, as `cargo xtask` does for xtask.
        let set_for_this_run = ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME"];
        for name in set_for_this_run {
            assert!(std::env::var_os(name).is_some(), "{name} set by cargo test");
        }
        let (root, rule_dir) = (Path::new("/r"), Path::new("/r/target/prove/a.b"));
        let removed = |command: &Command| -> Vec<String> {
            command
                .get_envs()
                .filter(|(_, value)| value.is_none())
                .map(|(name, _)| name.to_string_lossy().into_owned())
                .collect()
        };
        let commands = [
            ("mutants", mutants_command(root, rule_dir, &plan())),
            (
                "build",
                baseline_command(root, rule_dir, &plan(), Phase::Build),
            ),
            (
                "test",
                baseline_command(root, rule_dir, &plan(), Phase::Test),
            ),
        ];
        for (what, command) in &commands {
            let gone = removed(command);
            for name in set_for_this_run {
                assert!(
                    gone.iter().any(|r| r == name),
                    "{what}: {name} removed: {gone:?}"
                );
            }
        }
    }

    // i[verify prove.targets]
    #[test]
    fn the_mutants_test_timeout_follows_cargo_mutants_rule_unless_given() {
        let secs = std::time::Duration::from_secs_f64;
        assert_eq!(test_timeout(Some(7), secs(100.0)), 7, "--timeout wins");
        assert_eq!(test_timeout(None, secs(1.0)), 20, "at least 20 s");
        assert_eq!(test_timeout(None, secs(4.0)), 20);
        assert_eq!(test_timeout(None, secs(10.1)), 51, "five times, rounded up");
    }

    fn proof(caught: usize, missed: usize, unviable: usize) -> Proof {
        Proof {
            caught,
            missed,
            unviable,
            ..Proof::default()
        }
    }

    // i[verify prove.run+2]
    // i[verify ci.prove+2]
    #[test]
    fn a_run_passes_when_every_recorded_rule_is_proven() {
        let mut tally = Tally::default();
        assert!(
            tally.passed(false) && tally.passed(true),
            "nothing recorded"
        );
        tally.record("r[a]", &proof(2, 0, 1), true);
        tally.record("r[b]", &proof(1, 0, 0), true);
        assert_eq!(tally.proven, 2);
        assert!(tally.passed(false) && tally.passed(true));
        assert_eq!(tally.unjudged_warning(true), None);
        tally.record("r[c]", &proof(0, 0, 3), true);
        assert_eq!(tally.proven, 2);
        assert!(
            !tally.passed(false),
            "a rule with no viable mutant is not proven"
        );
        assert!(tally.passed(true), "CI fails on a survivor only");
        let warning = tally.unjudged_warning(true).expect("CI names it");
        assert!(
            warning.contains("1 rule touched but not proven") && warning.ends_with(": r[c]"),
            "{warning}"
        );
        assert_eq!(tally.unjudged_warning(false), None, "CI's warning only");
        tally.record("r[d]", &proof(1, 1, 0), true);
        assert!(!tally.passed(true), "a survivor fails CI");
        assert_eq!(
            tally.unjudged,
            ["r[c]"],
            "a rule with a survivor was judged"
        );
        let not_provable = Proof {
            not_provable: Some("no test".into()),
            ..Proof::default()
        };
        let mut other = Tally::default();
        other.record("r[e]", &not_provable, true);
        assert!(!other.passed(false));
        assert!(other.passed(true));
        assert_eq!(other.unjudged, ["r[e]"]);
        let warning = Tally {
            unjudged: vec!["r[x]".into(), "r[y]".into()],
            ..Tally::default()
        }
        .unjudged_warning(true)
        .expect("a warning");
        assert!(warning.contains("2 rules touched") && warning.ends_with(": r[x], r[y]"));
    }

    // i[verify prove.run+2]
    #[test]
    fn a_survivor_seen_before_a_cut_off_fails_ci() {
        let mut tally = Tally::default();
        tally.cut_off(None, true);
        tally.cut_off(Some(&proof(3, 0, 1)), true);
        assert!(tally.passed(true) && tally.passed(false), "nothing missed");
        assert_eq!(tally.proven, 0, "a cut-off rule is not recorded");
        tally.cut_off(Some(&proof(0, 1, 0)), true);
        assert!(!tally.passed(true), "a survivor seen is one");
        tally.cut_off(Some(&proof(3, 0, 0)), true);
        assert!(!tally.passed(true), "and stays one");
    }

    // i[verify spec-check.levels]
    #[test]
    fn a_rule_whose_level_demands_no_proof_fails_no_run() {
        let mut tally = Tally::default();
        tally.record("r[should]", &proof(1, 1, 0), false);
        tally.record("r[may]", &proof(0, 0, 2), false);
        tally.cut_off(Some(&proof(0, 1, 0)), false);
        assert!(tally.passed(true) && tally.passed(false), "{tally:?}");
        assert_eq!(tally.unjudged_warning(true), None);
        // Proved and recorded whatever its level: a proven SHOULD rule counts as proven.
        tally.record("r[should.proven]", &proof(2, 0, 0), false);
        assert_eq!(tally.proven, 1);
        // The same proofs of MUST rules: proven passes, no viable mutant is named, a survivor fails.
        tally.record("r[must.proven]", &proof(2, 0, 0), true);
        assert_eq!(tally.proven, 2);
        assert!(tally.passed(true) && tally.passed(false), "{tally:?}");
        tally.record("r[must.unjudged]", &proof(0, 0, 2), true);
        assert!(tally.passed(true) && !tally.passed(false), "{tally:?}");
        assert_eq!(tally.unjudged, ["r[must.unjudged]"]);
        tally.record("r[must]", &proof(1, 1, 0), true);
        assert!(!tally.passed(true) && !tally.passed(false));
        assert_eq!(
            tally.unjudged,
            ["r[must.unjudged]"],
            "a survivor was judged"
        );
    }
}
