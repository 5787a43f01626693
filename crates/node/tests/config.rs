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
    (
        "gateway without a key file",
        "[node]\n[gateway]\nlisten = \"127.0.0.1:7443\"\n",
    ),
    (
        "gateway key file missing",
        "[node]\n[gateway]\nlisten = \"127.0.0.1:7443\"\ntoken_key_file = \"/nonexistent/gateway.key\"\n",
    ),
    (
        "gateway close choice",
        "[node]\n[gateway]\nlisten = \"127.0.0.1:7443\"\ntoken_key_file = \"/k\"\n[gateway.drain]\nclose = \"sometimes\"\n",
    ),
    (
        "gateway key with a near miss",
        "[node]\n[gateway]\nlisten = \"127.0.0.1:7443\"\ntoken_key_file = \"/k\"\nping_intervall = \"5s\"\n",
    ),
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

// i[verify node.workloads.shape+2]
// r[verify workload.depends-on]
#[test]
fn the_web_with_db_example_is_valid_and_orders_web_after_its_store() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/web-with-db.toml"
    );
    let config = Config::load(std::path::Path::new(path)).unwrap();
    let workloads: Vec<_> = config.workloads.iter().map(|w| w.to_config()).collect();
    let [store, web] = &workloads[..] else {
        panic!("{workloads:?}")
    };
    assert_eq!(store.name, "store");
    assert!(store.health.is_some());
    assert_eq!(store.volumes[0].to_string(), "holdfast-demo-store:/data");
    assert_eq!(web.depends_on, ["store"]);
    assert_eq!(web.ports[0].to_string(), "127.0.0.1:8080:8080");
    assert_eq!(
        web.network.as_deref(),
        Some(holdfast_workload::NODE_NETWORK)
    );
    assert!(web.command[2].contains("http://store:8081/greeting"));
}

// i[verify node.gateway.config+4]
#[test]
fn the_examples_gateway_block_parses_and_states_the_defaults() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gateway.key");
    std::fs::write(&key, "0123456789abcdef-gateway-secret\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    // The commented [gateway] block and its [gateway.drain], uncommented (the TLS and cluster
    // blocks list alternatives, so they stop it), with a key file that exists.
    let mut block = String::from("[node]\n");
    let mut inside = false;
    for line in DEFAULT_CONFIG.lines() {
        let Some(text) = line.strip_prefix("# ") else {
            inside = false;
            continue;
        };
        if text.starts_with("[gateway]") {
            inside = true;
        } else if text.starts_with("[gateway.tls]") {
            inside = false;
        }
        if inside {
            if text.starts_with("token_key_file") {
                block.push_str(&format!("token_key_file = \"{}\"\n", key.display()));
            } else if text.starts_with("publish_token_file") {
                block.push_str(&format!("publish_token_file = \"{}\"\n", key.display()));
            } else {
                block.push_str(text);
                block.push('\n');
            }
        }
    }
    for k in [
        "unauthenticated_per_ip_limit",
        "max_rooms_per_connection",
        "max_room_name",
        "history_size",
        "history_ttl",
        "history_max_bytes",
        "publish_token_file",
    ] {
        assert!(
            block.contains(&format!("\n{k} = ")),
            "{k} missing:\n{block}"
        );
    }
    let config = Config::parse("example.toml", &block).unwrap();
    let g = config.gateway.unwrap().get_ref().gateway_config(
        "n",
        holdfast_gateway::TokenKey::new(b"x".to_vec()),
        dir.path(),
    );
    // Every value the example writes is the default it would have without the key.
    let d = holdfast_gateway::GatewayConfig::new(
        g.listen,
        "n",
        holdfast_gateway::TokenKey::new(b"x".to_vec()),
    );
    assert_eq!(g.history, d.history);
    assert!(g.publish_key.is_some(), "the publish token file is read");
    assert_eq!(
        (
            g.max_message_size,
            g.send_queue,
            g.ping_interval,
            g.idle_timeout
        ),
        (
            d.max_message_size,
            d.send_queue,
            d.ping_interval,
            d.idle_timeout
        )
    );
    assert_eq!(
        (
            g.per_ip_limit,
            g.unauthenticated_limit,
            g.unauthenticated_per_ip_limit,
            g.max_rooms_per_connection,
            g.max_room_name
        ),
        (
            d.per_ip_limit,
            d.unauthenticated_limit,
            d.unauthenticated_per_ip_limit,
            d.max_rooms_per_connection,
            d.max_room_name
        )
    );
    assert_eq!(
        (g.drain.total, g.drain.retry_after_secs),
        (d.drain.total, d.drain.retry_after_secs)
    );
    // [gateway.auth] is shown with its defaults.
    for k in [
        "secrets",
        "public_keys",
        "rooms_default",
        "audience",
        "leeway",
        "reload_interval",
    ] {
        assert!(
            block.contains(&format!("\n{k} = ")),
            "{k} missing:\n{block}"
        );
    }
    let config = Config::parse("example.toml", &block).unwrap();
    let sources = config.gateway.unwrap().get_ref().token_key_sources();
    assert_eq!(sources.settings, holdfast_gateway::AuthSettings::default());
    assert_eq!(g.key_reload_interval, d.key_reload_interval);
}

