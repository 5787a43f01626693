//! The spec report rendered in a real browser: headless Chromium (Debian's `chromium`, which
//! `cargo xtask test --install` installs) loads the page from disk with networking off, and the
//! numbers in the rendered document must equal `spec-check --json` on the same tree and results.
//! A screenshot of the page is saved under `target/spec-report/`.
//!
//! Without Chromium a plain `cargo test` skips this test loudly (and records the skip); under the
//! harness (`HOLDFAST_TEST_SERVICES=1`) a missing browser fails it.

mod fixture;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, UNIX_EPOCH};

use fixture::{Tree, junit};

const SPEC: &str = "\
# Demo spec

> r[demo.alpha]
> Alpha must hold.

> r[demo.beta]
> Beta must hold.
";

const FINDINGS: &str = "\
# Findings

## H1: Alpha and beta failed silently

The old code let alpha and beta fail without a word.

**Closed by:** `r[demo.alpha]`, `r[demo.beta]`
";

/// Chromium on `PATH`, or the loud skip.
fn chromium() -> Option<PathBuf> {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .flat_map(|dir| [dir.join("chromium"), dir.join("chromium-browser")])
        .find(|p| p.is_file());
    if found.is_none() {
        holdfast_test_support::services::skip_loudly(
            "chromium",
            "chromium is not installed (apt-get install chromium)",
            holdfast_test_support::services::FailWhen::Harness,
        );
    }
    found
}

/// Runs headless Chromium on `url` with `mode` (`--dump-dom`, `--screenshot=…`), no network.
fn headless(browser: &Path, profile: &Path, mode: &[String], url: &str) -> std::process::Output {
    Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(mode)
        .arg(url)
        .output()
        .expect("run chromium")
}

/// The text of each `<td>` of the rows whose opening tag contains `marker`, in the rendered DOM.
fn cells(dom: &str, marker: &str) -> Vec<Vec<String>> {
    dom.split("<tr")
        .filter(|row| {
            row.split('>')
                .next()
                .is_some_and(|tag| tag.contains(marker))
        })
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let inner = cell.split_once('>').map_or("", |(_, rest)| rest);
                    let inner = inner.split("</td>").next().unwrap_or_default();
                    // Text only: drop the bars' markup.
                    let mut text = String::new();
                    let mut in_tag = false;
                    for c in inner.chars() {
                        match c {
                            '<' => in_tag = true,
                            '>' => in_tag = false,
                            c if !in_tag => text.push(c),
                            _ => {}
                        }
                    }
                    text.trim().to_owned()
                })
                .collect()
        })
        .collect()
}

// i[verify spec-report.browser]
#[test]
fn the_rendered_page_shows_the_gates_numbers() {
    let Some(browser) = chromium() else {
        return;
    };
    let tree = Tree::new(SPEC, &[("docs/audit/findings.md", FINDINGS)], &[]);
    let results = tree.write(
        "target/nextest/ci/junit.xml",
        junit(&[
            ("demo", "tests::alpha_holds", "passed"),
            ("demo::beta", "beta_holds", "failed"),
        ])
        .as_bytes(),
    );
    tree.date_all(1_795_990_143);
    std::fs::File::options()
        .write(true)
        .open(&results)
        .expect("open")
        .set_modified(UNIX_EPOCH + Duration::from_secs(1_795_990_203))
        .expect("date");
    let run = fixture::xtask("spec-report", tree.path(), &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let page = tree
        .path()
        .join("target/spec-report.html")
        .canonicalize()
        .expect("page");
    let url = format!("file://{}", page.display());
    let profile = tempfile::tempdir().expect("profile dir");

    let dom = headless(&browser, profile.path(), &["--dump-dom".to_owned()], &url);
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    assert!(dom.contains("<h1>Spec report</h1>"), "{dom}");

    let gate = fixture::xtask(
        "spec-check",
        tree.path(),
        &["--json", "--results", "target/nextest/ci/junit.xml"],
    );
    let json: serde_json::Value = serde_json::from_str(&gate.stdout).expect("json");
    let rows = cells(&dom, "class=\"spec\"");
    let specs = json["specs"].as_array().expect("specs");
    assert_eq!(rows.len(), specs.len(), "{dom}");
    for (row, spec) in rows.iter().zip(specs) {
        // spec, rules, implemented, verified, tested, stale, errors — as rendered.
        let shown = |i: usize| {
            row[i]
                .split_whitespace()
                .last()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(row[0], spec["name"].as_str().expect("name"));
        for (index, key) in [
            (1, "total"),
            (2, "implemented"),
            (3, "verified"),
            (4, "tested"),
            (5, "stale"),
            (6, "errors"),
        ] {
            assert_eq!(shown(index), spec[key].to_string(), "{key} in {row:?}");
        }
    }
    let problems = json["problems"].as_array().expect("problems").len();
    assert!(
        dom.contains(&format!("spec-check: {problems} problem")),
        "{dom}"
    );
    assert!(
        dom.contains("data-verdict=\"regressed\""),
        "H1 regressed: {dom}"
    );

    // A screenshot for a human to look at.
    let shot_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/spec-report");
    std::fs::create_dir_all(&shot_dir).expect("screenshot dir");
    let shot = shot_dir.join("fixture.png");
    let _ = std::fs::remove_file(&shot);
    let taken = headless(
        &browser,
        profile.path(),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,1600".to_owned(),
        ],
        &url,
    );
    assert!(
        taken.status.success(),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
}
