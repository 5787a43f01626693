//! The node's configuration: TOML, validated in full before anything starts.
//!
//! Every error names the file, line, column and key (`FILE:LINE:COL: KEY: message`); unknown keys
//! are errors with a did-you-mean; durations are written `"5s"`, `"5m"`. The embedded default is
//! `examples/single-node.toml`, included verbatim so that the two cannot drift apart.
//!
//! In layers, as ripgrep reads its arguments (`lowargs` → `hiargs`):
//!
//! - the low layer is the file as written: `schema` (the serde structs with their spans and
//!   defaults) and `locate` (spans to `FILE:LINE:COL`, did-you-mean, messages without values);
//! - `validate` checks the whole schema, each refusal located;
//! - the high layer, `convert`, turns the validated schema into each module's own config once.
//!
//! The config imports no module of the node (not the admin API, the modules or the forward
//! client): they and `run` consume it, never the other way (a test below keeps it so).

// i[impl node.config.layers]
mod convert;
mod locate;
mod schema;
pub mod token;
mod validate;

#[cfg(test)]
pub(crate) use convert::MAX_NAME_LEN;
pub use convert::{
    AllowedHost, MIN_FORWARD_TOKEN_LEN, PullInputs, TagChecks, WorkloadSettings, pull_config,
    read_forward_tokens,
};
pub use locate::{ConfigError, LoadError, line_col};
#[cfg(feature = "testing-modules")]
pub use schema::TestingSection;
pub use schema::{
    AdminSection, Config, DEFAULT_ADMIN_LISTEN, DEFAULT_CONFIG, DEFAULT_CONFIG_NAME, ForwardClient,
    ForwardSection, Listen, LogFormat, LogSection, NodeSection, PullPolicy, PullSection, Secret,
    SuperviseSection, Workload, WorkloadsSection,
};

use std::path::Path;

use locate::{Locator, did_you_mean, dotted, missing_field};

impl Config {
    /// The embedded single-node default.
    pub fn embedded() -> Result<Config, ConfigError> {
        Config::parse(DEFAULT_CONFIG_NAME, DEFAULT_CONFIG)
    }

    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Config, LoadError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            file: file.clone(),
            source,
        })?;
        Ok(Config::parse(&file, &text)?)
    }

    // i[impl node.config.errors]
    /// Parses and validates `text`, naming `file` in errors.
    pub fn parse(file: &str, text: &str) -> Result<Config, ConfigError> {
        let loc = Locator { file, text };
        let deserializer = toml::Deserializer::parse(text)
            .map_err(|e| loc.at(e.span(), "", e.message().to_owned()))?;
        let config: Config = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let mut key = dotted(e.path());
            let inner = e.inner();
            let message = match did_you_mean(inner.message()) {
                Some((unknown, message)) => {
                    if !key.ends_with(&unknown) {
                        key = if key.is_empty() {
                            unknown
                        } else {
                            format!("{key}.{unknown}")
                        };
                    }
                    message
                }
                None => match missing_field(inner.message()) {
                    Some(field) if key.is_empty() => {
                        key = field.to_owned();
                        format!("missing section [{field}]")
                    }
                    Some(field) => {
                        key = format!("{key}.{field}");
                        format!("missing key `{field}`")
                    }
                    None => inner.message().to_owned(),
                },
            };
            loc.at(inner.span(), &key, message)
        })?;
        config.validate(&loc)?;
        Ok(config)
    }
}

#[cfg(test)]
mod layers {
    /// Each file of the config, with whether it is the low layer.
    const FILES: [(&str, &str, bool); 7] = [
        ("config/schema.rs", include_str!("schema.rs"), true),
        ("config/locate.rs", include_str!("locate.rs"), true),
        ("config/token.rs", include_str!("token.rs"), true),
        ("config/validate.rs", include_str!("validate.rs"), false),
        ("config/convert.rs", include_str!("convert.rs"), false),
        ("config/mod.rs", include_str!("mod.rs"), false),
        (
            "gateway_config.rs",
            include_str!("../gateway_config.rs"),
            false,
        ),
    ];

    /// The first segment after each `prefix` in `text` (`crate::admin::x` → `admin`).
    fn segments<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.match_indices(prefix)
            .filter_map(|(at, _)| text.get(at + prefix.len()..))
            .map(|rest| {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                rest.get(..end).unwrap_or_default()
            })
            .filter(|segment| !segment.is_empty())
            .collect()
    }

    // i[verify node.config.layers]
    /// The config reaches into no module of the node (which made the node's modules an import
    /// cycle), and the low layer (the schema and the locating) uses neither validation nor
    /// conversion.
    #[test]
    fn the_config_depends_on_no_module_and_the_low_layer_on_no_higher_one() {
        // This very file names the forbidden paths in its docs and here: only its code counts.
        let code = |name: &str, text: &'static str| {
            if name == "config/mod.rs" {
                text.split("#[cfg(test)]\nmod layers")
                    .next()
                    .unwrap_or(text)
            } else {
                text
            }
        };
        for (name, text, low) in FILES {
            let text = code(name, text);
            for module in segments(text, "crate::") {
                assert!(
                    ["config", "duration", "gateway_config"].contains(&module),
                    "{name} uses crate::{module}: the config must not depend on a module"
                );
            }
            if low {
                let higher = segments(text, "super::")
                    .into_iter()
                    .chain(segments(text, "crate::config::"))
                    .find(|m| ["validate", "convert"].contains(m));
                assert_eq!(higher, None, "{name}: the low layer uses a higher one");
            }
        }
        // The check sees what it looks for.
        assert_eq!(segments("use crate::admin::x;", "crate::"), ["admin"]);
    }
}
