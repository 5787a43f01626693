//! `cargo xtask tracey-parity`'s binary against a real tracey (opt-in: it skips loudly without
//! one), and without one and against a stand-in (in CI).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace this crate is in (xtask/parity).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The gate's counts equal a real `tracey query status`'s, or differ for a reason the gate
/// states, on every workspace shape and on this workspace (`cargo xtask tracey-parity`). Runs
/// whenever a tracey binary is found (`TRACEY` or `PATH`); skips loudly otherwise: its build needs
/// Node and pnpm and takes about 18 minutes, so CI does not build it.
// i[verify spec-check.counts]
// i[verify spec-check.parity+2]
#[test]
fn counts_equal_tracey_query_status() {
    let workspace = workspace();
    let out = tempfile::tempdir().expect("temp dir");
    let page = out.path().join("parity.md");
    // No --tracey: the command's own lookup (TRACEY, else PATH) finds tracey or says it has none.
    let output = Command::new(env!("CARGO_BIN_EXE_spec-parity"))
        .arg("--root")
        .arg(&workspace)
        .arg("--out")
        .arg(&page)
        .output()
        .expect("run spec-parity");
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(2) && stderr.contains("error: tracey-parity: no tracey") {
        holdfast_test_support::services::skip_loudly(
            "tracey 1.3.0",
            "TRACEY is not set and no tracey is on PATH",
            holdfast_test_support::services::FailWhen::Never,
        );
        return;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    // Shown with --nocapture: the table is the point of the run.
    println!("{text}");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(std::fs::read_to_string(&page).expect("the page"), text);
    assert!(
        text.lines().any(
            |line| line.starts_with(spec_engine::spec_check::parity::TRACEY_LINE)
                && line.contains("tracey 1.3.0")
        ),
        "tracey 1.3.0 wanted: {text}"
    );
    // The checked-in page is what the command writes, but for the line naming tracey's build.
    let checked_in = std::fs::read_to_string(workspace.join("docs/audit/tracey-parity.md"))
        .expect("docs/audit/tracey-parity.md");
    let unversioned = |page: &str| -> Vec<String> {
        page.lines()
            .filter(|line| !line.starts_with(spec_engine::spec_check::parity::TRACEY_LINE))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        unversioned(&checked_in),
        unversioned(&text),
        "docs/audit/tracey-parity.md is stale: run `cargo xtask tracey-parity --out \
         docs/audit/tracey-parity.md` with tracey 1.3.0"
    );
    for tree in [
        "several_specs_and_impls",
        "versions",
        "gate_only_problems",
        "python",
        "this workspace",
    ] {
        assert!(text.contains(&format!("\n| {tree} | ")), "{tree}: {text}");
    }
    assert!(!text.contains("**unexplained**"), "{text}");
}

/// Without a tracey (none given, none on PATH, or a path naming no file), `tracey-parity` judges
/// nothing and exits 2, saying so. Runs without tracey, in CI.
// i[verify spec-check.parity+2]
#[test]
fn tracey_parity_without_a_tracey_exits_2() {
    let workspace = workspace();
    let empty = tempfile::tempdir().expect("temp dir");
    for given in [None, Some("./no-such-tracey")] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_spec-parity"));
        command
            .arg("--root")
            .arg(&workspace)
            .env("TRACEY", "")
            .env("PATH", empty.path())
            .current_dir(empty.path());
        if let Some(given) = given {
            command.arg("--tracey").arg(given);
        }
        let output = command.output().expect("run spec-parity");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{given:?}: {stderr}");
        assert!(stderr.contains("no tracey"), "{given:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{given:?}: nothing judged");
    }
}

/// Counts that differ from tracey's without a stated reason: `tracey-parity` prints the table,
/// writes the same page to `--out`, and exits 1. Runs against a stand-in tracey, in CI.
// i[verify spec-check.parity+2]
#[test]
fn counts_that_differ_exit_1_and_out_is_the_printed_page() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("root");
    for (path, text) in &spec_engine::shapes::all()[0].files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    // spec-parity runs the stand-in itself, so it is an executable file. A forked `sh` writes it:
    // this process never holds it open for writing, so another test's fork cannot make running it
    // fail with ETXTBSY.
    let tracey = dir.path().join("tracey");
    let written = Command::new("sh")
        .arg("-c")
        .arg(
            "cat > \"$1\" <<'EOF'\n\
             #!/bin/sh\n\
             case \"$1\" in\n\
             --version) echo 'tracey 1.3.0';;\n\
             kill) ;;\n\
             *) echo 'other/rust: 0 of 7 requirements are covered. 0 of 7 have a verification reference.';;\n\
             esac\n\
             EOF\n\
             chmod +x \"$1\"",
        )
        .arg("sh")
        .arg(&tracey)
        .status()
        .expect("write the stand-in tracey");
    assert!(written.success());
    let page = dir.path().join("parity.md");
    let output = Command::new(env!("CARGO_BIN_EXE_spec-parity"))
        .arg("--root")
        .arg(&root)
        .arg("--tracey")
        .arg(&tracey)
        .arg("--out")
        .arg(&page)
        .output()
        .expect("run spec-parity");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("| this workspace | other/rust | 7/0/0/0 | — | **unexplained**: the gate has no such row |"),
        "{text}"
    );
    assert_eq!(std::fs::read_to_string(&page).expect("the page"), text);
}
