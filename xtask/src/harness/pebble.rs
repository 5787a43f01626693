//! Pebble (the ACME test server) with a TLS certificate made at start-up, and pebble-challtestsrv
//! as its DNS server (every name resolves to 127.0.0.1).

use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::layout::{ServiceDir, loopback};
use super::probe;
use super::process::Supervisor;

/// Loopback ports pebble and its challenge server need.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// The ACME API (TLS).
    pub acme: u16,
    /// Pebble's management API (TLS): roots and intermediates of the certificates it issues.
    pub management: u16,
    /// The port pebble's validator connects to for HTTP-01 (left free for the node under test).
    pub http01: u16,
    /// The port pebble's validator connects to for TLS-ALPN-01.
    pub tls_alpn01: u16,
    /// challtestsrv's DNS server.
    pub dns: u16,
    /// challtestsrv's management API.
    pub challtestsrv: u16,
}

// i[impl harness.services.acme]
/// Starts pebble-challtestsrv, then pebble; returns their exported variables.
pub fn start(
    supervisor: &mut Supervisor,
    challtestsrv_dir: &ServiceDir,
    dir: &ServiceDir,
    ports: Ports,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let mut command = Command::new("pebble-challtestsrv");
    command
        .args(["-dns01", &format!("127.0.0.1:{}", ports.dns)])
        .args(["-management", &format!("127.0.0.1:{}", ports.challtestsrv)])
        // Only DNS is needed: HTTP-01 is answered by the code under test on `http01`.
        .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
        // No AAAA answers, so pebble validates over 127.0.0.1 where the tests listen.
        .args(["-defaultIPv6", ""]);
    let service = supervisor.spawn(
        challtestsrv_dir.name,
        command,
        &challtestsrv_dir.log(),
        Duration::from_secs(10),
    )?;
    probe::wait_ready(
        service,
        "its management port",
        Duration::from_secs(30),
        || probe::accepts(loopback(ports.challtestsrv)),
    )?;

    let ca = make_certificates(dir)?;
    let config = serde_json::json!({
        "pebble": {
            "listenAddress": format!("127.0.0.1:{}", ports.acme),
            "managementListenAddress": format!("127.0.0.1:{}", ports.management),
            "certificate": dir.file("cert.pem"),
            "privateKey": dir.file("key.pem"),
            "httpPort": ports.http01,
            "tlsPort": ports.tls_alpn01,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }
    });
    let config_path = dir.file("pebble-config.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(&config)?)?;
    let mut command = Command::new("pebble");
    command
        .arg("-config")
        .arg(&config_path)
        .args(["-dnsserver", &format!("127.0.0.1:{}", ports.dns)])
        .env("PEBBLE_VA_NOSLEEP", "1")
        // High enough that bad-nonce recovery is exercised on most runs.
        .env("PEBBLE_WFE_NONCEREJECT", "15")
        .current_dir(dir.data());
    let service = supervisor.spawn(dir.name, command, &dir.log(), Duration::from_secs(10))?;
    // A TLS client is more than xtask needs: connect + alive here; the smoke test fetches the
    // directory over TLS, trusting the CA made above.
    probe::wait_ready(service, "on its ACME port", Duration::from_secs(30), || {
        probe::accepts(loopback(ports.acme))
    })?;
    Ok(vec![
        (
            "HOLDFAST_TEST_ACME_DIRECTORY",
            format!("https://127.0.0.1:{}/dir", ports.acme),
        ),
        ("HOLDFAST_TEST_ACME_CA", ca.display().to_string()),
        (
            "HOLDFAST_TEST_ACME_MANAGEMENT",
            format!("https://127.0.0.1:{}", ports.management),
        ),
        ("HOLDFAST_TEST_ACME_HTTP01_PORT", ports.http01.to_string()),
        (
            "HOLDFAST_TEST_CHALLTESTSRV",
            format!("http://127.0.0.1:{}", ports.challtestsrv),
        ),
    ])
}

/// A CA and a server certificate for 127.0.0.1 and localhost signed by it (Debian's pebble ships
/// without test certificates). Returns the CA's PEM path.
fn make_certificates(dir: &ServiceDir) -> anyhow::Result<std::path::PathBuf> {
    let ext = dir.file("server-ext.cnf");
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )?;
    let openssl = |args: &[&str]| -> anyhow::Result<()> {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(&dir.root)
            .output()
            .context("running openssl")?;
        if !output.status.success() {
            bail!(
                "openssl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "7"],
            &["-subj", "/CN=holdfast test CA"],
        ]
        .concat(),
    )?;
    openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "key.pem",
                "-out",
                "server.csr",
                "-subj",
                "/CN=localhost",
            ],
        ]
        .concat(),
    )?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "cert.pem",
        "-days",
        "7",
        "-extfile",
        "server-ext.cnf",
    ])?;
    Ok(dir.file("ca.pem"))
}
