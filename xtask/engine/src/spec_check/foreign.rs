//! Tests in languages other than Rust: which test a `verify` annotation in a Python, Go,
//! JavaScript or TypeScript file precedes, and which JUnit cases of pytest, go-junit-report,
//! jest-junit or vitest are that test — by its file and its name, as each runner writes them (see
//! [`super::junit`]).

use super::junit::{Case, Status};

/// The language of a test file, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// `.py`: `def test_x(...)`, at module level or in a class.
    Python,
    /// `.go`: `func TestX(t *testing.T)`.
    Go,
    /// `.js`, `.jsx`, `.mjs`, `.cjs`, `.ts`, `.tsx`, `.mts`, `.cts`: `it("title", ...)` or
    /// `test("title", ...)`.
    Script,
}

impl Language {
    /// The language of the file at the root-relative `relative`, if it is one of these.
    pub fn of(relative: &str) -> Option<Self> {
        let extension = relative.rsplit_once('.')?.1;
        match extension {
            "py" => Some(Self::Python),
            "go" => Some(Self::Go),
            "js" | "jsx" | "mjs" | "cjs" | "ts" | "tsx" | "mts" | "cts" => Some(Self::Script),
            _ => None,
        }
    }
}

/// A test declared in a file of another language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignTest {
    /// The file's language.
    pub language: Language,
    /// The function's name, or the `it`/`test` title.
    pub name: String,
}

/// The test the annotation at 1-based `line` of `content` precedes: the first line after it that
/// is not blank, a comment or a decorator must declare it.
// i[impl spec-check.test-backed.runners]
pub fn test_after(relative: &str, content: &str, line: usize) -> Option<ForeignTest> {
    let language = Language::of(relative)?;
    let declaration = content.lines().skip(line).map(str::trim).find(|text| {
        !(text.is_empty()
            || text.starts_with('#')
            || text.starts_with("//")
            || text.starts_with("/*")
            || text.starts_with('*')
            || text.starts_with('@'))
    })?;
    let name = match language {
        Language::Python => {
            let rest = declaration.strip_prefix("async ").unwrap_or(declaration);
            identifier(rest.strip_prefix("def ")?)
        }
        Language::Go => {
            let rest = declaration.strip_prefix("func ")?;
            // A method (`func (s *Suite) TestX`): the name follows the receiver.
            let rest = match rest.strip_prefix('(') {
                Some(receiver) => receiver.split_once(')')?.1.trim_start(),
                None => rest,
            };
            identifier(rest)
        }
        Language::Script => title(declaration),
    }?;
    Some(ForeignTest { language, name })
}

/// The leading identifier of `text`.
fn identifier(text: &str) -> Option<String> {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    (end > 0).then(|| text[..end].to_owned())
}

/// The title of `it("title", ...)` or `test('title', ...)`, with modifiers such as `.only`.
fn title(declaration: &str) -> Option<String> {
    let call = declaration
        .strip_prefix("it")
        .or_else(|| declaration.strip_prefix("test"))?;
    let open = call.find('(')?;
    let modifiers = &call[..open];
    // `it(`, or a modifier chain such as `.only(` or `.concurrent.skip(`.
    let plain = modifiers.is_empty()
        || modifiers
            .strip_prefix('.')
            .is_some_and(|chain| chain.chars().all(|c| c.is_alphanumeric() || c == '.'));
    if !plain {
        return None;
    }
    let rest = call[open + 1..].trim_start();
    let quote = rest
        .chars()
        .next()
        .filter(|q| matches!(q, '"' | '\'' | '`'))?;
    let body = &rest[1..];
    Some(body[..body.find(quote)?].to_owned())
}

/// Whether `case` is a run of `test`, declared in the root-relative file `relative`: the case's
/// `file` when the runner wrote one, else its class name or suite as that runner derives it from
/// the file; and the name, with pytest's parameters (`[...]`) and Go's subtests (`/...`) being
/// runs of the same test.
pub fn matches(case: &Case, relative: &str, test: &ForeignTest) -> bool {
    same_file(case, relative, test.language) && same_name(&case.name, test)
}

