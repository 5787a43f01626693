//! `cargo xtask spec-check`: the command line over the engine's spec gate
//! ([`spec_engine::spec_check`]): finding the root, the flags, printing and the exit code.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use spec_engine::spec_check::report::{self, Format};
use spec_engine::spec_check::{check, check_read, parity, read};
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
pub(crate) const USAGE_ERROR: u8 = 2;

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
    match review_read(root, base, &disk, &read_now, results, skips, crates) {
        Ok((mut review, mut outcome)) => {
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
            if format != report::Format::Json
                && let Ok(then) = at_rev::tree(root, base)
            {
                let changes = ratchet::changes(&then, &disk);
                if !changes.is_empty() {
                    let lines: Vec<String> = changes.iter().map(|c| format!("- {c}\n")).collect();
                    crate::output::print(&format!(
                        "\nWaivers and coverage baseline changed since {base}:\n{}",
                        lines.concat()
                    ));
                }
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
            eprintln!("error: spec-check: {error}");
            eprintln!("error: spec-check: nothing was judged (exit 2)");
            Ok(ExitCode::from(USAGE_ERROR))
        }
    }
}

/// The review of the work tree at `root` against the commit `base` names, and the gate's outcome
/// on the work tree (judged by `results` when given; the base by its annotations).
#[cfg(test)]
fn review_at(
    root: &Path,
    base: &str,
    results: &[&Path],
    skips: Option<&Path>,
    crates: &[String],
) -> Result<(review::Review, spec_engine::spec_check::report::Outcome), String> {
    let now = spec_engine::Disk::new(root);
    review_read(root, base, &now, &read(&now), results, skips, crates)
}

/// [`review_at`] with the work tree `now` already read as `read_now`.
// i[impl spec-check.review]
fn review_read(
    root: &Path,
    base: &str,
    now: &spec_engine::Disk,
    read_now: &Result<
        (
            spec_engine::spec_check::config::Loaded,
            spec_engine::spec_check::Tree,
        ),
        spec_engine::spec_check::problem::Problem,
    >,
    results: &[&Path],
    skips: Option<&Path>,
    crates: &[String],
) -> Result<(review::Review, spec_engine::spec_check::report::Outcome), String> {
    let then = at_rev::tree(root, base)?;
    let outcome = check_read(now, read_now, results, skips, crates).map_err(|p| p.to_string())?;
    let read_then = read(&then);
    let outcome_then = check_read(&then, &read_then, &[], None, &[]).map_err(|p| p.to_string())?;
    // A side whose config cannot be read has no rules to compare: the gate says why.
    let empty = spec_engine::spec_check::Tree::empty;
    let (empty_now, empty_then) = (empty(), empty());
    let tree_now = read_now.as_ref().map_or(&empty_now, |(_, tree)| tree);
    let tree_then = read_then.as_ref().map_or(&empty_then, |(_, tree)| tree);
    let review = review::compare(
        base,
        review::Side {
            source: &then,
            tree: tree_then,
            outcome: &outcome_then,
        },
        review::Side {
            source: now,
            tree: tree_now,
            outcome: &outcome,
        },
    );
    Ok((review, outcome))
}

/// The files of the revision `rev` of the workspace at `root`, read as `--base` reads them:
/// what `cargo xtask prove --changed-since REV` compares the tree with.
// i[impl prove.changed+2]
pub(crate) fn changed_since_tree(root: &Path, rev: &str) -> Result<spec_engine::Memory, String> {
    at_rev::tree(root, rev).map_err(|error| error.replacen("--base ", "--changed-since ", 1))
}

/// Reading the files of a commit with git, into a memory tree the engine reads like any other.
///
/// git runs as a process here, in the command line, because the engine runs none; `git ls-tree`
/// and one `git cat-file --batch` read a whole tree in two processes, and need no new dependency
/// (gix would add some hundred crates to every build of the gate for this one read).
mod at_rev {
    use std::collections::BTreeMap;
    use std::ffi::OsStr;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::path::Path;
    use std::process::{Command, Stdio};

    /// The files of the commit `rev` under `root` (its path in the repository: a workspace below
    /// a repository's top reads only its own part), as a memory tree, read as the gate walks the
    /// work tree: files its `.gitignore` and `.ignore` files ignore are left out (tracked or not),
    /// a link to a file or directory of the tree reads as what it links to, and submodules, paths
    /// that are not UTF-8 and files that are not UTF-8 text are skipped (the engine reads nothing
    /// else).
    // i[impl spec-check.review]
    pub fn tree(root: &Path, rev: &str) -> Result<spec_engine::Memory, String> {
        tree_with(OsStr::new("git"), root, rev)
    }

