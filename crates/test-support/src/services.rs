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
/// `127.0.0.1:PORT` of the second registry, which demands htpasswd (basic) authentication.
pub const AUTH_REGISTRY_VAR: &str = "HOLDFAST_TEST_AUTH_REGISTRY";
/// The image seeded into the authenticated registry (absent from dockerd's local store).
pub const AUTH_IMAGE_VAR: &str = "HOLDFAST_TEST_AUTH_IMAGE";
/// The user name the authenticated registry accepts.
pub const AUTH_USER_VAR: &str = "HOLDFAST_TEST_AUTH_USER";
/// That user's password (a test secret, made up by the harness for the run).
pub const AUTH_PASSWORD_VAR: &str = "HOLDFAST_TEST_AUTH_PASSWORD";
/// `https://127.0.0.1:PORT/dir`, pebble's ACME directory.
pub const ACME_DIRECTORY_VAR: &str = "HOLDFAST_TEST_ACME_DIRECTORY";
/// Path to the PEM of the CA that signed pebble's TLS certificate.
pub const ACME_CA_VAR: &str = "HOLDFAST_TEST_ACME_CA";
/// `https://127.0.0.1:PORT`, pebble's management API (its intermediate and root certificates).
pub const ACME_MANAGEMENT_VAR: &str = "HOLDFAST_TEST_ACME_MANAGEMENT";
/// The port pebble's validator connects to for HTTP-01 challenges (left free for the test).
pub const ACME_HTTP01_PORT_VAR: &str = "HOLDFAST_TEST_ACME_HTTP01_PORT";
/// The port pebble's validator connects to for TLS-ALPN-01 challenges (left free for the test).
pub const ACME_TLS_ALPN01_PORT_VAR: &str = "HOLDFAST_TEST_ACME_TLS_ALPN01_PORT";
/// `http://127.0.0.1:PORT`, pebble-challtestsrv's management API.
pub const CHALLTESTSRV_VAR: &str = "HOLDFAST_TEST_CHALLTESTSRV";
/// `http://127.0.0.1:PORT`, etcd's client URL.
pub const ETCD_VAR: &str = "HOLDFAST_TEST_ETCD";
/// `redis://127.0.0.1:PORT`.
pub const REDIS_VAR: &str = "HOLDFAST_TEST_REDIS";
/// `127.0.0.1:PORT` of knotd, authoritative for [`KNOT_ZONE_VAR`], taking TSIG-signed updates.
pub const KNOT_VAR: &str = "HOLDFAST_TEST_KNOT";
/// The zone knotd serves and accepts RFC 2136 updates for.
pub const KNOT_ZONE_VAR: &str = "HOLDFAST_TEST_KNOT_ZONE";
/// The name of the TSIG key knotd accepts updates with (hmac-sha256).
pub const KNOT_TSIG_NAME_VAR: &str = "HOLDFAST_TEST_KNOT_TSIG_NAME";
/// Path of a file holding that key's secret, base64.
pub const KNOT_TSIG_FILE_VAR: &str = "HOLDFAST_TEST_KNOT_TSIG_FILE";
/// `https://127.0.0.1:PORT/dir` of a second pebble whose DNS server is knot ([`KNOT_VAR`]), for
/// DNS-01 (its TLS certificate is signed by [`ACME_CA_VAR`]'s CA).
pub const ACME_DNS01_DIRECTORY_VAR: &str = "HOLDFAST_TEST_ACME_DNS01_DIRECTORY";
/// Path of the skip ledger (JSON lines).
pub const SKIP_LEDGER_VAR: &str = "HOLDFAST_TEST_SKIP_LEDGER";

/// The skip ledger's file name in the target directory: where the harness points
/// [`SKIP_LEDGER_VAR`] (under its target directory), and [`default_ledger_path`] without it.
pub const LEDGER_FILE: &str = "holdfast-test-skips.jsonl";

