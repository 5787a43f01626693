//! The decisions of one arm's run and of the command around it, as pure functions of times,
//! counts and arguments: when the join wait is over, timed out or due a progress line, when the
//! move to B is done or given up, how long the registration is watched, each arm's first sequence
//! number, the milliseconds the log records, and the command line the report echoes. The async
//! orchestration in `mod.rs` only awaits, spawns and signals around them.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::Args;
use super::clients;
use super::measures::{Arm, Side};

/// The clients' join wait allows this, plus [`JOIN_PER_CLIENT`] per client.
pub const JOIN_BASE: Duration = Duration::from_secs(60);
/// The join wait's allowance per client (at most [`clients::MAX_HANDSHAKES`] handshakes run at
/// once).
pub const JOIN_PER_CLIENT: Duration = Duration::from_millis(50);
/// How often the join wait prints its progress line.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// Longest wait for A's clients to be back on B.
pub const MOVE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long past the lease TTL a registration is waited for.
pub const LEASE_GRACE: Duration = Duration::from_secs(5);
/// Each arm's stream numbers its messages from `arm index × ARM_SEQ_SPAN`, so no arm's
/// deliveries count in another's.
pub const ARM_SEQ_SPAN: u64 = 1_000_000;
/// How long the clients' tokens are valid.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// The arms to run: those asked for, in order, else the control, graceful and recovery arms.
// i[impl xtask.drain-demo.command+2]
pub fn arms(asked: &[Arm]) -> Vec<Arm> {
    if asked.is_empty() {
        vec![Arm::Control, Arm::Graceful, Arm::Recovery]
    } else {
        asked.to_vec()
    }
}

/// The command line the report echoes: the client count always, the rate and the lease TTL when
/// not their defaults, and each `--arm` asked for.
// i[impl xtask.drain-demo.outputs+2]
pub fn command_line(args: &Args) -> String {
    let mut command = format!("cargo xtask drain-demo --clients {}", args.clients);
    if args.rate != super::DEFAULT_RATE {
        command += &format!(" --rate {}", args.rate);
    }
    if args.lease_ttl_secs != super::DEFAULT_LEASE_TTL_SECS {
        command += &format!(" --lease-ttl-secs {}", args.lease_ttl_secs);
    }
    for arm in &args.arm {
        command += &format!(" --arm {}", arm.name());
    }
    command
}

/// The first sequence number of the stream of arm `index` (counted from 0).
// i[impl xtask.drain-demo.arms+2]
pub fn first_seq(index: usize) -> u64 {
    index as u64 * ARM_SEQ_SPAN
}

/// How many of `n` clients start on A (they alternate, starting with A).
// i[impl xtask.drain-demo.arms+2]
pub fn clients_on_a(n: usize) -> usize {
    (0..n)
        .filter(|&i| clients::first_side(i) == Side::A)
        .count()
}

/// When the clients' tokens, signed at `now`, expire.
// i[impl xtask.drain-demo.cluster]
pub fn token_expiry(now: SystemTime) -> SystemTime {
    now + TOKEN_LIFETIME
}

/// When the join wait of an arm that started at `t0` with `n` clients gives up.
// i[impl xtask.drain-demo.arms+2]
pub fn join_deadline(t0: Instant, n: usize) -> Instant {
    t0 + JOIN_BASE + JOIN_PER_CLIENT * n as u32
}

/// What the join wait does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinWait {
    /// Every client has joined the room.
    Done,
    /// The deadline passed with clients still missing: the arm cannot run.
    TimedOut,
    /// Still waiting, and a progress line is due.
    Progress,
    /// Still waiting.
    Wait,
}

/// The join wait's step at `now`, with `joined` of `n` clients in the room, its deadline and the
/// time of its last progress line (or of its start).
// i[impl xtask.drain-demo.arms+2]
// i[impl xtask.drain-demo.command+2]
pub fn join_wait(
    joined: usize,
    n: usize,
    now: Instant,
    deadline: Instant,
    last_line: Instant,
) -> JoinWait {
    if joined == n {
        JoinWait::Done
    } else if now > deadline {
        JoinWait::TimedOut
    } else if now.saturating_duration_since(last_line) >= PROGRESS_EVERY {
        JoinWait::Progress
    } else {
        JoinWait::Wait
    }
}

/// Whether A's exit is seen for the first time: it has exited and was not seen exited before.
// i[impl xtask.drain-demo.arms+2]
pub fn exit_newly_seen(seen_before: bool, exited: bool) -> bool {
    !seen_before && exited
}

/// What the wait for A's clients to move to B does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveWait {
    /// A has exited and all its clients are back on B.
    Done,
    /// More than [`MOVE_TIMEOUT`] has passed since the signal, before the move was done.
    GaveUp,
    /// Still waiting.
    Wait,
}

/// The move wait's step: whether A has exited, how many of its `n_a` clients have joined again on
/// B, and the time since the signal.
// i[impl xtask.drain-demo.arms+2]
pub fn move_wait(exited: bool, moved: usize, n_a: usize, since_signal: Duration) -> MoveWait {
    if exited && moved == n_a {
        MoveWait::Done
    } else if since_signal > MOVE_TIMEOUT {
        MoveWait::GaveUp
    } else {
        MoveWait::Wait
    }
}

