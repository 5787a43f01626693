//! A child command run in its own process group, so that ending it at a deadline ends what it
//! started too: `cargo nextest run` is `cargo-nextest` (cargo execs it), which runs `cargo test
//! --no-run` and rustc, or the test processes; killing only the first would leave a build that
//! holds the target directory's lock, or tests, running past the run's time cap.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Spawns `command` as the leader of a new process group.
pub fn spawn(command: &mut Command) -> std::io::Result<Child> {
    command.process_group(0).spawn()
}

/// Waits for `child` (spawned by `spawn`) to exit; `None` when `deadline` came first, in which case
/// its whole group was sent SIGTERM (nextest then ends its tests, cargo its rustc) and the child
/// was waited for.
// i[impl prove.budget+3]
pub fn wait_until(
    child: &mut Child,
    deadline: Option<Instant>,
) -> std::io::Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if deadline.is_some_and(|at| Instant::now() >= at) {
            // `kill -TERM -- -PGID`: the group, not only its leader.
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{}", child.id())])
                .status();
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `pid` is a live process (a zombie, dead but not yet reaped, is not).
    fn alive(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    }

    // i[verify prove.budget+3]
    #[test]
    fn a_command_cut_off_at_its_deadline_ends_with_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let mut command = Command::new("sh");
        command.arg("-c").arg(format!(
            "sleep 30 & echo $! > {}.tmp && mv {0}.tmp {0}; wait",
            pid_file.display()
        ));
        let mut child = spawn(&mut command).unwrap();
        // Synchronisation, not timing: the grandchild must exist before the deadline is judged.
        let mut grandchild = None;
        for _ in 0..500 {
            if let Ok(pid) = std::fs::read_to_string(&pid_file) {
                grandchild = Some(pid.trim().to_owned());
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let grandchild = grandchild.expect("the command started its own child");
        assert!(alive(&grandchild));
        let ended = wait_until(&mut child, Some(Instant::now())).unwrap();
        assert!(ended.is_none(), "the deadline had passed: cut off");
        // SIGTERM is delivered at once; give the kernel a moment to tear the process down, far
        // less than the grandchild's own 30 s, and a cut-off that never comes ends in 30 s too.
        let mut gone = false;
        for _ in 0..250 {
            if !alive(&grandchild) {
                gone = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !gone {
            let _ = Command::new("kill").arg(&grandchild).status();
        }
        assert!(
            gone,
            "the cut-off command's own child {grandchild} outlived it"
        );
        // Without a deadline the command runs to its end.
        let mut quick = spawn(Command::new("true").arg("x")).unwrap();
        assert!(
            wait_until(&mut quick, None)
                .unwrap()
                .is_some_and(|s| s.success())
        );
    }
}
