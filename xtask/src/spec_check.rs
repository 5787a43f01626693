//! `cargo xtask spec-check`: the command line over the engine's spec gate
//! ([`spec_engine::spec_check`]) and, with `--base`, over spec-git's review against a revision:
//! finding the root, the flags, writing the files asked for (`--export`, `--sarif`, the
//! baseline), printing and the exit code.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use spec_engine::spec_check::report::{self, Format};
use spec_engine::spec_check::{check_read, read};
use spec_engine::{ratchet, review};

/// Arguments of `cargo xtask spec-check`.
#[derive(clap::Args)]
pub struct Args {
    /// Root of the tree to check (default: the cargo workspace above the current directory).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Print the summary and problems as JSON.
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print a markdown table (for CI job summaries).
    #[arg(long)]
    markdown: bool,
    /// JUnit file of a test run: count a rule as verified only if one of its tests passed.
    /// Repeatable: one report per test runner (nextest, pytest, go-junit-report, jest, vitest).
    #[arg(long, value_name = "JUNIT_XML")]
    results: Vec<PathBuf>,
    /// Skip ledger (JSON lines) written by holdfast-test-support during that run.
    #[arg(long, value_name = "LEDGER_JSONL", requires = "results")]
    skips: Option<PathBuf>,
    /// With --results from a run of only these packages: judge by test results only the rules
    /// their tests verify (the others by annotations). Repeatable.
    #[arg(long = "crate", value_name = "PACKAGE", requires = "results")]
    crates: Vec<String>,
    /// Also review the change from this git revision (a commit, branch or tag; in CI the merge
    /// base with the main branch): rules added, removed, renamed, reworded without a bump, code
    /// and tests changed under each rule, annotations moved, coverage before and after.
    #[arg(long, value_name = "REV")]
    base: Option<String>,
    /// Also write every rule with its text, level, version, sites, tests and their results,
    /// proof and the findings it closes to FILE as JSON (docs/audit/spec-export.schema.json).
    /// A relative FILE is taken from the workspace root.
    #[arg(long, value_name = "FILE.json")]
    export: Option<PathBuf>,
    /// Also write every problem of the gate (and of the review, with --base) to FILE as SARIF
    /// 2.1.0, for GitHub's code scanning. A relative FILE is taken from the workspace root.
    #[arg(long, value_name = "FILE")]
    sarif: Option<PathBuf>,
    /// First write docs/audit/coverage-baseline.toml from the tree now: the ratchet then fails
    /// on any rule recorded there that loses a measure no waiver (docs/audit/waivers.toml)
    /// covers. Without --results the tested rules recorded are kept; refused with --crate,
    /// whose run judges only some rules by their tests.
    #[arg(long, conflicts_with = "crates")]
    update_baseline: bool,
}

/// Exit code of a usage or fatal error: nothing was judged.
pub(crate) const USAGE_ERROR: u8 = holdfast_harness::exit::USAGE_ERROR;

