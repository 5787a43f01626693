//! The drain: how a replica leaves without a hole, in order, inside one cap.
//!
//! 1. Stop being ready, refuse new upgrades (503 with Retry-After), deregister.
//! 2. Flush what each connection has queued, then send it the close frame.
//! 3. Wait for close handshakes; force-close the rest.
//! 4. Clear the routing entries this replica owns, by compare-and-delete.
//!
//! Each step ends by its cumulative share of the cap, so a step that finishes early passes its
//! time on, and no client (answering or not) and no backend (up or not) can push the drain past
//! its cap.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holdfast_lifecycle::{StopError, StopReason, Stopper, stopper_fn};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::cluster::CasOutcome;
use crate::config::{CloseChoice, DrainConfig};
use crate::protocol::close;
use crate::registry::ConnId;
use crate::server::{Gateway, Inner};
use crate::sync::lock;

/// How a drain closes connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DrainSignal {
    pub(crate) code: CloseCode,
}

/// What the drain keeps between its start and its report, and what the connections tell it.
pub(crate) struct DrainState {
    /// Tells every connection to flush and close (`None` until the drain's second step).
    signal: watch::Sender<Option<DrainSignal>>,
    /// The connections the close frame was sent to (kept after they end, for step 2's end and
    /// the report).
    closed: Mutex<HashSet<ConnId>>,
    /// The users this replica routed to itself and has not released: step 4 clears them.
    owned_routes: Mutex<HashSet<String>>,
    /// Held for the whole drain, so a second call waits for the first and returns its report.
    report: tokio::sync::Mutex<Option<DrainReport>>,
}

impl DrainState {
    pub(crate) fn new() -> Self {
        Self {
            signal: watch::channel(None).0,
            closed: Mutex::new(HashSet::new()),
            owned_routes: Mutex::new(HashSet::new()),
            report: tokio::sync::Mutex::new(None),
        }
    }

    /// The drain's signal, for a connection to wait on.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<DrainSignal>> {
        self.signal.subscribe()
    }

    /// A connection was sent the close frame (recorded before the wake-up, so the drain sees
    /// it when it looks).
    pub(crate) fn close_sent(&self, id: ConnId) {
        lock(&self.closed).insert(id);
    }

    /// `user` is routed here: the drain clears the route unless it is released first. Owned
    /// even when the add failed: the routing map keeps the user and writes it at its next
    /// refresh.
    pub(crate) fn own_route(&self, user: &str) {
        lock(&self.owned_routes).insert(user.to_owned());
    }

    /// `user`'s route here was deleted (or found gone): nothing left for the drain.
    pub(crate) fn route_released(&self, user: &str) {
        lock(&self.owned_routes).remove(user);
    }

    fn owned_routes(&self) -> Vec<String> {
        lock(&self.owned_routes).iter().cloned().collect()
    }

    fn begin_closing(&self, code: CloseCode) {
        self.signal.send_replace(Some(DrainSignal { code }));
    }

    /// Whether every connection of `original` was sent its frame or is no longer `open`.
    fn closes_done(&self, original: &HashSet<ConnId>, open: impl Fn(ConnId) -> bool) -> bool {
        closes_done(original, &lock(&self.closed), open)
    }

    /// How many connections of `original` were sent the close frame.
    fn frames_sent(&self, original: &HashSet<ConnId>) -> u64 {
        let sent = lock(&self.closed);
        original.iter().filter(|id| sent.contains(id)).count() as u64
    }
}

/// The drain's steps, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Readiness off, upgrades refused, replica deregistered.
    StopAccepting,
    /// Queued messages flushed and close frames sent.
    Close,
    /// Close handshakes awaited, the rest force-closed.
    Handshake,
    /// Owned routing entries compare-and-deleted.
    Routing,
}

/// How one step went.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StepReport {
    /// The step.
    pub step: Step,
    /// Milliseconds from the drain's start by which the step had to end.
    pub deadline_ms: u64,
    /// Milliseconds it took.
    pub took_ms: u64,
}

/// How the deregistration went.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cleanup {
    /// Done.
    Done,
    /// The backend answered with an error.
    Failed(String),
    /// The backend did not answer within the step's budget.
    TimedOut,
}

/// What happened to the routing entries this replica owned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RouteCleanup {
    /// Entries that named this replica and were deleted.
    pub cleared: usize,
    /// Entries that named another replica (the user moved) and were left.
    pub stale: usize,
    /// Entries already gone.
    pub absent: usize,
    /// Deletes that failed.
    pub failed: usize,
    /// Deletes still unanswered at the step's deadline.
    pub unfinished: usize,
}

