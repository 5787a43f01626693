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
// i[verify node.certs.expiry]
#[test]
fn certs_table_is_pinned() {
    let certs = json!([
        {"hostname": "app.example.org", "source": "acme", "state": "valid",
         "not_after": 1_800_000_000u64, "not_after_text": "Fri, 15 Jan 2027 08:00:00 GMT",
         "expires_in_days": 40,
         "next": 1_790_000_000u64, "next_in_secs": 5_000_000u64, "failures": 0,
         "last_error": null, "clear": null},
        {"hostname": "old.example.org", "source": "acme", "state": "due",
         "not_after": 1_700_000_000u64, "not_after_text": "Tue, 14 Nov 2023 22:13:20 GMT",
         "expires_in_days": -3, "next": 1_700_000_000u64, "next_in_secs": 0u64, "failures": 4,
         "last_error": "unreachable: connection refused", "clear": null},
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

// i[verify node.workloads.state+2]
#[test]
fn workloads_table_says_where_each_container_stands() {
    let workloads = json!([
        {"name": "api", "image": "reg/api:1", "image_state": "present", "detail": null,
         "run": {"state": "running", "container": "c1", "running_for_secs": 3725, "lasted": true,
                 "counters": {"starts": 1, "restarts": 0, "start_failures": 0, "crash_loops": 0},
                 "last_exit": null}},
        {"name": "batch", "image": "reg/batch:1", "image_state": "present", "detail": null,
         "run": {"state": "restarting", "in_secs": 40, "failures": 2, "exit_code": 1,
                 "counters": {"starts": 2, "restarts": 1, "start_failures": 0, "crash_loops": 0},
                 "last_exit": null}},
        {"name": "flaky", "image": "reg/flaky:1", "image_state": "present", "detail": null,
         "run": {"state": "crash_looping", "in_secs": 300, "failures": 7, "exit_code": 137,
                 "counters": {"starts": 7, "restarts": 6, "start_failures": 0, "crash_loops": 1},
                 "last_exit": null}},
        {"name": "new", "image": "reg/new:1", "image_state": "waiting",
         "detail": "2 failures, next in 9s: refused",
         "run": {"state": "waiting_for_image", "detail": "waiting: 2 failures",
                 "counters": {"starts": 0, "restarts": 0, "start_failures": 0, "crash_loops": 0},
                 "last_exit": null}},
        {"name": "once", "image": "reg/once:1", "image_state": "present", "detail": null,
         "run": {"state": "stopped_by_policy", "exit_code": 0,
                 "counters": {"starts": 1, "restarts": 0, "start_failures": 0, "crash_loops": 0},
                 "last_exit": null}},
        {"name": "pulled-only", "image": "reg/p:1", "image_state": "pulling", "detail": "1/3 layers"},
        {"name": "web", "image": "reg/web:1", "image_state": "present", "detail": null,
         "run": {"state": "waiting_for_dependencies", "waiting_on": ["db", "cache"],
                 "counters": {"starts": 0, "restarts": 0, "start_failures": 0, "crash_loops": 0},
                 "last_exit": null}}
    ]);
    let table = render::workloads(&workloads);
    assert!(
        table.contains("waiting for dependencies: db, cache"),
        "{table}"
    );
    assert!(table.contains("running for 1h 2m"), "{table}");
    assert!(
        table.contains("restarting in 40s after attempt 2, exit code 1"),
        "{table}"
    );
    assert!(table.contains("crash-looping: restarting in 5m 0s after attempt 7, exit code 137"));
    assert!(table.contains("stopped by policy, exit code 0"), "{table}");
    insta::assert_snapshot!(table);
}

// r[verify node.workload.health]
#[test]
fn a_workloads_health_follows_its_state() {
    let run = |health: serde_json::Value| {
        json!([{"name": "web", "image": "reg/web:1", "image_state": "present", "detail": null,
                "run": {"state": "running", "container": "c1", "running_for_secs": 12,
                        "lasted": true, "health": health,
                        "counters": {"starts": 1, "restarts": 0, "start_failures": 0,
                                     "crash_loops": 0},
                        "last_exit": null}}])
    };
    assert!(render::workloads(&run(json!("healthy"))).contains("running for 12s (healthy)"));
    assert!(render::workloads(&run(json!("unhealthy"))).contains("running for 12s (unhealthy)"));
    assert!(
        render::workloads(&run(json!("starting"))).contains("running for 12s (health: starting)")
    );
    let plain = render::workloads(&run(serde_json::Value::Null));
    assert!(plain.contains("running for 12s "), "{plain}");
    assert!(!plain.contains('('), "{plain}");
}

// i[verify node.gateway.status]
// i[verify node.gateway.cli+2]
#[test]
fn gateway_line_and_table_are_pinned() {
    let gateway = json!({
        "replica": {"id": "gw-a", "address": "10.0.0.5:7443"},
        "ready": true, "draining": false, "connections": 3, "authenticated": 2,
        "messages_in": 14, "messages_out": 40, "slow_consumer_drops": 1, "last_drain": null
    });
    let status = json!({
        "node_id": "node-1", "phase": "running", "uptime_secs": 42,
        "modules": [], "workloads": [], "faults": [], "gateway": gateway
    });
    insta::assert_snapshot!("status_with_gateway", render::status(&status));
    let drained = json!({
        "replica": {"id": "gw-a", "address": "10.0.0.5:7443"},
        "ready": false, "draining": true, "connections": 0, "authenticated": 0,
        "messages_in": 14, "messages_out": 43, "slow_consumer_drops": 1,
        "last_drain": {
            "code": 1012, "connections": 3, "close_frames_sent": 3, "closed_in_time": 2,
            "force_closed": 1, "deregistration": "done",
            "routes": {"cleared": 2, "stale": 0, "absent": 0, "failed": 0, "unfinished": 0},
            "steps": [
                {"step": "stop_accepting", "deadline_ms": 1000, "took_ms": 2},
                {"step": "close", "deadline_ms": 2000, "took_ms": 1},
                {"step": "handshake", "deadline_ms": 3500, "took_ms": 1499},
                {"step": "routing", "deadline_ms": 5000, "took_ms": 3}
            ],
            "cap_ms": 5000, "took_ms": 1505, "problems": ["routing: 1 deletes failed, 0 unanswered"]
        }
    });
    insta::assert_snapshot!("gateway_after_a_drain", render::gateway(&drained));
    assert_eq!(
        render::delivery("room lobby", &json!({"queued": 3, "slow_consumers": 1})),
        "pushed to room lobby: queued for 3 connections, 1 slow consumers disconnected\n"
    );
}

/// Whether `c` may not reach the terminal raw: a control character (C0, DEL, C1) other than
/// the layout's own newline, or a bidirectional-text or line-separator format character.
fn forbidden(c: char) -> bool {
    c != '\n'
        && (c.is_control()
            || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}'))
}

/// Every table and line the CLI renders, with `x` in every string a peer or a container can
/// supply, and `message` as the fault's message.
fn rendered(x: &str, message: &str) -> Vec<(&'static str, String)> {
    let status = json!({
        "node_id": x, "phase": x, "uptime_secs": 1,
        "modules": [{"name": x, "group": x, "supervisor": {"state": x},
                     "health": {"state": x, "reason": x}, "starts": 1, "restarts": 0,
                     "failures": 0, "crash_loop": false, "last_error": x}],
        "workloads": [{"name": x, "image": x, "image_state": x, "detail": x,
                       "run": {"state": x, "detail": x}}],
        "faults": [{"subject": {"module": x, "name": x}, "kind": x, "message": message,
                    "failures": 3}],
        "gateway": {"replica": {"id": x, "address": x}, "ready": true, "draining": false,
                    "connections": 1, "authenticated": 1, "messages_in": 1, "messages_out": 1,
                    "slow_consumer_drops": 0,
                    "last_drain": {"code": 1012, "connections": 1, "close_frames_sent": 1,
                                   "closed_in_time": 1, "force_closed": 0, "took_ms": 1,
                                   "cap_ms": 5000, "steps": [{"step": x, "took_ms": 1}],
                                   "problems": [x]}}
    });
    let certs = json!([{"hostname": x, "source": x, "state": "blocked", "not_after_text": x,
                        "next_in_secs": 5, "failures": 1, "last_error": x}]);
    let forwards = json!({"listen": x, "fingerprint": x, "forwards": [
        {"connection": x, "forward": x, "client": x, "target": x, "flows": 1,
         "stats": {"to_target_datagrams": 1, "to_target_bytes": 1, "from_target_datagrams": 1,
                   "from_target_bytes": 1, "dropped": {}, "transient_errors": 0,
                   "last_error": x}}]});
    vec![
        ("status", render::status(&status)),
        ("gateway", render::gateway(&status["gateway"])),
        ("certs", render::certs(&certs)),
        ("forwards", render::forwards(&forwards)),
        (
            "delivery",
            render::delivery(x, &json!({"queued": x, "slow_consumers": 0})),
        ),
    ]
}

/// Text with the characters a hostile peer or container would send, and any other.
fn hostile_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop::collection::vec(
        prop_oneof![
            any::<char>(),
            (0u8..0x20).prop_map(char::from),
            (0x7fu32..0xa0).prop_map(|c| char::from_u32(c).unwrap()),
            Just('\u{1b}'),
            Just('\n'),
            Just('\r'),
            Just('\u{202e}'),
            "[a-z ]".prop_map(|s| s.chars().next().unwrap()),
        ],
        0..24,
    )
    .prop_map(String::from_iter)
}

proptest::proptest! {
    // i[verify node.cli.escape]
    #[test]
    fn no_peer_text_reaches_the_terminal_raw_or_adds_a_line(x in hostile_text()) {
        let baseline = rendered("x", "m");
        for ((name, out), (_, base)) in rendered(&x, "m").into_iter().zip(&baseline) {
            let raw: Vec<char> = out.chars().filter(|c| forbidden(*c)).collect();
            proptest::prop_assert!(raw.is_empty(), "{name}: {raw:?} in {out:?}");
            proptest::prop_assert_eq!(out.lines().count(), base.lines().count(), "{}: {:?}", name, out);
        }
    }

    // i[verify node.cli.escape]
    #[test]
    fn escaping_leaves_nothing_raw_and_twice_is_once(x in hostile_text()) {
        let once = render::escape(&x);
        proptest::prop_assert!(!once.chars().any(|c| forbidden(c) || c == '\n'), "{:?}", once);
        proptest::prop_assert_eq!(render::escape(&once), once);
    }

    // i[verify node.cli.escape]
    #[test]
    fn a_fault_message_keeps_its_lines_and_nothing_else(message in hostile_text()) {
        let base = render::faults(&json!([{"subject": {"module": "w", "name": "n"}, "kind": "k",
                                           "message": "m", "failures": 1}]));
        let out = render::faults(&json!([{"subject": {"module": "w", "name": "n"}, "kind": "k",
                                          "message": message, "failures": 1}]));
        let raw: Vec<char> = out.chars().filter(|c| forbidden(*c)).collect();
        proptest::prop_assert!(raw.is_empty(), "{raw:?} in {out:?}");
        // One line in the table; the rest of a multi-line message in a block under it: a blank
        // line, a heading, and one line for each of its further lines.
        let lines = message.lines().count();
        let extra = if lines > 1 { lines + 1 } else { 0 };
        proptest::prop_assert_eq!(out.lines().count(), base.lines().count() + extra, "{:?}", out);
    }
}

// i[verify node.cli.escape]
#[test]
fn a_fault_with_escape_sequences_prints_them_visibly() {
    let faults = json!([
        {"subject": {"module": "workload", "name": "web\u{1b}[2J"}, "kind": "crash_loop",
         "failures": 3,
         "message": "crash loop: exit code 1 after 2s; last log lines:\nstarting \u{1b}[31mred\u{1b}[0m\n\u{1b}]0;owned\u{7}title\rover\u{9b}2J\ttab\r\ndone"},
        {"subject": {"module": "forward", "name": "10.0.0.2:53"}, "kind": "transient",
         "failures": 1, "message": "client \u{202e}evil\u{8} said \u{7f}"}
    ]);
    let out = render::faults(&faults);
    assert!(!out.chars().any(forbidden), "{out:?}");
    assert!(out.contains(r"web\x1b[2J"), "{out}");
    assert_eq!(
        render::escape("a\u{1b}\r\n\t\u{7}\u{9b}\u{202e}C:\\x"),
        r"a\x1b\r\n\t\x07\u{9b}\u{202e}C:\x"
    );
    insta::assert_snapshot!(out);
}

// i[verify node.cli.reload]
// r[verify node.reload.generation]
#[test]
fn a_reload_and_the_config_generation_are_pinned() {
    let applied = json!({
        "generation": 3,
        "loaded_at": "2026-12-06T01:02:03Z",
        "modules": {"forward": "changed", "gateway": "unchanged", "issuance": "appeared", "workload": "disappeared"},
        "needs_restart": ["node", "admin"],
        "took_ms": 412,
        "failed": {"forward": "start failed: address in use\u{1b}[2J"}
    });
    insta::assert_snapshot!("reload_applied", render::reload(&applied));
    let status = json!({
        "node_id": "node-1",
        "phase": "running",
        "uptime_secs": 42,
        "config": {"generation": 3, "loaded_at": "2026-12-06T01:02:03Z"},
        "modules": [],
        "workloads": [],
        "faults": []
    });
    insta::assert_snapshot!(
        "status_with_config_generation",
        render::status(&status).lines().next().unwrap()
    );
}
