//! holdfast-dist's exit code when it makes no package, run as `cargo xtask dist deb` runs it,
//! against a stand-in cargo (and a stand-in `holdfast` for `--no-build`).

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

// i[verify dist.deb+2]
// i[verify dist.deb.no-build]
#[test]
fn no_package_made_exits_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::write(root.join("Cargo.toml"), "[workspace]\n").expect("write");
    let bin = dir.path().join("bin");
    // An executable `sh` script. This is the only test in this binary: no other thread forks
    // while the file is open for writing, so running it cannot fail with ETXTBSY.
    let script = |path: &Path, body: &str| {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("write the stand-in");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    };
    // `holdfast-dist deb --no-build` in the workspace, with `bin` as the whole PATH and its
    // `cargo` as CARGO, the target directory `root/target`.
    let dist = || {
        Command::new(env!("CARGO_BIN_EXE_holdfast-dist"))
            .args(["deb", "--no-build"])
            .current_dir(&root)
            .env("PATH", &bin)
            .env("CARGO", bin.join("cargo"))
            .env("CARGO_TARGET_DIR", "target")
            .output()
            .expect("run holdfast-dist")
    };

    // Without cargo-deb: one line saying how to install it, exit 1.
    script(&bin.join("cargo"), "exit 101");
    let output = dist();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cargo install --locked cargo-deb"),
        "{stderr}"
    );

    // With cargo-deb, `--no-build` refuses a binary without every feature: exit 1, no package.
    script(
        &bin.join("cargo"),
        "[ \"$1 $2\" = 'deb --version' ] && exit 0\nexit 101",
    );
    script(
        &root.join("target/release/holdfast"),
        "echo '{\"commit\":\"abc\",\"features\":[\"other\"]}'",
    );
    let output = dist();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("etcd"),
        "names the missing feature: {stderr}"
    );
    assert!(!root.join("target/debian").exists(), "no package");
}
