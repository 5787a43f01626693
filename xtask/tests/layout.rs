//! The crates' layout, read from `cargo metadata`: what xtask builds, and what it does not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The host's target triple (`rustc -vV`).
fn host() -> String {
    let output = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
        .arg("-vV")
        .output()
        .expect("running rustc -vV");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_owned()
}

/// `cargo metadata` of this workspace for this host, resolved from Cargo.lock offline (other
/// platforms' dependencies are left out: they may not be downloaded).
fn metadata() -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(&root)
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .args(["--filter-platform", &host()])
        .output()
        .expect("running cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON")
}

/// Every package name `package` depends on, directly or not (normal and build dependencies, not
/// dev-dependencies: what `cargo xtask` compiles).
fn builds(metadata: &Value, package: &str) -> BTreeSet<String> {
    let name_of: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            (
                p["id"].as_str().expect("id"),
                p["name"].as_str().expect("name"),
            )
        })
        .collect();
    let nodes: BTreeMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .expect("resolve nodes")
        .iter()
        .map(|n| (n["id"].as_str().expect("id"), n))
        .collect();
    let start = name_of
        .iter()
        .find(|(_, name)| **name == package)
        .map(|(id, _)| *id)
        .expect("the package is in the workspace");
    let mut seen = BTreeSet::new();
    let mut todo = vec![start];
    while let Some(id) = todo.pop() {
        for dep in nodes[id]["deps"].as_array().expect("deps") {
            let built = dep["dep_kinds"]
                .as_array()
                .expect("dep_kinds")
                .iter()
                .any(|k| k["kind"].as_str() != Some("dev"));
            let dep_id = dep["pkg"].as_str().expect("pkg");
            if built && seen.insert(dep_id) {
                todo.push(dep_id);
            }
        }
    }
    seen.into_iter().map(|id| name_of[id].to_owned()).collect()
}

// i[verify xtask.layout+3]
#[test]
fn xtask_builds_none_of_the_drivers_and_the_drivers_are_not_default_members() {
    let metadata = metadata();
    let xtask = builds(&metadata, "xtask");
    for driver_only in [
        "holdfast-gateway",
        "tokio-tungstenite",
        "plotters",
        "holdfast-drain-demo",
        "holdfast-bench",
        "holdfast-dist",
        "spec-parity",
    ] {
        assert!(
            !xtask.contains(driver_only),
            "xtask builds {driver_only}: {xtask:?}"
        );
    }
    // The drivers still build what they drive.
    assert!(builds(&metadata, "holdfast-drain-demo").contains("holdfast-gateway"));

    let name_of: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            (
                p["id"].as_str().expect("id"),
                p["name"].as_str().expect("name"),
            )
        })
        .collect();
    let names = |key: &str| -> BTreeSet<&str> {
        metadata[key]
            .as_array()
            .expect("workspace member list")
            .iter()
            .map(|id| name_of[id.as_str().expect("id")])
            .collect()
    };
    let members = names("workspace_members");
    let defaults = names("workspace_default_members");
    for driver in [
        "holdfast-drain-demo",
        "holdfast-bench",
        "holdfast-dist",
        "spec-parity",
    ] {
        assert!(members.contains(driver), "{driver} is a workspace member");
        assert!(!defaults.contains(driver), "{driver} is a default member");
    }
    assert!(defaults.contains("xtask") && defaults.contains("holdfast-harness"));
    // What the gate needs is built by it: spec-git reads `--base`'s revision.
    assert!(defaults.contains("spec-git") && xtask.contains("spec-git"));
}

// i[verify xtask.layout.engine]
#[test]
fn the_engine_and_prove_depend_on_no_command_line_runtime_or_xtask_crate() {
    let metadata = metadata();
    let engine = builds(&metadata, "spec-engine");
    for forbidden in [
        "clap",
        "anyhow",
        "tokio",
        "xtask",
        "holdfast-harness",
        "holdfast-gateway",
    ] {
        assert!(
            !engine.contains(forbidden),
            "spec-engine builds {forbidden}: {engine:?}"
        );
    }
    // It is what xtask's spec gate runs.
    assert!(builds(&metadata, "xtask").contains("spec-engine"));
    // prove sits on the engine, below the command line.
    let prove = builds(&metadata, "spec-prove");
    assert!(prove.contains("spec-engine"));
    for forbidden in ["clap", "xtask"] {
        assert!(
            !prove.contains(forbidden),
            "spec-prove builds {forbidden}: {prove:?}"
        );
    }
    // spec-git reads a git revision for the engine, below the command line.
    let git = builds(&metadata, "spec-git");
    assert!(git.contains("spec-engine"));
    for forbidden in ["clap", "anyhow", "tokio", "xtask"] {
        assert!(
            !git.contains(forbidden),
            "spec-git builds {forbidden}: {git:?}"
        );
    }
}

// i[verify harness.layout]
#[test]
fn the_test_runner_judges_through_the_engine_and_the_shared_harness_builds_no_engine() {
    let metadata = metadata();
    let runner = builds(&metadata, "holdfast-test-runner");
    for needed in ["spec-engine", "holdfast-harness", "holdfast-test-support"] {
        assert!(runner.contains(needed), "the runner builds {needed}");
    }
    for forbidden in ["clap", "xtask", "spec-prove"] {
        assert!(
            !runner.contains(forbidden),
            "holdfast-test-runner builds {forbidden}: {runner:?}"
        );
    }
    assert!(builds(&metadata, "xtask").contains("holdfast-test-runner"));
    // What the drain demo and the benchmark drivers share stays free of the engine, and so does
    // the drain demo. (holdfast-bench's spec-check suite reads the workspace's size with it.)
    for shared in ["holdfast-harness", "holdfast-drain-demo"] {
        assert!(
            !builds(&metadata, shared).contains("spec-engine"),
            "{shared} builds spec-engine"
        );
    }
}