/// How long A's registration is waited for after the signal (the watch, and the read at the first
/// close): the lease TTL plus [`LEASE_GRACE`].
// i[impl xtask.drain-demo.arms+2]
pub fn registration_cap(lease_ttl: Duration) -> Duration {
    lease_ttl + LEASE_GRACE
}

/// The arm cannot measure a registration that was never there.
// i[impl xtask.drain-demo.arms+2]
pub fn require_registered(present: bool, arm: &str, key: &str) -> anyhow::Result<()> {
    if !present {
        anyhow::bail!("[{arm}] gw-a is not registered in etcd under {key}");
    }
    Ok(())
}

/// What the etcd read at the first close found: whether the key was gone (`None`: no read).
// i[impl xtask.drain-demo.measures+3]
pub fn gone_at_read(present: anyhow::Result<bool>) -> Option<bool> {
    present.ok().map(|present| !present)
}

/// A duration in milliseconds.
// i[impl xtask.drain-demo.measures+3]
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The milliseconds from the arm's start `t0` to `at` (0 when `at` is earlier).
// i[impl xtask.drain-demo.measures+3]
pub fn at_ms(t0: Instant, at: Instant) -> f64 {
    ms(at.saturating_duration_since(t0))
}

/// When (ms since the arm started) the registration was seen gone, `gone` after the signal at
/// `signal_at_ms`.
// i[impl xtask.drain-demo.measures+3]
pub fn gone_at_ms(signal_at_ms: f64, gone: Option<Duration>) -> Option<f64> {
    gone.map(|d| signal_at_ms + ms(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(clients: u64, rate: u32, lease_ttl_secs: u64, arm: Vec<Arm>) -> Args {
        Args {
            clients,
            rate,
            lease_ttl_secs,
            arm,
            holdfast: None,
            release: false,
        }
    }

    // i[verify xtask.drain-demo.command+2]
    #[test]
    fn without_an_arm_asked_for_the_control_arm_runs_then_the_graceful_arm() {
        assert_eq!(arms(&[]), vec![Arm::Control, Arm::Graceful, Arm::Recovery]);
        assert_eq!(arms(&[Arm::Graceful]), vec![Arm::Graceful]);
        assert_eq!(
            arms(&[Arm::Graceful, Arm::Control]),
            vec![Arm::Graceful, Arm::Control]
        );
    }

    // i[verify xtask.drain-demo.outputs+2]
    #[test]
    fn the_echoed_command_line_names_what_differs_from_the_defaults() {
        assert_eq!(
            command_line(&args(100, 20, 10, vec![])),
            "cargo xtask drain-demo --clients 100"
        );
        assert_eq!(
            command_line(&args(4, 50, 10, vec![])),
            "cargo xtask drain-demo --clients 4 --rate 50"
        );
        assert_eq!(
            command_line(&args(4, 20, 3, vec![])),
            "cargo xtask drain-demo --clients 4 --lease-ttl-secs 3"
        );
        assert_eq!(
            command_line(&args(2, 7, 1, vec![Arm::Graceful, Arm::Control])),
            "cargo xtask drain-demo --clients 2 --rate 7 --lease-ttl-secs 1 \
             --arm graceful --arm control"
        );
    }

    // i[verify xtask.drain-demo.arms+2]
    #[test]
    fn each_arms_stream_starts_a_million_after_the_last() {
        assert_eq!(first_seq(0), 0);
        assert_eq!(first_seq(1), 1_000_000);
        assert_eq!(first_seq(2), 2_000_000);
    }

    // i[verify xtask.drain-demo.arms+2]
    #[test]
    fn half_the_clients_start_on_a_and_an_odd_one_out_too() {
        assert_eq!(clients_on_a(2), 1);
        assert_eq!(clients_on_a(3), 2);
        assert_eq!(clients_on_a(4), 2);
        assert_eq!(clients_on_a(1000), 500);
    }

    // i[verify xtask.drain-demo.cluster]
    #[test]
    fn tokens_last_an_hour() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            token_expiry(now),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_003_600)
        );
    }

    // i[verify xtask.drain-demo.arms+2]
    #[test]
    fn the_join_wait_allows_a_minute_plus_50_ms_a_client() {
        let t0 = Instant::now();
        assert_eq!(join_deadline(t0, 0), t0 + Duration::from_secs(60));
        assert_eq!(join_deadline(t0, 2), t0 + Duration::from_millis(60_100));
        assert_eq!(join_deadline(t0, 1000), t0 + Duration::from_secs(110));
    }

    // i[verify xtask.drain-demo.arms+2]
    // i[verify xtask.drain-demo.command+2]
    #[test]
    fn the_join_wait_ends_when_all_joined_times_out_past_its_deadline_and_reports_every_2_s() {
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs(60);
        let ns = Duration::from_nanos(1);
        // All joined: done, even past the deadline.
        assert_eq!(join_wait(4, 4, t0, deadline, t0), JoinWait::Done);
        assert_eq!(join_wait(4, 4, deadline + ns, deadline, t0), JoinWait::Done);
        // One missing: waiting until exactly the deadline, timed out one past it.
        let last = deadline - Duration::from_secs(1);
        assert_eq!(join_wait(3, 4, deadline, deadline, last), JoinWait::Wait);
        assert_eq!(
            join_wait(3, 4, deadline + ns, deadline, last),
            JoinWait::TimedOut
        );
        // A progress line 2 s after the last one, not before.
        let at = |d: Duration| t0 + Duration::from_secs(10) + d;
        let last = at(Duration::ZERO);
        assert_eq!(join_wait(3, 4, last, deadline, last), JoinWait::Wait);
        assert_eq!(
            join_wait(3, 4, at(PROGRESS_EVERY - ns), deadline, last),
            JoinWait::Wait
        );
        assert_eq!(
            join_wait(3, 4, at(PROGRESS_EVERY), deadline, last),
            JoinWait::Progress
        );
        assert_eq!(
            join_wait(0, 4, at(Duration::from_secs(5)), deadline, last),
            JoinWait::Progress
        );
        // Past the deadline with a line due too: the timeout wins.
        assert_eq!(
            join_wait(3, 4, deadline + ns, deadline, t0),
            JoinWait::TimedOut
        );
    }

    // i[verify xtask.drain-demo.arms+2]
    #[test]
    fn an_exit_is_recorded_once() {
        assert!(exit_newly_seen(false, true));
        assert!(!exit_newly_seen(false, false));
        assert!(!exit_newly_seen(true, true));
        assert!(!exit_newly_seen(true, false));
    }

    // i[verify xtask.drain-demo.arms+2]
    #[test]
    fn the_move_wait_ends_once_a_exited_and_its_clients_are_on_b_or_after_30_s() {
        let s = Duration::from_secs;
        let ns = Duration::from_nanos(1);
        assert_eq!(move_wait(true, 2, 2, s(1)), MoveWait::Done);
        // Done wins over the timeout.
        assert_eq!(move_wait(true, 2, 2, s(31)), MoveWait::Done);
        // All moved but A still running, or A gone and a client still missing: wait.
        assert_eq!(move_wait(false, 2, 2, s(1)), MoveWait::Wait);
        assert_eq!(move_wait(true, 1, 2, s(1)), MoveWait::Wait);
        assert_eq!(move_wait(false, 1, 2, s(1)), MoveWait::Wait);
        // More moved than A had (a miscount) is not done either.
        assert_eq!(move_wait(true, 3, 2, s(1)), MoveWait::Wait);
        // Given up one past 30 s, not at exactly 30 s.
        assert_eq!(move_wait(true, 1, 2, MOVE_TIMEOUT), MoveWait::Wait);
        assert_eq!(move_wait(false, 2, 2, MOVE_TIMEOUT + ns), MoveWait::GaveUp);
        assert_eq!(move_wait(true, 1, 2, MOVE_TIMEOUT + ns), MoveWait::GaveUp);
        assert_eq!(MOVE_TIMEOUT, s(30));
    }

    // i[verify xtask.drain-demo.arms+2]
    #[test]
    fn the_registration_is_waited_for_the_lease_ttl_plus_5_s() {
        assert_eq!(
            registration_cap(Duration::from_secs(10)),
            Duration::from_secs(15)
        );
        assert_eq!(
            registration_cap(Duration::from_secs(1)),
            Duration::from_secs(6)
        );
    }

    // i[verify xtask.drain-demo.arms+2]
    #[test]
    fn an_arm_without_a_registration_fails() {
        assert!(require_registered(true, "control", "/k").is_ok());
        let err = require_registered(false, "control", "/k").unwrap_err();
        assert_eq!(
            err.to_string(),
            "[control] gw-a is not registered in etcd under /k"
        );
    }

    // i[verify xtask.drain-demo.measures+3]
    #[test]
    fn the_read_at_the_first_close_finds_the_key_gone_when_it_is_absent() {
        assert_eq!(gone_at_read(Ok(false)), Some(true));
        assert_eq!(gone_at_read(Ok(true)), Some(false));
        assert_eq!(gone_at_read(Err(anyhow::anyhow!("etcd failed"))), None);
    }

    // i[verify xtask.drain-demo.measures+3]
    #[test]
    fn the_log_records_milliseconds_from_the_start_and_the_signal() {
        assert_eq!(ms(Duration::from_micros(1500)), 1.5);
        assert_eq!(ms(Duration::from_secs(3)), 3000.0);
        assert_eq!(ms(Duration::ZERO), 0.0);
        let t0 = Instant::now();
        assert_eq!(at_ms(t0, t0 + Duration::from_millis(250)), 250.0);
        assert_eq!(at_ms(t0 + Duration::from_millis(250), t0), 0.0);
        assert_eq!(
            gone_at_ms(1000.0, Some(Duration::from_millis(3))),
            Some(1003.0)
        );
        assert_eq!(
            gone_at_ms(1000.0, Some(Duration::from_secs(2))),
            Some(3000.0)
        );
        assert_eq!(gone_at_ms(1000.0, None), None);
    }
}