    /// [`tree`] with the git program `program`.
    pub fn tree_with(
        program: &OsStr,
        root: &Path,
        rev: &str,
    ) -> Result<spec_engine::Memory, String> {
        let git = |args: &[&str]| git(program, root, args);
        let commit = git(&[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("{rev}^{{commit}}"),
        ])
        .map_err(|err| match err {
            Git::CannotRun(err) => format!("--base {rev}: {err}"),
            Git::Failed(err) => format!("--base {rev}: no such commit ({err})"),
        })?;
        let commit = String::from_utf8_lossy(&commit);
        let listing = git(&["ls-tree", "-r", "-z", commit.trim()])
            .map_err(|err| format!("--base {rev}: cannot list its files: {err}"))?;
        let entries = entries(&listing);
        let texts = blobs(program, root, entries.iter().map(|e| e.id.as_str()))
            .map_err(|err| format!("--base {rev}: cannot read its files: {err}"))?;
        let mut files: BTreeMap<String, String> = BTreeMap::new();
        let mut links: Vec<(String, String)> = Vec::new();
        for (entry, text) in entries.into_iter().zip(texts) {
            let Some(text) = text else { continue };
            if entry.link {
                links.push((entry.path, text));
            } else {
                files.insert(entry.path, text);
            }
        }
        let ignored = Ignored::new(&files);
        let mut tree = spec_engine::Memory::new(
            files
                .iter()
                .filter(|(path, _)| !ignored.is_ignored(path))
                .map(|(path, text)| (path.as_str(), text.as_str())),
        );
        for (link, target) in links {
            if ignored.is_ignored(&link) {
                continue;
            }
            if let Some(target) = link_target(&files, &link, &target) {
                tree.link(&link, &target);
            }
        }
        Ok(tree)
    }

    /// One blob or link of a listing.
    struct Entry {
        id: String,
        path: String,
        link: bool,
    }

    /// The blobs and links of `git ls-tree -r -z` output; other entries (submodules) and paths
    /// that are not UTF-8 are skipped.
    fn entries(listing: &[u8]) -> Vec<Entry> {
        listing
            .split(|&b| b == 0)
            .filter_map(|entry| {
                let tab = entry.iter().position(|&b| b == b'\t')?;
                let meta = std::str::from_utf8(&entry[..tab]).ok()?;
                let path = std::str::from_utf8(&entry[tab + 1..]).ok()?;
                let mut fields = meta.split(' ');
                let (mode, kind, id) = (fields.next()?, fields.next()?, fields.next()?);
                (kind == "blob").then(|| Entry {
                    id: id.to_owned(),
                    path: path.to_owned(),
                    link: mode == "120000",
                })
            })
            .collect()
    }

