//! Reload: what a newly read config changes, module by module, decided without I/O.
//!
//! [`Inputs::of`] takes, for each module a config composes, what the module is built from as the
//! config's high layer converts it (holdfast-pull's and holdfast-workload's configs, each
//! section's typed value: formatting, comments, key order and the spelling of a value, `"60s"`
//! or `"1m"`, do not count), and the node's own sections apart; [`diff`] compares two of them.
//! Applying the [`Plan`] is `run`'s job.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Serialize;

use crate::config::{
    AdminSection, Config, ForwardSection, LogSection, NodeSection, SuperviseSection, TagChecks,
};
use crate::gateway_config::GatewaySection;

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

/// The workload module's settings besides its workloads (what it cannot take live).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadSettings {
    /// `[workloads] stop_on_exit`.
    pub stop_on_exit: bool,
    /// `[workloads] owner`.
    pub owner: Option<String>,
    /// `pull.enabled`.
    pub pull_enabled: bool,
    /// `pull.docker_host`.
    pub docker_host: Option<String>,
}

/// What one module is built from, converted: two are equal exactly when the module would be
/// built the same. Secrets and file paths are part of it (compared, never logged: the `Debug` of
/// each secret is redacted).
#[derive(Debug, Clone, PartialEq)]
pub enum ModuleInputs {
    /// `pull`: the images it keeps (by workload), holdfast-pull's config (seeded alike on both
    /// sides: the seed is the node's), the registry credentials and the tags it follows.
    Pull {
        /// (workload name, image).
        workloads: Vec<(String, String)>,
        /// `pull.docker_host`.
        docker_host: Option<String>,
        /// holdfast-pull's config.
        config: Box<holdfast_pull::PullConfig>,
        /// Where credentials come from.
        auth: holdfast_pull::RegistryAuth,
        /// The images whose tags are followed.
        tag_checks: TagChecks,
        /// Image collection's policy and interval (`None`: off).
        image_gc: Option<(holdfast_pull::GcPolicy, std::time::Duration)>,
    },
    /// `workload`: holdfast-workload's config of each entry (its env file not read: a changed
    /// file alone is no change) and the module's settings.
    Workload {
        /// Each `[[workload]]` as holdfast-workload runs it.
        workloads: Vec<holdfast_workload::WorkloadConfig>,
        /// The rest.
        settings: WorkloadSettings,
    },
    /// `issuance`: holdfast-issuance's own config.
    Issuance(Option<Box<holdfast_issuance::IssuanceConfig>>),
    /// `forward`: the section the module is built from.
    Forward(Option<Box<ForwardSection>>),
    /// `gateway`: the section the module is built from.
    Gateway(Option<Box<GatewaySection>>),
    /// The test modules: `[testing]`.
    #[cfg(feature = "testing-modules")]
    Testing(Option<crate::config::TestingSection>),
    /// A module without its own entry here: every module's inputs, so a change is never missed,
    /// only over-counted.
    Everything(Vec<ModuleInputs>),
}

/// One of the node's own sections, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeInputs {
    /// `[node]`.
    Node(NodeSection),
    /// `[admin]`.
    Admin(AdminSection),
    /// `[log]`.
    Log(LogSection),
    /// `[supervise]`.
    Supervise(SuperviseSection),
}

/// What each module (and the node itself) is built from, in one config.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Inputs {
    /// Each composed module by name, with what it is built from.
    pub modules: BTreeMap<String, ModuleInputs>,
    /// Each of [`NODE_SECTIONS`], typed.
    pub node: BTreeMap<String, NodeInputs>,
}

// r[impl node.reload.diff+2]
/// The inputs of the module `name` in `config`.
pub fn module_inputs(name: &str, config: &Config) -> ModuleInputs {
    use crate::modules::{forward, gateway, issuance, pull, workload};
    match name {
        pull::NAME => ModuleInputs::Pull {
            workloads: config
                .workloads
                .iter()
                .map(|w| (w.name.get_ref().clone(), w.image.get_ref().clone()))
                .collect(),
            docker_host: config.pull.docker_host.clone(),
            config: Box::new(config.pull_config(0)),
            auth: config.registry_auth(),
            tag_checks: config.tag_checks(),
            image_gc: config.image_gc(),
        },
        workload::NAME => ModuleInputs::Workload {
            workloads: config
                .workloads
                .iter()
                .map(crate::config::Workload::shaped_config)
                .collect(),
            settings: WorkloadSettings {
                stop_on_exit: config.workloads_module.stop_on_exit,
                owner: config.workloads_module.owner.clone(),
                pull_enabled: config.pull.enabled,
                docker_host: config.pull.docker_host.clone(),
            },
        },
        issuance::NAME => ModuleInputs::Issuance(
            config
                .issuance
                .as_ref()
                .map(|i| Box::new(i.get_ref().clone())),
        ),
        forward::NAME => ModuleInputs::Forward(
            config
                .forward
                .as_ref()
                .map(|f| Box::new(f.get_ref().clone())),
        ),
        gateway::NAME => ModuleInputs::Gateway(
            config
                .gateway
                .as_ref()
                .map(|g| Box::new(g.get_ref().clone())),
        ),
        #[cfg(feature = "testing-modules")]
        _ if name.starts_with("testing-") => ModuleInputs::Testing(config.testing.clone()),
        _ => ModuleInputs::Everything(
            [
                pull::NAME,
                workload::NAME,
                issuance::NAME,
                forward::NAME,
                gateway::NAME,
            ]
            .iter()
            .map(|known| module_inputs(known, config))
            .chain(testing_inputs(config))
            .collect(),
        ),
    }
}

