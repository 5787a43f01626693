//! Reload: what a newly read config changes, module by module, decided without I/O.
//!
//! [`Inputs::of`] takes, for each module a config composes, the values of the sections the module
//! is built from (TOML values: formatting, comments and key order do not count), and the node's
//! own sections apart; [`diff`] compares two of them. Applying the [`Plan`] is `run`'s job.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Serialize;

use crate::config::Config;

/// What a reload does to one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Its inputs are the same: it is not touched.
    Unchanged,
    /// Its inputs changed: it restarts with the new config.
    Changed,
    /// The new config composes it and the running one did not: it starts.
    Appeared,
    /// The running config composes it and the new one does not: it stops.
    Disappeared,
    /// Its inputs changed and it took them live, without a restart (decided when applying,
    /// never by [`diff`]).
    Updated,
}

/// The node's own sections, never applied by a reload (`r[node.reload.node-sections]`).
pub const NODE_SECTIONS: [&str; 4] = ["node", "admin", "log", "supervise"];

/// What each module (and the node itself) is built from, in one config.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Inputs {
    /// Each composed module by name, with the values it is built from.
    pub modules: BTreeMap<String, toml::Value>,
    /// Each of [`NODE_SECTIONS`] that the file has, with its value.
    pub node: BTreeMap<String, toml::Value>,
}

/// The section `key` of `table`, or nothing.
fn section(table: &toml::Table, key: &str) -> toml::Value {
    table
        .get(key)
        .cloned()
        .unwrap_or_else(|| toml::Value::Table(toml::Table::new()))
}

/// `table[outer][inner]`, or nothing.
fn key_of(table: &toml::Table, outer: &str, inner: &str) -> toml::Value {
    table
        .get(outer)
        .and_then(|v| v.get(inner))
        .cloned()
        .unwrap_or_else(|| toml::Value::Table(toml::Table::new()))
}

/// Each `[[workload]]` entry's name, image, pull policy and credentials file (what the pull module
/// reads of them).
fn workload_images(table: &toml::Table) -> toml::Value {
    let entries = table
        .get("workload")
        .and_then(toml::Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .map(|w| {
                    let mut t = toml::Table::new();
                    for key in ["name", "image", "pull_policy", "credentials_file"] {
                        if let Some(v) = w.get(key) {
                            t.insert(key.to_owned(), v.clone());
                        }
                    }
                    toml::Value::Table(t)
                })
                .collect()
        })
        .unwrap_or_default();
    toml::Value::Array(entries)
}

fn several(values: impl IntoIterator<Item = (&'static str, toml::Value)>) -> toml::Value {
    toml::Value::Table(values.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

// r[impl node.reload.diff]
/// The inputs of the module `name` in the file `table`.
pub fn module_inputs(name: &str, table: &toml::Table) -> toml::Value {
    use crate::modules::{forward, gateway, issuance, pull, workload};
    match name {
        pull::NAME => several([
            ("pull", section(table, "pull")),
            ("workload", workload_images(table)),
        ]),
        workload::NAME => several([
            ("workload", section(table, "workload")),
            ("workloads", section(table, "workloads")),
            ("pull.enabled", key_of(table, "pull", "enabled")),
            ("pull.docker_host", key_of(table, "pull", "docker_host")),
        ]),
        issuance::NAME => section(table, "issuance"),
        forward::NAME => section(table, "forward"),
        gateway::NAME => section(table, "gateway"),
        // The test modules (and any module added later without its own entry here): the whole
        // file but the node's sections, so a change is never missed, only over-counted.
        _ if name.starts_with("testing-") => section(table, "testing"),
        _ => {
            let mut rest = table.clone();
            for key in NODE_SECTIONS {
                rest.remove(key);
            }
            toml::Value::Table(rest)
        }
    }
}

impl Inputs {
    /// The inputs of every module in `names` (the ones the config composes), from `table` (the
    /// file as TOML).
    pub fn from_table<'a>(names: impl IntoIterator<Item = &'a str>, table: &toml::Table) -> Self {
        Inputs {
            modules: names
                .into_iter()
                .map(|name| (name.to_owned(), module_inputs(name, table)))
                .collect(),
            node: NODE_SECTIONS
                .iter()
                .filter_map(|key| table.get(*key).map(|v| ((*key).to_owned(), v.clone())))
                .collect(),
        }
    }

    /// The inputs of `config`, whose file's text is `text` (already validated as `config`).
    pub fn of(config: &Config, text: &str) -> Result<Self, toml::de::Error> {
        let table: toml::Table = toml::from_str(text)?;
        Ok(Self::from_table(crate::run::module_names(config), &table))
    }
}

/// What a reload changes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Plan {
    /// Every module of either config, with what happens to it.
    pub modules: BTreeMap<String, Change>,
    /// The node's own sections that differ (not applied: they need a restart of the node).
    pub needs_restart: Vec<String>,
}

impl Plan {
    /// The modules with `change`.
    pub fn with(&self, change: Change) -> impl Iterator<Item = &str> {
        self.modules
            .iter()
            .filter(move |(_, c)| **c == change)
            .map(|(name, _)| name.as_str())
    }
}

// r[impl node.reload.diff]
// r[impl node.reload.node-sections]
/// What going from `running` to `new` changes, module by module.
pub fn diff(running: &Inputs, new: &Inputs) -> Plan {
    let mut modules = BTreeMap::new();
    for (name, inputs) in &running.modules {
        let change = match new.modules.get(name) {
            None => Change::Disappeared,
            Some(n) if n == inputs => Change::Unchanged,
            Some(_) => Change::Changed,
        };
        modules.insert(name.clone(), change);
    }
    for name in new.modules.keys() {
        modules.entry(name.clone()).or_insert(Change::Appeared);
    }
    let needs_restart = NODE_SECTIONS
        .iter()
        .filter(|key| running.node.get(**key) != new.node.get(**key))
        .map(|key| (*key).to_owned())
        .collect();
    Plan {
        modules,
        needs_restart,
    }
}

/// The running config's generation: 1 for the config the node started with, one more for each
/// reload that applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generation {
    /// The counter.
    pub generation: u64,
    /// When that config was loaded.
    pub loaded_at: SystemTime,
}

