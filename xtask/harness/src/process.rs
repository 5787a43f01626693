//! Process supervision: each service runs in a process group of its own, with its output in its
//! log file, and is stopped — group first politely, then by force — on every way out of the run.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Set by the Ctrl-C / SIGTERM handler; every wait loop checks it.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// True once the user asked the run to stop.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// One running service process.
#[derive(Debug)]
pub struct Running {
    /// The service's name (its directory under the services root).
    pub name: String,
    /// Its log file (stdout and stderr).
    pub log: PathBuf,
    child: Child,
    /// How long it may take to stop after SIGTERM before it is killed.
    grace: Duration,
}

impl Running {
    /// The process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

/// Starts services and stops every one of them, newest first, when it is dropped or told to.
#[derive(Debug)]
pub struct Supervisor {
    /// Everything under this directory belongs to this run: leftover processes and mounts are
    /// cleaned up by path.
    root: PathBuf,
    running: Vec<Running>,
}

impl Supervisor {
    /// A supervisor owning the services root.
    pub fn new(root: PathBuf) -> Self {
        Supervisor {
            root,
            running: Vec::new(),
        }
    }

    /// Spawns `command` in its own process group with its output appended to `log`, and records its
    /// pid in `pidfile` so a later run can clean up after a run that was killed outright.
    pub fn spawn(
        &mut self,
        name: &str,
        mut command: Command,
        log: &Path,
        grace: Duration,
    ) -> anyhow::Result<&mut Running> {
        use std::os::unix::process::CommandExt as _;
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let err = out.try_clone()?;
        // A group of its own: Ctrl-C in the terminal reaches us, not the services, so they are
        // stopped in order rather than all at once; and stopping the group reaches their children.
        command
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = command
            .spawn()
            .with_context(|| format!("starting {name}: {command:?}"))?;
        let _ = std::fs::write(log.with_file_name("pid"), format!("{}\n", child.id()));
        self.running.push(Running {
            name: name.to_owned(),
            log: log.to_owned(),
            child,
            grace,
        });
        let last = self.running.len() - 1;
        Ok(&mut self.running[last])
    }

    /// The log files of every service started, in start order.
    pub fn logs(&self) -> Vec<(String, PathBuf)> {
        self.running
            .iter()
            .map(|r| (r.name.clone(), r.log.clone()))
            .collect()
    }

    /// Stops every service, newest first, then anything left that still runs from our directory,
    /// then unmounts whatever is still mounted under it.
    // i[impl harness.services.stop]
    pub fn stop_all(&mut self) {
        while let Some(mut service) = self.running.pop() {
            stop(&mut service);
        }
        sweep_processes(&self.root, SERVICE_PROGRAMS);
        unmount_under(&self.root);
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // Also on early returns and panics: no service outlives the run.
        self.stop_all();
    }
}

fn stop(service: &mut Running) {
    if service.exited().is_some() {
        return;
    }
    let group = Pid::from_raw(service.pid() as i32);
    let _ = killpg(group, Signal::SIGTERM);
    let deadline = Instant::now() + service.grace;
    while Instant::now() < deadline {
        if service.exited().is_some() {
            // Its children (if any stayed in the group) go with the group.
            let _ = killpg(group, Signal::SIGKILL);
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "xtask test: {} did not stop within {:?} of SIGTERM; killing it",
        service.name, service.grace
    );
    let _ = killpg(group, Signal::SIGKILL);
    let _ = service.child.wait();
}

/// The programs the harness starts (directly, or as dockerd's children); only these are swept.
pub const SERVICE_PROGRAMS: &[&str] = &[
    "dockerd",
    "containerd",
    "docker",
    "docker-registry",
    "pebble",
    "etcd",
    "redis-server",
];

/// Processes running one of `programs` (argv[0]'s file name starts with it) whose command line
/// mentions `root`: ours by construction (every service's data, config or socket lives there), e.g.
/// the containerd that dockerd starts in a process group of its own.
pub fn processes_under(root: &Path, programs: &[&str]) -> Vec<i32> {
    let Some(root) = root.to_str() else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let cmdline = String::from_utf8_lossy(&cmdline);
            let program = cmdline.split('\0').next().unwrap_or("");
            let program = program.rsplit('/').next().unwrap_or(program);
            programs.iter().any(|p| program.starts_with(p)) && cmdline.contains(root)
        })
        .collect()
}