/// Every variable `cargo xtask test` exports, each of them read here, and every `HOLDFAST_TEST_*`
/// variable read here among them (the module also reads `CI`): the test runner
/// (holdfast-test-runner) refuses to start a run whose services' environment differs.
// i[impl harness.variables]
pub const VARIABLES: &[&str] = &[
    SERVICES_VAR,
    SKIP_LEDGER_VAR,
    DOCKER_HOST_VAR,
    REGISTRY_VAR,
    IMAGE_VAR,
    AUTH_REGISTRY_VAR,
    AUTH_IMAGE_VAR,
    AUTH_USER_VAR,
    AUTH_PASSWORD_VAR,
    ACME_DIRECTORY_VAR,
    ACME_CA_VAR,
    ACME_MANAGEMENT_VAR,
    ACME_HTTP01_PORT_VAR,
    ACME_TLS_ALPN01_PORT_VAR,
    CHALLTESTSRV_VAR,
    ETCD_VAR,
    REDIS_VAR,
    KNOT_VAR,
    KNOT_ZONE_VAR,
    KNOT_TSIG_NAME_VAR,
    KNOT_TSIG_FILE_VAR,
    ACME_DNS01_DIRECTORY_VAR,
];

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

/// The registry that demands credentials, with the image the harness seeded into it.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthRegistry {
    /// Plain-HTTP address on loopback.
    pub addr: SocketAddr,
    /// The seeded image reference, e.g. `127.0.0.1:PORT/holdfast/busybox:latest`.
    pub image: String,
    /// The seeded image's repository path inside the registry, e.g. `holdfast/busybox:latest`.
    pub image_path: String,
    /// The user it accepts.
    pub username: String,
    /// That user's password.
    pub password: String,
}

impl std::fmt::Debug for AuthRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthRegistry")
            .field("addr", &self.addr)
            .field("image", &self.image)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
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
    /// The port pebble validates TLS-ALPN-01 challenges on, if the harness exported it.
    pub tls_alpn01_port: Option<u16>,
    /// Pebble's management API, `https://127.0.0.1:PORT` (its intermediate and root
    /// certificates), if the harness exported it.
    pub management: Option<String>,
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

/// Knot DNS, for DNS-01.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knot {
    /// Its address (UDP and TCP).
    pub addr: SocketAddr,
    /// The zone it serves and accepts updates for.
    pub zone: String,
    /// The TSIG key's name.
    pub tsig_name: String,
    /// The file holding the TSIG secret, base64.
    pub tsig_file: PathBuf,
}

/// Knot DNS, or `None` (after a loud skip).
#[track_caller]
pub fn knot() -> Option<Knot> {
    let mut vars = require(
        "knot",
        &[
            KNOT_VAR,
            KNOT_ZONE_VAR,
            KNOT_TSIG_NAME_VAR,
            KNOT_TSIG_FILE_VAR,
        ],
    )?;
    let tsig_file = PathBuf::from(vars.remove(3));
    let tsig_name = vars.remove(2);
    let zone = vars.remove(1);
    let addr_text = vars.remove(0);
    let addr = parse_or_panic(KNOT_VAR, &addr_text, addr_text.parse::<SocketAddr>());
    Some(Knot {
        addr,
        zone,
        tsig_name,
        tsig_file,
    })
}

