//! systemd's notify protocol (`Type=notify`): readiness, stopping, status lines and the watchdog.
//!
//! [`Core`] decides what to send when, from a [`View`] of the node and the supervisors' heartbeats,
//! with the time passed in (no I/O, no clock of its own); [`spawn`] is the thin shell that feeds it
//! from the node and hands its messages to the `sd-notify` crate on a thread of its own.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use holdfast_lifecycle::Health;
use tokio::time::Instant;

use crate::module::StopGroup;
use crate::state::{NodeState, Phase, SupervisorState};

/// One message to the service manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// `READY=1`.
    Ready,
    /// `STOPPING=1`.
    Stopping,
    /// `STATUS=…`.
    Status(String),
    /// `WATCHDOG=1`.
    Watchdog,
    /// `RELOADING=1` (a reload begins; `READY=1` ends it).
    Reloading,
    /// `MONOTONIC_USEC=…`: the monotonic clock's time, sent with `RELOADING=1`.
    MonotonicUsec(i128),
}

impl Message {
    /// The `sd-notify` state that sends it.
    pub fn state(&self) -> sd_notify::NotifyState<'_> {
        match self {
            Message::Ready => sd_notify::NotifyState::Ready,
            Message::Stopping => sd_notify::NotifyState::Stopping,
            Message::Status(text) => sd_notify::NotifyState::Status(text),
            Message::Watchdog => sd_notify::NotifyState::Watchdog,
            Message::Reloading => sd_notify::NotifyState::Reloading,
            Message::MonotonicUsec(usec) => sd_notify::NotifyState::MonotonicUsec(*usec),
        }
    }

    /// The protocol's `KEY=VALUE` form.
    pub fn line(&self) -> String {
        self.state().to_string()
    }
}

/// One module, as the status line needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleView {
    /// Its name.
    pub name: String,
    /// Its stop group (the order the stop goes through them).
    pub group: StopGroup,
    /// Its first start has been made.
    pub started: bool,
    /// Its supervisor has been stopped.
    pub stopped: bool,
    /// It reports itself degraded.
    pub degraded: bool,
}

/// What the node looks like at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// The node's phase.
    pub phase: Phase,
    /// Every module.
    pub modules: Vec<ModuleView>,
    /// Open faults.
    pub faults: usize,
    /// Clients the gateway still holds, when a gateway runs.
    pub gateway_clients: Option<usize>,
}

impl View {
    /// Reads the view off the node.
    pub fn of(node: &NodeState) -> View {
        let modules = node
            .modules()
            .into_iter()
            .map(|m| ModuleView {
                started: m.supervisor != SupervisorState::Pending,
                stopped: m.supervisor == SupervisorState::Stopped,
                degraded: matches!(m.health, Health::Degraded(_)),
                name: m.name,
                group: m.group,
            })
            .collect();
        View {
            phase: node.phase(),
            modules,
            faults: node.faults.len(),
            gateway_clients: node
                .gateway
                .current()
                .ok()
                .map(|g| g.authenticated() + g.unauthenticated()),
        }
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

// r[impl node.systemd.status]
/// The `STATUS=` text for `view`.
pub fn status_text(view: &View) -> String {
    let total = view.modules.len();
    match view.phase {
        Phase::Starting => {
            let started = view.modules.iter().filter(|m| m.started).count();
            format!("starting: {started} of {total} modules started")
        }
        Phase::Running => {
            let degraded: Vec<&str> = view
                .modules
                .iter()
                .filter(|m| m.degraded)
                .map(|m| m.name.as_str())
                .collect();
            let mut text = format!(
                "ready: {}, {}",
                plural(total, "module", "modules"),
                plural(view.faults, "fault", "faults")
            );
            if !degraded.is_empty() {
                text.push_str(&format!(" ({} degraded)", degraded.join(", ")));
            }
            text
        }
        Phase::Draining => {
            let mut still: Vec<&ModuleView> = view.modules.iter().filter(|m| !m.stopped).collect();
            still.sort_by_key(|m| StopGroup::ORDER.iter().position(|g| *g == m.group));
            match (still.first(), view.gateway_clients) {
                (Some(first), Some(clients)) if first.group == StopGroup::Gateway => format!(
                    "stopping: draining gateway ({})",
                    plural(clients, "client", "clients")
                ),
                (Some(_), _) => {
                    let names: Vec<&str> = still.iter().map(|m| m.name.as_str()).collect();
                    format!("stopping: {}", names.join(", "))
                }
                (None, _) => "stopping: every module stopped".to_owned(),
            }
        }
    }
}

/// The supervisors' loops' last turns, shared by the supervisors (who beat) and the notifier (who
/// reads). Off unless the watchdog is on. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    inner: Option<Arc<HeartbeatInner>>,
}

#[derive(Debug)]
struct HeartbeatInner {
    every: Duration,
    beats: Mutex<BTreeMap<String, Instant>>,
}

impl Heartbeat {
    /// No heartbeat: beating does nothing and [`Heartbeat::tick`] never resolves.
    pub fn off() -> Self {
        Heartbeat::default()
    }

