//! Tests in languages other than Rust: which test a `verify` annotation in a Python, Go,
//! JavaScript or TypeScript file precedes, and which JUnit cases of pytest, go-junit-report,
//! jest-junit or vitest are that test — by its file and its name, as each runner writes them (see
//! [`super::junit`]).

use super::junit::{Case, Runner, Status};
use crate::model::tree::Tree;

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
    /// Declared so that it never runs (`it.todo`, `it.skip`, `xit`, `xtest`): whatever a report
    /// says of it, it is no passing test.
    pub skipped: bool,
}

/// The test the annotation at 1-based `line` of `content` precedes: the first line after it that
/// is not blank, a comment or a decorator (with its bracketed arguments, over as many lines as
/// they take) must declare it, named as its runner collects tests — pytest's `test` prefix, Go's
/// `Test` not followed by a lowercase letter, a script's `it`/`test` call (its title may start on
/// the next line).
// i[impl spec-check.test-backed.runners+2]
pub fn test_after(relative: &str, content: &str, line: usize) -> Option<ForeignTest> {
    let language = Language::of(relative)?;
    let mut lines = content.lines().skip(line);
    let (declaration, indent) = loop {
        let raw = lines.next()?;
        let text = raw.trim();
        if text.is_empty()
            || text.starts_with('#')
            || text.starts_with("//")
            || text.starts_with("/*")
            || text.starts_with('*')
        {
            continue;
        }
        if text.starts_with('@') {
            // A decorator's arguments may span lines: skip to where its brackets close.
            let mut depth = bracket_depth(text);
            while depth > 0 {
                depth += bracket_depth(lines.next()?);
            }
            continue;
        }
        break (text.to_owned(), indentation(raw));
    };
    let (name, skipped) = match language {
        Language::Python => {
            let rest = declaration.strip_prefix("async ").unwrap_or(&declaration);
            let name = identifier(rest.strip_prefix("def ")?)?;
            // pytest collects functions whose name starts with `test` (its default
            // `python_functions`), at module level or in classes named `Test…`.
            let collected = name.starts_with("test") && in_test_classes(content, line, indent);
            (collected.then_some(name)?, false)
        }
        Language::Go => {
            let rest = declaration.strip_prefix("func ")?;
            // A method (`func (s *Suite) TestX`): the name follows the receiver.
            let rest = match rest.strip_prefix('(') {
                Some(receiver) => receiver.split_once(')')?.1.trim_start(),
                None => rest,
            };
            let name = identifier(rest)?;
            // `go test` runs `TestXxx` where Xxx does not start with a lowercase letter.
            let go_test = name
                .strip_prefix("Test")
                .is_some_and(|rest| !rest.starts_with(|c: char| c.is_lowercase()));
            (go_test.then_some(name)?, false)
        }
        Language::Script => {
            // Prettier puts a long title on the line after `it(`.
            let declaration = if declaration.ends_with('(') {
                let next = lines
                    .map(str::trim)
                    .find(|text| !text.is_empty())
                    .unwrap_or_default();
                format!("{declaration}{next}")
            } else {
                declaration
            };
            title(&declaration)?
        }
    };
    Some(ForeignTest {
        language,
        name,
        skipped,
    })
}

/// The width of `line`'s leading whitespace.
fn indentation(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Whether a Python `def` indented by `indent`, after the first `before` lines of `content`, is
/// where pytest collects tests (its default `python_classes`): at module level, or in classes
/// named `Test…` only (a class in a class counts), never in a function or another class. The
/// blocks it is in are found walking up to each less indented line; a bracket or string closing
/// at a lower indentation could mislead this, which pytest-style test files rarely have.
// i[impl spec-check.placement.foreign+2]
fn in_test_classes(content: &str, before: usize, mut indent: usize) -> bool {
    for raw in content
        .lines()
        .take(before)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        if indent == 0 {
            break;
        }
        let text = raw.trim();
        if text.is_empty() || text.starts_with('#') || indentation(raw) >= indent {
            continue;
        }
        if !text
            .strip_prefix("class ")
            .is_some_and(|name| name.starts_with("Test"))
        {
            return false;
        }
        indent = indentation(raw);
    }
    indent == 0
}

