//! The stop plan: ordered groups of stoppers, concurrent within a group, inside one total budget.
//!
//! Each group gets a share of the time that is left when it starts, weighted against the groups
//! still to come, so a group that finishes early passes its unused time on. Every group's deadline
//! lies inside `start + total`, and a group ends at its deadline whatever its stoppers do, so the
//! plan returns by the cap.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::stop::{StopReason, StopRequest, Stopper};

/// The longest total budget a plan takes; a longer one is clamped to it (a stop plan is bounded
/// by the operator's patience, and the clamp keeps deadline arithmetic from overflowing).
pub const MAX_TOTAL: Duration = Duration::from_secs(24 * 60 * 60);

/// Ordered groups, concurrent within a group; each group gets a share of one total budget.
pub struct StopPlan {
    total: Duration,
    groups: Vec<Group>,
}

/// One group of a [`StopPlan`], as [`StopPlan::group`] returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupId(usize);

struct Group {
    name: String,
    share: u32,
    modules: Vec<(String, Box<dyn Stopper>)>,
}

impl std::fmt::Debug for StopPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("StopPlan");
        d.field("total", &self.total);
        for g in &self.groups {
            let modules: Vec<&str> = g.modules.iter().map(|(m, _)| m.as_str()).collect();
            d.field(&g.name, &(g.share, modules));
        }
        d.finish()
    }
}

/// The report of one plan run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StopReport {
    /// The plan's total budget.
    pub budget: Duration,
    /// How long the whole plan took.
    pub took: Duration,
    /// A second signal cut the plan short.
    pub aborted: bool,
    /// Every module of every group, in plan order.
    pub modules: Vec<ModuleStop>,
}

impl StopReport {
    /// Every stopper returned Ok inside its group's budget and nothing was aborted.
    pub fn clean(&self) -> bool {
        !self.aborted
            && self
                .modules
                .iter()
                .all(|m| m.outcome == StopOutcome::Stopped)
    }
}

/// How one module's stop went.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModuleStop {
    /// The group it was stopped in.
    pub group: String,
    /// The module's name.
    pub module: String,
    /// Its group's budget (zero for a group skipped by an abort).
    pub budget: Duration,
    /// From its group's start until it returned, was cut off or aborted.
    pub took: Duration,
    /// What became of it.
    pub outcome: StopOutcome,
}

/// What became of one stopper.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "outcome", content = "error", rename_all = "snake_case")]
pub enum StopOutcome {
    /// It returned Ok by its deadline.
    Stopped,
    /// It returned an error, or panicked, by its deadline.
    Failed(String),
    /// It had not returned by its group's deadline and was cut off there.
    CutOff,
    /// The plan was aborted while it ran, or before its group started (it was never asked).
    Aborted,
}

impl StopPlan {
    /// A plan that returns within `total` (clamped to [`MAX_TOTAL`]).
    pub fn new(total: Duration) -> Self {
        Self {
            total: total.min(MAX_TOTAL),
            groups: Vec::new(),
        }
    }

    /// Adds a group (stopped after the groups added before it). `share` is its weight in the total
    /// budget; time a group does not use passes to the groups after it. A share of 0 counts as 1,
    /// so that every group gets some time.
    pub fn group(&mut self, name: &str, share: u32) -> GroupId {
        self.groups.push(Group {
            name: name.to_owned(),
            share: share.max(1),
            modules: Vec::new(),
        });
        GroupId(self.groups.len() - 1)
    }

    /// Adds a module's stopper to a group. A `GroupId` this plan did not hand out (one from
    /// another plan) adds the module to a new last group named "ungrouped".
    pub fn add(&mut self, group: GroupId, module: impl Into<String>, stopper: Box<dyn Stopper>) {
        let index = if group.0 < self.groups.len() {
            group.0
        } else {
            self.group("ungrouped", 1).0
        };
        self.groups[index].modules.push((module.into(), stopper));
    }

    /// Runs every group in order. Returns by start + total at the latest. When `abort` resolves (a
    /// second signal) every stopper still running is cut off at once and the report says `aborted`.
    // r[impl lifecycle.stop.order]
    // r[impl lifecycle.stop.budget]
    pub async fn run(
        self,
        reason: StopReason,
        abort: impl Future<Output = ()> + Send,
    ) -> StopReport {
        let start = Instant::now();
        let end = start + self.total;
        let mut abort = pin!(abort);
        let mut aborted = false;
        let mut weight_left: u64 = self.groups.iter().map(|g| u64::from(g.share)).sum();
        let mut modules = Vec::new();
        tracing::info!(
            ?reason,
            budget_ms = self.total.as_millis() as u64,
            "stop plan started"
        );
        for group in self.groups {
            let share = u64::from(group.share);
            let group_start = Instant::now();
            aborted = aborted_before(aborted, &group, abort.as_mut()).await;
            if aborted {
                modules.extend(skipped(group));
                continue;
            }
            let budget = share_of(
                end.saturating_duration_since(group_start),
                share,
                weight_left,
            );
            weight_left -= share;
            let deadline = group_start + budget;
            let outcomes =
                run_group(group.modules, StopRequest { deadline, reason }, &mut abort).await;
            aborted = aborted_during(&outcomes);
            for (module, outcome, took) in outcomes {
                let stop = ModuleStop {
                    group: group.name.clone(),
                    module,
                    budget,
                    took: took.saturating_duration_since(group_start),
                    outcome,
                };
                log(&stop);
                modules.push(stop);
            }
        }
        let report = StopReport {
            budget: self.total,
            took: start.elapsed(),
            aborted,
            modules,
        };
        tracing::info!(
            took_ms = report.took.as_millis() as u64,
            aborted = report.aborted,
            clean = report.clean(),
            "stop plan finished"
        );
        report
    }
}

