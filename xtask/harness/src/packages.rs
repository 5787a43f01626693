//! Which programs the harness needs, which Debian package provides each, and installing them.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// A program the harness runs, and the Debian package that installs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requirement {
    /// The executable's name, looked up on `PATH` (or a fixed path for busybox).
    pub program: &'static str,
    /// The Debian packages that provide it (and what it needs beside it to be usable).
    pub packages: &'static [&'static str],
    /// What the harness uses it for.
    pub purpose: &'static str,
}

/// Everything `cargo xtask test` runs, in the order a reader would ask about it.
// i[impl spec-report.browser]
pub const REQUIREMENTS: &[Requirement] = &[
    Requirement {
        program: "dockerd",
        packages: &["docker.io"],
        purpose: "the private Docker Engine",
    },
    Requirement {
        program: "docker",
        packages: &["docker.io"],
        purpose: "seeding the registry",
    },
    Requirement {
        program: "containerd",
        packages: &["containerd"],
        purpose: "dockerd's runtime",
    },
    Requirement {
        program: "docker-registry",
        packages: &["docker-registry"],
        purpose: "the registry",
    },
    Requirement {
        program: "pebble",
        packages: &["pebble"],
        purpose: "the ACME server",
    },
    Requirement {
        program: "pebble-challtestsrv",
        packages: &["pebble"],
        purpose: "pebble's DNS and challenge server",
    },
    Requirement {
        program: "knotd",
        packages: &["knot"],
        purpose: "the authoritative DNS server for DNS-01 (RFC 2136 updates with TSIG)",
    },
    Requirement {
        program: "keymgr",
        packages: &["knot"],
        purpose: "knot's TSIG key",
    },
    Requirement {
        program: "kdig",
        packages: &["knot-dnsutils"],
        purpose: "querying knot in the harness's own test",
    },
    Requirement {
        program: "etcd",
        packages: &["etcd-server"],
        purpose: "etcd",
    },
    Requirement {
        program: "redis-server",
        packages: &["redis-server"],
        purpose: "redis",
    },
    Requirement {
        program: "busybox",
        packages: &["busybox-static"],
        purpose: "the seeded image's rootfs (must be statically linked)",
    },
    Requirement {
        program: "openssl",
        packages: &["openssl"],
        purpose: "pebble's TLS certificate",
    },
    Requirement {
        program: "tar",
        packages: &["tar"],
        purpose: "packing the seeded rootfs",
    },
    Requirement {
        program: "protoc",
        // Debian's protoc comes without the well-known types (google/protobuf/*.proto) that
        // etcd-client's protobufs import: libprotobuf-dev puts them where protoc looks.
        packages: &["protobuf-compiler", "libprotobuf-dev"],
        purpose: "building etcd-client's protobufs",
    },
    Requirement {
        program: "chromium",
        packages: &["chromium"],
        purpose: "rendering the spec report in a real browser",
    },
    Requirement {
        program: "python3",
        packages: &["python3", "python3-websockets"],
        purpose: "the gateway's end-to-end test with a client no one here wrote (Python websockets)",
    },
];

/// Finds `program` on `path` (a `PATH`-style list); busybox must also be static, and protoc must
/// find the well-known types.
pub fn locate(program: &str, path: &str) -> Option<PathBuf> {
    let found = std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))?;
    if program == "protoc" && !has_well_known_types(&found) {
        return None;
    }
    if program == "python3" && !imports_websockets(&found) {
        // Another python3 first on PATH (pyenv, a venv) may lack the package Debian's has.
        return Some(PathBuf::from("/usr/bin/python3"))
            .filter(|p| is_executable(p) && imports_websockets(p));
    }
    if program == "busybox" && !is_static_elf(&found) {
        // A dynamically linked busybox would not run inside the seeded image.
        return ["/bin/busybox", "/usr/bin/busybox"]
            .iter()
            .map(PathBuf::from)
            .find(|p| is_executable(p) && is_static_elf(p));
    }
    Some(found)
}

/// Whether protoc at `protoc` finds the well-known types in its default include directory
/// (`../include` beside its own directory), as an unconfigured build script needs.
// i[impl harness.install+2]
fn has_well_known_types(protoc: &Path) -> bool {
    let protoc = protoc
        .canonicalize()
        .unwrap_or_else(|_| protoc.to_path_buf());
    protoc
        .parent()
        .and_then(Path::parent)
        .is_some_and(|prefix| {
            prefix
                .join("include/google/protobuf/descriptor.proto")
                .is_file()
        })
}

