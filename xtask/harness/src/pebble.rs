//! Pebble (the ACME test server) with a TLS certificate made at start-up, and pebble-challtestsrv
//! as its DNS server (every name resolves to 127.0.0.1).

use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail};
use holdfast_test_support::services::{
    ACME_CA_VAR, ACME_DIRECTORY_VAR, ACME_DNS01_DIRECTORY_VAR, ACME_HTTP01_PORT_VAR,
    ACME_MANAGEMENT_VAR, ACME_TLS_ALPN01_PORT_VAR, CHALLTESTSRV_VAR,
};

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

/// The variables [`start`] exports.
pub const EXPORTS: [&str; 6] = [
    ACME_DIRECTORY_VAR,
    ACME_CA_VAR,
    ACME_MANAGEMENT_VAR,
    ACME_HTTP01_PORT_VAR,
    ACME_TLS_ALPN01_PORT_VAR,
    CHALLTESTSRV_VAR,
];
/// The variables [`start_dns01`] exports.
pub const DNS01_EXPORTS: [&str; 1] = [ACME_DNS01_DIRECTORY_VAR];

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
    Ok(crate::layout::exports(
        EXPORTS,
        [
            format!("https://127.0.0.1:{}/dir", ports.acme),
            ca.display().to_string(),
            format!("https://127.0.0.1:{}", ports.management),
            ports.http01.to_string(),
            ports.tls_alpn01.to_string(),
            format!("http://127.0.0.1:{}", ports.challtestsrv),
        ],
    ))
}