    /// The root-relative path the link at `link` (its text `target`) names, when it is a file
    /// or a directory of the tree (a link out of the tree reads as nothing).
    fn link_target(files: &BTreeMap<String, String>, link: &str, target: &str) -> Option<String> {
        if target.starts_with('/') {
            return None;
        }
        let mut resolved: Vec<&str> = link.split('/').collect();
        resolved.pop();
        for part in target.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    resolved.pop()?;
                }
                part => resolved.push(part),
            }
        }
        let resolved = resolved.join("/");
        let prefix = format!("{resolved}/");
        let exists = files.contains_key(&resolved)
            || files
                .range(prefix.clone()..)
                .next()
                .is_some_and(|(path, _)| path.starts_with(&prefix));
        exists.then_some(resolved)
    }

    /// The `.gitignore` and `.ignore` files of a tree, per directory, matched as the gate's walk
    /// matches them on the disk: a deeper file's rule wins, and `.ignore` wins over `.gitignore`.
    struct Ignored {
        /// Directory ("" for the top) → its matchers, strongest first.
        by_dir: BTreeMap<String, Vec<ignore::gitignore::Gitignore>>,
    }

    impl Ignored {
        fn new(files: &BTreeMap<String, String>) -> Self {
            let mut by_dir: BTreeMap<String, Vec<ignore::gitignore::Gitignore>> = BTreeMap::new();
            for name in [".ignore", ".gitignore"] {
                for (path, text) in files {
                    let dir = match path.rsplit_once('/') {
                        Some((dir, file)) if file == name => dir,
                        None if path == name => "",
                        _ => continue,
                    };
                    let mut builder = ignore::gitignore::GitignoreBuilder::new(Self::at(dir));
                    for line in text.lines() {
                        // A line that is no valid pattern is skipped, as the walk skips it.
                        let _ = builder.add_line(None, line);
                    }
                    if let Ok(matcher) = builder.build() {
                        by_dir.entry(dir.to_owned()).or_default().push(matcher);
                    }
                }
            }
            Self { by_dir }
        }

        /// A root-relative path as the absolute path the matchers are rooted under.
        fn at(path: &str) -> std::path::PathBuf {
            Path::new("/").join(path)
        }

        /// Whether the walk leaves `path` out: it, or a directory above it, is ignored.
        fn is_ignored(&self, path: &str) -> bool {
            if self.by_dir.is_empty() {
                return false;
            }
            let parts: Vec<&str> = path.split('/').collect();
            (1..=parts.len()).any(|depth| {
                let candidate = parts[..depth].join("/");
                let is_dir = depth < parts.len();
                // The directories whose files rule on it, deepest first.
                (0..depth).rev().find_map(|up| {
                    let matchers = self.by_dir.get(&parts[..up].join("/"))?;
                    matchers.iter().find_map(|m| {
                        let matched = m.matched(Self::at(&candidate), is_dir);
                        (!matched.is_none()).then(|| matched.is_ignore())
                    })
                }) == Some(true)
            })
        }
    }

    /// Why git gave no answer.
    enum Git {
        /// The program cannot be run (not installed, not on `PATH`).
        CannotRun(String),
        /// It ran and failed.
        Failed(String),
    }

    impl std::fmt::Display for Git {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                Git::CannotRun(err) | Git::Failed(err) => f.write_str(err),
            }
        }
    }

    /// `PROGRAM -C root ARGS`'s standard output.
    fn git(program: &OsStr, root: &Path, args: &[&str]) -> Result<Vec<u8>, Git> {
        let output = Command::new(program)
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .map_err(|err| Git::CannotRun(format!("cannot run git: {err}")))?;
        if !output.status.success() {
            return Err(Git::Failed(format!(
                "git {} failed ({}){}",
                args.first().copied().unwrap_or_default(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
                    .lines()
                    .next()
                    .map_or_else(String::new, |line| format!(": {line}"))
            )));
        }
        Ok(output.stdout)
    }

    /// The contents of the blobs `ids`, in order, through one `git cat-file --batch`; `None` for
    /// a blob that is not UTF-8.
    fn blobs<'a>(
        program: &OsStr,
        root: &Path,
        ids: impl Iterator<Item = &'a str>,
    ) -> Result<Vec<Option<String>>, String> {
        let ids: Vec<&str> = ids.collect();
        let mut child = Command::new(program)
            .arg("-C")
            .arg(root)
            .args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // git's own message, if it has one, is the user's best clue.
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|err| format!("cannot run git: {err}"))?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("git cat-file has no pipes".to_owned());
        };
        // Written from a thread of its own: git answers while it reads, and both pipes are finite.
        let asked: String = ids.iter().map(|id| format!("{id}\n")).collect();
        let writer = std::thread::spawn(move || stdin.write_all(asked.as_bytes()));
        let mut out = BufReader::new(stdout);
        let mut read_all = || -> Result<Vec<Option<String>>, String> {
            let mut texts = Vec::with_capacity(ids.len());
            for id in &ids {
                let mut header = String::new();
                out.read_line(&mut header)
                    .map_err(|err| format!("git cat-file: {err}"))?;
                // `<id> <type> <size>`, or `<id> missing`.
                let size: usize = header
                    .split_whitespace()
                    .nth(2)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| format!("git cat-file: no object {id} ({})", header.trim()))?;
                let mut body = vec![0; size + 1];
                out.read_exact(&mut body)
                    .map_err(|err| format!("git cat-file: {err}"))?;
                body.pop();
                texts.push(String::from_utf8(body).ok());
            }
            Ok(texts)
        };
        let texts = read_all();
        drop(out);
        // On an early error git may still be writing: end it, so it is reaped either way.
        if texts.is_err() {
            let _ = child.kill();
        }
        let _ = writer.join();
        let _ = child.wait();
        texts
    }
}

/// A path given on the command line, read relative to the current directory when it exists
/// there, else relative to the root.
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

fn root_relative(root: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() || path.exists() {
        path.to_path_buf()
    } else {
        root.join(path)
    }
}