/// Runs the gate: exit 0 when every rule is implemented and verified and every reference is sound,
/// 1 (with the list of problems) otherwise, 2 when it could not judge (no such root, unusable
/// results).
// i[impl spec-check.exit-code+2]
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let root = match crate::root::find(args.root.as_deref()) {
        Ok(root) => root,
        Err(message) => {
            eprintln!("error: spec-check: {message}");
            return Ok(ExitCode::from(USAGE_ERROR));
        }
    };
    let format = if args.json {
        Format::Json
    } else if args.markdown {
        Format::Markdown
    } else {
        Format::Text
    };
    let results: Vec<PathBuf> = args
        .results
        .iter()
        .map(|p| root_relative(&root, p))
        .collect();
    let results: Vec<&Path> = results.iter().map(PathBuf::as_path).collect();
    let skips = args.skips.as_deref().map(|p| root_relative(&root, p));
    let export = args.export.as_deref().map(|p| output_path(&root, p));
    let sarif = args.sarif.as_deref().map(|p| output_path(&root, p));
    let export_failed = |file: &Path, error: String| {
        eprintln!("error: spec-check: --export {}: {error}", file.display());
        eprintln!("error: spec-check: nothing was judged (exit 2)");
        Ok(ExitCode::from(USAGE_ERROR))
    };
    if let Some(base) = &args.base {
        return review_run_to(
            &root,
            base,
            &results,
            skips.as_deref(),
            &args.crates,
            &Outputs {
                format,
                sarif: sarif.as_deref(),
                export: export.as_deref(),
                update_baseline: args.update_baseline,
            },
        );
    }
    // Read once: the gate borrows the tree, the export's trace takes it and hands it back.
    let disk = spec_engine::Disk::new(&root);
    let read_now = read(&disk);
    match check_read(&disk, &read_now, &results, skips.as_deref(), &args.crates) {
        Ok(mut outcome) => {
            // The export before the ratchet: a run whose export fails judges nothing, so it must
            // not have rewritten the baseline first.
            let tree = match &export {
                Some(file) => {
                    match write_export(&disk, read_now, file, &results, skips.as_deref()) {
                        Ok(tree) => Some(tree),
                        Err(error) => return export_failed(file, error),
                    }
                }
                None => read_now.ok().map(|(_, tree)| tree),
            };
            if let Some(tree) = &tree
                && let Err(error) = ratchet_run(&disk, tree, &mut outcome, args.update_baseline)
            {
                eprintln!("error: spec-check: --update-baseline: {error}");
                return Ok(ExitCode::from(USAGE_ERROR));
            }
            crate::output::print(&report::render(&outcome, format));
            if let Some(file) = &sarif
                && let Err(error) = write_sarif(&root, file, &outcome.problems, &[])
            {
                eprintln!("error: spec-check: --sarif {}: {error}", file.display());
                return Ok(ExitCode::from(USAGE_ERROR));
            }
            Ok(if outcome.problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Err(fatal) => {
            if format == Format::Text {
                crate::output::print(&crate::root::banner(&root));
            }
            for line in spec_engine::gate::fatal_lines(&fatal) {
                eprintln!("{line}");
            }
            Ok(ExitCode::from(USAGE_ERROR))
        }
    }
}

/// `spec-check --export FILE`: every rule of the tree at `root`, traced (by `results` when
/// given), written to `file` as JSON. Returns the tree, which the trace took.
// i[impl spec-check.export+2]
fn write_export(
    disk: &spec_engine::Disk,
    read: Result<
        (
            spec_engine::spec_check::config::Loaded,
            spec_engine::spec_check::Tree,
        ),
        spec_engine::spec_check::problem::Problem,
    >,
    file: &Path,
    results: &[&Path],
    skips: Option<&Path>,
) -> Result<spec_engine::spec_check::Tree, String> {
    let everything = spec_engine::trace::everything(disk, read, results, skips, results.is_empty())
        .map_err(|err| err.to_string())?;
    let export = spec_engine::export::export(disk, &everything);
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|err| err.to_string())?;
    }
    std::fs::write(file, spec_engine::export::render(&export)).map_err(|err| err.to_string())?;
    Ok(everything.tree)
}

/// Today's date in UTC, `YYYY-MM-DD`: the day waivers are judged on.
fn today() -> String {
    spec_engine::gate::today(std::time::SystemTime::now())
}

