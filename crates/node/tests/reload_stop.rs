//! A reload and the node's stop racing, on the `holdfast` binary as a subprocess (the race is
//! between the process's signals, so only a real process shows it): a stop that begins during a
//! reload is not held up by it, and the reload starts nothing once it began.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Node, write_config};
use nix::sys::signal::Signal;

const TOKEN: &str = "fwd-reload-stop-never-logged-0a9b8c7d";

/// The log's JSON events whose message is `message`.
fn events<'a>(log: &'a str, message: &'a str) -> impl Iterator<Item = serde_json::Value> + 'a {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(move |event| event["message"].as_str() == Some(message))
}

/// Waits (at most 10 s) until the node's log has a line containing `text`.
fn until_logged(node: &Node, text: &str) {
    until_logged_times(node, text, 1);
}

/// Waits (10 s at most) until `text` is in `node`'s log `times` times: the order between the test's
/// processes is read from the node's log, never assumed after a sleep.
fn until_logged_times(node: &Node, text: &str, times: usize) {
    let path = node.dir.path().join("stderr.log");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(&path).unwrap();
        if log.matches(text).count() >= times {
            return;
        }
        assert!(Instant::now() < deadline, "never logged {text:?}: {log}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn forward_section(dir: &Path) -> String {
    let tokens = dir.join("forward.tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    format!(
        "[forward]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\nallow = [\"127.0.0.1:53\"]\n",
        tokens.display()
    )
}

// r[verify node.reload.stopping+2]
// r[verify node.signal.hup+2]
#[tokio::test]
async fn a_reload_still_reading_its_file_when_the_stop_begins_starts_nothing() {
    let hang = "[testing]\nhang_on_stop = true\n";
    let Some(node) = common::start_testing(hang, "4s") else {
        return;
    };
    node.until_ready().await;
    let dir = node.dir.path().to_owned();
    // The next file adds a module; then the config becomes a FIFO, so the reload's read waits
    // for the test to write it.
    let next = {
        let forward = forward_section(&dir);
        let path = write_config(&dir, &format!("{hang}{forward}"), "4s", None);
        std::fs::read(&path).unwrap()
    };
    let config = dir.join("holdfast.toml");
    std::fs::remove_file(&config).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&config)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");

    node.signal(Signal::SIGHUP);
    until_logged(&node, "SIGHUP: reloading the config");
    std::thread::sleep(Duration::from_millis(200));
    node.signal(Signal::SIGTERM);
    until_logged(&node, "SIGTERM: stopping");
    std::thread::sleep(Duration::from_millis(200));
    // The stop hangs in the test module (its share of 4 s): the reload reads its file now.
    let mut writer = std::fs::OpenOptions::new()
        .write(true)
        .open(&config)
        .unwrap();
    writer.write_all(&next).unwrap();
    drop(writer);

    let (_, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(events(&log, "reload: module starting").count(), 0, "{log}");
    assert_eq!(events(&log, "config reloaded").count(), 0, "{log}");
    let refused = events(&log, "reload refused")
        .next()
        .unwrap_or_else(|| panic!("no refusal: {log}"));
    assert!(
        refused["error"].as_str().unwrap().contains("stopping"),
        "{refused}"
    );
}

// r[verify node.reload.stopping+2]
// r[verify node.stop.signal+2]
#[tokio::test]
async fn a_stop_during_a_reloads_stops_keeps_to_the_stop_budget() {
    let Some(node) = common::start_testing("[testing]\nhang_on_stop = true\n", "8s") else {
        return;
    };
    node.until_ready().await;
    // The reload stops the test module, whose stopper hangs until its deadline.
    write_config(node.dir.path(), "", "8s", None);
    node.signal(Signal::SIGHUP);
    // SIGTERM only once the reload has asked the module to stop (a fixed sleep raced a loaded
    // machine's reload, which then had nothing under way for the node's stop to take over).
    until_logged(&node, "reload: module stopping");
    let began = Instant::now();
    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(20));
    let took = began.elapsed();
    // The node's stop does not wait for the reload's (8 s for the hung module) before its own:
    // it takes over the stop under way, within its share of its own budget.
    assert!(took < Duration::from_secs(6), "took {took:?}: {log}");
    assert_eq!(events(&log, "reload: module starting").count(), 0, "{log}");
    assert_eq!(events(&log, "holdfast node stopped").count(), 1, "{log}");
    // The hung module's stop, begun by the reload, is the node's stop plan's to wait for (and
    // fail at the deadline): the stop is not clean.
    let hang = events(&log, "module stopped")
        .find(|e| e["target"] == "holdfast::run" && e["module"] == "testing-hang")
        .unwrap_or_else(|| panic!("the node's stop did not wait for the module: {log}"));
    assert_ne!(hang["outcome"], "Stopped", "{hang}");
    assert_eq!(code, 3, "{log}");
}

