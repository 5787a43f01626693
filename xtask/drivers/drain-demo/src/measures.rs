//! What one arm measured, computed from the raw logs the run collected: pure functions of the
//! logs, so every figure in the report can be checked on fixed input.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

/// The two replicas: A is the one that is stopped, B the survivor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Side {
    /// The replica stopped in each arm.
    A,
    /// The replica that stays up.
    B,
}

/// The ways replica A is stopped, and how its clients come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Arm {
    /// SIGKILL: no drain, the process just exits.
    Control,
    /// SIGTERM: the node drains the gateway before it exits.
    Graceful,
    /// SIGTERM, and the clients rejoin with `since` (the last position they received), so the
    /// room's history gives them what was published while they were away.
    Recovery,
}

impl Arm {
    /// The arm's name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Control => "control",
            Arm::Graceful => "graceful",
            Arm::Recovery => "recovery",
        }
    }

    /// The signal that stops replica A in this arm.
    // i[impl xtask.drain-demo.arms+2]
    pub fn signal(self) -> nix::sys::signal::Signal {
        match self {
            Arm::Control => nix::sys::signal::Signal::SIGKILL,
            Arm::Graceful | Arm::Recovery => nix::sys::signal::Signal::SIGTERM,
        }
    }

    /// Whether the arm's clients rejoin with `since`.
    pub fn recovers(self) -> bool {
        self == Arm::Recovery
    }
}

/// The code recorded when a connection ended without a close frame (RFC 6455's "abnormal").
pub const NO_CLOSE_FRAME: u16 = 1006;

/// One end of a client's connection, as the client saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Close {
    /// Milliseconds since the arm started.
    pub at_ms: f64,
    /// The replica the connection was on.
    pub side: Side,
    /// The close frame's code; `None` when the connection ended without one.
    pub code: Option<u16>,
}

/// Everything one client saw during an arm.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientLog {
    /// The replica the client first connected to.
    pub first: Side,
    /// When each of its sessions had joined the room (ms since the arm started), and where.
    pub joined: Vec<(f64, Side)>,
    /// Each connection's end before the arm finished (the client's own final close is not one).
    pub closes: Vec<Close>,
    /// The stream's sequence numbers received (possibly repeated).
    pub seqs: Vec<u64>,
    /// Stream frames received on B after having started on A.
    pub survivor_frames: u64,
    /// The position of the last stream message received (what a rejoin sends as `since`).
    pub last_pos: Option<String>,
    /// Rejoins answered with `"gap":true` (the history no longer reached back).
    pub gaps: u64,
}

/// One push the API accepted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pushed {
    /// Its sequence number.
    pub seq: u64,
    /// When the request was sent (ms since the arm started).
    pub sent_ms: f64,
    /// When the API's answer arrived: the message was published by then.
    pub accepted_ms: f64,
}

/// The raw record of one arm.
#[derive(Debug, Clone, PartialEq)]
pub struct ArmLog {
    /// Which arm.
    pub arm: Arm,
    /// When A was signalled (ms since the arm started).
    pub signal_at_ms: f64,
    /// When A's process had exited, if it did.
    pub exited_at_ms: Option<f64>,
    /// When A's etcd key was first seen absent, if it was within the watch.
    pub registration_gone_at_ms: Option<f64>,
    /// How long after the signal the key was watched.
    pub registration_watched_ms: f64,
    /// Whether A's key was gone when read right after the first close one of A's clients
    /// received (`None`: no close, or the read failed).
    pub registration_gone_at_first_close: Option<bool>,
    /// The pushes the API accepted.
    pub sent: Vec<Pushed>,
    /// Pushes the API refused or that failed.
    pub push_errors: u64,
    /// Every client's log.
    pub clients: Vec<ClientLog>,
}