/// The waivers and the ratchet on the work tree (`tree`, read from `disk`): their problems join
/// the gate's outcome; with `update` the baseline is first written from the counts now. Returns
/// the live waivers, which the review honours.
// i[impl spec-check.ratchet]
// i[impl spec-check.waivers]
fn ratchet_run(
    disk: &spec_engine::Disk,
    tree: &spec_engine::spec_check::Tree,
    outcome: &mut spec_engine::spec_check::report::Outcome,
    update: bool,
) -> Result<ratchet::Waivers, String> {
    use spec_engine::Tree as _;
    let today = today();
    if update {
        let path = disk.root().join(ratchet::BASELINE);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|err| err.to_string())?;
        }
        std::fs::write(&path, ratchet::baseline(disk, tree, outcome))
            .map_err(|err| format!("{}: {err}", path.display()))?;
    }
    spec_engine::gate::apply_ratchet(disk, tree, outcome, &today);
    Ok(ratchet::waivers(disk, tree, &today))
}

/// `spec-check --sarif FILE`: the gate's and the review's problems written to `file`.
// i[impl spec-check.sarif]
fn write_sarif(
    root: &Path,
    file: &Path,
    gate: &[spec_engine::spec_check::problem::Problem],
    review: &[review::Problem],
) -> Result<(), String> {
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|err| err.to_string())?;
    }
    std::fs::write(file, spec_engine::sarif::render(root, gate, review))
        .map_err(|err| err.to_string())
}

/// `spec-check --base REV`: the gate on the work tree, and the review of the change from REV.
#[cfg(test)]
fn review_run(
    root: &Path,
    base: &str,
    results: &[&Path],
    skips: Option<&Path>,
    crates: &[String],
    format: Format,
) -> anyhow::Result<ExitCode> {
    let out = Outputs {
        format,
        sarif: None,
        export: None,
        update_baseline: false,
    };
    review_run_to(root, base, results, skips, crates, &out)
}

/// What `spec-check --base` prints and writes besides judging.
struct Outputs<'a> {
    /// The report's format.
    format: Format,
    /// `--sarif FILE`.
    sarif: Option<&'a Path>,
    /// `--export FILE`.
    export: Option<&'a Path>,
    /// `--update-baseline`.
    update_baseline: bool,
}