// i[verify node.gateway.auth]
#[test]
fn the_gateway_auth_section_is_validated_at_its_key() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let pem = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../gateway/tests/fixtures/keys/rsa.pub");
    let private = dir.path().join("private.pem");
    std::fs::write(
        &private,
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let secret = dir.path().join("gateway.key");
    std::fs::write(&secret, "0123456789abcdef-gateway-secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let head = "[node]\n[gateway]\nlisten = \"127.0.0.1:7443\"\n";
    let parse = |rest: &str| Config::parse("t.toml", &format!("{head}{rest}"));
    // Keys in [gateway.auth] alone: no token_key_file needed.
    let ok = parse(&format!(
        "[gateway.auth]\npublic_keys = [\"{}\"]\nrooms_default = \"any\"\naudience = [\"chat\"]\nissuer = \"https://a.example\"\n\
         leeway = \"10s\"\nreload_interval = \"1s\"\n",
        pem.display()
    ))
    .unwrap();
    let section = ok.gateway.unwrap();
    let sources = section.get_ref().token_key_sources();
    assert_eq!(sources.public_key_files, vec![pem.clone()]);
    assert!(sources.secret_files.is_empty());
    assert_eq!(
        sources.settings,
        holdfast_gateway::AuthSettings {
            audience: vec!["chat".into()],
            issuer: Some("https://a.example".into()),
            leeway: std::time::Duration::from_secs(10),
            rooms_default: holdfast_gateway::RoomsDefault::Any,
        }
    );
    assert!(sources.load().is_ok());
    let g = section.get_ref().gateway_config(
        "n",
        holdfast_gateway::TokenKey::new(b"x".to_vec()),
        dir.path(),
    );
    assert_eq!(g.key_reload_interval, std::time::Duration::from_secs(1));
    // No key at all.
    let e = parse("").unwrap_err().to_string();
    assert!(
        e.starts_with("t.toml:") && e.contains("gateway.auth: no token key"),
        "{e}"
    );
    // A key file that yields no key: its position and its name.
    let e = parse(&format!(
        "[gateway.auth]\npublic_keys = [\"{}\"]\n",
        private.display()
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("t.toml:5:15: gateway.auth.public_keys: ") && e.contains("private.pem"),
        "{e}"
    );
    // A public key listed as a secret, and a world-readable secret: refused, never used.
    let open = dir.path().join("open.key");
    std::fs::write(&open, "0123456789abcdef-gateway-secret\n").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let copy = dir.path().join("rsa.pub");
    std::fs::copy(&pem, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o600)).unwrap();
    for (f, want) in [(&open, "chmod 600"), (&copy, "not an HS256 secret")] {
        let e = parse(&format!(
            "[gateway.auth]\nsecrets = [\"{}\"]\n",
            f.display()
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("t.toml:5:11: gateway.auth.secrets: ") && e.contains(want),
            "{e}"
        );
    }
    // rooms_default is none or any.
    let e = parse("[gateway.auth]\nrooms_default = \"all\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("rooms_default"), "{e}");
    let with_secret = format!("token_key_file = \"{}\"\n", secret.display());
    for (rest, want) in [
        (
            "[gateway.auth]\nleeway = \"6m\"\n",
            "t.toml:6:10: gateway.auth.leeway: must be at most 5m",
        ),
        (
            "[gateway.auth]\nreload_interval = \"0s\"\n",
            "t.toml:6:19: gateway.auth.reload_interval: must be longer than zero",
        ),
        (
            "[gateway.auth]\naudience = [\"\"]\n",
            "t.toml:6:12: gateway.auth.audience: an audience must not be empty",
        ),
        (
            "[gateway.auth]\nissuer = \" \"\n",
            "t.toml:6:10: gateway.auth.issuer: must not be empty",
        ),
    ] {
        let e = parse(&format!("{with_secret}{rest}"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(want), "{e} vs {want}");
    }
}

// i[verify node.testing-modules]
#[test]
fn the_testing_section_exists_only_in_a_testing_modules_build() {
    let parsed = Config::parse("c.toml", "[node]\n[testing]\nhang_on_stop = true\n");
    #[cfg(feature = "testing-modules")]
    assert!(parsed.unwrap().testing.is_some_and(|t| t.hang_on_stop));
    #[cfg(not(feature = "testing-modules"))]
    {
        let err = parsed.unwrap_err();
        assert_eq!((err.line, err.key.as_str()), (2, "testing"), "{err}");
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

// i[verify node.admin.host+2]
#[test]
fn admin_allowed_hosts_are_names_or_addresses_located_when_not() {
    let base = "[node]\n[admin]\nallowed_hosts = ";
    Config::parse(
        "c.toml",
        &format!("{base}[\"metrics.internal\", \"Probe-1.Example.org\", \"10.0.0.5\", \"::1\", \"[2001:db8::1]\"]\n"),
    )
    .unwrap();
    Config::parse("c.toml", &format!("{base}[]\n")).unwrap();
    for (entry, column, says) in [
        ("metrics.internal:9090", 32, "port"),
        ("*.internal", 32, "DNS name"),
        ("", 32, "DNS name"),
        ("evil example", 32, "DNS name"),
        ("-bad.example", 32, "DNS name"),
        ("256.1.1.1", 32, "DNS name"),
        ("http://metrics.internal", 32, "DNS name"),
    ] {
        let text = format!("{base}[\"ok.example\", \"{entry}\"]\n");
        let err = Config::parse("c.toml", &text).unwrap_err();
        assert_eq!(
            (err.line, err.column, err.key.as_str()),
            (3, column, "admin.allowed_hosts[1]"),
            "{entry}: {err}"
        );
        assert!(err.message.contains(says), "{entry}: {err}");
    }
    let long = format!("{}.example", "a".repeat(64));
    let err = Config::parse("c.toml", &format!("{base}[\"{long}\"]\n")).unwrap_err();
    assert_eq!(err.key, "admin.allowed_hosts[0]", "{err}");
}

// r[verify node.issuance.config+2]
#[test]
fn the_issuance_section_is_validated_with_the_rest() {
    // Both sources configured, a hostname on each: each finds its source.
    let ok = "[node]\n\n[issuance]\ntick = \"30s\"\npacing = { base = \"1m\", cap = \"6h\" }\n\
              [[issuance.hostname]]\nname = \"a.example\"\nsource = \"local\"\n\
              [[issuance.hostname]]\nname = \"b.example\"\nsource = \"acme\"\n\
              [issuance.local]\nendpoint = { tcp = \"127.0.0.1:8099\" }\n\
              [issuance.acme]\ndirectory = \"https://acme.example/directory\"\n";
    let config = Config::parse("ok.toml", ok).unwrap();
    let issuance = config.issuance.unwrap();
    assert_eq!(issuance.get_ref().hostnames.len(), 2);
    // No section: no issuance module.
    assert!(
        Config::parse("none.toml", "[node]\n")
            .unwrap()
            .issuance
            .is_none()
    );
    // An entry's error points at the entry: its source, or its name.
    let cases = [
        (
            "[node]\n[issuance]\n[[issuance.hostname]]\nname = \"a.example\"\nsource = \"acme\"\n",
            "bad.toml:5:10: issuance.hostname[0].source: a.example uses the acme source, but there is no [issuance.acme] section",
        ),
        (
            "[node]\n[issuance]\n[issuance.acme]\ndirectory = \"https://acme.example/directory\"\n\
             [[issuance.hostname]]\nname = \"a.example\"\nsource = \"local\"\n",
            "bad.toml:7:10: issuance.hostname[0].source: a.example uses the local source, but there is no [issuance.local] section",
        ),
        (
            "[node]\n[issuance]\n[issuance.local]\nendpoint = { tcp = \"127.0.0.1:1\" }\n\
             [[issuance.hostname]]\nname = \"a.example\"\nsource = \"local\"\n\
             [[issuance.hostname]]\nname = \"A.example\"\nsource = \"local\"\n",
            "bad.toml:9:8: issuance.hostname[1].name: \"A.example\" is listed more than once (also issuance.hostname[0])",
        ),
        (
            "[node]\n[issuance]\npacing = { base = \"7h\" }\n",
            "bad.toml:2:1: issuance.pacing.base: ",
        ),
        (
            "[node]\n[issuance]\nblock_after = 0\n",
            "bad.toml:2:1: issuance.block_after: must be at least 1",
        ),
        (
            "[node]\n[issuance]\ntick = \"soon\"\n",
            "bad.toml:3:8: issuance.tick: ",
        ),
        (
            "[node]\n[issuance]\nblok_after = 3\n",
            "bad.toml:3:1: issuance.blok_after: unknown key `blok_after`; did you mean `block_after`?",
        ),
    ];
    for (text, want) in cases {
        let err = Config::parse("bad.toml", text).unwrap_err().to_string();
        assert!(err.starts_with(want), "{err}\n  wanted: {want}");
    }
}

// r[verify node.issuance.config+2]
#[test]
fn an_issuance_hostname_that_issuance_would_refuse_is_refused_at_its_entry() {
    // Whatever holdfast-issuance refuses at start the node refuses in its config check: blank,
    // whitespace inside, a leading space (nothing is trimmed), a path, `..`, a 64-character label.
    let long_label = "a".repeat(64);
    for name in [
        "  ",
        "b .example",
        " a.example",
        "a/b.example",
        "..",
        long_label.as_str(),
    ] {
        // The refused entry is the second; its name is indented, so its column is its own.
        let text = format!(
            "[node]\n[issuance]\n[issuance.local]\nendpoint = {{ tcp = \"127.0.0.1:1\" }}\n\
             [[issuance.hostname]]\nname = \"a.example\"\nsource = \"local\"\n\
             [[issuance.hostname]]\nsource = \"local\"\n  name = \"{name}\"\n"
        );
        let err = Config::parse("bad.toml", &text).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "bad.toml:10:10: issuance.hostname[1].name: {name:?} is not a DNS name (letters, \
                 digits, '-' and '_' in dot-separated labels of 1 to 63 characters, at most 253 in \
                 all, optionally after `*.`)"
            ),
        );
    }
}

// r[verify node.forward.config+3]
// r[verify node.log.no-secrets]
#[test]
fn the_forward_section_is_validated_with_the_rest() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "# clients\nfwd-secret-1-5d0c9e7a2b4f81d36e0a\n").unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ok = format!(
        "[node]\n[forward]\nlisten = \"127.0.0.1:4433\"\ntoken_file = \"{}\"\nallow = [\"10.0.0.0/8:53\"]\n",
        tokens.display()
    );
    let config = Config::parse("ok.toml", &ok).unwrap();
    assert_eq!(config.forward.unwrap().get_ref().allow.get_ref().len(), 1);
    // An inline token is a secret: it never shows in the config's Debug.
    let inline = "[node]\n[forward]\nlisten = \"127.0.0.1:4433\"\ntokens = [\"inline-s3cret-4e9a0b7c1d2f3e5a6b8c\"]\nallow = [\"127.0.0.1:53\"]\n";
    let config = Config::parse("inline.toml", inline).unwrap();
    let shown = format!("{config:?}");
    assert!(!shown.contains("inline-s3cret"), "{shown}");
    // It shows as redacted, not as nothing: the config still says a token is there.
    assert!(shown.contains("tokens: [<redacted>]"), "{shown}");
    let cases = [
        (
            "[node]\n[forward]\nlisten = \"127.0.0.1:4433\"\ntokens = [\"t\"]\nallow = []\n".to_owned(),
            "bad.toml:5:9: forward.allow: is empty",
        ),
        (
            "[node]\n[forward]\nlisten = \"127.0.0.1:4433\"\ntokens = [\"t\"]\nallow = [\"ten/8:53\"]\n".to_owned(),
            "bad.toml:5:9: forward.allow: ",
        ),
        (
            "[node]\n[forward]\nlisten = \"127.0.0.1:4433\"\nallow = [\"127.0.0.1:53\"]\n".to_owned(),
            "bad.toml:2:1: forward: no client credentials",
        ),
        (
            "[node]\n[forward]\nlisten = \"nowhere\"\ntokens = [\"t\"]\nallow = [\"127.0.0.1:53\"]\n".to_owned(),
            "bad.toml:3:10: forward.listen: ",
        ),
        (
            "[node]\n[forward]\nlisten = \"127.0.0.1:4433\"\nallow = [\"127.0.0.1:53\"]\n".to_owned()
                + "tokens_file = \"x\"\n",
            "bad.toml:5:1: forward.tokens_file: unknown key `tokens_file`; did you mean `token_file`?",
        ),
    ];
    for (text, want) in &cases {
        let err = Config::parse("bad.toml", text).unwrap_err().to_string();
        assert!(err.starts_with(want), "{err}\n  wanted: {want}");
    }
    // A token file others can read is refused, naming the chmod.
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = Config::parse("loose.toml", &ok).unwrap_err().to_string();
    assert!(
        err.contains("forward.token_file") && err.contains("chmod 600"),
        "{err}"
    );
}

// r[verify node.forward.config+3]
// r[verify node.log.no-secrets]
#[test]
fn a_forward_client_has_its_own_tokens_and_allow_list() {
    let head = "[node]\n[forward]\nlisten = \"127.0.0.1:4433\"\nallow = [\"10.0.0.1:53\"]\n";
    // A node whose only credentials are a client's.
    let ok = format!(
        "{head}[[forward.client]]\ntokens = [\"client-s3cret-0a1b2c3d4e5f60718293\"]\nallow = [\"10.0.0.2:53\"]\n"
    );
    let config = Config::parse("ok.toml", &ok).unwrap();
    let forward = config.forward.as_ref().unwrap().get_ref();
    assert_eq!(forward.client.len(), 1);
    assert_eq!(
        forward.client[0].get_ref().allow.get_ref(),
        &["10.0.0.2:53".to_owned()]
    );
    assert!(!format!("{config:?}").contains("client-s3cret"));
    let cases = [
        (
            format!("{head}[[forward.client]]\ntokens = [\"c\"]\nallow = []\n"),
            "bad.toml:7:9: forward.client[0].allow: is empty",
        ),
        (
            format!("{head}[[forward.client]]\ntokens = [\"c\"]\nallow = [\"10.0.0.0/99:1\"]\n"),
            "bad.toml:7:9: forward.client[0].allow: ",
        ),
        (
            format!("{head}[[forward.client]]\nallow = [\"10.0.0.2:53\"]\n"),
            "bad.toml:5:1: forward.client[0]: has no token",
        ),
        (
            format!(
                "{head}[[forward.client]]\ntokens = [\"c\"]\nallow = [\"10.0.0.2:53\"]\ntoken = \"c\"\n"
            ),
            "bad.toml:8:1: forward.client[0].token: unknown key",
        ),
    ];
    for (text, want) in &cases {
        let err = Config::parse("bad.toml", text).unwrap_err().to_string();
        assert!(err.starts_with(want), "{err}\n  wanted: {want}");
    }
}

// r[verify node.forward.config+3]
#[test]
fn the_forward_connection_bounds_reach_the_server_and_default_to_the_librarys() {
    use holdfast::modules::forward::ForwardModule;
    const TOKEN: &str = "0123456789abcdef0123456789abcdef";
    let head = format!(
        "[node]\n[forward]\nlisten = \"127.0.0.1:4433\"\nallow = [\"10.0.0.1:53\"]\n\
         tokens = [\"{TOKEN}\"]\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let server = |text: &str| {
        let config = Config::parse("ok.toml", text).unwrap();
        let section = config.forward.unwrap();
        ForwardModule::new(section.get_ref(), dir.path().into(), Default::default())
            .server_config()
            .unwrap()
    };
    // Unset: the library's defaults, 16 connections per token among them.
    let defaults = server(&head);
    assert_eq!(
        (
            defaults.max_authenticated,
            defaults.max_per_credential,
            defaults.max_unauthenticated,
            defaults.max_unauthenticated_per_source,
        ),
        (
            holdfast_forward::DEFAULT_MAX_AUTHENTICATED,
            holdfast_forward::DEFAULT_MAX_PER_CREDENTIAL,
            holdfast_forward::DEFAULT_MAX_UNAUTHENTICATED,
            holdfast_forward::DEFAULT_MAX_UNAUTHENTICATED_PER_SOURCE,
        )
    );
    assert_eq!(defaults.max_per_credential, 16);
    // Set: each reaches the server.
    let set = server(&format!(
        "{head}max_connections = 500\nmax_connections_per_token = 200\n\
         max_unauthenticated = 1000\nmax_unauthenticated_per_source = 20\n"
    ));
    assert_eq!(
        (
            set.max_authenticated,
            set.max_per_credential,
            set.max_unauthenticated,
            set.max_unauthenticated_per_source,
        ),
        (500, 200, 1000, 20)
    );
    // A zero would refuse every client: an error at its place.
    for (key, column) in [
        ("max_connections", 19),
        ("max_connections_per_token", 29),
        ("max_unauthenticated", 23),
        ("max_unauthenticated_per_source", 34),
    ] {
        let err = Config::parse("bad.toml", &format!("{head}{key} = 0\n"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "bad.toml:6:{column}: forward.{key}: must be at least 1 (0 would refuse every \
                 client)"
            )
        );
    }
    // A part above its whole could never be reached; more unauthenticated places than the
    // endpoint holds attempts would be no bound.
    let err = |extra: &str| {
        Config::parse("bad.toml", &format!("{head}{extra}"))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err("max_connections = 10\nmax_connections_per_token = 11\n"),
        "bad.toml:7:29: forward.max_connections_per_token: is 11, more than \
         forward.max_connections (10): it could never be reached"
    );
    assert_eq!(
        err("max_connections_per_token = 65\n"),
        "bad.toml:6:29: forward.max_connections_per_token: is 65, more than \
         forward.max_connections (64): it could never be reached"
    );
    assert_eq!(
        err("max_unauthenticated_per_source = 257\n"),
        "bad.toml:6:34: forward.max_unauthenticated_per_source: is 257, more than \
         forward.max_unauthenticated (256): it could never be reached"
    );
    assert_eq!(
        err("max_unauthenticated = 4097\n"),
        "bad.toml:6:23: forward.max_unauthenticated: is 4097, more than the 4096 connection \
         attempts the node's endpoint holds"
    );
    Config::parse(
        "ok.toml",
        &format!("{head}max_connections_per_token = 64\nmax_unauthenticated = 4096\n"),
    )
    .unwrap();
}

// r[verify node.forward.config+3]
#[test]
fn a_forward_token_shorter_than_the_minimum_is_refused_where_it_is_written() {
    use std::os::unix::fs::PermissionsExt;
    const LONG: &str = "0123456789abcdef0123456789abcdef";
    let head = "[node]\n[forward]\nlisten = \"127.0.0.1:4433\"\nallow = [\"10.0.0.1:53\"]\n";
    // 32 bytes is enough.
    Config::parse("ok.toml", &format!("{head}tokens = [\"{LONG}\"]\n")).unwrap();
    let short = &LONG[..31];
    let message =
        "is 31 bytes long; a forward token must be at least 32 (e.g. `openssl rand -hex 16`)";
    let err = Config::parse(
        "bad.toml",
        &format!("{head}tokens = [\"{LONG}\", \"{short}\"]\n"),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(err, format!("bad.toml:5:47: forward.tokens[1]: {message}"));
    assert!(!err.contains(short));
    let err = Config::parse(
        "bad.toml",
        &format!(
            "{head}tokens = [\"{LONG}\"]\n[[forward.client]]\nallow = [\"10.0.0.2:53\"]\n\
             tokens = [\n  \"{short}\",\n]\n"
        ),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        format!("bad.toml:9:3: forward.client[0].tokens[0]: {message}")
    );
    // In a token file: the file's key, naming the line (never the token).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, format!("# clients\n{LONG}\n\n{short}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let text = format!("{head}token_file = \"{}\"\n", file.display());
    let err = Config::parse("bad.toml", &text).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "bad.toml:5:14: forward.token_file: token file {} line 4: the token {message}",
            file.display()
        )
    );
    assert!(!err.contains(short));
}

// i[verify node.config.validate]
#[test]
fn an_empty_token_file_is_refused_at_validation_not_at_run() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("admin.token");
    std::fs::write(&token, "  \n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let text = format!("[node]\n[admin]\ntoken_file = \"{}\"\n", token.display());
    let err = Config::parse("t.toml", &text).unwrap_err().to_string();
    assert!(
        err.starts_with("t.toml:3:14: admin.token_file: token file") && err.ends_with("is empty"),
        "{err}"
    );
}

