//! `cargo xtask trace`: the command line over the engine's trace ([`spec_engine::trace`]):
//! finding the root, the flags, choosing what to trace, printing and the exit codes (0 closed or
//! verified, 1 open or regressed, 2 a usage error).

use std::path::PathBuf;
use std::process::ExitCode;

use spec_engine::model::findings::{self, Finding};
use spec_engine::model::paths;
use spec_engine::spec_check::{self, suggest};
use spec_engine::trace::report::{self, Traced};
use spec_engine::trace::verdict::Verdict;
use spec_engine::trace::{results, rule_report, usable};
use spec_engine::{Disk, Tree};

/// Arguments of `cargo xtask trace`.
#[derive(clap::Args)]
pub struct Args {
    /// The finding (`H3`, see docs/audit/findings.md) or the rule (`actuate.image.retry`, with
    /// or without its `r[...]`) to trace.
    #[arg(
        value_name = "FINDING",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    finding: Option<String>,
    /// Trace every finding and end with one verdict line each.
    #[arg(long)]
    all: bool,
    /// Root of the tree (default: this workspace's root).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// JUnit file of a test run (default: the configured `results`,
    /// target/nextest/ci/junit.xml, when it exists). Repeatable: one report per test runner.
    #[arg(long, value_name = "JUNIT_XML")]
    results: Vec<PathBuf>,
    /// Skip ledger of that run (default: target/holdfast-test-skips.jsonl).
    #[arg(long, value_name = "LEDGER_JSONL")]
    skips: Option<PathBuf>,
    /// Trace annotations only, even when a results file exists.
    #[arg(long, conflicts_with_all = ["results", "skips"])]
    no_results: bool,
    /// A rule's trace as JSON (for tools).
    #[arg(long, conflicts_with_all = ["markdown", "all"])]
    json: bool,
    /// A rule's trace as markdown (for a pull-request comment).
    #[arg(long, conflicts_with = "all")]
    markdown: bool,
}

/// The exit code of a usage error (unknown finding, malformed findings file, broken config).
const USAGE_ERROR: u8 = crate::spec_check::USAGE_ERROR;

/// Runs the trace; see the module docs for the exit codes.
// i[impl trace.exit-code]
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let root = match crate::root::find(args.root.as_deref()) {
        Ok(root) => root,
        Err(message) => {
            eprintln!("error: trace: {message}");
            return Ok(ExitCode::from(USAGE_ERROR));
        }
    };
    // JSON is one object; the root is inside it.
    if !args.json {
        crate::output::print(&crate::root::banner(&root));
    }
    let root = Disk::new(root);
    let traced = paths::load(&root)
        .map_err(|error| error.to_string())
        .and_then(|_| dispatch(&root, &args));
    match traced {
        Ok((output, code)) => {
            crate::output::print(&output);
            Ok(code)
        }
        Err(message) => {
            eprintln!("error: {message}");
            Ok(ExitCode::from(USAGE_ERROR))
        }
    }
}

/// Reads the tree for a trace; a config or spec with problems of its own is an error.
fn read_tree(root: &Disk) -> Result<spec_check::Tree, String> {
    usable(spec_check::read(root)).map_err(|error| error.to_string())
}

/// `--json` and `--markdown` are a rule's formats: with a finding (or `--all`) a usage error.
// i[impl trace.rule-output]
fn refuse_rule_formats(args: &Args) -> Result<(), String> {
    if args.json || args.markdown {
        return Err(
            "--json and --markdown trace a rule (`cargo xtask trace RULE.ID --json`)".to_owned(),
        );
    }
    Ok(())
}

/// One `warning:` line (each after a newline) per verifying file edited after the results were
/// written.
// i[impl trace.freshness]
fn freshness_warnings(root: &Disk, tree: &spec_check::Tree, run: &results::Run) -> String {
    spec_check::freshness::outdated(root, tree.analyses(), &run.evidence, &[])
        .iter()
        .map(|problem| format!("\nwarning: {problem}"))
        .collect()
}

/// A rule id (`demo.alpha`, `r[demo.alpha]`) is traced as a rule; anything else (a finding id,
/// `--all`) as findings.
// i[impl trace.rule]
fn dispatch(root: &Disk, args: &Args) -> Result<(String, ExitCode), String> {
    match args.finding.as_deref() {
        Some(wanted) if rule_report::is_rule_id(wanted) => trace_rule(root, args, wanted),
        _ => trace(root, args),
    }
}

