//! Reads `.config/tracey/config.styx` into tracey-config's own types with facet-styx, the parser
//! tracey 1.3.0 uses, so a config this gate accepts is one tracey reads the same way.
//!
//! tracey 1.3.0's `query` answers "No specs configured" and exits 0 when the config cannot be parsed;
//! here every such case is a [`Kind::Config`] problem.

use std::path::Path;

use tracey_config::Config;

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

/// Reads and validates the config under `root`; an unreadable or unparsable config is an error.
// i[impl spec-check.config]
pub fn load(root: &Path) -> Result<Loaded, Problem> {
    let path = root.join(CONFIG_PATH);
    let text = std::fs::read_to_string(&path).map_err(|err| {
        Problem::new(
            Kind::Config,
            format!("cannot read the tracey config: {err}"),
        )
        .in_file(CONFIG_PATH)
    })?;
    let config: Config = facet_styx::from_str(&text).map_err(|err| {
        Problem::new(
            Kind::Config,
            format!(
                "cannot parse the tracey config: {}",
                one_line(&err.to_string())
            ),
        )
        .in_file(CONFIG_PATH)
    })?;

    let mut problems = Vec::new();
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
