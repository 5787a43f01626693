//! Tests' stand-ins for the programs a command runs (cargo, a bench example, xtask itself).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A shell script, run as `sh PATH ARGS...`: the code under test appends its arguments (`$1`,
/// `$2`, ... in the script). The script is read by `sh`, never executed itself: a file this
/// process just wrote could fail to exec with ETXTBSY while another test thread forks.
pub struct Script(PathBuf);

impl Script {
    /// Writes `text` to `dir/name`.
    pub fn new(dir: &Path, name: &str, text: &str) -> Script {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("writing the stand-in script");
        Script(path)
    }

    /// A command that runs the script.
    pub fn command(&self) -> Command {
        let mut command = Command::new("sh");
        command.arg(&self.0);
        command
    }
}

/// The command of a [`Script`] written to `dir/name`, for a stand-in called once.
pub fn script(dir: &Path, name: &str, text: &str) -> Command {
    Script::new(dir, name, text).command()
}
