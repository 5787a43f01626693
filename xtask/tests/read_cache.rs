//! The read cache through the program (`i[spec-check.read-cache]`): `xtask spec-check` fills it,
//! reads it back, and leaves nothing when it is off.

mod fixture;

use std::path::{Path, PathBuf};
use std::process::Command;

use fixture::Tree;

const SPEC: &str = "\
# Demo spec

> r[demo.alpha]
> Alpha must hold.

> r[demo.beta]
> Beta must hold.
";

/// `xtask spec-check --root TREE` with `HOLDFAST_SPEC_CACHE=cache`: its exit code and stdout.
fn check(tree: &Tree, cache: &str) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["spec-check", "--root"])
        .arg(tree.path())
        .env("HOLDFAST_SPEC_CACHE", cache)
        .output()
        .expect("run xtask");
    assert!(
        !String::from_utf8_lossy(&output.stderr).contains("no spec read cache"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    (
        output.status.code().expect("exit code"),
        String::from_utf8(output.stdout).expect("utf-8"),
    )
}

/// Every entry file under `dir`.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in read {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

// i[verify spec-check.read-cache]
#[test]
fn spec_check_fills_the_cache_reads_it_back_and_writes_nothing_when_off() {
    let tree = Tree::new(SPEC, &[], &[]);
    let scratch = tempfile::tempdir().expect("tempdir");
    let cache = scratch.path().join("cache");
    let cache_arg = cache.to_str().expect("utf-8");

    let cold = check(&tree, cache_arg);
    let filled = entries(&cache);
    assert!(!filled.is_empty(), "the first run writes entries");
    let warm = check(&tree, cache_arg);
    assert_eq!(cold, warm, "a warm run says what a cold one said");
    assert_eq!(entries(&cache), filled, "a warm run writes nothing new");

    // A hit is not parsed again: entries that find no reference make the run see none.
    for entry in &filled {
        std::fs::write(entry, br#"{"refs":[],"layout":null}"#).expect("plant");
    }
    let planted = check(&tree, cache_arg);
    assert_ne!(planted, cold, "the planted entries were read");

    let off = scratch.path().join("off");
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["spec-check", "--root"])
        .arg(tree.path())
        .current_dir(scratch.path())
        .env("HOLDFAST_SPEC_CACHE", "OFF")
        .output()
        .expect("run xtask");
    assert_eq!(
        (
            output.status.code().expect("exit code"),
            String::from_utf8(output.stdout).expect("utf-8")
        ),
        cold,
        "off says what the cache says"
    );
    assert!(!off.exists() && !scratch.path().join("OFF").exists());
}