fn same_file(case: &Case, relative: &str, language: Language) -> bool {
    if let Some(file) = &case.file {
        let file = file.strip_prefix("./").unwrap_or(file);
        return file == relative
            || relative.ends_with(&format!("/{file}"))
            || file.ends_with(&format!("/{relative}"));
    }
    let classname = case.classname.as_deref().unwrap_or_default();
    match language {
        Language::Python => {
            // pytest's class name is the module's dotted path from its rootdir, then the class.
            let module = relative
                .strip_suffix(".py")
                .unwrap_or(relative)
                .replace('/', ".");
            let parts: Vec<&str> = module.split('.').collect();
            (0..parts.len()).any(|from| {
                let suffix = parts[from..].join(".");
                classname == suffix || classname.starts_with(&format!("{suffix}."))
            })
        }
        Language::Go => {
            // go-junit-report names the package by its import path, which ends with the file's
            // directory (the module root's package has none).
            let dir = relative.rsplit_once('/').map_or("", |(dir, _)| dir);
            let package = if classname.is_empty() {
                case.suite.as_str()
            } else {
                classname
            };
            dir.is_empty() || package == dir || package.ends_with(&format!("/{dir}"))
        }
        // vitest names the suite (and class) by the file; jest-junit without `addFileAttribute`
        // writes no file at all, and then only the title can tell.
        Language::Script => {
            case.suite == relative
                || classname == relative
                || !(case.suite.contains('/') || classname.contains('/'))
        }
    }
}

fn same_name(name: &str, test: &ForeignTest) -> bool {
    let wanted = test.name.as_str();
    match test.language {
        Language::Python => {
            name == wanted
                || name
                    .strip_prefix(wanted)
                    .is_some_and(|rest| rest.starts_with('['))
        }
        Language::Go => {
            name == wanted
                || name
                    .strip_prefix(wanted)
                    .is_some_and(|rest| rest.starts_with('/'))
        }
        // vitest joins the describe blocks and the title with ` > `, jest-junit with spaces.
        Language::Script => {
            name == wanted
                || name.ends_with(&format!(" > {wanted}"))
                || name.ends_with(&format!(" {wanted}"))
        }
    }
}

