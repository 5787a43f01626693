//! Knot DNS (knotd) as an authoritative server for `example.test` on a loopback port, accepting
//! RFC 2136 updates signed with a TSIG key made at start-up: the DNS-01 counterpart of pebble.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail};
use holdfast_test_support::services::{
    KNOT_TSIG_FILE_VAR, KNOT_TSIG_NAME_VAR, KNOT_VAR, KNOT_ZONE_VAR,
};

use super::layout::{ServiceDir, loopback};
use super::probe;
use super::process::Supervisor;

/// The zone.
pub const ZONE: &str = "example.test";
/// The TSIG key's name.
pub const KEY_NAME: &str = "holdfast-test";

/// The TSIG secret `keymgr -t NAME hmac-sha256` printed (its `secret:` line).
fn parse_secret(keymgr: &str) -> Option<&str> {
    keymgr
        .lines()
        .find_map(|line| line.trim().strip_prefix("secret:"))
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// knotd's configuration: one zone from a file in `dir`, updates allowed with the key only, no
/// zone file written back, everything under `dir`.
fn config(dir: &str, port: u16, secret: &str) -> String {
    format!(
        "server:\n    rundir: \"{dir}\"\n    listen: 127.0.0.1@{port}\n\
         database:\n    storage: \"{dir}\"\n\
         log:\n  - target: stderr\n    any: info\n\
         key:\n  - id: {KEY_NAME}\n    algorithm: hmac-sha256\n    secret: {secret}\n\
         acl:\n  - id: update\n    key: {KEY_NAME}\n    action: update\n\
         template:\n  - id: default\n    storage: \"{dir}\"\n    file: \"%s.zone\"\n\
         \x20   zonefile-sync: -1\n    journal-content: none\n\
         zone:\n  - domain: {ZONE}\n    acl: update\n"
    )
}

/// The zone: its SOA and NS, and `ns` at 127.0.0.1. Short TTLs: records come and go in tests.
fn zone() -> String {
    format!(
        "$ORIGIN {ZONE}.\n$TTL 60\n\
         @ SOA ns.{ZONE}. hostmaster.{ZONE}. 1 3600 600 86400 60\n\
         @ NS ns.{ZONE}.\nns A 127.0.0.1\n"
    )
}

// i[impl harness.services.knot]
/// Writes `text` to `path` with mode 0600 (a file left by an earlier run gets it too).
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(text.as_bytes())
}

/// The variables [`start`] exports.
pub const EXPORTS: [&str; 4] = [
    KNOT_VAR,
    KNOT_ZONE_VAR,
    KNOT_TSIG_NAME_VAR,
    KNOT_TSIG_FILE_VAR,
];

/// Starts knotd and waits for it to accept on its port; returns its exported variables.
pub fn start(
    supervisor: &mut Supervisor,
    dir: &ServiceDir,
    port: u16,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let keymgr = Command::new("keymgr")
        .args(["-t", KEY_NAME, "hmac-sha256"])
        .output()
        .context("running keymgr for knot's TSIG key")?;
    if !keymgr.status.success() {
        bail!("keymgr -t: {}", String::from_utf8_lossy(&keymgr.stderr));
    }
    let text = String::from_utf8_lossy(&keymgr.stdout);
    let secret = parse_secret(&text).context("keymgr printed no secret")?;
    let data = dir.data();
    let data_text = data.display().to_string();
    std::fs::write(data.join(format!("{ZONE}.zone")), zone())?;
    let config_path = dir.file("knot.conf");
    // Both hold the secret: owner-only, as the issuance module requires of its secret file.
    write_private(&config_path, &config(&data_text, port, secret))?;
    let secret_path = dir.file("tsig.key");
    write_private(&secret_path, &format!("{secret}\n"))?;
    let mut command = Command::new("knotd");
    command.arg("-c").arg(&config_path);
    let service = supervisor.spawn(dir.name, command, &dir.log(), Duration::from_secs(10))?;
    // knotd answers TCP on the port it answers UDP on, once the zone is loaded.
    probe::wait_ready(service, "its DNS port", Duration::from_secs(30), || {
        probe::accepts(loopback(port))
    })?;
    Ok(crate::layout::exports(
        EXPORTS,
        [
            loopback(port).to_string(),
            ZONE.to_owned(),
            KEY_NAME.to_owned(),
            secret_path.display().to_string(),
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::free_ports;
    use crate::testing::{Run, installed};

    #[test]
    fn the_secret_files_are_written_owner_only_even_over_a_wider_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("knot-private-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tsig.key");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, "new\n").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_secret_is_read_from_keymgr_output() {
        let text = "# hmac-sha256:k:c2VjcmV0\nkey:\n  - id: k\n    algorithm: hmac-sha256\n    \
                    secret: c2VjcmV0\n";
        assert_eq!(parse_secret(text), Some("c2VjcmV0"));
        assert_eq!(parse_secret("key:\n  - id: k\n"), None);
    }

    // i[verify harness.services.knot]
    #[test]
    fn knot_serves_the_zone_on_loopback_and_exports_its_key() {
        if !installed(&["knotd", "keymgr", "kdig"]) {
            return;
        }
        let mut run = Run::new();
        let dir = run.dir("knot");
        let port = free_ports(1).unwrap()[0];
        let env = start(&mut run.supervisor, &dir, port).unwrap();
        let vars: Vec<&str> = env.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            vars,
            [
                KNOT_VAR,
                KNOT_ZONE_VAR,
                KNOT_TSIG_NAME_VAR,
                KNOT_TSIG_FILE_VAR
            ]
        );
        assert_eq!(env[0].1, format!("127.0.0.1:{port}"));
        let secret = std::fs::read_to_string(&env[3].1).unwrap();
        assert!(!secret.trim().is_empty());
        // It answers for the zone, authoritatively.
        let soa = Command::new("kdig")
            .args(["@127.0.0.1", "-p", &port.to_string(), "+norec", "SOA", ZONE])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&soa.stdout);
        assert!(text.contains("status: NOERROR"), "{text}");
        assert!(text.contains(" aa"), "not authoritative: {text}");
        run.supervisor.stop_all();
        assert!(!probe::accepts(loopback(port)), "still answering");
    }
}
