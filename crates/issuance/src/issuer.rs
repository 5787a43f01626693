//! The issuer: every tick, for every hostname, the decision first; a source only when it says
//! issue; the outcome into the attempts table and the certificate into the store.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use futures_util::future::join_all;
use holdfast_lifecycle::{FaultBoard, Subject};

use crate::acme::{RenewalWindow, pick_in_window};
use crate::acme_http::RETRY_AFTER_MAX;
use crate::decision::{self, Flags, IssuePolicy, IssueReason, Verdict};
use crate::deploy::DeployTarget;
use crate::history::{FailureRecord, HistoryDb, HistoryError, Outcome};
use crate::hook::{self, Hook, HookEnv, HookFiles};
use crate::source::{ErrorClass, Source, SourceError};
use crate::store::CertStore;
use holdfast_retry::{History, Policy};

/// The wall clock the issuer reads (injected in tests).
pub trait WallClock: Send + Sync + 'static {
    /// Now.
    fn now(&self) -> SystemTime;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemWallClock;

impl WallClock for SystemWallClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A wall clock that moves only when told to; clones share it.
#[derive(Debug, Clone)]
pub struct ManualWallClock(Arc<Mutex<SystemTime>>);

impl ManualWallClock {
    /// Standing at `at`.
    pub fn new(at: SystemTime) -> Self {
        Self(Arc::new(Mutex::new(at)))
    }
    /// Moves forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut t = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *t += d;
    }
}

impl WallClock for ManualWallClock {
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One configured certificate — named by its first name, its key — and the source that serves
/// it. A `[[issuance.hostname]]` is one with no further names.
#[derive(Clone)]
pub struct Hostname {
    /// The first DNS name: the key of the certificate's file, history, decision and block.
    pub name: String,
    /// The certificate's further names, issued in the same attempt.
    pub also: Vec<String>,
    /// Its source.
    pub source: Arc<dyn Source>,
}

impl Hostname {
    /// A certificate for one name.
    pub fn new(name: impl Into<String>, source: Arc<dyn Source>) -> Self {
        Self {
            name: name.into(),
            also: Vec::new(),
            source,
        }
    }

    /// A certificate for `names`, the first its key (an empty list is refused before this, by
    /// the config's check).
    pub fn certificate(names: Vec<String>, source: Arc<dyn Source>) -> Self {
        let mut names = names.into_iter();
        Self {
            name: names.next().unwrap_or_default(),
            also: names.collect(),
            source,
        }
    }

    /// Every name, the key first.
    pub fn names(&self) -> Vec<String> {
        std::iter::once(self.name.clone())
            .chain(self.also.iter().cloned())
            .collect()
    }
}

impl std::fmt::Debug for Hostname {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hostname")
            .field("name", &self.name)
            .field("also", &self.also)
            .field("source", &self.source.name())
            .finish()
    }
}

/// What `holdfast certs` shows for one hostname.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HostStatus {
    /// The hostname: the certificate's first name.
    pub hostname: String,
    /// The certificate's further names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
    /// The source's name.
    pub source: String,
    /// `valid`, `issuing`, `due`, `debounced` or `blocked`.
    pub state: &'static str,
    /// The current certificate's end of validity.
    pub not_after: Option<SystemTime>,
    /// The next renewal (valid) or the next attempt (debounced, blocked).
    pub next: Option<SystemTime>,
    /// Consecutive failures.
    pub failures: u32,
    /// The latest failure's class and message.
    pub last_error: Option<String>,
    /// How to clear a block.
    pub clear: Option<&'static str>,
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Hostnames dispatched, with the reason.
    pub dispatched: Vec<(String, IssueReason)>,
    /// Hostnames whose attempt succeeded.
    pub issued: Vec<String>,
    /// Hostnames whose attempt failed, with the failure.
    pub failed: Vec<(String, SourceError)>,
    /// Hostnames that became blocked in this tick.
    pub blocked: Vec<String>,
}

/// A blocked hostname, for the node's fault board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedHost {
    /// The hostname.
    pub hostname: String,
    /// Consecutive failures.
    pub failures: u32,
    /// The block's expiry.
    pub until: SystemTime,
    /// The latest failure.
    pub last_error: String,
}

/// The issuer failed before any source was called.
#[derive(Debug, thiserror::Error)]
pub enum IssuerError {
    /// The attempts table.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// An unknown hostname.
    #[error("{0} is not a configured hostname")]
    Unknown(String),
}

/// The renewal time drawn from one ARI window, and when to ask for the window again.
#[derive(Debug, Clone, Copy)]
struct AriChoice {
    /// The window the time was drawn from, and the time (`None`: no window, the fallback holds).
    drawn: Option<((SystemTime, SystemTime), SystemTime)>,
    /// When to ask again.
    recheck: SystemTime,
}

/// The longest a renewal-information request may hold up a tick.
const ARI_TIMEOUT: Duration = Duration::from_secs(30);

/// The shortest wait before a window is asked for again, whatever its Retry-After says.
const ARI_MIN_RECHECK: Duration = Duration::from_secs(60);

/// When a source that offered no window is asked again.
const ARI_NO_WINDOW_RECHECK: Duration = Duration::from_secs(86400);

/// When a hostname whose request did not answer in time is asked again.
const ARI_UNANSWERED_RECHECK: Duration = Duration::from_secs(3600);

/// When a window answered at `now` with `recheck_after` is asked for again: the wait raised to
/// [`ARI_MIN_RECHECK`] and cut to [`RETRY_AFTER_MAX`] (a source other than the guarded ACME client
/// may hand over any duration), and the addition checked, so no answer can panic the pass.
// r[impl issue.acme.retry-after]
fn recheck_at(now: SystemTime, recheck_after: Duration) -> SystemTime {
    let wait = recheck_after.clamp(ARI_MIN_RECHECK, RETRY_AFTER_MAX);
    now.checked_add(wait).unwrap_or(now)
}

