//! The engine's checks on small trees held in memory ([`Memory`]): a tracey config, one spec of
//! two rules, one crate. Annotation-shaped text inside these string literals is inert: tracey's
//! lexer reads comments only.

use crate::model::tree::Memory;
use crate::spec_check::problem::Kind;
use crate::spec_check::report::Outcome;

const CONFIG: &str = "\
specs (
    {
        name demo
        include (docs/spec/demo.md)
        impls (
            {
                name rust
                include (crates/**/*.rs)
                test_include (crates/**/tests/**/*.rs)
            }
        )
    }
)
";

const SPEC: &str = "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n\n> r[demo.beta]\n> Beta holds.\n";

const MANIFEST: &str = "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n";

/// Both rules implemented; alpha verified by a unit test, beta by an integration test.
const LIB: &str = "\
// r[impl demo.alpha]
pub fn alpha() -> u32 {
    1
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
        assert_eq!(super::alpha(), 1);
    }
}
";

const BETA_TEST: &str = "\
// r[verify demo.beta]
#[test]
fn beta_holds() {
    assert_eq!(demo::beta(), 2);
}
";

/// Checks the tree of `files` (path, text) beside the config, the spec and the manifests.
fn check(files: &[(&str, &str)]) -> Outcome {
    let base = [
        (".config/tracey/config.styx", CONFIG),
        ("docs/spec/demo.md", SPEC),
        ("Cargo.toml", "[workspace]\nmembers = [\"crates/demo\"]\n"),
        ("crates/demo/Cargo.toml", MANIFEST),
    ];
    let tree = Memory::new(base.iter().chain(files).copied());
    crate::spec_check::check(&tree, &[], None, &[]).expect("the tree is checked")
}

fn kinds(outcome: &Outcome) -> Vec<(Kind, Option<String>)> {
    outcome
        .problems
        .iter()
        .map(|p| (p.kind, p.rule.clone()))
        .collect()
}

#[test]
fn a_rule_with_an_impl_and_a_verify_on_a_test_is_covered() {
    let outcome = check(&[
        ("crates/demo/src/lib.rs", LIB),
        ("crates/demo/tests/beta.rs", BETA_TEST),
    ]);
    assert_eq!(kinds(&outcome), []);
    let spec = &outcome.specs[0];
    assert_eq!(
        (spec.total, spec.implemented, spec.verified, spec.stale),
        (2, 2, 2, 0)
    );
}

// i[verify spec-check.placement.between-attributes]
#[test]
fn a_verify_between_a_test_attribute_and_its_fn_is_on_that_test() {
    let lib = LIB.replace(
        "    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds",
        "    #[test]\n    // r[verify demo.alpha]\n    fn alpha_holds",
    );
    assert_ne!(lib, LIB, "the fixture moved the annotation");
    let outcome = check(&[
        ("crates/demo/src/lib.rs", &lib),
        ("crates/demo/tests/beta.rs", BETA_TEST),
    ]);
    assert_eq!(kinds(&outcome), []);
    assert_eq!(outcome.specs[0].verified, 2);
}

// i[verify spec-check.placement.file-head]
#[test]
fn a_verify_at_the_head_of_an_integration_test_file_is_verified_by_its_tests() {
    let head = "\
//! Golden tests for beta.
// r[verify demo.beta]

#[test]
fn beta_is_two() {
    assert_eq!(demo::beta(), 2);
}
";
    let outcome = check(&[
        ("crates/demo/src/lib.rs", LIB),
        ("crates/demo/tests/beta.rs", head),
    ]);
    assert_eq!(kinds(&outcome), []);
    assert_eq!(outcome.specs[0].verified, 2);
}

/// A verify at a file's head naming an older version of its rule is a stale reference there,
/// counted as tracey counts one: the rule is stale, not implemented.
// i[verify spec-check.placement.file-head]
#[test]
fn a_stale_verify_at_a_files_head_makes_its_rule_stale() {
    let spec = SPEC.replace("> r[demo.beta]\n", "> r[demo.beta+2]\n");
    assert_ne!(spec, SPEC, "the fixture bumped beta");
    let lib = LIB.replace("// r[impl demo.beta]", "// r[impl demo.beta+2]");
    assert_ne!(lib, LIB, "the fixture bumped beta's impl");
    let head = "//! Golden tests for beta.\n// r[verify demo.beta]\n\n#[test]\nfn beta_is_two() {\n    assert_eq!(demo::beta(), 2);\n}\n";
    let tree = Memory::new([
        (".config/tracey/config.styx", CONFIG),
        ("docs/spec/demo.md", spec.as_str()),
        ("Cargo.toml", "[workspace]\nmembers = [\"crates/demo\"]\n"),
        ("crates/demo/Cargo.toml", MANIFEST),
        ("crates/demo/src/lib.rs", lib.as_str()),
        ("crates/demo/tests/beta.rs", head),
    ]);
    let outcome = crate::spec_check::check(&tree, &[], None, &[]).expect("the tree is checked");
    assert_eq!(
        kinds(&outcome),
        [(Kind::Stale, Some("r[demo.beta+2]".to_owned()))]
    );
    let spec = &outcome.specs[0];
    assert_eq!(
        (spec.total, spec.implemented, spec.verified, spec.stale),
        (2, 1, 2, 1)
    );
}