/// How many more brackets `text` opens than it closes (strings and comments not told apart:
/// a decorator's arguments rarely hold an unbalanced bracket in a string).
fn bracket_depth(text: &str) -> isize {
    text.chars()
        .map(|c| match c {
            '(' | '[' | '{' => 1,
            ')' | ']' | '}' => -1,
            _ => 0,
        })
        .sum()
}

/// The leading identifier of `text`.
fn identifier(text: &str) -> Option<String> {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    (end > 0).then(|| text[..end].to_owned())
}

/// The title of `it("title", ...)` or `test('title', ...)`, with modifiers such as `.only`, and
/// whether the declaration keeps it from running (`.todo`, `.skip`, `xit`, `xtest`).
fn title(declaration: &str) -> Option<(String, bool)> {
    let (call, excluded) = match declaration.strip_prefix('x') {
        Some(rest) => (rest, true),
        None => (declaration, false),
    };
    let call = call
        .strip_prefix("it")
        .or_else(|| call.strip_prefix("test"))?;
    let open = call.find('(')?;
    let modifiers = &call[..open];
    // `it(`, or a modifier chain such as `.only(` or `.concurrent.skip(`.
    let chain: Option<Vec<&str>> = if modifiers.is_empty() {
        Some(Vec::new())
    } else {
        modifiers
            .strip_prefix('.')
            .filter(|chain| chain.chars().all(|c| c.is_alphanumeric() || c == '.'))
            .map(|chain| chain.split('.').collect())
    };
    let chain = chain?;
    let skipped = excluded
        || chain
            .iter()
            .any(|modifier| matches!(*modifier, "todo" | "skip"));
    let rest = call[open + 1..].trim_start();
    let quote = rest
        .chars()
        .next()
        .filter(|q| matches!(q, '"' | '\'' | '`'))?;
    let body = &rest[1..];
    Some((body[..body.find(quote)?].to_owned(), skipped))
}

/// What a case is matched against: the tree (Go's `go.mod`) and the tree's files
/// (root-relative).
pub struct Context<'a> {
    /// The tree the files are in.
    pub tree: &'a dyn Tree,
    /// Every scanned file of the tree, root-relative.
    pub files: Vec<&'a str>,
}

/// Which of the tree's files a case can be a test of. A case whose name fits several files (a
/// path suffix, or a dotted module suffix) is ambiguous unless one of them fits it whole.
fn files_of<'a>(case: &Case, context: &Context<'a>, language: Language) -> Vec<&'a str> {
    let of_language = || {
        context
            .files
            .iter()
            .copied()
            .filter(move |file| Language::of(file) == Some(language))
    };
    if let Some(file) = &case.file {
        return by_path(file, context, of_language());
    }
    let classname = case.classname.as_deref().unwrap_or_default();
    match language {
        Language::Python => {
            // pytest's class name is the module's dotted path from its rootdir, then the class.
            let fits =
                |module: &str| classname == module || classname.starts_with(&format!("{module}."));
            let dotted = |file: &str| file.strip_suffix(".py").unwrap_or(file).replace('/', ".");
            let exact: Vec<&str> = of_language().filter(|file| fits(&dotted(file))).collect();
            if !exact.is_empty() {
                return exact;
            }
            // Run from a directory of the tree: the module path is a suffix of the file's.
            of_language()
                .filter(|file| {
                    let module = dotted(file);
                    module
                        .match_indices('.')
                        .any(|(at, _)| fits(&module[at + 1..]))
                })
                .collect()
        }
        // go-junit-report names the package by its import path: see [`go_package`].
        Language::Go => Vec::new(),
        // vitest names the suite (and class) by the file, relative to its root.
        Language::Script if case.runner == Runner::Vitest => {
            let file = if case.suite.is_empty() {
                classname
            } else {
                case.suite.as_str()
            };
            by_path(file, context, of_language())
        }
        // jest-junit without `addFileAttribute` names no file: such reports are refused.
        Language::Script => Vec::new(),
    }
}