/// A window's span and the renewal time drawn in it.
type Drawn = ((SystemTime, SystemTime), SystemTime);

impl AriChoice {
    /// Whether the window is to be asked for at `now`: never asked yet, or its recheck time has
    /// come (the instant itself included).
    // r[impl issue.renewal.ari+2]
    fn due(previous: Option<AriChoice>, now: SystemTime) -> bool {
        previous.is_none_or(|p| p.recheck <= now)
    }

    /// The choice once the source answered `window` at `now`: a window seen before keeps its
    /// time (RFC 9773 §4.2: drawn once per window, so re-asking does not re-draw), a new one draws
    /// with `draw` (a fraction in `[0, 1)`); no window keeps what was drawn before.
    // r[impl issue.renewal.ari+2]
    fn answered(
        kept: Option<Drawn>,
        window: Option<RenewalWindow>,
        now: SystemTime,
        draw: impl FnOnce() -> f64,
    ) -> AriChoice {
        match window {
            Some(w) => {
                let span = (w.start, w.end);
                let drawn = match kept {
                    Some((was, at)) if was == span => (span, at),
                    _ => (span, pick_in_window(&w, draw(), now)),
                };
                AriChoice {
                    drawn: Some(drawn),
                    recheck: recheck_at(now, w.recheck_after),
                }
            }
            // No ARI (or no answer): what was drawn before, else the two-thirds fallback.
            None => AriChoice {
                drawn: kept,
                recheck: now + ARI_NO_WINDOW_RECHECK,
            },
        }
    }

    /// The choice when the request did not answer inside the pass's bound: what was drawn
    /// before stays, and the hostname is asked again an hour later.
    // r[impl issue.bounds]
    fn unanswered(kept: Option<Drawn>, now: SystemTime) -> AriChoice {
        AriChoice {
            drawn: kept,
            recheck: now + ARI_UNANSWERED_RECHECK,
        }
    }
}

/// What becomes of one certificate's new pairs beyond the store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outputs {
    /// Where copies are written for other services.
    pub deploy: Option<DeployTarget>,
    /// The command run after each new certificate (once it is deployed).
    pub on_renew: Option<Hook>,
}

/// The work still owed to one certificate's latest pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Pending {
    /// Its files are not written yet.
    deploy: bool,
    /// Its hook has not succeeded yet.
    hook: bool,
}

/// The fault subject of a certificate's deploy.
pub fn deploy_subject(name: &str) -> Subject {
    Subject::new(MODULE, format!("{name}/deploy"))
}

/// The fault subject of a certificate near or past its end while its renewal fails.
pub fn expiry_subject(name: &str) -> Subject {
    Subject::new(MODULE, format!("{name}/expiry"))
}

/// The fault subject of a certificate's `on_renew` hook.
pub fn hook_subject(name: &str) -> Subject {
    Subject::new(MODULE, format!("{name}/on_renew"))
}

#[derive(Debug, Default)]
struct Memory {
    /// Deploy and hook work owed, per certificate.
    pending: HashMap<String, Pending>,
    /// A failing hook's streak, per certificate (paced through holdfast-retry).
    hooks: HashMap<String, History<SystemTime>>,
    manual: HashSet<String>,
    in_flight: HashSet<String>,
    last_error: HashMap<String, String>,
    /// ARI: the chosen renewal time and when to ask again, per hostname.
    ari: HashMap<String, AriChoice>,
    /// A certificate file that could not be loaded, per hostname.
    bad_on_disk: HashMap<String, String>,
    /// Attempts finished, by (source, outcome).
    attempts: BTreeMap<(String, &'static str), u64>,
}

/// Frees a hostname claimed by a tick when dropped.
struct InFlight<'a> {
    memory: &'a Mutex<Memory>,
    hostname: &'a str,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .in_flight
            .remove(self.hostname);
    }
}

/// The issuer's metrics, for the node's Prometheus endpoint.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Metrics {
    /// Attempts finished since start, by source and outcome (`success`, `failure`).
    pub attempts: BTreeMap<String, BTreeMap<String, u64>>,
    /// Hostnames blocked now.
    pub blocked: usize,
    /// Days until each stored certificate expires.
    pub days_to_expiry: BTreeMap<String, f64>,
}

/// The issuer.
pub struct Issuer {
    policy: IssuePolicy,
    /// The certificates, replaced whole by [`Issuer::replace_hosts`]; each pass reads one set.
    hosts: Mutex<Arc<Vec<Hostname>>>,
    db: Mutex<HistoryDb>,
    store: CertStore,
    clock: Arc<dyn WallClock>,
    attempt_timeout: Duration,
    memory: Mutex<Memory>,
    faults: FaultBoard,
    /// Why the attempts are kept in memory (the file could not be used at start), if they are.
    history_unavailable: Option<String>,
    /// Deploy and hook, per certificate (replaced with the certificates).
    outputs: Mutex<Arc<HashMap<String, Outputs>>>,
    /// The pacing of failing hooks.
    hook_policy: Policy,
    /// Held while deploys and hooks run: overlapping ticks would write the same files through
    /// the same temporary names, and run a hook still owed twice.
    outputs_running: tokio::sync::Mutex<()>,
}

/// The module name faults are filed under.
pub const MODULE: &str = "issuance";

/// The fault subject name for an unusable attempts table.
pub const STORAGE_SUBJECT: &str = "attempts-table";

/// The fault kind while attempts are kept in memory because the table's file could not be used.
pub const HISTORY_UNAVAILABLE: &str = "history_unavailable";

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer")
            .field("hosts", &self.hosts())
            .finish_non_exhaustive()
    }
}

