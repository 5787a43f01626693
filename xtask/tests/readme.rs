//! The README's sample outputs are real runs: this test builds a small tree shaped like this
//! repository (a runtime spec, a retry crate, a pull crate, a findings file), runs the commands the
//! README shows on it, and compares each output with the README's block. The tree is a fixture, so
//! the samples stay true while the real specs grow; `UPDATE_README=1 cargo test -p xtask --test
//! readme` rewrites the blocks after a deliberate change of output.
//!
//! Fixtures are strings here, never checked-in files: the real gate scans this repository, and
//! tracey's lexer reads comments only, so annotation-shaped text inside these literals is inert.

mod fixture;

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use fixture::Tree;

/// Where the samples say they ran.
const SHOWN_ROOT: &str = "/home/you/holdfast";

/// When the sample's results were written: 2026-11-29 22:10:03 UTC.
const RESULTS_WRITTEN: u64 = 1_795_990_203;

const CONFIG: &str = "\
specs (
    {
        name runtime
        include (docs/spec/runtime.md)
        impls (
            {
                name rust
                include (crates/**/*.rs)
                test_include (crates/**/tests/**/*.rs)
            }
        )
    }
)
";

const RUNTIME: &str = "\
# holdfast runtime specification

## Retry discipline

> r[retry.schedule]
> With n consecutive failures the nominal delay is min(base × 2^(n−1), cap), saturating.

> r[retry.eligible]
> A key is eligible once its delay has passed since its last failure; waiting the cap is always
> enough.

## Image actuation

> r[actuate.image.retry]
> Successive failures to pull an image reference are spaced by an increasing, bounded delay; a
> registry that comes back is pulled from within one cap interval, without a restart.
";

const RETRY_MANIFEST: &str = "\
[package]
name = \"holdfast-retry\"
version = \"0.1.0\"
edition = \"2024\"
";

const SCHEDULE: &str = "\
use std::time::Duration;

// r[impl retry.schedule]
pub fn nominal_delay(base: Duration, cap: Duration, failures: u32) -> Duration {
    let factor = 1u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(cap)
}

// r[impl retry.eligible]
pub fn eligible(since_failure: Duration, delay: Duration) -> bool {
    since_failure >= delay
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify retry.schedule]
    #[test]
    fn the_delay_doubles_then_stays_at_the_cap() {
        let s = Duration::from_secs;
        assert_eq!(nominal_delay(s(5), s(300), 1), s(5));
        assert_eq!(nominal_delay(s(5), s(300), 99), s(300));
    }

    // r[verify retry.eligible]
    #[test]
    fn waiting_the_cap_is_always_enough() {
        assert!(eligible(Duration::from_secs(300), Duration::from_secs(300)));
    }
}
";

const PULL_MANIFEST: &str = "\
[package]
name = \"holdfast-pull\"
version = \"0.1.0\"
edition = \"2024\"
";

const PACING: &str = "\
use std::time::Duration;

/// Paces pulls per image reference.
pub struct Pacer;

impl Pacer {
    // r[impl actuate.image.retry]
    pub fn next_attempt(&self, failures: u32) -> Duration {
        Duration::from_secs(5).saturating_mul(failures.max(1)).min(Duration::from_secs(300))
    }
}
";

const OUTAGE: &str = "\
// r[verify actuate.image.retry]
#[test]
fn a_ten_minute_outage_is_paced_and_recovers_without_restart() {}
";

const FINDINGS: &str = "\
# Audit findings

## H3: Image pull retries have no back-off, and exhaustion is permanent

The predecessor's image reconciler retried a failed pull on every tick with no delay, and after a
fixed number of failures marked the image \"exhausted\" until the agent was restarted.

**Closed by:** `r[actuate.image.retry]`, `r[retry.schedule]`, `r[retry.eligible]`
";

const MANIFEST: &str = "[workspace]\nmembers = [\"crates/*\"]\nresolver = \"3\"\n";

fn sample_tree() -> Tree {
    let tree = Tree::new(
        RUNTIME,
        &[],
        &[
            ("Cargo.toml", MANIFEST),
            (".config/tracey/config.styx", CONFIG),
            ("docs/spec/runtime.md", RUNTIME),
            ("docs/audit/findings.md", FINDINGS),
            ("crates/retry/Cargo.toml", RETRY_MANIFEST),
            ("crates/retry/src/lib.rs", "pub mod schedule;\n"),
            ("crates/retry/src/schedule.rs", SCHEDULE),
            ("crates/pull/Cargo.toml", PULL_MANIFEST),
            ("crates/pull/src/lib.rs", "pub mod pacing;\n"),
            ("crates/pull/src/pacing.rs", PACING),
            ("crates/pull/tests/outage.rs", OUTAGE),
        ],
    );
    for stray in [
        "docs/spec/demo.md",
        "crates/demo/Cargo.toml",
        "crates/demo/src/lib.rs",
        "crates/demo/tests/beta.rs",
    ] {
        tree.remove(stray);
    }
    tree
}

