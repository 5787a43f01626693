//! The node identity and the per-module jitter seeds derived from it.

// Test helpers outside #[test] fns: a broken setup should fail loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::cell::Cell;
use std::time::Instant;

use holdfast_lifecycle::{IdentityError, IdentitySource, NodeIdentity};
use holdfast_retry::{KeyedGate, Policy};

fn machine_id(contents: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    if let Some(contents) = contents {
        std::fs::write(dir.path().join("machine-id"), contents).unwrap();
    }
    dir
}

fn resolve(
    configured: Option<&str>,
    machine: Option<&str>,
    host: Option<&str>,
) -> Result<NodeIdentity, IdentityError> {
    let dir = machine_id(machine);
    NodeIdentity::resolve_with(configured, &dir.path().join("machine-id"), || {
        host.map(String::from)
    })
}

// r[verify lifecycle.identity+2]
#[test]
fn the_configured_id_wins_then_the_machine_id_then_the_host_name() {
    let id = resolve(Some("  node-a \n"), Some("m1"), Some("h1")).unwrap();
    assert_eq!((id.id(), id.source()), ("node-a", IdentitySource::Config));
    let id = resolve(None, Some("0123abcd\n"), Some("h1")).unwrap();
    assert_eq!(
        (id.id(), id.source()),
        ("0123abcd", IdentitySource::MachineId)
    );
    let id = resolve(None, None, Some(" h1\n")).unwrap();
    assert_eq!((id.id(), id.source()), ("h1", IdentitySource::Hostname));
}

// r[verify lifecycle.identity+2]
#[test]
fn empty_values_are_skipped_and_an_empty_configured_id_is_an_error() {
    assert_eq!(
        resolve(Some(" \t\n"), Some("m1"), Some("h1")),
        Err(IdentityError::EmptyConfigured)
    );
    let id = resolve(None, Some(" \n"), Some("h1")).unwrap();
    assert_eq!(id.source(), IdentitySource::Hostname);
    let err = resolve(None, Some(""), Some("  ")).unwrap_err();
    assert!(matches!(err, IdentityError::Unavailable { .. }), "{err:?}");
    assert!(
        err.to_string().contains("node.id"),
        "the error says how to fix it: {err}"
    );
    assert!(matches!(
        resolve(None, None, None),
        Err(IdentityError::Unavailable { .. })
    ));
}

// r[verify lifecycle.identity+2]
#[test]
fn the_host_name_is_not_asked_for_when_a_machine_id_is_there() {
    let dir = machine_id(Some("m1"));
    let asked = Cell::new(false);
    let id = NodeIdentity::resolve_with(None, &dir.path().join("machine-id"), || {
        asked.set(true);
        Some("h1".into())
    })
    .unwrap();
    assert_eq!(id.id(), "m1");
    assert!(!asked.get());
}

#[test]
fn the_real_system_has_an_identity() {
    // On any Linux machine one of /etc/machine-id or the host name is there.
    let id = NodeIdentity::resolve(None).unwrap();
    assert!(!id.id().trim().is_empty());
    assert_ne!(id.source(), IdentitySource::Config);
}

// r[verify lifecycle.identity.seed]
#[test]
fn seeds_are_pinned_values_of_identity_and_module() {
    // Pinned: a change re-jitters every node and breaks agreement with persisted history.
    let a = resolve(Some("node-a"), None, None).unwrap();
    let b = resolve(Some("node-b"), None, None).unwrap();
    // FNV-1a 64 over "node-a" 0xff "pull" 0xff (checked against an independent implementation).
    assert_eq!(a.seed("pull"), 0xf9c9_26e4_2976_829c);
    assert_eq!(a.seed("issuance"), 0xdf96_2771_06d7_3394);
    assert_eq!(b.seed("pull"), 0xacfd_8732_79e1_c941);
    // The same id from another source gives the same seed: only the id matters.
    let from_host = resolve(None, None, Some("node-a")).unwrap();
    assert_eq!(from_host.seed("pull"), a.seed("pull"));
    // The split between id and module is part of the hash.
    let ab = resolve(Some("ab"), None, None).unwrap();
    let a_ = resolve(Some("a"), None, None).unwrap();
    assert_ne!(ab.seed("c"), a_.seed("bc"));
}

// r[verify lifecycle.identity.seed]
#[test]
fn two_nodes_jitter_the_same_key_and_streak_apart() {
    let now = Instant::now();
    let delays = |node: &str| -> Vec<std::time::Duration> {
        let id = resolve(Some(node), None, None).unwrap();
        let policy = Policy::builder().seed(id.seed("pull")).build().unwrap();
        let mut gate = KeyedGate::new(policy);
        (0..20)
            .map(|i| {
                let key = format!("registry.local/app:{i}");
                let token = gate.begin(&key, now).unwrap();
                gate.fail(token, now, None).next_attempt_at.unwrap() - now
            })
            .collect()
    };
    let (a, b) = (delays("node-a"), delays("node-b"));
    assert_eq!(
        a,
        delays("node-a"),
        "the same node jitters the same way after a restart"
    );
    for (key, (da, db)) in a.iter().zip(&b).enumerate() {
        assert_ne!(
            da, db,
            "key {key}: two nodes must not come back at the same instant"
        );
    }
}

// r[verify lifecycle.identity+2]
#[test]
fn systemds_uninitialized_placeholder_is_no_machine_id() {
    // systemd writes "uninitialized" into /etc/machine-id until first boot completes: every node
    // booting that image would share it, and so their jitter.
    let id = resolve(None, Some("uninitialized\n"), Some("h1")).unwrap();
    assert_eq!((id.id(), id.source()), ("h1", IdentitySource::Hostname));
    assert!(matches!(
        resolve(None, Some("uninitialized\n"), None),
        Err(IdentityError::Unavailable { .. })
    ));
}