// i[verify node.config.validate]
#[test]
fn an_admin_api_turned_off_needs_the_socket() {
    let off = "[node]\n[admin]\nlisten = \"off\"\n";
    assert_eq!(
        Config::parse("c.toml", off).unwrap_err().to_string(),
        "c.toml:3:10: admin.listen: is \"off\" and no admin.socket is set: the admin API would be \
         unreachable"
    );
    let config = Config::parse(
        "c.toml",
        &format!("{off}socket = \"/run/holdfast/admin.sock\"\n"),
    )
    .unwrap();
    assert!(config.admin.socket.is_some());
}

// i[verify node.config.validate]
// i[verify node.workloads.config]
#[test]
fn a_workload_name_is_letters_digits_dash_underscore_and_dot() {
    let entry = |name: &str| format!("[node]\n[[workload]]\nname = \"{name}\"\nimage = \"a:1\"\n");
    let config = Config::parse("w.toml", &entry("Web-1_a.b")).unwrap();
    assert_eq!(config.workloads[0].name.get_ref(), "Web-1_a.b");
    for name in ["a/b", "a b", ""] {
        assert_eq!(
            Config::parse("w.toml", &entry(name))
                .unwrap_err()
                .to_string(),
            format!(
                "w.toml:3:8: workload[0].name: invalid name {name:?}: use letters, digits, '-', \
                 '_' and '.'"
            )
        );
    }
}