// r[verify node.reload.stopping+2]
// r[verify node.reload.live-forward]
#[tokio::test]
async fn a_reload_cut_off_during_its_stops_takes_nothing_live() {
    let hang = "[testing]\nhang_on_stop = true\n";
    let tokens = tempfile::tempdir().unwrap();
    let Some(node) =
        common::start_testing(&format!("{hang}{}", forward_section(tokens.path())), "8s")
    else {
        return;
    };
    node.until_ready().await;
    // The next file removes the test module (whose stop hangs) and narrows the forward's
    // allow-list, a change the forward takes live.
    let forward = forward_section(tokens.path()).replace("127.0.0.1:53", "127.0.0.1:54");
    write_config(node.dir.path(), &forward, "8s", None);
    node.signal(Signal::SIGHUP);
    until_logged(&node, "reload: module stopping");
    node.signal(Signal::SIGTERM);
    let (_, _, log) = node.wait(Duration::from_secs(20));
    assert_eq!(events(&log, "reload: module starting").count(), 0, "{log}");
    assert_eq!(
        events(&log, "reload: the forward module took its new access live").count(),
        0,
        "a reload refused as stopping took the forward's access live: {log}"
    );
    let refused = events(&log, "reload refused")
        .next()
        .unwrap_or_else(|| panic!("no refusal: {log}"));
    assert!(
        refused["error"].as_str().unwrap().contains("stopping"),
        "{refused}"
    );
}

/// `holdfast reload` against `node`'s socket, started (not awaited), killed if dropped.
fn reload_cli(node: &Node) -> common::Reaped {
    let socket = holdfast::admin::client::Target::Unix(node.dir.path().join("admin.sock"));
    common::Reaped(
        std::process::Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .args(["reload", "--json", "--admin", &socket.to_string()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Waits for a `holdfast reload` to end: its exit status and its output.
fn finished(mut cli: common::Reaped) -> (i32, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while cli.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "holdfast reload never ended");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut out = String::new();
    use std::io::Read as _;
    cli.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    cli.stderr.take().unwrap().read_to_string(&mut out).unwrap();
    (cli.try_wait().unwrap().unwrap().code().unwrap_or(-1), out)
}

// r[verify node.reload.serial]
#[tokio::test]
async fn reloads_asked_for_together_run_one_after_the_other_in_order() {
    let node = common::start("", "5s");
    node.until_ready().await;
    let config = node.dir.path().join("holdfast.toml");
    let text = std::fs::read(&config).unwrap();
    std::fs::remove_file(&config).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&config)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    // The first reads the FIFO (and waits there); the second is asked for meanwhile.
    let first = reload_cli(&node);
    until_logged(&node, "reload requested through the admin API");
    std::thread::sleep(Duration::from_millis(200));
    let second = reload_cli(&node);
    until_logged_times(&node, "reload requested through the admin API", 2);
    // Each write is read by one reload: the second reads only after the first ended.
    for _ in 0..2 {
        let mut writer = std::fs::OpenOptions::new()
            .write(true)
            .open(&config)
            .unwrap();
        writer.write_all(&text).unwrap();
        drop(writer);
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, out) = finished(first);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("\"generation\":2"), "{out}");
    let (code, out) = finished(second);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("\"generation\":3"), "{out}");
    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
}

// r[verify node.reload.serial]
#[tokio::test]
async fn a_reload_asked_for_while_the_node_stops_is_refused_and_the_stop_goes_on() {
    let Some(node) = common::start_testing("[testing]\nhang_on_stop = true\n", "4s") else {
        return;
    };
    node.until_ready().await;
    node.signal(Signal::SIGTERM);
    until_logged(&node, "SIGTERM: stopping");
    let (code, out) = finished(reload_cli(&node));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("stopping"), "{out}");
    let (_, _, log) = node.wait(Duration::from_secs(15));
    assert_eq!(events(&log, "config reloaded").count(), 0, "{log}");
    assert_eq!(events(&log, "holdfast node stopped").count(), 1, "{log}");
}

