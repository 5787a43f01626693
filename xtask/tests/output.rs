//! A command's report reaches its reader through a pipe, and a reader that leaves while the command
//! is still writing ends the command quietly (`cargo xtask trace --all | head -1`).

mod fixture;

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};

const SPEC: &str =
    "# Demo spec\n\n> r[demo.alpha]\n> Alpha must hold.\n\n> r[demo.beta]\n> Beta must hold.\n";

// i[verify xtask.broken-pipe]
#[test]
fn a_reader_that_takes_one_line_and_leaves_gets_that_line() {
    // Enough findings that the report outgrows the pipe's buffer (64 KiB on Linux): the command
    // is still writing when the reader leaves, so its last writes meet a closed pipe.
    let findings: String =
        std::iter::once("# Findings\n".to_owned())
            .chain((1..=2000).map(|n| {
                format!("\n## H{n}: Alpha number {n}\n\n**Closed by:** `r[demo.alpha]`\n")
            }))
            .collect();
    let tree = fixture::Tree::new(SPEC, &[("docs/audit/findings.md", &findings)], &[]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["trace", "--all", "--root"])
        .arg(tree.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run xtask");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("read the first line");
    // The reader is gone now (like `head -1`).
    let output = child.wait_with_output().expect("wait");
    let root = tree.path().canonicalize().expect("root");
    assert_eq!(first, format!("root: {}\n", root.display()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(output.status.code(), Some(0));
}
