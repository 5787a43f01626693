//! The gateway's phase, in one place: where it stands between its start and its stop, and
//! which moves between phases are allowed. What the phase decides ("refusing upgrades?", "may a
//! teardown release its route?", and the phase's part of "ready?") is answered from the one
//! value, so no two of them can disagree the way separately flipped flags could. Readiness also
//! needs the membership's and the registry's own view, which `Gateway::is_ready` checks besides.
//! `Refusing` and `Draining` answer every question alike: they differ only in the drain's order
//! (connections are closed only after upgrades are refused), which the allowed moves enforce.
//!
//! Imports nothing of the crate.

use std::sync::atomic::{AtomicU8, Ordering};

/// Where the gateway stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Serving clients, its registration not yet holding: not ready.
    Starting = 0,
    /// Registered and serving: ready.
    Ready = 1,
    /// A drain began: not ready, new upgrades refused, the replica deregistering.
    Refusing = 2,
    /// The drain is closing connections: their teardowns leave the routes to the drain.
    Draining = 3,
    /// Drained or abandoned: nothing more happens.
    Stopped = 4,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Starting,
            1 => Phase::Ready,
            2 => Phase::Refusing,
            3 => Phase::Draining,
            _ => Phase::Stopped,
        }
    }

    /// Whether the gateway may move from `self` to `to`: forward only, one step of the drain at
    /// a time, and to `Stopped` from anywhere (an abandon).
    pub(crate) fn allows(self, to: Phase) -> bool {
        matches!(
            (self, to),
            (Phase::Starting, Phase::Ready)
                | (Phase::Starting | Phase::Ready, Phase::Refusing)
                | (Phase::Refusing, Phase::Draining)
                | (
                    Phase::Starting | Phase::Ready | Phase::Refusing | Phase::Draining,
                    Phase::Stopped
                )
        )
    }
}

/// A move the phase does not allow; the phase is left as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the gateway cannot go from {from:?} to {to:?}")]
pub(crate) struct IllegalTransition {
    pub(crate) from: Phase,
    pub(crate) to: Phase,
}

/// The gateway's phase, shared by its tasks.
#[derive(Debug)]
pub(crate) struct PhaseCell(AtomicU8);

impl Default for PhaseCell {
    fn default() -> Self {
        PhaseCell(AtomicU8::new(Phase::Starting as u8))
    }
}

impl PhaseCell {
    pub(crate) fn get(&self) -> Phase {
        Phase::from_u8(self.0.load(Ordering::SeqCst))
    }

    /// Moves to `to` if the current phase allows it; else leaves the phase as it is.
    fn advance(&self, to: Phase) -> Result<Phase, IllegalTransition> {
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                Phase::from_u8(v).allows(to).then_some(to as u8)
            })
            .map(Phase::from_u8)
            .map_err(|v| IllegalTransition {
                from: Phase::from_u8(v),
                to,
            })
    }

    /// The registration holds: ready, unless a drain began meanwhile (refused then, so a late
    /// registration cannot make a draining gateway ready again).
    pub(crate) fn registered(&self) -> Result<Phase, IllegalTransition> {
        self.advance(Phase::Ready)
    }

    /// A drain's first step: stop being ready and refuse new upgrades.
    pub(crate) fn refuse(&self) -> Result<Phase, IllegalTransition> {
        self.advance(Phase::Refusing)
    }

    /// A drain's second step: the connections are being closed.
    pub(crate) fn drain(&self) -> Result<Phase, IllegalTransition> {
        self.advance(Phase::Draining)
    }

    /// The end: drained, or abandoned.
    pub(crate) fn stop(&self) -> Result<Phase, IllegalTransition> {
        self.advance(Phase::Stopped)
    }

    /// Whether this phase is ready (the registry's own view is checked besides).
    pub(crate) fn is_ready(&self) -> bool {
        self.get() == Phase::Ready
    }

    /// Whether new upgrades are refused (503 with Retry-After).
    pub(crate) fn refuses_upgrades(&self) -> bool {
        matches!(
            self.get(),
            Phase::Refusing | Phase::Draining | Phase::Stopped
        )
    }

    /// Whether a connection's teardown releases its user's route itself: not once a drain
    /// began (the drain clears the routes) or the gateway was abandoned (a killed process
    /// releases nothing).
    pub(crate) fn releases_routes(&self) -> bool {
        matches!(self.get(), Phase::Starting | Phase::Ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Phase; 5] = [
        Phase::Starting,
        Phase::Ready,
        Phase::Refusing,
        Phase::Draining,
        Phase::Stopped,
    ];

    #[test]
    fn a_start_then_a_drain_goes_through_every_phase_in_order() {
        let p = PhaseCell::default();
        assert_eq!(p.get(), Phase::Starting);
        assert!(!p.is_ready() && !p.refuses_upgrades() && p.releases_routes());
        assert_eq!(p.registered(), Ok(Phase::Starting));
        assert!(p.is_ready() && !p.refuses_upgrades() && p.releases_routes());
        assert_eq!(p.refuse(), Ok(Phase::Ready));
        assert!(!p.is_ready() && p.refuses_upgrades() && !p.releases_routes());
        assert_eq!(p.drain(), Ok(Phase::Refusing));
        assert!(!p.is_ready() && p.refuses_upgrades() && !p.releases_routes());
        assert_eq!(p.stop(), Ok(Phase::Draining));
        assert!(!p.is_ready() && p.refuses_upgrades() && !p.releases_routes());
    }

    #[test]
    fn illegal_transitions_are_refused_and_leave_the_phase() {
        // A registration that lands after a drain began cannot make the gateway ready again.
        let p = PhaseCell::default();
        p.refuse().ok();
        assert_eq!(
            p.registered(),
            Err(IllegalTransition {
                from: Phase::Refusing,
                to: Phase::Ready
            })
        );
        assert_eq!(p.get(), Phase::Refusing);
        // No skipping the refusal: connections are never closed while upgrades are accepted.
        let p = PhaseCell::default();
        assert!(p.drain().is_err());
        assert_eq!(p.get(), Phase::Starting);
        // Nothing leaves Stopped, not even for Stopped.
        let p = PhaseCell::default();
        p.stop().ok();
        for to in ALL {
            assert!(!Phase::Stopped.allows(to), "{to:?}");
        }
        assert!(p.registered().is_err() && p.refuse().is_err() && p.drain().is_err());
        assert!(p.stop().is_err());
        assert_eq!(p.get(), Phase::Stopped);
        // Never backwards, never to itself.
        for (i, from) in ALL.iter().enumerate() {
            for to in &ALL[..=i] {
                assert!(!from.allows(*to), "{from:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn an_abandon_stops_from_any_live_phase() {
        for from in &ALL[..4] {
            assert!(from.allows(Phase::Stopped), "{from:?}");
        }
    }

    #[test]
    fn the_stored_byte_round_trips() {
        for p in ALL {
            assert_eq!(Phase::from_u8(p as u8), p);
        }
    }
}
