//! The test-backed gate over workspaces tested by pytest, `go test` (go-junit-report), jest and
//! vitest: small memory trees, each with the JUnit report its runner writes, judged end to end by
//! `spec_check::check`, so what is proved here is the gate's verdict, not one helper's.

use std::collections::BTreeMap;

use crate::Memory;
use crate::model::tree::Tree as _;
use crate::spec_check::{self, problem::Kind};

const CONFIG: &str = "specs (
  {
    name calc
    include (docs/spec.md)
    impls (
      {
        name any
        include (**/*.py **/*.go **/*.js **/*.ts)
        test_include (**/test_*.py **/*_test.go **/*.test.js **/*.test.ts)
      }
    )
  }
)
";

/// How the gate judged each rule of a tree: `tested`, or the problems it raised at the rule
/// (kind and message); with the results at `junit.xml`, or annotations only without one.
fn verdicts(files: &[(&str, &str)], rules: &[&str]) -> BTreeMap<String, String> {
    let spec: String = rules
        .iter()
        .map(|rule| format!("> c[calc.{rule}]\n> {rule} holds.\n\n"))
        .collect();
    let implementation: String = rules
        .iter()
        .map(|rule| format!("# c[impl calc.{rule}]\ndef {rule}():\n    pass\n\n"))
        .collect();
    let mut tree = vec![
        (".config/tracey/config.styx".to_owned(), CONFIG.to_owned()),
        ("docs/spec.md".to_owned(), format!("# Calc\n\n{spec}")),
        ("src/implementation.py".to_owned(), implementation),
    ];
    tree.extend(
        files
            .iter()
            .map(|(path, text)| ((*path).to_owned(), (*text).to_owned())),
    );
    let tree = Memory::new(tree);
    let junit = tree.root().join("junit.xml");
    let results: Vec<&std::path::Path> = tree
        .is_file(&junit)
        .then_some(junit.as_path())
        .into_iter()
        .collect();
    let outcome = spec_check::check(&tree, &results, None, &[]).expect("a usable config");
    let mut verdicts: BTreeMap<String, String> = rules
        .iter()
        .map(|rule| (format!("c[calc.{rule}]"), "tested".to_owned()))
        .collect();
    for problem in &outcome.problems {
        let rule = problem.rule.clone().unwrap_or_default();
        assert!(
            verdicts.contains_key(&rule),
            "a problem at no rule of the tree: {problem}"
        );
        verdicts.insert(
            rule,
            format!("{}: {}", problem.kind.name(), problem.message),
        );
    }
    if !results.is_empty() {
        let tested = outcome.specs[0].tested.expect("test-backed");
        let failing = verdicts.values().filter(|v| *v != "tested").count();
        assert_eq!(tested + failing, rules.len(), "{verdicts:?}");
    }
    verdicts
}

/// The verdict of `rule`, shortened to its kind and the fate of its first test.
fn verdict(verdicts: &BTreeMap<String, String>, rule: &str) -> String {
    verdicts[&format!("c[calc.{rule}]")].clone()
}

fn pytest(cases: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><testsuites><testsuite name=\"pytest\">{cases}\
         </testsuite></testsuites>"
    )
}

/// A pytest case names its file by its module path from pytest's rootdir; a test of the same
/// name in another file of the tree (another directory, or a module whose path ends the same)
/// never takes its result.
// i[verify spec-check.test-backed.runners+2]
#[test]
fn a_pytest_case_is_only_its_own_files_test() {
    let test = |rule: &str| format!("# c[verify calc.{rule}]\ndef test_load():\n    pass\n");
    let (a, b) = (test("a"), test("b"));
    // Only tests/test_config.py ran.
    let ran = pytest(r#"<testcase classname="tests.test_config" name="test_load"/>"#);
    let judged = verdicts(
        &[
            ("tests/test_config.py", &a),
            ("plugins/foo/tests/test_config.py", &b),
            ("junit.xml", &ran),
        ],
        &["a", "b"],
    );
    assert_eq!(verdict(&judged, "a"), "tested");
    assert!(
        verdict(&judged, "b").contains("ignored or not run"),
        "{judged:?}"
    );

    // The same with xunit1's `file`.
    let ran = pytest(
        r#"<testcase classname="tests.test_config" file="tests/test_config.py" name="test_load"/>"#,
    );
    let judged = verdicts(
        &[
            ("tests/test_config.py", &a),
            ("plugins/foo/tests/test_config.py", &b),
            ("junit.xml", &ran),
        ],
        &["a", "b"],
    );
    assert_eq!(verdict(&judged, "a"), "tested");
    assert!(verdict(&judged, "b").contains("ignored or not run"));

    // Only the root's test_config.py ran: its case is not tests/test_config.py's.
    let ran = pytest(r#"<testcase classname="test_config" name="test_load"/>"#);
    let judged = verdicts(
        &[
            ("test_config.py", &a),
            ("tests/test_config.py", &b),
            ("junit.xml", &ran),
        ],
        &["a", "b"],
    );
    assert_eq!(verdict(&judged, "a"), "tested");
    assert!(verdict(&judged, "b").contains("ignored or not run"));

    // pytest's rootdir is py/ (its names are relative to it): a name that fits two files of the
    // tree is ambiguous, one that fits one file is that file's.
    let ran = pytest(
        r#"<testcase classname="tests.test_config" name="test_load"/><testcase classname="unit.test_calc" name="test_load"/>"#,
    );
    let c = test("c");
    let judged = verdicts(
        &[
            ("py/tests/test_config.py", &a),
            ("py/plugins/foo/tests/test_config.py", &b),
            ("py/unit/test_calc.py", &c),
            ("junit.xml", &ran),
        ],
        &["a", "b", "c"],
    );
    assert!(verdict(&judged, "a").contains("ambiguous"), "{judged:?}");
    assert!(verdict(&judged, "b").contains("ambiguous"), "{judged:?}");
    assert_eq!(verdict(&judged, "c"), "tested");
}

fn go_report(package: &str, cases: &str) -> String {
    format!(
        "<testsuites><testsuite name=\"{package}\"><properties><property name=\"go.version\" \
         value=\"go1.22.0\"></property></properties>{cases}</testsuite></testsuites>"
    )
}

/// A Go case names its package by import path: the module (from the nearest `go.mod`) and the
/// file's directory below it, and only that package's test is the file's.
// i[verify spec-check.test-backed.runners+2]
#[test]
fn a_go_case_is_only_its_own_packages_test() {
    let test = |rule: &str, package: &str| {
        format!(
            "package {package}\n\n// c[verify calc.{rule}]\nfunc TestDiv(t *testing.T) {{\n}}\n"
        )
    };
    let (a, b) = (test("a", "ops"), test("b", "main"));
    let ran = go_report(
        "example.com/m/internal/ops",
        r#"<testcase classname="example.com/m/internal/ops" name="TestDiv"></testcase>"#,
    );
    let judged = verdicts(
        &[
            ("go.mod", "module example.com/m\n\ngo 1.22\n"),
            ("ops/ops_test.go", &a),
            ("main_test.go", &b),
            ("junit.xml", &ran),
        ],
        &["a", "b"],
    );
    assert!(
        verdict(&judged, "a").contains("ignored or not run"),
        "{judged:?}"
    );
    assert!(
        verdict(&judged, "b").contains("ignored or not run"),
        "{judged:?}"
    );

    // The module lives in go/: its packages are named from there.
    let ran = go_report(
        "example.com/m/ops",
        r#"<testcase classname="example.com/m/ops" name="TestDiv"></testcase><testcase classname="example.com/m" name="TestDiv"></testcase>"#,
    );
    let judged = verdicts(
        &[
            ("go/go.mod", "module example.com/m // the module\n"),
            ("go/ops/ops_test.go", &a),
            ("go/main_test.go", &b),
            ("junit.xml", &ran),
        ],
        &["a", "b"],
    );
    assert_eq!(verdict(&judged, "a"), "tested", "{judged:?}");
    assert_eq!(verdict(&judged, "b"), "tested", "{judged:?}");
}

/// A declared-but-not-run test (`it.todo`, `it.skip`, `xit`) is never a passing test, though
/// jest-junit writes a todo as a case with no child element.
// i[verify spec-check.test-backed.runners+2]
#[test]
fn a_todo_or_skipped_script_test_is_not_a_passing_test() {
    let source = "describe('calc', () => {
  // c[verify calc.a]
  it.todo('rounds');
  // c[verify calc.b]
  it.skip('adds', () => {});
  // c[verify calc.c]
  xit('divides', () => {});
  // c[verify calc.d]
  it('subtracts', () => {});
});
";
    let case = |title: &str| {
        format!(
            r#"<testcase classname="calc {title}" name="calc {title}" time="0" file="web/calc.test.js"></testcase>"#
        )
    };
    let ran = format!(
        "<testsuites name=\"jest tests\"><testsuite name=\"calc\">{}{}{}{}</testsuite></testsuites>",
        case("rounds"),
        case("adds"),
        case("divides"),
        case("subtracts")
    );
    let judged = verdicts(
        &[("web/calc.test.js", source), ("junit.xml", &ran)],
        &["a", "b", "c", "d"],
    );
    for rule in ["a", "b", "c"] {
        assert!(
            verdict(&judged, rule).contains("skipped"),
            "{rule}: {judged:?}"
        );
    }
    assert_eq!(verdict(&judged, "d"), "tested");
}

fn vitest(cases: &str) -> String {
    format!("<testsuites name=\"vitest tests\">{cases}</testsuites>")
}

/// vitest joins describe blocks and the title with ` > ` only, and names the file relative to its
/// root, which may be a directory of the tree.
// i[verify spec-check.test-backed.runners+2]
#[test]
fn vitest_titles_and_files_are_matched_as_vitest_writes_them() {
    let source = "describe('calc', () => {
  // c[verify calc.a]
  it('works', () => {});
  // c[verify calc.b]
  it('also works', () => {});
});
";
    let ran = vitest(
        r#"<testsuite name="src/a.test.ts"><testcase classname="src/a.test.ts" name="calc &gt; works"/><testcase classname="src/a.test.ts" name="calc &gt; also works"/></testsuite>"#,
    );
    let judged = verdicts(
        &[("web/src/a.test.ts", source), ("junit.xml", &ran)],
        &["a", "b"],
    );
    assert_eq!(verdict(&judged, "a"), "tested", "{judged:?}");
    assert_eq!(verdict(&judged, "b"), "tested", "{judged:?}");
}

/// Python decorators and script calls written over several lines still precede their test.
// i[verify spec-check.test-backed.runners+2]
#[test]
fn declarations_written_over_several_lines_are_found() {
    let python = "import pytest

# c[verify calc.a]
@pytest.mark.parametrize(
    \"x\",
    [1, 2],
)
def test_x(x):
    pass
";
    let script = "// c[verify calc.b]
it(
  'a long title that prettier wraps',
  () => {},
);
";
    let ran = String::from(
        "<testsuites name=\"vitest tests\"><testsuite name=\"web/a.test.ts\">\
         <testcase classname=\"web/a.test.ts\" name=\"a long title that prettier wraps\"/>\
         </testsuite></testsuites>",
    );
    let judged = verdicts(&[("web/a.test.ts", script), ("junit.xml", &ran)], &["b"]);
    assert_eq!(verdict(&judged, "b"), "tested", "{judged:?}");
    let ran = pytest(
        r#"<testcase classname="tests.test_a" name="test_x[1]"/><testcase classname="tests.test_a" name="test_x[2]"/>"#,
    );
    let judged = verdicts(&[("tests/test_a.py", python), ("junit.xml", &ran)], &["a"]);
    assert_eq!(verdict(&judged, "a"), "tested", "{judged:?}");
}

/// Only a function named as its runner collects tests is a test: a `verify` before a helper is
/// attached to no test, with or without results.
// i[verify spec-check.test-backed.runners+2]
#[test]
fn a_helper_function_is_not_a_test() {
    let python = "# c[verify calc.a]\ndef make_client():\n    pass\n";
    let go = "package ops\n\n// c[verify calc.b]\nfunc helper(t *testing.T) {\n}\n\n// c[verify calc.c]\nfunc Testify(t *testing.T) {\n}\n";
    let files = [
        ("tests/test_a.py", python),
        ("go.mod", "module example.com/m\n"),
        ("ops/ops_test.go", go),
    ];
    let ran = pytest(r#"<testcase classname="tests.test_a" name="make_client"/>"#);
    let mut with_results = files.to_vec();
    with_results.push(("junit.xml", &ran));
    for judged in [
        verdicts(&files, &["a", "b", "c"]),
        verdicts(&with_results, &["a", "b", "c"]),
    ] {
        for rule in ["a", "b", "c"] {
            assert!(
                verdict(&judged, rule).contains("verify-not-on-test")
                    || verdict(&judged, rule).contains("no test function follows"),
                "{rule}: {judged:?}"
            );
        }
    }
}

/// A jest-junit report without `file` attributes cannot say which file a test is in: the gate
/// refuses it rather than matching titles across files (a fatal results problem, alone); the same
/// report with its files, and another runner's report without them, are used.
// i[verify spec-check.test-backed.runners+2]
// i[verify spec-check.fatal]
#[test]
fn a_jest_report_without_files_is_refused() {
    let ran = r#"<testsuites name="jest tests"><testsuite name="calc"><testcase classname="calc adds" name="calc adds"/></testsuite></testsuites>"#;
    let tree = Memory::new([
        (".config/tracey/config.styx", CONFIG),
        ("docs/spec.md", "# Calc\n\n> c[calc.a]\n> a holds.\n"),
        ("src/a.py", "# c[impl calc.a]\ndef a():\n    pass\n"),
        (
            "web/b.test.js",
            "// c[verify calc.a]\nit('adds', () => {});\n",
        ),
        ("junit.xml", ran),
    ]);
    let junit = tree.root().join("junit.xml");
    let refused = spec_check::check(&tree, &[junit.as_path()], None, &[]).err();
    let refused = refused.expect("refused");
    assert_eq!(refused.kind, Kind::TestResults);
    assert!(refused.message.contains("addFileAttribute"), "{refused}");

    // Only jest's reports need the attribute: with it, or from nextest (which never writes it),
    // the report is used.
    let with_files = ran.replace("/>", r#" file="web/b.test.js"/>"#);
    let nextest = r#"<testsuites name="nextest-run"><testsuite name="calc"><testcase classname="calc" name="adds"/></testsuite></testsuites>"#;
    for (what, report) in [
        ("jest with files", with_files.as_str()),
        ("nextest", nextest),
    ] {
        let mut tree = tree.clone();
        tree.insert("junit.xml", report);
        let junit = tree.root().join("junit.xml");
        let used = spec_check::check(&tree, &[junit.as_path()], None, &[]);
        assert!(used.is_ok(), "{what}: {:?}", used.err());
    }
}

/// The run's case count counts each file's test once, though pytest names every suite `pytest`
/// and two files hold a test of the same name.
// i[verify spec-check.test-backed.runners+2]
#[test]
fn same_named_tests_of_two_files_are_two_cases() {
    let test = "# c[verify calc.a]\ndef test_load():\n    pass\n";
    let ran = pytest(
        r#"<testcase classname="tests.test_a" name="test_load"/><testcase classname="tests.test_b" name="test_load"><failure message="no"/></testcase><testcase classname="tests.test_b" name="test_load"/>"#,
    );
    let tree = Memory::new([
        (".config/tracey/config.styx", CONFIG),
        ("docs/spec.md", "# Calc\n\n> c[calc.a]\n> a holds.\n"),
        ("src/a.py", "# c[impl calc.a]\ndef a():\n    pass\n"),
        ("tests/test_a.py", test),
        ("junit.xml", ran.as_str()),
    ]);
    let junit = tree.root().join("junit.xml");
    let outcome = spec_check::check(&tree, &[junit.as_path()], None, &[]).expect("a usable config");
    // tests.test_b's test ran twice (a rerun): one case, judged by its worst run.
    assert_eq!(outcome.mode.cases, Some(2));
    let results = crate::spec_check::junit::read(&tree, &junit).expect("a report");
    let statuses = results.statuses();
    assert_eq!(
        statuses,
        [
            crate::spec_check::junit::Status::Passed,
            crate::spec_check::junit::Status::Failed
        ]
    );
}

/// The trace of a verify in a Python file that precedes no test says so, rather than naming a
/// test `?`.
// i[verify spec-check.test-backed.runners+2]
#[test]
fn the_trace_names_no_test_where_none_follows() {
    use crate::trace::rule_report::{Format, render};

    let ran = pytest(r#"<testcase classname="tests.test_a" name="test_x"/>"#);
    let tree = Memory::new([
        (".config/tracey/config.styx", CONFIG),
        ("docs/spec.md", "# Calc\n\n> c[calc.a]\n> a holds.\n"),
        ("src/a.py", "# c[impl calc.a]\ndef a():\n    pass\n"),
        (
            "tests/test_a.py",
            "# c[verify calc.a]\ndef make_client():\n    pass\n",
        ),
        ("junit.xml", ran.as_str()),
    ]);
    let junit = tree.root().join("junit.xml");
    let everything = crate::trace::everything(
        &tree,
        spec_check::read(&tree),
        &[junit.as_path()],
        None,
        false,
    )
    .expect("a usable tree and results");
    let text = render(&everything.rules[0], Format::Text);
    assert!(
        text.contains(
            "verify  tests/test_a.py:1  (no test function follows)  no test function follows"
        ),
        "{text}"
    );
}

/// A workspace tested by two runners gives one report each: the gate reads them together, and
/// each test is shown with the runner whose case judged it.
// i[verify spec-check.test-backed.runners+2]
#[test]
fn several_reports_are_read_together() {
    use crate::trace::rule_report::{Format, render};

    let go_report = go_report(
        "example.com/m/ops",
        r#"<testcase classname="example.com/m/ops" name="TestDiv"></testcase>"#,
    );
    let pytest_report = pytest(r#"<testcase classname="tests.test_a" name="test_x"/>"#);
    let tree = Memory::new([
        (".config/tracey/config.styx", CONFIG),
        (
            "docs/spec.md",
            "# Calc\n\n> c[calc.a]\n> a holds.\n\n> c[calc.b]\n> b holds.\n",
        ),
        (
            "src/a.py",
            "# c[impl calc.a]\ndef a():\n    pass\n\n# c[impl calc.b]\ndef b():\n    pass\n",
        ),
        (
            "tests/test_a.py",
            "# c[verify calc.a]\ndef test_x():\n    pass\n",
        ),
        ("go.mod", "module example.com/m\n"),
        (
            "ops/ops_test.go",
            "package ops\n\n// c[verify calc.b]\nfunc TestDiv(t *testing.T) {\n}\n",
        ),
        ("pytest.xml", pytest_report.as_str()),
        ("go.xml", go_report.as_str()),
    ]);
    let (python, go) = (tree.root().join("pytest.xml"), tree.root().join("go.xml"));
    let one = spec_check::check(&tree, &[python.as_path()], None, &[]).expect("usable");
    assert_eq!(one.specs[0].tested, Some(1), "{:?}", one.problems);
    let both =
        spec_check::check(&tree, &[python.as_path(), go.as_path()], None, &[]).expect("usable");
    assert_eq!(both.specs[0].tested, Some(2), "{:?}", both.problems);
    assert_eq!(both.mode.cases, Some(2));
    assert_eq!(both.mode.results.as_deref(), Some("pytest.xml, go.xml"));

    let everything = crate::trace::everything(
        &tree,
        spec_check::read(&tree),
        &[python.as_path(), go.as_path()],
        None,
        false,
    )
    .expect("a usable tree and results");
    let text: String = everything
        .rules
        .iter()
        .map(|rule| render(rule, Format::Text))
        .collect();
    assert!(
        text.contains("pytest tests/test_a.py::test_x  passed"),
        "{text}"
    );
    assert!(
        text.contains("go test ops/ops_test.go::TestDiv  passed"),
        "{text}"
    );
}