impl Default for Generation {
    fn default() -> Self {
        Generation {
            generation: 1,
            loaded_at: SystemTime::now(),
        }
    }
}

/// `at` in RFC 3339, UTC, to the second.
pub fn rfc3339(at: SystemTime) -> String {
    let format = time::format_description::well_known::Rfc3339;
    let secs = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    time::OffsetDateTime::from_unix_timestamp(i64::try_from(secs).unwrap_or(0))
        .ok()
        .and_then(|t| t.format(&format).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

impl Serialize for Generation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = s.serialize_struct("Generation", 2)?;
        out.serialize_field("generation", &self.generation)?;
        out.serialize_field("loaded_at", &rfc3339(self.loaded_at))?;
        out.end()
    }
}

/// A reload that applied: what `POST /v1/reload` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// The running config now.
    #[serde(flatten)]
    pub generation: Generation,
    /// What happened to each module.
    pub modules: BTreeMap<String, Change>,
    /// The node's sections that changed and were not applied.
    pub needs_restart: Vec<String>,
    /// How long the reload took, in milliseconds.
    pub took_ms: u64,
    /// The modules the reload started whose first start failed, with why (each goes on being
    /// restarted by its supervisor).
    pub failed: BTreeMap<String, String>,
}

/// A reload that did not apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    /// The file could not be read or is invalid (`FILE:LINE:COL: KEY: message`).
    #[error("{0}")]
    Invalid(String),
    /// The node is stopping.
    #[error("the node is stopping: no reload")]
    Stopping,
    /// No node loop takes reloads (the node is not running).
    #[error("reload is not available: the node is not running")]
    Unavailable,
    /// Too many reloads wait already (the one under way is stuck reading its file, perhaps).
    #[error("too many reloads are waiting already: try again once they ended")]
    Busy,
}