/// [`review_run`], also writing the problems to `out.sarif` when given and the baseline when
/// asked.
// i[impl spec-check.review]
// i[impl spec-check.sarif]
fn review_run_to(
    root: &Path,
    base: &str,
    results: &[&Path],
    skips: Option<&Path>,
    crates: &[String],
    out: &Outputs<'_>,
) -> anyhow::Result<ExitCode> {
    let (format, sarif, update_baseline) = (out.format, out.sarif, out.update_baseline);
    // The work tree is read once: the review borrows it, the export's trace takes it and hands it
    // back for the ratchet.
    let disk = spec_engine::Disk::new(root);
    let read_now = read(&disk);
    // The base is read once: the review judges it, the waivers' changes are taken from it.
    let reviewed = match spec_git::read(root, base) {
        Ok(then) => spec_git::review(base, &then, &disk, &read_now, results, skips, crates)
            .map(|(review, outcome)| (review, outcome, then)),
        Err(error) => Err(spec_git::review::Error::Base(error)),
    };
    match reviewed {
        Ok((mut review, mut outcome, then)) => {
            // The export before the ratchet: a run whose export fails judges nothing, so it must
            // not have rewritten the baseline first.
            let tree = match out.export {
                Some(file) => match write_export(&disk, read_now, file, results, skips) {
                    Ok(tree) => Some(tree),
                    Err(error) => {
                        eprintln!("error: spec-check: --export {}: {error}", file.display());
                        eprintln!("error: spec-check: nothing was judged (exit 2)");
                        return Ok(ExitCode::from(USAGE_ERROR));
                    }
                },
                None => read_now.ok().map(|(_, tree)| tree),
            };
            // The waivers and the ratchet judge the work tree; the review honours the waivers.
            if let Some(tree) = &tree {
                match ratchet_run(&disk, tree, &mut outcome, update_baseline) {
                    Ok(waivers) => ratchet::honour(&mut review, &waivers),
                    Err(error) => {
                        eprintln!("error: spec-check: --update-baseline: {error}");
                        return Ok(ExitCode::from(USAGE_ERROR));
                    }
                }
            }
            crate::output::print(&review::render(&review, &outcome, format));
            // What the change did to the waivers and the baseline, for the reviewer to judge.
            if let Some(note) = changes_note(format, base, &ratchet::changes(&then, &disk)) {
                crate::output::print(&note);
            }
            if let Some(file) = sarif
                && let Err(error) = write_sarif(root, file, &outcome.problems, &review.problems)
            {
                eprintln!("error: spec-check: --sarif {}: {error}", file.display());
                return Ok(ExitCode::from(USAGE_ERROR));
            }
            Ok(if outcome.problems.is_empty() && review.passes() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Err(error) => {
            eprintln!("error: spec-check: {}", review_error(&error));
            eprintln!("error: spec-check: nothing was judged (exit 2)");
            Ok(ExitCode::from(USAGE_ERROR))
        }
    }
}

/// What the change did to the waivers and the coverage baseline, after a text or Markdown
/// review (a JSON review stays one document); nothing when it did nothing to them.
// i[impl spec-check.review]
fn changes_note(format: Format, base: &str, changes: &[String]) -> Option<String> {
    if format == Format::Json || changes.is_empty() {
        return None;
    }
    let lines: Vec<String> = changes.iter().map(|c| format!("- {c}\n")).collect();
    Some(format!(
        "\nWaivers and coverage baseline changed since {base}:\n{}",
        lines.concat()
    ))
}

/// Where `--export` or `--sarif` writes: a relative path is taken from the workspace root, as a
/// `--results` file not found under the working directory is.
// i[impl spec-check.export+2]
// i[impl spec-check.sarif]
fn output_path(root: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        root.join(path)
    }
}

/// A path given on the command line, read relative to the current directory when it exists
/// there, else relative to the root.
fn root_relative(root: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() || path.exists() {
        path.to_path_buf()
    } else {
        root.join(path)
    }
}

/// Why `--base` judged nothing, naming the flag when the revision could not be read.
fn review_error(error: &spec_git::review::Error) -> String {
    match error {
        spec_git::review::Error::Base(error) => format!("--base {error}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use spec_git::fixture::{REVIEW_LIB, REVIEW_SPEC, git, two_commits};

    use super::*;

    // i[verify spec-check.review]
    #[test]
    fn the_waivers_and_baseline_changes_follow_a_text_or_markdown_review_only() {
        let changes = ["waiver added: r[x.y] (verify)".to_owned()];
        assert_eq!(
            changes_note(Format::Text, "HEAD~1", &changes).as_deref(),
            Some(
                "\nWaivers and coverage baseline changed since HEAD~1:\n- waiver added: r[x.y] (verify)\n"
            )
        );
        assert_eq!(
            changes_note(Format::Markdown, "b", &changes),
            changes_note(Format::Text, "b", &changes)
        );
        assert_eq!(changes_note(Format::Json, "b", &changes), None);
        assert_eq!(changes_note(Format::Text, "b", &[]), None);
    }

    // i[verify spec-check.review]
    #[test]
    fn with_git_a_review_that_fails_exits_1_and_a_revision_naming_no_commit_2() {
        let dir = two_commits(
            &REVIEW_SPEC.replace("Beta holds.", "Beta holds, always."),
            REVIEW_LIB,
        );
        let root = dir.path().canonicalize().expect("root");
        let code = review_run(&root, "HEAD~1", &[], None, &[], Format::Json).expect("ran");
        assert_eq!(code, ExitCode::FAILURE);
        let code = review_run(&root, "HEAD", &[], None, &[], Format::Json).expect("ran");
        assert_eq!(code, ExitCode::SUCCESS);
        let code = review_run(&root, "no-such-rev", &[], None, &[], Format::Text).expect("ran");
        assert_eq!(code, ExitCode::from(USAGE_ERROR));
        let err = spec_git::review_work_tree(&root, "no-such-rev", &[], None, &[])
            .expect_err("no commit");
        assert!(
            review_error(&err).starts_with("--base no-such-rev: no such commit"),
            "{err}"
        );
    }

    // i[verify spec-check.export+2]
    #[test]
    fn export_writes_every_rule_and_a_broken_tree_is_a_usage_error() {
        let dir = two_commits(REVIEW_SPEC, REVIEW_LIB);
        let root = dir.path().canonicalize().expect("root");
        let out = root.join("target/export/spec.json");
        let disk = spec_engine::Disk::new(&root);
        write_export(&disk, read(&disk), &out, &[], None).expect("written");
        let export: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).expect("the file")).expect("JSON");
        assert_eq!(export["schema"], spec_engine::export::SCHEMA);
        let markers: Vec<&str> = export["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .filter_map(|r| r["marker"].as_str())
            .collect();
        assert_eq!(markers, ["r[demo.alpha]", "r[demo.beta]"]);
        // A spec the trace cannot read writes nothing.
        std::fs::write(root.join(".config/tracey/config.styx"), "specs (").expect("write");
        let broken = root.join("broken.json");
        assert!(write_export(&disk, read(&disk), &broken, &[], None).is_err());
        assert!(!broken.exists());
    }

    // i[verify spec-check.sarif]
    #[test]
    fn with_git_the_reviews_problems_are_written_as_sarif() {
        let dir = two_commits(
            REVIEW_SPEC,
            &REVIEW_LIB.replace("    // r[verify demo.beta]\n", ""),
        );
        let (code, kinds) = review_sarif(&dir, "out/spec.sarif");
        assert_eq!(code, ExitCode::FAILURE);
        // The gate's problem on the work tree and the review's.
        assert_eq!(kinds, ["missing-verify", "coverage-down"]);
    }

    /// Reviews `dir`'s head against HEAD~1 with the SARIF log written to `out` (under the
    /// root): the exit code and the kinds of the log's results, in order.
    fn review_sarif(dir: &tempfile::TempDir, out: &str) -> (ExitCode, Vec<String>) {
        let root = dir.path().canonicalize().expect("root");
        let out = root.join(out);
        let code = review_run_to(
            &root,
            "HEAD~1",
            &[],
            None,
            &[],
            &Outputs {
                format: Format::Json,
                sarif: Some(&out),
                export: None,
                update_baseline: false,
            },
        )
        .expect("ran");
        let log: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).expect("the log")).expect("JSON");
        let kinds = log["runs"][0]["results"]
            .as_array()
            .expect("results")
            .iter()
            .filter_map(|r| r["ruleId"].as_str().map(str::to_owned))
            .collect();
        (code, kinds)
    }

    // i[verify spec-check.sarif]
    #[test]
    fn with_git_a_review_problem_alone_fails_the_run_and_is_its_logs_one_result() {
        // The work tree passes the gate; only the review finds a problem.
        let dir = two_commits(
            &REVIEW_SPEC.replace("Beta holds.", "Beta holds, always."),
            REVIEW_LIB,
        );
        let (code, kinds) = review_sarif(&dir, "spec.sarif");
        assert_eq!(code, ExitCode::FAILURE);
        assert_eq!(kinds, ["text-changed-without-bump"]);
    }

    /// The demo's proof summary: demo.alpha proven.
    const REVIEW_PROOF: &str = "# Proof\n\n| rule | verdict | caught | missed | unviable | timeout | justified | commit | date |\n|---|---|---|---|---|---|---|---|---|\n| `r[demo.alpha]` | proven | 3 | 0 | 0 | 0 | - | abc1234 | 2026-12-01 |\n";

    /// A repository whose base commit has the demo tree with demo.alpha proven, and whose head
    /// (the work tree) lost that proof and has `waivers` (none when empty).
    fn proof_lost(waivers: &str) -> tempfile::TempDir {
        let dir = two_commits(REVIEW_SPEC, REVIEW_LIB);
        let root = dir.path();
        std::fs::create_dir_all(root.join("docs/audit")).expect("mkdir");
        std::fs::write(root.join("docs/audit/proof.md"), REVIEW_PROOF).expect("write");
        git(root, &["add", "-A"]);
        git(root, &["commit", "--quiet", "-m", "proven"]);
        std::fs::write(root.join("docs/audit/proof.md"), "# Proof\n").expect("write");
        if !waivers.is_empty() {
            std::fs::write(root.join("docs/audit/waivers.toml"), waivers).expect("write");
        }
        git(root, &["add", "-A"]);
        git(root, &["commit", "--quiet", "-m", "lose the proof"]);
        dir
    }

    /// A waiver of demo.alpha's proof holding through today (a waiver may reach a year ahead).
    fn waive_alpha() -> String {
        format!(
            "[[waiver]]\nrule = \"r[demo.alpha]\"\nwaives = [\"proven\"]\nwhy = \"its mutants time out\"\nuntil = {}\n",
            today()
        )
    }

    // i[verify spec-check.waivers]
    // i[verify spec-check.review.coverage]
    #[test]
    fn with_git_a_lost_proof_fails_the_review_unless_a_live_waiver_covers_it() {
        let out = |dir: &tempfile::TempDir| {
            let root = dir.path().canonicalize().expect("root");
            let sarif = root.join("target/spec.sarif");
            let code = review_run_to(
                &root,
                "HEAD~1",
                &[],
                None,
                &[],
                &Outputs {
                    format: Format::Text,
                    sarif: Some(&sarif),
                    export: None,
                    update_baseline: false,
                },
            )
            .expect("ran");
            let log: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&sarif).expect("log")).expect("JSON");
            let kinds: Vec<String> = log["runs"][0]["results"]
                .as_array()
                .expect("results")
                .iter()
                .filter_map(|r| r["ruleId"].as_str().map(str::to_owned))
                .collect();
            (code, kinds)
        };
        // Without a waiver: coverage-down.
        assert_eq!(
            out(&proof_lost("")),
            (ExitCode::FAILURE, vec!["coverage-down".to_owned()])
        );
        // With a live one: nothing.
        assert_eq!(
            out(&proof_lost(&waive_alpha())),
            (ExitCode::SUCCESS, vec![])
        );
        // With an expired one: the waiver is a problem and covers nothing.
        let expired = waive_alpha().replace(&today(), "2020-01-01");
        assert_eq!(
            out(&proof_lost(&expired)),
            (
                ExitCode::FAILURE,
                vec!["waiver".to_owned(), "coverage-down".to_owned()]
            )
        );
    }

    // i[verify spec-check.export+2]
    // i[verify spec-check.sarif]
    #[test]
    fn output_files_resolve_from_the_root_like_the_results() {
        let root = Path::new("/work/repo");
        assert_eq!(
            output_path(root, Path::new("target/spec.sarif")),
            root.join("target/spec.sarif")
        );
        // Even when a file of that name exists under the working directory.
        assert_eq!(
            output_path(root, Path::new("Cargo.toml")),
            root.join("Cargo.toml")
        );
        assert_eq!(
            output_path(root, Path::new("/tmp/out.json")),
            Path::new("/tmp/out.json")
        );
    }

    // i[verify spec-check.export+2]
    // i[verify spec-check.ratchet]
    #[test]
    fn an_export_that_cannot_be_written_leaves_the_baseline_alone() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let dir = two_commits(REVIEW_SPEC, REVIEW_LIB);
        let root = dir.path().canonicalize().expect("root");
        let baseline = root.join(ratchet::BASELINE);
        std::fs::create_dir_all(baseline.parent().expect("dir")).expect("dir");
        std::fs::write(&baseline, "# before\n").expect("write");
        // A file under a regular file: no directory can be made for it.
        std::fs::write(root.join("plain"), "").expect("write");
        let cli = Cli::try_parse_from([
            "spec-check",
            "--root",
            root.to_str().expect("utf-8"),
            "--update-baseline",
            "--export",
            "plain/x.json",
        ])
        .expect("parsed");
        let code = super::run(cli.args).expect("ran");
        assert_eq!(code, ExitCode::from(USAGE_ERROR));
        assert_eq!(
            std::fs::read_to_string(&baseline).expect("baseline"),
            "# before\n",
            "nothing was judged, so nothing is written"
        );
        // With --base too, and a writable export is written from the one read of the tree.
        let with_base = |export: &str| {
            let cli = Cli::try_parse_from([
                "spec-check",
                "--root",
                root.to_str().expect("utf-8"),
                "--base",
                "HEAD",
                "--update-baseline",
                "--export",
                export,
            ])
            .expect("parsed");
            super::run(cli.args).expect("ran")
        };
        assert_eq!(with_base("plain/x.json"), ExitCode::from(USAGE_ERROR));
        assert_eq!(
            std::fs::read_to_string(&baseline).expect("baseline"),
            "# before\n"
        );
        assert_eq!(with_base("out/x.json"), ExitCode::SUCCESS);
        assert!(root.join("out/x.json").exists());
        assert_ne!(
            std::fs::read_to_string(&baseline).expect("baseline"),
            "# before\n"
        );
    }

    // i[verify spec-check.ratchet]
    #[test]
    fn update_baseline_refuses_a_run_of_some_crates_only() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let base = ["spec-check", "--results", "junit.xml", "--crate", "demo"];
        assert!(Cli::try_parse_from(base).is_ok());
        let refused = Cli::try_parse_from(base.into_iter().chain(["--update-baseline"]));
        assert!(refused.is_err());
        assert!(Cli::try_parse_from(["spec-check", "--update-baseline"]).is_ok());
    }

    // i[verify spec-check.ratchet]
    #[test]
    fn update_baseline_writes_todays_counts_and_a_later_loss_fails_the_gate() {
        /// The gate's and the ratchet's problems on the work tree of `dir`, after writing the
        /// baseline when `update`. (The proof summary is read once per process and root, so
        /// each state is a repository of its own.)
        fn judge(
            dir: &tempfile::TempDir,
            update: bool,
        ) -> Vec<spec_engine::spec_check::problem::Problem> {
            let root = dir.path().canonicalize().expect("root");
            let disk = spec_engine::Disk::new(&root);
            let read_now = read(&disk);
            let mut outcome = check_read(&disk, &read_now, &[], None, &[]).expect("judged");
            let (_, tree) = read_now.expect("read");
            ratchet_run(&disk, &tree, &mut outcome, update).expect("ratchet");
            outcome.problems
        }
        // The base's tree, with its proof: the baseline records one rule proven.
        let proven = proof_lost("");
        std::fs::write(proven.path().join("docs/audit/proof.md"), REVIEW_PROOF).expect("write");
        assert_eq!(judge(&proven, true), Vec::new());
        let baseline =
            std::fs::read_to_string(proven.path().join(ratchet::BASELINE)).expect("written");
        assert!(
            baseline.contains("proven = [\"r[demo.alpha]\"]"),
            "{baseline}"
        );
        // The proof lost: the ratchet fails, naming the rule.
        let lost = proof_lost("");
        std::fs::write(lost.path().join(ratchet::BASELINE), &baseline).expect("write");
        let problems = judge(&lost, false);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].kind.name(), "ratchet");
        assert!(
            problems[0].message.contains("r[demo.alpha]"),
            "{problems:?}"
        );
        // A live waiver covers it.
        let waived = proof_lost(&waive_alpha());
        std::fs::write(waived.path().join(ratchet::BASELINE), &baseline).expect("write");
        assert_eq!(judge(&waived, false), Vec::new());
    }
}
