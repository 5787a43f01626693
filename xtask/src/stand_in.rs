//! Tests' stand-ins for the programs a command runs (cargo, a bench example, xtask itself).

use std::path::Path;
use std::process::Command;

/// A shell script at `dir/name` and the command that runs it: `sh dir/name`, to which the code
/// under test appends its arguments (`$1`, `$2`, ... in the script). The script is read by `sh`,
/// never executed itself: a file this process just wrote could fail to exec with ETXTBSY while
/// another test thread forks.
pub fn script(dir: &Path, name: &str, text: &str) -> Command {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writing the stand-in script");
    let mut command = Command::new("sh");
    command.arg(path);
    command
}