/// What a drain did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DrainReport {
    /// The close code sent.
    pub code: u16,
    /// Connections registered when the drain began.
    pub connections: usize,
    /// Connections the drain began with that were sent the close frame.
    pub close_frames_sent: u64,
    /// Connections that ended by the close handshake deadline.
    pub closed_in_time: usize,
    /// Connections force-closed after it.
    pub force_closed: usize,
    /// The deregistration.
    pub deregistration: Cleanup,
    /// The routing cleanup.
    pub routes: RouteCleanup,
    /// Each step.
    pub steps: Vec<StepReport>,
    /// The cap the drain ran under (milliseconds).
    pub cap_ms: u64,
    /// The whole drain (milliseconds).
    pub took_ms: u64,
    /// What could not be cleaned up.
    pub problems: Vec<String>,
}

/// The close code for a stop reason under a configured choice.
// r[impl gateway.drain.close+2]
pub fn close_code(choice: CloseChoice, reason: StopReason) -> CloseCode {
    match (choice, reason) {
        (CloseChoice::Restart, _) | (CloseChoice::FromReason, StopReason::Restart) => {
            close::RESTART
        }
        (CloseChoice::GoingAway, _) | (CloseChoice::FromReason, StopReason::Shutdown) => {
            close::GOING_AWAY
        }
    }
}

/// The close frame's reason text: for a restart, a reconnect hint spread per connection.
pub(crate) fn close_reason(cfg: &DrainConfig, code: CloseCode, id: ConnId) -> String {
    if code == close::RESTART {
        let spread = cfg.reconnect_spread.as_millis().max(1) as u64;
        let ms = cfg.reconnect_min.as_millis() as u64 + holdfast_retry::stable_hash(&id.0) % spread;
        format!("{{\"reconnect_in_ms\":{ms},\"rejoin\":\"since\"}}")
    } else {
        "going away".to_owned()
    }
}

/// The cumulative step deadlines of a drain that starts at `start` and must end by `end`.
// r[impl gateway.drain.budget]
pub fn step_deadlines(shares: [u32; 4], start: Instant, end: Instant) -> [Instant; 4] {
    let total = end.saturating_duration_since(start);
    let sum: u64 = shares.iter().map(|s| u64::from(*s)).sum::<u64>().max(1);
    let mut acc = 0u64;
    let mut out = [end; 4];
    for (i, s) in shares.iter().enumerate() {
        acc += u64::from(*s);
        let nanos = (total.as_nanos() * u128::from(acc) / u128::from(sum)) as u64;
        out[i] = (start + Duration::from_nanos(nanos)).min(end);
    }
    out[3] = end;
    out
}

/// Waits on `notify` until `done()` or `deadline`; whether `done()` held.
async fn wait_for(notify: &Notify, deadline: Instant, done: impl Fn() -> bool) -> bool {
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if done() {
            return true;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return done();
        }
        // Coalesce a storm of wake-ups (thousands of connections closing at once) into one
        // check every few milliseconds: `done()` looks at every connection.
        tokio::time::sleep_until((Instant::now() + COALESCE).min(deadline)).await;
    }
}

// r[impl gateway.drain.order]
/// Whether step 2 is over: every connection the drain began with (`original`) has been sent its
/// close frame (`sent`) or is no longer `open`. Each connection counts once, whichever happened,
/// so one that got its frame and then ended cannot stand in for one still waiting for its frame.
pub(crate) fn closes_done(
    original: &HashSet<ConnId>,
    sent: &HashSet<ConnId>,
    open: impl Fn(ConnId) -> bool,
) -> bool {
    original.iter().all(|id| sent.contains(id) || !open(*id))
}

/// How long a drain step lets wake-ups gather before it looks again.
const COALESCE: Duration = Duration::from_millis(2);

