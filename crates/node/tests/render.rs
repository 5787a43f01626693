//! The CLI's tables, pinned.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use holdfast::render;
use serde_json::json;

// i[verify node.cli.output]
#[test]
fn status_tables_are_pinned() {
    let status = json!({
        "node_id": "node-1",
        "phase": "running",
        "uptime_secs": 42,
        "modules": [
            {"name": "pull", "group": "pull", "supervisor": {"state": "running", "confirmed": false},
             "health": {"state": "degraded", "reason": "cannot reach the Docker daemon"},
             "starts": 1, "restarts": 0, "failures": 0, "crash_loop": false, "last_error": null},
            {"name": "gateway", "group": "gateway", "supervisor": {"state": "waiting", "next_start_in_secs": 7.6},
             "health": {"state": "stopped"}, "starts": 4, "restarts": 3, "failures": 4, "crash_loop": true,
             "last_error": "module failed: address in use"}
        ],
        "workloads": [
            {"name": "web", "image": "registry.example/web:1", "image_state": "present", "detail": null}
        ],
        "faults": [
            {"subject": {"module": "pull", "name": "docker daemon"}, "kind": "backend_unreachable",
             "message": "cannot reach the Docker daemon", "failures": 1,
             "since": {"secs_since_epoch": 0, "nanos_since_epoch": 0},
             "updated": {"secs_since_epoch": 0, "nanos_since_epoch": 0}}
        ]
    });
    insta::assert_snapshot!(render::status(&status));
    insta::assert_snapshot!(
        "empty",
        render::faults(&json!([])) + &render::workloads(&json!([]))
    );
}

// i[verify node.certs.cli]
#[test]
fn certs_table_is_pinned() {
    let certs = json!([
        {"hostname": "app.example.org", "source": "acme", "state": "valid",
         "not_after": 1_800_000_000u64, "not_after_text": "Fri, 15 Jan 2027 08:00:00 GMT",
         "next": 1_790_000_000u64, "next_in_secs": 5_000_000u64, "failures": 0,
         "last_error": null, "clear": null},
        {"hostname": "internal.example.org", "source": "local", "state": "blocked",
         "not_after": null, "not_after_text": null, "next": 1_700_000_000u64,
         "next_in_secs": 4_000u64, "failures": 6,
         "last_error": "unreachable: connection refused", "clear": "holdfast certs retry HOST"},
        {"hostname": "new.example.org", "source": "acme", "state": "debounced",
         "not_after": null, "not_after_text": null, "next": 1_700_000_000u64,
         "next_in_secs": 290u64, "failures": 1, "last_error": "server: 503", "clear": null}
    ]);
    insta::assert_snapshot!(render::certs(&certs));
    assert_eq!(render::certs(&json!([])), "no hostnames configured\n");
}
