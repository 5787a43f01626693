//! Tests' helpers for starting a real service the way the harness does, privately in a temporary
//! services root, and for the programs those tests need.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use holdfast_test_support::services::{self, Skip};

use super::layout::ServiceDir;
use super::process::Supervisor;

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
    let test = std::thread::current()
        .name()
        .unwrap_or("<unnamed thread>")
        .to_owned();
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let harness = std::env::var(services::SERVICES_VAR).is_ok_and(|v| v == "1");
    if ci || harness {
        panic!("{test}: needs {missing}, not installed (cargo xtask test --install installs it)");
    }
    let binary = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| services::binary_name_without_hash(&stem).to_owned())
        .unwrap_or_default();
    let skip = Skip {
        test: test.clone(),
        binary,
        service: missing.clone(),
        reason: format!("{missing} not installed (cargo xtask test --install installs it)"),
    };
    // Straight to the stderr handle: libtest captures the print macros, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: needs {missing} (run cargo xtask test)"
    );
    let ledger = std::env::var_os(services::SKIP_LEDGER_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(services::default_ledger_path);
    let _ = skip.append_to(&ledger);
    false
}

/// A services root of a test's own, with the supervisor that stops what the test started in it
/// (also when the test fails).
pub struct Run {
    /// Declared first: dropped (stopping the services) before their directory is removed.
    pub supervisor: Supervisor,
    root: tempfile::TempDir,
}

impl Run {
    /// An empty services root.
    pub fn new() -> Run {
        let root = tempfile::tempdir().expect("a temporary services root");
        Run {
            supervisor: Supervisor::new(root.path().to_owned()),
            root,
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
