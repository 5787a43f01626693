//! Where the real services are, as `cargo xtask test` exported them.
//!
//! Each accessor reads the environment the harness sets. When a variable is missing the outcome
//! depends on who runs the test: under the harness (`HOLDFAST_TEST_SERVICES=1`) a missing service is
//! a bug in the run, so the accessor panics; under a plain `cargo test` the accessor prints a loud
//! `SKIPPED` line, appends the skip to the ledger that spec-check reads, and returns `None` so the
//! test can return early without claiming to have passed anything.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Set to `1` by the harness: a missing service is then a test failure, not a skip.
pub const SERVICES_VAR: &str = "HOLDFAST_TEST_SERVICES";
/// `unix:///abs/path/docker.sock` of the private dockerd.
pub const DOCKER_HOST_VAR: &str = "HOLDFAST_TEST_DOCKER_HOST";
/// `127.0.0.1:PORT` of the registry (plain HTTP).
pub const REGISTRY_VAR: &str = "HOLDFAST_TEST_REGISTRY";
/// The seeded image reference (pushed, and absent from dockerd's local store when tests start).
pub const IMAGE_VAR: &str = "HOLDFAST_TEST_IMAGE";
/// `https://127.0.0.1:PORT/dir`, pebble's ACME directory.
pub const ACME_DIRECTORY_VAR: &str = "HOLDFAST_TEST_ACME_DIRECTORY";
/// Path to the PEM of the CA that signed pebble's TLS certificate.
pub const ACME_CA_VAR: &str = "HOLDFAST_TEST_ACME_CA";
/// The port pebble's validator connects to for HTTP-01 challenges (left free for the test).
pub const ACME_HTTP01_PORT_VAR: &str = "HOLDFAST_TEST_ACME_HTTP01_PORT";
/// `http://127.0.0.1:PORT`, pebble-challtestsrv's management API.
pub const CHALLTESTSRV_VAR: &str = "HOLDFAST_TEST_CHALLTESTSRV";
/// `http://127.0.0.1:PORT`, etcd's client URL.
pub const ETCD_VAR: &str = "HOLDFAST_TEST_ETCD";
/// `redis://127.0.0.1:PORT`.
pub const REDIS_VAR: &str = "HOLDFAST_TEST_REDIS";
/// Path of the skip ledger (JSON lines).
pub const SKIP_LEDGER_VAR: &str = "HOLDFAST_TEST_SKIP_LEDGER";

/// The private Docker Engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Docker {
    /// `unix:///abs/path/docker.sock`, as `DOCKER_HOST` would say it.
    pub host: String,
    /// The socket path alone.
    pub socket: PathBuf,
}

/// The registry, with the image the harness seeded into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    /// Plain-HTTP address on loopback.
    pub addr: SocketAddr,
    /// The seeded image reference, e.g. `127.0.0.1:PORT/holdfast/busybox:latest`.
    pub image: String,
    /// The seeded image's repository path inside the registry, e.g. `holdfast/busybox:latest`,
    /// so a test can name the same image through another address (a fault proxy).
    pub image_path: String,
}

/// Pebble (the ACME test server) and its challenge test server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acme {
    /// The directory URL, `https://127.0.0.1:PORT/dir`.
    pub directory: String,
    /// PEM file of the CA that signed pebble's TLS certificate: trust it to talk to pebble.
    pub ca_pem: PathBuf,
    /// Management API of pebble-challtestsrv (which is also pebble's DNS server).
    pub challtestsrv: String,
    /// The port pebble validates HTTP-01 challenges on, if the harness exported it.
    pub http01_port: Option<u16>,
}

/// etcd (v3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Etcd {
    /// Client URL, `http://127.0.0.1:PORT`.
    pub url: String,
}

/// Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redis {
    /// `redis://127.0.0.1:PORT`.
    pub url: String,
    /// The same address as a socket address.
    pub addr: SocketAddr,
}

/// The private dockerd, or `None` (after a loud skip) when it is not running.
#[track_caller]
pub fn docker() -> Option<Docker> {
    let host = require("docker", &[DOCKER_HOST_VAR])?.remove(0);
    let socket = PathBuf::from(host.trim_start_matches("unix://"));
    Some(Docker { host, socket })
}

/// The registry and its seeded image, or `None` (after a loud skip).
#[track_caller]
pub fn registry() -> Option<Registry> {
    let mut vars = require("registry", &[REGISTRY_VAR, IMAGE_VAR])?;
    let image = vars.remove(1);
    let addr_text = vars.remove(0);
    let addr = parse_or_panic(REGISTRY_VAR, &addr_text, addr_text.parse::<SocketAddr>());
    let image_path = image
        .strip_prefix(&format!("{addr_text}/"))
        .unwrap_or(&image)
        .to_owned();
    Some(Registry {
        addr,
        image,
        image_path,
    })
}