/// Whether the Python at `python` can import `websockets`.
// i[impl harness.install.python-websockets]
fn imports_websockets(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import websockets"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// True for a 64-bit little-endian ELF file without a `PT_INTERP` program header (no dynamic loader).
pub fn is_static_elf(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    if bytes.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1]) {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    const PT_INTERP: u32 = 3;
    (0..phnum as usize).all(|i| {
        let at = phoff as usize + i * phentsize as usize;
        u32_at(at).is_some_and(|kind| kind != PT_INTERP)
    })
}

/// `PATH`, with the system directories a non-login `PATH` may lack (Debian puts dockerd in
/// /usr/sbin): where the harness looks for the programs it needs.
pub fn search_path() -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    format!("{path}:/usr/sbin:/usr/bin:/sbin:/bin")
}

/// The requirements not found on `path`.
pub fn missing(path: &str) -> Vec<Requirement> {
    REQUIREMENTS
        .iter()
        .filter(|r| locate(r.program, path).is_none())
        .copied()
        .collect()
}

/// The programs building the suite needs (its build scripts run them), not only running it.
pub const BUILD_PROGRAMS: &[&str] = &["protoc"];

/// Those of [`BUILD_PROGRAMS`] not found on `path`.
pub fn missing_to_build(path: &str) -> Vec<Requirement> {
    missing(path)
        .into_iter()
        .filter(|r| BUILD_PROGRAMS.contains(&r.program))
        .collect()
}

/// The distinct packages that provide `missing`, in order.
pub fn packages_for(missing: &[Requirement]) -> Vec<&'static str> {
    let mut packages: Vec<&'static str> = Vec::new();
    for r in missing {
        for package in r.packages {
            if !packages.contains(package) {
                packages.push(package);
            }
        }
    }
    packages
}

/// The error for missing programs without `--install`: names each program and its package.
// i[impl harness.install+2]
pub fn missing_error(missing: &[Requirement]) -> String {
    let mut text = String::from("missing programs the test services need:\n");
    for r in missing {
        text.push_str(&format!(
            "  {} ({}) — install Debian package{} `{}`\n",
            r.program,
            r.purpose,
            if r.packages.len() == 1 { "" } else { "s" },
            r.packages.join(" ")
        ));
    }
    text.push_str(&format!(
        "run `cargo xtask test --install` (or `apt-get install {}`)",
        packages_for(missing).join(" ")
    ));
    text
}

/// `apt-get update` then `apt-get install -y --no-install-recommends` of the packages, together
/// waiting [`LOCK_WAIT`] at most for another process to release apt's or dpkg's lock.
pub fn install(packages: &[&str]) -> anyhow::Result<()> {
    install_with(Path::new("apt-get"), packages, &mut RealTime)
}

/// How long an install waits, in all, for another process to release apt's or dpkg's lock.
pub const LOCK_WAIT: Duration = Duration::from_secs(600);

/// The pause between two tries while the lock is held.
const LOCK_PAUSE: Duration = Duration::from_secs(2);

/// What an install waits with: the clock it reads, its pause, and where it writes apt-get's
/// error output and that it waits (a test hands it a clock that its pauses advance, and keeps
/// what is written).
trait Waiting {
    fn now(&self) -> Instant;
    fn pause(&mut self, pause: Duration);
    fn say(&mut self, text: &str);
}

/// The machine's clock and sleep, and stderr.
struct RealTime;

impl Waiting for RealTime {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn pause(&mut self, pause: Duration) {
        std::thread::sleep(pause);
    }
    fn say(&mut self, text: &str) {
        eprint!("{text}");
    }
}

/// [`install`] with the package manager at `apt_get` (a test hands it a stand-in script) and its
/// waits done by `waiting`.
// i[impl harness.install+2]
fn install_with(
    apt_get: &Path,
    packages: &[&str],
    waiting: &mut dyn Waiting,
) -> anyhow::Result<()> {
    if packages.is_empty() {
        return Ok(());
    }
    eprintln!("xtask test: installing {}", packages.join(" "));
    let mut lock = LockWait::new(waiting);
    lock.apt(apt_get, &["update", "-q"])?;
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend_from_slice(packages);
    lock.apt(apt_get, &args)
}

/// One install's wait for apt's lock: its deadline, and whether it has said that it waits.
struct LockWait<'a> {
    deadline: Instant,
    said: bool,
    waiting: &'a mut dyn Waiting,
}

impl<'a> LockWait<'a> {
    /// The wait of an install starting now.
    // i[impl harness.install.wait]
    fn new(waiting: &'a mut dyn Waiting) -> Self {
        LockWait {
            deadline: waiting.now() + LOCK_WAIT,
            said: false,
            waiting,
        }
    }

