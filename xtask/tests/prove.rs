//! `cargo xtask prove` on a fixture workspace with a real cargo-mutants run: a rule whose test
//! checks its function's result is proven; a rule whose test cannot tell the function from a
//! mutant that returns the same constant has a survivor, named with its place and mutation.
//! Fixtures are strings here, never checked-in files (see `fixture/mod.rs`).

mod fixture;

use std::process::Command;

use fixture::Tree;

const SPEC: &str = "\
# Demo spec

> r[demo.alpha]
> Alpha must hold.

> r[demo.beta]
> Beta must hold.
";

const LIB: &str = "\
// r[impl demo.alpha]
pub fn alpha(x: u32) -> u32 {
    x + 1
}

// r[impl demo.beta]
pub fn beta() -> u32 {
    2
}

#[cfg(test)]
mod tests {
    // r[verify demo.alpha]
    #[test]
    fn alpha_holds() {
        // Only checks that alpha answers at all: every mutant survives but one.
        let _ = super::alpha(1);
    }
}
";

// Behind a feature: proven only because prove turns every feature on.
const BETA_TEST: &str = "\
// r[verify demo.beta]
#[cfg(feature = \"checked\")]
#[test]
fn beta_holds() {
    assert_eq!(demo::beta(), 2);
}
";

