//! The node's configuration: TOML, validated in full before anything starts.
//!
//! Every error names the file, line, column and key (`FILE:LINE:COL: KEY: message`); unknown keys
//! are errors with a did-you-mean; durations are written `"5s"`, `"5m"`. The embedded default is
//! `examples/single-node.toml`, included verbatim so that the two cannot drift apart.
//!
//! In layers, as ripgrep reads its arguments (`lowargs` → `hiargs`):
//!
//! - the low layer is the file as written: `schema` and `gateway` (the serde structs with their
//!   spans and defaults) and `locate` (spans to `FILE:LINE:COL`, did-you-mean, messages without
//!   values);
//! - `validate` and `gateway_validate` check the whole schema, each refusal located;
//! - the high layer, `convert`, `gateway_convert` and `forward_convert`, turns the validated schema
//!   into each module's own config once.
//!
//! The config imports no module of the node (not the admin API, the modules or the forward
//! client): they and `run` consume it, never the other way (a test below keeps it so).

// i[impl node.config.layers+5]
mod convert;
mod forward_convert;
mod gateway;
mod gateway_convert;
mod gateway_validate;
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
pub use forward_convert::{AccessSpec, Bounds, ClientGrant, ForwardSettings};
pub use gateway::{
    AuthSection, CloseSetting, ClusterSection, DrainSection, GatewaySection, MAX_HISTORY_SIZE,
    MAX_HISTORY_TTL, MAX_LEEWAY, MAX_MESSAGE_SIZE, MAX_SEND_QUEUE, MIN_TOKEN_KEY_LEN,
    RoomsDefaultSetting, TlsSection, holds_tls_alpn01_bind, issuance_bundle,
};
pub use gateway_convert::{GatewaySettings, TokenKeySources, mint_token, read_token_secret};
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

    // i[impl node.pull.auth]
    /// [`Config::parse`] as the node itself loads its config (run, reload): also checks what
    /// only holds for the node's own user (who owns each `[pull.auth]` password file).
    pub fn parse_for_node(file: &str, text: &str) -> Result<Config, ConfigError> {
        let config = Config::parse(file, text)?;
        config.validate_pull_auth_owner(&Locator { file, text })?;
        Ok(config)
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
        let mut config = config;
        config.resolve_certificates();
        config.validate(&loc)?;
        Ok(config)
    }
}

#[cfg(test)]
mod layers {
    use syn::visit::Visit;

    /// The low layer's files (the schemas, the locating, the token reader).
    const LOW: [&str; 4] = ["schema.rs", "gateway.rs", "locate.rs", "token.rs"];
    /// The validation's files.
    const VALIDATE: [&str; 2] = ["validate", "gateway_validate"];
    /// The conversion's files.
    const CONVERT: [&str; 3] = ["convert", "gateway_convert", "forward_convert"];
    /// What the config may use of the crate: itself and the duration type.
    const ALLOWED: [&str; 2] = ["config", "duration"];