// r[verify node.reload.serial]
#[tokio::test]
async fn reloads_that_waited_together_are_answered_by_one_reload() {
    let node = common::start("", "5s");
    node.until_ready().await;
    let config = node.dir.path().join("holdfast.toml");
    let text = std::fs::read(&config).unwrap();
    std::fs::remove_file(&config).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&config)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    let first = reload_cli(&node);
    until_logged(&node, "reload requested through the admin API");
    std::thread::sleep(Duration::from_millis(200));
    // Three more while the first waits for its file.
    let waiting: Vec<_> = (0..3).map(|_| reload_cli(&node)).collect();
    until_logged_times(&node, "reload requested through the admin API", 4);
    let write = || {
        let mut writer = std::fs::OpenOptions::new()
            .write(true)
            .open(&config)
            .unwrap();
        writer.write_all(&text).unwrap();
    };
    write();
    let (code, out) = finished(first);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("\"generation\":2"), "{out}");
    // One read answers the three: a fourth generation would need another write.
    write();
    for cli in waiting {
        let (code, out) = finished(cli);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("\"generation\":3"), "{out}");
    }
    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{log}");
    assert_eq!(events(&log, "config reloaded").count(), 2, "{log}");
}

// r[verify node.reload.stopping+2]
// r[verify node.stop.second-signal+2]
#[tokio::test]
async fn a_second_signal_during_a_reloads_stops_exits_at_once() {
    let Some(node) = common::start_testing("[testing]\nhang_on_stop = true\n", "8s") else {
        return;
    };
    node.until_ready().await;
    write_config(node.dir.path(), "", "8s", None);
    node.signal(Signal::SIGHUP);
    until_logged(&node, "reload: module stopping");
    node.signal(Signal::SIGTERM);
    until_logged(&node, "SIGTERM: stopping");
    std::thread::sleep(Duration::from_millis(300));
    let began = Instant::now();
    node.signal(Signal::SIGTERM);
    let (code, _, log) = node.wait(Duration::from_secs(20));
    let took = began.elapsed();
    assert!(took < Duration::from_secs(1), "took {took:?}: {log}");
    assert_eq!(code, 4, "{log}");
}

/// Makes `path` a FIFO (replacing the file there).
fn fifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
}

/// A node's stop while one of its reloads hangs reading `hung` (a FIFO no one ever opens to
/// write: opening it to read waits for ever): the stop keeps to its budget and exits cleanly,
/// and the reload starts and takes nothing.
async fn a_stop_is_not_held_by_a_hung_read(node: Node, hung: &Path) {
    node.until_ready().await;
    fifo(hung);
    node.signal(Signal::SIGHUP);
    until_logged(&node, "SIGHUP: reloading the config");
    // A reload that is not hung ends within milliseconds; this one has no outcome yet.
    std::thread::sleep(Duration::from_millis(500));
    let log = std::fs::read_to_string(node.dir.path().join("stderr.log")).unwrap();
    assert_eq!(events(&log, "config reloaded").count(), 0, "{log}");
    assert_eq!(events(&log, "reload refused").count(), 0, "{log}");
    let began = Instant::now();
    node.signal(Signal::SIGTERM);
    let (code, took, log) = node.wait(Duration::from_secs(15));
    let stopped = began.elapsed();
    assert_eq!(code, 0, "{log}");
    assert!(
        stopped < Duration::from_secs(4),
        "the stop took {stopped:?} ({took:?}): {log}"
    );
    assert_eq!(events(&log, "config reloaded").count(), 0, "{log}");
    assert_eq!(events(&log, "reload: module starting").count(), 0, "{log}");
    assert!(!log.contains(TOKEN), "the forward token was logged");
}

// The forward's token file hangs the reload's read of it (read before the running modules are
// taken: the config's validation counts its tokens, then the token check reads them).
// r[verify node.reload.stopping+2]
#[tokio::test]
async fn a_stop_finishes_while_a_reload_hangs_on_a_forward_token_file() {
    let dir = tempfile::tempdir().unwrap();
    let forward = forward_section(dir.path());
    let tokens = dir.path().join("forward.tokens");
    let node = common::start_in(dir, &forward, "4s", None);
    a_stop_is_not_held_by_a_hung_read(node, &tokens).await;
}

