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