/// Arguments of `cargo xtask tracey-parity`.
#[derive(clap::Args)]
pub struct ParityArgs {
    /// Root of the workspace compared beside the shapes (default: the cargo workspace above the
    /// current directory).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// The tracey 1.3.0 binary (default: `$TRACEY`, else `tracey` on `PATH`).
    #[arg(long, value_name = "BIN")]
    tracey: Option<PathBuf>,
    /// Also write the table as markdown to FILE (docs/audit/tracey-parity.md).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// The command that writes `docs/audit/tracey-parity.md`, as the page names it.
const PARITY_COMMAND: &str = "cargo xtask tracey-parity --out docs/audit/tracey-parity.md";

/// Runs tracey and the gate on every workspace shape and on the workspace and prints their counts
/// side by side: exit 0 when every difference is explained, 1 otherwise, 2 without a tracey.
// i[impl spec-check.parity+2]
pub fn parity(args: ParityArgs) -> anyhow::Result<ExitCode> {
    let root = match crate::root::find(args.root.as_deref()) {
        Ok(root) => root,
        Err(message) => {
            eprintln!("error: tracey-parity: {message}");
            return Ok(ExitCode::from(USAGE_ERROR));
        }
    };
    let Some(tracey) = find_tracey(args.tracey) else {
        eprintln!(
            "error: tracey-parity: no tracey (or no such file): pass --tracey BIN, set TRACEY, or \
             put tracey on PATH \
             (cargo install --locked tracey --version 1.3.0; its build needs Node and pnpm)"
        );
        return Ok(ExitCode::from(USAGE_ERROR));
    };
    compare_all(
        &root,
        &|| Command::new(&tracey),
        &tracey.display().to_string(),
        args.out.as_deref(),
        RETRY_PAUSE,
    )
}

/// How many times `query status` is asked while tracey answers `Error: Cancelled`.
const ATTEMPTS: usize = 6;

/// The pause between those asks.
const RETRY_PAUSE: Duration = Duration::from_secs(2);

/// [`parity`] with tracey run by `tracey()` (shown as `shown`), pausing `pause` between asks.
fn compare_all(
    root: &Path,
    tracey: &dyn Fn() -> Command,
    shown: &str,
    out: Option<&Path>,
    pause: Duration,
) -> anyhow::Result<ExitCode> {
    let version = tracey()
        .arg("--version")
        .output()
        .map_err(|err| anyhow::anyhow!("cannot run {shown}: {err}"))?;
    let version = String::from_utf8_lossy(&version.stdout)
        .lines()
        .next()
        .unwrap_or("tracey (version unknown)")
        .trim()
        .to_owned();
    // The shapes' trees, and tracey's daemon state (XDG_STATE_HOME), in a directory of this run's.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let guard = WorkDir::new(
        std::env::temp_dir().join(format!("holdfast-tracey-parity-{}-{n}", std::process::id())),
    )?;
    let work = &guard.0;
    let state = work.join("state");
    std::fs::create_dir_all(&state)?;
    let ask = Ask {
        tracey,
        shown,
        state: &state,
        pause,
    };
    let compared = (|| -> anyhow::Result<Vec<parity::Comparison>> {
        let mut compared = Vec::new();
        for shape in spec_engine::shapes::all() {
            let dir = work.join("trees").join(shape.name);
            for (path, text) in &shape.files {
                let path = dir.join(path);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(path, text)?;
            }
            compared.push(compare_one(&ask, shape.name, &dir.canonicalize()?)?);
        }
        compared.push(compare_one(&ask, "this workspace", root)?);
        Ok(compared)
    })();
    let compared = compared?;
    let page = parity::render(&compared, PARITY_COMMAND, &version);
    crate::output::print(&page);
    if let Some(out) = out {
        std::fs::write(out, &page)
            .map_err(|err| anyhow::anyhow!("cannot write {}: {err}", out.display()))?;
    }
    Ok(if compared.iter().all(parity::Comparison::agrees) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A directory of this run's, made new (never one left by another process, whose files could be
/// anyone's) and removed when dropped, a panic included.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new(path: PathBuf) -> anyhow::Result<Self> {
        std::fs::create_dir(&path)
            .map_err(|err| anyhow::anyhow!("cannot make {}: {err}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How to ask tracey: its command, its name in errors, its daemon's state directory, and the
/// pause between asks.
struct Ask<'a> {
    tracey: &'a dyn Fn() -> Command,
    shown: &'a str,
    state: &'a Path,
    pause: Duration,
}

/// The path `path` names, absolute: relative to `cwd` when it has a directory part, else found on
/// `path_var` (as a shell finds a command); `None` when no such file exists.
fn resolve(path: &Path, cwd: &Path, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let found = if path.components().count() > 1 || path.is_absolute() {
        cwd.join(path)
    } else {
        std::env::split_paths(path_var?)
            .map(|dir| dir.join(path))
            .find(|candidate| candidate.is_file())?
    };
    // `query status` runs in each tree's directory, where a relative path names another file.
    found.canonicalize().ok()
}

/// The tracey binary: `given` (`--tracey`), else `$TRACEY`, else `tracey` on `PATH`, [resolved](resolve) to an absolute path.
fn find_tracey(given: Option<PathBuf>) -> Option<PathBuf> {
    let given = given.or_else(|| {
        std::env::var_os("TRACEY")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
    });
    let cwd = std::env::current_dir().ok()?;
    let path_var = std::env::var_os("PATH");
    resolve(
        given.as_deref().unwrap_or(Path::new("tracey")),
        &cwd,
        path_var.as_deref(),
    )
}

/// The gate and `tracey query status` on the tree at `dir` (tracey's daemon is stopped after).
fn compare_one(ask: &Ask<'_>, name: &str, dir: &Path) -> anyhow::Result<parity::Comparison> {
    let outcome = check(&spec_engine::Disk::new(dir), &[], None, &[])
        .map_err(|problem| anyhow::anyhow!("{name}: the gate cannot judge the tree: {problem}"))?;
    let run = |args: &[&str]| {
        (ask.tracey)()
            .args(args)
            .current_dir(dir)
            .env("XDG_STATE_HOME", ask.state)
            .output()
    };
    // The first query starts tracey's daemon and gives up when it takes more than 5 s to listen
    // (a big tree on a busy machine), answering `Error: Cancelled`: ask again while it starts.
    let _daemon = Daemon(&run);
    let mut attempts = 0;
    let output = loop {
        if attempts > 0 {
            std::thread::sleep(ask.pause);
        }
        attempts += 1;
        let output = run(&["query", "status"])
            .map_err(|err| anyhow::anyhow!("cannot run {}: {err}", ask.shown))?;
        let cancelled = String::from_utf8_lossy(&output.stdout)
            .lines()
            .any(|line| line.trim() == "Error: Cancelled");
        if !cancelled {
            break output;
        }
        if attempts == ATTEMPTS {
            anyhow::bail!(
                "{name}: tracey answered `Error: Cancelled` (its daemon did not start) after \
                 {attempts} attempts"
            );
        }
    };
    let answer = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let said = |stream: &str, text: &str| {
        if text.trim().is_empty() {
            String::new()
        } else {
            format!("; its {stream}: {}", text.trim())
        }
    };
    if !output.status.success() {
        anyhow::bail!(
            "{name}: `{} query status` failed ({}){}{}",
            ask.shown,
            output.status,
            said("stderr", &stderr),
            said("stdout", &answer)
        );
    }
    let answer = parity::parse(&answer)
        .map_err(|err| anyhow::anyhow!("{name}: {err}{}", said("stderr", &stderr)))?;
    Ok(parity::compare(name, &outcome, &answer))
}

/// Stops tracey's daemon (`tracey kill`) when dropped, on every way out of [`compare_one`].
struct Daemon<'a, F: Fn(&[&str]) -> std::io::Result<std::process::Output>>(&'a F);

impl<F: Fn(&[&str]) -> std::io::Result<std::process::Output>> Drop for Daemon<'_, F> {
    fn drop(&mut self) {
        let _ = (self.0)(&["kill"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stand_in::Script;

    /// A root tree (the first workspace shape) under `dir`, and a stand-in tracey in `dir` whose
    /// `query status` runs `query` (sh; `$calls` is a file it may count its calls in), noting each
    /// call's first argument and directory's name in `dir/calls`.
    fn root_and_tracey(dir: &Path, query: &str) -> (PathBuf, Script) {
        let root = dir.join("root");
        for (path, text) in &spec_engine::shapes::all()[0].files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        let calls = dir.join("calls");
        let script = Script::new(
            dir,
            "tracey.sh",
            &format!(
                "calls='{}'\n\
                 echo \"$1 $(basename \"$PWD\")\" >> \"$calls\"\n\
                 case \"$1\" in\n\
                 --version) echo 'tracey 1.3.0'; exit 0;;\n\
                 kill) exit 0;;\n\
                 esac\n\
                 {query}\n",
                calls.display()
            ),
        );
        (root, script)
    }

    /// The stand-in's calls, one line each.
    fn calls(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("calls"))
            .expect("tracey was called")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The command on the stand-in, with no pause between asks.
    fn run(root: &Path, tracey: &Script, out: Option<&Path>) -> anyhow::Result<ExitCode> {
        compare_all(root, &|| tracey.command(), "tracey.sh", out, Duration::ZERO)
    }

    /// One coverage line tracey could print, equal to no tree's counts.
    const ODD: &str = "echo 'other/rust: 0 of 7 requirements are covered. 0 of 7 have a \
                       verification reference.'";

    // i[verify spec-check.parity+2]
    #[test]
    fn counts_that_differ_fail_with_exit_1_and_unexplained_rows() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (root, tracey) = root_and_tracey(dir.path(), ODD);
        let page = dir.path().join("parity.md");
        let code = run(&root, &tracey, Some(&page)).expect("judged");
        assert_eq!(code, ExitCode::FAILURE);
        let page = std::fs::read_to_string(page).expect("the page");
        assert!(
            page.contains("| this workspace | other/rust | 7/0/0/0 | — | **unexplained**: the gate has no such row |"),
            "{page}"
        );
        // tracey asked once per tree (nine shapes and the root), its daemon stopped after each.
        let calls = calls(dir.path());
        assert!(calls[0].starts_with("--version "), "{calls:?}");
        assert_eq!(calls.iter().filter(|c| c.starts_with("query ")).count(), 10);
        assert_eq!(calls.iter().filter(|c| c.starts_with("kill ")).count(), 10);
    }

    // i[verify spec-check.parity+2]
    #[test]
    fn a_failing_tracey_is_an_error_with_its_status_and_stderr() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (root, tracey) = root_and_tracey(dir.path(), "echo 'boom: daemon crashed' >&2\nexit 3");
        let err = run(&root, &tracey, None).expect_err("nothing to judge");
        let err = format!("{err:#}");
        assert!(
            err.contains("several_specs_and_impls")
                && err.contains("exit status: 3")
                && err.contains("boom: daemon crashed"),
            "{err}"
        );
        // Coverage lines from a tracey that then fails are not trusted either.
        let dir = tempfile::tempdir().expect("temp dir");
        let (root, tracey) = root_and_tracey(dir.path(), &format!("{ODD}\nexit 1"));
        let err = format!("{:#}", run(&root, &tracey, None).expect_err("failed"));
        assert!(err.contains("exit status: 1"), "{err}");
        // An answer that says nothing usable names what tracey said on stderr.
        let dir = tempfile::tempdir().expect("temp dir");
        let (root, tracey) = root_and_tracey(dir.path(), "echo 'hmm' >&2");
        let err = format!("{:#}", run(&root, &tracey, None).expect_err("unusable"));
        assert!(
            err.contains("no coverage line") && err.contains("hmm"),
            "{err}"
        );
    }

    // i[verify spec-check.parity+2]
    #[test]
    fn only_cancelled_is_asked_again_and_the_error_says_how_often() {
        // Cancelled once while the daemon starts, then an answer: judged.
        let dir = tempfile::tempdir().expect("temp dir");
        let (root, tracey) = root_and_tracey(
            dir.path(),
            &format!(
                "if [ \"$(grep -c '^query' \"$calls\")\" = 1 ]; then echo 'Error: Cancelled'; exit 1; fi\n{ODD}"
            ),
        );
        assert_eq!(
            run(&root, &tracey, None).expect("judged"),
            ExitCode::FAILURE
        );
        let calls = calls(dir.path());
        assert_eq!(
            calls[1..4],
            [
                "query several_specs_and_impls",
                "query several_specs_and_impls",
                "kill several_specs_and_impls"
            ],
            "{calls:?}"
        );
        // Cancelled every time: an error after every attempt.
        let dir = tempfile::tempdir().expect("temp dir");
        let (root, tracey) = root_and_tracey(dir.path(), "echo 'Error: Cancelled'");
        let err = format!("{:#}", run(&root, &tracey, None).expect_err("cancelled"));
        assert!(
            err.contains(&format!("after {ATTEMPTS} attempts")) && err.contains("Cancelled"),
            "{err}"
        );
        assert_eq!(
            self::calls(dir.path())
                .iter()
                .filter(|c| c.starts_with("query "))
                .count(),
            ATTEMPTS
        );
        // Any other error is not asked again.
        let dir = tempfile::tempdir().expect("temp dir");
        let (root, tracey) = root_and_tracey(dir.path(), "echo 'Error: config is broken'");
        let err = format!("{:#}", run(&root, &tracey, None).expect_err("broken"));
        assert!(err.contains("Error: config is broken"), "{err}");
        assert_eq!(
            self::calls(dir.path())
                .iter()
                .filter(|c| c.starts_with("query "))
                .count(),
            1
        );
    }

    /// The config of the review fixtures: one spec, one Rust impl.
    const REVIEW_CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";

    const REVIEW_SPEC: &str =
        "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n\n> r[demo.beta]\n> Beta holds.\n";

    const REVIEW_LIB: &str = "// r[impl demo.alpha]\npub fn alpha() -> u32 {\n    1\n}\n\n// r[impl demo.beta]\npub fn beta() {}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds() {\n        assert_eq!(super::alpha(), 1);\n    }\n\n    // r[verify demo.beta]\n    #[test]\n    fn beta_holds() {\n        super::beta();\n    }\n}\n";

    /// `git ARGS` in `dir`, which must succeed.
    fn git(dir: &Path, args: &[&str]) {
        let status = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?}");
    }

    /// A repository of two commits: the demo tree, then the demo tree with `spec` and `lib`
    /// (the work tree is the second commit). Returns the temp dir.
    fn two_commits(spec: &str, lib: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        };
        git(root, &["init", "--quiet"]);
        write(".config/tracey/config.styx", REVIEW_CONFIG);
        write("docs/spec.md", REVIEW_SPEC);
        write("src/lib.rs", REVIEW_LIB);
        git(root, &["add", "-A"]);
        git(root, &["commit", "--quiet", "-m", "base"]);
        write("docs/spec.md", spec);
        write("src/lib.rs", lib);
        git(root, &["add", "-A"]);
        git(
            root,
            &["commit", "--quiet", "--allow-empty", "-m", "change"],
        );
        dir
    }