/// The drivers that start no service (the .deb build, the tracey parity) build the commands'
/// common ground alone, not the harness: `cargo run -p holdfast-dist` in CI's `dist deb` step
/// after `cargo xtask` compiles no tokio, nix or retry crate, nor features re-unified for them.
#[test]
fn the_drivers_that_start_no_service_build_none_of_the_harness() {
    let metadata = metadata();
    for driver in ["holdfast-dist", "spec-parity"] {
        let built = builds(&metadata, driver);
        assert!(built.contains("holdfast-command"), "{driver}: {built:?}");
        for forbidden in [
            "holdfast-harness",
            "holdfast-test-support",
            "holdfast-retry",
            "tokio",
            "nix",
        ] {
            assert!(
                !built.contains(forbidden),
                "{driver} builds {forbidden}: {built:?}"
            );
        }
    }
    assert!(builds(&metadata, "holdfast-command").is_empty());
}

/// Runs `cargo xtask ARGS` (the built binary) in `dir` with a stand-in cargo that records its
/// arguments and directory, then exits `exit`; returns xtask's exit code and what it recorded.
fn with_stand_in_cargo(dir: &std::path::Path, args: &[&str], exit: i32) -> (Option<i32>, String) {
    use std::os::unix::fs::PermissionsExt as _;
    let bin = tempfile::tempdir().expect("tempdir");
    let record = bin.path().join("called");
    let cargo = bin.path().join("cargo");
    std::fs::write(
        &cargo,
        format!(
            "#!/bin/sh\necho \"$PWD $*\" > {}\nexit {exit}\n",
            record.display()
        ),
    )
    .expect("stand-in cargo");
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .current_dir(dir)
        .env("CARGO", &cargo)
        .status()
        .expect("xtask");
    let called = std::fs::read_to_string(&record).unwrap_or_default();
    (status.code(), called)
}

// i[verify xtask.layout+3]
#[test]
fn a_driver_s_exit_status_is_the_command_s_and_it_runs_in_the_caller_s_directory() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .canonicalize()
        .expect("canonical");
    let sub = root.join("crates");
    for exit in [0, 1, 3] {
        let (code, called) = with_stand_in_cargo(&sub, &["drain-demo", "--clients", "4"], exit);
        assert_eq!(code, Some(exit), "{called}");
        let manifest = root.join("Cargo.toml");
        assert_eq!(
            called.trim(),
            format!(
                "{} run --quiet --manifest-path {} -p holdfast-drain-demo -- --clients 4",
                sub.display(),
                manifest.display()
            )
        );
    }
    let (code, called) = with_stand_in_cargo(&sub, &["bench", "gateway", "--connections", "10"], 2);
    assert_eq!(code, Some(2), "{called}");
    assert!(called.contains("-p holdfast-bench -- gateway"), "{called}");
    // The package, the parity with tracey and the retry benches: each driver gets the command's
    // arguments as given, `--help` included.
    for (args, driver) in [
        (
            &["dist", "deb", "--debug", "--no-build"][..],
            "-p holdfast-dist -- deb --debug --no-build",
        ),
        (&["dist", "deb", "--help"], "-p holdfast-dist -- deb --help"),
        (
            &["tracey-parity", "--out", "p.md"],
            "-p spec-parity -- --out p.md",
        ),
        (&["tracey-parity", "--help"], "-p spec-parity -- --help"),
        (
            &["bench", "retry", "--keys", "10"],
            "-p holdfast-bench -- retry --keys 10",
        ),
    ] {
        let (code, called) = with_stand_in_cargo(&sub, args, 0);
        assert_eq!(code, Some(0), "{called}");
        assert!(
            called.ends_with(&format!("{driver}\n")),
            "{args:?}: {called}"
        );
    }
    // The spec-check suite's driver times this very binary: it is told its path and profile.
    let (code, called) = with_stand_in_cargo(&sub, &["bench", "spec-check", "--scale", "1"], 0);
    assert_eq!(code, Some(0), "{called}");
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    assert!(
        called.trim_end().ends_with(&format!(
            "-p holdfast-bench -- spec-check --scale 1 --xtask {} --xtask-profile {profile}",
            std::path::Path::new(env!("CARGO_BIN_EXE_xtask")).display()
        )),
        "{called}"
    );
}

/// The crates split out of xtask import their modules one way: a module names (`crate::m`) only
/// the modules listed before it, never one after it nor the crate's root, so none imports a
/// module that imports it back.
#[test]
fn the_split_crates_modules_import_one_way() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace");
    let crates: [(&str, &[&str]); 4] = [
        (
            "xtask/git/src",
            &[
                "git", "listing", "ignored", "revision", "review", "fixture", "tests",
            ],
        ),
        ("xtask/parity/src", &["error", "locate", "workdir", "query"]),
        ("xtask/dist/src", &["package", "prebuilt", "error", "steps"]),
        ("xtask/command/src", &["exit", "output", "root"]),
    ];
    for (dir, order) in crates {
        for (at, module) in order.iter().enumerate() {
            let path = root.join(dir).join(format!("{module}.rs"));
            let text = std::fs::read_to_string(&path).expect("the module's file");
            for (offset, _) in text.match_indices("crate::") {
                let named: String = text[offset + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    order[..at].contains(&named.as_str()),
                    "{}: names crate::{named}, not a module listed before `{module}` in {order:?}",
                    path.display()
                );
            }
        }
    }
}
