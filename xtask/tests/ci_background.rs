//! `.ci/run`'s background jobs, run by bash with the script's own functions: jobs that end
//! together are each shown once at the next step's line, before it, each job's output under its
//! own heading; a job that failed stops the run there, with every ended job's output shown.

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

/// Runs `.ci/run`'s job functions in bash, with an EXIT trap as `.ci/run` sets: jobs `first`
/// and `second` are started, `failing` (if any) exiting with 3, both end, then a step's line
/// comes, and the step prints what it did.
fn two_jobs_then_a_step(failing: Option<&str>) -> Output {
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
    let exit = |job: &str| if failing == Some(job) { 3 } else { 0 };
    // `first` waits until `second` has been started (whose start line would show it, had it
    // ended), then both end before the next step's line, as a fresh machine's tool installs can.
    let run = format!(
        r#"set -euo pipefail
{defined}
build_dir=.
tool_logs=$(mktemp -d)
declare -A tool_pids=()
trap tools_stop EXIT
alive() {{ [ -n "${{tool_pids[$1]:-}}" ] && kill -0 "${{tool_pids[$1]}}" 2>/dev/null; }}
gate="$tool_logs/second-started"
background first sh -c 'while [ ! -e "$0" ]; do sleep 0.02; done; printf "%s-output\n" first; exit {first}' "$gate"
background second sh -c 'printf "%s-output\n" second; exit {second}'
touch "$gate"
for _ in $(seq 800); do
    alive first || alive second || break
    sleep 0.05
done
if alive first || alive second; then
    echo "the two jobs did not end in 40 s" >&2
    exit 99
fi
step "the next step"
echo "the step ran; jobs left: ${{#tool_pids[@]}}"
"#,
        first = exit("first"),
        second = exit("second"),
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
    // Each heading's line starts with an empty line of its own.
    &rest[..rest.find("\n\n==> ").map_or(rest.len(), |n| n + 1)]
}

#[test]
fn two_background_jobs_that_ended_together_are_each_shown_once_under_their_own_heading() {
    let output = two_jobs_then_a_step(None);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    for job in ["first", "second"] {
        let heading = format!("==> {job} (in the background): exit 0");
        assert_eq!(
            stdout.matches(&heading).count(),
            1,
            "{job} shown once:\n{stdout}"
        );
        assert_eq!(
            under(&stdout, &heading),
            format!("{job}-output\n"),
            "{job}'s output, and only its, under its heading:\n{stdout}"
        );
    }
    // The step's own output follows its own line, after the jobs.
    assert_eq!(
        under(&stdout, "==> the next step"),
        "the step ran; jobs left: 0\n",
        "{stdout}"
    );
}

#[test]
fn a_background_job_that_failed_stops_the_run_with_every_ended_jobs_output_shown() {
    // Both ways round: bash takes the two names in an order of its own.
    for (failing, other) in [("first", "second"), ("second", "first")] {
        let output = two_jobs_then_a_step(Some(failing));
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{failing} failing:\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        assert!(
            stderr.contains(&format!("{failing} failed (exit 3)")),
            "{stderr}"
        );
        assert!(!stdout.contains("==> the next step"), "{stdout}");
        assert_eq!(
            under(
                &stdout,
                &format!("==> {failing} (in the background): exit 3")
            ),
            format!("{failing}-output\n"),
            "{stdout}"
        );
        assert_eq!(
            under(&stdout, &format!("==> {other} (in the background): exit 0")),
            format!("{other}-output\n"),
            "{failing} failing, {other}'s output shown too:\n{stdout}"
        );
    }
}
