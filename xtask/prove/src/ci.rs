//! Which commits CI's proof covers: the tree against `HOLDFAST_PROVE_BASE` when set (a CI
//! system that knows the previous CI'd commit says so), else against HEAD's first parent — on main,
//! where every branch lands as a merge, that is the whole merged branch, and for a plain commit
//! that commit.

use std::path::Path;
use std::process::Command;

/// CI's default cap on mutants per run.
pub const MAX_MUTANTS: usize = 40;
/// CI's default wall-clock budget, in seconds (the step stays under about 5 minutes).
pub const BUDGET_SECS: u64 = 240;

/// The revision CI compares the tree with: `from_env` when given (it must name a commit), else
/// HEAD's first parent; `None` when HEAD has no parent.
// i[impl ci.prove+2]
pub fn base(root: &Path, from_env: Option<&str>) -> Result<Option<String>, String> {
    let rev = match from_env.map(str::trim).filter(|r| !r.is_empty()) {
        Some(rev) => rev.to_owned(),
        None => "HEAD^1".to_owned(),
    };
    let output = Command::new("git")
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("{rev}^{{commit}}"))
        .current_dir(root)
        .output()
        .map_err(|err| format!("running git rev-parse: {err}"))?;
    if output.status.success() {
        return Ok(Some(
            String::from_utf8_lossy(&output.stdout).trim().to_owned(),
        ));
    }
    if from_env.is_some_and(|r| !r.trim().is_empty()) {
        return Err(format!("HOLDFAST_PROVE_BASE={rev} names no commit"));
    }
    // A shallow clone has a HEAD whose parent was not fetched: that is not a root commit, and
    // proving nothing there would pass CI without a proof.
    let shallow = Command::new("git")
        .args(["rev-parse", "--is-shallow-repository"])
        .current_dir(root)
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "true");
    if shallow {
        return Err(
            "HEAD's first parent is not in this shallow clone: fetch it (`git fetch --deepen=1`) \
             or set HOLDFAST_PROVE_BASE"
                .to_owned(),
        );
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let output = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git");
        assert!(output.status.success(), "git {args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    // i[verify ci.prove+2]
    #[test]
    fn the_base_is_the_given_commit_or_heads_first_parent() {
        let dir = tempfile::tempdir().expect("tempdir");
        git(dir.path(), &["init", "-q", "-b", "main"]);
        git(dir.path(), &["commit", "-q", "--allow-empty", "-m", "one"]);
        assert_eq!(
            base(dir.path(), None),
            Ok(None),
            "a root commit has no base"
        );
        let first = git(dir.path(), &["rev-parse", "HEAD"]);
        git(dir.path(), &["checkout", "-q", "-b", "topic"]);
        git(dir.path(), &["commit", "-q", "--allow-empty", "-m", "two"]);
        git(
            dir.path(),
            &["commit", "-q", "--allow-empty", "-m", "three"],
        );
        git(dir.path(), &["checkout", "-q", "main"]);
        git(
            dir.path(),
            &["merge", "-q", "--no-ff", "-m", "merge topic", "topic"],
        );
        // After a merge, the first parent is main before it: the whole branch is covered.
        assert_eq!(base(dir.path(), None), Ok(Some(first.clone())));
        let topic = git(dir.path(), &["rev-parse", "topic"]);
        assert_eq!(base(dir.path(), Some("topic")), Ok(Some(topic)));
        assert_eq!(
            base(dir.path(), Some(" ")),
            Ok(Some(first)),
            "blank is unset"
        );
        assert!(base(dir.path(), Some("no-such-rev")).is_err());
        // A shallow clone of the merge lacks its parents: an error, never "nothing to prove".
        let clone = tempfile::tempdir().expect("tempdir");
        let url = format!("file://{}", dir.path().display());
        git(
            clone.path(),
            &["clone", "-q", "--depth", "1", "--branch", "main", &url, "c"],
        );
        let shallow = base(&clone.path().join("c"), None);
        assert!(
            shallow.as_ref().is_err_and(|e| e.contains("shallow")),
            "{shallow:?}"
        );
    }
}