    /// Loops beat at least every `every`.
    pub fn every(every: Duration) -> Self {
        Heartbeat {
            inner: Some(Arc::new(HeartbeatInner {
                every,
                beats: Mutex::default(),
            })),
        }
    }

    /// `name`'s loop took a turn now (registering it on its first beat).
    pub fn beat(&self, name: &str) {
        if let Some(inner) = &self.inner {
            let mut beats = inner.beats.lock().unwrap_or_else(PoisonError::into_inner);
            beats.insert(name.to_owned(), Instant::now());
        }
    }

    /// `name`'s loop no longer counts (it was told to stop).
    pub fn leave(&self, name: &str) {
        if let Some(inner) = &self.inner {
            let mut beats = inner.beats.lock().unwrap_or_else(PoisonError::into_inner);
            beats.remove(name);
        }
    }

    /// Resolves when the loop should beat again (never, when off).
    pub async fn tick(&self) {
        match &self.inner {
            Some(inner) => tokio::time::sleep(inner.every).await,
            None => std::future::pending().await,
        }
    }

    /// Every loop's last turn.
    pub fn beats(&self) -> Vec<(String, Instant)> {
        match &self.inner {
            Some(inner) => inner
                .beats
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|(name, at)| (name.clone(), *at))
                .collect(),
            None => Vec::new(),
        }
    }
}

/// What has been sent so far, and the decisions of what to send next.
#[derive(Debug)]
pub struct Core {
    watchdog: Option<Duration>,
    ready_sent: bool,
    stopping_sent: bool,
    status: Option<String>,
    last_ping: Option<Instant>,
}

impl Core {
    /// A core for a service manager whose watchdog interval is `watchdog` (`WATCHDOG_USEC`), if any.
    pub fn new(watchdog: Option<Duration>) -> Self {
        Core {
            watchdog,
            ready_sent: false,
            stopping_sent: false,
            status: None,
            last_ping: None,
        }
    }

    /// How often loops must beat for the watchdog: a quarter of its interval.
    pub fn beat_every(&self) -> Option<Duration> {
        self.watchdog.map(|w| w / 4)
    }

    // r[impl node.systemd.notify]
    // r[impl node.systemd.watchdog]
    /// What to send at `now`, given the node's `view` and the loops' `beats`.
    pub fn step(&mut self, now: Instant, view: &View, beats: &[(String, Instant)]) -> Vec<Message> {
        let mut out = Vec::new();
        let status = status_text(view);
        if self.status.as_ref() != Some(&status) {
            self.status = Some(status.clone());
            out.push(Message::Status(status));
        }
        // A stop that began before the first start finished still reports ready first: systemd
        // expects READY=1 before STOPPING=1 from a Type=notify service.
        if !self.ready_sent && view.phase != Phase::Starting {
            self.ready_sent = true;
            out.push(Message::Ready);
        }
        if !self.stopping_sent && view.phase == Phase::Draining {
            self.stopping_sent = true;
            out.push(Message::Stopping);
        }
        if self.watchdog_due(now, beats) {
            self.last_ping = Some(now);
            out.push(Message::Watchdog);
        }
        out
    }