/// Traces one rule: exit 0 when it is verified, 1 when not, 2 for an unknown rule.
fn trace_rule(root: &Disk, args: &Args, wanted: &str) -> Result<(String, ExitCode), String> {
    let tree = read_tree(root)?;
    // A rule is traced even while the findings file is broken; spec-check reports that.
    let all = root
        .read(&root.root().join(paths::of(root).findings))
        .ok()
        .and_then(|text| findings::parse(&text).ok())
        .unwrap_or_default();
    let run = results::load(
        root,
        &args
            .results
            .iter()
            .map(PathBuf::as_path)
            .collect::<Vec<_>>(),
        args.skips.as_deref(),
        args.no_results,
    )
    .map_err(|error| error.to_string())?;
    note_record(run.as_ref());
    let evidence = run.as_ref().map(|r| (&r.evidence, r.source.as_str()));
    let report = rule_report::trace(root, &tree, &all, wanted, evidence)
        .map_err(|error| error.to_string())?;
    let format = if args.json {
        rule_report::Format::Json
    } else if args.markdown {
        rule_report::Format::Markdown
    } else {
        rule_report::Format::Text
    };
    let code = if report.verdict == "verified" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    Ok((rule_report::render(&report, format), code))
}

/// Traces what `args` asks for under `root`; the output and exit code, or a usage error.
// i[impl trace.exit-code]
fn trace(root: &Disk, args: &Args) -> Result<(String, ExitCode), String> {
    refuse_rule_formats(args)?;
    let all = findings::load(root).map_err(|error| error.to_string())?;
    let chosen: Vec<&Finding> = match &args.finding {
        Some(wanted) => vec![find(root, &all, wanted)?],
        None => all.iter().collect(),
    };
    let tree = read_tree(root)?;
    let run = results::load(
        root,
        &args
            .results
            .iter()
            .map(PathBuf::as_path)
            .collect::<Vec<_>>(),
        args.skips.as_deref(),
        args.no_results,
    )
    .map_err(|error| error.to_string())?;
    note_record(run.as_ref());

    let mut out = String::new();
    match &run {
        Some(run) => {
            out.push_str(&run.source);
            out.push_str(&freshness_warnings(root, &tree, run));
        }
        None => out.push_str(
            "test results: none — annotations only (`cargo xtask test` writes target/nextest/ci/junit.xml)",
        ),
    }
    out.push_str("\n\n");
    let evidence = run.as_ref().map(|r| &r.evidence);
    let traced: Vec<Traced> = spec_engine::trace::traced(root, &tree, chosen, evidence);
    for (index, one) in traced.iter().enumerate() {
        if index > 0 {
            out.push('\n');
        }
        report::finding(&mut out, one, &paths::of(root).findings);
    }
    let worst = traced
        .iter()
        .map(|t| t.judgement.verdict)
        .max()
        .unwrap_or(Verdict::Closed);
    let code = if args.all {
        out.push('\n');
        report::summary(&mut out, &traced);
        if worst == Verdict::Regressed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    } else if worst == Verdict::Closed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    Ok((out, code))
}

/// The finding `wanted` names (ids compare case-insensitively), or an error with a did-you-mean.
// i[impl trace.unknown]
fn find<'a>(root: &Disk, all: &'a [Finding], wanted: &str) -> Result<&'a Finding, String> {
    let wanted = wanted.trim();
    if let Some(found) = all.iter().find(|f| f.id.eq_ignore_ascii_case(wanted)) {
        return Ok(found);
    }
    let upper = wanted.to_ascii_uppercase();
    let lower = wanted.to_lowercase();
    let digits: String = wanted.chars().filter(char::is_ascii_digit).collect();
    // Suggest a finding whose title contains the word given, whose number is the one given
    // (`3`, `G3`), or whose id is one typo shorter (`H33`).
    let mut scored: Vec<(usize, &Finding)> = all
        .iter()
        .filter_map(|f| {
            let distance = suggest::edit_distance(&upper, &f.id);
            let in_title = lower.len() >= 3 && f.title.to_lowercase().contains(&lower);
            let same_number = !digits.is_empty() && f.id.get(1..) == Some(digits.as_str());
            (in_title || same_number || (distance <= 1 && upper.len() > f.id.len()))
                .then_some((if in_title { 0 } else { distance }, f))
        })
        .collect();
    scored.sort_by_key(|(distance, f)| (*distance, f.line));
    let hint = if scored.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = scored
            .iter()
            .take(3)
            .map(|(_, f)| format!("{} ({})", f.id, f.title))
            .collect();
        format!(" (did you mean {}?)", names.join(", "))
    };
    let known: Vec<&str> = all.iter().map(|f| f.id.as_str()).collect();
    Err(format!(
        "no finding `{wanted}` in {}{hint}; the findings are {}",
        paths::of(root).findings,
        known.join(", ")
    ))
}

/// The run's note when it has no usable evidence record, on stderr: its passes are judged by file
/// times only. A reader never writes a record.
// i[impl spec-check.test-backed.fingerprint+2]
fn note_record(run: Option<&results::Run>) {
    if let Some(note) = run.and_then(|r| r.evidence.record_note()) {
        eprintln!("note: {note}");
    }
}
