//! Why a trace cannot be made: the tree, the findings or the results cannot be used, or the rule
//! asked for is not one. Each message is the line the command line prints after `error: `.

use crate::model::findings;
use crate::spec_check::problem::Problem;

/// A trace that cannot be made (`cargo xtask trace` exits 2).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The tree cannot be read at all (no usable config).
    #[error("{0}")]
    Unreadable(Box<Problem>),
    /// The config or a spec has problems of its own: a verdict built on them would be wrong.
    #[error(
        "the spec cannot be read as written ({} problem{}), so nothing is judged; fix these first \
         (`cargo xtask spec-check` lists them too):\n{}",
        .0.len(),
        if .0.len() == 1 { "" } else { "s" },
        listed(.0)
    )]
    Broken(Vec<Problem>),
    /// The findings file cannot be used.
    #[error(transparent)]
    Findings(#[from] findings::Error),
    /// A results file or the skip ledger cannot be used.
    #[error("{}", .problem.to_string().replace(.root.as_str(), "."))]
    Results {
        /// What is wrong with it.
        problem: Box<Problem>,
        /// The tree's root, shown as `.` in the message.
        root: String,
    },
    /// What was asked for is not a rule id.
    #[error("`{0}` is not a rule id")]
    NotARuleId(String),
    /// No spec defines the rule asked for.
    #[error("no spec defines the rule `{id}`{}", did_you_mean(.similar))]
    UnknownRule {
        /// The id asked for, as written (without its marker).
        id: String,
        /// Markers of rules with similar ids.
        similar: Vec<String>,
    },
    /// A rule of the tree that the trace could not follow.
    #[error("rule {0} could not be traced")]
    Untraceable(String),
}

/// One `  problem` line per problem.
fn listed(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|problem| format!("  {problem}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// ` (did you mean A, B?)`, or nothing.
fn did_you_mean(similar: &[String]) -> String {
    if similar.is_empty() {
        String::new()
    } else {
        format!(" (did you mean {}?)", similar.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use crate::model::tree::Memory;
    use crate::spec_check;

    const CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/demo.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";

    fn tree(spec: &str) -> Memory {
        Memory::new([
            (".config/tracey/config.styx", CONFIG),
            ("docs/demo.md", spec),
            ("src/lib.rs", "// t[impl demo.alpha]\npub fn alpha() {}\n"),
        ])
    }

    /// Each way a trace fails is a variant of its own, and prints the line the command line has
    /// always printed.
    // i[verify trace.rule]
    #[test]
    fn a_rule_that_cannot_be_traced_is_a_typed_error() {
        let memory = tree("# Demo\n\n> t[demo.alpha]\n> Alpha.\n");
        let read = crate::trace::usable(spec_check::read(&memory)).expect("a usable tree");
        let trace = |wanted| crate::trace::rule_report::trace(&memory, &read, &[], wanted, None);
        let Err(error) = trace("demo.alpah") else {
            panic!("an unknown rule");
        };
        assert!(
            matches!(&error, Error::UnknownRule { id, similar } if id == "demo.alpah" && similar == &["t[demo.alpha]"]),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "no spec defines the rule `demo.alpah` (did you mean t[demo.alpha]?)"
        );
        let Err(error) = trace("t[]") else {
            panic!("not a rule id");
        };
        assert!(matches!(error, Error::NotARuleId(_)), "{error:?}");
        assert_eq!(error.to_string(), "`t[]` is not a rule id");
    }

    // i[verify trace.broken-spec]
    #[test]
    fn a_broken_spec_is_a_typed_error_listing_its_problems() {
        let memory = tree("# Demo\n\n> t[demo.alpha]\n> Alpha.\n\n> t[demo.alpha]\n> Again.\n");
        let Err(error) = crate::trace::usable(spec_check::read(&memory)) else {
            panic!("a duplicate rule");
        };
        let Error::Broken(problems) = &error else {
            panic!("{error:?}");
        };
        assert_eq!(problems.len(), 1, "{problems:?}");
        let text = error.to_string();
        assert!(
            text.starts_with(
                "the spec cannot be read as written (1 problem), so nothing is judged; fix these \
                 first (`cargo xtask spec-check` lists them too):\n  docs/demo.md:6: [duplicate-rule]"
            ),
            "{text}"
        );
    }
}
