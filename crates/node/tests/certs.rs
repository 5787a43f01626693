//! The issuance module inside a running node: `/v1/certs`, `holdfast certs`, the force-retry and
//! the issuance metrics, against a local certificate provider that is down.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::start;
use nix::sys::signal::Signal;

fn holdfast(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

// r[verify node.issuance.module]
// r[verify node.issuance.metrics+3]
// i[verify node.certs.list]
// i[verify node.certs.retry]
// i[verify node.certs.cli]
#[tokio::test]
async fn a_blocked_hostname_is_shown_faulted_and_cleared_by_certs_retry() {
    // A loopback port nothing listens on: the local provider is down.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let provider = down.local_addr().unwrap();
    drop(down);
    let extra = format!(
        "[issuance]\ntick = \"200ms\"\npacing = {{ base = \"1s\", cap = \"30s\" }}\n\
         block_after = 2\nblock_for = \"30s\"\n\
         [[issuance.hostname]]\nname = \"app.example\"\nsource = \"local\"\n\
         [issuance.local]\nendpoint = {{ tcp = \"{provider}\" }}\n"
    );
    let node = start(&extra, "10s");
    node.until_ready().await;
    let admin = node.admin.to_string();

    // Two failed attempts block the hostname (with an expiry and how to clear it).
    let mut certs = serde_json::Value::Null;
    for _ in 0..300 {
        if let Ok(body) = node.get("/v1/certs").await {
            certs = serde_json::from_str(&body).unwrap();
            if certs[0]["state"] == "blocked" {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let host = &certs[0];
    assert_eq!(host["state"], "blocked", "{certs}");
    assert_eq!(host["hostname"], "app.example");
    assert_eq!(host["source"], "local");
    assert_eq!(host["failures"], 2);
    assert!(host["next_in_secs"].as_u64().unwrap() <= 30, "{host}");
    assert!(host["clear"].as_str().is_some(), "{host}");
    assert!(host["last_error"].as_str().is_some(), "{host}");

    // One fault on the node's board for the blocked hostname.
    let faults: serde_json::Value =
        serde_json::from_str(&node.get("/v1/faults").await.unwrap()).unwrap();
    let blocked: Vec<_> = faults
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["subject"]["module"] == "issuance")
        .collect();
    assert_eq!(blocked.len(), 1, "{faults}");
    assert_eq!(blocked[0]["subject"]["name"], "app.example");
    assert_eq!(blocked[0]["kind"], "blocked");

    // Metrics: attempts by source and outcome, blocked hostnames.
    let metrics = node.get("/metrics").await.unwrap();
    assert!(
        metrics
            .contains("holdfast_issuance_attempts_total{source=\"local\",outcome=\"failure\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("holdfast_issuance_blocked 1"), "{metrics}");
    // No certificate is stored, so no hostname has days to expiry.
    assert!(
        !metrics.contains("holdfast_issuance_days_to_expiry{"),
        "{metrics}"
    );

    // The CLI's table.
    let (code, table, _) = holdfast(&["certs", "--admin", &admin]);
    assert_eq!(code, 0);
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    for column in [
        "HOSTNAME",
        "SOURCE",
        "STATE",
        "NOT AFTER",
        "NEXT",
        "FAILURES",
        "LAST ERROR",
    ] {
        assert!(header.contains(column), "{table}");
    }
    let row = lines.next().unwrap();
    assert!(
        row.starts_with("app.example") && row.contains("local") && row.contains("blocked"),
        "{table}"
    );
    assert!(row.contains("holdfast certs retry app.example"), "{table}");
    let (code, json, _) = holdfast(&["certs", "--admin", &admin, "--json"]);
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json[0]["hostname"], "app.example");

    // Force-retry is mutating: refused over TCP without the token, and nothing changes.
    let (code, _, err) = holdfast(&["certs", "retry", "app.example", "--admin", &admin]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("401"), "{err}");
    let still: serde_json::Value =
        serde_json::from_str(&node.get("/v1/certs").await.unwrap()).unwrap();
    assert_eq!(still[0]["state"], "blocked");
    // An unknown hostname is 404.
    let token = node.dir.path().join("token");
    let token = token.to_str().unwrap();
    let (code, _, err) = holdfast(&[
        "certs",
        "retry",
        "nope.example",
        "--admin",
        &admin,
        "--token-file",
        token,
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("404"), "{err}");
    // With the token: the block is cleared and the streak reset.
    let (code, out, err) = holdfast(&[
        "certs",
        "retry",
        "app.example",
        "--admin",
        &admin,
        "--token-file",
        token,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("app.example"), "{out}");
    let after: serde_json::Value =
        serde_json::from_str(&node.get("/v1/certs").await.unwrap()).unwrap();
    assert_ne!(after[0]["state"], "blocked", "{after}");
    assert!(after[0]["failures"].as_u64().unwrap() <= 1, "{after}");

    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("\"module\":\"issuance\""), "{log}");
}

// i[verify node.certs.list]
#[tokio::test]
async fn without_an_issuance_section_certs_says_it_is_not_configured() {
    let node = start("", "10s");
    node.until_ready().await;
    let (code, _, err) = holdfast(&["certs", "--admin", &node.admin.to_string()]);
    assert_eq!(code, 1);
    assert!(err.contains("404") && err.contains("[issuance]"), "{err}");
    node.signal(Signal::SIGTERM);
    let (code, _, _) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0);
}

// r[verify node.issuance.metrics+3]
#[tokio::test]
async fn the_http01_responders_connections_and_refusals_are_in_the_metrics() {
    // A port for the responder, and an ACME directory nothing answers on (no attempt succeeds;
    // the responder runs all the same).
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let http01 = free.local_addr().unwrap();
    drop(free);
    let extra = format!(
        "[issuance]\ntick = \"1h\"\n\
         [[issuance.hostname]]\nname = \"app.example\"\nsource = \"acme\"\n\
         [issuance.acme]\ndirectory = \"https://127.0.0.1:9/dir\"\nhttp01_bind = \"{http01}\"\n\
         http01_limits = {{ max_connections_per_address = 1 }}\n"
    );
    let node = start(&extra, "10s");
    node.until_ready().await;
    // The module's start (which binds the responder) runs on its own task: /v1/certs answers
    // once it has published its handle, so after the bind.
    let mut published = false;
    for _ in 0..200 {
        if node.get("/v1/certs").await.is_ok() {
            published = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(published, "the issuance module never came up");

    // One connection holds the address's one place; a second is closed at accept.
    let _held = tokio::net::TcpStream::connect(http01).await.unwrap();
    let _over = tokio::net::TcpStream::connect(http01).await.unwrap();
    let want = [
        "holdfast_issuance_http01_connections 1",
        "holdfast_issuance_http01_refused_total{reason=\"per_source_limit\"} 1",
        "holdfast_issuance_http01_refused_total{reason=\"connection_limit\"} 0",
        "holdfast_issuance_http01_refused_total{reason=\"header_timeout\"} 0",
        "holdfast_issuance_http01_refused_total{reason=\"idle_timeout\"} 0",
    ];
    // The responder accepts on its own task: wait for it to have seen both.
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = node.get("/metrics").await.unwrap();
        if want.iter().all(|series| metrics.contains(series)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for series in want {
        assert!(metrics.contains(series), "{series} missing:\n{metrics}");
    }
}

// r[verify issue.acme.tls-alpn01.bind]
#[test]
fn check_config_refuses_a_tls_alpn01_bind_on_the_http01_port_at_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c2.toml");
    std::fs::write(
        &path,
        "[node]\n\n[issuance]\n\
         [[issuance.certificate]]\nnames = [\"a.example\"]\nsource = \"acme\"\n\
         [[issuance.certificate]]\nnames = [\"b.example\"]\nsource = \"acme\"\n\
         challenge = \"tls-alpn-01\"\n\
         [issuance.acme]\ndirectory = \"https://acme.example/d\"\n\
         http01_bind = \"0.0.0.0:8080\"\ntls_alpn01_bind = \"0.0.0.0:8080\"\n",
    )
    .unwrap();
    let (code, out, err) = holdfast(&["check-config", path.to_str().unwrap()]);
    assert_ne!(code, 0, "{out}{err}");
    let at = format!("{}:", path.display());
    assert!(
        err.contains(&at) && err.contains("issuance.acme.tls_alpn01_bind: 0.0.0.0:8080 overlaps"),
        "{err}"
    );
}

// The gateway's own certificate validated over TLS-ALPN-01 on the gateway's port would never be
// first issued (the gateway answers there, and cannot start without it): refused at its key.
// i[verify node.gateway.tls-alpn01-first]
#[test]
fn check_config_refuses_the_gateways_own_certificate_over_tls_alpn01_on_its_port() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("token.key");
    std::fs::write(&key, [7u8; 64]).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let write = |name: &str, challenge: &str, listen: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!(
                "[node]\n\n[issuance]\n\
                 [[issuance.certificate]]\nnames = [\"gw.example.org\"]\nsource = \"acme\"\n\
                 challenge = \"{challenge}\"\n\
                 [issuance.acme]\ndirectory = \"https://acme.example/d\"\n\
                 tls_alpn01_bind = \"0.0.0.0:18443\"\n\
                 [gateway]\nlisten = \"{listen}\"\ntoken_key_file = \"{}\"\n\
                 [gateway.tls]\nfrom_issuance = \"gw.example.org\"\n",
                key.display()
            ),
        )
        .unwrap();
        path
    };
    let cycle = write("cycle.toml", "tls-alpn-01", "127.0.0.1:18443");
    let (code, out, err) = holdfast(&["check-config", cycle.to_str().unwrap()]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.starts_with(&format!(
            "{}:14:1: gateway.tls.from_issuance: \"gw.example.org\" is validated over TLS-ALPN-01 \
             on the gateway's own port 18443",
            cycle.display()
        )) && err.contains("challenge = \"http-01\" or \"dns-01\"")
            && err.contains("cert and key"),
        "{err}"
    );
    // Either way out passes: another challenge, or the gateway on another port.
    for ok in [
        write("http.toml", "http-01", "127.0.0.1:18443"),
        write("port.toml", "tls-alpn-01", "127.0.0.1:18444"),
    ] {
        let (code, out, err) = holdfast(&["check-config", ok.to_str().unwrap()]);
        assert_eq!(code, 0, "{}: {out}{err}", ok.display());
    }
}

// r[verify node.issuance.metrics+3]
#[tokio::test]
async fn the_tls_alpn01_listeners_connections_and_refusals_are_in_the_metrics() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tls_alpn01 = free.local_addr().unwrap();
    drop(free);
    let extra = format!(
        "[issuance]\ntick = \"1h\"\n\
         [[issuance.certificate]]\nnames = [\"app.example\"]\nsource = \"acme\"\n\
         challenge = \"tls-alpn-01\"\n\
         [issuance.acme]\ndirectory = \"https://127.0.0.1:9/dir\"\n\
         tls_alpn01_bind = \"{tls_alpn01}\"\n\
         tls_alpn01_limits = {{ max_connections_per_address = 1 }}\n"
    );
    let node = start(&extra, "10s");
    node.until_ready().await;
    let mut published = false;
    for _ in 0..200 {
        if node.get("/v1/certs").await.is_ok() {
            published = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(published, "the issuance module never came up");

    // One connection holds the address's one place; a second is closed at accept.
    let _held = tokio::net::TcpStream::connect(tls_alpn01).await.unwrap();
    let _over = tokio::net::TcpStream::connect(tls_alpn01).await.unwrap();
    let want = [
        "holdfast_issuance_tls_alpn01_connections 1",
        "holdfast_issuance_tls_alpn01_refused_total{reason=\"per_source_limit\"} 1",
        "holdfast_issuance_tls_alpn01_refused_total{reason=\"connection_limit\"} 0",
        "holdfast_issuance_tls_alpn01_refused_total{reason=\"handshake_timeout\"} 0",
        "holdfast_issuance_tls_alpn01_refused_total{reason=\"protocol\"} 0",
        "holdfast_issuance_tls_alpn01_refused_total{reason=\"name\"} 0",
        "holdfast_issuance_tls_alpn01_refused_total{reason=\"malformed\"} 0",
        // Without an HTTP-01 certificate no responder runs.
        "holdfast_issuance_http01_connections 0",
    ];
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = node.get("/metrics").await.unwrap();
        if want.iter().all(|series| metrics.contains(series)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for series in want {
        assert!(metrics.contains(series), "{series} missing:\n{metrics}");
    }
}