    fn review_of_last_commit(dir: &tempfile::TempDir) -> review::Review {
        let root = dir.path().canonicalize().expect("root");
        let (review, _) = review_at(&root, "HEAD~1", &[], None, &[]).expect("reviewed");
        review
    }

    fn review_kinds(review: &review::Review) -> Vec<review::Kind> {
        review.problems.iter().map(|p| p.kind).collect()
    }

    // i[verify spec-check.review]
    // i[verify spec-check.review.rules+2]
    #[test]
    fn with_git_text_changed_without_a_bump_fails_the_review() {
        let dir = two_commits(
            &REVIEW_SPEC.replace("Beta holds.", "Beta holds, always."),
            REVIEW_LIB,
        );
        let review = review_of_last_commit(&dir);
        assert_eq!(
            review_kinds(&review),
            [review::Kind::TextChangedWithoutBump]
        );
        assert_eq!(review.unbumped[0].rule, "r[demo.beta]");
        assert_eq!(review.base, "HEAD~1");
        // The base was read from git, not from the work tree: an unchanged repository is clean.
        let root = dir.path().canonicalize().expect("root");
        let (same, outcome) = review_at(&root, "HEAD", &[], None, &[]).expect("reviewed");
        assert!(same.passes() && same.unbumped.is_empty(), "{same:?}");
        assert!(outcome.problems.is_empty(), "{:?}", outcome.problems);
        // The command exits 1 on it.
        let code = review_run(&root, "HEAD~1", &[], None, &[], Format::Json).expect("ran");
        assert_eq!(code, ExitCode::FAILURE);
    }