// i[impl harness.services.acme-dns01]
/// Starts a second pebble for DNS-01 whose DNS server is `dns` (knot), serving with the TLS
/// certificate [`start`] made in `first` (so one CA verifies both); returns its directory
/// variable. `ports` are its ACME and management ports, then the HTTP-01 and TLS-ALPN-01 ports
/// its validator would use (nothing listens there: only DNS-01 is asked of it).
pub fn start_dns01(
    supervisor: &mut Supervisor,
    first: &ServiceDir,
    dir: &ServiceDir,
    ports: [u16; 4],
    dns: std::net::SocketAddr,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let [acme, management, http01, tls_alpn01] = ports;
    let config = serde_json::json!({
        "pebble": {
            "listenAddress": format!("127.0.0.1:{acme}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": first.file("cert.pem"),
            "privateKey": first.file("key.pem"),
            "httpPort": http01,
            "tlsPort": tls_alpn01,
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
        .args(["-dnsserver", &dns.to_string()])
        .env("PEBBLE_VA_NOSLEEP", "1")
        .env("PEBBLE_WFE_NONCEREJECT", "15")
        .current_dir(dir.data());
    let service = supervisor.spawn(dir.name, command, &dir.log(), Duration::from_secs(10))?;
    probe::wait_ready(service, "on its ACME port", Duration::from_secs(30), || {
        probe::accepts(loopback(acme))
    })?;
    Ok(crate::layout::exports(
        DNS01_EXPORTS,
        [format!("https://127.0.0.1:{acme}/dir")],
    ))
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

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::path::Path;
    use std::process::Stdio;

    use super::*;
    use crate::layout::free_ports;
    use crate::process::processes_under;
    use crate::testing::{Run, installed};

    /// `GET /dir` from pebble over TLS with `openssl s_client` (which the harness needs anyway),
    /// requiring a chain that verifies against `ca` (the system's roots when `None`) and a
    /// certificate for 127.0.0.1: whether it did, and what pebble answered.
    fn directory_over_tls(port: u16, ca: Option<&Path>) -> (bool, String) {
        let mut command = Command::new("openssl");
        command
            .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
            .args([
                "-verify_return_error",
                "-verify_ip",
                "127.0.0.1",
                "-ign_eof",
            ]);
        if let Some(ca) = ca {
            command.arg("-CAfile").arg(ca);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // HTTP/1.0: pebble closes after answering, which ends s_client.
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"GET /dir HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    // i[verify harness.services.acme]
    #[test]
    fn pebble_starts_privately_with_its_own_ca_and_exports_where_it_is() {
        if !installed(&["pebble", "pebble-challtestsrv", "openssl"]) {
            return;
        }
        let mut run = Run::new();
        let (challtestsrv_dir, dir) = (run.dir("challtestsrv"), run.dir("pebble"));
        let p = free_ports(6).unwrap();
        let ports = Ports {
            acme: p[0],
            management: p[1],
            http01: p[2],
            tls_alpn01: p[3],
            dns: p[4],
            challtestsrv: p[5],
        };
        let env = start(&mut run.supervisor, &challtestsrv_dir, &dir, ports).unwrap();
        let ca = dir.file("ca.pem");
        assert_eq!(
            env,
            [
                (
                    ACME_DIRECTORY_VAR,
                    format!("https://127.0.0.1:{}/dir", ports.acme)
                ),
                (ACME_CA_VAR, ca.display().to_string()),
                (
                    ACME_MANAGEMENT_VAR,
                    format!("https://127.0.0.1:{}", ports.management)
                ),
                (ACME_HTTP01_PORT_VAR, ports.http01.to_string()),
                (ACME_TLS_ALPN01_PORT_VAR, ports.tls_alpn01.to_string()),
                (
                    CHALLTESTSRV_VAR,
                    format!("http://127.0.0.1:{}", ports.challtestsrv)
                ),
            ]
        );
        // The directory answers over TLS with a certificate for 127.0.0.1 from the CA made at
        // start-up, and from no other.
        let (verified, answer) = directory_over_tls(ports.acme, Some(&ca));
        assert!(verified, "{answer}");
        assert!(answer.contains("HTTP/1.0 200 OK"), "{answer}");
        assert!(answer.contains("newNonce"), "{answer}");
        let (verified, answer) = directory_over_tls(ports.acme, None);
        assert!(!verified, "trusted without the run's CA: {answer}");
        // challtestsrv answers on its management port; the HTTP-01 port is left free.
        let (status, _) = probe::http_get(loopback(ports.challtestsrv), "/").unwrap();
        assert!(status >= 200, "{status}");
        assert!(std::net::TcpListener::bind(loopback(ports.http01)).is_ok());
        // This run's pebble (configured from its directory), with no validation sleeps and with
        // nonce rejection.
        let pids = processes_under(run.root(), &["pebble"]);
        assert_eq!(pids.len(), 1, "{pids:?}");
        let environ = std::fs::read(format!("/proc/{}/environ", pids[0])).unwrap();
        let environ = String::from_utf8_lossy(&environ);
        let vars: Vec<&str> = environ.split('\0').collect();
        assert!(vars.contains(&"PEBBLE_VA_NOSLEEP=1"), "{vars:?}");
        let reject = vars
            .iter()
            .find_map(|v| v.strip_prefix("PEBBLE_WFE_NONCEREJECT="))
            .and_then(|v| v.parse::<u32>().ok());
        assert!(reject.is_some_and(|percent| percent > 0), "{vars:?}");
        run.supervisor.stop_all();
        assert!(!probe::accepts(loopback(ports.acme)), "pebble still up");
        assert!(
            !probe::accepts(loopback(ports.challtestsrv)),
            "challtestsrv still up"
        );
    }

    // i[verify harness.services.acme-dns01]
    #[test]
    fn a_second_pebble_resolves_through_knot_with_the_first_ones_certificate() {
        if !installed(&[
            "pebble",
            "pebble-challtestsrv",
            "openssl",
            "knotd",
            "keymgr",
        ]) {
            return;
        }
        let mut run = Run::new();
        let (challtestsrv_dir, dir) = (run.dir("challtestsrv"), run.dir("pebble"));
        let (knot_dir, dns01_dir) = (run.dir("knot"), run.dir("pebble-dns01"));
        let p = free_ports(11).unwrap();
        let ports = Ports {
            acme: p[0],
            management: p[1],
            http01: p[2],
            tls_alpn01: p[3],
            dns: p[4],
            challtestsrv: p[5],
        };
        start(&mut run.supervisor, &challtestsrv_dir, &dir, ports).unwrap();
        crate::knot::start(&mut run.supervisor, &knot_dir, p[6]).unwrap();
        let env = start_dns01(
            &mut run.supervisor,
            &dir,
            &dns01_dir,
            [p[7], p[8], p[9], p[10]],
            loopback(p[6]),
        )
        .unwrap();
        assert_eq!(
            env,
            [(
                ACME_DNS01_DIRECTORY_VAR,
                format!("https://127.0.0.1:{}/dir", p[7])
            )]
        );
        let (verified, answer) = directory_over_tls(p[7], Some(&dir.file("ca.pem")));
        assert!(verified, "{answer}");
        assert!(answer.contains("newNonce"), "{answer}");
        // Its DNS server is knot's port, and it runs without validation sleeps.
        let pids = processes_under(run.root(), &["pebble"]);
        assert_eq!(pids.len(), 2, "{pids:?}");
        let dns = format!("127.0.0.1:{}", p[6]);
        let second = pids.iter().find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline)
                .split('\0')
                .any(|a| a == dns)
        });
        let second = second.expect("a pebble given knot as -dnsserver");
        let environ = std::fs::read(format!("/proc/{second}/environ")).unwrap();
        assert!(
            String::from_utf8_lossy(&environ)
                .split('\0')
                .any(|v| v == "PEBBLE_VA_NOSLEEP=1")
        );
        run.supervisor.stop_all();
        assert!(
            !probe::accepts(loopback(p[7])),
            "the second pebble still up"
        );
    }
}
