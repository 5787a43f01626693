//! Asking a tracey `query status` on one tree, while its daemon starts, and stopping the daemon.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use spec_engine::spec_check::parity::{self, Answer};

use crate::error::Error;

/// How many times `query status` is asked while tracey answers `Error: Cancelled`.
pub const ATTEMPTS: usize = 6;

/// How to ask tracey: its command, its name in errors, its daemon's state directory, and the
/// pause between asks.
pub(crate) struct Ask<'a> {
    pub tracey: &'a dyn Fn() -> Command,
    pub shown: &'a str,
    pub state: &'a Path,
    pub pause: Duration,
}

impl Ask<'_> {
    /// `tracey query status` in `dir` (the tree called `name`), parsed; tracey's daemon is
    /// stopped after.
    pub(crate) fn status(&self, name: &str, dir: &Path) -> Result<Answer, Error> {
        let run = |args: &[&str]| {
            (self.tracey)()
                .args(args)
                .current_dir(dir)
                .env("XDG_STATE_HOME", self.state)
                .output()
        };
        // The first query starts tracey's daemon and gives up when it takes more than 5 s to
        // listen (a big tree on a busy machine), answering `Error: Cancelled`: ask again while it
        // starts.
        let _daemon = Daemon(&run);
        let mut attempts = 0;
        let output = loop {
            if attempts > 0 {
                std::thread::sleep(self.pause);
            }
            attempts += 1;
            let output = run(&["query", "status"]).map_err(|source| Error::CannotRun {
                shown: self.shown.to_owned(),
                source,
            })?;
            let cancelled = String::from_utf8_lossy(&output.stdout)
                .lines()
                .any(|line| line.trim() == "Error: Cancelled");
            if !cancelled {
                break output;
            }
            if attempts == ATTEMPTS {
                return Err(Error::Cancelled {
                    name: name.to_owned(),
                    attempts,
                });
            }
        };
        let answer = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            return Err(Error::Failed {
                name: name.to_owned(),
                shown: self.shown.to_owned(),
                status: output.status.to_string(),
                said: format!("{}{}", said("stderr", &stderr), said("stdout", &answer)),
            });
        }
        parity::parse(&answer).map_err(|error| Error::Unusable {
            name: name.to_owned(),
            error,
            said: said("stderr", &stderr),
        })
    }
}

/// `; its STREAM: TEXT`, or nothing when tracey wrote nothing there.
fn said(stream: &str, text: &str) -> String {
    if text.trim().is_empty() {
        String::new()
    } else {
        format!("; its {stream}: {}", text.trim())
    }
}

/// Stops tracey's daemon (`tracey kill`) when dropped, on every way out of [`Ask::status`].
struct Daemon<'a, F: Fn(&[&str]) -> std::io::Result<Output>>(&'a F);

impl<F: Fn(&[&str]) -> std::io::Result<Output>> Drop for Daemon<'_, F> {
    fn drop(&mut self) {
        let _ = (self.0)(&["kill"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_tracey_said_is_quoted_only_when_it_said_something() {
        assert_eq!(said("stderr", "  boom \n"), "; its stderr: boom");
        assert_eq!(said("stdout", " \n"), "");
    }
}