// The gateway's new TLS pair is a named pipe no one writes to: its read (before the running
// modules are taken; the pair's paths changed, so the running gateway would take it live) no
// longer hangs but refuses the reload at once, naming the file, and holds no slot: once the file
// is a real certificate the next reload takes it, and the stop that follows is prompt.
// r[verify node.reload.stopping+2]
// r[verify node.reload.live-gateway+2]
// r[verify gateway.tls.replace+2]
#[tokio::test]
async fn a_reload_to_a_named_pipe_tls_pair_is_refused_at_once_and_holds_nothing_up() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gateway.key");
    std::fs::write(&key, "gateway-reload-stop-key-0123456789\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let pair = |name: &str| {
        let k = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&k)
            .unwrap();
        let (c, p) = (
            dir.path().join(format!("{name}.cert.pem")),
            dir.path().join(format!("{name}.key.pem")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&p, k.serialize_pem()).unwrap();
        (c, p)
    };
    let (cert, pkey) = pair("a");
    let (_, next_key) = pair("b");
    let next_cert = dir.path().join("b.cert.pem");
    let gateway = |cert: &Path, pkey: &Path| {
        format!(
            "[gateway]\nlisten = \"127.0.0.1:0\"\ntoken_key_file = \"{}\"\n\
             [gateway.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            key.display(),
            cert.display(),
            pkey.display()
        )
    };
    let first = gateway(&cert, &pkey);
    let next = gateway(&next_cert, &next_key);
    let next_pem = std::fs::read(&next_cert).unwrap();
    let config_dir = dir.path().to_owned();
    let node = common::start_in(dir, &first, "4s", None);
    node.until_ready().await;
    write_config(&config_dir, &next, "4s", None);
    fifo(&next_cert);
    node.signal(Signal::SIGHUP);
    until_logged(&node, "reload refused");
    let log = std::fs::read_to_string(node.dir.path().join("stderr.log")).unwrap();
    let refused: Vec<_> = events(&log, "reload refused").collect();
    let error = refused[0]["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        error.contains(&next_cert.display().to_string()) && error.contains("not a regular file"),
        "{log}"
    );
    // The read ended: the next reload reads the pair again rather than finding it running.
    std::fs::remove_file(&next_cert).unwrap();
    std::fs::write(&next_cert, next_pem).unwrap();
    node.signal(Signal::SIGHUP);
    until_logged(&node, "config reloaded");
    let began = Instant::now();
    node.signal(Signal::SIGTERM);
    let (code, took, log) = node.wait(Duration::from_secs(15));
    let stopped = began.elapsed();
    assert_eq!(code, 0, "{log}");
    assert!(
        stopped < Duration::from_secs(4),
        "the stop took {stopped:?} ({took:?}): {log}"
    );
    assert!(!log.contains("still running"), "{log}");
}