/// One arm's figures, as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArmMeasures {
    /// `control` or `graceful`.
    pub arm: Arm,
    /// The signal A received.
    pub signal: String,
    /// All clients.
    pub clients: usize,
    /// Clients that started on A.
    pub clients_on_a: usize,
    /// Close codes A's clients received, per code ([`NO_CLOSE_FRAME`] for none).
    pub close_codes: BTreeMap<u16, usize>,
    /// A's clients that noticed the stop (their connection ended after the signal).
    pub noticed: usize,
    /// Median time from the signal to a client's close or error.
    pub notice_p50_ms: Option<f64>,
    /// 95th percentile of the same.
    pub notice_p95_ms: Option<f64>,
    /// The earliest of the same: the first close a client of A saw.
    pub first_notice_ms: Option<f64>,
    /// How long A's registration outlived the signal; `None` when it was still there at the end of
    /// the watch.
    pub registration_outlived_ms: Option<f64>,
    /// How long the registration was watched after the signal.
    pub registration_watched_ms: f64,
    /// Whether an etcd read issued as soon as the first client of A had received its close found
    /// the registration gone (`None`: no close, or the read failed). A read, not the watch's time:
    /// under load the watch reports the delete tens of milliseconds late.
    pub registration_gone_at_first_close: Option<bool>,
    /// From the signal to A's process exit.
    pub stop_ms: Option<f64>,
    /// Stream messages the push API accepted.
    pub messages_sent: u64,
    /// The rate the stream achieved (accepted pushes per second, first send to last answer); below
    /// the asked rate when pushes took longer than their period.
    pub stream_rate_per_s: Option<f64>,
    /// Pushes that failed.
    pub push_errors: u64,
    /// Sent messages × clients.
    pub deliveries_expected: u64,
    /// Distinct (client, message) pairs received.
    pub deliveries_received: u64,
    /// Expected minus received.
    pub lost: u64,
    /// Of those, lost by clients that started on A.
    pub lost_by_a_clients: u64,
    /// Deliveries owed to a joined connection: messages pushed after a session had joined the
    /// room and published before that session ended (on A: before the signal), summed over all
    /// sessions.
    pub deliveries_expected_while_joined: u64,
    /// Of those, not received: what the stop lost from connections that were there.
    pub lost_while_joined: u64,
    /// Deliveries published in a client's reconnect gap: after its session ended (on A: after
    /// the signal) and before its next session joined.
    pub deliveries_in_gap: u64,
    /// Of those, never received (without recovery, all of them: there is no replay).
    pub missed_in_gap: u64,
    /// Stream messages a client received more than once, summed over clients.
    pub duplicates: u64,
    /// Rejoins told the history no longer reached back.
    pub history_gaps: u64,
    /// Of A's clients, those that joined the room again on B.
    pub reconnected_to_b: usize,
    /// Stream frames A's clients received on B after reconnecting.
    pub frames_on_survivor: u64,
    /// Connections on B that ended during the arm (the survivor should keep every one).
    pub closes_on_b: usize,
}

/// The nearest-rank percentile `p` (0–100) of `values`.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Accepted pushes per second over the stream's span; `None` under two pushes.
fn stream_rate(sent: &[Pushed]) -> Option<f64> {
    let first = sent.iter().map(|p| p.sent_ms).min_by(f64::total_cmp)?;
    let last = sent.iter().map(|p| p.accepted_ms).max_by(f64::total_cmp)?;
    (sent.len() >= 2 && last > first).then(|| sent.len() as f64 * 1000.0 / (last - first))
}

