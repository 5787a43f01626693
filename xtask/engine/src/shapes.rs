//! Trees shaped like other people's tracey workspaces, held in memory: several specs and impls,
//! rule markers inline and as plain paragraphs, tracey's `exclude`, the `define`, `depends` and
//! `related` verbs, a verify between a test attribute and its fn, a verify heading an
//! integration-test file, references to older versions of rules, what the gate reports and tracey
//! does not (a merged rule, an uppercase id, a verify on a helper), and a Python suite with the
//! JUnit file pytest wrote for it (`tests/fixtures/python`, compiled in).
//!
//! The tests below pin what the gate counts on each (insta); `cargo xtask tracey-parity` writes
//! each tree to a directory of its own and compares the gate's counts with a real tracey's.
//! Annotation-shaped text in these literals is inert: tracey's lexer reads comments only.

use crate::model::tree::Memory;

/// A tree's files: root-relative path and text.
type Files = Vec<(&'static str, &'static str)>;

/// One workspace shape.
#[derive(Debug, Clone)]
pub struct Shape {
    /// A short name, usable as a directory name.
    pub name: &'static str,
    /// What the shape shows, one sentence.
    pub about: &'static str,
    /// Every file of the tree: root-relative path and text.
    pub files: Vec<(&'static str, &'static str)>,
}

impl Shape {
    /// The shape as an in-memory tree.
    pub fn tree(&self) -> Memory {
        Memory::new(self.files.iter().copied())
    }
}

/// Every shape, in a stable order.
pub fn all() -> Vec<Shape> {
    let shape = |name, about, files| Shape { name, about, files };
    vec![
        shape(
            "several_specs_and_impls",
            "two specs with their own prefixes; the second implemented in Rust and in Python",
            several_specs_and_impls(),
        ),
        shape(
            "inline_and_paragraph_markers",
            "a rule marker with its text on its line, and one as a plain paragraph",
            inline_and_paragraph_markers(),
        ),
        shape(
            "excluded_files_are_not_read",
            "tracey's `exclude`: the only impl of a rule lies in an excluded directory",
            excluded_files_are_not_read(),
        ),
        shape(
            "define_depends_and_related",
            "`define` counts as an impl; `depends` and `related` count as neither impl nor verify",
            define_depends_and_related(),
        ),
        shape(
            "verify_between_attributes_and_at_a_file_head",
            "a verify between `#[test]` and its fn, and one heading an integration-test file",
            verify_between_attributes_and_at_a_file_head(),
        ),
        shape(
            "versions",
            "references to older versions of rules: stale impls and verifies",
            versions(),
        ),
        shape(
            "gate_only_problems",
            "a merged rule, an uppercase id and a verify on a helper: problems tracey does not report",
            gate_only_problems(),
        ),
        shape(
            "python",
            "a Python package and its pytest suite, with the JUnit file pytest wrote",
            python(),
        ),
        shape(
            "python_placement",
            "Python verifies on `def test_…` (placed), on a test method, and on a helper, a nested \
             `def test_…` and a method of a class not named `Test…` (not)",
            python_placement(),
        ),
    ]
}

const MANIFESTS: [(&str, &str); 2] = [
    ("Cargo.toml", "[workspace]\nmembers = [\"crates/*\"]\n"),
    (
        "crates/app/Cargo.toml",
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
    ),
];