    /// Every path `text` names in its code (its `use` trees expanded, groups included, and the
    /// paths in its items), made absolute from the module `at` (`["config", "schema"]`) when it
    /// starts with `crate`, `self` or `super`; others (std, other crates, local names) are left
    /// out. Test modules (`#[cfg(test)] mod`) are not the config's code and are skipped.
    fn paths(at: &[&str], text: &str) -> Vec<Vec<String>> {
        struct Walk<'a> {
            at: &'a [&'a str],
            found: Vec<Vec<String>>,
        }
        impl Walk<'_> {
            /// `segments` made absolute (`crate` first), if it starts at the crate.
            fn absolute(&self, segments: &[String]) -> Option<Vec<String>> {
                let mut out: Vec<String> = match segments.first().map(String::as_str) {
                    Some("crate") => vec![],
                    Some("self" | "super") => self.at.iter().map(|s| (*s).to_owned()).collect(),
                    _ => return None,
                };
                let mut rest = segments;
                if rest.first().is_some_and(|s| s == "crate") {
                    rest = &rest[1..];
                } else {
                    while let Some(first) = rest.first() {
                        match first.as_str() {
                            "self" => {}
                            "super" => {
                                out.pop();
                            }
                            _ => break,
                        }
                        rest = &rest[1..];
                    }
                }
                out.extend(rest.iter().cloned());
                Some(out)
            }
            fn tree(&mut self, tree: &syn::UseTree, prefix: &[String]) {
                let with = |ident: &syn::Ident| {
                    let mut next = prefix.to_vec();
                    next.push(ident.to_string());
                    next
                };
                match tree {
                    syn::UseTree::Path(path) => self.tree(&path.tree, &with(&path.ident)),
                    syn::UseTree::Name(syn::UseName { ident })
                    | syn::UseTree::Rename(syn::UseRename { ident, .. }) => {
                        self.record(&with(ident));
                    }
                    syn::UseTree::Glob(_) => self.record(prefix),
                    syn::UseTree::Group(group) => {
                        for item in &group.items {
                            self.tree(item, prefix);
                        }
                    }
                }
            }
            fn record(&mut self, segments: &[String]) {
                if let Some(path) = self.absolute(segments) {
                    self.found.push(path);
                }
            }
        }
        impl<'ast> Visit<'ast> for Walk<'_> {
            fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
                self.tree(&item.tree, &[]);
            }
            fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
                let test = item.attrs.iter().any(|a| {
                    a.path().is_ident("cfg")
                        && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
                });
                if !test {
                    syn::visit::visit_item_mod(self, item);
                }
            }
            fn visit_path(&mut self, path: &'ast syn::Path) {
                let segments: Vec<String> =
                    path.segments.iter().map(|s| s.ident.to_string()).collect();
                self.record(&segments);
                syn::visit::visit_path(self, path);
            }
        }
        let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{at:?}: {e}"));
        let mut walk = Walk {
            at,
            found: Vec::new(),
        };
        walk.visit_file(&file);
        walk.found
    }

    /// The config's layers a file of module `at` must not use: the low layer neither validation
    /// nor conversion, the conversion not validation (validation uses the conversion).
    fn above(at: &[&str]) -> Vec<&'static str> {
        match at {
            ["config", file] if LOW.contains(&format!("{file}.rs").as_str()) => {
                VALIDATE.iter().chain(CONVERT.iter()).copied().collect()
            }
            ["config", file] if CONVERT.contains(file) => VALIDATE.to_vec(),
            _ => Vec::new(),
        }
    }

    /// What is wrong with the file of module `at` whose text is `text`: each module of the node
    /// it uses, and each layer above its own that it uses.
    fn violations(at: &[&str], text: &str) -> Vec<String> {
        let above = above(at);
        let mut out = Vec::new();
        for path in paths(at, text) {
            let Some(top) = path.first() else { continue };
            if !ALLOWED.contains(&top.as_str()) {
                out.push(format!("uses crate::{}", path.join("::")));
            } else if top == "config" && path.get(1).is_some_and(|m| above.contains(&m.as_str())) {
                out.push(format!(
                    "uses a layer above its own: crate::{}",
                    path.join("::")
                ));
            }
        }
        out
    }

    // i[verify node.config.layers+5]
    /// The config reaches into no module of the node (which made the node's modules an import
    /// cycle), and the low layer (the schema, the locating) uses neither validation nor
    /// conversion, and the conversion not validation. Every file of `config/` is checked, as it
    /// is on disk.
    #[test]
    fn the_config_depends_on_no_module_and_the_low_layer_on_no_higher_one() {
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let files: Vec<(Vec<String>, std::path::PathBuf)> =
            std::fs::read_dir(format!("{src}/config"))
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .filter(|path| path.extension().is_some_and(|e| e == "rs"))
                .map(|path| {
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    let module = name.trim_end_matches(".rs").to_owned();
                    let at = if module == "mod" {
                        vec!["config".to_owned()]
                    } else {
                        vec!["config".to_owned(), module]
                    };
                    (at, path)
                })
                .collect();
        assert!(files.len() >= 9, "{files:?}");
        for (at, path) in files {
            let at: Vec<&str> = at.iter().map(String::as_str).collect();
            let text = std::fs::read_to_string(&path).unwrap();
            let wrong = violations(&at, &text);
            assert!(wrong.is_empty(), "{}: {wrong:?}", path.display());
        }
    }

    // i[verify node.config.layers+5]
    /// The check sees every form an import of a module can take.
    #[test]
    fn the_layering_check_sees_grouped_relative_and_inline_paths() {
        let schema = ["config", "schema"];
        for text in [
            "use crate::admin::x;",
            "use crate::{admin::token as _};",
            "use crate::{config::Config, modules::{pull}};",
            "use super::super::modules::pull;",
            "use crate::run::*;",
            "fn f() { crate::admin::x(); }",
            "fn f() -> super::super::metrics::Metrics { todo!() }",
        ] {
            assert!(!violations(&schema, text).is_empty(), "{text}");
        }
        assert!(!violations(&["config", "gateway"], "use super::super::modules::x;").is_empty());
        assert!(!violations(&["config", "convert"], "use super::validate::X;").is_empty());
        assert!(
            !violations(
                &["config", "gateway_convert"],
                "use super::gateway_validate::X;"
            )
            .is_empty()
        );
        for text in [
            "use super::convert::X;",
            "use super::gateway_convert::X;",
            "use super::forward_convert::X;",
            "use crate::config::{validate::y};",
            "use super::{locate::L, validate};",
        ] {
            assert!(!violations(&schema, text).is_empty(), "{text}");
            assert!(
                !violations(&["config", "gateway"], text).is_empty(),
                "{text}"
            );
            assert!(
                violations(&["config", "validate"], text).is_empty(),
                "{text}"
            );
        }
        // What is allowed: the config itself, other crates, tests.
        for text in [
            "use super::locate::Locator;",
            "use crate::config::ConfigError;",
            "use crate::duration::ConfigDuration;",
            "use std::path::Path;",
            "use holdfast_pull::PullConfig;",
            "#[cfg(test)] mod tests { use crate::admin::x; }",
        ] {
            assert!(violations(&schema, text).is_empty(), "{text}");
        }
    }
}