/// Pebble, or `None` (after a loud skip).
#[track_caller]
pub fn acme() -> Option<Acme> {
    let mut vars = require(
        "pebble",
        &[ACME_DIRECTORY_VAR, ACME_CA_VAR, CHALLTESTSRV_VAR],
    )?;
    let challtestsrv = vars.remove(2);
    let ca_pem = PathBuf::from(vars.remove(1));
    let directory = vars.remove(0);
    let http01_port = std::env::var(ACME_HTTP01_PORT_VAR)
        .ok()
        .map(|p| parse_or_panic(ACME_HTTP01_PORT_VAR, &p, p.parse::<u16>()));
    Some(Acme {
        directory,
        ca_pem,
        challtestsrv,
        http01_port,
    })
}

/// etcd, or `None` (after a loud skip).
#[track_caller]
pub fn etcd() -> Option<Etcd> {
    let url = require("etcd", &[ETCD_VAR])?.remove(0);
    Some(Etcd { url })
}

/// Redis, or `None` (after a loud skip).
#[track_caller]
pub fn redis() -> Option<Redis> {
    let url = require("redis", &[REDIS_VAR])?.remove(0);
    let hostport = url.trim_start_matches("redis://").trim_end_matches('/');
    let addr = parse_or_panic(REDIS_VAR, &url, hostport.parse::<SocketAddr>());
    Some(Redis { url, addr })
}

#[track_caller]
fn parse_or_panic<T, E: std::fmt::Display>(var: &str, text: &str, parsed: Result<T, E>) -> T {
    match parsed {
        Ok(value) => value,
        Err(err) => panic!("{var}={text:?} is malformed: {err}"),
    }
}

/// What the environment says about the harness, read once per call so tests can vary it.
#[derive(Debug, Clone)]
struct Environment {
    under_harness: bool,
    ledger: PathBuf,
}

impl Environment {
    fn from_process() -> Self {
        Environment {
            under_harness: std::env::var(SERVICES_VAR).is_ok_and(|v| v == "1"),
            ledger: std::env::var_os(SKIP_LEDGER_VAR)
                .map(PathBuf::from)
                .unwrap_or_else(default_ledger_path),
        }
    }
}

/// `<workspace>/target/holdfast-test-skips.jsonl`.
pub fn default_ledger_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/holdfast-test-skips.jsonl")
}

/// Reads every variable, or reports the service missing (skip or panic) and returns `None`.
#[track_caller]
fn require(service: &str, vars: &[&str]) -> Option<Vec<String>> {
    let values: Vec<Option<String>> = vars
        .iter()
        .map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
        .collect();
    if values.iter().all(Option::is_some) {
        return Some(values.into_iter().flatten().collect());
    }
    let missing: Vec<&str> = vars
        .iter()
        .zip(&values)
        .filter(|(_, v)| v.is_none())
        .map(|(var, _)| *var)
        .collect();
    let skip = Skip::for_current_test(service, &missing);
    let env = Environment::from_process();
    // i[impl harness.skip.loud]
    if env.under_harness {
        panic!(
            "{}: needs {service}, but {} is not set although {SERVICES_VAR}=1 (the harness did not start it)",
            skip.test,
            missing.join(", ")
        );
    }
    // Straight to the stderr handle, not `eprintln!`: libtest captures the print macros, and a
    // skip must be visible in a plain `cargo test` run.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {}: needs {service} (run cargo xtask test)",
        skip.test
    );
    if let Err(err) = skip.append_to(&env.ledger) {
        // The skip is still loud on stderr; a ledger we cannot write is worth saying too.
        eprintln!(
            "warning: could not record the skip in {}: {err}",
            env.ledger.display()
        );
    }
    None
}

/// One line of the skip ledger.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Skip {
    /// The libtest test name (the test thread's name), e.g. `tests::pulls_seeded_image`.
    pub test: String,
    /// The test binary's name without cargo's hash suffix.
    pub binary: String,
    /// The service the test needed.
    pub service: String,
    /// Why it was skipped.
    pub reason: String,
}

impl Skip {
    fn for_current_test(service: &str, missing: &[&str]) -> Self {
        let test = std::thread::current()
            .name()
            .unwrap_or("<unnamed thread>")
            .to_owned();
        let binary = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .map(|stem| binary_name_without_hash(&stem).to_owned())
            .unwrap_or_default();
        Skip {
            test,
            binary,
            service: service.to_owned(),
            reason: format!("{} not set (run cargo xtask test)", missing.join(", ")),
        }
    }

    /// Appends this skip as one JSON line; one `write` per line so parallel tests don't interleave.
    pub fn append_to(&self, ledger: &Path) -> std::io::Result<()> {
        if let Some(dir) = ledger.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut line = serde_json::to_string(self).map_err(std::io::Error::other)?;
        line.push('\n');
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(ledger)?;
        file.write_all(line.as_bytes())
    }
}

