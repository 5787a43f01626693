//! `on_renew`: a command run after each new certificate — directly, no shell — with the
//! certificate's names and file paths in its environment and a timeout past which it is killed.
//! A failing hook is paced through holdfast-retry by the issuer and is one fault until it succeeds.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use holdfast_retry::Policy;
use tokio::io::AsyncReadExt as _;

/// Default of `on_renew_timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest `on_renew_timeout`: a tick waits for its hooks, so longer is a config error.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// The first wait after a failed hook.
pub const PACING_BASE: Duration = Duration::from_secs(30);

/// The longest wait between two runs of a failing hook.
pub const PACING_CAP: Duration = Duration::from_secs(3600);

/// The `PATH` a hook runs with (its environment holds nothing else of the node's).
pub const HOOK_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The most of a failed hook's standard error kept for its fault's message.
const STDERR_KEPT: usize = 512;

/// The pacing of a failing hook: 30 s doubling to an hour, escalated (one fault) from the first
/// failure.
// r[impl issue.on-renew]
pub fn pacing(seed: u64) -> Policy {
    Policy::builder()
        .base(PACING_BASE)
        .cap(PACING_CAP)
        .escalate_after(1)
        .seed(seed)
        .build()
        .unwrap_or_default()
}

/// A configured `on_renew`: the program and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// The program (a path, or a name looked up on [`HOOK_PATH`]) and its arguments.
    pub argv: Vec<String>,
    /// How long one run may take before it is killed.
    pub timeout: Duration,
}

/// What a hook is told about the certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookEnv {
    /// Every name, the key first.
    pub names: Vec<String>,
    /// Where its files are.
    pub files: HookFiles,
}

/// The files a hook is told of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookFiles {
    /// The deployed files.
    Deployed {
        /// `HOLDFAST_CERT_PATH`.
        cert: PathBuf,
        /// `HOLDFAST_CHAIN_PATH`.
        chain: PathBuf,
        /// `HOLDFAST_FULLCHAIN_PATH`.
        fullchain: PathBuf,
        /// `HOLDFAST_KEY_PATH`.
        key: PathBuf,
    },
    /// No deploy: the store's one PEM file holding key and chain, as `HOLDFAST_KEY_PATH` and
    /// `HOLDFAST_BUNDLE_PATH` only — never under a name a reader would take for a certificate
    /// it may hand out.
    Bundle(PathBuf),
}

impl HookEnv {
    /// The variables, in a stable order.
    // r[impl issue.on-renew]
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        let path = |p: &PathBuf| p.display().to_string();
        let mut vars = vec![
            ("PATH", HOOK_PATH.to_owned()),
            (
                "HOLDFAST_CERT_NAME",
                self.names.first().cloned().unwrap_or_default(),
            ),
            ("HOLDFAST_CERT_NAMES", self.names.join(",")),
        ];
        match &self.files {
            HookFiles::Deployed {
                cert,
                chain,
                fullchain,
                key,
            } => vars.extend([
                ("HOLDFAST_CERT_PATH", path(cert)),
                ("HOLDFAST_CHAIN_PATH", path(chain)),
                ("HOLDFAST_FULLCHAIN_PATH", path(fullchain)),
                ("HOLDFAST_KEY_PATH", path(key)),
            ]),
            HookFiles::Bundle(file) => vars.extend([
                ("HOLDFAST_KEY_PATH", path(file)),
                ("HOLDFAST_BUNDLE_PATH", path(file)),
            ]),
        }
        vars
    }
}