/// The command as the README shows it, and its output with the temp dir shown as a checkout.
fn sample(tree: &Tree, command: &str, args: &[&str]) -> String {
    let run = fixture::xtask_in(tree.path(), tree.path(), command, args);
    let shown = |text: &str| text.replace("[ROOT]", SHOWN_ROOT);
    let mut out = format!("$ cargo xtask {command} {}\n", args.join(" ")).replace(" \n", "\n");
    out.push_str(&shown(&run.stdout));
    out.push_str(&shown(&run.stderr));
    out
}

/// The samples, by the name of their README block.
fn samples() -> Vec<(&'static str, String)> {
    let clean = sample_tree();
    // A rule added by a newcomer: appended without a blank line, and its test forgotten.
    let careless = sample_tree();
    careless.write(
        "docs/spec/runtime.md",
        RUNTIME
            .replace(
                "> enough.\n",
                "> enough.\n> r[retry.gap-reset]\n> A failure more than `cap` after the previous one starts a new streak.\n",
            )
            .as_bytes(),
    );
    careless.write(
        "crates/retry/src/schedule.rs",
        SCHEDULE
            .replace(
                "// r[impl retry.eligible]",
                "// r[impl retry.gap-reset]\n// r[impl retry.eligible]",
            )
            .replace("    // r[verify retry.eligible]\n", "")
            .as_bytes(),
    );
    let with_results = sample_tree();
    let results = with_results.write(
        "target/nextest/ci/junit.xml",
        fixture::junit(&[
            (
                "holdfast-retry",
                "schedule::tests::the_delay_doubles_then_stays_at_the_cap",
                "passed",
            ),
            (
                "holdfast-retry",
                "schedule::tests::waiting_the_cap_is_always_enough",
                "passed",
            ),
            (
                "holdfast-pull::outage",
                "a_ten_minute_outage_is_paced_and_recovers_without_restart",
                "passed",
            ),
        ])
        .as_bytes(),
    );
    with_results.date_all(RESULTS_WRITTEN - 60);
    std::fs::File::options()
        .write(true)
        .open(&results)
        .expect("open results")
        .set_modified(UNIX_EPOCH + Duration::from_secs(RESULTS_WRITTEN))
        .expect("date results");
    vec![
        ("spec-check", sample(&clean, "spec-check", &[])),
        ("spec-check-problems", sample(&careless, "spec-check", &[])),
        (
            "spec-check-test-backed",
            sample(
                &with_results,
                "spec-check",
                &["--results", "target/nextest/ci/junit.xml"],
            ),
        ),
        ("trace", sample(&with_results, "trace", &["H3"])),
    ]
}

/// Replaces the fenced block after `<!-- sample: NAME -->` in `readme`; `None` if there is none.
fn with_block(readme: &str, name: &str, body: &str) -> Option<String> {
    let marker = format!("<!-- sample: {name} -->\n");
    let start = readme.find(&marker)? + marker.len();
    let rest = &readme[start..];
    let open = rest.strip_prefix("```text\n")?;
    // The closing fence: the first line that is exactly ``` (the block may be empty).
    let end = if open.starts_with("```\n") {
        0
    } else {
        open.find("\n```\n")? + 1
    };
    let mut out = readme[..start].to_owned();
    out.push_str("```text\n");
    out.push_str(body.trim_end());
    out.push('\n');
    out.push_str(&open[end..]);
    Some(out)
}

#[test]
fn the_readme_samples_are_real_runs() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md");
    let mut updated = readme.clone();
    for (name, body) in samples() {
        updated = with_block(&updated, name, &body)
            .unwrap_or_else(|| panic!("README.md has no `<!-- sample: {name} -->` text block"));
    }
    if std::env::var_os("UPDATE_README").is_some() {
        std::fs::write(&path, &updated).expect("write README.md");
        return;
    }
    assert!(
        updated == readme,
        "README.md's samples differ from real runs; after a deliberate change of output run \
         `UPDATE_README=1 cargo test -p xtask --test readme`. Expected README:\n{updated}"
    );
}
