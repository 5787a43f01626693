//! The CLI's finish: shell completions, man pages, `holdfast version` and the build-info metric,
//! and `forward udp --node` with a name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

const SUBCOMMANDS: [&str; 14] = [
    "run",
    "check-config",
    "status",
    "faults",
    "modules",
    "workloads",
    "drain",
    "gateway",
    "forwards",
    "forward",
    "certs",
    "completions",
    "man",
    "version",
];

// i[verify node.cli.completions]
#[test]
fn completions_for_bash_zsh_and_fish_cover_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, script, err) = holdfast(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell}: no {sub}");
        }
        // A flag of a nested subcommand, too.
        assert!(script.contains("token-file"), "{shell}");
    }
    let (code, _, err) = holdfast(&["completions", "tcsh"]);
    assert_eq!(code, 2, "{err}");
}

// i[verify node.cli.man]
#[test]
fn man_writes_a_page_for_the_command_and_each_subcommand_that_man_renders() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let (code, printed, err) = holdfast(&["man", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for page in [
        "holdfast.1",
        "holdfast-run.1",
        "holdfast-forward-udp.1",
        "holdfast-version.1",
    ] {
        let path = out.join(page);
        assert!(path.is_file(), "no {page}: {printed}");
        assert!(printed.contains(path.to_str().unwrap()), "{printed}");
    }
    let root = std::fs::read_to_string(out.join("holdfast.1")).unwrap();
    assert!(root.starts_with(".ie"), "{root}");
    assert!(root.contains(".TH holdfast 1"), "{root}");
    // Rendered by the system's man, when there is one.
    if let Ok(rendered) = Command::new("man")
        .arg("-l")
        .arg(out.join("holdfast-forward-udp.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
    {
        let text = String::from_utf8_lossy(&rendered.stdout);
        assert!(rendered.status.success(), "{text}");
        assert!(text.contains("SYNOPSIS"), "{text}");
        assert!(text.contains("--pin"), "{text}");
    } else {
        holdfast_test_support::services::skip_loudly(
            "man",
            "not installed: the pages were written but not rendered",
            holdfast_test_support::services::FailWhen::Never,
        );
    }
    // A directory that cannot be created: exit 1, saying where.
    let blocked = dir.path().join("file");
    std::fs::write(&blocked, "").unwrap();
    let (code, _, err) = holdfast(&["man", blocked.join("man1").to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.starts_with("holdfast: man pages in "), "{err}");
}

// i[verify node.version]
#[tokio::test]
async fn version_names_version_commit_and_features_and_metrics_say_the_same() {
    let (code, text, err) = holdfast(&["version"]);
    assert_eq!(code, 0, "{err}");
    let info = holdfast::version::build_info();
    assert_eq!(text, info.text());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], format!("holdfast {}", env!("CARGO_PKG_VERSION")));
    assert!(lines[1].starts_with("commit: "), "{text}");
    assert!(lines[2].starts_with("features: "), "{text}");
    let (code, json, _) = holdfast(&["version", "--json"]);
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));

    let node = common::start("", "5s");
    let metrics = node.get("/metrics").await.unwrap();
    let line = format!(
        "holdfast_build_info{{version=\"{}\",commit=\"{}\",features=\"{}\"}} 1",
        info.version,
        info.commit_text(),
        info.features_text()
    );
    assert!(metrics.contains(&line), "no {line} in {metrics}");
    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
}

// i[verify node.forward.cli.resolve]
#[test]
fn forward_udp_says_plainly_when_the_nodes_name_does_not_resolve() {
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["forward", "udp", "127.0.0.1:0", "--to", "127.0.0.1:53"])
        .args(["--node", "no-such-node.invalid:4433", "--pin"])
        .arg(format!("sha256:{}", "0".repeat(64)))
        .env("HOLDFAST_FORWARD_TOKEN", "resolve-test-token-0123456789")
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("holdfast: cannot resolve the node no-such-node.invalid:4433: "),
        "{err}"
    );
    // A malformed --node is a usage error.
    let (code, _, err) = holdfast(&[
        "forward",
        "udp",
        "127.0.0.1:0",
        "--to",
        "127.0.0.1:53",
        "--node",
        "::1:4433",
        "--pin",
        "x",
    ]);
    assert_eq!(code, 2, "{err}");
}

const FORWARD_TOKEN: &str = "fwd-name-never-logged-0c5e91b3f6a4";

// i[verify node.forward.cli.resolve]
#[tokio::test]
async fn forward_udp_reaches_a_node_by_name() {
    let target = {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while let Ok((n, peer)) = socket.recv_from(&mut buf) {
                let _ = socket.send_to(&buf[..n], peer);
            }
        });
        addr
    };
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("forward.tokens");
    std::fs::write(&tokens, format!("{FORWARD_TOKEN}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extra = format!(
        "[forward]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\nallow = [\"{target}\"]\n",
        tokens.display()
    );
    let node = common::start_in(dir, &extra, "10s", None);
    node.until_ready().await;
    let mut view = serde_json::Value::Null;
    for _ in 0..500 {
        if let Ok(body) = node.get("/v1/forwards").await {
            view = serde_json::from_str(&body).unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listen: std::net::SocketAddr = view["listen"].as_str().unwrap().parse().unwrap();
    let pin = view["fingerprint"].as_str().unwrap().to_owned();
    let by_name = format!("localhost:{}", listen.port());

    let mut client = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["forward", "udp", "127.0.0.1:0", "--to", &target.to_string()])
        .args(["--node", &by_name, "--pin", &pin, "--token-file"])
        .arg(&tokens)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = client.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut events = Vec::new();
    loop {
        let line = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        events.push(event.clone());
        if event["event"] == "opened" {
            break;
        }
        assert!(Instant::now() < deadline, "{events:?}");
    }
    // It names the node as given and the address the name resolved to.
    assert_eq!(events[0]["event"], "listening", "{events:?}");
    assert_eq!(events[0]["node"], by_name.as_str());
    let address: std::net::SocketAddr = events[0]["address"].as_str().unwrap().parse().unwrap();
    assert!(address.ip().is_loopback() && address.port() == listen.port());
    assert!(
        events.iter().any(|e| e["event"] == "connected"),
        "{events:?}"
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(client.id()).unwrap()),
        Signal::SIGTERM,
    )
    .unwrap();
    let status = client.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
}
