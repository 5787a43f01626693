//! Reads `.config/tracey/config.styx` into tracey-config's own types with facet-styx, the parser
//! tracey 1.3.0 uses, so a config this gate accepts is one tracey reads the same way.
//!
//! tracey 1.3.0's `query` answers "No specs configured" and exits 0 when the config cannot be parsed;
//! here every such case is a [`Kind::Config`] problem.

use tracey_config::Config;

use crate::model::tree::Tree;

use super::problem::{Kind, Problem};

/// Where tracey looks for its config, relative to the project root.
pub const CONFIG_PATH: &str = ".config/tracey/config.styx";

/// A parsed config and the problems that do not stop the check.
pub struct Loaded {
    /// tracey's config, as tracey reads it.
    pub config: Config,
    /// Unusable parts of the config (a spec without impls, a deprecated `prefix`, …).
    pub problems: Vec<Problem>,
}

/// Reads and validates the tree's config; an unreadable or unparsable config is an error.
// i[impl spec-check.config]
pub fn load(tree: &dyn Tree) -> Result<Loaded, Problem> {
    let path = tree.root().join(CONFIG_PATH);
    let text = tree.read(&path).map_err(|err| {
        Problem::new(
            Kind::Config,
            format!("cannot read the tracey config: {err}"),
        )
        .in_file(CONFIG_PATH)
    })?;
    // The generic tree locates syntax errors and names every key; the typed parse is what tracey
    // itself does and stays the authority on what the config means.
    let tree = styx_tree::parse(&text);
    let config: Config = facet_styx::from_str(&text).map_err(|err| {
        let problem = Problem::new(
            Kind::Config,
            format!(
                "cannot parse the tracey config: {}",
                one_line(&err.to_string())
            ),
        );
        match &tree {
            Err(styx_tree::BuildError::Parse(_, span)) => {
                problem.at(CONFIG_PATH, line_at(&text, span.start))
            }
            _ => problem.in_file(CONFIG_PATH),
        }
    })?;

    let mut problems = Vec::new();
    if let Ok(tree) = &tree {
        unknown_keys(&text, tree, &mut problems);
    }
    if config.specs.is_empty() {
        problems.push(
            Problem::new(
                Kind::Config,
                "the config declares no specs (expected `specs ( {...} )`)",
            )
            .in_file(CONFIG_PATH),
        );
    }
    for spec in &config.specs {
        // tracey 1.3.0 refuses both of these when it builds its data; so does the gate.
        if let Some(prefix) = &spec.prefix {
            problems.push(
                Problem::new(
                    Kind::Config,
                    format!(
                        "spec `{}` sets the deprecated `prefix {prefix}`; remove it (the prefix is \
                         inferred from the rule markers)",
                        spec.name
                    ),
                )
                .in_file(CONFIG_PATH)
                .spec(&spec.name),
            );
        }
        if spec.include.is_empty() {
            problems.push(
                Problem::new(
                    Kind::Config,
                    format!("spec `{}` has no `include` (its markdown files)", spec.name),
                )
                .in_file(CONFIG_PATH)
                .spec(&spec.name),
            );
        }
        if spec.impls.is_empty() {
            problems.push(
                Problem::new(
                    Kind::Config,
                    format!("spec `{}` has no `impls` (the sources to scan)", spec.name),
                )
                .in_file(CONFIG_PATH)
                .spec(&spec.name),
            );
        }
    }
    Ok(Loaded { config, problems })
}

/// Parser errors can span several lines (source excerpts); the problem list wants one.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn line_at(text: &str, offset: u32) -> usize {
    let offset = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

const ROOT_KEYS: &[&str] = &["specs"];
const SPEC_KEYS: &[&str] = &["name", "prefix", "source_url", "include", "impls"];
const IMPL_KEYS: &[&str] = &["name", "include", "exclude", "test_include"];

/// tracey's parser skips keys it does not know, so a misspelt `test_include` would silently make
/// every test file ordinary code. Each unknown key is a problem here.
fn unknown_keys(text: &str, root: &styx_tree::Value, problems: &mut Vec<Problem>) {
    let mut check = |object: &styx_tree::Object, known: &[&str], context: &str| {
        for entry in &object.entries {
            if entry.key.is_schema_tag() {
                continue;
            }
            let key = entry.key.scalar_text().unwrap_or("?");
            if known.contains(&key) {
                continue;
            }
            let line = entry.key.span.map_or(1, |span| line_at(text, span.start));
            problems.push(
                Problem::new(
                    Kind::Config,
                    format!(
                        "unknown key `{key}` in {context}; tracey ignores it silently (known keys: \
                         {})",
                        known.join(", ")
                    ),
                )
                .at(CONFIG_PATH, line),
            );
        }
    };
    let Some(root) = root.as_object() else {
        return;
    };
    check(root, ROOT_KEYS, "the config");
    let items = |value: Option<&styx_tree::Value>| -> Vec<styx_tree::Object> {
        value
            .and_then(styx_tree::Value::as_sequence)
            .map(|seq| {
                seq.items
                    .iter()
                    .filter_map(|v| v.as_object().cloned())
                    .collect()
            })
            .unwrap_or_default()
    };
    for spec in items(root.get("specs")) {
        let name = spec
            .get("name")
            .and_then(|v| v.scalar_text())
            .unwrap_or("?")
            .to_owned();
        check(&spec, SPEC_KEYS, &format!("spec `{name}`"));
        for implementation in items(spec.get("impls")) {
            let impl_name = implementation
                .get("name")
                .and_then(|v| v.scalar_text())
                .unwrap_or("?")
                .to_owned();
            check(
                &implementation,
                IMPL_KEYS,
                &format!("impl `{impl_name}` of spec `{name}`"),
            );
        }
    }
}
