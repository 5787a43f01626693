//! The fault board: one fault per subject, filed on escalation, cleared on recovery.

// Test helpers outside #[test] fns: a broken setup should fail loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant, SystemTime};

use holdfast_lifecycle::{FaultBoard, Subject};
use holdfast_retry::{KeyedGate, Policy, Reason, Transition};

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

fn bare(reason: Reason) -> Transition<()> {
    Transition {
        key: (),
        attempt: 1,
        reason,
        failures: 3,
        next_attempt_at: None,
        escalation: None,
    }
}

// r[verify lifecycle.fault.board]
#[test]
fn a_gates_escalation_files_one_fault_and_its_recovery_clears_it() {
    let board = FaultBoard::new();
    let policy = Policy::builder().escalate_after(2).build().unwrap();
    let mut gate = KeyedGate::new(policy);
    let subject = Subject::new("pull", "app:1");
    let mut now = Instant::now();
    fn fail(gate: &mut KeyedGate<&'static str>, now: &mut Instant) -> Transition<&'static str> {
        let token = gate.begin(&"app:1", *now).unwrap();
        let t = gate.fail(token, *now, None);
        *now = t.next_attempt_at.unwrap();
        t
    }

    let first = fail(&mut gate, &mut now);
    board.apply(
        subject.clone(),
        &first,
        "unreachable",
        "dial tcp: refused",
        at(0),
    );
    assert!(
        board.is_empty(),
        "a failure below the threshold files nothing"
    );

    let second = fail(&mut gate, &mut now);
    board.apply(
        subject.clone(),
        &second,
        "unreachable",
        "dial tcp: refused",
        at(10),
    );
    let fault = board.get(&subject).expect("filed on escalation");
    assert_eq!(
        (fault.kind.as_str(), fault.failures, fault.since),
        ("unreachable", 2, at(10))
    );

    let third = fail(&mut gate, &mut now);
    board.apply(
        subject.clone(),
        &third,
        "too_many_requests",
        "429 toomanyrequests",
        at(30),
    );
    assert_eq!(board.len(), 1, "one fault per subject");
    let fault = board.get(&subject).unwrap();
    assert_eq!(fault.kind, "too_many_requests");
    assert_eq!(fault.message, "429 toomanyrequests");
    assert_eq!(fault.failures, 3);
    assert_eq!(
        (fault.since, fault.updated),
        (at(10), at(30)),
        "since kept, updated refreshed"
    );

    let token = gate.begin(&"app:1", now).unwrap();
    let recovered = gate.succeed(token, now);
    board.apply(subject.clone(), &recovered, "", "", at(40));
    assert!(board.get(&subject).is_none());
    assert!(board.is_empty());
}

// r[verify lifecycle.fault.board]
#[test]
fn filing_is_idempotent_per_subject_and_clones_share_the_board() {
    let board = FaultBoard::new();
    let other = board.clone();
    let s = Subject::new("issuance", "example.org");
    assert!(board.file(s.clone(), "blocked", "5 failures", 5, at(0)));
    assert!(!other.file(s.clone(), "blocked", "6 failures", 6, at(5)));
    assert_eq!(board.len(), 1);
    let f = board.get(&s).unwrap();
    assert_eq!(
        (f.failures, f.message.as_str(), f.since, f.updated),
        (6, "6 failures", at(0), at(5))
    );
    assert!(other.clear(&s));
    assert!(!board.clear(&s));
    assert!(board.is_empty());
}

// r[verify lifecycle.fault.board]
#[test]
fn a_success_clears_superseded_and_released_attempts_change_nothing() {
    let board = FaultBoard::new();
    let s = Subject::new("forward", "peer-1");
    board.file(s.clone(), "unreachable", "first", 5, at(0));
    for reason in [Reason::Superseded, Reason::Released] {
        board.apply(s.clone(), &bare(reason), "other", "changed", at(1));
        let f = board.get(&s).unwrap();
        assert_eq!(
            (f.kind.as_str(), f.message.as_str(), f.updated),
            ("unreachable", "first", at(0))
        );
    }
    board.apply(
        s.clone(),
        &bare(Reason::Expired),
        "stalled",
        "no progress",
        at(2),
    );
    assert_eq!(board.get(&s).unwrap().kind, "stalled");
    board.apply(s.clone(), &bare(Reason::Succeeded), "", "", at(3));
    assert!(board.is_empty(), "any success clears an open fault");
    board.apply(
        s.clone(),
        &bare(Reason::Failed {
            hint_applied: false,
        }),
        "x",
        "y",
        at(4),
    );
    assert!(board.is_empty(), "a plain failure files nothing");
}

// r[verify lifecycle.fault.board]
#[test]
fn faults_are_listed_by_subject_for_all_modules_or_one() {
    let board = FaultBoard::new();
    board.file(Subject::new("pull", "b"), "k", "m", 1, at(0));
    board.file(Subject::new("issuance", "z"), "k", "m", 1, at(0));
    board.file(Subject::new("pull", "a"), "k", "m", 1, at(0));
    let all: Vec<_> = board
        .list()
        .into_iter()
        .map(|f| f.subject.to_string())
        .collect();
    assert_eq!(all, ["issuance/z", "pull/a", "pull/b"]);
    let pull: Vec<_> = board
        .of_module("pull")
        .into_iter()
        .map(|f| f.subject.name)
        .collect();
    assert_eq!(pull, ["a", "b"]);
    assert_eq!(board.clear_module("pull"), 2);
    assert_eq!(board.clear_module("pull"), 0);
    assert_eq!(board.len(), 1);
}

#[test]
fn faults_serialise_for_the_admin_api() {
    let board = FaultBoard::new();
    board.file(
        Subject::new("pull", "app:1"),
        "not_found",
        "manifest unknown",
        1,
        at(0),
    );
    let json = serde_json::to_value(board.list()).unwrap();
    assert_eq!(
        json[0]["subject"],
        serde_json::json!({"module": "pull", "name": "app:1"})
    );
    assert_eq!(json[0]["kind"], "not_found");
    assert_eq!(json[0]["failures"], 1);
}

/// A failure only ever refreshes a fault that is open when it is applied: one cleared by another
/// thread in the meantime (the subject recovered, or the node cleared the module) stays cleared.
// r[verify lifecycle.fault.board]
#[test]
fn a_failure_racing_a_clear_never_files_the_fault_again() {
    let board = FaultBoard::new();
    let s = Subject::new("pull", "image r/a:1");
    let failed = bare(Reason::Failed {
        hint_applied: false,
    });
    // The clearing thread files at at(0) and clears; the failing thread only refreshes, at at(1).
    // A fault whose `since` is at(1) was filed by a failure.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clearer = {
        let (board, s, stop) = (board.clone(), s.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                board.file(s.clone(), "unreachable", "down", 5, at(0));
                board.clear(&s);
            }
        })
    };
    let mut refiled = 0u32;
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut rounds = 0u64;
    while Instant::now() < deadline && refiled == 0 {
        for _ in 0..1000 {
            board.apply(s.clone(), &failed, "unreachable", "still down", at(1));
            if board.get(&s).is_some_and(|f| f.since == at(1)) {
                refiled += 1;
            }
        }
        rounds += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    clearer.join().unwrap();
    assert_eq!(
        refiled, 0,
        "a failure filed a fault that had been cleared ({rounds} rounds)"
    );
}