/// Why a run of the hook failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    /// No program configured.
    #[error("on_renew is empty")]
    Empty,
    /// It could not be started.
    #[error("{program}: could not start: {message}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        message: String,
    },
    /// It exited other than 0.
    #[error("{program}: {status}{}", stderr_suffix(stderr))]
    Exit {
        /// The program.
        program: String,
        /// How it ended.
        status: String,
        /// The start of its standard error.
        stderr: String,
    },
    /// It did not end within the timeout, and was killed.
    #[error("{program}: still running after {timeout:?}; killed")]
    Timeout {
        /// The program.
        program: String,
        /// The timeout.
        timeout: Duration,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

impl Hook {
    /// Runs the hook once with `env`: directly (no shell), with only `env`'s variables, standard
    /// input empty, standard output discarded and the start of standard error kept; in its own
    /// process group, which is killed (the hook reaped) when it outlives its timeout or the run
    /// is dropped.
    // r[impl issue.on-renew]
    pub async fn run(&self, env: &HookEnv) -> Result<(), HookError> {
        let Some((program, args)) = self.argv.split_first() else {
            return Err(HookError::Empty);
        };
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .env_clear()
            .envs(env.vars())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout or a drop kills what it started too.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| HookError::Spawn {
            program: program.clone(),
            message: e.to_string(),
        })?;
        let mut group = Group(
            child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .filter(|id| *id > 0),
        );
        // The first bytes of standard error, read beside the wait so a chatty hook never blocks
        // on a full pipe (the rest is read and dropped). Kept where the run can take them even
        // when the reader never sees the end (a child of the hook holding the pipe open).
        let kept = Arc::new(Mutex::new(Vec::new()));
        let reader = child.stderr.take().map(|mut pipe| {
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = pipe.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
                    let room = STDERR_KEPT.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            })
        });
        let mut reader = Reader(reader);
        let status = match tokio::time::timeout(self.timeout, child.wait()).await {
            Ok(Ok(status)) => {
                // It ended by itself: what it left running is its own business.
                group.0 = None;
                status
            }
            Ok(Err(e)) => {
                return Err(HookError::Spawn {
                    program: program.clone(),
                    message: e.to_string(),
                });
            }
            Err(_) => {
                group.kill();
                // Reaped here, not left a zombie (SIGKILL cannot be ignored: this is prompt).
                let _ = child.wait().await;
                reader.stop().await;
                return Err(HookError::Timeout {
                    program: program.clone(),
                    timeout: self.timeout,
                });
            }
        };
        if status.success() {
            reader.stop().await;
            return Ok(());
        }
        // A child of the hook holding the pipe open must not hold this up: a short wait for the
        // end of the text, then what was read.
        reader.finish(Duration::from_millis(200)).await;
        let stderr = String::from_utf8_lossy(&kept.lock().unwrap_or_else(PoisonError::into_inner))
            .into_owned();
        Err(HookError::Exit {
            program: program.clone(),
            status: status.to_string(),
            stderr,
        })
    }
}

/// The task reading a hook's standard error, aborted when dropped (never left running).
struct Reader(Option<tokio::task::JoinHandle<()>>);

impl Reader {
    /// Waits up to `grace` for the reader to reach the end, then stops it.
    async fn finish(&mut self, grace: Duration) {
        if let Some(task) = &mut self.0
            && tokio::time::timeout(grace, task).await.is_ok()
        {
            self.0 = None;
        }
        self.stop().await;
    }