// i[verify node.workloads.config]
#[test]
fn a_workload_entry_is_the_workload_crates_config_with_positions_in_errors() {
    let text = "[node]\n\n[workloads]\nstop_on_exit = true\n\n[[workload]]\nname = \"web\"\nimage = \"busybox:1\"\ncommand = [\"sleep\", \"3600\"]\nenv = { A = \"1\" }\nrestart = \"on-failure\"\nmin_run = \"2s\"\nstop_timeout = \"5s\"\n\n[[workload]]\nname = \"plain\"\nimage = \"busybox:1\"\n";
    let config = Config::parse("t.toml", text).unwrap();
    assert!(config.workloads_module.stop_on_exit);
    let web = config.workloads[0].to_config();
    assert_eq!(web.command, ["sleep", "3600"]);
    assert_eq!(web.env.get("A").map(String::as_str), Some("1"));
    assert_eq!(web.restart, holdfast_workload::RestartPolicy::OnFailure);
    assert_eq!(web.min_run, std::time::Duration::from_secs(2));
    assert_eq!(web.stop_timeout, std::time::Duration::from_secs(5));
    // name and image alone still work, with the workload crate's defaults.
    assert_eq!(
        config.workloads[1].to_config(),
        holdfast_workload::WorkloadConfig::new("plain", "busybox:1")
    );
    // The default leaves containers running when holdfast stops.
    let plain = Config::parse("t.toml", "[node]\n").unwrap();
    assert!(!plain.workloads_module.stop_on_exit);

    let err = |text: &str| Config::parse("t.toml", text).unwrap_err().to_string();
    let head = "[node]\n[[workload]]\nname = \"web\"\nimage = \"busybox:1\"\n";
    assert_eq!(
        err(&format!("{head}min_run = \"2h\"\n")),
        "t.toml:5:11: workload[0].min_run: must be between 1ms and 1h"
    );
    assert_eq!(
        err(&format!("{head}stop_timeout = \"1h\"\n")),
        "t.toml:5:16: workload[0].stop_timeout: must be at most 10m"
    );
    assert!(
        err(&format!("{head}env = {{ \"A=B\" = \"x\" }}\n"))
            .starts_with("t.toml:5:7: workload[0].env:")
    );
    assert!(
        err(&format!("{head}restart = \"sometimes\"\n"))
            .starts_with("t.toml:5:11: workload[0].restart:")
    );
    assert!(err("[node]\n[workloads]\nstop_on_exti = true\n").contains("workloads.stop_on_exti"));
}

