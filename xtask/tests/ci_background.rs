//! `.ci/run`'s background jobs, run by bash with the script's own functions: jobs that end
//! together are each waited for once at the next step's line, and the run goes on.

use std::path::Path;
use std::process::Command;

/// The definitions of `names` as `.ci/run` has them: each `NAME() {` to its closing `}`, at the
/// end of the same line or at the start of a later one.
fn functions(script: &str, names: &[&str]) -> String {
    let mut out = String::new();
    for name in names {
        let start = script
            .find(&format!("\n{name}() {{"))
            .unwrap_or_else(|| panic!(".ci/run defines {name}"));
        let body = &script[start + 1..];
        let first = body.find('\n').unwrap_or(body.len());
        let end = if body[..first].trim_end().ends_with('}') {
            first + 1
        } else {
            body.find("\n}\n")
                .unwrap_or_else(|| panic!("{name} ends with a `}}` line"))
                + 3
        };
        out.push_str(&body[..end]);
    }
    out
}

#[test]
fn two_background_jobs_that_ended_together_are_each_waited_for_once_and_the_run_goes_on() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = std::fs::read_to_string(root.join(".ci/run")).expect("read .ci/run");
    let defined = functions(
        &script,
        &[
            "step",
            "disk_free",
            "background",
            "tools_failed",
            "tool_wait",
        ],
    );
    // Both jobs have ended (bash has reaped them) before the next step's line, as a fresh
    // machine's two tool installs can; the line waits for each, once.
    let run = format!(
        r#"set -euo pipefail
{defined}
build_dir=.
tool_logs=$(mktemp -d)
declare -A tool_pids=()
background first echo first-output
background second echo second-output
for _ in $(seq 200); do
    kill -0 "${{tool_pids[first]}}" 2>/dev/null || kill -0 "${{tool_pids[second]}}" 2>/dev/null || break
    sleep 0.05
done
step "the next step"
echo "the run went on; jobs left: ${{#tool_pids[@]}}"
"#
    );
    let output = Command::new("timeout")
        .args(["60", "bash", "-c", &run])
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(stdout.contains("the run went on; jobs left: 0"), "{stdout}");
    for job in ["first", "second"] {
        assert_eq!(
            stdout
                .matches(&format!("==> {job} (in the background): exit 0"))
                .count(),
            1,
            "{job} waited for once:\n{stdout}"
        );
        assert!(stdout.contains(&format!("{job}-output")), "{stdout}");
    }
}