/// What is not a file's head: a verify before a helper is on that helper, which no test run can
/// prove; and only a verify in test code is judged by its placement there (an impl in test code
/// and a verify outside it are problems of their own kinds, each once).
// i[verify spec-check.placement.file-head]
#[test]
fn a_verify_before_a_helper_is_not_a_head_and_only_verifies_in_tests_are_placed() {
    let helper = "\
//! Helpers and tests for beta.

// r[verify demo.beta]
fn two() -> u32 {
    demo::beta()
}

#[test]
fn beta_is_two() {
    assert_eq!(two(), 2);
}
";
    let outcome = check(&[
        ("crates/demo/src/lib.rs", LIB),
        ("crates/demo/tests/beta.rs", helper),
    ]);
    assert_eq!(
        kinds(&outcome),
        [(Kind::VerifyNotOnTest, Some("r[demo.beta]".to_owned()))]
    );
    // An impl before a helper in a test file, and a verify before a function outside tests.
    let impl_in_tests = BETA_TEST.replace(
        "// r[verify demo.beta]\n#[test]\nfn beta_holds",
        "// r[impl demo.beta]\nfn helper() {}\n\n// r[verify demo.beta]\n#[test]\nfn beta_holds",
    );
    assert_ne!(impl_in_tests, BETA_TEST, "the fixture added the impl");
    let lib = LIB.replace(
        "// r[impl demo.beta]\npub fn beta",
        "// r[impl demo.beta]\n// r[verify demo.alpha]\npub fn beta",
    );
    assert_ne!(lib, LIB, "the fixture added the verify");
    let outcome = check(&[
        ("crates/demo/src/lib.rs", &lib),
        ("crates/demo/tests/beta.rs", &impl_in_tests),
    ]);
    let mut found = kinds(&outcome);
    found.sort_by_key(|(kind, _)| kind.name());
    assert_eq!(
        found,
        [
            (Kind::ImplInTest, Some("r[demo.beta]".to_owned())),
            (Kind::VerifyOutsideTest, Some("r[demo.alpha]".to_owned())),
        ]
    );
}

// i[verify spec-check.missing]
#[test]
fn a_rule_without_an_impl_is_a_problem() {
    let lib = LIB.replace("// r[impl demo.beta]\n", "");
    assert_ne!(lib, LIB, "the fixture dropped the annotation");
    let outcome = check(&[
        ("crates/demo/src/lib.rs", &lib),
        ("crates/demo/tests/beta.rs", BETA_TEST),
    ]);
    assert_eq!(
        kinds(&outcome),
        [(Kind::MissingImpl, Some("r[demo.beta]".to_owned()))]
    );
    assert_eq!(outcome.specs[0].implemented, 1);
}

/// A test-backed reading after alpha's body changed since the run whose evidence was recorded:
/// the trace and the report's per-crate counts show alpha's pass as stale, no pass.
// i[verify spec-check.test-backed.fingerprint+2]
#[test]
fn trace_and_the_report_show_a_stale_pass_as_no_pass() {
    use std::path::Path;
    const RESULTS: &str = "target/nextest/ci/junit.xml";
    let tree = |lib: &str| {
        Memory::new([
            (".config/tracey/config.styx", CONFIG),
            ("docs/spec/demo.md", SPEC),
            ("Cargo.toml", "[workspace]\nmembers = [\"crates/demo\"]\n"),
            ("crates/demo/Cargo.toml", MANIFEST),
            ("crates/demo/src/lib.rs", lib),
            ("crates/demo/tests/beta.rs", BETA_TEST),
            (
                RESULTS,
                "<testsuites><testsuite name=\"demo\" tests=\"1\"><testcase name=\"tests::alpha_holds\" classname=\"demo\"/></testsuite><testsuite name=\"demo::beta\" tests=\"1\"><testcase name=\"beta_holds\" classname=\"demo::beta\"/></testsuite></testsuites>",
            ),
        ])
    };
    // The record the run's producer writes, of the tree the tests ran on.
    let then = tree(LIB);
    let (_, read) = crate::spec_check::read(&then).expect("read");
    let junit = crate::Tree::read(&then, Path::new(RESULTS)).expect("results");
    let record = crate::spec_check::evidence::render(&crate::spec_check::evidence::record(
        &read,
        crate::spec_check::evidence::key([junit.as_str()]),
        std::time::SystemTime::UNIX_EPOCH,
    ));
    let path = crate::spec_check::evidence::path_for(Path::new(RESULTS));
    // Beside the results, as they were given.
    assert_eq!(
        path,
        Path::new("target/nextest/ci/junit.xml.spec-evidence.json")
    );
    let mut now = tree(&LIB.replace("    1\n", "    2\n"));
    now.insert(&path.to_string_lossy(), record);
    let everything = crate::trace::everything(
        &now,
        crate::spec_check::read(&now),
        &[Path::new(RESULTS)],
        None,
        false,
    )
    .unwrap_or_else(|_| panic!("traced"));
    let alpha = &everything.rules[0];
    assert_eq!(alpha.rule, "r[demo.alpha]");
    assert_eq!(
        alpha.verifies[0].result.as_deref(),
        Some("stale (passed, but impl changed since the tests ran)")
    );
    assert_eq!(alpha.verdict, "not verified");
    assert_eq!(
        alpha.reasons,
        ["r[demo.alpha]: its test evidence is stale: impl changed since the tests ran"]
    );
    assert_eq!(everything.rules[1].verdict, "verified");
    let crates = crate::spec_report::per_crate(&now, &everything);
    assert_eq!(crates["demo"].verified, 2);
    assert_eq!(crates["demo"].tested, 1);
}