// i[verify node.workloads.shape+2]
// r[verify workload.health+2]
// r[verify workload.depends-on]
// r[verify workload.shape.bytes+2]
// r[verify workload.health.probe]
#[test]
fn a_workloads_container_shape_is_read_and_each_bad_value_is_located() {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("web.env");
    std::fs::write(&env_file, "# web\nA=from-file\nB=2\n").unwrap();
    let head = "[node]\n[[workload]]\nname = \"web\"\nimage = \"busybox:1\"\n";
    let text = format!(
        "{head}env = {{ A = \"1\" }}\nports = [\"8080:80\", \"127.0.0.1:8443:443/tcp\", \"5353:53/udp\"]\n\
         volumes = [\"/srv/www:/www:ro\", \"data:/var/lib/data\"]\nnetwork = \"backend\"\n\
         user = \"1000\"\nworkdir = \"/www\"\nenv_file = \"{}\"\nlabels = {{ team = \"edge\" }}\n\
         memory = \"512m\"\ncpus = 1.5\npids_limit = 100\nread_only = true\n\
         cap_add = [\"NET_BIND_SERVICE\"]\ncap_drop = [\"ALL\"]\ninit = true\n\
         log = {{ options = {{ max-size = \"50m\" }} }}\n",
        env_file.display()
    );
    let config = Config::parse("t.toml", &text).unwrap();
    let web = config.workloads[0].to_config();
    assert_eq!(
        web.ports
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["8080:80", "127.0.0.1:8443:443", "5353:53/udp"]
    );
    assert_eq!(web.volumes[0].to_string(), "/srv/www:/www:ro");
    assert_eq!(web.network.as_deref(), Some("backend"));
    assert_eq!(web.user.as_deref(), Some("1000"));
    assert_eq!(web.workdir.as_deref(), Some("/www"));
    assert_eq!(web.env["A"], "1", "env wins over the env file");
    assert_eq!(web.env["B"], "2");
    assert_eq!(web.labels["team"], "edge");
    assert_eq!(web.memory.map(|m| m.0), Some(512 << 20));
    assert_eq!(web.cpus.map(|c| c.0), Some(1_500_000_000));
    assert_eq!(web.pids_limit, Some(100));
    assert!(web.read_only && web.init);
    assert_eq!(web.cap_add, ["NET_BIND_SERVICE"]);
    assert_eq!(web.cap_drop, ["ALL"]);
    assert_eq!(web.log.driver, "json-file");
    assert_eq!(web.log.effective_options()["max-size"], "50000000");
    // Unset, every key has its default (and the log rotates).
    let plain = Config::parse("t.toml", head).unwrap().workloads[0].to_config();
    assert_eq!(
        plain,
        holdfast_workload::WorkloadConfig::new("web", "busybox:1")
    );

    let err = |line: &str| {
        Config::parse("t.toml", &format!("{head}{line}\n"))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err("ports = [\"8080:80\", \"80\"]"),
        "t.toml:5:9: workload[0].ports[1]: \"80\": expected two or three ':'-separated parts \
         (write [HOST_IP:]HOST_PORT:CONTAINER_PORT[/tcp|/udp])"
    );
    assert!(err("ports = [\"80:80\", \"80:81\"]").starts_with("t.toml:5:9: workload[0].ports: "));
    assert!(
        err("volumes = [\"./www:/www\"]").starts_with("t.toml:5:11: workload[0].volumes[0]: "),
        "{}",
        err("volumes = [\"./www:/www\"]")
    );
    assert!(err("memory = \"1q\"").starts_with("t.toml:5:10: workload[0].memory: "));
    assert!(err("memory = \"1 2m\"").starts_with("t.toml:5:10: workload[0].memory: "));
    assert!(err("memory = \"99999999999g\"").starts_with("t.toml:5:10: workload[0].memory: "));
    // Any spelling of a binary unit, as Docker reads them.
    let sized = |line: &str| {
        Config::parse("t.toml", &format!("{head}{line}\n"))
            .unwrap()
            .workloads[0]
            .to_config()
    };
    assert_eq!(
        sized("memory = \"512MiB\"").memory.map(|m| m.0),
        Some(512 << 20)
    );
    assert_eq!(
        sized("memory = \"1.5 GB\"").memory.map(|m| m.0),
        Some(1536 << 20)
    );
    let log = sized("log = { options = { max-size = \"10MiB\" } }").log;
    assert_eq!(log.effective_options()["max-size"], "10485760");
    // A rotation size is read as the drivers read it, decimal, and always sent in bytes.
    for same in ["10m", "10MB", "10 mb"] {
        let log = sized(&format!(
            "log = {{ options = {{ max-size = \"{same}\" }} }}"
        ))
        .log;
        assert_eq!(log.effective_options()["max-size"], "10000000", "{same}");
    }
    assert!(
        err("log = { options = { max-size = \"0\" } }")
            .starts_with("t.toml:5:7: workload[0].log: ")
    );
    assert!(
        err("log = { options = { max-size = \"ten\" } }")
            .starts_with("t.toml:5:7: workload[0].log: "),
        "{}",
        err("log = { options = { max-size = \"ten\" } }")
    );
    assert!(err("memory = \"1m\"").starts_with("t.toml:5:10: workload[0].memory: "));
    assert!(err("cpus = 0").starts_with("t.toml:5:8: workload[0].cpus: "));
    assert!(err("workdir = \"www\"").starts_with("t.toml:5:11: workload[0].workdir: "));
    assert!(err("pids_limit = 0").starts_with("t.toml:5:14: workload[0].pids_limit: "));
    assert!(err("cap_add = [\"net admin\"]").starts_with("t.toml:5:11: workload[0].cap_add: "));
    assert!(
        err("labels = { \"holdfast.x\" = \"1\" }").starts_with("t.toml:5:10: workload[0].labels: ")
    );
    assert!(err("log = { driver = \"\" }").starts_with("t.toml:5:7: workload[0].log: "));
    assert!(err("network = \"a b\"").starts_with("t.toml:5:11: workload[0].network: "));
    let checked = Config::parse(
        "t.toml",
        &format!("{head}health = {{ cmd = [\"wget\", \"-q\", \"http://127.0.0.1/\"], interval = \"5s\", retries = 2 }}\n"),
    )
    .unwrap();
    let health = checked.workloads[0].to_config().health.unwrap();
    assert_eq!(health.cmd, ["wget", "-q", "http://127.0.0.1/"]);
    assert_eq!(health.interval, std::time::Duration::from_secs(5));
    assert_eq!(health.retries, 2);
    assert_eq!(
        err("health = { cmd = [\"a\"], shell = \"b\" }"),
        "t.toml:5:10: workload[0].health: give one of cmd, shell, http, tcp or disable, not cmd and shell"
    );
    // The node's own probes.
    let probed = Config::parse(
        "t.toml",
        &format!("{head}health = {{ http = {{ port = 8080, path = \"/healthz\" }}, interval = \"2s\" }}\n"),
    )
    .unwrap();
    let health = probed.workloads[0].to_config().health.unwrap();
    assert_eq!(
        health.http,
        Some(holdfast_workload::HttpProbe {
            port: 8080,
            path: "/healthz".into()
        })
    );
    let tcp = Config::parse(
        "t.toml",
        &format!("{head}health = {{ tcp = {{ port = 5432 }} }}\n"),
    )
    .unwrap();
    assert_eq!(
        tcp.workloads[0].to_config().health.unwrap().tcp,
        Some(holdfast_workload::TcpProbe { port: 5432 })
    );
    for (bad, want) in [
        (
            "health = { http = { port = 80 }, tcp = { port = 80 } }",
            "t.toml:5:10: workload[0].health: give one of cmd, shell, http, tcp or disable, not http and tcp",
        ),
        (
            "health = { shell = \"true\", tcp = { port = 80 } }",
            "t.toml:5:10: workload[0].health: give one of cmd, shell, http, tcp or disable, not shell and tcp",
        ),
        (
            "health = { tcp = { port = 0 } }",
            "t.toml:5:10: workload[0].health: the probe's port must be 1 to 65535, not 0",
        ),
        (
            "health = { http = { port = 80, path = \"healthz\" } }",
            "t.toml:5:10: workload[0].health: the probe's path must be a URI path starting with /, not \"healthz\"",
        ),
    ] {
        assert_eq!(err(bad), want, "{bad}");
    }
    // A container on network "none" has no address the node could probe.
    assert_eq!(
        err("network = \"none\"\nhealth = { tcp = { port = 5432 } }"),
        "t.toml:6:10: workload[0].health: the node cannot probe a container on network \"none\" \
         (it has no address): give cmd or shell, or another network"
    );
    Config::parse(
        "t.toml",
        &format!("{head}network = \"none\"\nhealth = {{ shell = \"true\" }}\n"),
    )
    .unwrap();
    assert!(err("health = { tcp = { port = 70000 } }").starts_with("t.toml:5:"));
    assert!(err("health = { interval = \"5\" }").starts_with("t.toml:5:"));
    let two = |web: &str, db: &str| {
        Config::parse(
            "t.toml",
            &format!(
                "[node]\n[[workload]]\nname = \"web\"\nimage = \"a:1\"\n{web}\n\
                 [[workload]]\nname = \"db\"\nimage = \"b:1\"\n{db}\n"
            ),
        )
    };
    let ok = two("depends_on = [\"db\"]", "").unwrap();
    assert_eq!(ok.workloads[0].to_config().depends_on, ["db"]);
    assert_eq!(
        two("depends_on = [\"db\"]", "depends_on = [\"web\"]")
            .unwrap_err()
            .to_string(),
        "t.toml:9:14: workload[1].depends_on: dependency cycle: db → web → db"
    );
    assert_eq!(
        two("depends_on = [\"cache\"]", "").unwrap_err().to_string(),
        "t.toml:5:14: workload[0].depends_on: \"cache\" is not a configured workload"
    );
    std::fs::write(&env_file, "A=1\nnot a line\n").unwrap();
    assert_eq!(
        err(&format!("env_file = \"{}\"", env_file.display())),
        format!(
            "t.toml:5:12: workload[0].env_file: {}:2: not KEY=VALUE",
            env_file.display()
        )
    );
}

