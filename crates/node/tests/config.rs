//! The config's error messages: file, line, column, key, and a message that says how to fix it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use holdfast::config::{Config, DEFAULT_CONFIG};

const BAD: &[(&str, &str)] = &[
    ("wrong type", "[node]\nstop_budget = 10\n"),
    (
        "unknown key with a near miss",
        "[node]\n\n[admin]\nlisen = \"127.0.0.1:7480\"\n",
    ),
    ("unknown key far from any", "[node]\nflavour = \"mint\"\n"),
    ("unknown section", "[node]\n[pul]\nenabled = true\n"),
    ("bad duration unit", "[node]\ntick = \"5 fortnights\"\n"),
    ("bad duration syntax", "[node]\n[pull]\nbase = \"soon\"\n"),
    ("zero duration", "[node]\nstop_budget = \"0s\"\n"),
    ("missing section", "[admin]\nlisten = \"127.0.0.1:7480\"\n"),
    (
        "missing workload field",
        "[node]\n\n[[workload]]\nname = \"web\"\n",
    ),
    (
        "invalid address",
        "[node]\n[admin]\nlisten = \"localhost:port\"\n",
    ),
    (
        "non-loopback address",
        "[node]\n[admin]\nlisten = \"0.0.0.0:7480\"\n",
    ),
    (
        "cap below base",
        "[node]\n[pull]\nbase = \"10m\"\ncap = \"5m\"\n",
    ),
    (
        "zero threshold",
        "[node]\n[supervise]\ncrash_loop_threshold = 0\n",
    ),
    (
        "duplicate workload",
        "[node]\n[[workload]]\nname = \"web\"\nimage = \"a:1\"\n[[workload]]\nname = \"web\"\nimage = \"b:1\"\n",
    ),
    ("bad log filter", "[node]\n[log]\nlevel = \"info,=[\"\n"),
    ("toml syntax", "[node]\ntick = \"5s\n"),
    ("empty node id", "[node]\nid = \"  \"\n"),
];

// i[verify node.config.errors]
// i[verify node.config.validate]
#[test]
fn every_bad_config_names_file_line_column_and_key() {
    let mut out = String::new();
    for (case, text) in BAD {
        let err = Config::parse("bad.toml", text).expect_err(case);
        let shown = err.to_string();
        assert!(
            shown.starts_with(&format!(
                "bad.toml:{}:{}: {}: ",
                err.line, err.column, err.key
            )),
            "{case}: {shown}"
        );
        out.push_str(&format!("{case}:\n  {shown}\n"));
    }
    insta::assert_snapshot!(out);
}

// i[verify node.config.default]
#[test]
fn the_embedded_default_is_the_example_file_and_is_valid() {
    let from_file = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/single-node.toml"
    ))
    .unwrap();
    assert_eq!(DEFAULT_CONFIG, from_file);
    let config = Config::embedded().unwrap();
    assert_eq!(config.node.stop_budget.get_ref().get().as_secs(), 10);
    assert!(config.pull.enabled);
    assert!(config.workloads.is_empty());
    #[cfg(feature = "testing-modules")]
    assert!(config.testing.is_none(), "no test module by default");
}

// i[verify node.testing-modules]
#[test]
fn the_testing_section_exists_only_in_a_testing_modules_build() {
    let parsed = Config::parse("c.toml", "[testing]\nhang_on_stop = true\n");
    #[cfg(feature = "testing-modules")]
    assert!(parsed.unwrap().testing.is_some_and(|t| t.hang_on_stop));
    #[cfg(not(feature = "testing-modules"))]
    {
        let err = parsed.unwrap_err();
        assert_eq!((err.line, err.key.as_str()), (1, "testing"), "{err}");
        assert!(err.to_string().contains("unknown"), "{err}");
    }
}

// i[verify node.admin.non-loopback]
#[test]
fn a_non_loopback_admin_address_needs_the_explicit_setting() {
    let refused =
        Config::parse("c.toml", "[node]\n[admin]\nlisten = \"0.0.0.0:7480\"\n").unwrap_err();
    assert_eq!(refused.key, "admin.listen");
    let allowed = Config::parse(
        "c.toml",
        "[node]\n[admin]\nlisten = \"0.0.0.0:7480\"\nallow_non_loopback = true\n",
    )
    .unwrap();
    assert!(allowed.admin.allow_non_loopback);
    // Loopback needs nothing, IPv6 loopback included.
    Config::parse("c.toml", "[node]\n[admin]\nlisten = \"[::1]:7480\"\n").unwrap();
}
