//! The cargo holdfast-dist runs gets the caller's environment without what `cargo run` set for
//! holdfast-dist itself: a build script reading `CARGO_PKG_*` or `CARGO_MANIFEST_DIR` (ring's)
//! would otherwise rebuild, and all above it, whenever those differ from a plain `cargo build`'s.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;

#[test]
fn cargo_runs_without_what_cargo_run_set_for_holdfast_dist() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::write(root.join("Cargo.toml"), "[workspace]\n").expect("write");
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let calls = dir.path().join("calls");
    // A stand-in cargo that notes each call and the variables it got, has cargo-deb, and fails
    // the build. The only test in this binary: no other thread forks while the file is open for
    // writing, so running it cannot fail with ETXTBSY.
    let cargo = bin.join("cargo");
    std::fs::write(
        &cargo,
        format!(
            "#!/bin/sh\n\
             echo \"call: $1 CARGO_PKG_NAME=${{CARGO_PKG_NAME-unset}} \
             CARGO_MANIFEST_DIR=${{CARGO_MANIFEST_DIR-unset}} KEPT=${{KEPT-unset}}\" >> '{}'\n\
             [ \"$1 $2\" = 'deb --version' ] && exit 0\n\
             exit 101\n",
            calls.display()
        ),
    )
    .expect("write the stand-in");
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let output = Command::new(env!("CARGO_BIN_EXE_holdfast-dist"))
        .arg("deb")
        .current_dir(&root)
        .env("PATH", &bin)
        .env("CARGO", &cargo)
        // What `cargo run -p holdfast-dist` sets, and one variable of the caller's own.
        .env("CARGO_PKG_NAME", "holdfast-dist")
        .env("CARGO_MANIFEST_DIR", dir.path())
        .env("KEPT", "yes")
        .output()
        .expect("run holdfast-dist");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "the build fails: {stderr}");
    let calls = std::fs::read_to_string(&calls).expect("cargo was called");
    let expected = "CARGO_PKG_NAME=unset CARGO_MANIFEST_DIR=unset KEPT=yes";
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            format!("call: deb {expected}"),
            format!("call: build {expected}")
        ],
        "{stderr}"
    );
}