/// `holdfast_pull-0123456789abcdef` → `holdfast_pull`: cargo appends `-<16 hex digits>`.
pub fn binary_name_without_hash(stem: &str) -> &str {
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name
        }
        _ => stem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_cargo_hash_suffix_only() {
        assert_eq!(
            binary_name_without_hash("holdfast_pull-0123456789abcdef"),
            "holdfast_pull"
        );
        assert_eq!(binary_name_without_hash("smoke-docker"), "smoke-docker");
        assert_eq!(
            binary_name_without_hash("smoke-0123456789abcdeg"),
            "smoke-0123456789abcdeg"
        );
    }

    /// Runs one ignored helper test of this binary in a child process with a chosen environment,
    /// because the environment of this process is shared by every test running in parallel.
    fn run_helper(helper: &str, under_harness: bool, ledger: &Path) -> std::process::Output {
        run_helper_with(helper, under_harness, ledger, None)
    }

    /// `run_helper`, with the redis variable set to `redis` when given.
    fn run_helper_with(
        helper: &str,
        under_harness: bool,
        ledger: &Path,
        redis: Option<&str>,
    ) -> std::process::Output {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            helper,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_remove(REDIS_VAR)
        .env(SKIP_LEDGER_VAR, ledger);
        if let Some(redis) = redis {
            cmd.env(REDIS_VAR, redis);
        }
        if under_harness {
            cmd.env(SERVICES_VAR, "1");
        } else {
            cmd.env_remove(SERVICES_VAR);
        }
        cmd.output().unwrap()
    }

    #[test]
    #[ignore = "helper: run in a child process by the skip tests"]
    fn helper_needs_redis() {
        let Some(_redis) = redis() else { return };
        panic!("the helper must never see redis: its parent removed the variable");
    }

    #[test]
    #[ignore = "helper: run in a child process by the skip tests"]
    fn helper_reports_redis() {
        match redis() {
            Some(redis) => println!("REDIS AT {}", redis.url),
            None => println!("NO REDIS"),
        }
    }

    // i[verify harness.skip.loud]
    #[test]
    fn a_running_service_is_no_skip_and_an_empty_variable_is_no_service() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("skips.jsonl");
        let helper = "services::tests::helper_reports_redis";
        let out = run_helper_with(helper, true, &ledger, Some("redis://127.0.0.1:6379"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "a set variable failed: {stderr}");
        assert!(
            stdout.contains("REDIS AT redis://127.0.0.1:6379"),
            "{stdout}{stderr}"
        );
        assert!(!stderr.contains("SKIPPED"), "{stderr}");
        assert!(!ledger.exists(), "a running service is no skip");
        let out = run_helper_with(helper, false, &ledger, Some(""));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stdout.contains("NO REDIS"), "{stdout}{stderr}");
        assert!(
            stderr.contains("SKIPPED services::tests::helper_reports_redis: needs redis"),
            "an empty variable names no service: {stderr}"
        );
        assert!(ledger.exists(), "the skip is recorded");
    }

    // i[verify harness.skip.loud]
    #[test]
    fn missing_service_is_a_loud_recorded_skip_outside_the_harness() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("skips.jsonl");
        let out = run_helper("services::tests::helper_needs_redis", false, &ledger);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "helper failed: {stderr}");
        assert!(
            stderr.contains(
                "SKIPPED services::tests::helper_needs_redis: needs redis (run cargo xtask test)"
            ),
            "no loud skip line in: {stderr}"
        );
        let recorded: Skip =
            serde_json::from_str(std::fs::read_to_string(&ledger).unwrap().trim()).unwrap();
        assert_eq!(recorded.test, "services::tests::helper_needs_redis");
        assert_eq!(recorded.service, "redis");
        assert_eq!(recorded.binary, "holdfast_test_support");
    }

    // i[verify harness.skip.loud]
    #[test]
    fn missing_service_fails_the_test_under_the_harness() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("skips.jsonl");
        let out = run_helper("services::tests::helper_needs_redis", true, &ledger);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "helper passed under the harness");
        assert!(
            stderr.contains("needs redis") && stderr.contains(REDIS_VAR),
            "panic message should name the service and variable: {stdout}{stderr}"
        );
        assert!(
            !ledger.exists(),
            "a failure under the harness is not a skip"
        );
    }

    #[test]
    fn ledger_lines_are_one_json_object_each() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("nested/skips.jsonl");
        let skip = Skip {
            test: "tests::pulls".into(),
            binary: "smoke".into(),
            service: "docker".into(),
            reason: "HOLDFAST_TEST_DOCKER_HOST not set".into(),
        };
        skip.append_to(&ledger).unwrap();
        skip.append_to(&ledger).unwrap();
        let text = std::fs::read_to_string(&ledger).unwrap();
        let lines: Vec<Skip> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines, vec![skip.clone(), skip]);
    }

    #[test]
    fn skip_names_the_current_test_thread() {
        let skip = Skip::for_current_test("redis", &[REDIS_VAR]);
        assert_eq!(
            skip.test,
            "services::tests::skip_names_the_current_test_thread"
        );
        assert_eq!(skip.service, "redis");
        assert!(skip.reason.contains(REDIS_VAR));
        assert!(!skip.binary.is_empty());
    }
}