/// Whether the plan is aborted before `group` starts: it already was, or a second signal came
/// while no group was running (between two groups, or before the plan ran), so the group is
/// skipped instead of being asked to stop and cut off at once. Once aborted, `abort` (which may
/// be a future that must not be polled after it resolved) is not polled again.
// r[impl lifecycle.stop.abort]
async fn aborted_before<A: Future<Output = ()>>(
    aborted: bool,
    group: &Group,
    abort: std::pin::Pin<&mut A>,
) -> bool {
    aborted || (!group.modules.is_empty() && has_fired(abort).await)
}

/// Whether the signal cut the group off (any of its stoppers aborted): every later group is
/// skipped.
// r[impl lifecycle.stop.abort]
fn aborted_during(outcomes: &[(String, StopOutcome, Instant)]) -> bool {
    outcomes
        .iter()
        .any(|(_, outcome, _)| *outcome == StopOutcome::Aborted)
}

/// A group skipped by an abort: each module reported aborted, with no budget, never asked.
// r[impl lifecycle.stop.abort]
fn skipped(group: Group) -> Vec<ModuleStop> {
    group
        .modules
        .into_iter()
        .map(|(module, _)| {
            let stop = ModuleStop {
                group: group.name.clone(),
                module,
                budget: Duration::ZERO,
                took: Duration::ZERO,
                outcome: StopOutcome::Aborted,
            };
            log(&stop);
            stop
        })
        .collect()
}

/// Whether `abort` has resolved, polled once without waiting. Never called again once it said
/// yes, so a finished future is never polled.
async fn has_fired<A: Future<Output = ()>>(mut abort: std::pin::Pin<&mut A>) -> bool {
    std::future::poll_fn(|cx| std::task::Poll::Ready(abort.as_mut().poll(cx).is_ready())).await
}

/// `left * share / weight`, the group's part of the time that is left.
fn share_of(left: Duration, share: u64, weight: u64) -> Duration {
    if weight <= share {
        return left;
    }
    let nanos = left.as_nanos() * u128::from(share) / u128::from(weight);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Runs one group's stoppers concurrently until all return, the deadline passes, or `abort`
/// resolves. Returns each module's outcome and the instant it was settled, in group order.
// r[impl lifecycle.stop.cutoff]
// r[impl lifecycle.stop.abort]
async fn run_group<A>(
    stoppers: Vec<(String, Box<dyn Stopper>)>,
    request: StopRequest,
    abort: &mut std::pin::Pin<&mut A>,
) -> Vec<(String, StopOutcome, Instant)>
where
    A: Future<Output = ()>,
{
    let mut names = Vec::with_capacity(stoppers.len());
    let mut settled: Vec<Option<(StopOutcome, Instant)>> = Vec::with_capacity(stoppers.len());
    let mut index_of = HashMap::new();
    // Each stopper is its own task: one that blocks or panics cannot take the plan with it, and
    // dropping the set at the deadline aborts whatever is still running.
    let mut set = JoinSet::new();
    for (i, (name, stopper)) in stoppers.into_iter().enumerate() {
        names.push(name);
        settled.push(None);
        let handle = set.spawn(async move { stopper.stop(request).await });
        index_of.insert(handle.id(), i);
    }
    let mut cut = None;
    while !set.is_empty() {
        tokio::select! {
            biased;
            () = abort.as_mut() => {
                cut = Some(StopOutcome::Aborted);
                break;
            }
            joined = set.join_next_with_id() => {
                let Some(joined) = joined else { break };
                let (id, outcome) = match joined {
                    Ok((id, Ok(()))) => (id, StopOutcome::Stopped),
                    Ok((id, Err(err))) => (id, StopOutcome::Failed(err.0)),
                    Err(err) => {
                        let id = err.id();
                        let why = if err.is_panic() {
                            format!("panicked: {}", panic_message(err.into_panic()))
                        } else {
                            "cancelled".to_owned()
                        };
                        (id, StopOutcome::Failed(why))
                    }
                };
                if let Some(&i) = index_of.get(&id) {
                    settled[i] = Some((outcome, Instant::now()));
                }
            }
            () = tokio::time::sleep_until(request.deadline) => {
                cut = Some(StopOutcome::CutOff);
                break;
            }
        }
    }
    drop(set);
    let now = Instant::now();
    let cut = cut.unwrap_or(StopOutcome::CutOff);
    names
        .into_iter()
        .zip(settled)
        .map(|(name, s)| {
            let (outcome, at) = s.unwrap_or_else(|| (cut.clone(), now));
            (name, outcome, at)
        })
        .collect()
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}

fn log(stop: &ModuleStop) {
    let took_ms = stop.took.as_millis() as u64;
    let budget_ms = stop.budget.as_millis() as u64;
    let (group, module) = (stop.group.as_str(), stop.module.as_str());
    match &stop.outcome {
        StopOutcome::Stopped => {
            tracing::info!(group, module, took_ms, budget_ms, "module stopped");
        }
        StopOutcome::Failed(error) => {
            tracing::warn!(group, module, took_ms, budget_ms, error = %error, "module stop failed");
        }
        StopOutcome::CutOff => {
            tracing::warn!(
                group,
                module,
                took_ms,
                budget_ms,
                "module stop overran its budget: cut off"
            );
        }
        StopOutcome::Aborted => {
            tracing::warn!(group, module, took_ms, budget_ms, "module stop aborted");
        }
    }
}