    /// A ping is due every half interval, and only while every loop has beaten within the last
    /// half interval.
    fn watchdog_due(&self, now: Instant, beats: &[(String, Instant)]) -> bool {
        let Some(interval) = self.watchdog else {
            return false;
        };
        let half = interval / 2;
        if self
            .last_ping
            .is_some_and(|at| now.saturating_duration_since(at) < half)
        {
            return false;
        }
        beats
            .iter()
            .all(|(_, at)| now.saturating_duration_since(*at) <= half)
    }
}

/// The running notifier: [`Notifier::poke`] makes it look at the node at once (a phase change);
/// [`Notifier::finish`] sends what is left before the node exits.
#[derive(Debug, Clone)]
pub struct Notifier {
    /// Messages decided outside the core (a reload's), sent in order with the core's.
    tx: Arc<Mutex<Option<std::sync::mpsc::Sender<Vec<Message>>>>>,
    poke: Arc<tokio::sync::Notify>,
    finish: Arc<tokio::sync::Notify>,
    parts: Arc<Mutex<Option<Parts>>>,
}

/// What [`Notifier::finish`] waits for: the loop that decides, and the thread that sends.
#[derive(Debug)]
struct Parts {
    decider: tokio::task::JoinHandle<()>,
    sender: std::thread::JoinHandle<()>,
}

impl Notifier {
    /// Look at the node now rather than at the next poll.
    pub fn poke(&self) {
        self.poke.notify_one();
    }

    // r[impl node.systemd.notify]
    // r[impl node.systemd.reload]
    /// Sends `messages` now, after whatever was decided before them.
    pub fn send(&self, messages: Vec<Message>) {
        if let Some(tx) = self
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            let _ = tx.send(messages);
        }
    }

    // r[impl node.systemd.reload]
    /// Tells the service manager a reload begins: `RELOADING=1` with the monotonic time.
    pub fn reloading(&self) {
        let mut messages = vec![Message::Reloading];
        if let Ok(sd_notify::NotifyState::MonotonicUsec(usec)) =
            sd_notify::NotifyState::monotonic_usec_now()
        {
            messages.push(Message::MonotonicUsec(usec));
        }
        self.send(messages);
    }

    /// Takes a last look at the node, then waits (at most `within`: a service manager that does
    /// not read must not hold the exit) until every message decided so far has been sent.
    pub async fn finish(&self, within: Duration) {
        self.finish.notify_one();
        // The sending thread ends once every sender is gone: this one first.
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let parts = self
            .parts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(Parts { decider, sender }) = parts else {
            return;
        };
        let flushed = async {
            // The decider's end drops the channel, which ends the sender once it has sent all.
            let _ = decider.await;
            let _ = tokio::task::spawn_blocking(move || sender.join()).await;
        };
        if tokio::time::timeout(within, flushed).await.is_err() {
            tracing::warn!(
                waited = ?within,
                "the service manager did not take the last notifications in time"
            );
        }
    }
}

// i[impl node.systemd.unit]
/// The systemd unit the node ships (`dist/holdfast.service`): `Type=notify` for this module's
/// messages, `WatchdogSec` for its pings, `ExecReload` for SIGHUP, and the hardening.
pub const UNIT: &str = include_str!("../../../dist/holdfast.service");

/// How often the notifier looks at the node when nothing pokes it.
const POLL: Duration = Duration::from_millis(250);

/// The watchdog interval the service manager asks for, if any (`WATCHDOG_USEC`, for this process).
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().filter(|d| !d.is_zero())
}