// i[verify node.gateway.config+4]
// i[verify node.gateway.token-key+2]
#[test]
fn the_gateway_section_is_validated_with_the_rest() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gateway.key");
    std::fs::write(&key, "0123456789abcdef-gateway-secret\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let head = format!(
        "[node]\nid = \"node-7\"\n[gateway]\nlisten = \"127.0.0.1:7443\"\ntoken_key_file = \"{}\"\n",
        key.display()
    );
    // Defaults: the node id is the replica id; holdfast-gateway's defaults otherwise.
    let config = Config::parse("ok.toml", &head).unwrap();
    let section = config.gateway.unwrap();
    let key_value =
        holdfast_gateway::TokenKey::new(holdfast::config::read_token_secret(&key).unwrap());
    // A key of exactly the minimum length is a key; one byte less is not.
    let min = holdfast::config::MIN_TOKEN_KEY_LEN;
    let edge = dir.path().join("edge.key");
    for (len, ok) in [(min, true), (min - 1, false)] {
        std::fs::write(&edge, "k".repeat(len)).unwrap();
        std::fs::set_permissions(&edge, std::fs::Permissions::from_mode(0o600)).unwrap();
        let read = holdfast::config::read_token_secret(&edge);
        assert_eq!(read.is_ok(), ok, "{len} bytes: {:?}", read.err());
    }
    let g = section
        .get_ref()
        .gateway_config("node-7", key_value.clone(), dir.path());
    assert_eq!(g.replica_id, "node-7");
    assert_eq!(g.advertise, None);
    assert_eq!(g.max_message_size, 65536);
    assert_eq!(g.send_queue, 64);
    assert_eq!(g.ping_interval, std::time::Duration::from_secs(20));
    assert_eq!(g.idle_timeout, std::time::Duration::from_secs(60));
    assert_eq!(g.drain.total, std::time::Duration::from_secs(5));
    assert_eq!(g.drain.close, holdfast_gateway::CloseChoice::FromReason);
    assert_eq!(g.drain.retry_after_secs, 2);
    assert_eq!((g.per_ip_limit, g.unauthenticated_limit), (256, 1024));
    // The limits the node had no keys for before are holdfast-gateway's defaults when absent.
    assert_eq!(
        (
            g.unauthenticated_per_ip_limit,
            g.max_rooms_per_connection,
            g.max_room_name
        ),
        (
            holdfast_gateway::DEFAULT_UNAUTHENTICATED_PER_IP,
            holdfast_gateway::DEFAULT_MAX_ROOMS,
            holdfast_gateway::DEFAULT_MAX_ROOM_NAME
        )
    );
    assert_eq!(
        (
            g.unauthenticated_per_ip_limit,
            g.max_rooms_per_connection,
            g.max_room_name
        ),
        (32, 64, 128)
    );
    assert!(g.tls.is_none());
    let cluster = section.get_ref().cluster_config(42);
    assert_eq!((cluster.etcd.len(), cluster.redis.as_deref()), (0, None));
    assert_eq!(cluster.seed, Some(42));
    // Every key written.
    let full = format!(
        "{head}replica_id = \"gw-a\"\nadvertise = \"10.0.0.5:7443\"\nmax_message_size = 4096\n\
         send_queue = 8\nping_interval = \"5s\"\nidle_timeout = \"15s\"\nper_ip_limit = 0\n\
         unauthenticated_limit = 10\nunauthenticated_per_ip_limit = 3\n\
         max_rooms_per_connection = 5\nmax_room_name = 40\n\
         [gateway.drain]\ntotal = \"2s\"\nclose = \"going-away\"\nretry_after = \"1500ms\"\n\
         [gateway.tls]\ncert = \"/c.pem\"\nkey = \"/k.pem\"\n\
         [gateway.cluster]\nredis = \"redis://127.0.0.1:6379\"\nredis_prefix = \"hf:gw\"\n\
         lease_ttl = \"4s\"\ntimeout = \"1s\"\n"
    );
    let config = Config::parse("full.toml", &full).unwrap();
    let g =
        config
            .gateway
            .unwrap()
            .get_ref()
            .gateway_config("node-7", key_value.clone(), dir.path());
    assert_eq!(g.replica_id, "gw-a");
    assert_eq!(g.advertise.as_deref(), Some("10.0.0.5:7443"));
    assert_eq!((g.max_message_size, g.max_frame_size), (4096, 4096));
    assert_eq!(g.send_queue, 8);
    assert_eq!(g.idle_timeout, std::time::Duration::from_secs(15));
    assert_eq!(g.drain.total, std::time::Duration::from_secs(2));
    assert_eq!(g.drain.close, holdfast_gateway::CloseChoice::GoingAway);
    assert_eq!(g.drain.retry_after_secs, 2);
    assert_eq!((g.per_ip_limit, g.unauthenticated_limit), (0, 10));
    assert_eq!(
        (
            g.unauthenticated_per_ip_limit,
            g.max_rooms_per_connection,
            g.max_room_name
        ),
        (3, 5, 40)
    );
    // 0 disables each of them, as it does the other limits.
    let off = format!(
        "{head}unauthenticated_per_ip_limit = 0\nmax_rooms_per_connection = 0\nmax_room_name = 0\n"
    );
    let g_off = Config::parse("off.toml", &off)
        .unwrap()
        .gateway
        .unwrap()
        .get_ref()
        .gateway_config("node-7", key_value, dir.path());
    assert_eq!(
        (
            g_off.unauthenticated_per_ip_limit,
            g_off.max_rooms_per_connection,
            g_off.max_room_name
        ),
        (0, 0, 0)
    );
    let tls = g.tls.clone().unwrap();
    assert_eq!(
        (tls.cert.to_str(), tls.key.to_str()),
        (Some("/c.pem"), Some("/k.pem"))
    );
    let cluster = Config::parse("full.toml", &full)
        .unwrap()
        .gateway
        .unwrap()
        .get_ref()
        .cluster_config(1);
    assert_eq!(cluster.redis.as_deref(), Some("redis://127.0.0.1:6379"));
    assert_eq!(cluster.redis_prefix, "hf:gw");
    assert_eq!(cluster.lease_ttl, std::time::Duration::from_secs(4));
    assert_eq!(cluster.timeout, std::time::Duration::from_secs(1));
    assert_eq!(cluster.etcd_prefix, "/holdfast/gateway");
    // TLS from the issuance store: the hostname's bundle is both the chain and the key.
    let issued = format!(
        "{head}[gateway.tls]\nfrom_issuance = \"app.example\"\n\
         [issuance]\n[issuance.local]\nendpoint = {{ tcp = \"127.0.0.1:8099\" }}\n\
         [[issuance.hostname]]\nname = \"app.example\"\nsource = \"local\"\n"
    );
    let config = Config::parse("issued.toml", &issued).unwrap();
    let issued = config.gateway.unwrap().get_ref().gateway_config(
        "n",
        holdfast_gateway::TokenKey::new(b"x".to_vec()),
        std::path::Path::new("/var/lib/holdfast"),
    );
    let tls = issued.tls.unwrap();
    let bundle = std::path::Path::new("/var/lib/holdfast/issuance/certs/app.example.pem");
    assert_eq!((tls.cert.as_path(), tls.key.as_path()), (bundle, bundle));
    // The bundle's file name is the [issuance] spelling: another case would name no file.
    let other_case = format!(
        "{head}[gateway.tls]\nfrom_issuance = \"App.Example\"\n\
         [issuance]\n[issuance.local]\nendpoint = {{ tcp = \"127.0.0.1:8099\" }}\n\
         [[issuance.hostname]]\nname = \"app.example\"\nsource = \"local\"\n"
    );
    let e = Config::parse("case.toml", &other_case)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "case.toml:6:1: gateway.tls.from_issuance: \"App.Example\": write the hostname as the \
         [issuance] section does (\"app.example\"), which names its certificate file"
    );
    // The key never shows in the config's or the gateway config's Debug.
    assert!(!format!("{g:?}").contains("gateway-secret"));
    // No section: no gateway.
    assert!(
        Config::parse("none.toml", "[node]\n")
            .unwrap()
            .gateway
            .is_none()
    );

    let err = |text: &str| Config::parse("bad.toml", text).unwrap_err().to_string();
    assert_eq!(
        err(&format!("{head}send_queue = 0\n")),
        "bad.toml:6:14: gateway.send_queue: must be between 1 and 65536"
    );
    assert_eq!(
        err(&format!("{head}max_message_size = 0\n")),
        "bad.toml:6:20: gateway.max_message_size: must be between 1 and 67108864 bytes"
    );
    assert_eq!(
        err(&format!("{head}idle_timeout = \"10s\"\n")),
        "bad.toml:6:16: gateway.idle_timeout: must be longer than gateway.ping_interval (20s): \
         a client answering every ping would still be closed as idle"
    );
    assert_eq!(
        err(&format!("{head}[gateway.drain]\ntotal = \"0s\"\n")),
        "bad.toml:7:9: gateway.drain.total: must be longer than zero"
    );
    // At most ten minutes: exactly 10m is a drain, a second more is not.
    Config::parse(
        "ok.toml",
        &format!("{head}[gateway.drain]\ntotal = \"10m\"\n"),
    )
    .unwrap();
    assert_eq!(
        err(&format!("{head}[gateway.drain]\ntotal = \"601s\"\n")),
        "bad.toml:7:9: gateway.drain.total: must be at most 10m"
    );
    // The limits are counts: a negative or fractional one is refused where it is written.
    for key in [
        "per_ip_limit",
        "unauthenticated_limit",
        "unauthenticated_per_ip_limit",
        "max_rooms_per_connection",
        "max_room_name",
        "history_size",
        "history_ttl",
        "history_max_bytes",
        "publish_token_file",
    ] {
        for bad in ["-1", "1.5"] {
            let e = err(&format!("{head}{key} = {bad}\n"));
            let at = format!("bad.toml:6:{}: gateway.{key}: ", key.len() + 4);
            assert!(e.starts_with(&at), "{key} = {bad}: {e}");
        }
    }
    assert_eq!(
        err(&format!("{head}replica_id = \" \"\n")),
        "bad.toml:6:14: gateway.replica_id: must not be empty (remove it to use the node id)"
    );
    assert_eq!(
        err(&format!(
            "{head}[gateway.tls]\nfrom_issuance = \"app.example\"\n"
        )),
        "bad.toml:6:1: gateway.tls.from_issuance: \"app.example\" is not a hostname of the \
         [issuance] section: add it as an [[issuance.hostname]], or give cert and key"
    );
    assert_eq!(
        err(&format!("{head}[gateway.tls]\ncert = \"/c.pem\"\n")),
        "bad.toml:6:1: gateway.tls: needs both cert and key (PEM files), or from_issuance"
    );
    assert_eq!(
        err(&format!(
            "{head}[gateway.cluster]\nredis = \"127.0.0.1:6379\"\n"
        )),
        "bad.toml:7:9: gateway.cluster.redis: invalid URL \"127.0.0.1:6379\": write redis://HOST:PORT"
    );
    assert_eq!(
        err(&format!(
            "{head}[gateway.cluster]\netcd = [\"127.0.0.1:2379\"]\n"
        )),
        "bad.toml:7:8: gateway.cluster.etcd: invalid endpoint \"127.0.0.1:2379\": write http://HOST:PORT"
    );
    let etcd = Config::parse(
        "e.toml",
        &format!("{head}[gateway.cluster]\netcd = [\"http://127.0.0.1:2379\"]\n"),
    );
    if holdfast_gateway::ETCD_SUPPORTED {
        assert!(etcd.is_ok(), "{etcd:?}");
    } else {
        let e = etcd.unwrap_err().to_string();
        assert!(e.contains("built without etcd support"), "{e}");
    }
    // A key file others can read is refused, naming the chmod; a short key is refused too.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let loose = err(&head);
    assert!(
        loose.starts_with("bad.toml:5:18: gateway.token_key_file: ") && loose.contains("chmod 600"),
        "{loose}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&key, "short\n").unwrap();
    let short = err(&head);
    assert!(
        short.starts_with("bad.toml:5:18: gateway.token_key_file: ")
            && short.contains("at least 16"),
        "{short}"
    );
}

