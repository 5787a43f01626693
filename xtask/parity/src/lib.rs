//! spec-parity: the spec gate's counts beside a real tracey 1.3.0's.
//!
//! For every workspace shape spec-engine holds ([`spec_engine::shapes`]) and for a workspace on
//! the disk, it runs the gate and `tracey query status` and compares the two per spec and impl
//! ([`spec_engine::spec_check::parity`]): each row agrees, or differs for a reason the gate
//! states. It needs a tracey binary (whose build needs Node and pnpm), so it is opt-in: `cargo
//! xtask tracey-parity` runs this crate's binary, which writes `docs/audit/tracey-parity.md` with
//! `--out`; its test against a real tracey skips loudly without one. It is outside the
//! workspace's `default-members`, so the gate's own build never compiles it.
//!
//! How the parts fit, leaf first (each imports only the ones before it; this module, last,
//! imports them all):
//!
//! - `error` — why there is no comparison ([`Error`]).
//! - [`locate`] — which tracey runs (`--tracey`, `$TRACEY`, `PATH`), made absolute.
//! - `workdir` — the run's own directory, removed when done.
//! - `query` — `tracey query status` on one tree, asked again while its daemon starts
//!   ([`ATTEMPTS`]), and the daemon stopped after.
//! - this module — [`compare`]: the shapes written out, each tree judged by the gate and by tracey,
//!   and the [`Run`] whose [`page`](Run::page) is the markdown table.
//!
//! The README has an example that compares with a stand-in tracey (it runs as a doctest).

mod error;
pub mod locate;
mod query;
mod workdir;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use spec_engine::spec_check::parity::{self, Comparison};

pub use error::Error;
pub use query::ATTEMPTS;
use query::Ask;
use workdir::WorkDir;

/// The command that writes `docs/audit/tracey-parity.md`, as the page names it.
pub const PARITY_COMMAND: &str = "cargo xtask tracey-parity --out docs/audit/tracey-parity.md";

/// The pause between asks while tracey answers `Error: Cancelled`.
pub const RETRY_PAUSE: Duration = Duration::from_secs(2);

/// The comparisons of one run: every shape's, then the workspace's.
#[derive(Debug)]
pub struct Run {
    /// The first line of `tracey --version`.
    pub version: String,
    /// One per tree, in order.
    pub compared: Vec<Comparison>,
}

impl Run {
    /// Whether every row agrees or differs for a reason the gate states.
    pub fn agrees(&self) -> bool {
        self.compared.iter().all(Comparison::agrees)
    }

    /// The markdown page (`docs/audit/tracey-parity.md`).
    pub fn page(&self) -> String {
        parity::render(&self.compared, PARITY_COMMAND, &self.version)
    }
}

/// Runs the gate and the tracey `tracey()` runs (shown as `shown` in errors) on every workspace
/// shape and on the workspace at `root`, pausing `pause` between asks while tracey's daemon
/// starts.
///
/// # Errors
///
/// tracey cannot run or fails on a tree, its answer is unusable, the gate cannot judge a tree,
/// or the shapes cannot be written.
// i[impl spec-check.parity+2]
pub fn compare(
    root: &Path,
    tracey: &dyn Fn() -> Command,
    shown: &str,
    pause: Duration,
) -> Result<Run, Error> {
    let version = tracey()
        .arg("--version")
        .output()
        .map_err(|source| Error::CannotRun {
            shown: shown.to_owned(),
            source,
        })?;
    let version = String::from_utf8_lossy(&version.stdout)
        .lines()
        .next()
        .unwrap_or("tracey (version unknown)")
        .trim()
        .to_owned();
    // The shapes' trees, and tracey's daemon state (XDG_STATE_HOME), in a directory of this run's.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path =
        std::env::temp_dir().join(format!("holdfast-tracey-parity-{}-{n}", std::process::id()));
    let written = |path: &Path| {
        let path = path.display().to_string();
        move |source| Error::Write { path, source }
    };
    let work = WorkDir::new(path.clone()).map_err(written(&path))?;
    let state = work.path().join("state");
    std::fs::create_dir_all(&state).map_err(written(&state))?;
    let ask = Ask {
        tracey,
        shown,
        state: &state,
        pause,
    };
    let mut compared = Vec::new();
    for shape in spec_engine::shapes::all() {
        let dir = work.path().join("trees").join(shape.name);
        for (path, text) in &shape.files {
            let path = dir.join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(written(parent))?;
            }
            std::fs::write(&path, text).map_err(written(&path))?;
        }
        let dir = dir.canonicalize().map_err(written(&dir))?;
        compared.push(compare_one(&ask, shape.name, &dir)?);
    }
    compared.push(compare_one(&ask, "this workspace", root)?);
    Ok(Run { version, compared })
}

/// The gate and `tracey query status` on the tree at `dir`.
fn compare_one(ask: &Ask<'_>, name: &str, dir: &Path) -> Result<Comparison, Error> {
    let outcome = spec_engine::spec_check::check(&spec_engine::Disk::new(dir), &[], None, &[])
        .map_err(|problem| Error::Gate {
            name: name.to_owned(),
            problem: Box::new(problem),
        })?;
    let answer = ask.status(name, dir)?;
    Ok(parity::compare(name, &outcome, &answer))
}

#[cfg(test)]
mod tests;

// The README's example runs as a doctest too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
