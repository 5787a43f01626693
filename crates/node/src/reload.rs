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

pub use crate::config::ForwardSettings;
use crate::config::{
    AdminSection, Config, LogSection, NodeSection, PullSection, SuperviseSection, WorkloadsSection,
};
pub use crate::config::{GatewaySettings, PullInputs, WorkloadSettings};

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

/// What one module is built from, converted: two are equal exactly when the module would be
/// built the same. Secrets and file paths are part of it: compared, and never logged (the
/// secrets' own `Debug` hides them: forward tokens, the ACME EAB, a `gateway.cluster.redis`
/// URL's password; the file paths are shown).
#[derive(Debug, Clone, PartialEq)]
pub enum ModuleInputs {
    /// `pull`: its whole `[pull]` section as typed (so that a key added later is never missed;
    /// spans do not count, durations compare by value), and what it is built from (the images
    /// it keeps, holdfast-pull's config seeded alike on both sides, the registry credentials,
    /// the tags it follows, image collection), built by [`Config::pull_inputs`] as for the
    /// module itself.
    Pull {
        /// `[pull]`.
        section: Box<PullSection>,
        /// What the module is built from.
        built: Box<PullInputs>,
    },
    /// `workload`: its whole `[workloads]` section, holdfast-workload's config of each entry
    /// (its env file not read: a changed file alone is no change) and the module's settings,
    /// built by [`Config::workload_settings`] as for the module itself.
    Workload {
        /// `[workloads]`.
        section: WorkloadsSection,
        /// Each `[[workload]]` as holdfast-workload runs it.
        workloads: Vec<holdfast_workload::WorkloadConfig>,
        /// The rest.
        settings: WorkloadSettings,
    },
    /// `issuance`: holdfast-issuance's own config, and whether the gateway's listener answers
    /// its TLS-ALPN-01 validations (`r[node.gateway.tls-alpn01]`).
    Issuance(Option<Box<holdfast_issuance::IssuanceConfig>>, bool),
    /// `forward`: its section converted as the module converts it (its token files not read).
    Forward(Option<Box<ForwardSettings>>),
    /// `gateway`: its section converted as the module converts it (no file read).
    Gateway(Option<Box<GatewaySettings>>),
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

// r[impl node.reload.diff+4]
/// The names of the modules `config` composes, in the order the node's compose builds them (what a
/// reload compares).
pub fn module_names(config: &Config) -> Vec<&'static str> {
    let mut names = Vec::new();
    if config.pull.enabled {
        names.push(crate::modules::pull::NAME);
    }
    if !config.workloads.is_empty() {
        names.push(crate::modules::workload::NAME);
    }
    if config.issuance.is_some() {
        names.push(crate::modules::issuance::NAME);
    }
    if config.forward.is_some() {
        names.push(crate::modules::forward::NAME);
    }
    if config.gateway.is_some() {
        names.push(crate::modules::gateway::NAME);
    }
    #[cfg(feature = "testing-modules")]
    if config.testing.as_ref().is_some_and(|t| t.hang_on_stop) {
        names.push(crate::modules::testing::HANG_NAME);
    }
    #[cfg(feature = "testing-modules")]
    if config.testing.as_ref().is_some_and(|t| t.wedge_start) {
        names.push(crate::modules::testing::WEDGE_NAME);
    }
    names
}

// r[impl node.reload.diff+4]
/// The inputs of the module `name` in `config`, on a node whose id is `[node] id` when set.
pub fn module_inputs(name: &str, config: &Config) -> ModuleInputs {
    module_inputs_on(name, config, None)
}