/// The files among `candidates` that `file` (as a runner wrote it) names: the one it names whole,
/// else those it ends (the runner ran in a directory of the tree); an absolute path is first
/// made relative to the root.
fn by_path<'a>(
    file: &str,
    context: &Context<'a>,
    candidates: impl Iterator<Item = &'a str> + Clone,
) -> Vec<&'a str> {
    let file = file.strip_prefix("./").unwrap_or(file);
    let root = context.tree.root().display().to_string();
    let file = file
        .strip_prefix(&root)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or(file);
    let exact: Vec<&str> = candidates.clone().filter(|c| *c == file).collect();
    if !exact.is_empty() {
        return exact;
    }
    let tail = format!("/{file}");
    candidates.filter(|c| c.ends_with(&tail)).collect()
}

/// The import path of the Go package of the root-relative `relative`: the module its nearest
/// `go.mod` declares, then the file's directory below that `go.mod`.
fn go_package(tree: &dyn Tree, relative: &str) -> Option<String> {
    let dir = relative.rsplit_once('/').map_or("", |(dir, _)| dir);
    let mut at = dir;
    loop {
        let go_mod = if at.is_empty() {
            "go.mod".to_owned()
        } else {
            format!("{at}/go.mod")
        };
        if let Ok(text) = tree.read(&tree.root().join(go_mod)) {
            let module = module_of(&text)?;
            let below = dir[at.len()..].trim_start_matches('/');
            return Some(if below.is_empty() {
                module
            } else {
                format!("{module}/{below}")
            });
        }
        if at.is_empty() {
            return None;
        }
        at = at.rsplit_once('/').map_or("", |(parent, _)| parent);
    }
}

/// The module path a `go.mod` declares (`module example.com/m`, possibly quoted, possibly
/// followed by a comment).
fn module_of(go_mod: &str) -> Option<String> {
    go_mod.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("module")?;
        if !rest.starts_with(char::is_whitespace) {
            return None;
        }
        let rest = rest.split("//").next().unwrap_or_default().trim();
        let module = rest.trim_matches(|c| c == '"' || c == '`');
        (!module.is_empty()).then(|| module.to_owned())
    })
}

fn same_name(name: &str, test: &ForeignTest, runner: Runner) -> bool {
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
        Language::Script if runner == Runner::Vitest => {
            name == wanted || name.ends_with(&format!(" > {wanted}"))
        }
        Language::Script => name == wanted || name.ends_with(&format!(" {wanted}")),
    }
}

/// The status of `test`, declared in the root-relative file `relative`, among `cases`, with the
/// runner of the cases that judged it: the worst of its runs (parameters, subtests, repeats);
/// `None` when no case is a run of it; `Err` with the names when a case of its name fits several
/// files of the tree, or a script title matches cases of different tests.
// i[impl spec-check.test-backed.runners+2]
pub fn status(
    cases: &[Case],
    context: &Context<'_>,
    relative: &str,
    test: &ForeignTest,
) -> Option<(Runner, Result<Status, Vec<String>>)> {
    let package = (test.language == Language::Go)
        .then(|| go_package(context.tree, relative))
        .flatten();
    let mut ambiguous = Vec::new();
    let found: Vec<&Case> = cases
        .iter()
        .filter(|case| same_name(&case.name, test, case.runner))
        .filter(|case| {
            if test.language == Language::Go {
                let named = match case.classname.as_deref() {
                    Some(classname) if !classname.is_empty() => classname,
                    _ => case.suite.as_str(),
                };
                return package.as_deref() == Some(named);
            }
            let files = files_of(case, context, test.language);
            if !files.contains(&relative) {
                return false;
            }
            if files.len() > 1 {
                ambiguous.push(format!("{} (fits {})", case.name, files.join(", ")));
            }
            true
        })
        .collect();
    let worst = found.iter().map(|case| case.status).max()?;
    let runner = found
        .iter()
        .find(|case| case.status == worst)
        .map_or(Runner::Other, |case| case.runner);
    if !ambiguous.is_empty() {
        ambiguous.sort();
        ambiguous.dedup();
        return Some((runner, Err(ambiguous)));
    }
    if test.language == Language::Script {
        let mut names: Vec<String> = found
            .iter()
            .map(|case| format!("{} {}", case.suite, case.name))
            .collect();
        names.sort();
        names.dedup();
        if names.len() > 1 {
            return Some((runner, Err(names)));
        }
    }
    Some((runner, Ok(worst)))
}