impl Gateway {
    /// Drains the gateway (see the module doc), once: a second call waits for the first and
    /// returns its report. It ends by `deadline` or the configured cap, whichever is sooner.
    // r[impl gateway.drain.order]
    pub async fn drain(&self, reason: StopReason, deadline: Option<Instant>) -> DrainReport {
        let inner = &self.inner;
        let mut done = inner.drain.report.lock().await;
        if let Some(report) = done.as_ref() {
            return report.clone();
        }
        let cfg = &inner.config.drain;
        let start = Instant::now();
        let cap = start + cfg.total;
        let end = deadline.map_or(cap, |d| d.min(cap));
        let deadlines = step_deadlines(cfg.shares, start, end);
        let code = close_code(cfg.close, reason);
        let mut steps = Vec::new();
        let mut problems = Vec::new();
        let ms = |i: Instant| i.saturating_duration_since(start).as_millis() as u64;
        let mut step_start = start;
        let mut finish = |step: Step, steps: &mut Vec<StepReport>, i: usize| {
            let now = Instant::now();
            steps.push(StepReport {
                step,
                deadline_ms: ms(deadlines[i]),
                took_ms: now.saturating_duration_since(step_start).as_millis() as u64,
            });
            step_start = now;
        };

        // Step 1: stop being a target before telling anyone to leave.
        // An abandoned gateway is stopped already: the drain still runs its steps.
        let _ = inner.phase.refuse();
        // A registration still being retried must not land behind the deregistration.
        inner.membership.stop_registering();
        let deregistration = deregister(inner, deadlines[0]).await;
        if deregistration != Cleanup::Done {
            problems.push(format!("deregistration: {deregistration:?}"));
        }
        finish(Step::StopAccepting, &mut steps, 0);

        // Step 2: flush and close frames.
        let original: HashSet<ConnId> = inner
            .registry
            .snapshot()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let _ = inner.phase.drain();
        inner.drain.begin_closing(code);
        let ended = |ids: &HashSet<ConnId>| {
            if inner.registry.is_empty() {
                ids.len()
            } else {
                ids.iter()
                    .filter(|id| !inner.registry.contains(**id))
                    .count()
            }
        };
        let step_2_done = || {
            inner
                .drain
                .closes_done(&original, |id| inner.registry.contains(id))
        };
        let closes = wait_for(inner.stats.close_notify(), deadlines[1], step_2_done);
        let gone = wait_for(inner.registry.changed(), deadlines[1], step_2_done);
        // Either wake-up source may complete the condition.
        tokio::select! { _ = closes => {}, _ = gone => {} }
        finish(Step::Close, &mut steps, 1);

        // Step 3: close handshakes, then force-close whatever is left.
        wait_for(inner.registry.changed(), deadlines[2], || {
            ended(&original) == original.len()
        })
        .await;
        let closed_in_time = ended(&original);
        let mut force_closed = 0;
        for (id, handle) in inner.registry.snapshot() {
            if let Some(h) = handle {
                h.force_close();
                if original.contains(&id) {
                    force_closed += 1;
                }
            }
        }
        let _ = inner.stop_accept.send(true);
        finish(Step::Handshake, &mut steps, 2);

        // Step 4: the routing entries this replica still owns.
        let routes = clear_routes(inner, deadlines[3]).await;
        if routes.failed + routes.unfinished > 0 {
            problems.push(format!(
                "routing: {} deletes failed, {} unanswered",
                routes.failed, routes.unfinished
            ));
        }
        let accept = lock(&inner.accept_task).take();
        if let Some(task) = accept {
            let _ = tokio::time::timeout_at(deadlines[3], task).await;
        }
        // Bounded like the step: a bus that does not answer the unsubscribe is dropped instead.
        if tokio::time::timeout_at(deadlines[3], inner.membership.leave())
            .await
            .is_err()
        {
            problems.push("bus: unsubscribe unanswered".into());
        }
        finish(Step::Routing, &mut steps, 3);

        let close_frames_sent = inner.drain.frames_sent(&original);
        let report = DrainReport {
            code: u16::from(code),
            connections: original.len(),
            close_frames_sent,
            closed_in_time,
            force_closed,
            deregistration,
            routes,
            steps,
            cap_ms: ms(end),
            took_ms: ms(Instant::now()),
            problems,
        };
        let _ = inner.phase.stop();
        tracing::info!(replica = %inner.replica.id, report = ?report, "gateway drained");
        *done = Some(report.clone());
        report
    }

    // r[impl gateway.drain.signal]
    /// The module's stopper: the node's stop plan (SIGTERM, SIGINT) runs the drain with the
    /// plan's reason and deadline.
    pub fn stopper(&self) -> Box<dyn Stopper> {
        let gateway = self.clone();
        stopper_fn(move |request| async move {
            let report = gateway.drain(request.reason, Some(request.deadline)).await;
            if report.problems.is_empty() {
                Ok(())
            } else {
                Err(StopError(report.problems.join("; ")))
            }
        })
    }
}

// r[impl gateway.drain.deregister]
async fn deregister(inner: &Arc<Inner>, deadline: Instant) -> Cleanup {
    match tokio::time::timeout_at(deadline, inner.service.deregister(&inner.replica)).await {
        Ok(Ok(())) => Cleanup::Done,
        Ok(Err(e)) => Cleanup::Failed(e.to_string()),
        Err(_) => Cleanup::TimedOut,
    }
}