    /// Stops the reader and waits until it is gone.
    async fn stop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// A hook's process group (its id is the hook's pid), SIGKILLed when this is dropped while armed:
/// on a timeout, and when the run is dropped (the child itself is then killed and reaped by
/// tokio's `kill_on_drop`).
// r[impl issue.on-renew]
struct Group(Option<i32>);

impl Group {
    fn kill(&mut self) {
        if let Some(id) = self.0.take() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(id),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;
    use std::path::Path;

    fn script(dir: &Path, name: &str, body: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    fn env(dir: &Path) -> HookEnv {
        HookEnv {
            names: vec!["a.example".into(), "www.a.example".into()],
            files: HookFiles::Deployed {
                cert: dir.join("cert.pem"),
                chain: dir.join("chain.pem"),
                fullchain: dir.join("fullchain.pem"),
                key: dir.join("key.pem"),
            },
        }
    }

    // r[verify issue.on-renew]
    #[tokio::test]
    async fn a_hook_runs_without_a_shell_with_only_its_variables() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env.txt");
        // `$1` is passed as one argument, never split or expanded by a shell.
        let prog = script(
            dir.path(),
            "hook.sh",
            &format!(
                "env | sort > {}\nprintf '%s' \"$1\" > {}.arg",
                out.display(),
                out.display()
            ),
        );
        let hook = Hook {
            argv: vec![prog, "two words; $(rm -rf /)".into()],
            timeout: Duration::from_secs(10),
        };
        hook.run(&env(dir.path())).await.unwrap();
        let seen = std::fs::read_to_string(&out).unwrap();
        let mut vars: Vec<&str> = seen
            .lines()
            .map(|l| l.split('=').next().unwrap())
            .filter(|k| *k != "PWD" && *k != "SHLVL" && *k != "_" && *k != "OLDPWD")
            .collect();
        vars.sort_unstable();
        assert_eq!(
            vars,
            [
                "HOLDFAST_CERT_NAME",
                "HOLDFAST_CERT_NAMES",
                "HOLDFAST_CERT_PATH",
                "HOLDFAST_CHAIN_PATH",
                "HOLDFAST_FULLCHAIN_PATH",
                "HOLDFAST_KEY_PATH",
                "PATH"
            ],
            "{seen}"
        );
        assert!(
            seen.contains("HOLDFAST_CERT_NAMES=a.example,www.a.example\n"),
            "{seen}"
        );
        assert!(seen.contains("HOLDFAST_CERT_NAME=a.example\n"), "{seen}");
        let key = format!(
            "HOLDFAST_KEY_PATH={}\n",
            dir.path().join("key.pem").display()
        );
        assert!(seen.contains(&key), "{seen}");
        let arg = std::fs::read_to_string(format!("{}.arg", out.display())).unwrap();
        assert_eq!(arg, "two words; $(rm -rf /)");
    }

    // r[verify issue.on-renew]
    #[tokio::test]
    async fn a_failing_hook_says_how_it_ended_and_what_it_printed() {
        let dir = tempfile::tempdir().unwrap();
        let prog = script(
            dir.path(),
            "fail.sh",
            "echo 'nginx: config test failed' >&2\nexit 3",
        );
        let hook = Hook {
            argv: vec![prog],
            timeout: Duration::from_secs(10),
        };
        let err = hook.run(&env(dir.path())).await.unwrap_err();
        assert!(matches!(err, HookError::Exit { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("exit status: 3"), "{text}");
        assert!(text.contains("nginx: config test failed"), "{text}");
        let missing = Hook {
            argv: vec![dir.path().join("absent").display().to_string()],
            timeout: Duration::from_secs(10),
        };
        assert!(matches!(
            missing.run(&env(dir.path())).await,
            Err(HookError::Spawn { .. })
        ));
        let empty = Hook {
            argv: vec![],
            timeout: Duration::from_secs(1),
        };
        assert_eq!(empty.run(&env(dir.path())).await, Err(HookError::Empty));
    }

    fn state(pid: &str) -> String {
        std::fs::read_to_string(Path::new("/proc").join(pid.trim()).join("stat"))
            .unwrap_or_default()
    }

    // r[verify issue.on-renew]
    #[tokio::test]
    async fn a_hook_past_its_timeout_is_killed_with_its_children_and_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let child_file = dir.path().join("child");
        // Not `exec`: the shell stays, and its own child must be killed with it.
        let prog = script(
            dir.path(),
            "slow.sh",
            &format!(
                "echo $$ > {}
sleep 30 &
echo $! > {}
wait",
                pid_file.display(),
                child_file.display()
            ),
        );
        let hook = Hook {
            argv: vec![prog],
            timeout: Duration::from_millis(300),
        };
        let began = std::time::Instant::now();
        let err = hook.run(&env(dir.path())).await.unwrap_err();
        assert!(matches!(err, HookError::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("killed"), "{err}");
        assert!(began.elapsed() < Duration::from_secs(10));
        // The hook itself is killed and reaped by the time run() returns: no zombie left.
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        assert_eq!(state(&pid), "", "the hook is not reaped");
        // Its child is killed too (reaping it is its new parent's business).
        let child = std::fs::read_to_string(&child_file).unwrap();
        let dead = (0..100).any(|_| {
            let s = state(&child);
            if s.is_empty() || s.contains(") Z ") {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
            false
        });
        if !dead {
            let _ = std::process::Command::new("kill")
                .arg(child.trim())
                .status();
        }
        assert!(dead, "the hook's child {} still runs", child.trim());
    }

    // r[verify issue.on-renew]
    #[tokio::test]
    async fn a_failed_hook_whose_child_holds_stderr_keeps_its_text_and_leaves_no_reader() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let prog = script(
            dir.path(),
            "fail.sh",
            &format!(
                "sleep 5 &\necho $! > {}\necho 'reload refused' >&2\nexit 1",
                pid_file.display()
            ),
        );
        let hook = Hook {
            argv: vec![prog],
            timeout: Duration::from_secs(10),
        };
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = tasks();
        let err = hook.run(&env(dir.path())).await.unwrap_err();
        let after = tasks();
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let _ = std::process::Command::new("kill").arg(pid.trim()).status();
        assert!(err.to_string().contains("reload refused"), "{err}");
        assert_eq!(after, before, "a standard error reader outlived the run");
    }
}
