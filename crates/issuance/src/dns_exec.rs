//! The `exec` DNS-01 provider, as lego's: `COMMAND... present|cleanup FQDN VALUE`, no shell, a
//! bounded run, what it printed kept (escaped, limited) for the error.

use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::AsyncReadExt;

use crate::dns01::DnsProvider;
use crate::dns01_error::Dns01Error;
use crate::source::BoxFuture;

/// The default bound on one run.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes of output kept for an error.
const OUTPUT_KEPT: usize = 1024;

/// The `exec` provider.
#[derive(Debug, Clone)]
pub struct ExecProvider {
    argv: Vec<String>,
    timeout: Duration,
}

impl ExecProvider {
    /// Runs `argv` (its first element the program) for each record, each run bounded by
    /// `timeout`.
    pub fn new(argv: Vec<String>, timeout: Duration) -> Self {
        Self { argv, timeout }
    }

    // r[impl issue.dns01.exec]
    async fn run(&self, action: &'static str, fqdn: &str, value: &str) -> Result<(), Dns01Error> {
        let Some((program, args)) = self.argv.split_first() else {
            return Err(Dns01Error::Spawn {
                program: String::new(),
                message: "command names no program".into(),
            });
        };
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .args([action, fqdn, value])
            .env_clear()
            .env("PATH", crate::hook::HOOK_PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout kills what it started too.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| Dns01Error::Spawn {
            program: program.clone(),
            message: e.to_string(),
        })?;
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .filter(|id| *id > 0);
        let mut group = KillGroup(group);
        // Both pipes read beside the wait (a chatty command never blocks on a full pipe), the
        // first bytes kept.
        let kept = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        let pipes: [Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>; 2] = [
            child.stdout.take().map(|p| Box::new(p) as _),
            child.stderr.take().map(|p| Box::new(p) as _),
        ];
        for mut pipe in pipes.into_iter().flatten() {
            let kept = kept.clone();
            readers.push(Aborting(tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = pipe.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
                    let room = OUTPUT_KEPT.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            })));
        }
        let status = match tokio::time::timeout(self.timeout, child.wait()).await {
            Ok(Ok(status)) => {
                group.0 = None;
                status
            }
            Ok(Err(e)) => {
                return Err(Dns01Error::Spawn {
                    program: program.clone(),
                    message: e.to_string(),
                });
            }
            Err(_) => {
                group.kill();
                let _ = child.wait().await;
                return Err(Dns01Error::Timeout {
                    program: program.clone(),
                    action,
                    name: fqdn.to_owned(),
                    timeout: self.timeout,
                });
            }
        };
        if status.success() {
            return Ok(());
        }
        // A short wait for the rest of the text (a child of the command may hold the pipes).
        for reader in &mut readers {
            let _ = tokio::time::timeout(Duration::from_millis(200), &mut reader.0).await;
        }
        drop(readers);
        let output = escape_output(&kept.lock().unwrap_or_else(PoisonError::into_inner));
        Err(Dns01Error::Exit {
            program: program.clone(),
            action,
            name: fqdn.to_owned(),
            status: status.to_string(),
            output,
        })
    }
}

/// What a command printed, as one line: trimmed, control characters, bidi and zero-width format
/// characters and invalid UTF-8 escaped, at most [`OUTPUT_KEPT`] bytes once escaped.
// r[impl issue.dns01.exec]
pub fn escape_output(bytes: &[u8]) -> String {
    let bytes = &bytes[..bytes.len().min(OUTPUT_KEPT)];
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for c in text.trim().chars() {
        let piece: String = if c.is_control() || is_format(c) {
            c.escape_default().collect()
        } else {
            c.to_string()
        };
        // Whole pieces only: an escape is never cut in half.
        if out.len() + piece.len() > OUTPUT_KEPT {
            break;
        }
        out.push_str(&piece);
    }
    out
}

/// Unicode format characters (category Cf) that can reorder or hide text in a log: bidi
/// controls, zero-width characters, the soft hyphen and the byte-order mark.
fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{061c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
    )
}