#[cfg(test)]
// These tests read the checked-in fixtures from the disk.
#[allow(clippy::disallowed_methods)]
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

    /// `test`'s status in `results` when it is declared in `relative`, in a memory tree of
    /// `files` (a `go.mod` at its root).
    fn judged(
        results: &crate::spec_check::junit::Results,
        files: &[&str],
        relative: &str,
        test: &ForeignTest,
    ) -> Option<Result<Status, Vec<String>>> {
        let tree = crate::Memory::new(
            files
                .iter()
                .map(|file| (*file, ""))
                .chain([("go.mod", "module example.com/calc\n")]),
        );
        let context = Context {
            tree: &tree,
            files: files.to_vec(),
        };
        status(&results.detail, &context, relative, test).map(|(runner, status)| {
            assert_eq!(runner, results.runner);
            status
        })
    }

    fn script(name: &str) -> ForeignTest {
        ForeignTest {
            language: Language::Script,
            name: name.into(),
            skipped: false,
        }
    }

    // i[verify spec-check.placement.foreign+2]
    #[test]
    fn a_python_test_is_a_module_level_def_or_a_method_of_a_test_class() {
        let source = "\
import pytest


# r[verify a]
def test_top():
    # r[verify b]
    def test_inner():
        pass


class TestOuter:
    # r[verify c]
    @pytest.mark.slow
    def test_method(self):
        pass

    class TestNested:
        # r[verify d]
        def test_deeper(self):
            pass


class Helper:
    # r[verify e]
    def test_sub(self):
        pass
";
        let at = |line| test_after("tests/test_x.py", source, line).map(|t| t.name);
        assert_eq!(at(4).as_deref(), Some("test_top"), "module level");
        assert_eq!(
            at(6),
            None,
            "nested in a function: pytest never collects it"
        );
        assert_eq!(at(12).as_deref(), Some("test_method"), "in class Test…");
        assert_eq!(at(18).as_deref(), Some("test_deeper"), "in Test… in Test…");
        assert_eq!(at(24), None, "in a class pytest does not collect");
    }

    // i[verify spec-check.test-backed.runners+2]
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
        let files = [file, "tests/test_other.py", "src/calc/ops.py"];
        for junit in ["python/junit.xml", "junit/pytest-xunit1.xml"] {
            let results = report(junit);
            assert_eq!(results.runner, Runner::Pytest, "{junit}");
            let status = |test: &ForeignTest| judged(&results, &files, file, test);
            assert_eq!(status(&add), Some(Ok(Status::Passed)), "{junit}");
            assert_eq!(status(&div), Some(Ok(Status::Passed)), "{junit}");
            assert_eq!(status(&round), Some(Ok(Status::Skipped)), "{junit}");
            assert_eq!(
                judged(&results, &files, "tests/test_other.py", &add),
                None,
                "{junit}: another file's test of that name"
            );
        }
    }

    // i[verify spec-check.test-backed.runners+2]
    #[test]
    fn go_vitest_and_jest_cases_are_found_by_file_and_name() {
        let go = report("junit/go-junit-report.xml");
        assert_eq!(go.runner, Runner::Go);
        let source = "package ops\n\n// r[verify calc.div]\nfunc TestDiv(t *testing.T) {\n";
        let div = of("ops/ops_test.go", source, 3);
        assert_eq!(div.name, "TestDiv");
        let files = ["ops/ops_test.go", "other/ops_test.go"];
        assert_eq!(
            judged(&go, &files, "ops/ops_test.go", &div),
            Some(Ok(Status::Passed))
        );
        assert_eq!(judged(&go, &files, "other/ops_test.go", &div), None);
        let round = ForeignTest {
            language: Language::Go,
            name: "TestRound".into(),
            skipped: false,
        };
        assert_eq!(
            judged(&go, &files, "ops/ops_test.go", &round),
            Some(Ok(Status::Failed))
        );

        let source =
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
            let files = [file, "web/other.test.ts"];
            let add = of(file, source, 2);
            assert_eq!(add.name, "adds two numbers");
            assert_eq!(
                judged(&results, &files, file, &add),
                Some(Ok(Status::Passed)),
                "{junit}"
            );
            assert_eq!(
                judged(&results, &files, file, &script("rounds to two decimals")),
                Some(Ok(rounds)),
                "{junit}"
            );
            assert_eq!(
                judged(&results, &files, "web/other.test.ts", &add),
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