/// The status of `test` among `cases`: the worst of its runs (parameters, subtests, repeats);
/// `None` when no case is a run of it; `Err` with the names when a script title matches cases
/// of different tests.
pub fn status(
    cases: &[Case],
    relative: &str,
    test: &ForeignTest,
) -> Option<Result<Status, Vec<String>>> {
    let found: Vec<&Case> = cases
        .iter()
        .filter(|case| matches(case, relative, test))
        .collect();
    let worst = found.iter().map(|case| case.status).max()?;
    if test.language == Language::Script {
        let mut names: Vec<String> = found
            .iter()
            .map(|case| format!("{} {}", case.suite, case.name))
            .collect();
        names.sort();
        names.dedup();
        if names.len() > 1 {
            return Some(Err(names));
        }
    }
    Some(Ok(worst))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec_check::junit::{Runner, parse};

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

    fn report(file: &str) -> crate::spec_check::junit::Results {
        let text = std::fs::read_to_string(format!("{FIXTURES}/{file}")).expect("fixture");
        parse(&text).expect("a JUnit report")
    }

    fn of(relative: &str, content: &str, line: usize) -> ForeignTest {
        test_after(relative, content, line).expect("a test follows")
    }

    // i[verify spec-check.test-backed.runners]
    #[test]
    fn pytest_cases_are_found_by_module_class_and_function() {
        let source = std::fs::read_to_string(format!("{FIXTURES}/python/tests/test_ops.py"))
            .expect("fixture");
        let file = "tests/test_ops.py";
        let add = of(file, &source, 6);
        let div = of(file, &source, 12);
        let round = of(file, &source, 18);
        assert_eq!(
            [add.name.as_str(), div.name.as_str(), round.name.as_str()],
            [
                "test_add_gives_the_sum",
                "test_by_zero_raises",
                "test_rounds_to_two_decimals"
            ]
        );
        for junit in ["python/junit.xml", "junit/pytest-xunit1.xml"] {
            let results = report(junit);
            assert_eq!(results.runner, Runner::Pytest, "{junit}");
            let status = |test: &ForeignTest| status(&results.detail, file, test);
            assert_eq!(status(&add), Some(Ok(Status::Passed)), "{junit}");
            assert_eq!(status(&div), Some(Ok(Status::Passed)), "{junit}");
            assert_eq!(status(&round), Some(Ok(Status::Skipped)), "{junit}");
            assert_eq!(
                super::status(&results.detail, "tests/test_other.py", &add),
                None,
                "{junit}: another file's test of that name"
            );
        }
    }

    // i[verify spec-check.test-backed.runners]
    #[test]
    fn go_vitest_and_jest_cases_are_found_by_file_and_name() {
        let go = report("junit/go-junit-report.xml");
        assert_eq!(go.runner, Runner::Go);
        let source = "package ops\n\n// r[verify calc.div]\nfunc TestDiv(t *testing.T) {\n";
        let div = of("ops/ops_test.go", source, 3);
        assert_eq!(div.name, "TestDiv");
        assert_eq!(
            status(&go.detail, "ops/ops_test.go", &div),
            Some(Ok(Status::Passed))
        );
        assert_eq!(status(&go.detail, "other/ops_test.go", &div), None);
        let round = ForeignTest {
            language: Language::Go,
            name: "TestRound".into(),
        };
        assert_eq!(
            status(&go.detail, "ops/ops_test.go", &round),
            Some(Ok(Status::Failed))
        );

        let script =
            "describe('calc', () => {\n  // r[verify calc.add]\n  it('adds two numbers', () => {\n";
        for (junit, runner, file, rounds) in [
            (
                "junit/vitest-junit.xml",
                Runner::Vitest,
                "web/calc.test.ts",
                Status::Failed,
            ),
            (
                "junit/jest-junit.xml",
                Runner::Jest,
                "web/calc.test.js",
                Status::Skipped,
            ),
        ] {
            let results = report(junit);
            assert_eq!(results.runner, runner, "{junit}");
            let add = of(file, script, 2);
            assert_eq!(add.name, "adds two numbers");
            assert_eq!(
                status(&results.detail, file, &add),
                Some(Ok(Status::Passed)),
                "{junit}"
            );
            let round = ForeignTest {
                language: Language::Script,
                name: "rounds to two decimals".into(),
            };
            assert_eq!(
                status(&results.detail, file, &round),
                Some(Ok(rounds)),
                "{junit}"
            );
            assert_eq!(
                status(&results.detail, "web/other.test.ts", &add),
                None,
                "{junit}"
            );
        }
    }

    #[test]
    fn only_a_declaration_right_after_the_annotation_is_its_test() {
        let python = "# c[verify x.y]\n@pytest.mark.slow\n\nasync def test_it():\n";
        assert_eq!(of("t.py", python, 1).name, "test_it");
        assert_eq!(
            test_after("t.py", "# c[verify x.y]\nx = 1\ndef test_it():\n", 1),
            None
        );
        let method = "// r[verify x.y]\nfunc (s *Suite) TestIt() {\n";
        assert_eq!(of("a/b_test.go", method, 1).name, "TestIt");
        let only = "// r[verify x.y]\ntest.only(`it works`, () => {\n";
        assert_eq!(of("a.test.ts", only, 1).name, "it works");
        assert_eq!(
            test_after("a.test.ts", "// r[verify x.y]\nitems(1)\n", 1),
            None
        );
        assert_eq!(test_after("a.rb", "# r[verify x.y]\ndef test_x\n", 1), None);
    }
}