/// Why the hung-name-service tests cannot run here, if it cannot: the node's own mount namespace
/// is tried as the tests make it.
fn cannot_hang_the_name_service() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("a mount namespace needs root".into());
    }
    if std::process::Command::new("nsenter")
        .arg("--version")
        .output()
        .is_err()
    {
        return Some("nsenter (util-linux) is not installed".into());
    }
    match std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .output()
    {
        Err(e) => Some(format!("unshare (util-linux) cannot run: {e}")),
        Ok(out) if !out.status.success() => Some(format!(
            "unshare --mount --propagation private failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(_) => None,
    }
}

/// A node whose name service the test hangs: it runs in a mount namespace of its own, in which
/// [`NameService::hang_after_one`] binds a FIFO over /etc/passwd.
struct NameService {
    node: Node,
    config_dir: std::path::PathBuf,
    fifo: std::path::PathBuf,
    served: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// `[issuance]` with a local provider that is never reached (the module runs, its attempts fail
/// and are paced), `tick` and its hostnames.
fn issuance_section(provider: std::net::SocketAddr, tick: &str, hosts: &[String]) -> String {
    format!(
        "[issuance]\ntick = \"{tick}\"\n[issuance.local]\nendpoint = {{ tcp = \"{provider}\" }}\n{}",
        hosts.concat()
    )
}

/// A hostname entry, with `extra` keys.
fn hostname(name: &str, extra: &str) -> String {
    format!("[[issuance.hostname]]\nname = \"{name}\"\nsource = \"local\"\n{extra}")
}

impl NameService {
    /// Starts the node with `extra` config in its own mount namespace and waits until it is ready
    /// and its issuance module is up (its certificates answer: only a running module may take
    /// new ones live).
    async fn start(dir: tempfile::TempDir, extra: &str) -> NameService {
        let config_dir = dir.path().to_owned();
        let config = write_config(&config_dir, extra, "4s", None);
        // `unshare` without --fork execs the node: its pid is the node's.
        let mut command = std::process::Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private"])
            .arg(env!("CARGO_BIN_EXE_holdfast"));
        let node = common::spawn_with(dir, &config, command);
        node.until_ready().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !node
            .get("/v1/certs")
            .await
            .is_ok_and(|certs| certs.contains("a.example"))
        {
            assert!(
                Instant::now() < deadline,
                "the issuance module never came up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let fifo = config_dir.join("passwd.fifo");
        NameService {
            node,
            config_dir,
            fifo,
            served: Default::default(),
        }
    }

    /// Binds a FIFO over the node's /etc/passwd, fed the real file at its first open and never
    /// again: the next lookup waits for ever, as on a name service that never answers.
    fn hang_after_one(&self) {
        use std::sync::atomic::Ordering;
        let passwd = std::fs::read("/etc/passwd").unwrap();
        fifo(&self.fifo);
        let bound = std::process::Command::new("nsenter")
            .args([
                "-t",
                &self.node.child.id().to_string(),
                "-m",
                "mount",
                "--bind",
            ])
            .arg(&self.fifo)
            .arg("/etc/passwd")
            .status()
            .unwrap();
        assert!(bound.success(), "nsenter mount --bind");
        // The bind stays in the node's namespace; if it reached the host, undo it before failing
        // (the host's lookups would hang on it).
        if !std::fs::metadata("/etc/passwd").is_ok_and(|m| m.is_file()) {
            let undone = std::process::Command::new("umount")
                .arg("/etc/passwd")
                .status();
            panic!("the FIFO leaked out of the node's mount namespace (umount: {undone:?})");
        }
        let (fifo, served) = (self.fifo.clone(), std::sync::Arc::clone(&self.served));
        std::thread::spawn(move || {
            if let Ok(mut writer) = std::fs::OpenOptions::new().write(true).open(&fifo) {
                // The reader may close once it found its line.
                let _ = writer.write_all(&passwd);
                served.fetch_add(1, Ordering::SeqCst);
            }
        });
    }

    /// Waits (10 s at most) until the FIFO was fed once.
    fn until_fed(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.served.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "no lookup came");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits (10 s at most) until one of the node's threads waits to open the FIFO (the kernel
    /// reports it waiting for a writer, which never comes): a lookup hangs.
    fn until_hung(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.hung() == 0 {
            assert!(Instant::now() < deadline, "no lookup hung");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// How many of the node's threads wait to open the FIFO.
    fn hung(&self) -> usize {
        let tasks = format!("/proc/{}/task", self.node.child.id());
        let Ok(tasks) = std::fs::read_dir(tasks) else {
            return 0;
        };
        tasks
            .flatten()
            .filter(|task| {
                std::fs::read_to_string(task.path().join("wchan"))
                    .is_ok_and(|wchan| wchan.trim() == "wait_for_partner")
            })
            .count()
    }

    /// Stops the node with SIGTERM: its exit status, how long the stop took, its log, and how
    /// many opens the FIFO was fed.
    fn stop(self) -> (i32, Duration, String, usize) {
        use std::os::unix::fs::OpenOptionsExt as _;
        let began = Instant::now();
        self.node.signal(Signal::SIGTERM);
        let (code, _, log) = self.node.wait(Duration::from_secs(15));
        let stopped = began.elapsed();
        // Lets the feeder thread go if it still waits.
        let _ = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.fifo);
        let served = self.served.load(std::sync::atomic::Ordering::SeqCst);
        (code, stopped, log, served)
    }
}

/// Skips (loudly) when the name service cannot be hung here; whether to go on.
fn can_hang_the_name_service() -> bool {
    match cannot_hang_the_name_service() {
        None => true,
        Some(why) => {
            holdfast_test_support::services::skip_loudly(
                "root, util-linux and a private mount namespace",
                &why,
                holdfast_test_support::services::FailWhen::HarnessOrCi,
            );
            false
        }
    }
}

// A reload whose issuance check hangs in the name service (the check looks the deploy's owner up,
// off the runtime's threads, before it takes the running modules) does not hold up the node's
// stop. The FIFO over /etc/passwd feeds the new config's validation, which looks the owner up
// first, and then never again, so the issuance check's lookup waits for ever.
// r[verify node.reload.issuance-check]
// r[verify node.reload.stopping+2]
#[tokio::test]
async fn a_stop_finishes_while_a_reloads_issuance_check_hangs_on_the_name_service() {
    if !can_hang_the_name_service() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let deploy = dir.path().join("deploy");
    let provider = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let first = issuance_section(provider, "1s", &[hostname("a.example", "")]);
    // One hostname added, the same source: the running module may take it live once checked.
    let owned = format!(
        "deploy = {{ dir = \"{}\", owner = \"root\" }}\n",
        deploy.display()
    );
    let next = issuance_section(
        provider,
        "1s",
        &[hostname("a.example", ""), hostname("b.example", &owned)],
    );
    let hung = NameService::start(dir, &first).await;
    hung.hang_after_one();
    write_config(&hung.config_dir, &next, "4s", None);
    hung.node.signal(Signal::SIGHUP);
    until_logged(&hung.node, "SIGHUP: reloading the config");
    hung.until_fed();
    // The check's lookup waits on the FIFO: the reload cannot end.
    hung.until_hung();
    let waiting = hung.hung();
    let log = std::fs::read_to_string(hung.node.dir.path().join("stderr.log")).unwrap();
    assert_eq!(events(&log, "config reloaded").count(), 0, "{log}");
    assert_eq!(events(&log, "reload refused").count(), 0, "{log}");

    let (code, stopped, log, served) = hung.stop();
    assert_eq!(code, 0, "{log}");
    assert!(
        stopped < Duration::from_secs(4),
        "the stop took {stopped:?}: {log}"
    );
    // Two lookups: the validation's, fed, and the check's, hung; the module was never restarted,
    // so what hung was the check.
    assert_eq!((served, waiting), (1, 1), "lookups (fed, hung)");
    assert_eq!(events(&log, "config reloaded").count(), 0, "{log}");
    assert_eq!(events(&log, "reload: module starting").count(), 0, "{log}");
    assert_eq!(events(&log, "reload: module stopping").count(), 0, "{log}");
}

// A reload that restarts the issuance module (its tick changed) while the name service hangs: the
// new config's validation is fed, the new instance's start then looks the deploy's owner up and
// waits for ever. The node's stop still ends the module at once and exits 0 inside its budget,
// rather than cutting the module off at its share (exit 3).
// r[verify node.issuance.start-off-thread+2]
#[tokio::test]
async fn a_stop_finishes_while_a_restarted_issuance_module_hangs_in_its_start() {
    if !can_hang_the_name_service() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let owned = format!(
        "deploy = {{ dir = \"{}\", owner = \"root\" }}\n",
        dir.path().join("deploy").display()
    );
    let provider = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let hosts = [hostname("a.example", &owned)];
    let hung = NameService::start(dir, &issuance_section(provider, "1s", &hosts)).await;
    hung.hang_after_one();
    // Another tick: the module restarts (no live update, so no check before the lock).
    write_config(
        &hung.config_dir,
        &issuance_section(provider, "2s", &hosts),
        "4s",
        None,
    );
    hung.node.signal(Signal::SIGHUP);
    until_logged(&hung.node, "reload: module starting");
    hung.until_fed();
    // The restarted start's lookup waits on the FIFO.
    hung.until_hung();
    let waiting = hung.hung();

    let (code, stopped, log, served) = hung.stop();
    assert_eq!(code, 0, "{log}");
    assert!(
        stopped < Duration::from_secs(2),
        "the stop took {stopped:?}: {log}"
    );
    // Two lookups: the validation's, fed, and the restarted start's, hung.
    assert_eq!((served, waiting), (1, 1), "lookups (fed, hung)");
    assert_eq!(
        events(&log, "module stop overran its budget: cut off").count(),
        0,
        "{log}"
    );
}
