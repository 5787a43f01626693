//! `.ci/run`'s background jobs, run by bash with the script's own functions: jobs that end
//! together are each waited for once at the next step's line, each job's output follows its own
//! heading, and a job that failed stops the run with its output shown.

use std::path::Path;
use std::process::{Command, Output};

/// The definitions of `names` as `.ci/run` has them: each `NAME() {` to its closing `}`, at the
/// end of the same line or alone at the start of a later one. A body that runs into anything
/// else at the start of a line (a closing brace with more after it, the script's own commands)
/// is refused: the test would run those commands.
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
        let definition = &body[..end];
        let inner: Vec<&str> = definition.lines().skip(1).collect();
        if let Some((_, middle)) = inner.split_last() {
            for line in middle {
                assert!(
                    line.is_empty() || line.starts_with(char::is_whitespace),
                    "{name}'s body, as read from .ci/run, runs into a line at the start of a \
                     line: {line:?}"
                );
            }
        }
        out.push_str(definition);
    }
    out
}

/// Runs `.ci/run`'s job functions (and its EXIT trap) in bash: jobs `first` and `second`
/// (`second` exiting with `second_exit`) are started, both end, then a step's line comes.
fn two_jobs_then_a_step(second_exit: u8) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = std::fs::read_to_string(root.join(".ci/run")).expect("read .ci/run");
    let defined = functions(
        &script,
        &[
            "step",
            "step_line",
            "disk_free",
            "tools_stop",
            "background",
            "tools_failed",
            "tool_show",
            "tool_wait",
        ],
    );
    // Both jobs have ended (bash has reaped them) before the next step's line, as a fresh
    // machine's tool installs can.
    let run = format!(
        r#"set -euo pipefail
{defined}
build_dir=.
tool_logs=$(mktemp -d)
declare -A tool_pids=()
trap tools_stop EXIT
alive() {{ [ -n "${{tool_pids[$1]:-}}" ] && kill -0 "${{tool_pids[$1]}}" 2>/dev/null; }}
# `first` outlives the start of `second` (whose line would wait for it), then both end.
background first sh -c 'sleep 1; printf "%s-output\n" first'
background second sh -c 'printf "%s-output\n" second; exit {second_exit}'
for _ in $(seq 800); do
    alive first || alive second || break
    sleep 0.05
done
if alive first || alive second; then
    echo "the two jobs did not end in 40 s" >&2
    exit 99
fi
step "the next step"
echo "the run went on; jobs left: ${{#tool_pids[@]}}"
"#
    );
    Command::new("timeout")
        .args(["60", "bash", "-c", &run])
        .output()
        .expect("run `timeout 60 bash -c ...`")
}

/// What followed `heading`'s line, up to the next heading.
fn under<'a>(stdout: &'a str, heading: &str) -> &'a str {
    let at = stdout
        .find(heading)
        .unwrap_or_else(|| panic!("{heading:?} in:\n{stdout}"));
    let after = &stdout[at..];
    let line_end = after.find('\n').map_or(after.len(), |n| n + 1);
    let rest = &after[line_end..];
    &rest[..rest.find("==> ").unwrap_or(rest.len())]
}

#[test]
fn two_background_jobs_that_ended_together_are_each_waited_for_once_under_their_own_heading() {
    let output = two_jobs_then_a_step(0);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(stdout.contains("the run went on; jobs left: 0"), "{stdout}");
    for job in ["first", "second"] {
        let heading = format!("==> {job} (in the background): exit 0");
        assert_eq!(
            stdout.matches(&heading).count(),
            1,
            "{job} waited for once:\n{stdout}"
        );
        assert_eq!(
            under(&stdout, &heading).lines().next(),
            Some(format!("{job}-output").as_str()),
            "{job}'s output, and only its, under its heading:\n{stdout}"
        );
    }
}

#[test]
fn a_background_job_that_failed_stops_the_run_with_both_jobs_output_shown() {
    let output = two_jobs_then_a_step(3);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stderr.contains("second failed (exit 3)"), "{stderr}");
    assert!(!stdout.contains("the run went on"), "{stdout}");
    assert_eq!(
        under(&stdout, "==> second (in the background): exit 3")
            .lines()
            .next(),
        Some("second-output"),
        "{stdout}"
    );
    // The other job's output is shown too, whichever of the two was waited for first (bash
    // takes `second` first). The jobs' command lines, on their start's lines, do not hold it.
    assert_eq!(
        under(&stdout, "==> first (in the background): exit 0")
            .lines()
            .next(),
        Some("first-output"),
        "{stdout}"
    );
}