/// How a reload ended.
pub type Outcome = Result<Applied, ReloadError>;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn inputs(text: &str) -> Inputs {
        let config = Config::parse("reload.toml", text).unwrap();
        Inputs::of(&config, text).unwrap()
    }

    const BASE: &str = "[node]\n\
        [[workload]]\nname = \"web\"\nimage = \"nginx:1\"\n\
        [forward]\nlisten = \"127.0.0.1:0\"\ntokens = [\"reload-test-forward-token-0123456789\"]\nallow = [\"127.0.0.1:53\"]\n";

    // r[verify node.reload.diff]
    #[test]
    fn a_config_against_itself_changes_nothing_and_formatting_does_not_count() {
        let plan = diff(&inputs(BASE), &inputs(BASE));
        assert!(
            plan.modules.values().all(|c| *c == Change::Unchanged),
            "{plan:?}"
        );
        assert_eq!(plan.modules.len(), 3, "{plan:?}");
        assert!(plan.needs_restart.is_empty());
        // Comments, spacing and key order are not changes.
        let reformatted = "# a comment\n[node]\n\
            [[workload]]\nimage = \"nginx:1\"   # same\nname = \"web\"\n\
            [forward]\nallow = [ \"127.0.0.1:53\" ]\nlisten = \"127.0.0.1:0\"\ntokens = [\"reload-test-forward-token-0123456789\"]\n";
        let plan = diff(&inputs(BASE), &inputs(reformatted));
        assert!(
            plan.modules.values().all(|c| *c == Change::Unchanged),
            "{plan:?}"
        );
    }

    // r[verify node.reload.diff]
    // r[verify node.reload.node-sections]
    #[test]
    fn each_kind_of_change_is_named_per_module() {
        let running = inputs(BASE);
        // An allow-list changed: only the forward.
        let plan = diff(
            &running,
            &inputs(&BASE.replace("127.0.0.1:53\"]", "127.0.0.1:53\", \"127.0.0.1:54\"]")),
        );
        assert_eq!(plan.with(Change::Changed).collect::<Vec<_>>(), ["forward"]);
        assert_eq!(plan.with(Change::Unchanged).count(), 2);
        // A workload's command: the workload module, not the pull module (it reads name and
        // image only); its image: both.
        let plan = diff(
            &running,
            &inputs(&BASE.replace("nginx:1\"\n", "nginx:1\"\ncommand = [\"x\"]\n")),
        );
        assert_eq!(plan.with(Change::Changed).collect::<Vec<_>>(), ["workload"]);
        let plan = diff(&running, &inputs(&BASE.replace("nginx:1", "nginx:2")));
        assert_eq!(
            plan.with(Change::Changed).collect::<Vec<_>>(),
            ["pull", "workload"]
        );
        // A section gone, one appeared.
        let without_forward = BASE.split("[forward]").next().unwrap();
        let plan = diff(&running, &inputs(without_forward));
        assert_eq!(plan.modules["forward"], Change::Disappeared);
        let plan = diff(&inputs(without_forward), &running);
        assert_eq!(plan.modules["forward"], Change::Appeared);
        // The node's own sections: named, never a module's change.
        let plan = diff(
            &running,
            &inputs(&BASE.replace(
                "[node]\n",
                "[node]\ntick = \"2s\"\n[log]\nlevel = \"debug\"\n",
            )),
        );
        assert_eq!(plan.needs_restart, ["node", "log"]);
        assert!(
            plan.modules.values().all(|c| *c == Change::Unchanged),
            "{plan:?}"
        );
        // Turning pulls off: the pull module goes, the workload module changes.
        let plan = diff(
            &running,
            &inputs(&format!("{BASE}[pull]\nenabled = false\n").replace("[forward]", "[forward]")),
        );
        assert_eq!(plan.modules["pull"], Change::Disappeared);
        assert_eq!(plan.modules["workload"], Change::Changed);
    }

    /// A TOML scalar.
    fn scalar() -> impl Strategy<Value = toml::Value> {
        prop_oneof![
            any::<i32>().prop_map(|i| toml::Value::Integer(i64::from(i))),
            "[a-z0-9:.]{0,8}".prop_map(toml::Value::String),
            any::<bool>().prop_map(toml::Value::Boolean),
        ]
    }

    /// A section: a few keys with scalar values.
    fn table() -> impl Strategy<Value = toml::Table> {
        proptest::collection::btree_map("[a-z_]{1,6}", scalar(), 0..4)
            .prop_map(|m| m.into_iter().collect())
    }

    const MODULES: [&str; 5] = ["pull", "workload", "issuance", "forward", "gateway"];
    const SECTIONS: [&str; 4] = ["issuance", "forward", "gateway", "testing"];

    /// A file: the module sections and the node's, each maybe present, and some workloads.
    fn file() -> impl Strategy<Value = toml::Table> {
        let sections = proptest::collection::vec(proptest::option::of(table()), 8);
        let workloads = proptest::collection::vec(table(), 0..3);
        (sections, workloads).prop_map(|(sections, workloads)| {
            let keys = SECTIONS.iter().chain(NODE_SECTIONS.iter());
            let mut t: toml::Table = keys
                .zip(sections)
                .filter_map(|(k, s)| s.map(|s| ((*k).to_owned(), toml::Value::Table(s))))
                .collect();
            t.insert(
                "workload".into(),
                toml::Value::Array(workloads.into_iter().map(toml::Value::Table).collect()),
            );
            t
        })
    }

    proptest! {
        // r[verify node.reload.diff]
        #[test]
        fn a_file_against_itself_is_unchanged_everywhere(file in file()) {
            // Written out and read back (another text, the same values), and the modules named
            // in another order.
            let text = toml::to_string(&file).unwrap();
            let again: toml::Table = toml::from_str(&text).unwrap();
            let mut names = MODULES;
            names.reverse();
            let plan = diff(
                &Inputs::from_table(MODULES, &file),
                &Inputs::from_table(names, &again),
            );
            prop_assert_eq!(plan.modules.len(), MODULES.len());
            prop_assert!(plan.modules.values().all(|c| *c == Change::Unchanged), "{:?}", plan);
            prop_assert!(plan.needs_restart.is_empty());
        }

        // r[verify node.reload.diff]
        #[test]
        fn a_shared_input_changes_every_module_built_from_it_and_no_other(
            file in file(),
            edit in 0..8usize,
            value in scalar(),
        ) {
            let mut changed = file.clone();
            let mut section = |name: &str, key: &str, value: toml::Value| {
                let mut table = changed
                    .get(name)
                    .and_then(toml::Value::as_table)
                    .cloned()
                    .unwrap_or_default();
                table.insert(key.to_owned(), value);
                changed.insert(name.to_owned(), toml::Value::Table(table));
            };
            // No generated file has [pull] or [workloads]: any value there is a change.
            let expected: &[&str] = match edit {
                0 => { section("pull", "enabled", value); &["pull", "workload"] }
                1 => { section("pull", "docker_host", value); &["pull", "workload"] }
                2 => { section("pull", "reload_probe", value); &["pull"] }
                3 => { section("workloads", "reload_probe", value); &["workload"] }
                _ => {
                    // A workload's image, pull policy or credentials file (pull and workload), or
                    // another of its keys (workload).
                    let mut workloads = changed
                        .get("workload")
                        .and_then(toml::Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    if workloads.is_empty() {
                        workloads.push(toml::Value::Table(toml::Table::new()));
                    }
                    let (key, value, expected): (&str, toml::Value, &[&str]) = match edit {
                        4 => ("image", "probe-image-changed".into(), &["pull", "workload"]),
                        5 => ("pull_policy", "probe-policy".into(), &["pull", "workload"]),
                        6 => ("credentials_file", "/probe/creds.json".into(), &["pull", "workload"]),
                        _ => ("reload_probe", value, &["workload"]),
                    };
                    if let Some(first) = workloads.first_mut().and_then(toml::Value::as_table_mut) {
                        first.insert(key.to_owned(), value);
                    }
                    changed.insert("workload".into(), toml::Value::Array(workloads));
                    expected
                }
            };
            let plan = diff(
                &Inputs::from_table(MODULES, &file),
                &Inputs::from_table(MODULES, &changed),
            );
            // A workload added where there was none changes both (its name and image are pull's).
            let changed_modules: Vec<&str> = plan.with(Change::Changed).collect();
            let added = edit >= 4
                && file.get("workload").and_then(toml::Value::as_array).is_none_or(Vec::is_empty);
            if added {
                prop_assert_eq!(changed_modules, vec!["pull", "workload"]);
            } else {
                prop_assert_eq!(changed_modules, expected.to_vec());
            }
            prop_assert!(plan.needs_restart.is_empty());
        }

        // r[verify node.reload.diff]
        // r[verify node.reload.node-sections]
        #[test]
        fn a_change_to_one_section_changes_only_the_modules_built_from_it(
            file in file(),
            which in 0..(SECTIONS.len() + NODE_SECTIONS.len()),
            value in scalar(),
        ) {
            let keys: Vec<&str> = SECTIONS.iter().chain(NODE_SECTIONS.iter()).copied().collect();
            let key = keys[which];
            let mut changed = file.clone();
            let mut section = changed
                .get(key)
                .and_then(toml::Value::as_table)
                .cloned()
                .unwrap_or_default();
            // A key no generated section has, so the value is always a change.
            section.insert("reload_probe".into(), value);
            changed.insert(key.to_owned(), toml::Value::Table(section));
            let names = MODULES.iter().copied().chain(["testing-hang"]);
            let plan = diff(
                &Inputs::from_table(names.clone(), &file),
                &Inputs::from_table(names, &changed),
            );
            let changed_modules: Vec<&str> = plan.with(Change::Changed).collect();
            if NODE_SECTIONS.contains(&key) {
                prop_assert!(changed_modules.is_empty(), "{:?}", changed_modules);
                prop_assert_eq!(plan.needs_restart.clone(), vec![key.to_owned()]);
            } else {
                let module = if key == "testing" { "testing-hang" } else { key };
                prop_assert_eq!(changed_modules, vec![module]);
                prop_assert!(plan.needs_restart.is_empty());
            }
        }
    }
}