    /// Runs `apt_get ARGS`, again every [`LOCK_PAUSE`] while its error says another process holds
    /// one of its locks, until the install's deadline: `apt-get update` never waits for the lists'
    /// lock by itself (apt 2.6's `DPkg::Lock::Timeout` covers dpkg's only), and a new machine's
    /// unattended upgrades, or a second install beside this one, hold them for a minute or more.
    /// apt-get's error output goes to a file, shown once it has ended: a pipe would also wait for
    /// any process it started that kept the pipe open (a daemon started by a package's script).
    // i[impl harness.install.wait]
    fn apt(&mut self, apt_get: &Path, args: &[&str]) -> anyhow::Result<()> {
        let command = format!("apt-get {}", args.join(" "));
        loop {
            let mut stderr = tempfile::tempfile().context("a file for apt-get's error output")?;
            let status = Command::new(apt_get)
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                // The lock's message is matched below: apt's own words, not a translation.
                .env("LC_ALL", "C")
                .stderr(
                    stderr
                        .try_clone()
                        .context("a file for apt-get's error output")?,
                )
                .status()
                .context("running apt-get (is this a Debian machine, and are we root?)")?;
            let mut text = String::new();
            stderr
                .seek(SeekFrom::Start(0))
                .and_then(|_| stderr.read_to_string(&mut text))
                .context("reading apt-get's error output")?;
            let held = !status.success() && lock_held(&text);
            let past = self.waiting.now() >= self.deadline;
            // While it waits, apt's lock message once, not at every try.
            if !text.is_empty() && (!held || !self.said || past) {
                self.waiting.say(&text);
            }
            if status.success() {
                return Ok(());
            }
            if !held {
                bail!("{command} failed: {status}");
            }
            if past {
                bail!(
                    "{command} failed: {status}: another process held apt's lock through the {} s wait",
                    LOCK_WAIT.as_secs()
                );
            }
            if !self.said {
                self.waiting.say(&format!(
                    "xtask: another process holds apt's lock ({command}); waiting for it, {} s at most\n",
                    LOCK_WAIT.as_secs()
                ));
                self.said = true;
            }
            self.waiting.pause(LOCK_PAUSE);
        }
    }
}

/// Whether apt-get's error output (in the C locale) says another process holds one of its locks:
/// a line of apt's own, not any line that happens to hold the words.
fn lock_held(stderr: &str) -> bool {
    stderr
        .lines()
        .any(|line| line.starts_with("E: Could not get lock "))
}

