//! The Debian package from `cargo xtask dist deb`, installed for real: `dpkg -i` twice, the unit's
//! own command line run as the `holdfast` user until it answers `/readyz`, the package's prerm run
//! against a stand-in for systemd, then `dpkg -r` and `dpkg --purge`. It changes the machine (a package, a system user), so it runs only when
//! `HOLDFAST_TEST_DEB` names the package to install (CI builds it first and sets it), as root, with
//! dpkg; otherwise it is skipped, loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use holdfast_test_support::services::{FailWhen, skip_loudly};

const UNIT: &str = "/usr/lib/systemd/system/holdfast.service";
const DATA: &str = "/var/lib/holdfast";
const CONFIG: &str = "/etc/holdfast/holdfast.toml";
/// dpkg's copy of the package's prerm.
const PRERM: &str = "/var/lib/dpkg/info/holdfast.prerm";
/// The admin address of the packaged config (examples/single-node.toml).
const ADMIN: &str = "127.0.0.1:7480";

/// The package to install, or why the test cannot run here.
fn package() -> Result<PathBuf, String> {
    let deb = std::env::var_os("HOLDFAST_TEST_DEB")
        .filter(|v| !v.is_empty())
        .ok_or("HOLDFAST_TEST_DEB is not set (CI sets it to `cargo xtask dist deb`'s package)")?;
    if !nix::unistd::geteuid().is_root() {
        return Err("installing a package needs root".into());
    }
    if Command::new("dpkg").arg("--version").output().is_err() {
        return Err("dpkg is not installed".into());
    }
    Ok(PathBuf::from(deb))
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn user_exists(name: &str) -> bool {
    Command::new("getent")
        .args(["passwd", name])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `ExecStart=` of the installed unit, split on spaces (the unit quotes nothing).
fn exec_start() -> Vec<String> {
    let unit = std::fs::read_to_string(UNIT).expect("the unit is installed");
    let line = unit
        .lines()
        .find_map(|l| l.trim().strip_prefix("ExecStart="))
        .expect("the unit has ExecStart");
    line.split_whitespace().map(str::to_owned).collect()
}

/// GET `path` from the admin API; the status code, or None while nothing answers.
fn get(path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(ADMIN).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {ADMIN}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

/// Runs the installed prerm with `action`, as dpkg would on a machine booted with systemd (this one
/// is not: its `/run/systemd/system` test is pointed at a directory that exists, and
/// `deb-systemd-invoke` is a stand-in that records its arguments); returns what it was asked to do.
fn prerm_under_systemd(action: &str) -> String {
    let script = std::fs::read_to_string(PRERM).expect("the package has a prerm");
    let dir = tempfile::tempdir().unwrap();
    let systemd = dir.path().join("systemd");
    std::fs::create_dir(&systemd).unwrap();
    let log = dir.path().join("invoked");
    let stub = dir.path().join("deb-systemd-invoke");
    std::fs::write(
        &stub,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = script.replace("/run/systemd/system", systemd.to_str().unwrap());
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let status = Command::new("sh")
        .args(["-c", &script, "prerm", action])
        .env("PATH", path)
        .status()
        .expect("sh");
    assert!(status.success(), "prerm {action}: {status}");
    std::fs::read_to_string(&log).unwrap_or_default()
}

/// The node started by the test, killed if the test fails before stopping it.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn uid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

// i[verify dist.deb+2]
// i[verify dist.deb.install]
#[test]
fn the_package_installs_runs_as_its_user_and_removes_keeping_the_data() {
    let deb = match package() {
        Ok(deb) => deb,
        Err(reason) => {
            skip_loudly("the .deb (cargo xtask dist deb)", &reason, FailWhen::Never);
            return;
        }
    };
    assert!(deb.is_file(), "{} is not a file", deb.display());
    run("dpkg", &["-i", deb.to_str().unwrap()]);
    // Again, as an upgrade does: the user, group and data directory that exist are kept.
    run("dpkg", &["-i", deb.to_str().unwrap()]);
    let status = run("dpkg-query", &["-W", "-f=${Status}", "holdfast"]);
    assert_eq!(status, "install ok installed");

    // Removal stops the running unit (the binary it runs is about to go); an upgrade leaves it
    // to postinst's restart, and without systemd the script does nothing.
    let invoked = prerm_under_systemd("remove");
    assert_eq!(invoked.trim(), "stop holdfast.service", "prerm remove");
    assert_eq!(prerm_under_systemd("upgrade"), "", "prerm upgrade");
    let status = Command::new("sh").args([PRERM, "remove"]).status().unwrap();
    assert!(status.success(), "prerm remove without systemd: {status}");
    // The upgrade's restart: only a unit that runs (try-restart), only on an upgrade ($2 set).
    let postinst = std::fs::read_to_string("/var/lib/dpkg/info/holdfast.postinst").unwrap();
    assert!(
        postinst.contains("deb-systemd-invoke try-restart holdfast.service"),
        "postinst: {postinst}"
    );

    // What the package put in place.
    for path in [
        "/usr/bin/holdfast",
        CONFIG,
        UNIT,
        "/usr/share/man/man1/holdfast.1",
    ] {
        assert!(Path::new(path).is_file(), "{path} is not installed");
    }
    assert!(Path::new("/usr/share/bash-completion/completions/holdfast").is_file());
    let conffiles = run("dpkg-query", &["-W", "-f=${Conffiles}", "holdfast"]);
    assert!(conffiles.contains(CONFIG), "conffiles: {conffiles}");
    assert!(user_exists("holdfast"), "no holdfast user");
    let groups = run("id", &["-nG", "holdfast"]);
    assert!(
        groups.split_whitespace().any(|g| g == "docker"),
        "holdfast's groups: {groups}"
    );
    let uid: u32 = run("id", &["-u", "holdfast"]).trim().parse().unwrap();
    let data = std::fs::metadata(DATA).expect("the data directory");
    assert_eq!(data.uid(), uid, "{DATA} is not the holdfast user's");
    assert_eq!(data.permissions().mode() & 0o777, 0o700);
    run("/usr/bin/holdfast", &["check-config", CONFIG]);

    // The unit's own command line, as the unit's user (setpriv: what systemd's User= does).
    let argv = exec_start();
    assert_eq!(argv[0], "/usr/bin/holdfast", "ExecStart: {argv:?}");
    let mut node = Node(
        Command::new("setpriv")
            .args([
                "--reuid=holdfast",
                "--regid=holdfast",
                "--init-groups",
                "--",
            ])
            .args(&argv)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("setpriv"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = loop {
        if let Some(code) = get("/readyz") {
            break code;
        }
        assert!(
            node.0.try_wait().unwrap().is_none(),
            "the node exited before answering"
        );
        assert!(Instant::now() < deadline, "no answer at {ADMIN} in 60 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(ready, 200, "/readyz");
    assert_eq!(
        uid_of(node.0.id()),
        uid,
        "the node does not run as holdfast"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(node.0.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = node.0.wait().unwrap();
    assert_eq!(status.code(), Some(0), "the node's stop");

    // Removal keeps the data and the config; purge takes both and keeps the user (Debian
    // practice: files the package does not know of may still belong to its uid).
    run("dpkg", &["-r", "holdfast"]);
    assert!(!Path::new("/usr/bin/holdfast").exists());
    assert!(!Path::new(UNIT).exists());
    assert!(Path::new(DATA).is_dir(), "dpkg -r removed {DATA}");
    assert!(Path::new(CONFIG).is_file(), "dpkg -r removed the conffile");
    run("dpkg", &["--purge", "holdfast"]);
    assert!(!Path::new(DATA).exists(), "purge left {DATA}");
    assert!(!Path::new(CONFIG).exists(), "purge left {CONFIG}");
    assert!(user_exists("holdfast"), "purge deleted the holdfast user");
    let status = Command::new("dpkg-query")
        .args(["-W", "holdfast"])
        .output()
        .unwrap();
    assert!(
        !status.status.success(),
        "purge left the package known to dpkg"
    );
}
