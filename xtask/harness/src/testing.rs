//! Tests' helpers for starting a real service the way the harness does, privately in a temporary
//! services root, and for the programs those tests need.

use std::fs::File;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use holdfast_test_support::services::{self, FailWhen};

use super::layout::ServiceDir;
use super::process::{SERVICE_PROGRAMS, Supervisor, sweep_processes, unmount_under};

/// Whether every one of `programs` is on `PATH` (where the harness starts them from). A missing
/// one never lets a test pass silently: under `CI=true` or the harness (`HOLDFAST_TEST_SERVICES=1`),
/// which install them, the test panics; otherwise it prints a `SKIPPED` line and records the skip in
/// the ledger spec-check reads, and the caller returns early.
pub fn installed(programs: &[&str]) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|program| super::packages::locate(program, &path).is_none())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let missing = missing.join(", ");
    services::skip_loudly(
        &missing,
        &format!("{missing} not installed (cargo xtask test --install installs it)"),
        FailWhen::HarnessOrCi,
    );
    false
}

/// Every test's services root is `<temp dir>/holdfast-xtask-services-XXXXXX`.
const ROOT_PREFIX: &str = "holdfast-xtask-services-";
/// The file in a root its test process holds an exclusive `flock` on while it lives.
const LOCK: &str = "lock";

/// A services root of a test's own, with the supervisor that stops what the test started in it
/// (also when the test fails). A test process killed outright (a timeout, Ctrl-C) cannot stop
/// them: they run in process groups of their own and outlive it. So, as the harness does after a
/// run killed outright, each new `Run` first stops what still runs from a root whose lock is free
/// (its test process is gone) and removes that root.
pub struct Run {
    /// Declared first: dropped (stopping the services) before their directory is removed.
    pub supervisor: Supervisor,
    root: tempfile::TempDir,
    /// Released last, once the root is gone.
    _lock: Flock<File>,
}

impl Run {
    /// An empty services root.
    pub fn new() -> Run {
        let tmp = std::env::temp_dir();
        sweep_abandoned(&tmp, SERVICE_PROGRAMS);
        let (root, lock) = locked_root(&tmp);
        Run {
            supervisor: Supervisor::new(root.path().to_owned()),
            root,
            _lock: lock,
        }
    }

    /// The services root.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// A fresh directory for service `name`, as the harness makes it.
    pub fn dir(&self, name: &'static str) -> ServiceDir {
        ServiceDir::fresh(self.root(), name).expect("a service directory")
    }
}

/// A new root under `tmp`, with its lock held.
fn locked_root(tmp: &Path) -> (tempfile::TempDir, Flock<File>) {
    let root = tempfile::Builder::new()
        .prefix(ROOT_PREFIX)
        .tempdir_in(tmp)
        .expect("a temporary services root");
    // Locked before it takes its name, so no sweep can take a lock that is about to be held.
    let taking = root.path().join("lock.new");
    let file = File::create(&taking).expect("the root's lock file");
    let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
        .map_err(|(_, errno)| errno)
        .expect("locking a new root");
    std::fs::rename(&taking, root.path().join(LOCK)).expect("naming the root's lock");
    (root, lock)
}

/// Stops every one of `programs` still running from a root under `tmp` whose lock is free,
/// unmounts what is mounted there, and removes it. A root without a lock yet is being made.
fn sweep_abandoned(tmp: &Path, programs: &[&str]) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(ROOT_PREFIX) {
            continue;
        }
        let root = entry.path();
        let Ok(file) = File::open(root.join(LOCK)) else {
            continue;
        };
        let Ok(_abandoned) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else {
            continue;
        };
        sweep_processes(&root, programs);
        unmount_under(&root);
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use nix::sys::signal::Signal;

    use super::*;
    use crate::process::processes_under;

    /// A process whose command line names `root` (as a service's does), blocked in a shell builtin.
    fn resident(root: &Path) -> Child {
        let child = Command::new("sh")
            .args(["-c", "read line"])
            .arg(root.join("marker"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Until the child has exec'd, its command line is still ours.
        let deadline = Instant::now() + Duration::from_secs(5);
        while processes_under(root, &["sh"]).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(processes_under(root, &["sh"]), [child.id() as i32]);
        child
    }

    #[test]
    fn what_a_killed_test_left_running_is_stopped_and_removed_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        // A root whose test process is gone (its lock released, its root kept), and one in use.
        let (abandoned, lock) = locked_root(tmp.path());
        drop(lock);
        let abandoned = abandoned.keep();
        let (in_use, _lock) = locked_root(tmp.path());
        let mut left = resident(&abandoned);
        let mut running = resident(in_use.path());
        sweep_abandoned(tmp.path(), &["sh"]);
        // Stopped by the sweep (waiting closes its stdin, which would end it too).
        assert!(processes_under(&abandoned, &["sh"]).is_empty());
        assert_eq!(left.wait().unwrap().signal(), Some(Signal::SIGTERM as i32));
        assert!(!abandoned.exists(), "the abandoned root is removed");
        assert_eq!(running.try_wait().unwrap(), None, "the live test's service");
        assert!(in_use.path().join(LOCK).exists());
        running.kill().unwrap();
        let _ = running.wait();
    }
}