/// The DNS-01 pebble (its DNS server is knot): its directory and the CA of its TLS certificate,
/// with knot itself, or `None` (after a loud skip).
#[track_caller]
pub fn acme_dns01() -> Option<(String, PathBuf, Knot)> {
    let mut vars = require(
        "pebble for DNS-01",
        &[ACME_DNS01_DIRECTORY_VAR, ACME_CA_VAR],
    )?;
    let ca = PathBuf::from(vars.remove(1));
    let directory = vars.remove(0);
    Some((directory, ca, knot()?))
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

/// The registry that demands credentials, or `None` (after a loud skip).
#[track_caller]
pub fn auth_registry() -> Option<AuthRegistry> {
    let mut vars = require(
        "authenticated registry",
        &[
            AUTH_REGISTRY_VAR,
            AUTH_IMAGE_VAR,
            AUTH_USER_VAR,
            AUTH_PASSWORD_VAR,
        ],
    )?;
    let password = vars.remove(3);
    let username = vars.remove(2);
    let image = vars.remove(1);
    let addr_text = vars.remove(0);
    let addr = parse_or_panic(
        AUTH_REGISTRY_VAR,
        &addr_text,
        addr_text.parse::<SocketAddr>(),
    );
    let image_path = image
        .strip_prefix(&format!("{addr_text}/"))
        .unwrap_or(&image)
        .to_owned();
    Some(AuthRegistry {
        addr,
        image,
        image_path,
        username,
        password,
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
    let tls_alpn01_port = std::env::var(ACME_TLS_ALPN01_PORT_VAR)
        .ok()
        .map(|p| parse_or_panic(ACME_TLS_ALPN01_PORT_VAR, &p, p.parse::<u16>()));
    let management = std::env::var(ACME_MANAGEMENT_VAR)
        .ok()
        .filter(|m| !m.is_empty());
    Some(Acme {
        directory,
        ca_pem,
        challtestsrv,
        http01_port,
        tls_alpn01_port,
        management,
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
    ci: bool,
    ledger: PathBuf,
}

impl Environment {
    fn from_process() -> Self {
        Environment {
            under_harness: std::env::var(SERVICES_VAR).is_ok_and(|v| v == "1"),
            ci: std::env::var(CI_VAR).is_ok_and(|v| v == "true"),
            ledger: std::env::var_os(SKIP_LEDGER_VAR)
                .map(PathBuf::from)
                .unwrap_or_else(default_ledger_path),
        }
    }

    /// Why a missing need fails the test here rather than skipping it, or `None` for a skip.
    // i[impl harness.skip.loud]
    fn fails(&self, when: FailWhen) -> Option<&'static str> {
        match when {
            FailWhen::Never => None,
            _ if self.under_harness => Some("the harness (HOLDFAST_TEST_SERVICES=1)"),
            FailWhen::HarnessOrCi if self.ci => Some("CI (CI=true)"),
            _ => None,
        }
    }
}

/// `CI=true` marks a CI run, which installs what the tests need.
const CI_VAR: &str = "CI";

/// `<workspace>/target/`[`LEDGER_FILE`].
pub fn default_ledger_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target")
        .join(LEDGER_FILE)
}

/// Where a missing need is a failure of the test rather than a skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailWhen {
    /// Under the harness (`HOLDFAST_TEST_SERVICES=1`), which provides it.
    Harness,
    /// Under the harness, or in CI (`CI=true`): both install it.
    HarnessOrCi,
    /// Never: the harness provides it only by how it builds the tests (a cargo feature), so a
    /// test missing it was built by hand, with or without the services' environment loaded.
    Never,
}

/// Reports that the current test cannot run for want of `service` (`reason` says why, e.g.
/// `HOLDFAST_TEST_REDIS is not set`). Where `fail` says so (under the harness, or in CI) it
/// panics, failing the test. Otherwise it prints `SKIPPED <test>: needs <service> (run cargo
/// xtask test)` straight to stderr and appends the skip (test thread, binary without cargo's hash,
/// service, reason) to the ledger at `HOLDFAST_TEST_SKIP_LEDGER` or [`default_ledger_path`],
/// warning on stderr when the ledger cannot be written; the caller then returns early.
// i[impl harness.skip.loud]
#[track_caller]
pub fn skip_loudly(service: &str, reason: &str, fail: FailWhen) {
    let skip = Skip::for_current_test(service, reason);
    let env = Environment::from_process();
    if let Some(there) = env.fails(fail) {
        panic!(
            "{}: needs {service}, but {reason}; under {there} that fails the test",
            skip.test
        );
    }
    // Straight to the stderr handle, not `eprintln!`: libtest captures the print macros, and a
    // skip must be visible in a plain `cargo test` run.
    let mut stderr = std::io::stderr();
    let _ = writeln!(
        stderr,
        "SKIPPED {}: needs {service} (run cargo xtask test)",
        skip.test
    );
    if let Err(err) = skip.append_to(&env.ledger) {
        // The skip is still loud on stderr; a ledger we cannot write is worth saying too.
        let _ = writeln!(
            stderr,
            "warning: could not record the skip in {}: {err}",
            env.ledger.display()
        );
    }
}

/// Reads every variable, or reports the service missing (skip or panic) and returns `None`.
// i[impl harness.skip.loud]
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
    let verb = if missing.len() == 1 { "is" } else { "are" };
    let reason = format!("{} {verb} not set", missing.join(", "));
    skip_loudly(service, &reason, FailWhen::Harness);
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
    fn for_current_test(service: &str, reason: &str) -> Self {
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
            reason: reason.to_owned(),
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
        let harness: &[_] = if under_harness {
            &[(SERVICES_VAR, "1")]
        } else {
            &[]
        };
        run_helper_in(helper, ledger, harness)
    }

    /// `run_helper`, with the redis variable set to `redis` when given.
    fn run_helper_with(
        helper: &str,
        under_harness: bool,
        ledger: &Path,
        redis: Option<&str>,
    ) -> std::process::Output {
        let mut env = vec![];
        if under_harness {
            env.push((SERVICES_VAR, "1"));
        }
        if let Some(redis) = redis {
            env.push((REDIS_VAR, redis));
        }
        run_helper_in(helper, ledger, &env)
    }

    /// Runs `helper` with the skip ledger at `ledger` and `env` set, and none of the variables that
    /// decide a skip (the harness's, CI's, redis's) inherited.
    fn run_helper_in(helper: &str, ledger: &Path, env: &[(&str, &str)]) -> std::process::Output {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                helper,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env_remove(REDIS_VAR)
            .env_remove(SERVICES_VAR)
            .env_remove(CI_VAR)
            .env(SKIP_LEDGER_VAR, ledger)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    /// A value of the shape the harness exports for `var`.
    fn sample(var: &str) -> &'static str {
        match var {
            SERVICES_VAR => "1",
            SKIP_LEDGER_VAR => "/nowhere/skips.jsonl",
            DOCKER_HOST_VAR => "unix:///nowhere/docker.sock",
            REGISTRY_VAR => "127.0.0.1:5000",
            IMAGE_VAR => "127.0.0.1:5000/holdfast/busybox:test",
            AUTH_REGISTRY_VAR => "127.0.0.1:5001",
            AUTH_IMAGE_VAR => "127.0.0.1:5001/holdfast/busybox:test",
            ACME_HTTP01_PORT_VAR => "5002",
            ACME_TLS_ALPN01_PORT_VAR => "5003",
            REDIS_VAR => "redis://127.0.0.1:6379",
            KNOT_VAR => "127.0.0.1:5353",
            _ => "value",
        }
    }

    /// Runs the helper that reads every service with exactly `vars` set (nothing inherited).
    fn read_everything_with(vars: &[&str]) -> std::process::Output {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "services::tests::helper_reads_everything",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env_clear()
            .envs(vars.iter().map(|var| (*var, sample(var))))
            .output()
            .unwrap()
    }

    // Every variable the runner exports is read here, and nothing else: with exactly
    // [`VARIABLES`] set, under the harness, every reader finds its service (a reader needing
    // anything more would panic), and without any one of them, something read changes.
    // i[verify harness.variables]
    #[test]
    fn the_readers_read_exactly_the_variables_the_harness_exports() {
        let all = read_everything_with(VARIABLES);
        let stdout = String::from_utf8_lossy(&all.stdout).into_owned();
        assert!(
            all.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&all.stderr)
        );
        assert!(stdout.contains("READ EVERYTHING"), "{stdout}");
        for var in VARIABLES {
            let fewer: Vec<&str> = VARIABLES.iter().copied().filter(|v| v != var).collect();
            let without = read_everything_with(&fewer);
            assert!(
                !without.status.success() || without.stdout != all.stdout,
                "nothing reads {var}"
            );
        }
        // The names the harness exports are the spec's, and each is listed once.
        let mut names: Vec<&str> = VARIABLES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), VARIABLES.len());
        assert!(names.iter().all(|n| n.starts_with("HOLDFAST_TEST_")));
    }

    // An optional read (`.ok()`, `.or_else`) leaves no trace in what the readers return, so the
    // source itself is checked: every `HOLDFAST_TEST_*` name written in this module's code is
    // among [`VARIABLES`].
    // i[verify harness.variables]
    #[test]
    fn every_holdfast_test_name_written_here_is_among_the_variables() {
        let source = include_str!("services.rs");
        let code = source
            .split_once("\n#[cfg(test)]")
            .map_or(source, |(code, _)| code);
        let quoted = "\"HOLDFAST_TEST_";
        let names: Vec<&str> = code
            .match_indices(quoted)
            .map(|(at, _)| {
                let rest = &code[at + 1..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect();
        assert!(names.len() >= VARIABLES.len(), "{names:?}");
        for name in names {
            assert!(VARIABLES.contains(&name), "{name} is not in VARIABLES");
        }
    }

    #[test]
    #[ignore = "helper: run in a child process by the variables test"]
    fn helper_reads_everything() {
        println!("{:?}", Environment::from_process());
        println!("{:?}", docker());
        println!("{:?}", registry());
        println!("{:?}", auth_registry());
        println!("{:?}", acme());
        println!("{:?}", acme_dns01());
        println!("{:?}", etcd());
        println!("{:?}", redis());
        println!("{:?}", knot());
        println!("READ EVERYTHING");
    }

    /// The one skip recorded in `ledger`.
    fn the_recorded_skip(ledger: &Path) -> Skip {
        serde_json::from_str(std::fs::read_to_string(ledger).unwrap().trim()).unwrap()
    }

    #[test]
    #[ignore = "helper: run in a child process by the skip tests"]
    fn helper_skips_for_a_feature() {
        skip_loudly("a feature", "built without it", FailWhen::Never);
        println!("RETURNED");
    }

    #[test]
    #[ignore = "helper: run in a child process by the skip tests"]
    fn helper_skips_for_a_program() {
        skip_loudly("a program", "it is not installed", FailWhen::HarnessOrCi);
        println!("RETURNED");
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
        let recorded = the_recorded_skip(&ledger);
        assert_eq!(recorded.test, "services::tests::helper_needs_redis");
        assert_eq!(recorded.service, "redis");
        assert_eq!(recorded.binary, "holdfast_test_support");
        assert_eq!(recorded.reason, "HOLDFAST_TEST_REDIS is not set");
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
        let skip = Skip::for_current_test("redis", "HOLDFAST_TEST_REDIS is not set");
        assert_eq!(
            skip.test,
            "services::tests::skip_names_the_current_test_thread"
        );
        assert_eq!(skip.service, "redis");
        assert_eq!(skip.reason, "HOLDFAST_TEST_REDIS is not set");
        assert_eq!(skip.binary, "holdfast_test_support");
    }

    // i[verify harness.skip.loud]
    #[test]
    fn only_what_the_harness_or_ci_provides_fails_there() {
        let env = |under_harness, ci| Environment {
            under_harness,
            ci,
            ledger: PathBuf::new(),
        };
        let harness = Some("the harness (HOLDFAST_TEST_SERVICES=1)");
        let ci = Some("CI (CI=true)");
        // (under the harness, CI=true) → what each kind of need does there.
        for (under_harness, in_ci, service, program) in [
            (false, false, None, None),
            (true, false, harness, harness),
            (false, true, None, ci),
            (true, true, harness, harness),
        ] {
            let env = env(under_harness, in_ci);
            let case = format!("harness {under_harness}, CI {in_ci}");
            assert_eq!(env.fails(FailWhen::Harness), service, "a service: {case}");
            assert_eq!(
                env.fails(FailWhen::HarnessOrCi),
                program,
                "a program: {case}"
            );
            assert_eq!(env.fails(FailWhen::Never), None, "a feature: {case}");
        }
    }

    // i[verify harness.skip.loud]
    #[test]
    fn a_need_the_harness_cannot_provide_is_a_skip_even_under_it() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("skips.jsonl");
        let helper = "services::tests::helper_skips_for_a_feature";
        let out = run_helper_in(helper, &ledger, &[(SERVICES_VAR, "1"), (CI_VAR, "true")]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}{stderr}");
        assert!(stdout.contains("RETURNED"), "{stdout}");
        assert!(
            stderr.contains(&format!(
                "SKIPPED {helper}: needs a feature (run cargo xtask test)"
            )),
            "{stderr}"
        );
        assert_eq!(
            the_recorded_skip(&ledger),
            Skip {
                test: helper.into(),
                binary: "holdfast_test_support".into(),
                service: "a feature".into(),
                reason: "built without it".into(),
            }
        );
    }

    // i[verify harness.skip.loud]
    #[test]
    fn a_program_ci_installs_fails_the_test_in_ci() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("skips.jsonl");
        let helper = "services::tests::helper_skips_for_a_program";
        let out = run_helper_in(helper, &ledger, &[(CI_VAR, "true")]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "skipped in CI: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!(
                "{helper}: needs a program, but it is not installed; under CI (CI=true) that fails the test"
            )),
            "{stderr}"
        );
        assert!(!stdout.contains("RETURNED"), "{stdout}");
        assert!(!ledger.exists(), "a failure is not a skip");
        // Outside CI and the harness the same need is a skip.
        let out = run_helper_in(helper, &ledger, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains(&format!("SKIPPED {helper}: needs a program")));
        assert_eq!(the_recorded_skip(&ledger).service, "a program");
    }

    // i[verify harness.skip.loud]
    #[test]
    fn a_ledger_that_cannot_be_written_is_warned_about_and_the_skip_stays_loud() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the ledger file should be: it cannot be opened for appending.
        let ledger = dir.path().to_owned();
        let helper = "services::tests::helper_skips_for_a_feature";
        let out = run_helper_in(helper, &ledger, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("SKIPPED {helper}: needs a feature")),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "warning: could not record the skip in {}: ",
                ledger.display()
            )),
            "{stderr}"
        );
    }
}