/// The test modules' inputs, in a build that has them.
fn testing_inputs(config: &Config) -> Option<ModuleInputs> {
    #[cfg(feature = "testing-modules")]
    return Some(ModuleInputs::Testing(config.testing.clone()));
    #[cfg(not(feature = "testing-modules"))]
    {
        let _ = config;
        None
    }
}

impl Inputs {
    /// The inputs of every module `config` composes, and its node sections.
    pub fn of(config: &Config) -> Self {
        Self::of_modules(crate::run::module_names(config), config)
    }

    /// The inputs of every module in `names`, from `config`.
    pub fn of_modules<'a>(names: impl IntoIterator<Item = &'a str>, config: &Config) -> Self {
        Inputs {
            modules: names
                .into_iter()
                .map(|name| (name.to_owned(), module_inputs(name, config)))
                .collect(),
            node: [
                ("node", NodeInputs::Node(config.node.clone())),
                ("admin", NodeInputs::Admin(config.admin.clone())),
                ("log", NodeInputs::Log(config.log.clone())),
                ("supervise", NodeInputs::Supervise(config.supervise.clone())),
            ]
            .into_iter()
            .map(|(key, section)| (key.to_owned(), section))
            .collect(),
        }
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

// r[impl node.reload.diff+2]
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
        Inputs::of(&config)
    }

    const BASE: &str = "[node]\n\
        [[workload]]\nname = \"web\"\nimage = \"nginx:1\"\n\
        [forward]\nlisten = \"127.0.0.1:0\"\ntokens = [\"reload-test-forward-token-0123456789\"]\nallow = [\"127.0.0.1:53\"]\n";

    // r[verify node.reload.diff+2]
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

    // r[verify node.reload.diff+2]
    // r[verify node.reload.node-sections]
    #[test]
    fn a_value_spelled_another_way_is_no_change() {
        // The same durations, written two ways: raw TOML values differ, the converted configs
        // do not.
        let sixty = BASE
            .replace(
                "[node]\n",
                "[node]\ntick = \"60s\"\n[pull]\nbase = \"60s\"\n",
            )
            .replace("nginx:1\"\n", "nginx:1\"\nmin_run = \"60s\"\n")
            + "[workloads]\nstop_on_exit = false\n";
        let minute = BASE
            .replace("[node]\n", "[node]\ntick = \"1m\"\n[pull]\nbase = \"1m\"\n")
            .replace("nginx:1\"\n", "nginx:1\"\nmin_run = \"1 m\"\n");
        let plan = diff(&inputs(&sixty), &inputs(&minute));
        assert!(
            plan.modules.values().all(|c| *c == Change::Unchanged),
            "{plan:?}"
        );
        assert!(plan.needs_restart.is_empty(), "{plan:?}");
        // And a real change of one of them still counts.
        let plan = diff(
            &inputs(&sixty),
            &inputs(&minute.replace("\"1 m\"", "\"2m\"")),
        );
        assert_eq!(plan.with(Change::Changed).collect::<Vec<_>>(), ["workload"]);
    }

    // r[verify node.reload.diff+2]
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

    /// A file's settings: what the properties below turn.
    #[derive(Debug, Clone)]
    struct File {
        /// Each workload's image tag and `min_run` in seconds.
        workloads: Vec<(u8, Option<u32>)>,
        /// `pull.base` in seconds.
        pull_base: u32,
        /// `node.tick` in seconds.
        tick: u32,
        /// The forward's allowed ports, if it is configured.
        forward: Option<Vec<u16>>,
        /// `[workloads] stop_on_exit`.
        stop_on_exit: bool,
    }

    fn file() -> impl Strategy<Value = File> {
        (
            proptest::collection::vec((any::<u8>(), proptest::option::of(1u32..3600)), 1..3),
            1u32..300,
            1u32..100_000,
            proptest::option::of(proptest::collection::vec(1u16..1000, 1..3)),
            any::<bool>(),
        )
            .prop_map(|(workloads, pull_base, tick, forward, stop_on_exit)| File {
                workloads,
                pull_base,
                tick,
                forward,
                stop_on_exit,
            })
    }

    /// `secs` as the config writes it: in seconds, or (`respell`) in its largest exact unit,
    /// with a space.
    fn duration(secs: u32, respell: bool) -> String {
        let d = std::time::Duration::from_secs(u64::from(secs));
        if respell {
            let text = crate::duration::format(d);
            let digits = text.bytes().take_while(u8::is_ascii_digit).count();
            let (n, unit) = text.split_at(digits);
            format!("{n} {unit}")
        } else {
            format!("{secs}s")
        }
    }

    /// The file's text; `respell` writes the same values another way (durations in other units,
    /// keys in another order, comments, defaults written out).
    fn render(f: &File, respell: bool) -> String {
        let d = |secs| duration(secs, respell);
        let mut out = String::new();
        if respell {
            out.push_str("# the same file, written another way\n");
        }
        out.push_str(&format!("[node]\ntick = \"{}\"\n", d(f.tick)));
        out.push_str(&format!("[pull]\nbase = \"{}\"\n", d(f.pull_base)));
        if respell {
            out.push_str("enabled = true\n[log]\nformat = \"human\"\n");
        }
        if f.stop_on_exit || respell {
            out.push_str(&format!("[workloads]\nstop_on_exit = {}\n", f.stop_on_exit));
        }
        for (i, (tag, min_run)) in f.workloads.iter().enumerate() {
            let name = format!("name = \"w{i}\"\n");
            let image = format!("image = \"app:{tag}\"\n");
            out.push_str("[[workload]]\n");
            if respell {
                out.push_str(&image);
                out.push_str(&name);
            } else {
                out.push_str(&name);
                out.push_str(&image);
            }
            if let Some(secs) = min_run {
                out.push_str(&format!("min_run = \"{}\"\n", d(*secs)));
            }
        }
        if let Some(ports) = &f.forward {
            let allow: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
            out.push_str(&format!(
                "[forward]\nlisten = \"127.0.0.1:0\"\n\
                 tokens = [\"reload-test-forward-token-0123456789\"]\nallow = [{}]\n",
                allow.join(if respell { " , " } else { ", " })
            ));
        }
        out
    }

    proptest! {
        // r[verify node.reload.diff+2]
        #[test]
        fn a_file_against_itself_is_unchanged_everywhere(f in file()) {
            let plan = diff(&inputs(&render(&f, false)), &inputs(&render(&f, true)));
            prop_assert!(plan.modules.values().all(|c| *c == Change::Unchanged), "{:?}", plan);
            prop_assert!(plan.needs_restart.is_empty(), "{:?}", plan);
        }

        // r[verify node.reload.diff+2]
        // r[verify node.reload.node-sections]
        #[test]
        fn a_shared_input_changes_every_module_built_from_it_and_no_other(
            f in file(),
            edit in 0..12usize,
            respell in any::<bool>(),
        ) {
            let before = render(&f, false);
            let first = |from: &str, to: &str| before.replacen(from, to, 1);
            let (after, changed, restart): (String, &[&str], &[&str]) = match edit {
                0 => (first("[pull]\n", "[pull]\ndocker_host = \"unix:///x.sock\"\n"),
                      &["pull", "workload"], &[]),
                1 => (first("[pull]\n", "[pull]\ncap = \"7h\"\n"), &["pull"], &[]),
                2 => {
                    let mut g = f.clone();
                    g.stop_on_exit = !g.stop_on_exit;
                    (render(&g, respell), &["workload"], &[])
                }
                3 => (first("image = \"app:", "image = \"other:"), &["pull", "workload"], &[]),
                4 => (first("[[workload]]\n", "[[workload]]\npull_policy = \"digest\"\n"),
                      &["pull"], &[]),
                5 => (first("[[workload]]\n", "[[workload]]\ncommand = [\"x\"]\n"),
                      &["workload"], &[]),
                6 => match &f.forward {
                    Some(_) => (first("allow = [", "allow = [\"127.0.0.1:1001\", "),
                                &["forward"], &[]),
                    None => (before.clone(), &[], &[]),
                },
                7 => (first("[node]\n", "[node]\nstop_budget = \"11s\"\n"), &[], &["node"]),
                8 => (first("[node]\n", "[log]\nlevel = \"debug\"\n[node]\n"), &[], &["log"]),
                9 => (first("[node]\n", "[supervise]\ncrash_loop_threshold = 9\n[node]\n"),
                      &[], &["supervise"]),
                10 => (first("[pull]\n", "[pull]\ngc_high_percent = 95\n"), &["pull"], &[]),
                _ => (first("[node]\n", "[admin]\nallowed_hosts = [\"probe\"]\n[node]\n"),
                      &[], &["admin"]),
            };
            let plan = diff(&inputs(&before), &inputs(&after));
            prop_assert_eq!(plan.with(Change::Changed).collect::<Vec<_>>(), changed.to_vec());
            prop_assert_eq!(plan.needs_restart.clone(), restart.to_vec());
            prop_assert_eq!(plan.with(Change::Appeared).count(), 0);
            prop_assert_eq!(plan.with(Change::Disappeared).count(), 0);
        }
    }
}