/// Two specs with their own prefixes; the second is implemented in Rust and in Python.
fn several_specs_and_impls() -> Files {
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
    files
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

fn one_spec(spec: &'static str, sources: &[(&'static str, &'static str)]) -> Files {
    let mut files = vec![
        (".config/tracey/config.styx", ONE_SPEC),
        ("docs/demo.md", spec),
    ];
    files.extend(MANIFESTS);
    files.extend(sources.iter().copied());
    files
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
fn inline_and_paragraph_markers() -> Files {
    let spec = "\
# Demo

> t[demo.inline] The text follows the marker on its line.

t[demo.para]
A rule as a plain paragraph, no blockquote.
";
    one_spec(spec, &[("crates/app/src/lib.rs", LIB)])
}

/// tracey's `exclude`: the only `impl` of a rule lies in an excluded directory.
fn excluded_files_are_not_read() -> Files {
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
    one_spec(
        spec,
        &[
            ("crates/app/src/lib.rs", lib),
            ("crates/app/src/generated/mod.rs", generated),
        ],
    )
}

/// `define` counts as an implementation, as tracey counts it; `depends` and `related` count as
/// neither implementation nor verification.
fn define_depends_and_related() -> Files {
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
    one_spec(spec, &[("crates/app/src/lib.rs", lib)])
}

/// A verify between a test attribute and its fn, and a verify heading an integration-test file:
/// both are on tests, no placement problem.
fn verify_between_attributes_and_at_a_file_head() -> Files {
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
    one_spec(
        spec,
        &[
            ("crates/app/src/lib.rs", lib),
            ("crates/app/tests/golden.rs", golden),
        ],
    )
}

/// Five rules covering every way tracey 1.3.0 counts a rule: current, implemented at an older
/// version, implemented only, verified at an older version only, nothing at all.
fn versions() -> Files {
    let spec = "\
# Counts

> t[demo.alpha]
> Implemented and verified.

> t[demo.beta+2]
> Implemented at an older version, verified at the current one.

> t[demo.gamma]
> Implemented only.

> t[demo.delta+3]
> Verified at an older version only.

> t[demo.epsilon]
> Nothing at all.
";
    let lib = "\
// t[impl demo.alpha]
pub fn alpha() {}

// t[impl demo.beta]
pub fn beta() {}

// t[impl demo.gamma]
pub fn gamma() {}

#[cfg(test)]
mod tests {
    // t[verify demo.alpha]
    #[test]
    fn alpha() {}

    // t[verify demo.beta+2]
    #[test]
    fn beta() {}

    // t[verify demo.delta+2]
    #[test]
    fn delta() {}
}
";
    one_spec(spec, &[("crates/app/src/lib.rs", lib)])
}

/// What the gate reports and tracey does not, each in a problem kind of its own, with the counts
/// still tracey's: a rule marker merged into the previous rule's blockquote (it defines nothing,
/// in tracey too), an uppercase rule id (tracey accepts it), and a verify on a helper fn of a
/// test module (tracey counts the rule verified; no test run can prove it).
fn gate_only_problems() -> Files {
    let spec = "\
# Demo

> t[demo.first]
> The first rule.
> t[demo.merged]
> Merged into the first: no blank line before it.

> t[demo.Upper]
> An uppercase id.

> t[demo.helper]
> Verified only on a helper.
";
    let lib = "\
// t[impl demo.first]
pub fn first() {}

// t[impl demo.Upper]
pub fn upper() {}

// t[impl demo.helper]
pub fn helper() {}

#[cfg(test)]
mod tests {
    // t[verify demo.first]
    #[test]
    fn first_holds() {}

    // t[verify demo.Upper]
    #[test]
    fn upper_holds() {}

    // t[verify demo.helper]
    fn a_helper() {}
}
";
    one_spec(spec, &[("crates/app/src/lib.rs", lib)])
}

/// The Python workspace of `tests/fixtures/python`.
fn python() -> Files {
    macro_rules! fixture {
        ($($path:literal),* $(,)?) => {
            vec![$(($path, include_str!(concat!("../tests/fixtures/python/", $path)))),*]
        };
    }
    fixture![
        ".config/tracey/config.styx",
        "docs/spec.md",
        "src/calc/__init__.py",
        "src/calc/ops.py",
        "tests/__init__.py",
        "tests/test_ops.py",
        "junit.xml",
    ]
}

/// Python test files: a verify before `def test_…` and one before a test method are placed; one
/// before a helper is a placement problem (`verify-not-on-test`), though tracey counts the rule
/// verified all the same; a verify in a file outside `test_include` is outside test code.
fn python_placement() -> Files {
    let config = "\
specs (
    {
        name calc
        include (docs/spec.md)
        impls (
            {
                name python
                include (src/**/*.py tests/**/*.py)
                test_include (tests/**/*.py)
            }
        )
    }
)
";
    let spec = "\
# Calc

> c[calc.add]
> Adding gives the sum.

> c[calc.sub]
> Subtracting gives the difference.

> c[calc.mul]
> Multiplying gives the product.

> c[calc.neg]
> Negating flips the sign.
";
    let ops = "\
# c[impl calc.add]
def add(a, b):
    return a + b


# c[impl calc.sub]
def sub(a, b):
    return a - b


# c[impl calc.mul]
def mul(a, b):
    return a * b


# c[impl calc.neg]
def neg(a):
    return -a


# c[verify calc.neg]
def check_neg():
    assert neg(1) == -1
";
    let tests = "\
from calc.ops import add, mul, sub


# c[verify calc.add]
def test_add():
    assert add(1, 2) == 3


class TestSub:
    # c[verify calc.sub]
    def test_sub(self):
        assert sub(3, 2) == 1


# c[verify calc.mul]
def make_numbers():
    return 2, 3


def test_mul():
    assert mul(*make_numbers()) == 6


def helper():
    # c[verify calc.add]
    def test_inner():
        assert add(0, 0) == 0

    return test_inner


class Helper:
    # c[verify calc.sub]
    def test_sub(self):
        assert sub(0, 0) == 0
";
    vec![
        (".config/tracey/config.styx", config),
        ("docs/spec.md", spec),
        ("src/calc/ops.py", ops),
        ("tests/test_ops.py", tests),
    ]
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

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

    fn checked(name: &str) -> String {
        let shape = super::all()
            .into_iter()
            .find(|shape| shape.name == name)
            .expect("a shape of that name");
        summary(&crate::spec_check::check(&shape.tree(), &[], None, &[]).expect("a config"))
    }

    #[test]
    fn several_specs_and_impls() {
        insta::assert_snapshot!(checked("several_specs_and_impls"));
    }

    #[test]
    fn inline_and_paragraph_markers() {
        insta::assert_snapshot!(checked("inline_and_paragraph_markers"));
    }

    #[test]
    fn excluded_files_are_not_read() {
        insta::assert_snapshot!(checked("excluded_files_are_not_read"));
    }

    #[test]
    fn define_depends_and_related() {
        insta::assert_snapshot!(checked("define_depends_and_related"));
    }

    #[test]
    fn verify_between_attributes_and_at_a_file_head() {
        insta::assert_snapshot!(checked("verify_between_attributes_and_at_a_file_head"));
    }

    #[test]
    fn versions() {
        insta::assert_snapshot!(checked("versions"));
    }

    #[test]
    fn gate_only_problems() {
        insta::assert_snapshot!(checked("gate_only_problems"));
    }

    #[test]
    fn python() {
        insta::assert_snapshot!(checked("python"));
    }

    // i[verify spec-check.placement.foreign+2]
    #[test]
    fn python_placement() {
        insta::assert_snapshot!(checked("python_placement"));
    }

    #[test]
    fn shape_names_are_distinct_directory_names() {
        let names: Vec<&str> = super::all().iter().map(|shape| shape.name).collect();
        let mut distinct = names.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        assert!(
            names
                .iter()
                .all(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '_')),
            "{names:?}"
        );
    }
}