    // i[verify spec-check.review]
    #[test]
    fn with_git_a_revision_that_names_no_commit_is_a_usage_error() {
        let dir = two_commits(REVIEW_SPEC, REVIEW_LIB);
        let root = dir.path().canonicalize().expect("root");
        let err = review_at(&root, "no-such-rev", &[], None, &[]).expect_err("no commit");
        assert!(err.contains("--base no-such-rev: no such commit"), "{err}");
        let code = review_run(&root, "no-such-rev", &[], None, &[], Format::Text).expect("ran");
        assert_eq!(code, ExitCode::from(USAGE_ERROR));
    }

    // i[verify spec-check.review.rename]
    #[test]
    fn with_git_a_rename_naming_its_previous_id_is_a_rename() {
        let dir = two_commits(
            &REVIEW_SPEC.replace(
                "> r[demo.beta]\n> Beta holds.",
                "> r[demo.bravo]\n> Beta holds. (was demo.beta)",
            ),
            &REVIEW_LIB.replace("demo.beta]", "demo.bravo]"),
        );
        let review = review_of_last_commit(&dir);
        assert!(review.passes(), "{:?}", review.problems);
        assert!(review.added.is_empty() && review.removed.is_empty());
        assert_eq!(
            (
                review.renamed[0].from.as_str(),
                review.renamed[0].to.rule.as_str()
            ),
            ("r[demo.beta]", "r[demo.bravo]")
        );
    }