/// Stops (TERM, then KILL) every service process whose command line mentions `root`.
pub fn sweep_processes(root: &Path, programs: &[&str]) {
    let pids = processes_under(root, programs);
    if pids.is_empty() {
        return;
    }
    for &pid in &pids {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && !processes_under(root, programs).is_empty() {
        std::thread::sleep(Duration::from_millis(100));
    }
    for pid in processes_under(root, programs) {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Mount points at or under `root`, deepest first.
pub fn mounts_under(root: &Path) -> Vec<PathBuf> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut mounts: Vec<PathBuf> = table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape_mount_path)
        .filter(|p| p.starts_with(root))
        .collect();
    mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    mounts.dedup();
    mounts
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mount_path(raw: &str) -> PathBuf {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.by_ref().take(3).collect();
            match u8::from_str_radix(&code, 8) {
                Ok(byte) => out.push(byte as char),
                Err(_) => {
                    out.push('\\');
                    out.push_str(&code);
                }
            }
        } else {
            out.push(c);
        }
    }
    PathBuf::from(out)
}

/// Lazily unmounts everything mounted under `root` (docker's netns and overlay leftovers), so the
/// directory can be removed.
pub fn unmount_under(root: &Path) {
    for mount in mounts_under(root) {
        if let Err(err) = nix::mount::umount2(&mount, nix::mount::MntFlags::MNT_DETACH) {
            eprintln!("xtask test: could not unmount {}: {err}", mount.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(pid: u32) -> bool {
        // A zombie still has a /proc entry; a reaped process has none.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.contains(") Z "))
    }

    fn sleeper(supervisor: &mut Supervisor, dir: &Path, name: &str, script: &str) -> u32 {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        let log = dir.join(format!("{name}.log"));
        supervisor
            .spawn(name, command, &log, Duration::from_secs(5))
            .unwrap()
            .pid()
    }

    // i[verify harness.services.stop]
    #[test]
    fn dropping_the_supervisor_stops_every_service_and_their_children() {
        let dir = tempfile::tempdir().unwrap();
        let mut supervisor = Supervisor::new(dir.path().to_owned());
        let plain = sleeper(&mut supervisor, dir.path(), "plain", "exec sleep 600");
        // A service that ignores SIGTERM is killed after its grace period; its child goes too.
        let stubborn = sleeper(
            &mut supervisor,
            dir.path(),
            "stubborn",
            "trap '' TERM; sleep 600 & wait",
        );
        assert!(alive(plain) && alive(stubborn));
        let child_of_stubborn = {
            std::thread::sleep(Duration::from_millis(200));
            std::fs::read_to_string(format!("/proc/{stubborn}/task/{stubborn}/children"))
                .unwrap()
                .split_whitespace()
                .next()
                .map(|p| p.parse::<u32>().unwrap())
        };
        drop(supervisor);
        assert!(!alive(plain), "plain service still running");
        assert!(!alive(stubborn), "stubborn service still running");
        if let Some(child) = child_of_stubborn {
            assert!(!alive(child), "the stubborn service's child still running");
        }
    }

    // i[verify harness.services.stop]
    #[test]
    fn a_panicking_run_still_stops_its_services() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        let pid = std::sync::Arc::new(std::sync::Mutex::new(0));
        let seen = pid.clone();
        let outcome = std::thread::spawn(move || {
            let mut supervisor = Supervisor::new(path.clone());
            *seen.lock().unwrap() = sleeper(&mut supervisor, &path, "svc", "exec sleep 600");
            panic!("a failure halfway through the run");
        })
        .join();
        assert!(outcome.is_err());
        let pid = *pid.lock().unwrap();
        assert!(pid != 0 && !alive(pid), "service {pid} survived the panic");
    }

    #[test]
    fn processes_mentioning_the_root_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("marker");
        // The path rides along as `$0` of the shell, so it shows in the command line. The shell
        // blocks in the `read` builtin: it never forks, so no short-lived child (whose command
        // line is still the shell's) can be seen beside it, and killing it leaves no orphan.
        let mut child = Command::new("sh")
            .args(["-c", "read line"])
            .arg(&marker)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Until the child has exec'd, its command line is still ours.
        let deadline = Instant::now() + Duration::from_secs(5);
        while processes_under(dir.path(), &["sh"]).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            processes_under(dir.path(), &["sh"]),
            vec![child.id() as i32]
        );
        assert!(processes_under(dir.path(), &["redis-server"]).is_empty());
        sweep_processes(dir.path(), &["sh"]);
        let _ = child.wait();
        assert!(processes_under(dir.path(), &["sh"]).is_empty());
    }

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(
            unescape_mount_path(r"/a\040b/c\134d"),
            PathBuf::from(r"/a b/c\d")
        );
    }
}
