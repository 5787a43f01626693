//! Running git: one command's standard output, and many blobs through one `git cat-file --batch`.
//!
//! git runs as a process because the engine runs none; `git ls-tree` and one `git cat-file
//! --batch` read a whole tree in two processes, with no git library in every build of the gate.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// Why git gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GitError {
    /// The program cannot be run (not installed, not on `PATH`).
    #[error("cannot run git: {0}")]
    CannotRun(String),
    /// It ran and failed: the subcommand, its status and the first line it wrote on stderr.
    #[error("git {command} failed ({status}){said}")]
    Failed {
        /// The git subcommand (`rev-parse`, `ls-tree`).
        command: String,
        /// Its exit status, as the process reported it.
        status: String,
        /// `": "` and git's first line of stderr, or nothing.
        said: String,
    },
    /// `git cat-file --batch` answered other than asked, or its pipe broke.
    #[error("git cat-file: {0}")]
    Batch(String),
}

/// `PROGRAM -C root ARGS`'s standard output.
pub(crate) fn output(program: &OsStr, root: &Path, args: &[&str]) -> Result<Vec<u8>, GitError> {
    let output = Command::new(program)
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .map_err(|err| GitError::CannotRun(err.to_string()))?;
    if !output.status.success() {
        return Err(GitError::Failed {
            command: args.first().copied().unwrap_or_default().to_owned(),
            status: output.status.to_string(),
            said: String::from_utf8_lossy(&output.stderr)
                .lines()
                .next()
                .map_or_else(String::new, |line| format!(": {line}")),
        });
    }
    Ok(output.stdout)
}

/// The contents of the blobs `ids`, in order, through one `git cat-file --batch`; `None` for a
/// blob that is not UTF-8.
pub(crate) fn blobs(
    program: &OsStr,
    root: &Path,
    ids: &[&str],
) -> Result<Vec<Option<String>>, GitError> {
    let mut child = Command::new(program)
        .arg("-C")
        .arg(root)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // git's own message, if it has one, is the user's best clue.
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|err| GitError::CannotRun(err.to_string()))?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(GitError::Batch("no pipes".to_owned()));
    };
    // Written from a thread of its own: git answers while it reads, and both pipes are finite.
    let asked: String = ids.iter().map(|id| format!("{id}\n")).collect();
    let writer = std::thread::spawn(move || stdin.write_all(asked.as_bytes()));
    let mut out = BufReader::new(stdout);
    let texts = read_batch(&mut out, ids);
    drop(out);
    // On an early error git may still be writing: end it, so it is reaped either way.
    if texts.is_err() {
        let _ = child.kill();
    }
    let _ = writer.join();
    let _ = child.wait();
    texts
}

/// The answers of `git cat-file --batch` to `ids`, read from `out`.
fn read_batch(out: &mut impl BufRead, ids: &[&str]) -> Result<Vec<Option<String>>, GitError> {
    let broken = |err: std::io::Error| GitError::Batch(err.to_string());
    let mut texts = Vec::with_capacity(ids.len());
    for id in ids {
        let mut header = String::new();
        out.read_line(&mut header).map_err(broken)?;
        // `<id> <type> <size>`, or `<id> missing`.
        let size: usize = header
            .split_whitespace()
            .nth(2)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| GitError::Batch(format!("no object {id} ({})", header.trim())))?;
        let mut body = vec![0; size + 1];
        out.read_exact(&mut body).map_err(broken)?;
        body.pop();
        texts.push(String::from_utf8(body).ok());
    }
    Ok(texts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_answer_is_read_blob_by_blob_and_a_binary_one_is_none() {
        let answer = b"a blob 5\nhello\nb blob 3\n\xff\xfe\x00\n";
        let texts = read_batch(&mut &answer[..], &["a", "b"]).expect("read");
        assert_eq!(texts, [Some("hello".to_owned()), None]);
    }

    #[test]
    fn a_missing_object_or_a_short_answer_is_an_error() {
        let err = read_batch(&mut &b"c missing\n"[..], &["c"]).expect_err("missing");
        assert_eq!(err.to_string(), "git cat-file: no object c (c missing)");
        let err = read_batch(&mut &b"a blob 50\nshort\n"[..], &["a"]).expect_err("short");
        assert!(matches!(err, GitError::Batch(_)), "{err}");
    }

    #[test]
    fn a_program_that_cannot_run_says_so() {
        let err = output(OsStr::new("/nonexistent/git"), Path::new("/"), &["status"])
            .expect_err("no such program");
        assert!(matches!(err, GitError::CannotRun(_)), "{err:?}");
        assert!(err.to_string().starts_with("cannot run git: "), "{err}");
    }
}