/// A value that must never be shown back: no message of the parser contains it by chance.
const SECRET: &str = "S3CR3T-never-shown-0123456789abcdef";

// i[verify node.config.no-values]
#[test]
fn a_mistyped_value_is_named_by_its_key_and_expected_type_never_echoed() {
    for (key, text) in [
        (
            "forward.tokens",
            format!(
                "[node]\n[forward]\nlisten = \"127.0.0.1:0\"\ntokens = \"{SECRET}\"\nallow = [\"127.0.0.1:53\"]\n"
            ),
        ),
        (
            "pull.enabled",
            format!("[node]\n[pull]\nenabled = \"{SECRET}\"\n"),
        ),
        (
            "supervise.crash_loop_threshold",
            format!("[node]\n[supervise]\ncrash_loop_threshold = \"{SECRET}\"\n"),
        ),
        (
            "node.stop_budget",
            format!("[node]\nstop_budget = [\"{SECRET}\"]\n"),
        ),
    ] {
        let shown = Config::parse("bad.toml", &text).expect_err(key).to_string();
        assert!(!shown.contains(SECRET), "{shown}");
        assert!(shown.contains(&format!(": {key}: invalid ")), "{shown}");
        assert!(shown.contains(", expected "), "{shown}");
    }
}

proptest::proptest! {
    // i[verify node.config.no-values]
    #[test]
    fn no_mistyped_string_is_shown_back(value in "[A-Za-z0-9 ,`'\"_-]{0,40}") {
        let value = format!("{SECRET}{value}");
        let quoted = toml::Value::String(value.clone()).to_string();
        for text in [
            format!("[node]\n[forward]\nlisten = \"127.0.0.1:0\"\ntokens = {quoted}\nallow = []\n"),
            format!("[node]\n[pull]\nenabled = {quoted}\n"),
            format!("[node]\n[admin]\nlisten = [{quoted}]\n"),
        ] {
            let shown = Config::parse("bad.toml", &text).unwrap_err().to_string();
            proptest::prop_assert!(!shown.contains(SECRET), "{}", shown);
        }
    }
}

