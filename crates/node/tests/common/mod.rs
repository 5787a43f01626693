//! Running the binary as a subprocess, shared by the subprocess suites.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod ws;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use holdfast::admin::client::{Target, call};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub const TOKEN: &str = "tok-9f3c1e0d-never-logged";

pub struct Node {
    pub child: Reaped,
    pub dir: tempfile::TempDir,
    pub admin: Target,
}

pub fn write_config(dir: &Path, extra: &str, budget: &str, docker: Option<&str>) -> PathBuf {
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = format!(
        "[node]\ndata_dir = \"{data}\"\nstop_budget = \"{budget}\"\ntick = \"1s\"\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\nsocket = \"{socket}\"\ntoken_file = \"{token}\"\n\n\
         [log]\nformat = \"json\"\nlevel = \"debug\"\n\n\
         [pull]\ndocker_host = \"{docker}\"\nbase = \"1s\"\ncap = \"2s\"\n\n{extra}",
        data = dir.join("data").display(),
        socket = dir.join("admin.sock").display(),
        token = token_file.display(),
        docker = docker.map_or_else(
            || format!("unix://{}", dir.join("no-docker.sock").display()),
            str::to_owned
        ),
    );
    let path = dir.join("holdfast.toml");
    std::fs::write(&path, config).unwrap();
    path
}

/// Starts a node whose config has a `[testing]` section. A binary built without the
/// `testing-modules` feature has no such section: the test is then skipped, loudly (stderr and
/// the skip ledger spec-check reads), and `None` is returned.
pub fn start_testing(extra: &str, budget: &str) -> Option<Node> {
    if cfg!(feature = "testing-modules") {
        return Some(start(extra, budget));
    }
    // Not a failure under the harness: it always builds with the feature, so a test without it
    // was built by hand (perhaps with the services' environment loaded, HOLDFAST_TEST_SERVICES=1).
    holdfast_test_support::services::skip_loudly(
        "the testing-modules feature",
        "built without --features testing-modules (cargo xtask test turns it on)",
        holdfast_test_support::services::FailWhen::Never,
    );
    None
}

pub fn start(extra: &str, budget: &str) -> Node {
    start_in(tempfile::tempdir().unwrap(), extra, budget, None)
}

pub fn start_in(dir: tempfile::TempDir, extra: &str, budget: &str, docker: Option<&str>) -> Node {
    let config = write_config(dir.path(), extra, budget, docker);
    spawn_with(dir, &config, Command::new(env!("CARGO_BIN_EXE_holdfast")))
}

/// Spawns `command` (the binary, or a shell that runs it) as `holdfast run -c CONFIG` and waits
/// for its admin address.
pub fn spawn_with(dir: tempfile::TempDir, config: &Path, command: Command) -> Node {
    let child = spawn_only(&dir, config, command);
    attach(dir, child)
}

/// Spawns `command` as `holdfast run -c CONFIG`, its stderr into the directory's `stderr.log`,
/// without waiting for anything.
pub fn spawn_only(dir: &tempfile::TempDir, config: &Path, mut command: Command) -> Child {
    die_with_parent(&mut command);
    command
        .args(["run", "-c"])
        .arg(config)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        // A file, not a pipe: a pipe nobody drains would fill and block the node's logging.
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
        .spawn()
        .unwrap()
}

/// Has the child killed when the thread that spawns it ends: a test process killed from outside
/// (a mutation run's timeout, a harness interrupted) runs no destructor, and its node would
/// otherwise outlive it, holding ports and CPU. Callers spawn from the test's own thread, which
/// lives as long as the test.
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the closure runs in the forked child before exec and makes one prctl(2) call,
    // which allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}

/// Waits for the admin address of the node `child` runs with its data in `dir`.
pub fn attach(dir: tempfile::TempDir, child: Child) -> Node {
    let addr_file = dir.path().join("data/admin.addr");
    let deadline = Instant::now() + Duration::from_secs(20);
    let addr = loop {
        if let Ok(text) = std::fs::read_to_string(&addr_file) {
            if let Ok(addr) = text.trim().parse() {
                break addr;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the node never wrote its admin address"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    Node {
        child: Reaped(child),
        dir,
        admin: Target::Tcp(addr),
    }
}

/// A child process that is killed (and reaped) when dropped, so a failing assert never leaves a
/// node or a client running after its test.
#[derive(Debug)]
pub struct Reaped(pub Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl Node {
    pub fn signal(&self, signal: Signal) {
        kill(
            Pid::from_raw(i32::try_from(self.child.id()).unwrap()),
            signal,
        )
        .unwrap();
    }

    /// Waits for the exit (at most `limit`), returning the status code, the time it took and the
    /// whole stderr.
    pub fn wait(self, limit: Duration) -> (i32, Duration, String) {
        let (code, took, log, _dir) = self.wait_inner(limit);
        (code, took, log)
    }

    /// Like [`Node::wait`], keeping the node's directory for inspection.
    pub fn wait_keeping_dir(self, limit: Duration) -> (i32, String, tempfile::TempDir) {
        let (code, _, log, dir) = self.wait_inner(limit);
        (code, log, dir)
    }

    fn wait_inner(mut self, limit: Duration) -> (i32, Duration, String, tempfile::TempDir) {
        let began = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap();
                return (status.code().unwrap_or(-1), began.elapsed(), log, self.dir);
            }
            if began.elapsed() > limit {
                let _ = self.child.kill();
                panic!("the node did not exit within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub async fn get(&self, path: &str) -> Result<String, holdfast::admin::client::ClientError> {
        call(&self.admin, hyper::Method::GET, path, None).await
    }

    pub async fn until_ready(&self) {
        for _ in 0..500 {
            if self.get("/readyz").await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("never ready");
    }
}
