//! Writing a command's report to stdout without panicking when the reader has gone away
//! (`cargo xtask trace --all | head`): a closed pipe ends the output quietly.

use std::io::Write as _;

/// Writes `text` to stdout; a broken pipe is not an error (the reader saw what it wanted).
// i[impl xtask.broken-pipe]
pub fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    // Any other write error has nowhere to be reported either: stdout is the report.
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}
