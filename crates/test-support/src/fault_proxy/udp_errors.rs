//! What the UDP proxy's loops do about a socket error: go on, pause, or end.
//!
//! A UDP socket reports some errors that concern one earlier datagram (an ICMP port-unreachable
//! comes back as ECONNREFUSED on the next call) and some that mean the socket itself is unusable
//! (EBADF, EINVAL): retrying those at once would spin forever on the same error.

use std::io::{self, ErrorKind};
use std::time::Duration;

use holdfast_retry::{Jitter, Policy};
use nix::errno::Errno;

/// What an error says about the socket it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// About one datagram or a passing condition: the socket is still usable.
    Transient,
    /// The socket itself is unusable: the same call will fail the same way.
    Persistent,
}

/// Classifies a socket error by its kind (and, for the kinds std leaves uncategorised, its OS
/// error code).
pub(crate) fn classify(err: &io::Error) -> ErrorClass {
    match err.kind() {
        ErrorKind::ConnectionRefused
        | ErrorKind::ConnectionReset
        | ErrorKind::ConnectionAborted
        | ErrorKind::HostUnreachable
        | ErrorKind::NetworkUnreachable
        | ErrorKind::NetworkDown
        | ErrorKind::Interrupted
        | ErrorKind::WouldBlock
        | ErrorKind::TimedOut
        | ErrorKind::OutOfMemory => ErrorClass::Transient,
        _ => match err.raw_os_error().map(Errno::from_raw) {
            // Too large for the path, or the kernel's buffers are full: this datagram only.
            Some(Errno::EMSGSIZE | Errno::ENOBUFS) => ErrorClass::Transient,
            _ => ErrorClass::Persistent,
        },
    }
}

/// What a loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Go on at once.
    Continue,
    /// Wait this long, then go on.
    Pause(Duration),
    /// End the loop: the socket is unusable.
    End,
}

/// Consecutive transient errors answered at once before the loop starts pausing.
pub(crate) const BURST: u32 = 16;
/// The first pause after a burst; it doubles with each further error, up to [`MAX_PAUSE`].
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(1);
/// The longest pause between two attempts while errors persist.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The pacing of a loop past its burst: holdfast-retry's schedule from [`FIRST_PAUSE`] to
/// [`MAX_PAUSE`], without jitter (a test proxy wants repeatable pauses).
fn pause_policy() -> Option<Policy> {
    Policy::builder()
        .base(FIRST_PAUSE)
        .cap(MAX_PAUSE)
        .jitter(Jitter::None)
        .build()
        .ok()
}

/// A loop's run of consecutive errors. A persistent error ends the loop; a transient one is
/// retried at once, unless so many came in a row that it is effectively persistent, in which case
/// the loop backs off instead of spinning.
#[derive(Debug, Default)]
pub(crate) struct ErrorStreak {
    consecutive: u32,
}

impl ErrorStreak {
    /// The loop met `err`.
    pub(crate) fn on_error(&mut self, err: &io::Error) -> Next {
        if classify(err) == ErrorClass::Persistent {
            return Next::End;
        }
        self.consecutive = self.consecutive.saturating_add(1);
        match self.consecutive.checked_sub(BURST + 1) {
            None => Next::Continue,
            // The shared schedule, un-jittered: FIRST_PAUSE doubling per further error, capped.
            Some(doublings) => Next::Pause(pause_policy().map_or(MAX_PAUSE, |policy| {
                policy.nominal_delay(doublings.saturating_add(1))
            })),
        }
    }

    /// The loop's call succeeded: the streak is over.
    pub(crate) fn on_success(&mut self) {
        self.consecutive = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(errno: Errno) -> io::Error {
        io::Error::from_raw_os_error(errno as i32)
    }

    // i[verify harness.fault-proxy.udp.errors]
    #[test]
    fn errors_about_one_datagram_are_transient_and_a_broken_socket_is_persistent() {
        for errno in [
            Errno::ECONNREFUSED,
            Errno::ECONNRESET,
            Errno::EHOSTUNREACH,
            Errno::ENETUNREACH,
            Errno::EINTR,
            Errno::EAGAIN,
            Errno::EMSGSIZE,
            Errno::ENOBUFS,
            Errno::ENOMEM,
        ] {
            assert_eq!(classify(&os(errno)), ErrorClass::Transient, "{errno}");
        }
        for errno in [Errno::EBADF, Errno::ENOTSOCK, Errno::EINVAL, Errno::EFAULT] {
            assert_eq!(classify(&os(errno)), ErrorClass::Persistent, "{errno}");
        }
        assert_eq!(
            classify(&io::Error::other("unknown")),
            ErrorClass::Persistent
        );
    }

    // i[verify harness.fault-proxy.udp.errors]
    #[test]
    fn a_run_of_transient_errors_backs_off_to_the_cap_and_a_success_ends_it() {
        let refused = os(Errno::ECONNREFUSED);
        let mut streak = ErrorStreak::default();
        for _ in 0..BURST {
            assert_eq!(streak.on_error(&refused), Next::Continue);
        }
        assert_eq!(streak.on_error(&refused), Next::Pause(FIRST_PAUSE));
        assert_eq!(streak.on_error(&refused), Next::Pause(FIRST_PAUSE * 2));
        let pauses: Vec<_> = (0..100_000).map(|_| streak.on_error(&refused)).collect();
        assert_eq!(pauses.last(), Some(&Next::Pause(MAX_PAUSE)));
        assert!(
            pauses
                .iter()
                .all(|p| matches!(p, Next::Pause(d) if *d <= MAX_PAUSE))
        );
        streak.on_success();
        assert_eq!(streak.on_error(&refused), Next::Continue);
        assert_eq!(streak.on_error(&os(Errno::EBADF)), Next::End);
    }
}