/// Computes an arm's figures from its log.
// i[impl xtask.drain-demo.measures+3]
pub fn measure(log: &ArmLog) -> ArmMeasures {
    let sent: HashSet<u64> = log.sent.iter().map(|p| p.seq).collect();
    let on_a: Vec<&ClientLog> = log.clients.iter().filter(|c| c.first == Side::A).collect();
    let mut close_codes = BTreeMap::new();
    let mut notice = Vec::new();
    for client in &on_a {
        // The first end of its connection to A after the signal is how it noticed the stop.
        if let Some(close) = client
            .closes
            .iter()
            .find(|c| c.side == Side::A && c.at_ms >= log.signal_at_ms)
        {
            *close_codes
                .entry(close.code.unwrap_or(NO_CLOSE_FRAME))
                .or_insert(0) += 1;
            notice.push(close.at_ms - log.signal_at_ms);
        }
    }
    let received = |c: &ClientLog| {
        c.seqs
            .iter()
            .filter(|s| sent.contains(s))
            .collect::<HashSet<_>>()
            .len() as u64
    };
    let per_client = sent.len() as u64;
    let deliveries_received: u64 = log.clients.iter().map(received).sum();
    let lost_by_a_clients: u64 = on_a.iter().map(|c| per_client - received(c)).sum();
    let expected = per_client * log.clients.len() as u64;
    let (mut owed, mut owed_lost) = (0u64, 0u64);
    let (mut in_gap, mut missed_in_gap) = (0u64, 0u64);
    for client in &log.clients {
        let got: HashSet<u64> = client.seqs.iter().copied().collect();
        // The gap between session k's end and session k+1's join.
        for (k, close) in client.closes.iter().enumerate() {
            let Some(&(rejoined_at, _)) = client.joined.get(k + 1) else {
                continue;
            };
            let mut left_at = close.at_ms;
            if close.side == Side::A {
                left_at = left_at.min(log.signal_at_ms.max(client.joined[k].0));
            }
            for push in &log.sent {
                if push.accepted_ms > left_at && push.sent_ms < rejoined_at {
                    in_gap += 1;
                    if !got.contains(&push.seq) {
                        missed_in_gap += 1;
                    }
                }
            }
        }
        for (k, &(joined_at, side)) in client.joined.iter().enumerate() {
            // Session k ends with the k-th close (a close is only recorded after a joined session).
            let mut ended_at = client.closes.get(k).map_or(f64::INFINITY, |c| c.at_ms);
            // A stopping replica owes what was published before its stop began; what it is sent
            // later, while the client has not read its close yet, is not owed (a slow client
            // reads its close late, and a killed replica cannot deliver anything).
            if side == Side::A {
                ended_at = ended_at.min(log.signal_at_ms);
            }
            for push in &log.sent {
                if push.sent_ms >= joined_at && push.accepted_ms <= ended_at {
                    owed += 1;
                    if !got.contains(&push.seq) {
                        owed_lost += 1;
                    }
                }
            }
        }
    }
    let first_notice_ms = notice.iter().copied().min_by(f64::total_cmp);
    let registration_outlived_ms = log
        .registration_gone_at_ms
        .map(|t| (t - log.signal_at_ms).max(0.0));
    ArmMeasures {
        arm: log.arm,
        signal: log.arm.signal().as_str().to_owned(),
        clients: log.clients.len(),
        clients_on_a: on_a.len(),
        close_codes,
        noticed: notice.len(),
        notice_p50_ms: percentile(&notice, 50.0),
        notice_p95_ms: percentile(&notice, 95.0),
        first_notice_ms,
        registration_outlived_ms,
        registration_watched_ms: log.registration_watched_ms,
        registration_gone_at_first_close: log.registration_gone_at_first_close,
        stop_ms: log.exited_at_ms.map(|t| t - log.signal_at_ms),
        messages_sent: per_client,
        stream_rate_per_s: stream_rate(&log.sent),
        push_errors: log.push_errors,
        deliveries_expected: expected,
        deliveries_received,
        lost: expected - deliveries_received,
        lost_by_a_clients,
        deliveries_expected_while_joined: owed,
        lost_while_joined: owed_lost,
        deliveries_in_gap: in_gap,
        missed_in_gap,
        duplicates: log
            .clients
            .iter()
            .map(|c| {
                let sent_seqs: Vec<&u64> = c.seqs.iter().filter(|s| sent.contains(s)).collect();
                (sent_seqs.len() - sent_seqs.iter().collect::<HashSet<_>>().len()) as u64
            })
            .sum(),
        history_gaps: log.clients.iter().map(|c| c.gaps).sum(),
        reconnected_to_b: on_a
            .iter()
            .filter(|c| c.joined.iter().any(|&(_, side)| side == Side::B))
            .count(),
        frames_on_survivor: on_a.iter().map(|c| c.survivor_frames).sum(),
        closes_on_b: log
            .clients
            .iter()
            .map(|c| c.closes.iter().filter(|x| x.side == Side::B).count())
            .sum(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fixed arm: four clients (two on A), six messages, A signalled at 1000 ms.
    pub(crate) fn fixture(arm: Arm) -> ArmLog {
        let (code, notice) = match arm {
            Arm::Control => (None, [4.0, 6.0]),
            Arm::Graceful | Arm::Recovery => (Some(1012), [30.0, 40.0]),
        };
        let a_client = |i: usize| ClientLog {
            first: Side::A,
            joined: vec![(100.0 + i as f64, Side::A), (2500.0 + i as f64, Side::B)],
            closes: vec![Close {
                at_ms: 1000.0 + notice[i],
                side: Side::A,
                code,
            }],
            // Missed seq 3 and 4 (pushed while joined to A); 5 arrived twice.
            seqs: vec![1, 2, 5, 5, 6],
            survivor_frames: 3,
            last_pos: None,
            gaps: u64::from(arm == Arm::Recovery),
        };
        let b_client = |i: usize| ClientLog {
            first: Side::B,
            joined: vec![(110.0 + i as f64, Side::B)],
            closes: vec![],
            seqs: vec![1, 2, 3, 4, 5, 6, 99],
            survivor_frames: 0,
            last_pos: None,
            gaps: 0,
        };
        ArmLog {
            arm,
            signal_at_ms: 1000.0,
            exited_at_ms: Some(if arm == Arm::Control { 1002.0 } else { 1180.0 }),
            registration_gone_at_ms: (arm != Arm::Control).then_some(1003.5),
            registration_watched_ms: if arm == Arm::Control { 15000.0 } else { 3.5 },
            registration_gone_at_first_close: Some(arm != Arm::Control),
            // One push every 200 ms from 200 ms; each takes 10 ms.
            sent: (1..=6)
                .map(|seq| Pushed {
                    seq,
                    sent_ms: 200.0 * seq as f64,
                    accepted_ms: 200.0 * seq as f64 + 10.0,
                })
                .collect(),
            push_errors: 0,
            clients: vec![a_client(0), b_client(0), a_client(1), b_client(1)],
        }
    }

    // i[verify xtask.drain-demo.measures+3]
    #[test]
    fn an_arm_is_measured_from_its_logs() {
        let m = measure(&fixture(Arm::Control));
        assert_eq!(m.clients, 4);
        assert_eq!(m.clients_on_a, 2);
        // No close frame is counted as 1006.
        assert_eq!(m.close_codes, BTreeMap::from([(NO_CLOSE_FRAME, 2)]));
        assert_eq!(m.noticed, 2);
        assert_eq!(m.notice_p50_ms, Some(4.0));
        assert_eq!(m.notice_p95_ms, Some(6.0));
        assert_eq!(m.registration_outlived_ms, None);
        assert_eq!(m.stop_ms, Some(2.0));
        assert_eq!(m.signal, "SIGKILL");
        assert_eq!(m.messages_sent, 6);
        // Six pushes from 200 ms to 1210 ms.
        assert_eq!(m.stream_rate_per_s, Some(6000.0 / 1010.0));
        assert_eq!(stream_rate(&fixture(Arm::Control).sent[..1]), None);
        assert_eq!(m.deliveries_expected, 24);
        // Repeats and seqs that were never sent do not count.
        assert_eq!(m.deliveries_received, 2 * 4 + 2 * 6);
        assert_eq!(m.lost, 4);
        assert_eq!(m.lost_by_a_clients, 4);
        assert_eq!(m.reconnected_to_b, 2);
        assert_eq!(m.frames_on_survivor, 6);
        assert_eq!(m.closes_on_b, 0);
        assert_eq!(m.first_notice_ms, Some(4.0));
        // Still registered when the first close arrived.
        assert_eq!(m.registration_gone_at_first_close, Some(false));
        // A's clients were owed seq 1-4 on A (5 was published after the signal), B's all six.
        assert_eq!(m.deliveries_expected_while_joined, 2 * 4 + 2 * 6);
        assert_eq!(m.lost_while_joined, 4);

        let g = measure(&fixture(Arm::Graceful));
        assert_eq!(g.close_codes, BTreeMap::from([(1012, 2)]));
        assert_eq!(g.registration_outlived_ms, Some(3.5));
        assert_eq!(g.signal, "SIGTERM");
        assert_eq!(g.stop_ms, Some(180.0));
        assert_eq!(g.first_notice_ms, Some(30.0));
        assert_eq!(g.registration_gone_at_first_close, Some(true));
        // Their connections lasted until 1030 ms, but seq 5 (published by 1010 ms, after the
        // signal) is not owed by a replica that had begun to stop.
        assert_eq!(g.deliveries_expected_while_joined, 2 * 4 + 2 * 6);
        assert_eq!(g.lost_while_joined, 4);
        // The gap of each A client: from the signal (1000 ms) to its rejoin at 2500 ms: seq 5
        // and 6, which it received.
        assert_eq!((g.deliveries_in_gap, g.missed_in_gap), (4, 0));
        // Seq 5 twice, at each A client; the 99 that was never sent is no repeat.
        assert_eq!(g.duplicates, 2);
        assert_eq!(g.history_gaps, 0);
        let r = measure(&fixture(Arm::Recovery));
        assert_eq!((r.signal.as_str(), r.history_gaps), ("SIGTERM", 2));
        let mut missed = fixture(Arm::Recovery);
        missed.clients[0].seqs = vec![1, 2, 3, 4, 5];
        assert_eq!(
            measure(&missed).missed_in_gap,
            1,
            "seq 6 came in the gap and never arrived"
        );
    }

    // i[verify xtask.drain-demo.measures+3]
    #[test]
    fn closes_before_the_signal_do_not_count_as_noticing() {
        let mut log = fixture(Arm::Control);
        log.clients[0].closes.insert(
            0,
            Close {
                at_ms: 500.0,
                side: Side::A,
                code: Some(1000),
            },
        );
        let m = measure(&log);
        assert_eq!(m.close_codes, BTreeMap::from([(NO_CLOSE_FRAME, 2)]));
        assert_eq!(m.noticed, 2);
    }

    // i[verify xtask.drain-demo.measures+3]
    #[test]
    fn a_client_of_a_that_joined_only_on_a_has_not_reconnected_to_b() {
        let mut log = fixture(Arm::Graceful);
        // The first of A's clients never joined again: only its session on A is left.
        log.clients[0].joined.truncate(1);
        let m = measure(&log);
        assert_eq!(m.clients_on_a, 2);
        assert_eq!(m.reconnected_to_b, 1);
        // With neither of A's clients back on B, none reconnected: B's own clients, joined on B
        // from the start, do not count.
        log.clients[2].joined.truncate(1);
        assert_eq!(measure(&log).reconnected_to_b, 0);
    }

    // i[verify xtask.drain-demo.arms+2]
    #[test]
    fn the_control_arm_kills_and_the_graceful_arm_terminates() {
        use nix::sys::signal::Signal;
        assert_eq!(Arm::Control.signal(), Signal::SIGKILL);
        assert_eq!(Arm::Graceful.signal(), Signal::SIGTERM);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(10.0));
        assert_eq!(percentile(&v, 95.0), Some(19.0));
        assert_eq!(percentile(&v, 100.0), Some(20.0));
        assert_eq!(percentile(&[7.0], 95.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
