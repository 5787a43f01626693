//! The line protocol between the orchestrator and its child processes: commands on the child's
//! stdin, one answer line each on its stdout.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;

/// Reads the child's own stdin line by line on a thread (tokio's stdin needs a feature the
/// workspace does not enable) and hands the lines over.
pub fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Writes one answer line to this process's stdout.
pub fn answer(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A child process of the bench, spoken to by lines.
pub struct Peer {
    /// What it is, for messages.
    pub name: String,
    child: Child,
    stdin: ChildStdin,
    stdout: tokio::io::Lines<BufReader<ChildStdout>>,
}

impl Peer {
    /// Starts this binary again in `mode` with `args`; its stderr is ours.
    pub fn spawn(name: &str, mode: &str, args: &[String]) -> Result<Peer, String> {
        let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
        let mut child = Command::new(exe)
            .arg(mode)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {name}: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        Ok(Peer {
            name: name.to_owned(),
            child,
            stdin,
            stdout,
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// The next line the child writes, which must start with `prefix`; the rest of it.
    pub async fn expect(&mut self, prefix: &str) -> Result<String, String> {
        let line = self
            .stdout
            .next_line()
            .await
            .map_err(|e| format!("{}: {e}", self.name))?
            .ok_or_else(|| format!("{} ended before answering {prefix:?}", self.name))?;
        line.strip_prefix(prefix)
            .map(|rest| rest.trim().to_owned())
            .ok_or_else(|| format!("{}: expected {prefix:?}, got {line:?}", self.name))
    }

    /// Sends a command and returns the rest of the answer line starting with `prefix`.
    pub async fn ask(&mut self, command: &str, prefix: &str) -> Result<String, String> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .map_err(|e| format!("{}: {e}", self.name))?;
        self.stdin
            .flush()
            .await
            .map_err(|e| format!("{}: {e}", self.name))?;
        self.expect(prefix).await
    }

    /// Asks the child to quit and waits for it (it is killed if it does not go in 5 s).
    pub async fn quit(mut self) {
        let _ = self.stdin.write_all(b"quit\n").await;
        drop(self.stdin);
        if tokio::time::timeout(std::time::Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
