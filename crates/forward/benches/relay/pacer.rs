//! The open-loop sender of the latency phase: a thread of its own that sleeps to absolute
//! deadlines and, at each, sends the datagrams owed by then. A sender that spins on the clock
//! between datagrams holds the rate too, but takes one of the machine's cores away from the
//! path it measures; this one sleeps between bursts.

// prctl(2), to shorten this thread's timer slack; see `tight_timer_slack`.
#![allow(unsafe_code)]

use std::time::{Duration, Instant};

/// How often the pacer wakes. A burst of `rate × PERIOD` datagrams leaves at each wakeup.
pub const PERIOD: Duration = Duration::from_micros(100);

/// Calls `send(owed)` at every [`PERIOD`] deadline until `run` has passed, `owed` being the
/// datagrams due at `rate` a second by now minus those `send` said it sent; returns the total
/// sent. Blocks the calling thread.
pub fn pace(rate: f64, run: Duration, mut send: impl FnMut(u64) -> u64) -> u64 {
    tight_timer_slack();
    let start = Instant::now();
    let mut deadline = start;
    let mut sent = 0u64;
    loop {
        deadline += PERIOD;
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        } else if now - deadline > PERIOD {
            // Late by more than a period (the thread was not scheduled): the owed count catches
            // up in one burst rather than in a run of deadlines already past.
            deadline = now;
        }
        let elapsed = start.elapsed();
        if elapsed >= run {
            break;
        }
        let due = (elapsed.as_secs_f64() * rate) as u64;
        if due > sent {
            sent += send(due - sent);
        }
    }
    sent
}

/// The kernel lets a sleep overrun by the thread's timer slack (50 µs by default), half of a
/// period: 1 µs keeps the wakeups on their deadlines.
fn tight_timer_slack() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    // SAFETY: PR_SET_TIMERSLACK takes a value and changes only this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong, 0, 0, 0);
    }
}