    // i[verify spec-check.review.items]
    #[test]
    fn with_git_impl_changed_with_tests_unchanged_is_shown() {
        let dir = two_commits(REVIEW_SPEC, &REVIEW_LIB.replace("    1\n}", "    2\n}"));
        let review = review_of_last_commit(&dir);
        assert_eq!(review.touched.len(), 1, "{:?}", review.touched);
        assert_eq!(review.touched[0].rule, "r[demo.alpha]");
        assert_eq!(review.touched[0].changed, review::Changed::ImplOnly);
        assert!(review.passes());
    }

    // i[verify spec-check.review.coverage]
    #[test]
    fn with_git_coverage_going_down_fails_the_review() {
        let dir = two_commits(
            REVIEW_SPEC,
            &REVIEW_LIB.replace("    // r[verify demo.beta]\n", ""),
        );
        let review = review_of_last_commit(&dir);
        assert_eq!(review_kinds(&review), [review::Kind::CoverageDown]);
        let row = &review.coverage[0];
        assert_eq!(
            (
                row.before.map(|c| c.verified),
                row.after.map(|c| c.verified)
            ),
            (Some(2), Some(1))
        );
    }

    /// A repository of one commit holding the demo tree, `.gitignore` ignoring
    /// `src/generated.rs` (tracked all the same, and holding beta's only verify), `src/extra.rs`
    /// a link to `other/extra.rs` (holding alpha's second verify), and `extra` (raw bytes as
    /// path, text): what the work tree and a revision must read alike.
    fn repo_with(extra: &[(&[u8], &[u8])]) -> tempfile::TempDir {
        repo_under("", extra)
    }

