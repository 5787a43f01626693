//! Small git repositories holding a demo workspace (one spec of two rules, one crate implementing
//! and verifying them): what the tests of the review, here and in xtask's `spec-check --base`,
//! run on. Test support: it panics when git cannot build them.
#![allow(clippy::expect_used, clippy::missing_panics_doc)]

use std::path::Path;
use std::process::Command;

/// The config of the demo tree: one spec, one Rust impl.
pub const REVIEW_CONFIG: &str = "specs (\n  {\n    name demo\n    include (docs/spec.md)\n    impls (\n      {\n        name rust\n        include (src/**/*.rs)\n      }\n    )\n  }\n)\n";

/// The demo spec: `r[demo.alpha]` and `r[demo.beta]`.
pub const REVIEW_SPEC: &str =
    "# Demo\n\n> r[demo.alpha]\n> Alpha holds.\n\n> r[demo.beta]\n> Beta holds.\n";

/// The demo crate: both rules implemented, each verified by a test.
pub const REVIEW_LIB: &str = "// r[impl demo.alpha]\npub fn alpha() -> u32 {\n    1\n}\n\n// r[impl demo.beta]\npub fn beta() {}\n\n#[cfg(test)]\nmod tests {\n    // r[verify demo.alpha]\n    #[test]\n    fn alpha_holds() {\n        assert_eq!(super::alpha(), 1);\n    }\n\n    // r[verify demo.beta]\n    #[test]\n    fn beta_holds() {\n        super::beta();\n    }\n}\n";

/// `git ARGS` in `dir`, which must succeed.
pub fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// A repository of two commits: the demo tree, then the demo tree with `spec` and `lib`
/// (the work tree is the second commit). Returns the temp dir.
pub fn two_commits(spec: &str, lib: &str) -> tempfile::TempDir {
    two_commits_with(&[], spec, lib)
}

/// [`two_commits`] whose first commit also has `base_files` (path, text).
pub fn two_commits_with(base_files: &[(&str, &str)], spec: &str, lib: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let write = |path: &str, text: &str| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    git(root, &["init", "--quiet"]);
    write(".config/tracey/config.styx", REVIEW_CONFIG);
    write("docs/spec.md", REVIEW_SPEC);
    write("src/lib.rs", REVIEW_LIB);
    for (path, text) in base_files {
        write(path, text);
    }
    git(root, &["add", "-A"]);
    git(root, &["commit", "--quiet", "-m", "base"]);
    write("docs/spec.md", spec);
    write("src/lib.rs", lib);
    git(root, &["add", "-A"]);
    git(
        root,
        &["commit", "--quiet", "--allow-empty", "-m", "change"],
    );
    dir
}