/// Whether `cargo nextest` is available.
pub fn has_nextest() -> bool {
    Command::new("cargo")
        .args(["nextest", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs cargo-nextest from crates.io.
pub fn install_nextest() -> anyhow::Result<()> {
    install_cargo_tool("cargo-nextest")
}

/// Whether `cargo mutants` runs (for `cargo xtask prove` and its test).
pub fn has_mutants() -> bool {
    Command::new("cargo")
        .args(["mutants", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `cargo install --locked TOOL`.
pub fn install_cargo_tool(tool: &str) -> anyhow::Result<()> {
    eprintln!("xtask test: installing {tool}");
    let status = Command::new("cargo")
        .args(["install", "--locked", tool])
        .status()
        .context("running cargo install")?;
    if !status.success() {
        bail!("cargo install {tool} failed: {status}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify harness.install+2]
    #[test]
    fn every_service_program_maps_to_its_debian_package() {
        let package = |program: &str| {
            REQUIREMENTS
                .iter()
                .find(|r| r.program == program)
                .map(|r| r.packages)
        };
        assert_eq!(package("dockerd"), Some(&["docker.io"][..]));
        assert_eq!(package("docker-registry"), Some(&["docker-registry"][..]));
        assert_eq!(package("pebble"), Some(&["pebble"][..]));
        assert_eq!(package("pebble-challtestsrv"), Some(&["pebble"][..]));
        assert_eq!(package("etcd"), Some(&["etcd-server"][..]));
        assert_eq!(package("knotd"), Some(&["knot"][..]));
        assert_eq!(package("redis-server"), Some(&["redis-server"][..]));
        assert_eq!(package("busybox"), Some(&["busybox-static"][..]));
        assert_eq!(
            package("protoc"),
            Some(&["protobuf-compiler", "libprotobuf-dev"][..])
        );
        assert_eq!(package("chromium"), Some(&["chromium"][..]));
        assert_eq!(
            package("python3"),
            Some(&["python3", "python3-websockets"][..])
        );
    }

    // i[verify harness.install+2]
    #[test]
    fn nothing_is_found_on_an_empty_path_and_the_error_names_every_package() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap();
        let missing = missing(path);
        assert_eq!(missing.len(), REQUIREMENTS.len());
        assert_eq!(
            packages_for(&missing),
            [
                "docker.io",
                "containerd",
                "docker-registry",
                "pebble",
                "knot",
                "knot-dnsutils",
                "etcd-server",
                "redis-server",
                "busybox-static",
                "openssl",
                "tar",
                "protobuf-compiler",
                "libprotobuf-dev",
                "chromium",
                "python3",
                "python3-websockets"
            ]
        );
        let error = missing_error(&missing[4..6]);
        assert!(error.contains("pebble (the ACME server) — install Debian package `pebble`"));
        assert!(error.ends_with("(or `apt-get install pebble`)"), "{error}");
    }

    // i[verify harness.install.python-websockets]
    #[test]
    fn a_python3_that_cannot_import_websockets_is_missing() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let python = dir.path().join("python3");
        // A python3 that fails every import.
        std::fs::write(&python, "#!/bin/sh\nexit 1\n").unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let found = locate("python3", dir.path().to_str().unwrap());
        // Found only as Debian's, and only when that one has the package.
        assert!(
            found
                .as_deref()
                .is_none_or(|p| p == Path::new("/usr/bin/python3")),
            "{found:?}"
        );
        assert!(!imports_websockets(&python));
    }

    #[test]
    fn a_program_is_found_only_when_executable() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let redis = dir.path().join("redis-server");
        std::fs::write(&redis, "#!/bin/sh\n").unwrap();
        let path = dir.path().to_str().unwrap();
        assert_eq!(locate("redis-server", path), None);
        std::fs::set_permissions(&redis, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(locate("redis-server", path), Some(redis));
    }

    // i[verify harness.install+2]
    #[test]
    fn protoc_counts_as_found_only_with_its_well_known_types() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let protoc = bin.join("protoc");
        std::fs::write(&protoc, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&protoc, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = bin.to_str().unwrap();
        assert_eq!(locate("protoc", path), None, "no include/ beside bin/");
        let types = dir.path().join("include/google/protobuf");
        std::fs::create_dir_all(&types).unwrap();
        std::fs::write(types.join("descriptor.proto"), "syntax = \"proto2\";\n").unwrap();
        assert_eq!(locate("protoc", path), Some(protoc));
    }

    /// A stand-in apt-get in `dir`: a shell script that logs each call's arguments (after
    /// `$DEBIAN_FRONTEND $LC_ALL`) to `calls.log`, then runs `body`.
    fn stand_in_apt(dir: &Path, body: &str) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt as _;
        let log = dir.join("calls.log");
        let script = dir.join("apt-get");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$DEBIAN_FRONTEND $LC_ALL $*\" >> '{}'\n{body}\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        (script, log)
    }

    /// A stand-in apt-get whose `install` fails when `fail_install`.
    fn fake_apt(dir: &Path, fail_install: bool) -> (PathBuf, PathBuf) {
        let fail = if fail_install {
            "[ \"$1\" = install ] && exit 100\n"
        } else {
            ""
        };
        stand_in_apt(dir, &format!("{fail}exit 0"))
    }

    /// A stand-in apt-get whose `update` fails with apt's lock message its first `update` times,
    /// and its `install` the same its first `install` times, then each succeeds.
    fn locked_apt(dir: &Path, update: u64, install: u64) -> (PathBuf, PathBuf) {
        for (command, held) in [("update", update), ("install", install)] {
            std::fs::write(dir.join(format!("held-{command}")), held.to_string()).unwrap();
        }
        stand_in_apt(
            dir,
            &format!(
                "held='{dir}/held-'\"$1\"\nn=$(cat \"$held\")\nif [ \"$n\" -gt 0 ]; then\n  \
                 echo $((n - 1)) > \"$held\"\n  \
                 printf '%s' '{LOCKED}' >&2\n  exit 100\nfi\nexit 0",
                dir = dir.display()
            ),
        )
    }

    /// What [`locked_apt`] writes to stderr while the lock is held: apt 2.6's words.
    const LOCKED: &str = "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 42 \
                          (apt-get)\nE: Unable to lock directory /var/lib/apt/lists/\n";

    /// A clock that only the install's pauses move, and what the install said.
    struct FakeTime {
        now: Instant,
        paused: Vec<Duration>,
        said: Vec<String>,
    }

    impl FakeTime {
        fn new() -> Self {
            FakeTime {
                now: Instant::now(),
                paused: Vec::new(),
                said: Vec::new(),
            }
        }
    }

    impl Waiting for FakeTime {
        fn now(&self) -> Instant {
            self.now
        }
        fn pause(&mut self, pause: Duration) {
            self.now += pause;
            self.paused.push(pause);
        }
        fn say(&mut self, line: &str) {
            self.said.push(line.to_owned());
        }
    }

    // i[verify harness.install+2]
    #[test]
    fn install_updates_then_installs_exactly_the_packages_and_nothing_for_none() {
        let dir = tempfile::tempdir().unwrap();
        let (apt, log) = fake_apt(dir.path(), false);
        let mut time = FakeTime::new();
        install_with(&apt, &[], &mut time).unwrap();
        assert!(!log.exists(), "no package, no apt-get call");
        install_with(&apt, &["redis-server", "pebble"], &mut time).unwrap();
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "noninteractive C update -q\n\
             noninteractive C install -y -q --no-install-recommends redis-server pebble\n"
        );
        assert!(
            time.paused.is_empty() && time.said.is_empty(),
            "no lock, no wait"
        );
    }

    // i[verify harness.install+2]
    // i[verify harness.install.wait]
    #[test]
    fn a_failed_install_is_an_error_naming_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let (apt, _) = fake_apt(dir.path(), true);
        let mut time = FakeTime::new();
        let error = install_with(&apt, &["pebble"], &mut time)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "apt-get install -y -q --no-install-recommends pebble failed: exit status: 100"
        );
        assert!(
            time.paused.is_empty() && time.said.is_empty(),
            "a failure that is not the lock's is not waited on"
        );
    }

    // i[verify harness.install.wait]
    #[test]
    fn a_held_lock_is_waited_for_then_the_install_goes_on_saying_so_once() {
        let dir = tempfile::tempdir().unwrap();
        // Held through the update's first three tries, then the install's first two.
        let (apt, log) = locked_apt(dir.path(), 3, 2);
        let mut time = FakeTime::new();
        install_with(&apt, &["iperf"], &mut time).unwrap();
        assert_eq!(
            time.paused,
            vec![LOCK_PAUSE; 5],
            "one pause per try the lock was held"
        );
        assert_eq!(
            time.said,
            [
                LOCKED,
                "xtask: another process holds apt's lock (apt-get update -q); waiting for it, 600 s \
                 at most\n"
            ],
            "apt's lock message and the wait, each said once for the whole install"
        );
        let install = "noninteractive C install -y -q --no-install-recommends iperf\n";
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            format!(
                "{}{}",
                "noninteractive C update -q\n".repeat(4),
                install.repeat(3)
            )
        );
    }

    // i[verify harness.install.wait]
    #[test]
    fn a_lock_held_past_the_wait_fails_saying_so() {
        let dir = tempfile::tempdir().unwrap();
        let (apt, log) = locked_apt(dir.path(), u64::MAX / 4, 0);
        let mut time = FakeTime::new();
        let started = time.now;
        let error = install_with(&apt, &["iperf"], &mut time)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "apt-get update -q failed: exit status: 100: another process held apt's lock through \
             the 600 s wait"
        );
        assert_eq!(
            time.now - started,
            LOCK_WAIT,
            "waited the whole wait, and no longer"
        );
        assert_eq!(
            time.said,
            [
                LOCKED,
                "xtask: another process holds apt's lock (apt-get update -q); waiting for it, 600 s \
                 at most\n",
                LOCKED
            ],
            "apt's lock message when the wait begins and when it ends"
        );
        let tries = std::fs::read_to_string(&log).unwrap().lines().count();
        assert_eq!(
            tries as u32,
            LOCK_WAIT.as_secs() as u32 / LOCK_PAUSE.as_secs() as u32 + 1,
            "a try at the start and after each pause"
        );
    }

    // i[verify harness.install.wait]
    #[test]
    fn only_apts_own_lock_line_is_the_lock() {
        assert!(lock_held(
            "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 7 (apt-get)\n"
        ));
        assert!(lock_held(
            "W: something\nE: Could not get lock /var/lib/apt/lists/lock - open (11: Resource temporarily unavailable)\n"
        ));
        assert!(!lock_held(
            "postinst: Could not get lock on /run/foo, retrying\nE: Sub-process /usr/bin/dpkg returned an error code (1)\n"
        ));
        assert!(!lock_held(""));
    }

    #[test]
    fn a_script_is_not_a_static_elf() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("busybox");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert!(!is_static_elf(&script));
        // The test binary itself is dynamically linked (it has an interpreter).
        assert!(!is_static_elf(&std::env::current_exe().unwrap()));
    }
}
