//! holdfast-retry: the shared retry discipline.
//!
//! Synchronous, runtime-free and caller-clocked: every call takes `now`, nothing sleeps, nothing
//! does I/O. Two shapes of caller use it.
//!
//! **A tick-driven reconciler** asks, for each key, "may I attempt this now?" through a
//! [`KeyedGate`] (or a [`SharedGate`] when several tasks share it). The gate paces each key on an
//! exponential [`Policy`] with [`Jitter`], grants one attempt in flight per key with an
//! [`AttemptToken`], escalates a key once when its streak reaches a threshold (and reports its
//! recovery) instead of ever giving up, honours server hints, and forgets keys that hold no
//! information on its own. A caller that keeps its attempts elsewhere (a SQLite table) replays them
//! into a [`History`] and asks [`decide`], the same pure function the gate uses.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use holdfast_retry::{Escalation, KeyedGate, Policy};
//!
//! # fn pull(image: &str) -> Result<(), Option<Duration>> { Err(None) }
//! let policy = Policy::builder()
//!     .base(Duration::from_secs(5))
//!     .cap(Duration::from_secs(300))
//!     .escalate_after(5)
//!     .build()?;
//! let mut gate = KeyedGate::new(policy);
//! let images = ["registry.local/app:1", "registry.local/db:7"];
//! let mut tick = Instant::now();
//! for _ in 0..100 {
//!     for image in images {
//!         let Ok(token) = gate.begin(&image, tick) else { continue }; // backing off or in flight
//!         let transition = match pull(image) {
//!             Ok(()) => gate.succeed(token, tick),
//!             Err(retry_after) => gate.fail(token, tick, retry_after),
//!         };
//!         match transition.escalation {
//!             Some(Escalation::Escalated) => { /* file one operator-visible fault */ }
//!             Some(Escalation::Recovered) => { /* clear it */ }
//!             None => {}
//!         }
//!     }
//!     tick += Duration::from_secs(5);
//! }
//! // 500 s of ticks, always failing: paced to a handful of attempts per image, never given up.
//! let state = gate.state(&images[0]).expect("still failing");
//! assert!(state.escalated && state.failures < 12);
//! # Ok::<(), holdfast_retry::PolicyError>(())
//! ```
//!
//! **A relay loop** classifies each error it meets with the [`Class`] vocabulary ([`Classify`]):
//! drop and count an item, report a transient condition and go on, end only when the channel is
//! gone — and paces its reconnects with the same gate.
//!
//! ```
//! use holdfast_retry::{Class, Classify};
//!
//! #[derive(Debug)]
//! enum RelayError { TooLarge, Refused, ConnectionLost }
//! impl Classify for RelayError {
//!     fn class(&self) -> Class {
//!         match self {
//!             RelayError::TooLarge => Class::Item,
//!             RelayError::Refused => Class::Transient,
//!             RelayError::ConnectionLost => Class::Fatal,
//!         }
//!     }
//! }
//!
//! let mut incoming = vec![Ok(b"a".to_vec()), Err(RelayError::TooLarge), Ok(vec![]),
//!                         Err(RelayError::Refused), Ok(b"b".to_vec()), Err(RelayError::ConnectionLost)]
//!     .into_iter();
//! let (mut relayed, mut dropped, mut transient) = (0, 0, 0);
//! let ended = loop {
//!     let Some(next) = incoming.next() else { break None };
//!     match next {
//!         Ok(_datagram) => relayed += 1, // zero-length datagrams are relayed too
//!         Err(err) => match err.class() {
//!             Class::Item => dropped += 1,
//!             Class::Transient => transient += 1,
//!             Class::Fatal => break Some(err), // announce the end to the peer
//!         },
//!     }
//! };
//! assert_eq!((relayed, dropped, transient), (3, 1, 1));
//! assert!(matches!(ended, Some(RelayError::ConnectionLost)));
//! ```
//!
//! I/O errors are classified by one table, [`classify::io()`], that every loop calls.
//!
//! **Callers that spawn attempts** use [`Attempts`]: a gate plus its tokens behind a `Copy`
//! [`AttemptId`], answering [`Permit`] and [`Finished`], with a stale attempt's expiry reported
//! once. **Successes that must last** (a container that must stay up, a connection that must not
//! drop at once) are recorded with `succeed_provisionally`, and become real with `confirm` or
//! fail the same streak through `ended` ([`Lasting`]):
//!
//! ```
//! use std::time::{Duration, Instant};
//! use holdfast_retry::{KeyedGate, Policy, Reason};
//!
//! let mut gate: KeyedGate<String> = KeyedGate::new(Policy::default());
//! let now = Instant::now();
//! let token = gate.begin("web", now).expect("fresh"); // borrowed key: no String built to ask
//! let lasting = gate.succeed_provisionally(token, now, Duration::from_secs(10));
//! let ended = gate.ended(lasting, now + Duration::from_secs(3), None); // exited after 3 s
//! assert!(matches!(ended.reason, Reason::Failed { .. }) && ended.failures == 1);
//! ```
//!
//! Policies come from config through [`PolicyConfig`] (feature `serde`: `"5s"`-style durations,
//! errors that name the key). [`History`] answers as the gate does for persisted attempts.
//!
//! The rest: [`http`] (the retryable status set and the Retry-After parser),
//! [`CrashLoopDetector`], and [`RetryBudget`] (a global token bucket composed with per-key pacing).
//! Every behaviour is a rule under `retry.*` or `classify.*` in `docs/spec/runtime.md`.

mod attempts;
mod budget;
pub mod classify;
mod crash_loop;
pub mod duration_text;
mod gate;
mod history;
pub mod http;
mod jitter;
mod lasting;
mod policy;
mod policy_config;
mod schedule;
mod shared;
mod slots;
mod stable_hash;
mod time;
mod transition;

pub use attempts::{AttemptId, Attempts, Failed, Finished, Permit};
pub use budget::RetryBudget;
pub use classify::{Class, Classify};
pub use crash_loop::{CrashLoopDetector, CrashLoopReport, Exit};
pub use gate::{KeyState, KeyedGate};
/// Borrowed-key lookups: a `&Q` finds a `K` key when `Q: Equivalent<K>` (hashbrown's trait; any
/// `Q` that `K` borrows as qualifies).
pub use hashbrown::Equivalent;
pub use history::{
    Decision, FailureRecorded, History, HistoryAttempt, HistoryBegin, SuccessRecorded, decide,
};
pub use jitter::Jitter;
pub use jitter::mix as mix64;
pub use lasting::Lasting;
pub use policy::{MAX_POLICY_DURATION, Policy, PolicyBuilder, PolicyError};
pub use policy_config::{PolicyConfig, PolicyConfigError};
pub use shared::SharedGate;
pub use stable_hash::stable_hash;
pub use time::{Clock, ManualClock, SystemClock, Timestamp};
pub use transition::{AttemptToken, Escalation, NotYet, Reason, Transition, WaitReason};

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