impl Issuer {
    /// An issuer over `db` and `store`: loads each hostname's certificate from disk (a bad file
    /// is reported and left alone) and settles attempts a previous process left open.
    pub fn new(
        policy: IssuePolicy,
        hosts: Vec<Hostname>,
        mut db: HistoryDb,
        store: CertStore,
        clock: Arc<dyn WallClock>,
        attempt_timeout: Duration,
    ) -> Result<Self, IssuerError> {
        db.settle_open(&policy.retry, clock.now())?;
        // The store judges expiry by the issuer's clock.
        let store = store.with_clock(clock.clone());
        let policy_seed = policy.retry.seed();
        let mut memory = Memory::default();
        for host in &hosts {
            if let Err(err) = store.load(&host.name) {
                tracing::warn!(hostname = %host.name, %err, "certificate on disk is unusable");
                memory
                    .bad_on_disk
                    .insert(host.name.clone(), err.to_string());
            }
        }
        Ok(Self {
            policy,
            hosts: Mutex::new(Arc::new(hosts)),
            db: Mutex::new(db),
            store,
            clock,
            attempt_timeout,
            memory: Mutex::new(memory),
            faults: FaultBoard::new(),
            history_unavailable: None,
            outputs: Mutex::new(Arc::new(HashMap::new())),
            hook_policy: hook::pacing(policy_seed),
            outputs_running: tokio::sync::Mutex::new(()),
        })
    }

    /// Deploys each certificate's new pairs as `outputs` says (by certificate name). The pairs
    /// already stored are deployed at the next tick too, so the files exist after a restart or
    /// a config that added a deploy; a stored pair whose hook has not succeeded (per the record
    /// beside the store) has its hook run again, so a restart forgets no hook owed.
    // r[impl issue.deploy]
    // r[impl issue.on-renew]
    pub fn with_outputs(self, outputs: HashMap<String, Outputs>) -> Self {
        self.owe_outputs(&mut self.memory(), &outputs, |_| true);
        *self.outputs.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(outputs);
        self
    }

    /// Marks the deploys and hooks owed for the stored pairs of the certificates in `outputs`
    /// that `which` accepts.
    fn owe_outputs(
        &self,
        memory: &mut Memory,
        outputs: &HashMap<String, Outputs>,
        which: impl Fn(&str) -> bool,
    ) {
        for (name, out) in outputs.iter().filter(|(name, _)| which(name)) {
            let Some(pair) = self.store.get(name) else {
                continue;
            };
            if out.deploy.is_some() {
                memory.pending.entry(name.clone()).or_default().deploy = true;
            }
            if out.on_renew.is_some() && !self.hook_done_for(name, &pair.chain_pem) {
                memory.pending.entry(name.clone()).or_default().hook = true;
            }
        }
    }

    /// Whether `name` is one of the certificates now. Asked holding the memory lock before
    /// anything is kept or filed for `name`: [`Issuer::replace_hosts`] swaps the certificates
    /// and clears a removed one's state under that lock, so nothing kept or filed after it
    /// outlives the removal.
    fn is_current(&self, name: &str) -> bool {
        self.hosts().iter().any(|h| h.name == name)
    }