/// Whether cargo-mutants runs; when not, records a loud skip (the harness, which installs it,
/// fails instead).
fn mutants_installed() -> bool {
    let installed = Command::new("cargo")
        .args(["mutants", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        holdfast_test_support::services::skip_loudly(
            "cargo-mutants",
            "cargo-mutants is not installed (cargo install --locked cargo-mutants)",
            holdfast_test_support::services::FailWhen::Harness,
        );
    }
    installed
}

/// `xtask prove ARGS --root TREE` with a real cargo-mutants run, in an environment of its own:
/// no outer target directory or RUSTFLAGS, offline, and without the variables in `unset`.
/// Returns the exit code, stdout and stderr.
fn prove_on(tree: &Tree, args: &[&str], unset: &[&str]) -> (Option<i32>, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command
        .arg("prove")
        .args(args)
        .arg("--root")
        .arg(tree.path())
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env("CARGO_NET_OFFLINE", "true");
    for name in unset {
        command.env_remove(name);
    }
    let output = command.output().expect("run xtask prove");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs git in the fixture tree as a throwaway identity, unsigned; fails the test if git does.
fn git_in(tree: &Tree, args: &[&str]) {
    let output = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(tree.path())
        .output()
        .expect("git");
    assert!(output.status.success(), "git {args:?}: {output:?}");
}

/// The fingerprint the engine computes for the rule `id` in the tree now, as a proof records it.
fn fingerprint_now(tree: &Tree, id: &str) -> serde_json::Value {
    let disk = spec_engine::Disk::new(tree.path());
    let Ok((_, read)) = spec_engine::spec_check::read(&disk) else {
        panic!("the fixture reads");
    };
    let rule = read.rule(id).expect("the rule");
    serde_json::to_value(spec_engine::spec_check::fingerprint::of(&read, rule)).expect("json")
}

fn tree() -> Tree {
    Tree::new(
        SPEC,
        &[],
        &[
            (
                "Cargo.toml",
                "[workspace]\nmembers = [\"crates/demo\"]\nresolver = \"2\"\n",
            ),
            (
                "crates/demo/Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[features]\nchecked = []\n",
            ),
            ("crates/demo/src/lib.rs", LIB),
            ("crates/demo/tests/beta.rs", BETA_TEST),
        ],
    )
}

// i[verify prove.plan+4]
#[test]
fn the_plan_names_each_rules_items_and_tests() {
    let tree = tree();
    let run = fixture::xtask("prove", tree.path(), &["--list"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!(run.stdout);
}

/// A `verify` heading a test file is judged by every test of that file.
// i[verify prove.plan+4]
// i[verify spec-check.placement.file-head]
#[test]
fn a_verify_heading_a_test_file_is_judged_by_each_of_its_tests() {
    let tree = tree();
    tree.write(
        "crates/demo/tests/beta.rs",
        b"//! Golden.\n// r[verify demo.beta]\n\nuse demo::beta;\n\n#[test]\nfn golden() {\n    \
          assert_eq!(beta(), 2);\n}\n\nfn helper() {}\n\n#[test]\nfn again() {}\n",
    );
    let run = fixture::xtask("prove", tree.path(), &["--list", "demo.beta"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(
            "  judge   (binary_id(=demo::beta) & test(=golden)) | (binary_id(=demo::beta) & \
             test(=again))\n"
        ),
        "{}",
        run.stdout
    );
}

// i[verify prove.run+2]
#[test]
fn a_survivor_is_reported_and_a_checked_rule_is_proven() {
    if !mutants_installed() {
        return;
    }
    let tree = tree();
    let (code, stdout, stderr) = prove_on(&tree, &["demo.alpha", "demo.beta"], &[]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains("r[demo.beta]: proven — 2 caught, 0 missed"),
        "{stdout}{stderr}"
    );
    assert!(
        stdout.contains("r[demo.alpha]: SURVIVORS"),
        "{stdout}{stderr}"
    );
    assert!(
        stdout.contains("missed: crates/demo/src/lib.rs:"),
        "{stdout}{stderr}"
    );
    let written: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tree.path().join("target/prove/demo.beta.json")).expect("result"),
    )
    .expect("json");
    assert_eq!(written["rule"], "r[demo.beta]");
    assert_eq!(written["caught"], 2);
    assert_eq!(written["missed"], 0);
    // What it judged, fingerprinted as the engine reads the tree.
    assert_eq!(written["fingerprint"], fingerprint_now(&tree, "demo.beta"));
    // In place, and restored: the source is as it was.
    assert_eq!(
        std::fs::read_to_string(tree.path().join("crates/demo/src/lib.rs")).expect("lib"),
        LIB
    );
}

// i[verify prove.budget+3]
#[test]
fn under_a_mutant_cap_the_smaller_rule_runs_first_and_the_larger_is_named_unrun() {
    if !mutants_installed() {
        return;
    }
    let tree = tree();
    // Chosen largest first: the counts from `cargo mutants --list` put beta (2) before alpha (4),
    // and alpha's 4 would take the run past 3.
    let (code, stdout, stderr) = prove_on(
        &tree,
        &["demo.alpha", "demo.beta", "--max-mutants", "3"],
        &[],
    );
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let beta = stdout
        .find("r[demo.beta]: proven — 2 caught, 0 missed")
        .unwrap_or_else(|| panic!("beta not proven: {stdout}{stderr}"));
    let alpha = stdout
        .find("r[demo.alpha]: NOT RUN — its 4 mutants would exceed the cap of 3 (2 already tried)")
        .unwrap_or_else(|| panic!("alpha not named unrun: {stdout}{stderr}"));
    assert!(beta < alpha, "the smaller rule runs first: {stdout}");
    assert!(
        stderr.contains("WARNING: 1 rule NOT RUN within the budget")
            && stderr.contains("r[demo.alpha]"),
        "{stderr}"
    );
    assert!(tree.path().join("target/prove/demo.beta.json").exists());
    assert!(!tree.path().join("target/prove/demo.alpha.json").exists());
}

// i[verify prove.shown+2]
#[test]
fn the_last_proof_is_shown_by_trace_report_and_gate() {
    let tree = tree();
    tree.write(
        "target/prove/demo.alpha.json",
        br#"{"rule":"r[demo.alpha]","caught":1,"missed":1,"unviable":0,"timeout":0,"survivors":["crates/demo/src/lib.rs:3:5: replace + with * in alpha"]}"#,
    );
    tree.write(
        "target/prove/demo.beta.json",
        br#"{"rule":"r[demo.beta]","caught":2,"missed":0,"unviable":0,"timeout":0,"survivors":[]}"#,
    );
    let alpha = fixture::xtask("trace", tree.path(), &["demo.alpha", "--no-results"]);
    assert!(
        alpha.stdout.contains("  proof   SURVIVORS — 1 caught, 1 missed, 0 unviable, 0 timed out\n    missed: crates/demo/src/lib.rs:3:5: replace + with * in alpha"),
        "{}",
        alpha.stdout
    );
    let json = fixture::xtask(
        "trace",
        tree.path(),
        &["demo.beta", "--json", "--no-results"],
    );
    let json: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert_eq!(json["survivors"], false);
    assert!(
        json["proof"]
            .as_str()
            .expect("proof")
            .contains("proven — 2 caught")
    );
    let gate = fixture::xtask("spec-check", tree.path(), &[]);
    assert!(
        gate.stdout.contains("note: proof (target/prove/, docs/audit/proof.md): 1 of 2 rules proven; with surviving mutants: r[demo.alpha]; justified survivors: 0"),
        "{}",
        gate.stdout
    );
    let report = fixture::xtask("spec-report", tree.path(), &["--no-results"]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    let page = std::fs::read_to_string(tree.path().join("target/spec-report.html")).expect("page");
    assert!(
        page.contains(
            "<p id=\"survivors\" data-count=\"1\"><a class=\"marker\" href=\"#r[demo.alpha]\">"
        ),
        "{page}"
    );

    // Without target/prove/, the checked-in summary is what is shown.
    let summary = fixture::xtask("prove", tree.path(), &["--summary"]);
    assert_eq!(summary.code, 0, "{}", summary.stderr);
    assert!(
        summary
            .stdout
            .contains("wrote docs/audit/proof.md (2 of 2 rules recorded, 1 proven)"),
        "{}",
        summary.stdout
    );
    std::fs::remove_dir_all(tree.path().join("target/prove")).expect("rm target/prove");
    let again = fixture::xtask("trace", tree.path(), &["demo.alpha", "--no-results"]);
    assert!(
        again.stdout.contains("  proof   SURVIVORS — 1 caught, 1 missed, 0 unviable, 0 timed out\n    missed: crates/demo/src/lib.rs:3:5: replace + with * in alpha"),
        "{}",
        again.stdout
    );
    let gate = fixture::xtask("spec-check", tree.path(), &[]);
    assert!(
        gate.stdout
            .contains("1 of 2 rules proven; with surviving mutants: r[demo.alpha]"),
        "{}",
        gate.stdout
    );
}

// i[verify prove.summary]
#[test]
fn the_summary_is_written_for_current_rules_only() {
    let tree = tree();
    tree.write(
        "target/prove/demo.beta.json",
        br#"{"rule":"r[demo.beta]","caught":2,"missed":0,"unviable":1,"timeout":0,"survivors":[],"commit":"abc1234","date":"2026-12-01 14:00:00 UTC"}"#,
    );
    // A row for an older version of a rule is not carried over.
    tree.write(
        "docs/audit/proof.md",
        b"| `r[demo.gamma]` | proven | 1 | 0 | 0 | 0 | 0 | - | - |\n",
    );
    let run = fixture::xtask("prove", tree.path(), &["--summary"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let text = std::fs::read_to_string(tree.path().join("docs/audit/proof.md")).expect("summary");
    assert!(
        text.contains(
            "| `r[demo.beta]` | proven | 2 | 0 | 1 | 0 | 0 | abc1234 | 2026-12-01 14:00:00 UTC |"
        ),
        "{text}"
    );
    assert!(!text.contains("demo.gamma"), "{text}");
    assert!(!text.contains("demo.alpha"), "no proof, no row: {text}");
}

// i[verify ci.prove+2]
#[test]
fn ci_fails_when_a_commit_weakens_a_rules_test() {
    if !mutants_installed() {
        return;
    }
    let tree = tree();
    let git = |args: &[&str]| git_in(&tree, args);
    tree.write(".gitignore", b"target/\n");
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "demo"]);
    // The commit under test: beta's test no longer checks beta's result.
    tree.write(
        "crates/demo/tests/beta.rs",
        b"// r[verify demo.beta]\n#[test]\nfn beta_holds() {\n    let _ = demo::beta();\n}\n",
    );
    git(&["commit", "-q", "-am", "weaken beta's test"]);
    let (code, stdout, stderr) = prove_on(&tree, &["--ci"], &["HOLDFAST_PROVE_BASE"]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains("r[demo.beta]: SURVIVORS"),
        "{stdout}{stderr}"
    );
    assert!(
        !stdout.contains("r[demo.alpha]"),
        "alpha was not touched: {stdout}"
    );
}

// A test that skips for want of a service, as holdfast-test-support's accessors do: it records
// the skip in the ledger `HOLDFAST_TEST_SKIP_LEDGER` names and passes.
const SKIPPING_TEST: &str = "\
// r[verify demo.beta]
#[test]
fn beta_against_redis() {
    let Ok(ledger) = std::env::var(\"HOLDFAST_TEST_SKIP_LEDGER\") else { return };
    let line = \"{\\\"test\\\":\\\"beta_against_redis\\\",\\\"binary\\\":\\\"beta\\\",\\\"service\\\":\\\"redis\\\",\\\"reason\\\":\\\"unset\\\"}\\n\";
    let mut old = std::fs::read_to_string(&ledger).unwrap_or_default();
    old.push_str(line);
    std::fs::write(&ledger, old).unwrap();
}
";

// i[verify ci.prove+2]
#[test]
fn a_rule_whose_tests_skipped_for_a_service_is_not_run_never_a_verdict() {
    if !mutants_installed() {
        return;
    }
    let tree = tree();
    tree.write("crates/demo/tests/beta.rs", SKIPPING_TEST.as_bytes());
    let (code, stdout, stderr) = prove_on(&tree, &["demo.beta"], &["HOLDFAST_TEST_SKIP_LEDGER"]);
    // Every mutant "survived" the skipping test; that is no verdict, so no failure either.
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("r[demo.beta]: NOT RUN — its tests need redis"),
        "{stdout}{stderr}"
    );
    assert!(!stdout.contains("SURVIVORS"), "{stdout}");
    assert!(
        stderr.contains("WARNING: 1 rule NOT RUN because their tests skipped"),
        "{stderr}"
    );
    assert!(
        !tree.path().join("target/prove/demo.beta.json").exists(),
        "no proof is recorded"
    );
}

// i[verify ci.prove+2]
#[test]
fn ci_warns_but_passes_for_a_touched_rule_that_cannot_be_proven() {
    if !mutants_installed() {
        return;
    }
    let tree = tree();
    let git = |args: &[&str]| git_in(&tree, args);
    tree.write(".gitignore", b"target/\n");
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "demo"]);
    // The commit under test touches beta and drops its only test: nothing can judge it.
    tree.write(
        "crates/demo/src/lib.rs",
        LIB.replace("    2\n", "    1 + 1\n").as_bytes(),
    );
    git(&["rm", "-q", "crates/demo/tests/beta.rs"]);
    git(&["commit", "-q", "-am", "beta, untested"]);
    let (code, stdout, stderr) = prove_on(&tree, &["--ci"], &["HOLDFAST_PROVE_BASE"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("r[demo.beta]: not provable"),
        "{stdout}{stderr}"
    );
    assert!(
        stderr.contains("WARNING: 1 rule touched but not proven")
            && stderr.contains("r[demo.beta]"),
        "{stderr}"
    );
}

// i[verify prove.targets]
#[test]
fn only_the_test_binaries_holding_a_rules_tests_are_built() {
    if !mutants_installed() {
        return;
    }
    // A test binary that does not compile: built, it fails the baseline, so the rule's proof
    // stands only when each of its runs leaves that binary out.
    let tree = Tree::new(
        SPEC,
        &[],
        &[
            (
                "Cargo.toml",
                "[workspace]\nmembers = [\"crates/demo\"]\nresolver = \"2\"\n",
            ),
            (
                "crates/demo/Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[features]\nchecked = []\n",
            ),
            ("crates/demo/src/lib.rs", LIB),
            ("crates/demo/tests/beta.rs", BETA_TEST),
            (
                "crates/demo/tests/unbuilt.rs",
                "compile_error!(\"no rule's test lives here\");\n",
            ),
        ],
    );
    let (code, stdout, stderr) = prove_on(&tree, &["demo.beta"], &[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("r[demo.beta]: proven — 2 caught, 0 missed"),
        "{stdout}{stderr}"
    );
    // The baseline, which prove runs itself with the mutants' selection (cargo-mutants' own
    // would build the mutated package's every test binary), and each mutant's build and test
    // phase: every cargo command names the one binary, and never the library's unit tests.
    let rule_dir = tree.path().join("target/prove/demo.beta");
    let baseline = std::fs::read_to_string(rule_dir.join("baseline.log")).expect("baseline log");
    let commands: Vec<&str> = baseline.lines().filter(|l| l.starts_with("*** ")).collect();
    assert_eq!(commands.len(), 2, "build and test: {baseline}");
    for command in commands {
        assert!(command.contains("\"--test=beta\""), "{command}");
        assert!(!command.contains("\"--lib\""), "{command}");
    }
    let outcomes: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(rule_dir.join("mutants.out/outcomes.json")).expect("outcomes"),
    )
    .expect("json");
    let runs = outcomes["outcomes"].as_array().expect("outcomes");
    assert_eq!(runs.len(), 2, "two mutants, no second baseline: {outcomes}");
    for run in runs {
        assert!(run["scenario"].get("Mutant").is_some(), "{run}");
        let phases = run["phase_results"].as_array().expect("phases");
        assert_eq!(phases.len(), 2, "build and test: {run}");
        for phase in phases {
            let argv: Vec<&str> = phase["argv"]
                .as_array()
                .expect("argv")
                .iter()
                .filter_map(|a| a.as_str())
                .collect();
            assert!(argv.contains(&"--test=beta"), "{argv:?}");
            assert!(!argv.contains(&"--lib"), "{argv:?}");
        }
    }
}

// i[verify prove.outcomes+2]
#[test]
fn a_failing_baseline_is_an_error_naming_the_rule_and_leaves_no_proof() {
    if !mutants_installed() {
        return;
    }
    let tree = Tree::new(
        SPEC,
        &[],
        &[
            (
                "Cargo.toml",
                "[workspace]\nmembers = [\"crates/demo\"]\nresolver = \"2\"\n",
            ),
            (
                "crates/demo/Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[features]\nchecked = []\n",
            ),
            ("crates/demo/src/lib.rs", LIB),
            (
                "crates/demo/tests/beta.rs",
                "// r[verify demo.beta]\n#[test]\nfn beta_holds() {\n    assert_eq!(demo::beta(), 3, \"fails unmutated\");\n}\n",
            ),
        ],
    );
    // An earlier run's proof of this rule version: it must not stand for a run that failed.
    tree.write(
        "target/prove/demo.beta.json",
        br#"{"rule":"r[demo.beta]","caught":2,"missed":0,"unviable":0,"timeout":0,"survivors":[]}"#,
    );
    let (code, stdout, stderr) = prove_on(&tree, &["demo.beta"], &[]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("the unmutated tree failed the test of r[demo.beta]'s tests"),
        "{stdout}{stderr}"
    );
    assert!(!stdout.contains("proven"), "{stdout}");
    assert!(
        !tree.path().join("target/prove/demo.beta.json").exists(),
        "no proof is recorded for a failing baseline"
    );
    assert!(
        !tree
            .path()
            .join("target/prove/demo.beta/mutants.out")
            .exists(),
        "no mutant is tried on a failing baseline"
    );
    let trace = fixture::xtask("trace", tree.path(), &["demo.beta", "--no-results"]);
    assert!(!trace.stdout.contains("proven"), "{}", trace.stdout);
}

// i[verify prove.plan+4]
#[test]
fn a_types_annotation_covers_its_impl_blocks_in_the_file() {
    let lib = "\
// r[impl demo.alpha]
pub struct Counter<K> {
    n: K,
}

impl<K: Copy> Counter<K> {
    pub fn get(&self) -> K {
        self.n
    }
}

impl Default for Counter<u32> {
    fn default() -> Self {
        Counter { n: 1 }
    }
}

pub struct Other;

impl Other {
    pub fn beta() -> u32 {
        2
    }
}

#[cfg(test)]
mod tests {
    impl super::Counter<u8> {
        fn helper(&self) -> u8 {
            0
        }
    }

    // r[verify demo.alpha]
    #[test]
    fn alpha_holds() {
        assert_eq!(super::Counter::<u32>::default().get(), 1);
    }
}
";
    let tree = Tree::new(
        "# Demo spec\n\n> r[demo.alpha]\n> Alpha must hold.\n",
        &[],
        &[
            (
                "Cargo.toml",
                "[workspace]\nmembers = [\"crates/demo\"]\nresolver = \"2\"\n",
            ),
            (
                "crates/demo/Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            ),
            ("crates/demo/src/lib.rs", lib),
        ],
    );
    let run = fixture::xtask("prove", tree.path(), &["--list"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let plan: Vec<&str> = run
        .stdout
        .lines()
        .skip_while(|l| l.starts_with("root:"))
        .collect();
    // The struct, its inherent impl and its trait impl; not another type's, nor test code's.
    assert_eq!(
        plan,
        [
            "r[demo.alpha]",
            "  mutate  crates/demo/src/lib.rs:1-4  struct Counter",
            "  mutate  crates/demo/src/lib.rs:6-10  impl Counter<K>",
            "  mutate  crates/demo/src/lib.rs:12-16  impl Counter<u32>",
            "  judge   (binary_id(=demo) & test(=tests::alpha_holds))",
        ],
        "{}",
        run.stdout
    );
}

/// Two commits after a proof: one rewrites only comments and formatting in the rule's item (the
/// proof stays fresh), the next changes the item's code (the proof is stale, said by trace, the
/// gate and the report, and `--stale` chooses the rule), with no version bumped.
// i[verify prove.fingerprint]
// i[verify prove.stale]
#[test]
fn a_proof_goes_stale_when_its_impl_changes_and_not_for_a_comment() {
    let tree = tree();
    let git = |args: &[&str]| git_in(&tree, args);
    tree.write(".gitignore", b"target/\n");
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "demo"]);
    // The proof as `prove` records it at this commit (its writing is tested above).
    let proof = serde_json::json!({
        "rule": "r[demo.alpha]",
        "caught": 3,
        "missed": 0,
        "unviable": 0,
        "timeout": 0,
        "survivors": [],
        "commit": "c0ffee1",
        "date": "2026-12-06 10:00:00 UTC",
        "fingerprint": fingerprint_now(&tree, "demo.alpha"),
    });
    tree.write("target/prove/demo.alpha.json", proof.to_string().as_bytes());

    let lib = "crates/demo/src/lib.rs";
    tree.write(
        lib,
        LIB.replace("    x + 1\n", "    // One more than asked.\n    x+1\n")
            .as_bytes(),
    );
    git(&["commit", "-q", "-am", "alpha, commented"]);
    let trace = fixture::xtask("trace", tree.path(), &["demo.alpha", "--no-results"]);
    assert!(
        trace.stdout.contains("proven — 3 caught") && !trace.stdout.contains("stale"),
        "{}",
        trace.stdout
    );
    let listed = fixture::xtask("prove", tree.path(), &["--stale", "--list"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(!listed.stdout.contains("r[demo."), "{}", listed.stdout);

    tree.write(lib, LIB.replace("x + 1", "x + 2").as_bytes());
    git(&["commit", "-q", "-am", "alpha, changed"]);
    let stale = "proof stale: impl changed since c0ffee1";
    let trace = fixture::xtask("trace", tree.path(), &["demo.alpha", "--no-results"]);
    assert!(trace.stdout.contains(stale), "{}", trace.stdout);
    let gate = fixture::xtask("spec-check", tree.path(), &[]);
    assert!(
        gate.stdout
            .contains(&format!("note: r[demo.alpha]: {stale}")),
        "{}",
        gate.stdout
    );
    let report = fixture::xtask("spec-report", tree.path(), &["--no-results"]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    let page = std::fs::read_to_string(tree.path().join("target/spec-report.html")).expect("page");
    assert!(page.contains(stale), "{page}");
    let listed = fixture::xtask("prove", tree.path(), &["--stale", "--list"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(
        listed.stdout.contains("r[demo.alpha]\n") && !listed.stdout.contains("r[demo.beta]"),
        "{}",
        listed.stdout
    );
}

/// `--summary` writes every rule's row: asked with `--stale`, which would choose only some, it is
/// refused rather than silently ignoring `--stale`.
// i[verify prove.stale]
#[test]
fn summary_and_stale_are_refused_together() {
    let tree = tree();
    let run = fixture::xtask("prove", tree.path(), &["--summary", "--stale"]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert!(run.stderr.contains("cannot be used with"), "{}", run.stderr);
}

/// `--changed-since REV` chooses by fingerprints, not by the lines a diff touched: a reformat, a
/// comment or an item moved with its annotation chooses nothing; a change deep in an item's body,
/// far below its annotation, chooses its rule alone, as does weakening a rule's test.
// i[verify prove.changed+2]
#[test]
fn changed_since_chooses_by_fingerprints_not_by_lines() {
    let tree = tree();
    let git = |args: &[&str]| git_in(&tree, args);
    let long = LIB.replace(
        "    x + 1\n",
        &format!("{}    x + 1\n", "    let _ = x;\n".repeat(40)),
    );
    tree.write("crates/demo/src/lib.rs", long.as_bytes());
    tree.write(".gitignore", b"target/\n");
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "demo"]);
    let chosen = || -> Vec<String> {
        let run = fixture::xtask("prove", tree.path(), &["--list", "--changed-since", "HEAD"]);
        assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
        run.stdout
            .lines()
            .filter(|line| line.starts_with("r["))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(chosen(), Vec::<String>::new());

    // beta moved above alpha with its annotation and reformatted; alpha commented.
    let tests = &long[long.find("#[cfg(test)]").expect("tests")..];
    let alpha = &long[..long.find("// r[impl demo.beta]").expect("beta")];
    let moved = format!(
        "// r[impl demo.beta]\npub fn beta()->u32{{ 2 }}\n\n// Alpha, commented.\n{}{tests}",
        alpha.replace("    x + 1\n", "    x + 1 // one more\n")
    );
    tree.write("crates/demo/src/lib.rs", moved.as_bytes());
    assert_eq!(chosen(), Vec::<String>::new());

    // The last line of alpha's body, 40 lines below its annotation.
    tree.write(
        "crates/demo/src/lib.rs",
        moved.replace("x + 1 // one more", "x + 2").as_bytes(),
    );
    assert_eq!(chosen(), ["r[demo.alpha]"]);

    // Only beta's test, weakened.
    tree.write("crates/demo/src/lib.rs", long.as_bytes());
    tree.write(
        "crates/demo/tests/beta.rs",
        BETA_TEST
            .replace("assert_eq!(demo::beta(), 2);", "let _ = demo::beta();")
            .as_bytes(),
    );
    assert_eq!(chosen(), ["r[demo.beta]"]);
}