// i[verify node.gateway.publish.distinct]
#[test]
fn a_publish_token_equal_to_the_admin_token_is_refused_at_its_key_without_showing_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let secret = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    };
    let key = secret("gateway.key", "0123456789abcdef-gateway-secret\n");
    let admin = secret("admin.token", "the-admin-token-0123456789\n");
    // The same token, written differently around it: tokens are compared trimmed.
    let same = secret("same.token", "  the-admin-token-0123456789 \n\n");
    let other = secret("publish.token", "a-publish-token-0123456789\n");
    let config = |publish: &std::path::Path| {
        format!(
            "[node]\n[admin]\ntoken_file = \"{}\"\n[gateway]\nlisten = \"127.0.0.1:7443\"\ntoken_key_file = \"{}\"\npublish_token_file = \"{}\"\n",
            admin.display(),
            key.display(),
            publish.display()
        )
    };
    let err = Config::parse("t.toml", &config(&same))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "t.toml:7:22: gateway.publish_token_file: holds the same token as admin.token_file"
        ),
        "{err}"
    );
    assert!(
        !err.contains("the-admin-token"),
        "the secret is never shown: {err}"
    );
    let loaded = Config::parse("t.toml", &config(&other)).unwrap();
    // The publish key is built from the files as they are when the gateway is set up: a
    // publish token file given the admin token after the load leaves publishing refused.
    let section = loaded.gateway.unwrap();
    let build = || {
        section.get_ref().gateway_config_beside(
            "n",
            holdfast_gateway::TokenKey::new(b"x".to_vec()),
            dir.path(),
            Some(admin.as_path()),
        )
    };
    assert!(build().publish_key.is_some());
    std::fs::write(
        &other,
        "the-admin-token-0123456789
",
    )
    .unwrap();
    assert!(build().publish_key.is_none(), "equal to the admin token");
    // Without an admin token there is nothing to be equal to.
    let no_admin = config(&same).replace(
        &format!("[admin]\ntoken_file = \"{}\"\n", admin.display()),
        "",
    );
    Config::parse("t.toml", &no_admin).unwrap();
}

// i[verify node.gateway.config+4]
// i[verify node.gateway.publish]
#[test]
fn the_gateway_history_and_publish_keys_are_validated_at_their_key() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("gateway.key");
    std::fs::write(&key, "0123456789abcdef-gateway-secret\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let open = dir.path().join("open.token");
    std::fs::write(&open, "publish-token-0123456789\n").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let head = format!(
        "[node]\n[gateway]\nlisten = \"127.0.0.1:7443\"\ntoken_key_file = \"{}\"\n",
        key.display()
    );
    let ok = Config::parse(
        "ok.toml",
        &format!("{head}history_size = 0\nhistory_ttl = \"1h\"\nhistory_max_bytes = 1024\n"),
    )
    .unwrap();
    let g = ok.gateway.unwrap().get_ref().gateway_config(
        "n",
        holdfast_gateway::TokenKey::new(b"x".to_vec()),
        dir.path(),
    );
    assert_eq!(
        (g.history.size, g.history.ttl, g.history.max_bytes),
        (0, std::time::Duration::from_secs(3600), 1024)
    );
    assert!(g.publish_key.is_none());
    for (line, key_name, says) in [
        (
            "history_size = 100001",
            "gateway.history_size",
            "at most 100000",
        ),
        (
            "history_ttl = \"25h\"",
            "gateway.history_ttl",
            "at most 24h",
        ),
        (
            "history_ttl = \"0s\"",
            "gateway.history_ttl",
            "longer than zero",
        ),
        (
            "history_max_bytes = 0",
            "gateway.history_max_bytes",
            "at least 1",
        ),
        (
            &format!("publish_token_file = \"{}\"", open.display()),
            "gateway.publish_token_file",
            "0644",
        ),
    ] {
        let err = Config::parse("bad.toml", &format!("{head}{line}\n")).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("bad.toml:5:"), "{line}: {text}");
        assert!(
            text.contains(key_name) && text.contains(says),
            "{line}: {text}"
        );
    }
}

// i[verify node.pull.auth]
// r[verify actuate.image.credentials.configured]
#[test]
fn a_password_file_of_another_user_is_refused_only_where_the_node_loads_its_config() {
    use std::os::unix::fs::PermissionsExt as _;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP: only root can make a file owned by another uid");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("registry.password");
    std::fs::write(&password, "s3cret\n").unwrap();
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).unwrap();
    // The unit runs the node as its own user (here uid 4242); root runs the clients.
    std::os::unix::fs::chown(&password, Some(4242), None).unwrap();
    let text = format!(
        "[node]\n[pull.auth.\"registry.example\"]\nusername = \"bot\"\npassword_file = \"{}\"\n",
        password.display()
    );
    // check-config and every client's `-c` load: mode and file type only.
    Config::parse("t.toml", &text).unwrap();
    // The node's own load: someone else's file is refused, located at the value.
    let err = Config::parse_for_node("t.toml", &text)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("t.toml:4:17: pull.auth.\"registry.example\".password_file: ")
            && err.contains("uid 4242"),
        "{err}"
    );
    // Too open is refused everywhere.
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o640)).unwrap();
    let err = Config::parse("t.toml", &text).unwrap_err().to_string();
    assert!(err.contains("0640"), "{err}");
}

// i[verify node.pull.auth]
// r[verify actuate.image.credentials.configured]
#[test]
fn a_pull_auth_table_needs_a_private_password_file_of_the_nodes_user_located_when_not() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("registry.password");
    std::fs::write(&password, "s3cret\n").unwrap();
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).unwrap();
    let text = |registry: &str, file: &std::path::Path| {
        format!(
            "[node]\n[pull.auth.\"{registry}\"]\nusername = \"bot\"\npassword_file = \"{}\"\n",
            file.display()
        )
    };
    let config = Config::parse("t.toml", &text("registry.example", &password)).unwrap();
    let auth = config.registry_auth();
    let shown = format!("{auth:?}");
    assert!(
        shown.contains("registry.example") && shown.contains("registry.password"),
        "{shown}"
    );
    assert!(!shown.contains("s3cret"), "{shown}");
    // A file open to others is refused at load, naming the file and its mode, at the value.
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = Config::parse("t.toml", &text("registry.example", &password))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("t.toml:4:17: pull.auth.\"registry.example\".password_file: ")
            && err.contains("registry.password")
            && err.contains("0644"),
        "{err}"
    );
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A missing file.
    let err = Config::parse(
        "t.toml",
        &text("registry.example", &dir.path().join("nope")),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("t.toml:4:17: pull.auth.\"registry.example\".password_file: "),
        "{err}"
    );
    // Docker Hub named twice, by two of its names: refused at the second.
    let twice = format!(
        "[node]\n[pull.auth.\"docker.io\"]\nusername = \"a\"\npassword_file = \"{0}\"\n\
         [pull.auth.\"index.docker.io\"]\nusername = \"b\"\npassword_file = \"{0}\"\n",
        password.display()
    );
    let err = Config::parse("t.toml", &twice).unwrap_err().to_string();
    assert!(
        err.starts_with("t.toml:6:12: pull.auth.\"index.docker.io\".username: ")
            && err.contains("[pull.auth.\"docker.io\"]"),
        "{err}"
    );
    // In file order, not the names' order: refused at the second in the file.
    let reversed = format!(
        "[node]\n[pull.auth.\"index.docker.io\"]\nusername = \"a\"\npassword_file = \"{0}\"\n\
         [pull.auth.\"docker.io\"]\nusername = \"b\"\npassword_file = \"{0}\"\n",
        password.display()
    );
    let err = Config::parse("t.toml", &reversed).unwrap_err().to_string();
    assert!(
        err.starts_with("t.toml:6:12: pull.auth.\"docker.io\".username: ")
            && err.contains("[pull.auth.\"index.docker.io\"]"),
        "{err}"
    );
    // No password_file, an unknown key, an empty user: located.
    let err = Config::parse(
        "t.toml",
        "[node]\n[pull.auth.\"r.example\"]\nusername = \"a\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("password_file"), "{err}");
    let err = Config::parse(
        "t.toml",
        &format!("{}passwd = \"x\"\n", text("r.example", &password)),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("t.toml:5:1: pull.auth.") && err.contains("passwd"),
        "{err}"
    );
    let err = Config::parse(
        "t.toml",
        &text("r.example", &password).replace("\"bot\"", "\"\""),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("t.toml:3:12: pull.auth.\"r.example\".username: "),
        "{err}"
    );
}