// r[impl gateway.drain.routing+2]
async fn clear_routes(inner: &Arc<Inner>, deadline: Instant) -> RouteCleanup {
    let users = inner.drain.owned_routes();
    let mut out = RouteCleanup::default();
    let mut pending = futures_util::stream::FuturesUnordered::new();
    for user in users {
        let routing = inner.routing.clone();
        let replica = inner.replica.id.clone();
        pending.push(async move {
            let r = routing.compare_and_delete(&user, &replica).await;
            (user, r)
        });
    }
    let total = pending.len();
    let mut answered = 0;
    use futures_util::StreamExt;
    while let Ok(Some((user, result))) = tokio::time::timeout_at(deadline, pending.next()).await {
        answered += 1;
        match result {
            Ok(outcome) => {
                inner.drain.route_released(&user);
                match outcome {
                    CasOutcome::Cleared => out.cleared += 1,
                    CasOutcome::Stale => out.stale += 1,
                    CasOutcome::Absent => out.absent += 1,
                }
            }
            Err(_) => out.failed += 1,
        }
    }
    out.unfinished = total - answered;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // r[verify gateway.drain.budget]
        #[test]
        fn step_deadlines_are_cumulative_ordered_and_end_at_the_cap(
            shares in proptest::array::uniform4(0u32..1000),
            total_ms in 0u64..120_000,
        ) {
            let start = Instant::now();
            let end = start + Duration::from_millis(total_ms);
            let d = step_deadlines(shares, start, end);
            prop_assert_eq!(d[3], end);
            for w in d.windows(2) {
                prop_assert!(w[0] <= w[1]);
            }
            let sum: u64 = shares.iter().map(|s| u64::from(*s)).sum();
            if sum > 0 {
                // Step 0 ends at its share of the whole, within a nanosecond of rounding.
                let want = total_ms as u128 * 1_000_000 * u128::from(shares[0]) / u128::from(sum);
                let got = d[0].duration_since(start).as_nanos();
                prop_assert!(got <= want && want - got <= 1, "{} vs {}", got, want);
            }
        }
    }

    fn ids(ids: &[u64]) -> HashSet<ConnId> {
        ids.iter().copied().map(ConnId).collect()
    }

    // Step 2 ends when each of the drain's connections was sent its frame or ended, each counted
    // once: two connections, one of which got its frame and then ended, are not done while the
    // other is still open without one.
    // r[verify gateway.drain.order]
    #[test]
    fn step_2_ends_when_each_connection_got_its_frame_or_ended() {
        let original = ids(&[1, 2]);
        let open = |live: &'static [u64]| move |id: ConnId| live.contains(&id.0);
        // Nothing yet.
        assert!(!closes_done(&original, &ids(&[]), open(&[1, 2])));
        // 1 got its frame and ended; 2 is open without a frame.
        assert!(!closes_done(&original, &ids(&[1]), open(&[2])));
        // 1 got its frame and is still open (handshake pending); 2 has none yet.
        assert!(!closes_done(&original, &ids(&[1]), open(&[1, 2])));
        // 1 ended without a frame; 2 has none yet.
        assert!(!closes_done(&original, &ids(&[]), open(&[2])));
        // Both got theirs, both still open.
        assert!(closes_done(&original, &ids(&[1, 2]), open(&[1, 2])));
        // One got its frame, the other ended without one.
        assert!(closes_done(&original, &ids(&[1]), open(&[1])));
        // Both ended without frames.
        assert!(closes_done(&original, &ids(&[]), open(&[])));
        // A connection that came after the drain began does not hold step 2 open.
        assert!(closes_done(&original, &ids(&[1, 2]), open(&[1, 2, 3])));
        // Nothing to close.
        assert!(closes_done(&ids(&[]), &ids(&[]), open(&[7])));
    }

    // r[verify gateway.drain.close+2]
    #[test]
    fn close_codes_and_reconnect_hints() {
        assert_eq!(
            u16::from(close_code(CloseChoice::FromReason, StopReason::Restart)),
            1012
        );
        assert_eq!(
            u16::from(close_code(CloseChoice::FromReason, StopReason::Shutdown)),
            1001
        );
        assert_eq!(
            u16::from(close_code(CloseChoice::GoingAway, StopReason::Restart)),
            1001
        );
        assert_eq!(
            u16::from(close_code(CloseChoice::Restart, StopReason::Shutdown)),
            1012
        );
        let cfg = DrainConfig::default();
        let hints: std::collections::BTreeSet<u64> = (0..200)
            .map(|i| {
                let r = close_reason(&cfg, close::RESTART, ConnId(i));
                let v: serde_json::Value = serde_json::from_str(&r).unwrap_or_default();
                v["reconnect_in_ms"].as_u64().unwrap_or(0)
            })
            .collect();
        assert!(hints.iter().all(|h| (500..2500).contains(h)), "{hints:?}");
        assert!(
            hints.len() > 100,
            "hints are spread, not one instant: {}",
            hints.len()
        );
        assert!(close_reason(&cfg, close::GOING_AWAY, ConnId(1)).len() <= 123);
        let hint = close_reason(&cfg, close::RESTART, ConnId(u64::MAX));
        assert!(hint.len() <= 123);
        let v: serde_json::Value = serde_json::from_str(&hint).unwrap_or_default();
        assert_eq!(
            v["rejoin"], "since",
            "the hint says to rejoin with since: {hint}"
        );
    }
}