struct Aborting(tokio::task::JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The command's process group, SIGKILLed when dropped while armed.
struct KillGroup(Option<i32>);

impl KillGroup {
    fn kill(&mut self) {
        if let Some(id) = self.0.take() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(id),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Drop for KillGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

impl DnsProvider for ExecProvider {
    fn present<'a>(
        &'a self,
        fqdn: &'a str,
        value: &'a str,
    ) -> BoxFuture<'a, Result<(), Dns01Error>> {
        Box::pin(self.run("present", fqdn, value))
    }

    fn cleanup<'a>(
        &'a self,
        fqdn: &'a str,
        value: &'a str,
    ) -> BoxFuture<'a, Result<(), Dns01Error>> {
        Box::pin(self.run("cleanup", fqdn, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn script(dir: &Path, body: &str) -> String {
        let path = dir.join("dns-hook");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    // r[verify issue.dns01.exec]
    #[tokio::test]
    async fn the_command_gets_action_fqdn_and_value_as_arguments_without_a_shell() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("calls");
        let program = script(
            dir.path(),
            &format!(
                "printf '%s|' \"$@\" >> {out}; printf '\\n%s\\n' \"$PATH\" >> {out}",
                out = out.display()
            ),
        );
        let provider =
            ExecProvider::new(vec![program, "--zone=a b".into()], Duration::from_secs(10));
        // A value a shell would expand: passed as one argument, as written.
        provider
            .present("_acme-challenge.a.test.", "$(id)`x`;v")
            .await
            .unwrap();
        provider
            .cleanup("_acme-challenge.a.test.", "v2")
            .await
            .unwrap();
        let calls = std::fs::read_to_string(&out).unwrap();
        let lines: Vec<&str> = calls.lines().collect();
        assert_eq!(
            lines[0],
            "--zone=a b|present|_acme-challenge.a.test.|$(id)`x`;v|"
        );
        assert_eq!(lines[1], crate::hook::HOOK_PATH);
        assert_eq!(lines[2], "--zone=a b|cleanup|_acme-challenge.a.test.|v2|");
    }

    // r[verify issue.dns01.exec]
    #[tokio::test]
    async fn the_command_sees_no_environment_but_path() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env");
        // `env` lists what the command inherited (sh itself adds PWD, and maybe SHLVL and _).
        let program = script(
            dir.path(),
            &format!("/usr/bin/env > {out}", out = out.display()),
        );
        let provider = ExecProvider::new(vec![program], Duration::from_secs(10));
        provider
            .present("_acme-challenge.a.test.", "v")
            .await
            .unwrap();
        let env = std::fs::read_to_string(&out).unwrap();
        let names: Vec<&str> = env
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .filter(|k| !matches!(*k, "PWD" | "SHLVL" | "_" | "OLDPWD"))
            .collect();
        assert_eq!(names, ["PATH"], "{env}");
        // The test process itself has more (HOME, at least, or cargo's own variables).
        assert!(std::env::vars().count() > 1);
    }

    // r[verify issue.dns01.exec]
    #[tokio::test]
    async fn a_failing_command_says_how_it_ended_with_its_output_escaped_and_limited() {
        let dir = tempfile::tempdir().unwrap();
        let program = script(
            dir.path(),
            "printf 'api said:\\033[31m no\\n'; head -c 5000 /dev/zero | tr '\\0' x >&2; exit 3",
        );
        let provider = ExecProvider::new(vec![program.clone()], Duration::from_secs(10));
        let err = provider
            .present("_acme-challenge.a.test.", "v")
            .await
            .unwrap_err();
        let Dns01Error::Exit { output, status, .. } = &err else {
            panic!("{err:?}");
        };
        assert!(status.contains('3'), "{status}");
        assert!(output.starts_with("api said:\\u{1b}[31m no\\n"), "{output}");
        assert!(output.len() <= OUTPUT_KEPT + 16, "{}", output.len());
        assert!(!output.contains('\u{1b}'), "{output}");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("{program} present _acme-challenge.a.test.:")),
            "{text}"
        );
    }

    // r[verify issue.dns01.exec]
    #[tokio::test]
    async fn a_command_past_its_timeout_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        // A grandchild in the background: only a kill of the process group reaches it.
        let program = script(
            dir.path(),
            &format!("sleep 30 &\necho $! > {pid}\nwait", pid = pidfile.display()),
        );
        let provider = ExecProvider::new(vec![program], Duration::from_millis(300));
        let started = std::time::Instant::now();
        let err = provider
            .cleanup("_acme-challenge.a.test.", "v")
            .await
            .unwrap_err();
        assert!(matches!(err, Dns01Error::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Gone (reaped by init once killed): allow it a moment to be reaped.
        let mut alive = true;
        for _ in 0..50 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Absent, or a zombie awaiting its reaper: killed either way.
            if stat.is_empty() || stat.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')) {
                alive = false;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive, "the background sleep {pid} outlived the kill");
    }

    // r[verify issue.dns01.exec]
    #[test]
    fn bidi_and_zero_width_characters_are_escaped_and_the_escaped_text_is_at_most_1_kib() {
        let text = escape_output("ok\u{202e}txt.exe\u{200b}".as_bytes());
        assert_eq!(text, "ok\\u{202e}txt.exe\\u{200b}");
        // Every byte a control character: escaped, still at most 1 KiB.
        let escaped = escape_output(&[0x01; 4096]);
        assert!(escaped.len() <= OUTPUT_KEPT, "{}", escaped.len());
        assert!(escaped.starts_with("\\u{1}"), "{escaped}");
    }
}
