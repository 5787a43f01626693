//! Trees shaped like other people's tracey workspaces, held in memory, and what the gate counts on
//! each (pinned with insta): several specs and impls, rule markers inline and as plain
//! paragraphs, tracey's `exclude`, the `define`, `depends` and `related` verbs, a verify between a
//! test attribute and its fn, a verify heading an integration-test file. (The Python suite with its
//! JUnit file is a checked-in tree, `tests/fixtures/python`, read from the disk by
//! `tests/shapes.rs`.) Annotation-shaped text in these literals is inert: tracey's lexer reads
//! comments only.

use std::fmt::Write as _;

use crate::model::tree::Memory;
use crate::spec_check::report::Outcome;

/// The counts per spec and the problems, one line each: what a shape's snapshot pins.
fn summary(outcome: &Outcome) -> String {
    let mut out = String::from("spec: rules implemented verified stale errors\n");
    for spec in &outcome.specs {
        let _ = writeln!(
            out,
            "{}: {} {} {} {} {}",
            spec.name, spec.total, spec.implemented, spec.verified, spec.stale, spec.errors
        );
    }
    for problem in &outcome.problems {
        let _ = writeln!(out, "problem {problem}");
    }
    out
}

fn checked(files: &[(&str, &str)]) -> String {
    let tree = Memory::new(files.iter().copied());
    summary(&crate::spec_check::check(&tree, &[], None, &[]).expect("a config"))
}

const MANIFESTS: [(&str, &str); 2] = [
    ("Cargo.toml", "[workspace]\nmembers = [\"crates/*\"]\n"),
    (
        "crates/app/Cargo.toml",
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
    ),
];

/// Two specs with their own prefixes; the second is implemented in Rust and in Python.
#[test]
fn several_specs_and_impls() {
    let config = "\
specs (
    {
        name api
        include (docs/api/*.md)
        impls (
            {
                name rust
                include (crates/**/*.rs)
            }
        )
    }
    {
        name core
        include (docs/core.md)
        impls (
            {
                name rust
                include (crates/**/*.rs)
            }
            {
                name python
                include (py/**/*.py)
                test_include (py/tests/**/*.py)
            }
        )
    }
)
";
    let lib = "\
// a[impl api.get]
pub fn get() {}

// c[impl core.store]
pub fn store() {}

#[cfg(test)]
mod tests {
    // a[verify api.get]
    #[test]
    fn gets() {
        super::get();
    }
}
";
    let py = "# c[impl core.store]\ndef store():\n    pass\n";
    let py_test = "# c[verify core.store]\ndef test_store():\n    pass\n";
    let mut files = vec![
        (".config/tracey/config.styx", config),
        (
            "docs/api/get.md",
            "# Get\n\n> a[api.get]\n> Get returns the value.\n",
        ),
        (
            "docs/api/put.md",
            "# Put\n\n> a[api.put]\n> Put stores a value.\n",
        ),
        (
            "docs/core.md",
            "# Core\n\n> c[core.store]\n> Values are stored.\n",
        ),
        ("crates/app/src/lib.rs", lib),
        ("py/store.py", py),
        ("py/tests/test_store.py", py_test),
    ];
    files.extend(MANIFESTS);
    insta::assert_snapshot!(checked(&files));
}

const ONE_SPEC: &str = "\
specs (
    {
        name demo
        include (docs/*.md)
        impls (
            {
                name rust
                include (crates/**/*.rs)
                exclude (**/generated/**)
                test_include (crates/**/tests/**/*.rs)
            }
        )
    }
)
";

fn one_spec(spec: &str, sources: &[(&str, &str)]) -> String {
    let mut files = vec![
        (".config/tracey/config.styx", ONE_SPEC),
        ("docs/demo.md", spec),
    ];
    files.extend(MANIFESTS);
    files.extend(sources.iter().copied());
    checked(&files)
}

/// A rule implemented and verified by a unit test, for the specs below.
const LIB: &str = "\
// t[impl demo.inline]
pub fn inline() {}

// t[impl demo.para]
pub fn para() {}

#[cfg(test)]
mod tests {
    // t[verify demo.inline]
    #[test]
    fn inline_holds() {}

    // t[verify demo.para]
    #[test]
    fn para_holds() {}
}
";

/// A marker with its text on the same line (`> t[id] text`) and one as a plain paragraph.
#[test]
fn inline_and_paragraph_markers() {
    let spec = "\
# Demo

> t[demo.inline] The text follows the marker on its line.

t[demo.para]
A rule as a plain paragraph, no blockquote.
";
    insta::assert_snapshot!(one_spec(spec, &[("crates/app/src/lib.rs", LIB)]));
}

/// tracey's `exclude`: the only `impl` of a rule lies in an excluded directory.
#[test]
fn excluded_files_are_not_read() {
    let spec = "# Demo\n\n> t[demo.kept]\n> Kept.\n\n> t[demo.generated]\n> Generated.\n";
    let lib = "\
// t[impl demo.kept]
pub fn kept() {}

#[cfg(test)]
mod tests {
    // t[verify demo.kept]
    #[test]
    fn kept_holds() {}

    // t[verify demo.generated]
    #[test]
    fn generated_holds() {}
}
";
    let generated = "// t[impl demo.generated]\npub fn generated() {}\n";
    insta::assert_snapshot!(one_spec(
        spec,
        &[
            ("crates/app/src/lib.rs", lib),
            ("crates/app/src/generated/mod.rs", generated),
        ]
    ));
}

/// `define` counts as an implementation, as tracey counts it; `depends` and `related` count as
/// neither implementation nor verification.
#[test]
fn define_depends_and_related() {
    let spec = "\
# Demo

> t[demo.defined]
> Defined.

> t[demo.depended]
> Depended on.

> t[demo.related]
> Related.
";
    let lib = "\
// t[define demo.defined]
pub struct Defined;

// t[depends demo.depended]
pub fn depends() {}

// t[related demo.related]
pub fn related() {}

#[cfg(test)]
mod tests {
    // t[verify demo.defined]
    #[test]
    fn defined_holds() {}
}
";
    insta::assert_snapshot!(one_spec(spec, &[("crates/app/src/lib.rs", lib)]));
}

/// A verify between a test attribute and its fn, and a verify heading an integration-test file:
/// both are on tests, no placement problem.
#[test]
fn verify_between_attributes_and_at_a_file_head() {
    let spec = "# Demo\n\n> t[demo.idle]\n> Idle exits.\n\n> t[demo.wire]\n> Ints are u64.\n";
    let lib = "\
// t[impl demo.idle]
pub fn idle() {}

// t[impl demo.wire]
pub fn wire() {}

#[cfg(test)]
mod tests {
    #[test]
    // t[verify demo.idle]
    fn idle_timeout_fires_with_no_assignment() {}
}
";
    let golden = "\
//! Golden conformance tests for the wire protocol.
// t[verify demo.wire]

use app::wire;

#[test]
fn ints_are_u64() {
    wire();
}
";
    insta::assert_snapshot!(one_spec(
        spec,
        &[
            ("crates/app/src/lib.rs", lib),
            ("crates/app/tests/golden.rs", golden),
        ]
    ));
}