    /// [`repo_with`], its workspace in the directory `under` of the repository ("" for the top).
    fn repo_under(under: &str, extra: &[(&[u8], &[u8])]) -> tempfile::TempDir {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let top = dir.path();
        git(top, &["init", "--quiet"]);
        let root = &top.join(under);
        std::fs::create_dir_all(root).expect("mkdir");
        let write = |path: &Path, text: &[u8]| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        };
        write(
            Path::new(".config/tracey/config.styx"),
            REVIEW_CONFIG.as_bytes(),
        );
        write(Path::new("docs/spec.md"), REVIEW_SPEC.as_bytes());
        let lib = REVIEW_LIB.replace("    // r[verify demo.beta]\n", "");
        write(Path::new("src/lib.rs"), lib.as_bytes());
        write(Path::new(".gitignore"), b"src/generated.rs\n");
        write(
            Path::new("src/generated.rs"),
            b"// r[verify demo.beta]\n#[test]\nfn generated() {}\n",
        );
        write(
            Path::new("other/extra.rs"),
            b"// r[verify demo.alpha]\n#[test]\nfn extra() {}\n",
        );
        std::os::unix::fs::symlink("../other/extra.rs", root.join("src/extra.rs")).expect("link");
        for (path, text) in extra {
            write(Path::new(std::ffi::OsStr::from_bytes(path)), text);
        }
        git(root, &["add", "-A"]);
        git(root, &["add", "-f", "src/generated.rs"]);
        git(root, &["commit", "--quiet", "-m", "base"]);
        dir
    }

    /// The review of the work tree against `HEAD`, which it equals.
    fn review_of_unchanged(dir: &tempfile::TempDir) -> review::Review {
        review_of_unchanged_under(dir, "")
    }

    fn review_of_unchanged_under(dir: &tempfile::TempDir, under: &str) -> review::Review {
        let root = dir.path().join(under).canonicalize().expect("root");
        let (review, _) = review_at(&root, "HEAD", &[], None, &[]).expect("reviewed");
        review
    }

    /// Nothing changed, so nothing is said: the whole review is empty.
    fn assert_empty(review: &review::Review) {
        assert!(review.passes(), "{:?}", review.problems);
        assert!(
            review.added.is_empty()
                && review.removed.is_empty()
                && review.touched.is_empty()
                && review.annotations.is_empty(),
            "{review:?}"
        );
        for row in &review.coverage {
            assert_eq!(row.before, row.after, "{row:?}");
        }
    }

    // i[verify spec-check.review]
    #[test]
    fn with_git_a_revision_is_read_as_the_work_tree_is_ignored_files_and_links_alike() {
        let dir = repo_with(&[]);
        assert_empty(&review_of_unchanged(&dir));
    }

    // i[verify spec-check.review]
    #[test]
    fn with_git_a_path_that_is_not_utf8_is_skipped() {
        let dir = repo_with(&[(b"notes/caf\xe9.txt", b"latin-1 name\n")]);
        assert_empty(&review_of_unchanged(&dir));
    }

    /// Everything git may hold that the engine does not read, in one repository whose workspace
    /// is a directory below its top: a submodule, a blob that is not UTF-8, a path that is not
    /// UTF-8, an ignored tracked file and a link (from [`repo_under`]).
    // i[verify spec-check.review]
    #[test]
    fn with_git_a_workspace_below_the_top_with_everything_git_holds_reads_alike() {
        let dir = repo_under(
            "ws",
            &[
                (b"notes/blob.bin", b"\xff\xfe\x00binary"),
                (b"notes/caf\xe9.txt", b"latin-1 name\n"),
            ],
        );
        let top = dir.path();
        // A submodule: a gitlink entry (mode 160000), no directory in the work tree.
        let commit = String::from_utf8(
            Command::new("git")
                .arg("-C")
                .arg(top)
                .args(["rev-parse", "HEAD"])
                .output()
                .expect("git runs")
                .stdout,
        )
        .expect("utf-8");
        git(
            top,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{},ws/vendor/sub", commit.trim()),
            ],
        );
        git(top, &["commit", "--quiet", "-m", "submodule"]);
        assert_empty(&review_of_unchanged_under(&dir, "ws"));
    }

    // i[verify spec-check.review]
    #[test]
    fn with_git_an_empty_base_tree_has_every_rule_added() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        git(root, &["init", "--quiet"]);
        git(root, &["commit", "--quiet", "--allow-empty", "-m", "empty"]);
        std::fs::create_dir_all(root.join(".config/tracey")).expect("mkdir");
        std::fs::create_dir_all(root.join("docs")).expect("mkdir");
        std::fs::create_dir_all(root.join("src")).expect("mkdir");
        std::fs::write(root.join(".config/tracey/config.styx"), REVIEW_CONFIG).expect("write");
        std::fs::write(root.join("docs/spec.md"), REVIEW_SPEC).expect("write");
        std::fs::write(root.join("src/lib.rs"), REVIEW_LIB).expect("write");
        let root = root.canonicalize().expect("root");
        let (review, _) = review_at(&root, "HEAD", &[], None, &[]).expect("reviewed");
        let added: Vec<&str> = review.added.iter().map(|r| r.rule.as_str()).collect();
        assert_eq!(added, ["r[demo.alpha]", "r[demo.beta]"]);
        assert!(review.passes(), "{:?}", review.problems);
    }

    /// Without git (`PATH=""` in effect: the program cannot be run), the error says so, not
    /// that the revision names no commit.
    // i[verify spec-check.review]
    #[test]
    fn without_git_the_error_says_git_cannot_run() {
        let dir = repo_with(&[]);
        let root = dir.path().canonicalize().expect("root");
        let err = at_rev::tree_with(std::ffi::OsStr::new("/nonexistent/git"), &root, "HEAD")
            .expect_err("no git");
        assert!(err.contains("cannot run git"), "{err}");
        assert!(!err.contains("no such commit"), "{err}");
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
        let root = dir.path().canonicalize().expect("root");
        let out = root.join("out/spec.sarif");
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
        assert_eq!(code, ExitCode::FAILURE);
        let log: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).expect("the log")).expect("JSON");
        let kinds: Vec<&str> = log["runs"][0]["results"]
            .as_array()
            .expect("results")
            .iter()
            .filter_map(|r| r["ruleId"].as_str())
            .collect();
        // The gate's problem on the work tree and the review's.
        assert_eq!(kinds, ["missing-verify", "coverage-down"], "{log:#}");
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

    // i[verify spec-check.parity+2]
    #[test]
    fn a_tracey_path_is_made_absolute_and_a_bare_name_found_on_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bin = dir.path().canonicalize().expect("dir").join("bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        std::fs::write(bin.join("tracey"), "").expect("write");
        assert_eq!(
            resolve(Path::new("bin/tracey"), dir.path(), None),
            Some(bin.join("tracey"))
        );
        assert_eq!(
            resolve(Path::new("./bin/tracey"), dir.path(), None),
            Some(bin.join("tracey"))
        );
        assert_eq!(
            resolve(Path::new("tracey"), dir.path(), Some(bin.as_os_str())),
            Some(bin.join("tracey"))
        );
        assert_eq!(resolve(Path::new("tracey"), dir.path(), None), None);
        assert_eq!(resolve(Path::new("bin/missing"), dir.path(), None), None);
    }
}