// r[impl node.reload.diff+4]
/// The inputs of the module `name` in `config`, on the node `node_id` (what a default such as
/// the gateway's `replica_id` stands for; `None`: `[node] id`, when set).
pub fn module_inputs_on(name: &str, config: &Config, node_id: Option<&str>) -> ModuleInputs {
    use crate::modules::{forward, gateway, issuance, pull, workload};
    match name {
        pull::NAME => ModuleInputs::Pull {
            section: Box::new(config.pull.clone()),
            built: Box::new(config.pull_inputs(0)),
        },
        workload::NAME => ModuleInputs::Workload {
            section: config.workloads_module.clone(),
            workloads: config
                .workloads
                .iter()
                .map(crate::config::Workload::shaped_config)
                .collect(),
            settings: config.workload_settings(),
        },
        issuance::NAME => ModuleInputs::Issuance(
            config
                .issuance
                .as_ref()
                .map(|i| Box::new(i.get_ref().clone())),
            gateway::config_answers_tls_alpn01(config),
        ),
        forward::NAME => ModuleInputs::Forward(
            config
                .forward
                .as_ref()
                .map(|f| Box::new(ForwardSettings::of(f.get_ref()))),
        ),
        // The cluster's seed is left out: it is the node's, the same on both sides.
        gateway::NAME => ModuleInputs::Gateway(config.gateway.as_ref().map(|g| {
            let mut settings = g.get_ref().settings(&config.node.data_dir, 0);
            // The replica id as the gateway runs it: left out, it is the node's id, so the node
            // id written out is the same.
            let node_id = node_id.or(config.node.id.as_ref().map(|id| id.get_ref().as_str()));
            if let (None, Some(id)) = (&settings.replica_id, node_id) {
                settings.replica_id = Some(id.to_owned());
            }
            Box::new(settings)
        })),
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
            .map(|known| module_inputs_on(known, config, node_id))
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
    /// The inputs of every module `config` composes, and its node sections, on a node whose id
    /// is `[node] id` when set.
    pub fn of(config: &Config) -> Self {
        Self::of_modules(module_names(config), config, None)
    }

    /// The inputs of every module `config` composes, and its node sections, on the node
    /// `node_id` (the one running: its id resolved at its start).
    pub fn of_node(config: &Config, node_id: &str) -> Self {
        Self::of_modules(module_names(config), config, Some(node_id))
    }

    /// The inputs of every module in `names`, from `config`, on the node `node_id` (`None`:
    /// `[node] id`, when set).
    pub fn of_modules<'a>(
        names: impl IntoIterator<Item = &'a str>,
        config: &Config,
        node_id: Option<&str>,
    ) -> Self {
        Inputs {
            modules: names
                .into_iter()
                .map(|name| (name.to_owned(), module_inputs_on(name, config, node_id)))
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

// r[impl node.reload.node-sections]
/// Puts `running`'s own sections ([`NODE_SECTIONS`]) into `new`, in place of the file's: a
/// module's inputs built from `new` then use the node's running settings, as the module built
/// by the reload will (a `[node] data_dir` changed in the file changes no module).
pub fn keep_node_sections(new: &mut Config, running: &Config) {
    new.node = running.node.clone();
    new.admin = running.admin.clone();
    new.log = running.log.clone();
    new.supervise = running.supervise.clone();
}

// r[impl node.reload.diff+4]
// r[impl node.reload.node-sections]
/// What going from the running config (`running`, its inputs `running_inputs`) to the file's
/// `new` changes: the modules compared as they would be built with the running node sections
/// (which are put into `new`), the node sections that need a restart as the file has them.
/// Returns the new inputs with the plan. `node_id` is the running node's id.
pub fn plan(
    running_inputs: &Inputs,
    running: &Config,
    new: &mut Config,
    node_id: &str,
) -> (Inputs, Plan) {
    let from_file = Inputs::of_modules([], new, None).node;
    keep_node_sections(new, running);
    let inputs = Inputs::of_node(new, node_id);
    let mut plan = diff(running_inputs, &inputs);
    plan.needs_restart = NODE_SECTIONS
        .iter()
        .filter(|key| running_inputs.node.get(**key) != from_file.get(**key))
        .map(|key| (*key).to_owned())
        .collect();
    (inputs, plan)
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

// r[impl node.reload.diff+4]
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

/// Whether the running module `name`, whose inputs go from `running` to `new`, takes the change
/// live instead of restarting: only the keys each module can apply while it runs changed. The
/// decision only; applying it is `run`'s job (and a module that is not up restarts after all).
pub fn takes_live(name: &str, running: &Inputs, new: &Inputs) -> bool {
    match (running.modules.get(name), new.modules.get(name)) {
        (Some(old), Some(new)) if old != new => live_change(old, new),
        _ => false,
    }
}

/// Whether going from `old` to `new` (which differ) changes only keys the module takes live.
fn live_change(old: &ModuleInputs, new: &ModuleInputs) -> bool {
    match (old, new) {
        (
            ModuleInputs::Pull {
                section: old_section,
                built: old,
            },
            ModuleInputs::Pull {
                section: new_section,
                built: new,
            },
        ) => old_section == new_section && images_only(old, new),
        // r[impl node.reload.live+3]
        // The workload module: only its `[[workload]]` entries (its settings, which hold what
        // `[workloads]` sets, are the same).
        (
            ModuleInputs::Workload { settings: old, .. },
            ModuleInputs::Workload { settings: new, .. },
        ) => old == new,
        (ModuleInputs::Forward(Some(old)), ModuleInputs::Forward(Some(new))) => {
            forward_access_only(old, new)
        }
        // Who answers TLS-ALPN-01 (the gateway or the module's own listener) is decided at the
        // module's start: a change of it restarts the module.
        (
            ModuleInputs::Issuance(Some(old), old_shared),
            ModuleInputs::Issuance(Some(new), new_shared),
        ) => old_shared == new_shared && certificates_only(old, new),
        (ModuleInputs::Gateway(Some(old)), ModuleInputs::Gateway(Some(new))) => {
            gateway_live_only(old, new)
        }
        _ => false,
    }
}

// r[impl node.reload.live-pull+2]
/// Whether what the pull module is built from differs only in its set of (workload name, image):
/// the same daemon, pacing, registry credentials, followed tags and image collection (a field
/// added to [`PullInputs`] must be sorted here, which the destructuring enforces).
fn images_only(old: &PullInputs, new: &PullInputs) -> bool {
    let PullInputs {
        workloads: _,
        docker_host,
        config,
        auth,
        tag_checks,
        gc,
    } = new;
    *docker_host == old.docker_host
        && *config == old.config
        && *auth == old.auth
        && *tag_checks == old.tag_checks
        && *gc == old.gc
}

// r[impl node.reload.live-gateway+2]
/// Whether two `[gateway]` sections, converted, differ only in their limits (`per_ip_limit`,
/// `unauthenticated_limit`, `unauthenticated_per_ip_limit`, `max_rooms_per_connection`,
/// `max_room_name`), the paths of their token key files and the paths of their TLS pair (TLS on
/// in both); any other key, a new one included, restarts the gateway through its drain.
fn gateway_live_only(old: &GatewaySettings, new: &GatewaySettings) -> bool {
    let rest = |g: &GatewaySettings| GatewaySettings {
        limits: old.limits,
        token_keys: crate::config::TokenKeySources {
            secret_files: Vec::new(),
            public_key_files: Vec::new(),
            settings: g.token_keys.settings.clone(),
        },
        // Whether TLS is on still counts: it is turned on or off by a restart.
        tls: g.tls.as_ref().map(|_| holdfast_gateway::TlsFiles {
            cert: std::path::PathBuf::new(),
            key: std::path::PathBuf::new(),
        }),
        ..g.clone()
    };
    rest(old) == rest(new)
}

/// The files a gateway taking its change live is given (`r[node.reload.live-gateway+2]`): its
/// key files when their paths changed, its TLS pair when its paths changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GatewayFiles {
    /// The new key files, with their kinds.
    pub keys: Option<Vec<holdfast_gateway::KeySource>>,
    /// The new pair's files.
    pub tls: Option<holdfast_gateway::TlsFiles>,
}

// r[impl node.reload.live-gateway+2]
/// What files the gateway, going from `running` to `new` and taking it live, is to read again:
/// none unless it takes the change live ([`takes_live`]).
pub fn gateway_files(running: &Inputs, new: &Inputs) -> GatewayFiles {
    let name = crate::modules::gateway::NAME;
    if !takes_live(name, running, new) {
        return GatewayFiles::default();
    }
    match (running.modules.get(name), new.modules.get(name)) {
        (Some(ModuleInputs::Gateway(Some(old))), Some(ModuleInputs::Gateway(Some(new)))) => {
            GatewayFiles {
                keys: (old.token_keys != new.token_keys).then(|| new.token_keys.sources()),
                tls: new.tls.clone().filter(|_| old.tls != new.tls),
            }
        }
        _ => GatewayFiles::default(),
    }
}

// r[impl node.reload.live-issuance]
/// Whether two `[issuance]` sections differ only in their `[[issuance.hostname]]` and
/// `[[issuance.certificate]]` entries, and every entry of `new` uses a source and challenge that
/// `old` already runs (a new one would bind a listener or build a provider: a restart). With
/// `acme.http01_other = "redirect"` the responder redirects to the names it started with, so a
/// changed set of names restarts it.
fn certificates_only(
    old: &holdfast_issuance::IssuanceConfig,
    new: &holdfast_issuance::IssuanceConfig,
) -> bool {
    let rest = |c: &holdfast_issuance::IssuanceConfig| holdfast_issuance::IssuanceConfig {
        hostnames: Vec::new(),
        certificates: Vec::new(),
        ..c.clone()
    };
    let serves = |c: &holdfast_issuance::IssuanceConfig| -> Vec<_> {
        c.planned()
            .into_iter()
            .map(|p| (p.source, p.challenge))
            .collect()
    };
    let redirects = old
        .acme
        .as_ref()
        .is_some_and(|a| a.http01_other == holdfast_issuance::Http01Other::Redirect);
    let names = |c: &holdfast_issuance::IssuanceConfig| -> Vec<String> {
        c.planned().into_iter().flat_map(|p| p.names).collect()
    };
    let running = serves(old);
    rest(old) == rest(new)
        && serves(new).iter().all(|s| running.contains(s))
        && (!redirects || names(old) == names(new))
}

// r[impl node.reload.live-forward]
/// Whether two `[forward]` sections, converted, differ only in their access: `token_file`,
/// `tokens`, `allow` and `[[forward.client]]` (every other key restarts the module; a field added
/// to the settings must be sorted here, which the destructuring enforces).
fn forward_access_only(old: &ForwardSettings, new: &ForwardSettings) -> bool {
    let ForwardSettings {
        listen,
        access: _,
        bounds,
    } = new;
    *listen == old.listen && *bounds == old.bounds
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

    // r[verify node.reload.node-sections]
    // r[verify node.reload.diff+4]
    #[test]
    fn a_changed_data_dir_changes_no_module_and_needs_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("gateway.key");
        std::fs::write(&key, "reload-test-gateway-key-0123456789\n").unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        // The gateway's certificate comes from issuance: its files' paths are under data_dir.
        let file = |data: &str| {
            format!(
                "[node]\ndata_dir = \"{data}\"\n[gateway]\nlisten = \"127.0.0.1:8443\"\n\
                 token_key_file = \"{}\"\n[gateway.tls]\nfrom_issuance = \"app.example\"\n\
                 [issuance]\n[issuance.local]\nendpoint = {{ tcp = \"127.0.0.1:8099\" }}\n\
                 [[issuance.hostname]]\nname = \"app.example\"\nsource = \"local\"\n",
                key.display()
            )
        };
        let running = Config::parse("reload.toml", &file("/var/lib/a")).unwrap();
        let mut new = Config::parse("reload.toml", &file("/var/lib/b")).unwrap();
        let (inputs, plan) = super::plan(&Inputs::of_node(&running, "n"), &running, &mut new, "n");
        assert!(
            plan.modules.values().all(|c| *c == Change::Unchanged),
            "{:?}",
            plan.modules
        );
        assert_eq!(plan.needs_restart, vec!["node".to_owned()]);
        // The reload runs on with the running data_dir.
        assert_eq!(new.node.data_dir, running.node.data_dir);
        assert_eq!(inputs, Inputs::of_node(&running, "n"));
    }

    const BASE: &str = "[node]\n\
        [[workload]]\nname = \"web\"\nimage = \"nginx:1\"\n\
        [forward]\nlisten = \"127.0.0.1:0\"\ntokens = [\"reload-test-forward-token-0123456789\"]\nallow = [\"127.0.0.1:53\"]\n";

    // r[verify node.reload.diff+4]
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

    // r[verify node.reload.diff+4]
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

    // r[verify node.reload.diff+4]
    #[test]
    fn a_forward_bound_at_its_default_written_out_is_no_change() {
        let written = BASE.replace(
            "allow = [\"127.0.0.1:53\"]\n",
            "allow = [\"127.0.0.1:53\"]\nmax_connections = 64\nmax_connections_per_token = 16\n\
             max_unauthenticated = 256\nmax_unauthenticated_per_source = 8\n",
        );
        assert_ne!(written, BASE);
        let plan = diff(&inputs(BASE), &inputs(&written));
        assert_eq!(
            plan.modules.get("forward"),
            Some(&Change::Unchanged),
            "{plan:?}"
        );
        // Another bound is a change.
        let plan = diff(
            &inputs(BASE),
            &inputs(&written.replace("max_connections = 64", "max_connections = 65")),
        );
        assert_eq!(
            plan.modules.get("forward"),
            Some(&Change::Changed),
            "{plan:?}"
        );
    }

    // r[verify node.reload.diff+4]
    #[test]
    fn a_gateway_default_written_out_is_no_change() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("gateway.key");
        std::fs::write(&key, "reload-test-gateway-key-0123456789\n").unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let gateway = |extra: &str, auth: &str| {
            format!("[node]\n[gateway]\nlisten = \"127.0.0.1:8443\"\n{extra}{auth}")
        };
        let key_file = format!("token_key_file = \"{}\"\n", key.display());
        let secrets = format!("[gateway.auth]\nsecrets = [\"{}\"]\n", key.display());
        let bare = inputs(&gateway(&key_file, ""));
        // The ping interval's default written out, in another spelling; the key file as the
        // one secret of [gateway.auth].
        for written in [
            gateway(&format!("ping_interval = \"20s\"\n{key_file}"), ""),
            gateway("ping_interval = \"20 s\"\n", &secrets),
            gateway("", &secrets),
        ] {
            let plan = diff(&bare, &inputs(&written));
            assert_eq!(
                plan.modules.get("gateway"),
                Some(&Change::Unchanged),
                "{written}"
            );
        }
        // Another ping interval is a change.
        let plan = diff(
            &bare,
            &inputs(&gateway(
                &format!("ping_interval = \"21s\"\n{key_file}"),
                "",
            )),
        );
        assert_eq!(plan.modules.get("gateway"), Some(&Change::Changed));
    }

    // A `replica_id` written as the node id (its default) is no change: compared as the
    // gateway runs it, with the running node's id (resolved at its start, or `[node] id`).
    // r[verify node.reload.diff+4]
    #[test]
    fn a_replica_id_written_as_the_node_id_is_no_change() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("gateway.key");
        std::fs::write(&key, "reload-test-gateway-key-0123456789\n").unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let file = |node: &str, replica: &str| {
            format!(
                "[node]\n{node}[gateway]\nlisten = \"127.0.0.1:8443\"\n{replica}\
                 token_key_file = \"{}\"\n",
                key.display()
            )
        };
        let parse = |text: &str| Config::parse("reload.toml", text).unwrap();
        let gateway = |plan: &Plan| plan.modules[crate::modules::gateway::NAME];
        // The node's id resolved at its start (no `[node] id`).
        let running = parse(&file("", ""));
        let running_inputs = Inputs::of_node(&running, "node-7");
        let mut new = parse(&file("", "replica_id = \"node-7\"\n"));
        let (_, plan) = super::plan(&running_inputs, &running, &mut new, "node-7");
        assert_eq!(gateway(&plan), Change::Unchanged, "{plan:?}");
        // And back.
        let written = parse(&file("", "replica_id = \"node-7\"\n"));
        let mut left_out = parse(&file("", ""));
        let (_, plan) = super::plan(
            &Inputs::of_node(&written, "node-7"),
            &written,
            &mut left_out,
            "node-7",
        );
        assert_eq!(gateway(&plan), Change::Unchanged, "{plan:?}");
        // Another id is a change.
        let mut other = parse(&file("", "replica_id = \"node-8\"\n"));
        let (_, plan) = super::plan(&running_inputs, &running, &mut other, "node-7");
        assert_eq!(gateway(&plan), Change::Changed, "{plan:?}");
        // `[node] id` names the node when set.
        let named = |replica: &str| inputs(&file("id = \"named\"\n", replica));
        let plan = diff(&named(""), &named("replica_id = \"named\"\n"));
        assert_eq!(gateway(&plan), Change::Unchanged, "{plan:?}");
    }

    // r[verify node.reload.diff+4]
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

    /// The keys of the struct `T` deserializes (what serde's derive passes to
    /// `deserialize_struct`), so that a key added later must be added to the cases below.
    fn keys_of<'de, T: serde::Deserialize<'de>>() -> &'static [&'static str] {
        struct Fields(Option<&'static [&'static str]>);
        #[derive(Debug)]
        struct Stop;
        impl std::fmt::Display for Stop {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("stop")
            }
        }
        impl std::error::Error for Stop {}
        impl serde::de::Error for Stop {
            fn custom<M: std::fmt::Display>(_: M) -> Self {
                Stop
            }
        }
        impl<'de> serde::Deserializer<'de> for &mut Fields {
            type Error = Stop;
            fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
                Err(Stop)
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Stop> {
                self.0 = Some(fields);
                Err(Stop)
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }
        let mut fields = Fields(None);
        let _ = T::deserialize(&mut fields);
        fields.0.unwrap_or_default()
    }

    // r[verify node.reload.diff+4]
    #[test]
    fn every_key_of_pull_workloads_and_a_workload_changes_the_modules_built_from_it() {
        // gc off and every optional key left out in the running config, so that each case below
        // is a change of a value the module is built from, whether or not it is used today.
        let running = format!(
            "{BASE}[[workload]]\nname = \"db\"\nimage = \"postgres:1\"\n[pull]\ngc = false\n[workloads]\n\
             [issuance]\n[issuance.local]\nendpoint = {{ tcp = \"127.0.0.1:1\" }}\n\
             [[issuance.hostname]]\nname = \"a.example\"\nsource = \"local\"\n\
             deploy = {{ dir = \"/etc/a\" }}\n"
        );
        // Credentials must be readable by their owner only.
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("creds.json");
        std::fs::write(&creds, "{}").unwrap();
        std::fs::set_permissions(&creds, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let creds_line = format!("credentials_file = \"{}\"", creds.display());
        let auth_line = format!(
            "auth = {{ \"registry.example\" = {{ username = \"u\", password_file = \"{}\" }} }}",
            creds.display()
        );
        let both: &[&str] = &["pull", "workload"];
        let pull: &[&str] = &["pull"];
        let workload: &[&str] = &["workload"];
        let cases: &[(&str, &str, &str, &[&str])] = &[
            ("pull", "enabled", "enabled = false", both),
            (
                "pull",
                "docker_host",
                "docker_host = \"unix:///x.sock\"",
                both,
            ),
            ("pull", "base", "base = \"7s\"", pull),
            ("pull", "cap", "cap = \"7h\"", pull),
            ("pull", "escalate_after", "escalate_after = 9", pull),
            ("pull", "stall_timeout", "stall_timeout = \"77s\"", pull),
            (
                "pull",
                "docker_config",
                concat!(
                    "docker_config = \"",
                    env!("CARGO_MANIFEST_DIR"),
                    "/Cargo.toml\""
                ),
                pull,
            ),
            ("pull", "auth", &auth_line, pull),
            ("pull", "digest_interval", "digest_interval = \"17m\"", pull),
            ("pull", "gc", "gc = true", pull),
            ("pull", "gc_high_percent", "gc_high_percent = 95", pull),
            ("pull", "gc_low_percent", "gc_low_percent = 5", pull),
            ("pull", "gc_grace", "gc_grace = \"3h\"", pull),
            ("pull", "gc_interval", "gc_interval = \"3h\"", pull),
            ("workloads", "stop_on_exit", "stop_on_exit = true", workload),
            ("workloads", "owner", "owner = \"someone-else\"", workload),
            ("workload", "name", "name = \"web2\"", both),
            ("workload", "image", "image = \"nginx:2\"", both),
            ("workload", "command", "command = [\"x\"]", workload),
            ("workload", "env", "env = { A = \"1\" }", workload),
            ("workload", "restart", "restart = \"never\"", workload),
            ("workload", "min_run", "min_run = \"77s\"", workload),
            (
                "workload",
                "stop_timeout",
                "stop_timeout = \"77s\"",
                workload,
            ),
            (
                "workload",
                "ports",
                "ports = [\"127.0.0.1:8080:80\"]",
                workload,
            ),
            ("workload", "volumes", "volumes = [\"/srv:/srv\"]", workload),
            ("workload", "network", "network = \"host\"", workload),
            ("workload", "user", "user = \"1000\"", workload),
            ("workload", "workdir", "workdir = \"/srv\"", workload),
            ("workload", "env_file", "env_file = \"/dev/null\"", workload),
            ("workload", "labels", "labels = { a = \"b\" }", workload),
            ("workload", "memory", "memory = \"64MiB\"", workload),
            ("workload", "cpus", "cpus = 0.5", workload),
            ("workload", "pids_limit", "pids_limit = 64", workload),
            ("workload", "read_only", "read_only = true", workload),
            ("workload", "cap_add", "cap_add = [\"NET_ADMIN\"]", workload),
            ("workload", "cap_drop", "cap_drop = [\"ALL\"]", workload),
            ("workload", "init", "init = true", workload),
            ("workload", "log", "log = { driver = \"local\" }", workload),
            (
                "workload",
                "health",
                "health = { cmd = [\"true\"] }",
                workload,
            ),
            ("workload", "depends_on", "depends_on = [\"db\"]", workload),
            (
                "workload",
                "certificates",
                "certificates = [\"a.example\"]",
                workload,
            ),
            (
                "workload",
                "on_cert_renew",
                "certificates = [\"a.example\"]\non_cert_renew = \"restart\"",
                workload,
            ),
            ("workload", "credentials_file", &creds_line, pull),
            ("workload", "pull_policy", "pull_policy = \"digest\"", pull),
        ];
        let listed = |section: &str| {
            let mut keys: Vec<&str> = cases
                .iter()
                .filter(|(s, ..)| *s == section)
                .map(|(_, key, ..)| *key)
                .collect();
            keys.sort_unstable();
            keys
        };
        let sorted = |keys: &[&'static str]| {
            let mut keys = keys.to_vec();
            keys.sort_unstable();
            keys
        };
        assert_eq!(
            listed("pull"),
            sorted(keys_of::<crate::config::PullSection>())
        );
        assert_eq!(
            listed("workloads"),
            sorted(keys_of::<crate::config::WorkloadsSection>())
        );
        assert_eq!(
            listed("workload"),
            sorted(keys_of::<crate::config::Workload>())
        );
        let before = inputs(&running);
        for (section, key, line, changed) in cases {
            let after = match *section {
                "workload" if *key == "name" => running.replace("name = \"web\"", line),
                "workload" if *key == "image" => running.replace("image = \"nginx:1\"", line),
                "workload" => running.replace("nginx:1\"\n", &format!("nginx:1\"\n{line}\n")),
                "pull" if *key == "gc" => running.replace("gc = false", line),
                "pull" => running.replace("[pull]\n", &format!("[pull]\n{line}\n")),
                _ => running.replace("[workloads]\n", &format!("[workloads]\n{line}\n")),
            };
            let after = match Config::parse("reload.toml", &after) {
                Ok(config) => Inputs::of(&config),
                Err(e) => panic!("{section}.{key}: {e}"),
            };
            let plan = diff(&before, &after);
            let mut names: Vec<&str> = plan.with(Change::Changed).collect();
            names.extend(plan.with(Change::Appeared));
            names.extend(plan.with(Change::Disappeared));
            names.sort_unstable();
            assert_eq!(names, changed.to_vec(), "{section}.{key}: {plan:?}");
        }
    }

    // r[verify node.reload.diff+4]
    #[test]
    fn a_module_without_its_own_inputs_changes_with_any_module_input() {
        let of = |text: &str| {
            let config = Config::parse("reload.toml", text).unwrap();
            Inputs::of_modules(["some-future-module"], &config, None)
        };
        let running = of(BASE);
        assert!(matches!(
            running.modules["some-future-module"],
            ModuleInputs::Everything(_)
        ));
        let plan = diff(&running, &of(BASE));
        assert_eq!(plan.modules["some-future-module"], Change::Unchanged);
        for edit in [
            BASE.replace("nginx:1\"\n", "nginx:1\"\ncommand = [\"x\"]\n"),
            format!("{BASE}[pull]\ncap = \"7h\"\n"),
            BASE.replace("127.0.0.1:53\"]", "127.0.0.1:54\"]"),
            format!("{BASE}[issuance]\n"),
        ] {
            let plan = diff(&running, &of(&edit));
            assert_eq!(
                plan.modules["some-future-module"],
                Change::Changed,
                "{edit}"
            );
        }
    }

    // r[verify node.reload.live-forward]
    #[test]
    fn a_forward_takes_only_its_tokens_and_allow_lists_live() {
        use crate::config::ForwardSection;
        use crate::modules::forward::NAME;
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens");
        std::fs::write(&tokens, "reload-test-forward-token-from-a-file-0123\n").unwrap();
        std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let token_file = format!("token_file = \"{}\"", tokens.display());
        // Every key of `[forward]`, a change to it, and whether the module takes it live.
        let cases: &[(&str, &str, bool)] = &[
            ("listen", "listen = \"127.0.0.1:1\"", false),
            ("token_file", &token_file, true),
            (
                "tokens",
                "tokens = [\"reload-test-forward-token-9876543210\"]",
                true,
            ),
            ("allow", "allow = [\"127.0.0.1:54\"]", true),
            (
                "client",
                "[[forward.client]]\ntokens = [\"reload-test-client-token-0123456789\"]\n\
                 allow = [\"10.0.0.2:53\"]",
                true,
            ),
            ("max_connections", "max_connections = 7", false),
            (
                "max_connections_per_token",
                "max_connections_per_token = 7",
                false,
            ),
            ("max_unauthenticated", "max_unauthenticated = 7", false),
            (
                "max_unauthenticated_per_source",
                "max_unauthenticated_per_source = 7",
                false,
            ),
        ];
        let mut listed: Vec<&str> = cases.iter().map(|(key, ..)| *key).collect();
        listed.sort_unstable();
        let mut keys = keys_of::<ForwardSection>().to_vec();
        keys.sort_unstable();
        assert_eq!(listed, keys, "every key of [forward] is decided");
        let running = inputs(BASE);
        for (key, line, live) in cases {
            let edited = match *key {
                "listen" => BASE.replace("listen = \"127.0.0.1:0\"", line),
                "tokens" => {
                    BASE.replace("tokens = [\"reload-test-forward-token-0123456789\"]", line)
                }
                "allow" => BASE.replace("allow = [\"127.0.0.1:53\"]", line),
                _ => format!("{BASE}{line}\n"),
            };
            let new = inputs(&edited);
            assert_eq!(diff(&running, &new).modules[NAME], Change::Changed, "{key}");
            assert_eq!(takes_live(NAME, &running, &new), *live, "{key}");
            // The workload module, unchanged, takes nothing live.
            assert!(!takes_live(crate::modules::workload::NAME, &running, &new));
        }
        // A change to the access and to another key at once restarts it.
        let both = BASE
            .replace("allow = [\"127.0.0.1:53\"]", "allow = [\"127.0.0.1:54\"]")
            .replace("listen = \"127.0.0.1:0\"", "listen = \"127.0.0.1:1\"");
        assert!(!takes_live(NAME, &running, &inputs(&both)));
        // Unchanged, appeared or gone: nothing to take live.
        assert!(!takes_live(NAME, &running, &running));
        let without = inputs("[node]\n[[workload]]\nname = \"web\"\nimage = \"nginx:1\"\n");
        assert!(!takes_live(NAME, &running, &without));
        assert!(!takes_live(NAME, &without, &running));
    }

    // r[verify node.reload.live-pull+2]
    #[test]
    fn a_pull_module_takes_only_its_set_of_images_live() {
        use crate::modules::pull::NAME;
        let running = inputs(BASE);
        let db = "[[workload]]\nname = \"db\"\nimage = \"postgres:16\"\n";
        for (what, text, live) in [
            ("a workload added", format!("{BASE}{db}"), true),
            ("an image changed", BASE.replace("nginx:1", "nginx:2"), true),
            (
                "a workload renamed",
                BASE.replace("\"web\"", "\"www\""),
                true,
            ),
            (
                "a workload added whose tag is followed",
                format!("{BASE}{db}pull_policy = \"digest\"\n"),
                false,
            ),
            (
                "a workload added with its credentials",
                format!(
                    "{BASE}{db}credentials_file = \"{}\"\n",
                    credentials_file().display()
                ),
                false,
            ),
            (
                "[pull] changed",
                format!("{BASE}[pull]\ncap = \"7h\"\n"),
                false,
            ),
            (
                "[pull] changed and a workload added",
                format!("{BASE}{db}[pull]\ncap = \"7h\"\n"),
                false,
            ),
        ] {
            let new = inputs(&text);
            assert_eq!(
                diff(&running, &new).modules[NAME],
                Change::Changed,
                "{what}"
            );
            assert_eq!(takes_live(NAME, &running, &new), live, "{what}");
        }
        // Every workload removed: the workload module goes; the pull module keeps no image.
        let none = inputs("[node]\n");
        assert!(takes_live(NAME, &running, &none));
    }

    // r[verify node.reload.live-gateway+2]
    #[test]
    fn a_gateway_takes_only_its_limits_live() {
        use crate::modules::gateway::NAME;
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("gateway.key");
        std::fs::write(&key, "reload-test-gateway-key-0123456789\n").unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let file = |extra: &str| {
            format!(
                "[node]\n[gateway]\nlisten = \"127.0.0.1:0\"\ntoken_key_file = \"{}\"\n{extra}",
                key.display()
            )
        };
        let running = inputs(&file(""));
        let other = dir.path().join("other.key");
        std::fs::write(&other, "reload-test-gateway-other-0123456789\n").unwrap();
        std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let other_key = format!("token_key_file = \"{}\"", other.display());
        let publish = format!("publish_token_file = \"{}\"", other.display());
        // Every key of `[gateway]`, a change to it, and whether the gateway takes it live.
        let cases: &[(&str, &str, bool)] = &[
            ("listen", "listen = \"127.0.0.1:1\"", false),
            ("replica_id", "replica_id = \"other\"", false),
            ("advertise", "advertise = \"gw.example:443\"", false),
            ("token_key_file", &other_key, true),
            ("publish_token_file", &publish, false),
            ("auth", "[gateway.auth]\nreload_interval = \"7s\"", false),
            ("max_message_size", "max_message_size = 7000", false),
            ("send_queue", "send_queue = 7", false),
            ("ping_interval", "ping_interval = \"7s\"", false),
            ("idle_timeout", "idle_timeout = \"70s\"", false),
            ("per_ip_limit", "per_ip_limit = 7", true),
            ("unauthenticated_limit", "unauthenticated_limit = 7", true),
            (
                "unauthenticated_per_ip_limit",
                "unauthenticated_per_ip_limit = 7",
                true,
            ),
            (
                "max_rooms_per_connection",
                "max_rooms_per_connection = 7",
                true,
            ),
            ("max_room_name", "max_room_name = 7", true),
            ("history_size", "history_size = 7", false),
            ("history_ttl", "history_ttl = \"7m\"", false),
            ("history_max_bytes", "history_max_bytes = 70000", false),
            ("drain", "[gateway.drain]\ntotal = \"7s\"", false),
            (
                "tls",
                "[gateway.tls]\ncert = \"/srv/gw/cert.pem\"\nkey = \"/srv/gw/key.pem\"",
                false,
            ),
            ("cluster", "[gateway.cluster]\nlease_ttl = \"7s\"", false),
        ];
        let mut listed: Vec<&str> = cases.iter().map(|(key, ..)| *key).collect();
        listed.sort_unstable();
        let mut keys = keys_of::<crate::config::GatewaySection>().to_vec();
        keys.sort_unstable();
        assert_eq!(listed, keys, "every key of [gateway] is decided");
        for (key, line, live) in cases {
            let edited = match *key {
                "listen" => file("").replace("listen = \"127.0.0.1:0\"", line),
                "token_key_file" => {
                    format!("[node]\n[gateway]\nlisten = \"127.0.0.1:0\"\n{line}\n")
                }
                _ => file(&format!("{line}\n")),
            };
            let new = inputs(&edited);
            assert_eq!(diff(&running, &new).modules[NAME], Change::Changed, "{key}");
            assert_eq!(takes_live(NAME, &running, &new), *live, "{key}");
        }
        for (line, live) in [
            ("per_ip_limit = 7\n", true),
            ("unauthenticated_limit = 7\n", true),
            ("unauthenticated_per_ip_limit = 7\n", true),
            ("max_rooms_per_connection = 7\n", true),
            ("max_room_name = 7\n", true),
            ("per_ip_limit = 7\nmax_room_name = 7\n", true),
            ("max_message_size = 7000\n", false),
            ("send_queue = 7\n", false),
            ("ping_interval = \"7s\"\n", false),
            ("per_ip_limit = 7\nsend_queue = 7\n", false),
            ("replica_id = \"other\"\n", false),
        ] {
            let new = inputs(&file(line));
            assert_eq!(
                diff(&running, &new).modules[NAME],
                Change::Changed,
                "{line}"
            );
            assert_eq!(takes_live(NAME, &running, &new), live, "{line}");
        }
        // The listen address restarts it (through its drain).
        let moved = inputs(&file("").replace("127.0.0.1:0", "127.0.0.1:1"));
        assert!(!takes_live(NAME, &running, &moved));
        assert_eq!(gateway_files(&running, &moved), GatewayFiles::default());
        // New key files: live, and named for the reload to read (the secret file moved to
        // [gateway.auth], as its one secret, is no change at all).
        let secrets = |files: &str| {
            format!(
                "[node]\n[gateway]\nlisten = \"127.0.0.1:0\"\n[gateway.auth]\nsecrets = [{files}]\n"
            )
        };
        let new = inputs(&secrets(&format!("\"{}\"", other.display())));
        assert!(takes_live(NAME, &running, &new));
        assert_eq!(
            gateway_files(&running, &new).keys,
            Some(vec![holdfast_gateway::KeySource::secret(&other)])
        );
        assert_eq!(gateway_files(&running, &new).tls, None);
        let same = inputs(&secrets(&format!("\"{}\"", key.display())));
        assert_eq!(diff(&running, &same).modules[NAME], Change::Unchanged);
        // The claims checked are not live.
        let claims = inputs(&file("[gateway.auth]\nleeway = \"7s\"\n"));
        assert!(!takes_live(NAME, &running, &claims));
        // With TLS on: other paths (and another `from_issuance` hostname) are live; TLS turned
        // off, or on, is not.
        let tls = |cert: &str| {
            file(&format!(
                "[gateway.tls]\ncert = \"{cert}\"\nkey = \"/srv/k.pem\"\n"
            ))
        };
        let with_tls = inputs(&tls("/srv/a.pem"));
        let other_pair = inputs(&tls("/srv/b.pem"));
        assert!(takes_live(NAME, &with_tls, &other_pair));
        assert_eq!(
            gateway_files(&with_tls, &other_pair),
            GatewayFiles {
                keys: None,
                tls: Some(holdfast_gateway::TlsFiles {
                    cert: "/srv/b.pem".into(),
                    key: "/srv/k.pem".into(),
                }),
            }
        );
        assert!(!takes_live(NAME, &with_tls, &running));
        assert!(!takes_live(NAME, &running, &with_tls));
        // A pair and a key file and a limit at once: live; with `listen` too: a restart.
        let all = inputs(&tls("/srv/b.pem").replace(
            &format!("token_key_file = \"{}\"", key.display()),
            &format!("token_key_file = \"{}\"\nper_ip_limit = 3", other.display()),
        ));
        assert!(takes_live(NAME, &with_tls, &all));
        let files = gateway_files(&with_tls, &all);
        assert!(files.keys.is_some() && files.tls.is_some(), "{files:?}");
        let all_moved = inputs(
            &tls("/srv/b.pem")
                .replace(
                    &format!("token_key_file = \"{}\"", key.display()),
                    &format!("token_key_file = \"{}\"", other.display()),
                )
                .replace("127.0.0.1:0", "127.0.0.1:1"),
        );
        assert!(!takes_live(NAME, &with_tls, &all_moved));
        // Another `from_issuance` hostname: live, the pair being the issuance store's file for
        // it; from a PEM pair to the store's, too.
        let issued = |host: &str| {
            file(&format!(
                "[gateway.tls]\nfrom_issuance = \"{host}\"\n[issuance]\n[issuance.local]\n\
                 endpoint = {{ tcp = \"127.0.0.1:8099\" }}\n\
                 [[issuance.hostname]]\nname = \"a.example\"\nsource = \"local\"\n\
                 [[issuance.hostname]]\nname = \"b.example\"\nsource = \"local\"\n"
            ))
        };
        let (a, b) = (inputs(&issued("a.example")), inputs(&issued("b.example")));
        assert!(takes_live(NAME, &a, &b));
        let bundle = crate::config::issuance_bundle(
            &Config::parse("reload.toml", &issued("b.example"))
                .unwrap()
                .node
                .data_dir,
            "b.example",
        );
        assert_eq!(
            gateway_files(&a, &b).tls,
            Some(holdfast_gateway::TlsFiles {
                cert: bundle.clone(),
                key: bundle,
            })
        );
    }

    // r[verify node.reload.live-issuance]
    #[test]
    fn issuance_takes_only_certificates_of_the_sources_it_runs_live() {
        use crate::modules::issuance::NAME;
        let host = |name: &str, source: &str| {
            format!("[[issuance.hostname]]\nname = \"{name}\"\nsource = \"{source}\"\n")
        };
        let file = |other: &str, acme: &str, hosts: &[String]| {
            format!(
                "[node]\n[issuance]\n{other}[issuance.local]\n\
                 endpoint = {{ tcp = \"127.0.0.1:8099\" }}\n\
                 [issuance.acme]\ndirectory = \"https://ca.example/dir\"\n{acme}{}",
                hosts.concat()
            )
        };
        let a = host("a.example", "local");
        let b = host("b.example", "local");
        let web = host("web.example", "acme");
        let running = inputs(&file("", "", std::slice::from_ref(&a)));
        let cert = "[[issuance.certificate]]\nnames = [\"c.example\", \"d.example\"]\n\
                    source = \"local\"\n"
            .to_owned();
        for (what, text, live) in [
            (
                "a hostname added",
                file("", "", &[a.clone(), b.clone()]),
                true,
            ),
            (
                "a hostname swapped",
                file("", "", std::slice::from_ref(&b)),
                true,
            ),
            ("every hostname removed", file("", "", &[]), true),
            (
                "a certificate added",
                file("", "", &[a.clone(), cert]),
                true,
            ),
            // The ACME source is configured but runs no certificate yet: a restart starts it.
            (
                "a new source",
                file("", "", &[a.clone(), web.clone()]),
                false,
            ),
            (
                "another setting",
                file("tick = \"7s\"\n", "", std::slice::from_ref(&a)),
                false,
            ),
            (
                "a setting and a hostname",
                file("tick = \"7s\"\n", "", &[a.clone(), b.clone()]),
                false,
            ),
            (
                "a source's setting",
                file(
                    "",
                    "contact = [\"mailto:x@example.com\"]\n",
                    std::slice::from_ref(&a),
                ),
                false,
            ),
        ] {
            let new = inputs(&text);
            assert_eq!(
                diff(&running, &new).modules[NAME],
                Change::Changed,
                "{what}"
            );
            assert_eq!(takes_live(NAME, &running, &new), live, "{what}");
        }
        // ACME over HTTP-01 runs: another such name is live, unless the responder redirects to
        // the names it started with.
        for (redirect, live) in [("", true), ("http01_other = \"redirect\"\n", false)] {
            let running = inputs(&file("", redirect, &[a.clone(), web.clone()]));
            let www = host("www.example", "acme");
            let new = inputs(&file("", redirect, &[a.clone(), web.clone(), www]));
            assert_eq!(takes_live(NAME, &running, &new), live, "{redirect}");
        }
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
        /// An `[issuance]` section.
        issuance: bool,
        /// A `[testing]` section (its hanging module).
        testing: bool,
    }

    fn file() -> impl Strategy<Value = File> {
        (
            proptest::collection::vec((any::<u8>(), proptest::option::of(1u32..3600)), 1..3),
            1u32..300,
            1u32..100_000,
            proptest::option::of(proptest::collection::vec(1u16..1000, 1..3)),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(workloads, pull_base, tick, forward, stop_on_exit, issuance, testing)| File {
                    workloads,
                    pull_base,
                    tick,
                    forward,
                    stop_on_exit,
                    issuance,
                    // `[testing]` is refused in a build without the test modules.
                    testing: testing && cfg!(feature = "testing-modules"),
                },
            )
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
        if f.issuance {
            out.push_str("[issuance]\n");
        }
        if f.testing {
            out.push_str("[testing]\nhang_on_stop = true\n");
        }
        out
    }

    /// A registry credentials file (readable by its owner only, as the config requires).
    fn credentials_file() -> &'static std::path::Path {
        static FILE: std::sync::OnceLock<(tempfile::TempDir, std::path::PathBuf)> =
            std::sync::OnceLock::new();
        &FILE
            .get_or_init(|| {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("creds.json");
                std::fs::write(&path, "{}").unwrap();
                std::fs::set_permissions(
                    &path,
                    std::os::unix::fs::PermissionsExt::from_mode(0o600),
                )
                .unwrap();
                (dir, path)
            })
            .1
    }

    proptest! {
        // r[verify node.reload.diff+4]
        #[test]
        fn a_file_against_itself_is_unchanged_everywhere(f in file()) {
            let plan = diff(&inputs(&render(&f, false)), &inputs(&render(&f, true)));
            prop_assert!(plan.modules.values().all(|c| *c == Change::Unchanged), "{:?}", plan);
            prop_assert!(plan.needs_restart.is_empty(), "{:?}", plan);
        }

        // r[verify node.reload.diff+4]
        // r[verify node.reload.node-sections]
        #[test]
        fn a_shared_input_changes_every_module_built_from_it_and_no_other(
            f in file(),
            edit in 0..18usize,
            respell in any::<bool>(),
        ) {
            let before = render(&f, false);
            let first = |from: &str, to: &str| before.replacen(from, to, 1);
            let unchanged = || (before.clone(), &[][..], &[][..]);
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
                    None => unchanged(),
                },
                7 => (first("[node]\n", "[node]\nstop_budget = \"11s\"\n"), &[], &["node"]),
                8 => (first("[node]\n", "[log]\nlevel = \"debug\"\n[node]\n"), &[], &["log"]),
                9 => (first("[node]\n", "[supervise]\ncrash_loop_threshold = 9\n[node]\n"),
                      &[], &["supervise"]),
                10 => (first("[pull]\n", "[pull]\ngc_high_percent = 95\n"), &["pull"], &[]),
                11 => (first("[node]\n", "[admin]\nallowed_hosts = [\"probe\"]\n[node]\n"),
                      &[], &["admin"]),
                12 if f.issuance => (first("[issuance]\n", "[issuance]\ntick = \"7s\"\n"),
                                     &["issuance"], &[]),
                // The test modules' section: `testing-hang` only (a second test module, which
                // appears, is not asked about).
                13 if f.testing => (
                    first("hang_on_stop = true\n", "hang_on_stop = true\nwedge_start = false\n")
                        .replacen("[testing]\n", "[testing]\n# the same\n", 1),
                    &[], &[],
                ),
                14 => (first("[pull]\n", &format!(
                    "[pull]\ndocker_config = \"{}\"\n", credentials_file().display())),
                       &["pull"], &[]),
                15 => (first("[[workload]]\n", &format!(
                    "[[workload]]\ncredentials_file = \"{}\"\n", credentials_file().display())),
                       &["pull"], &[]),
                16 => (first("[pull]\n", "[pull]\ndigest_interval = \"17m\"\n"), &["pull"], &[]),
                17 if f.testing => (
                    first("[testing]\n", "[testing]\nhang_on_stop = true\nwedge_start = true\n")
                        .replacen("hang_on_stop = true\nwedge_start = true\nhang_on_stop = true\n",
                                  "hang_on_stop = true\nwedge_start = true\n", 1),
                    &["testing-hang"], &[],
                ),
                _ => unchanged(),
            };
            let plan = diff(&inputs(&before), &inputs(&after));
            prop_assert_eq!(plan.with(Change::Changed).collect::<Vec<_>>(), changed.to_vec());
            prop_assert_eq!(plan.needs_restart.clone(), restart.to_vec());
            // Only the second test module may appear, with its section's change (edit 17).
            let appeared: Vec<&str> = plan.with(Change::Appeared).collect();
            let expected: &[&str] = if edit == 17 && f.testing { &["testing-wedge"] } else { &[] };
            prop_assert_eq!(appeared, expected.to_vec());
            prop_assert_eq!(plan.with(Change::Disappeared).count(), 0);
        }
    }
}