/// Whether a service manager listens (`NOTIFY_SOCKET` is set).
pub fn enabled() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some()
}

/// Starts notifying the service manager about `node`, with the loops' `heartbeat` for the
/// watchdog; `None` when no service manager listens.
pub fn spawn(
    node: NodeState,
    heartbeat: Heartbeat,
    watchdog: Option<Duration>,
) -> Option<Notifier> {
    if !enabled() {
        return None;
    }
    let (tx, rx) = std::sync::mpsc::channel::<Vec<Message>>();
    // Sending is a blocking datagram write: on a thread of its own, in order.
    let sender = std::thread::Builder::new()
        .name("holdfast-notify".into())
        .spawn(move || {
            let mut warned = false;
            while let Ok(messages) = rx.recv() {
                let states: Vec<sd_notify::NotifyState<'_>> =
                    messages.iter().map(Message::state).collect();
                if let Err(err) = sd_notify::notify(&states) {
                    if !warned {
                        tracing::warn!(error = %err, "cannot notify the service manager (NOTIFY_SOCKET)");
                        warned = true;
                    }
                }
            }
        });
    let sender = match sender {
        Ok(sender) => sender,
        Err(err) => {
            tracing::warn!(error = %err, "cannot start the service manager notifier");
            return None;
        }
    };
    let poke = Arc::new(tokio::sync::Notify::new());
    let finish = Arc::new(tokio::sync::Notify::new());
    let outside = tx.clone();
    let mut core = Core::new(watchdog);
    let poll = core.beat_every().map_or(POLL, |b| b.min(POLL));
    let decider = tokio::spawn({
        let poke = poke.clone();
        let finish = finish.clone();
        async move {
            let mut last = false;
            loop {
                let messages = core.step(Instant::now(), &View::of(&node), &heartbeat.beats());
                if !messages.is_empty() && tx.send(messages).is_err() {
                    return;
                }
                if last {
                    return;
                }
                tokio::select! {
                    () = poke.notified() => {}
                    () = finish.notified() => last = true,
                    () = tokio::time::sleep(poll) => {}
                }
            }
        }
    });
    Some(Notifier {
        tx: Arc::new(Mutex::new(Some(outside))),
        poke,
        finish,
        parts: Arc::new(Mutex::new(Some(Parts { decider, sender }))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(name: &str, group: StopGroup) -> ModuleView {
        ModuleView {
            name: name.to_owned(),
            group,
            started: true,
            stopped: false,
            degraded: false,
        }
    }

    fn view(phase: Phase) -> View {
        View {
            phase,
            modules: vec![
                module("gateway", StopGroup::Gateway),
                module("forward", StopGroup::Forward),
                module("pull", StopGroup::Pull),
            ],
            faults: 0,
            gateway_clients: Some(312),
        }
    }

    // r[verify node.systemd.status]
    #[test]
    fn status_lines_say_the_phase_and_what_an_operator_needs() {
        let mut starting = view(Phase::Starting);
        starting.modules[2].started = false;
        assert_eq!(status_text(&starting), "starting: 2 of 3 modules started");
        let mut ready = view(Phase::Running);
        assert_eq!(status_text(&ready), "ready: 3 modules, 0 faults");
        ready.modules[2].degraded = true;
        ready.faults = 1;
        assert_eq!(
            status_text(&ready),
            "ready: 3 modules, 1 fault (pull degraded)"
        );
        let mut stopping = view(Phase::Draining);
        assert_eq!(
            status_text(&stopping),
            "stopping: draining gateway (312 clients)"
        );
        stopping.modules[0].stopped = true;
        assert_eq!(status_text(&stopping), "stopping: forward, pull");
        stopping.modules[1].stopped = true;
        stopping.modules[2].stopped = true;
        assert_eq!(status_text(&stopping), "stopping: every module stopped");
    }

    // r[verify node.systemd.notify]
    #[test]
    fn ready_once_after_the_first_starts_then_stopping_once() {
        let t0 = Instant::now();
        let mut core = Core::new(None);
        let starting = core.step(t0, &view(Phase::Starting), &[]);
        assert_eq!(
            starting,
            [Message::Status("starting: 3 of 3 modules started".into())]
        );
        assert!(core.step(t0, &view(Phase::Starting), &[]).is_empty());
        let ready = core.step(t0, &view(Phase::Running), &[]);
        assert_eq!(
            ready,
            [
                Message::Status("ready: 3 modules, 0 faults".into()),
                Message::Ready
            ]
        );
        assert!(core.step(t0, &view(Phase::Running), &[]).is_empty());
        let stopping = core.step(t0, &view(Phase::Draining), &[]);
        assert_eq!(
            stopping,
            [
                Message::Status("stopping: draining gateway (312 clients)".into()),
                Message::Stopping
            ]
        );
        assert!(core.step(t0, &view(Phase::Draining), &[]).is_empty());

        // A stop before readiness: READY=1 still comes first.
        let mut early = Core::new(None);
        early.step(t0, &view(Phase::Starting), &[]);
        let out = early.step(t0, &view(Phase::Draining), &[]);
        assert_eq!(out[1..], [Message::Ready, Message::Stopping]);
    }

    fn pings(out: &[Message]) -> usize {
        out.iter().filter(|m| **m == Message::Watchdog).count()
    }

    // r[verify node.systemd.watchdog]
    #[test]
    fn the_watchdog_pings_every_half_interval_while_every_loop_beats() {
        let t0 = Instant::now();
        let interval = Duration::from_secs(4);
        let mut core = Core::new(Some(interval));
        assert_eq!(core.beat_every(), Some(Duration::from_secs(1)));
        let running = view(Phase::Running);
        // Loops that beat every second: a ping at once, then every 2 s, never more often.
        let mut sent = Vec::new();
        for ms in (0..=10_000u64).step_by(250) {
            let now = t0 + Duration::from_millis(ms);
            let last_beat = t0 + Duration::from_millis(ms / 1000 * 1000);
            let beats = [
                ("pull".to_owned(), last_beat),
                ("forward".to_owned(), last_beat),
            ];
            if pings(&core.step(now, &running, &beats)) == 1 {
                sent.push(ms);
            }
        }
        assert_eq!(sent, [0, 2000, 4000, 6000, 8000, 10_000]);
        // Without a watchdog interval, no pings at all.
        let mut off = Core::new(None);
        assert_eq!(pings(&off.step(t0, &running, &[])), 0);
    }

    // r[verify node.systemd.watchdog]
    #[test]
    fn a_wedged_supervisor_loop_stops_the_pings() {
        let t0 = Instant::now();
        let interval = Duration::from_secs(4);
        let mut core = Core::new(Some(interval));
        let running = view(Phase::Running);
        let mut sent = Vec::new();
        for ms in (0..=10_000u64).step_by(250) {
            let now = t0 + Duration::from_millis(ms);
            let beating = t0 + Duration::from_millis(ms / 1000 * 1000);
            // `forward`'s loop takes its last turn at 3 s and never another.
            let wedged = t0 + Duration::from_millis(ms.min(3000) / 1000 * 1000);
            let beats = [("pull".to_owned(), beating), ("forward".to_owned(), wedged)];
            if pings(&core.step(now, &running, &beats)) == 1 {
                sent.push(ms);
            }
        }
        // Pings until 2 s after its last turn, none after: systemd's 4 s watchdog then fires.
        assert_eq!(sent, [0, 2000, 4000]);
        // A loop that left (told to stop) no longer holds the pings back.
        let now = t0 + Duration::from_secs(11);
        let out = core.step(now, &running, &[("pull".to_owned(), now)]);
        assert_eq!(pings(&out), 1);
    }
}