    /// The certificates now.
    fn hosts(&self) -> Arc<Vec<Hostname>> {
        Arc::clone(&self.hosts.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The deploys and hooks now.
    fn outputs(&self) -> Arc<HashMap<String, Outputs>> {
        Arc::clone(&self.outputs.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the certificates (and their deploys and hooks) while the issuer runs. One kept
    /// (the same key) keeps its state: its history, pacing, block, renewal window and the work
    /// it is owed. One added is loaded from the store (an unusable file is reported) and decided
    /// at the next tick; one removed is no longer decided, renewed, listed or deployed, and its
    /// faults are cleared (its history and stored files are left as they are).
    // r[impl issue.live-certificates]
    pub fn replace_hosts(&self, hosts: Vec<Hostname>, outputs: HashMap<String, Outputs>) {
        let (old, before) = (self.hosts(), self.outputs());
        let kept = |name: &str| old.iter().any(|h| h.name == name);
        let removed: Vec<String> = old
            .iter()
            .filter(|h| !hosts.iter().any(|n| n.name == h.name))
            .map(|h| h.name.clone())
            .collect();
        let added: Vec<Hostname> = hosts.iter().filter(|h| !kept(&h.name)).cloned().collect();
        // File reads, before the memory lock (a tick's every step takes it).
        let unusable: Vec<(String, String)> = added
            .iter()
            .filter_map(|host| {
                let err = self.store.load(&host.name).err()?;
                tracing::warn!(hostname = %host.name, %err, "certificate on disk is unusable");
                Some((host.name.clone(), err.to_string()))
            })
            .collect();
        {
            // The swap and the removed ones' clearing under the memory lock, the swap first: a
            // tick, hook or attempt under way keeps or files nothing for a removed name
            // (see `is_current`).
            let mut memory = self.memory();
            *self.outputs.lock().unwrap_or_else(PoisonError::into_inner) =
                Arc::new(outputs.clone());
            *self.hosts.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(hosts);
            for name in &removed {
                memory.pending.remove(name);
                memory.hooks.remove(name);
                memory.manual.remove(name);
                memory.last_error.remove(name);
                memory.ari.remove(name);
                memory.bad_on_disk.remove(name);
                for subject in [
                    Subject::new(MODULE, name.clone()),
                    expiry_subject(name),
                    deploy_subject(name),
                    hook_subject(name),
                ] {
                    self.faults.clear(&subject);
                }
            }
            memory.bad_on_disk.extend(unusable);
            // What an added certificate, or one whose deploy or hook changed (gained, or another
            // directory, owner, group or mode), is owed: as a restart would, its files are
            // written again and its hook runs unless it already succeeded for this pair.
            self.owe_outputs(&mut memory, &outputs, |name| {
                !kept(name) || outputs.get(name) != before.get(name)
            });
        }
        tracing::info!(
            added = added.len(),
            removed = removed.len(),
            "issuance: certificates replaced"
        );
        self.sync_faults_of(added.iter());
    }

    /// Writes the deploys still owed, then runs the hooks owed whose pacing allows: a failed
    /// deploy is one fault per certificate (kind `deploy`), tried again at the next tick; a failed
    /// hook is one fault (kind `on_renew`) until a run succeeds, its runs paced through
    /// holdfast-retry. Hooks run side by side, each bounded by its timeout.
    // r[impl issue.deploy]
    // r[impl issue.on-renew]
    async fn run_outputs(&self) {
        // One at a time; the owed work is read after the wait, so what the other run did is
        // not done again.
        let _one = self.outputs_running.lock().await;
        let now = self.clock.now();
        let owed: Vec<(String, Pending)> = self
            .memory()
            .pending
            .iter()
            .map(|(name, p)| (name.clone(), *p))
            .collect();
        // Declared before what borrows from them.
        let (outputs, all) = (self.outputs(), self.hosts());
        let mut hooks = Vec::new();
        for (name, mut pending) in owed {
            let (Some(out), Some(pair), Some(host)) = (
                outputs.get(&name),
                self.store.get(&name),
                all.iter().find(|h| h.name == name),
            ) else {
                self.memory().pending.remove(&name);
                continue;
            };
            if let (true, Some(target)) = (pending.deploy, &out.deploy) {
                // Files, fsyncs and chowns: blocking work, kept off the runtime's threads.
                let written = {
                    let (target, pair) = (target.clone(), pair.clone());
                    tokio::task::spawn_blocking(move || target.write(&pair)).await
                };
                let written = match written {
                    Ok(done) => done.map_err(|e| e.to_string()),
                    Err(e) => Err(format!("the deploy task ended: {e}")),
                };
                match written {
                    Ok(paths) => {
                        tracing::info!(certificate = %name, dir = %paths.dir.display(), "certificate deployed");
                        self.faults.clear(&deploy_subject(&name));
                        pending.deploy = false;
                    }
                    Err(err) => {
                        tracing::warn!(certificate = %name, %err, "certificate deploy failed");
                        let message = format!("deploy: {err}; tried again every tick");
                        let memory = self.memory();
                        if self.is_current(&name) {
                            self.faults
                                .file(deploy_subject(&name), "deploy", &message, 0, now);
                        }
                        drop(memory);
                        // The hook waits for the files it is told about.
                        continue;
                    }
                }
            }
            pending.deploy &= out.deploy.is_some();
            if pending.hook
                && let Some(hook) = &out.on_renew
            {
                let history = self.memory().hooks.get(&name).copied();
                let eligible = history.is_none_or(|h| {
                    holdfast_retry::decide(&self.hook_policy, &h, now).is_eligible()
                });
                if eligible {
                    let env = self.hook_env(host, out);
                    let chain = pair.chain_pem.clone();
                    hooks.push(async move { (name.clone(), chain, hook.run(&env).await) });
                }
            } else {
                pending.hook = false;
            }
            let mut memory = self.memory();
            if pending == Pending::default() || !self.is_current(&host.name) {
                memory.pending.remove(&host.name);
            } else {
                memory.pending.insert(host.name.clone(), pending);
            }
        }
        for (name, chain, result) in join_all(hooks).await {
            let end = self.clock.now();
            if result.is_ok() {
                self.record_hook_done(&name, &chain);
            }
            let mut memory = self.memory();
            if !self.is_current(&name) {
                // Removed while its hook ran: its state and faults went with it.
                continue;
            }
            match result {
                Ok(()) => {
                    memory.hooks.remove(&name);
                    if let Some(p) = memory.pending.get_mut(&name) {
                        p.hook = false;
                        if *p == Pending::default() {
                            memory.pending.remove(&name);
                        }
                    }
                    drop(memory);
                    tracing::info!(certificate = %name, "on_renew hook succeeded");
                    self.faults.clear(&hook_subject(&name));
                }
                Err(err) => {
                    let history = memory
                        .hooks
                        .entry(name.clone())
                        .or_insert_with(|| History::for_key(&name));
                    history.begin_attempt(&self.hook_policy, now);
                    let recorded = history.record_failure(&self.hook_policy, end, None);
                    let next = history.next_attempt_at(&self.hook_policy);
                    tracing::warn!(certificate = %name, %err, failures = recorded.failures, "on_renew hook failed");
                    let when = next
                        .and_then(|at| at.duration_since(end).ok())
                        .map(|left| format!("next run in {} s", left.as_secs()))
                        .unwrap_or_else(|| "next run at the next tick".to_owned());
                    let message = format!(
                        "on_renew failed {} time(s) (last: {err}); {when}",
                        recorded.failures
                    );
                    // Filed holding the memory lock: a removal waits for it, then clears it.
                    self.faults.file(
                        hook_subject(&name),
                        "on_renew",
                        &message,
                        recorded.failures,
                        end,
                    );
                    drop(memory);
                }
            }
        }
    }

    /// The record of the chain whose hook last succeeded for `name`, beside its store file.
    fn hook_record(&self, name: &str) -> std::path::PathBuf {
        let mut path = self.store.path_of(name);
        path.set_extension("on_renew");
        path
    }

    /// Whether `name`'s hook has succeeded for the pair with `chain`.
    fn hook_done_for(&self, name: &str, chain: &str) -> bool {
        std::fs::read_to_string(self.hook_record(name)).is_ok_and(|done| done == chain)
    }

    /// Records that `name`'s hook succeeded for `chain` (a failure to record is logged: the
    /// hook then runs once more after a restart, which is the safe side).
    // r[impl issue.on-renew]
    fn record_hook_done(&self, name: &str, chain: &str) {
        let path = self.hook_record(name);
        if let Err(err) = holdfast_keyfile::write_private(&path, chain.as_bytes()) {
            tracing::warn!(certificate = %name, %err, "could not record the on_renew success");
        }
    }

    /// What a certificate's hook is told: its names and its files (the deployed ones, else the
    /// store's one PEM file holding the key and the chain, as the key and the bundle only).
    // r[impl issue.on-renew]
    fn hook_env(&self, host: &Hostname, out: &Outputs) -> HookEnv {
        let files = match &out.deploy {
            Some(target) => {
                let paths = target.paths();
                HookFiles::Deployed {
                    cert: paths.cert,
                    chain: paths.chain,
                    fullchain: paths.fullchain,
                    key: paths.key,
                }
            }
            None => HookFiles::Bundle(self.store.path_of(&host.name)),
        };
        HookEnv {
            names: host.names(),
            files,
        }
    }

    /// Files this issuer's faults on `board` (the node's) instead of a private one.
    pub fn with_fault_board(mut self, board: FaultBoard) -> Self {
        self.faults = board;
        self.sync_faults();
        self
    }

    /// Says that `db` is the in-memory stand-in for an attempts table that could not be used
    /// (`why` names the file and the error): one fault (subject `attempts-table`, kind
    /// `history_unavailable`) stays on the board while this issuer runs.
    // r[impl issue.history.unavailable]
    pub fn with_history_unavailable(mut self, why: String) -> Self {
        self.faults.file(
            Subject::new(MODULE, STORAGE_SUBJECT),
            HISTORY_UNAVAILABLE,
            &why,
            0,
            self.clock.now(),
        );
        self.history_unavailable = Some(why);
        self
    }

    /// The board this issuer files on.
    pub fn fault_board(&self) -> &FaultBoard {
        &self.faults
    }

    /// One fault per blocked hostname (kind `blocked`) and per unusable certificate file (kind
    /// `bad_certificate`); cleared when the condition is gone.
    // r[impl issue.fault]
    pub fn sync_faults(&self) {
        self.sync_faults_of(self.hosts().iter());
    }

    /// [`Issuer::sync_faults`] for the hostnames whose state a tick may have changed: those it
    /// attempted and those with an open fault (whose message carries the time left).
    fn sync_faults_after(&self, attempted: &[String]) {
        let open: HashSet<String> = self
            .faults
            .of_module(MODULE)
            .into_iter()
            // An expiry fault is kept up to date with its certificate's own.
            .map(|f| match f.subject.name.strip_suffix("/expiry") {
                Some(name) => name.to_owned(),
                None => f.subject.name,
            })
            .chain(attempted.iter().cloned())
            .collect();
        self.sync_faults_of(self.hosts().iter().filter(|h| open.contains(&h.name)));
    }

    fn sync_faults_of<'a>(&self, hosts: impl Iterator<Item = &'a Hostname>) {
        let now = self.clock.now();
        for host in hosts {
            let subject = Subject::new(MODULE, host.name.clone());
            let history = match self.db().history(&host.name) {
                Ok(h) => h,
                Err(err) => {
                    tracing::warn!(hostname = %host.name, %err, "attempt history unreadable");
                    continue;
                }
            };
            let memory = self.memory();
            if !self.is_current(&host.name) {
                // Removed meanwhile: its faults went with it.
                continue;
            }
            // The fault stays open through the whole sustained failure, not only while the block
            // holds: between a block's expiry and the next attempt it does not flap.
            // As the decision sees it: a failure dated after now counts as now.
            let history = decision::as_of(&history, now);
            self.sync_expiry_fault(host, history.failures, &memory, now);
            if let Some(until) = decision::block_until(&self.policy, &history) {
                let last = memory
                    .last_error
                    .get(&host.name)
                    .cloned()
                    .unwrap_or_default();
                let when = match until.duration_since(now) {
                    Ok(left) => format!("blocked for {} s more", left.as_secs()),
                    Err(_) => "block expired, retrying".to_owned(),
                };
                let message = format!(
                    "{} consecutive failed attempts (last: {last}); {when}; {}",
                    history.failures,
                    decision::FORCE_RETRY_HINT
                );
                self.faults
                    .file(subject, "blocked", &message, history.failures, now);
            } else if let Some(err) = memory.bad_on_disk.get(&host.name) {
                self.faults.file(subject, "bad_certificate", err, 0, now);
            } else {
                self.faults.clear(&subject);
            }
        }
    }

    /// One fault per certificate within [`decision::EXPIRY_WARNING`] of its end (or past it)
    /// while its renewal fails; cleared otherwise.
    // r[impl issue.expiry.fault]
    fn sync_expiry_fault(&self, host: &Hostname, failures: u32, memory: &Memory, now: SystemTime) {
        let subject = expiry_subject(&host.name);
        let Some(pair) = self.store.stored(&host.name) else {
            self.faults.clear(&subject);
            return;
        };
        let not_after = pair.info.not_after;
        match decision::expiry_fault(not_after, failures, now) {
            Some(fault) => {
                let when = match fault {
                    decision::ExpiryFault::Expiring(left) => {
                        format!("expires in {} h", left.as_secs() / 3600)
                    }
                    decision::ExpiryFault::Expired(ago) => {
                        format!(
                            "expired {} h ago and is no longer served",
                            ago.as_secs() / 3600
                        )
                    }
                };
                let last = memory.last_error.get(&host.name).map_or("", String::as_str);
                let message = format!(
                    "certificate {when} (not after {}); renewal failing: {failures} failed \
                     attempts (last: {last})",
                    httpdate::fmt_http_date(not_after)
                );
                self.faults
                    .file(subject, fault.kind(), &message, failures, now);
            }
            None => {
                self.faults.clear(&subject);
            }
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn db(&self) -> std::sync::MutexGuard<'_, HistoryDb> {
        self.db.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The store other modules read.
    pub fn store(&self) -> &CertStore {
        &self.store
    }

    /// The pacing and block policy.
    pub fn policy(&self) -> &IssuePolicy {
        &self.policy
    }

    fn host(&self, name: &str) -> Result<Hostname, IssuerError> {
        self.hosts()
            .iter()
            .find(|h| h.name == name)
            .cloned()
            .ok_or_else(|| IssuerError::Unknown(name.to_owned()))
    }

    /// Asks for an attempt at the next tick even if the certificate is valid or the hostname is
    /// debounced. It does not pass a block.
    pub fn trigger(&self, hostname: &str) -> Result<(), IssuerError> {
        self.host(hostname)?;
        self.memory().manual.insert(hostname.to_owned());
        Ok(())
    }

    /// The operator's force-retry: clears the block and resets the streak, so the next tick
    /// attempts the hostname if its certificate is missing or due.
    // r[impl issue.block.force-retry]
    pub fn force_retry(&self, hostname: &str) -> Result<(), IssuerError> {
        self.host(hostname)?;
        self.db().reset(hostname)?;
        self.memory().last_error.remove(hostname);
        self.sync_faults();
        Ok(())
    }

    /// The decision for one hostname now, without dispatching anything.
    pub fn verdict(&self, hostname: &str) -> Result<Verdict, IssuerError> {
        let host = self.host(hostname)?;
        let now = self.clock.now();
        let manual = self.memory().manual.contains(hostname);
        self.decide(&host, Flags { manual }, now)
    }

    // r[impl issue.certificates]
    fn decide(
        &self,
        host: &Hostname,
        flags: Flags,
        now: SystemTime,
    ) -> Result<Verdict, IssuerError> {
        let history = self.db().history(&host.name)?;
        // A certificate that lacks one of the configured names (the list grew) is as good as
        // missing: it is issued again, for every name.
        // The stored pair even when expired: it is renewed as expired, not as missing.
        let current = self
            .store
            .stored(&host.name)
            .filter(|pair| pair.covers(&host.also));
        let current = current.map(|pair| {
            let mut info = pair.info;
            if let Some(AriChoice {
                drawn: Some((_, at)),
                ..
            }) = self.memory().ari.get(&host.name)
            {
                info.renew_at = *at;
            }
            info
        });
        Ok(decision::decide(
            &self.policy,
            current.as_ref(),
            &history,
            flags,
            now,
        ))
    }

    /// One pass over every hostname: the decision first, then a source only for those it says
    /// to issue (at most one attempt per hostname in flight), all awaited before returning.
    // r[impl issue.dispatch]
    // r[impl issue.storage-fault]
    pub async fn tick(&self) -> Result<TickReport, IssuerError> {
        let subject = Subject::new(MODULE, STORAGE_SUBJECT);
        let result = self.tick_inner().await;
        match &result {
            // The attempts table cannot be used (locked, corrupt, unwritable): no source was
            // called for the hostnames not yet decided, and the operator sees why.
            Err(err) => {
                self.faults
                    .file(subject, "storage", &err.to_string(), 0, self.clock.now());
            }
            // In memory since the start: the table works, but the file still does not.
            Ok(_) => match &self.history_unavailable {
                Some(why) => {
                    self.faults
                        .file(subject, HISTORY_UNAVAILABLE, why, 0, self.clock.now());
                }
                None => {
                    self.faults.clear(&subject);
                }
            },
        }
        result
    }

    async fn tick_inner(&self) -> Result<TickReport, IssuerError> {
        let now = self.clock.now();
        self.store.wake_on_expiry();
        self.refresh_renewal_windows(now).await;
        let mut report = TickReport::default();
        // One set for the whole tick (a reload may replace it meanwhile), declared before the
        // attempts that borrow from it.
        let hosts = self.hosts();
        let mut attempts = Vec::new();
        let mut stopped: Option<HistoryError> = None;
        for host in hosts.iter() {
            // Claim the hostname before deciding, in one step with the check: a tick running
            // beside this one (on another worker) neither dispatches it too nor acts on a
            // decision taken before this one's attempt recorded its outcome.
            if !self.memory().in_flight.insert(host.name.clone()) {
                continue;
            }
            let release = || {
                self.memory().in_flight.remove(&host.name);
            };
            let manual = self.memory().manual.contains(&host.name);
            let verdict = match self.decide(host, Flags { manual }, now) {
                Ok(v) => v,
                Err(IssuerError::History(err)) => {
                    release();
                    stopped = Some(err);
                    break;
                }
                Err(err) => {
                    release();
                    return Err(err);
                }
            };
            let Verdict::Issue(reason) = verdict else {
                release();
                continue;
            };
            let id = match self
                .db()
                .begin(&self.policy.retry, &host.name, host.source.name(), now)
            {
                Ok(id) => id,
                // Dispatch nothing more, but let the attempts already begun finish and record.
                Err(err) => {
                    release();
                    stopped = Some(err);
                    break;
                }
            };
            self.memory().manual.remove(&host.name);
            report.dispatched.push((host.name.clone(), reason));
            attempts.push(self.attempt(host, id));
        }
        for result in join_all(attempts).await {
            let (host, outcome) = match result {
                Ok(r) => r,
                Err(IssuerError::History(err)) => {
                    stopped.get_or_insert(err);
                    continue;
                }
                Err(err) => return Err(err),
            };
            match outcome {
                Ok(()) => report.issued.push(host),
                Err((err, newly_blocked)) => {
                    if newly_blocked {
                        report.blocked.push(host.clone());
                    }
                    report.failed.push((host, err));
                }
            }
        }
        self.run_outputs().await;
        let attempted: Vec<String> = report.dispatched.iter().map(|(h, _)| h.clone()).collect();
        self.sync_faults_after(&attempted);
        match stopped {
            Some(err) => Err(err.into()),
            None => Ok(report),
        }
    }

    #[allow(clippy::type_complexity)]
    // r[impl issue.certificates]
    async fn attempt(
        &self,
        host: &Hostname,
        id: i64,
    ) -> Result<(String, Result<(), (SourceError, bool)>), IssuerError> {
        // One attempt for every name of the certificate.
        let names = host.names();
        let obtained =
            match tokio::time::timeout(self.attempt_timeout, host.source.obtain(&names)).await {
                Ok(r) => r,
                Err(_) => Err(SourceError::new(
                    ErrorClass::Timeout,
                    format!("no certificate within {:?}", self.attempt_timeout),
                )),
            };
        let end = self.clock.now();
        // The hostname is freed once its outcome is recorded (so no decision sees it free with
        // the outcome missing), and also when recording fails: a failed write leaves an open row
        // (settled as interrupted later), never a hostname stuck "in flight".
        let _free = InFlight {
            memory: &self.memory,
            hostname: &host.name,
        };
        let stored = obtained.and_then(|pair| {
            self.store
                .replace(&host.name, pair, end)
                .map_err(|e| SourceError::new(ErrorClass::Storage, e.to_string()))
        });
        let result = match stored {
            Ok(_) => {
                self.db().finish(
                    &self.policy.retry,
                    id,
                    &host.name,
                    end,
                    Outcome::Success,
                    None,
                )?;
                let mut memory = self.memory();
                memory.last_error.remove(&host.name);
                memory.ari.remove(&host.name);
                memory.bad_on_disk.remove(&host.name);
                if let Some(out) = self.outputs().get(&host.name) {
                    let pending = memory.pending.entry(host.name.clone()).or_default();
                    pending.deploy |= out.deploy.is_some();
                    pending.hook |= out.on_renew.is_some();
                }
                *memory
                    .attempts
                    .entry((host.source.name().to_owned(), "success"))
                    .or_default() += 1;
                tracing::info!(hostname = %host.name, source = host.source.name(), "certificate issued");
                Ok(())
            }
            Err(err) => {
                let failure = FailureRecord {
                    class: err.class.as_str(),
                    message: &err.message,
                    retry_after: err.retry_after,
                };
                let before = self.db().history(&host.name)?.failures;
                let after = self.db().finish(
                    &self.policy.retry,
                    id,
                    &host.name,
                    end,
                    Outcome::Failure,
                    Some(&failure),
                )?;
                let newly_blocked =
                    before < self.policy.block_after && after.failures >= self.policy.block_after;
                tracing::warn!(hostname = %host.name, source = host.source.name(),
                    failures = after.failures, class = err.class.as_str(), error = %err.message,
                    "certificate attempt failed");
                let mut memory = self.memory();
                if self.is_current(&host.name) {
                    memory.last_error.insert(
                        host.name.clone(),
                        format!("{}: {}", err.class.as_str(), err.message),
                    );
                }
                *memory
                    .attempts
                    .entry((host.source.name().to_owned(), "failure"))
                    .or_default() += 1;
                drop(memory);
                Err((err, newly_blocked))
            }
        };
        Ok((host.name.clone(), result))
    }

    /// Asks each source that offers ARI for its window, when due, and picks a renewal time in it
    /// ([`AriChoice::answered`]). A request that does not answer in time keeps what was drawn
    /// before (else the two-thirds fallback), and the whole pass cannot hold up the tick.
    // r[impl issue.bounds]
    async fn refresh_renewal_windows(&self, now: SystemTime) {
        // One bound for the whole pass, not one per hostname: a stalled server must not hold a
        // tick for hostnames × timeout. Hostnames not reached stay due for the next tick.
        let bound = self.attempt_timeout.min(ARI_TIMEOUT);
        let deadline = tokio::time::Instant::now() + bound;
        for host in self.hosts().iter() {
            let Some(pair) = self.store.stored(&host.name) else {
                continue;
            };
            let previous = self.memory().ari.get(&host.name).copied();
            if !AriChoice::due(previous, now) {
                continue;
            }
            let kept = previous.and_then(|p| p.drawn);
            let Ok(window) =
                tokio::time::timeout_at(deadline, host.source.renewal_window(&pair)).await
            else {
                tracing::warn!(hostname = %host.name, timeout = ?bound,
                    "renewal information did not answer in time; asking again in an hour");
                let entry = AriChoice::unanswered(kept, now);
                self.keep_ari(&host.name, entry);
                break;
            };
            let entry = AriChoice::answered(kept, window, now, rand::random::<f64>);
            self.keep_ari(&host.name, entry);
        }
    }

    /// Keeps `name`'s renewal window, unless it was removed while it was asked for.
    fn keep_ari(&self, name: &str, entry: AriChoice) {
        let mut memory = self.memory();
        if self.is_current(name) {
            memory.ari.insert(name.to_owned(), entry);
        }
    }

    /// Every hostname's state, for `holdfast certs`.
    pub fn statuses(&self) -> Result<Vec<HostStatus>, IssuerError> {
        let now = self.clock.now();
        let mut out = Vec::with_capacity(self.hosts().len());
        for host in self.hosts().iter() {
            let (manual, in_flight, last_error) = {
                let m = self.memory();
                (
                    m.manual.contains(&host.name),
                    m.in_flight.contains(&host.name),
                    m.last_error
                        .get(&host.name)
                        .or_else(|| m.bad_on_disk.get(&host.name))
                        .cloned(),
                )
            };
            let verdict = self.decide(host, Flags { manual }, now)?;
            let failures = self.db().history(&host.name)?.failures;
            let (state, next, clear) = match verdict {
                _ if in_flight => ("issuing", None, None),
                Verdict::Valid { renew_at } => ("valid", Some(renew_at), None),
                Verdict::Issue(_) => ("due", Some(now), None),
                Verdict::Debounced { until, .. } => ("debounced", Some(until), None),
                Verdict::Blocked { until, clear, .. } => ("blocked", Some(until), Some(clear)),
            };
            out.push(HostStatus {
                hostname: host.name.clone(),
                also: host.also.clone(),
                source: host.source.name().to_owned(),
                state,
                not_after: self.store.stored(&host.name).map(|p| p.info.not_after),
                next,
                failures,
                last_error,
                clear,
            });
        }
        Ok(out)
    }

    /// Hostnames blocked now (one fault each on the node's board).
    pub fn blocked(&self) -> Result<Vec<BlockedHost>, IssuerError> {
        let now = self.clock.now();
        let mut out = Vec::new();
        for host in self.hosts().iter() {
            if let Verdict::Blocked { until, reason, .. } =
                self.decide(host, Flags::default(), now)?
            {
                let decision::BlockReason::SustainedFailure { failures } = reason;
                out.push(BlockedHost {
                    hostname: host.name.clone(),
                    failures,
                    until,
                    last_error: self
                        .memory()
                        .last_error
                        .get(&host.name)
                        .cloned()
                        .unwrap_or_default(),
                });
            }
        }
        Ok(out)
    }

    /// Settles attempts left open (cancelled by a stop) as interrupted failures now.
    pub fn settle_interrupted(&self) -> Result<Vec<String>, IssuerError> {
        let settled = self
            .db()
            .settle_open(&self.policy.retry, self.clock.now())?;
        let mut memory = self.memory();
        for host in &settled {
            memory.in_flight.remove(host);
        }
        Ok(settled)
    }

    /// The attempts table (for tests and the admin API).
    pub fn with_history<T>(&self, f: impl FnOnce(&HistoryDb) -> T) -> T {
        f(&self.db())
    }

    /// Attempts by source and outcome, blocked hostnames, days to expiry.
    // r[impl issue.metrics]
    pub fn metrics(&self) -> Result<Metrics, IssuerError> {
        let mut attempts: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for ((source, outcome), n) in &self.memory().attempts {
            attempts
                .entry(source.clone())
                .or_default()
                .insert((*outcome).to_owned(), *n);
        }
        Ok(Metrics {
            attempts,
            blocked: self.blocked()?.len(),
            days_to_expiry: self.days_to_expiry(),
        })
    }

    /// Days until each stored certificate expires (a metric), negative once it has: an alert
    /// can tell an expired certificate from one about to expire.
    // r[impl node.issuance.metrics+3]
    pub fn days_to_expiry(&self) -> BTreeMap<String, f64> {
        let now = self.clock.now();
        self.store
            .stored_snapshot()
            .iter()
            .map(|(h, p)| {
                let secs = match p.info.not_after.duration_since(now) {
                    Ok(left) => left.as_secs_f64(),
                    Err(past) => -past.duration().as_secs_f64(),
                };
                (h.clone(), secs / 86400.0)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    const NS: Duration = Duration::from_nanos(1);

    fn window(start: u64, end: u64, recheck: u64) -> RenewalWindow {
        RenewalWindow {
            start: t(start),
            end: t(end),
            recheck_after: Duration::from_secs(recheck),
        }
    }

    // r[verify issue.renewal.ari+2]
    #[test]
    fn a_window_is_asked_again_from_its_recheck_time_on() {
        assert!(AriChoice::due(None, t(0)), "never asked");
        let asked = AriChoice::answered(None, Some(window(1000, 2000, 600)), t(0), || 0.5);
        assert_eq!(asked.recheck, t(600));
        assert!(!AriChoice::due(Some(asked), t(0)));
        assert!(!AriChoice::due(Some(asked), t(600) - NS));
        assert!(AriChoice::due(Some(asked), t(600)));
        assert!(AriChoice::due(Some(asked), t(601)));
        // A Retry-After under a minute is raised to one.
        let soon = AriChoice::answered(None, Some(window(1000, 2000, 1)), t(0), || 0.5);
        assert_eq!(soon.recheck, t(60));
        // A source that offers no window is asked again a day later.
        let none = AriChoice::answered(None, None, t(0), || 0.5);
        assert_eq!(none.recheck, t(86400));
        assert!(none.drawn.is_none(), "the fallback holds");
    }

    // r[verify issue.acme.retry-after]
    #[test]
    fn a_recheck_never_lies_more_than_a_day_ahead() {
        for (asked, expected) in [
            (Duration::MAX, RETRY_AFTER_MAX),
            (Duration::from_secs(u64::MAX), RETRY_AFTER_MAX),
            (RETRY_AFTER_MAX + NS, RETRY_AFTER_MAX),
            (RETRY_AFTER_MAX, RETRY_AFTER_MAX),
            (RETRY_AFTER_MAX - NS, RETRY_AFTER_MAX - NS),
            (Duration::from_secs(600), Duration::from_secs(600)),
            (Duration::ZERO, ARI_MIN_RECHECK),
        ] {
            assert_eq!(recheck_at(t(0), asked), t(0) + expected, "{asked:?}");
            let w = RenewalWindow {
                recheck_after: asked,
                ..window(1000, 2000, 0)
            };
            let choice = AriChoice::answered(None, Some(w), t(0), || 0.5);
            assert_eq!(choice.recheck, t(0) + expected, "{asked:?}");
        }
    }

    // r[verify issue.renewal.ari+2]
    #[test]
    fn the_time_is_drawn_once_per_window_and_anew_for_a_changed_one() {
        let w = window(1000, 2000, 60);
        let first = AriChoice::answered(None, Some(w), t(0), || 0.5);
        assert_eq!(first.drawn, Some(((t(1000), t(2000)), t(1500))));
        // The same window again: the time stays, whatever a new draw would say.
        let again = AriChoice::answered(first.drawn, Some(w), t(60), || 0.9);
        assert_eq!(again.drawn, first.drawn);
        assert_eq!(again.recheck, t(120));
        // A changed window draws anew, inside it.
        let moved = AriChoice::answered(first.drawn, Some(window(3000, 5000, 60)), t(60), || 0.25);
        assert_eq!(moved.drawn, Some(((t(3000), t(5000)), t(3500))));
        // No window this time: what was drawn before stays.
        let gone = AriChoice::answered(first.drawn, None, t(60), || 0.9);
        assert_eq!(gone.drawn, first.drawn);
    }
}
