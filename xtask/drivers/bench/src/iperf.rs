//! `cargo xtask bench forward --iperf`: the forward carrying a real client's load. iperf 2 sends
//! UDP at fixed rates straight to one iperf server and through a forward (holdfast-forward's
//! `forward` example: a node and a client on loopback) to another, in the same run; each session's
//! delivered rate and loss come from its server's CSV report (`-y C`).
//!
//! The decisions (reading a report, the loss target) are pure functions; [`run`] is the processes
//! around them, each killed when dropped so a failed run leaves nothing behind.

use std::io::{BufRead as _, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

/// The offered rates, in Mbit/s: the 200 Mbit/s, and 1 Gbit/s where loss is judged.
pub const RATES_MBIT: [u32; 2] = [200, 1000];
/// The rate whose loss is the target.
pub const JUDGED_MBIT: u32 = 1000;
/// The datagram size (iperf's `-l`), the relay bench's larger size.
pub const DATAGRAM_BYTES: usize = 1162;
/// Loss through the forward may be at most this many times the loss straight to the server.
pub const LOSS_RATIO_MAX: f64 = 2.0;

/// One session as its server reported it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Session {
    /// Delivered rate.
    pub mbit_per_sec: f64,
    /// Datagrams the server saw missing.
    pub lost: u64,
    /// Datagrams the client sent, as the server counted them.
    pub total: u64,
    /// Datagrams the kernel dropped during the session because a UDP socket's receive buffer was
    /// full (Linux's `Udp: RcvbufErrors`, machine-wide); `None` where it cannot be read.
    pub rcvbuf_errors: Option<u64>,
}

impl Session {
    /// Lost over sent, 0 to 1.
    pub fn loss(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        self.lost as f64 / self.total as f64
    }

    /// " (N UDP receive-buffer drops on the machine)" when the kernel's count was read: the
    /// count is the machine's, not this session's sockets' alone.
    pub fn rcvbuf_drops_shown(&self) -> String {
        self.rcvbuf_errors
            .map(|n| format!(" ({n} UDP receive-buffer drops on the machine)"))
            .unwrap_or_default()
    }

    fn to_json(self) -> Value {
        json!({
            "mbit_per_sec": self.mbit_per_sec,
            "lost": self.lost,
            "total": self.total,
            "loss": self.loss(),
            "rcvbuf_errors": self.rcvbuf_errors,
        })
    }
}

/// A UDP server's report line of iperf 2's `-y C` output: time, source address and port,
/// destination address and port, id, interval, bytes, bits/s, jitter (ms), lost, total, loss %,
/// out-of-order. `None` for anything else (a client's line has a total of -1; a TCP line is
/// shorter): a line that is not a server's UDP report is not a measurement.
pub fn parse_server_report(line: &str) -> Option<Session> {
    let fields: Vec<&str> = line.trim().split(',').collect();
    if fields.len() < 14 {
        return None;
    }
    let bits: f64 = fields[8]
        .parse()
        .ok()
        .filter(|b: &f64| b.is_finite() && *b >= 0.0)?;
    let lost: i64 = fields[10].parse().ok()?;
    let total: i64 = fields[11].parse().ok()?;
    if total <= 0 {
        return None;
    }
    Some(Session {
        mbit_per_sec: bits / 1e6,
        // Duplicates can make iperf's count of missing datagrams negative: none were lost.
        lost: u64::try_from(lost.clamp(0, total)).ok()?,
        total: u64::try_from(total).ok()?,
        rcvbuf_errors: None,
    })
}

/// Linux's count of UDP datagrams dropped because a socket's receive buffer was full, from the
/// text of `/proc/net/snmp` (a header line `Udp: ...` naming the fields, then the values).
// i[impl bench.forward.iperf.rcvbuf]
pub fn rcvbuf_errors(snmp: &str) -> Option<u64> {
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next()?, udp.next()?);
    let at = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// The drops between two readings of the count; `None` when either could not be read, or when
/// the count went down (reset, or wrapped): then nobody can tell, and 0 would claim none.
// i[impl bench.forward.iperf.rcvbuf]
fn drops_during(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    after?.checked_sub(before?)
}

/// The machine's count now ([`rcvbuf_errors`]); `None` where `/proc/net/snmp` cannot be read.
fn rcvbuf_errors_now() -> Option<u64> {
    rcvbuf_errors(&std::fs::read_to_string("/proc/net/snmp").ok()?)
}

/// The loss target at [`JUDGED_MBIT`]: the forward's loss at most [`LOSS_RATIO_MAX`] times the
/// direct loss (both zero meets it); a session not measured is a miss.
// i[impl bench.forward.iperf]
pub fn loss_target(direct: Option<Session>, forward: Option<Session>) -> Value {
    let bound = direct.map(|d| d.loss() * LOSS_RATIO_MAX);
    let got = forward.map(|f| f.loss());
    json!({
        "target_max": bound,
        "measured": got,
        "met": matches!((got, bound), (Some(g), Some(b)) if g <= b),
    })
}

/// The measured sessions as the report holds them: per rate, each path's session or null.
// i[impl bench.forward.iperf]
pub fn report(sessions: &[(u32, Option<Session>, Option<Session>)], seconds: u64) -> Value {
    json!({
        "datagram_bytes": DATAGRAM_BYTES,
        "seconds": seconds,
        "sessions": sessions
            .iter()
            .map(|(rate, direct, forward)| json!({
                "offered_mbit": rate,
                "direct": direct.map(Session::to_json),
                "forward": forward.map(Session::to_json),
            }))
            .collect::<Vec<_>>(),
    })
}

/// The sessions of a report back, for the target and the summary.
pub fn sessions_at(report: &Value, rate: u32) -> (Option<Session>, Option<Session>) {
    let session = |v: &Value| {
        Some(Session {
            mbit_per_sec: v["mbit_per_sec"].as_f64()?,
            lost: v["lost"].as_u64()?,
            total: v["total"].as_u64()?,
            rcvbuf_errors: v["rcvbuf_errors"].as_u64(),
        })
    };
    report["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["offered_mbit"].as_u64() == Some(u64::from(rate)))
        .map(|s| (session(&s["direct"]), session(&s["forward"])))
        .unwrap_or((None, None))
}

/// A child process killed and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs every session with the `forward` example at `example`, writing servers' reports under
/// `work`; returns [`report`]'s value.
// i[impl bench.forward.iperf]
pub fn run(example: &Path, work: &Path, quick: bool) -> anyhow::Result<Value> {
    let iperf = iperf()?;
    let seconds = if quick { 2 } else { 10 };
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let direct_port = free_port()?;
    let forward_port = free_port()?;
    // A token for this run's own node on loopback: unguessable enough, and 32 bytes or more.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let token = format!("bench-iperf-{:08x}-{nanos:032x}", std::process::id());
    let (_node, node_addr, pin) = start_node(example, work, forward_port, &token)?;
    let (_client, local) = start_client(example, node_addr, &pin, forward_port, &token)?;
    let mut sessions = Vec::new();
    for rate in RATES_MBIT {
        let direct = session(
            &iperf,
            work,
            "direct",
            rate,
            direct_port,
            direct_port,
            seconds,
        )?;
        let forward = session(
            &iperf,
            work,
            "forward",
            rate,
            forward_port,
            local.port(),
            seconds,
        )?;
        eprintln!(
            "bench: iperf at {rate} Mbit/s: direct {}, forward {}",
            shown(direct),
            shown(forward)
        );
        sessions.push((rate, direct, forward));
    }
    Ok(report(&sessions, seconds))
}

fn shown(session: Option<Session>) -> String {
    session.map_or_else(
        || "not measured".into(),
        |s| {
            format!(
                "{:.0} Mbit/s, {:.2}% lost{}",
                s.mbit_per_sec,
                s.loss() * 100.0,
                s.rcvbuf_drops_shown()
            )
        },
    )
}

/// iperf 2 on PATH, installed from Debian when missing and this run is root.
fn iperf() -> anyhow::Result<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    if let Some(found) = holdfast_harness::packages::locate("iperf", &path) {
        return Ok(found);
    }
    if !nix::unistd::geteuid().is_root() {
        bail!("--iperf needs iperf 2: install Debian's `iperf` package (apt-get install iperf)");
    }
    holdfast_harness::packages::install(&["iperf"])?;
    holdfast_harness::packages::locate("iperf", &path)
        .context("iperf is still not on PATH after installing Debian's `iperf`")
}

fn free_port() -> anyhow::Result<u16> {
    let socket = UdpSocket::bind("127.0.0.1:0").context("binding a UDP port")?;
    Ok(socket.local_addr()?.port())
}

/// Lines of `child`'s stdout, read on a thread so a silent child cannot hang the run.
fn lines(child: &mut Child) -> anyhow::Result<mpsc::Receiver<String>> {
    let stdout = child.stdout.take().context("the child's stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

/// Waits up to 30 s for the first line `accept` takes.
fn first<T>(
    rx: &mpsc::Receiver<String>,
    what: &str,
    accept: impl Fn(&str) -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(found) = accept(&line) {
                    return Ok(found);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => bail!("{what}: nothing within 30 s"),
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("{what}: it exited"),
        }
    }
}

/// The forward's node, allowing only the forward path's iperf server; its address and pin.
fn start_node(
    example: &Path,
    work: &Path,
    target_port: u16,
    token: &str,
) -> anyhow::Result<(Killed, SocketAddr, String)> {
    let mut node = Killed(
        Command::new(example)
            .args(["node", "127.0.0.1:0"])
            .arg(work.join("node"))
            .arg(format!("127.0.0.1:{target_port}"))
            .env("HOLDFAST_FORWARD_TOKEN", token)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", example.display()))?,
    );
    let rx = lines(&mut node.0)?;
    // "listening on ADDR, pin PIN"
    let (addr, pin) = first(&rx, "the forward's node", |line| {
        let rest = line.strip_prefix("listening on ")?;
        let (addr, pin) = rest.split_once(", pin ")?;
        Some((addr.parse().ok()?, pin.trim().to_owned()))
    })?;
    Ok((node, addr, pin))
}

/// The forward's client, its local side on a port of its choosing; that address once open.
fn start_client(
    example: &Path,
    node: SocketAddr,
    pin: &str,
    target_port: u16,
    token: &str,
) -> anyhow::Result<(Killed, SocketAddr)> {
    let mut client = Killed(
        Command::new(example)
            .args(["udp", "127.0.0.1:0", "--to"])
            .arg(format!("127.0.0.1:{target_port}"))
            .arg("--node")
            .arg(node.to_string())
            .args(["--pin", pin, "--json"])
            .env("HOLDFAST_FORWARD_TOKEN", token)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", example.display()))?,
    );
    let rx = lines(&mut client.0)?;
    let local = first(&rx, "the forward's client", |line| {
        let event: Value = serde_json::from_str(line).ok()?;
        (event["event"] == "opened").then(|| event["local"].as_str()?.parse().ok())?
    })?;
    // Events after the open (none are expected) are drained so the client never blocks on them.
    std::thread::spawn(move || for _ in rx {});
    Ok((client, local))
}

/// One session: a fresh iperf server on `server_port`, a client sending to port `send_to` at `rate`
/// for `seconds`; the server's report, or `None` when none came.
fn session(
    iperf: &Path,
    work: &Path,
    path: &str,
    rate: u32,
    server_port: u16,
    send_to: u16,
    seconds: u64,
) -> anyhow::Result<Option<Session>> {
    let out = work.join(format!("{path}-{rate}.csv"));
    let file =
        std::fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?;
    let _server = Killed(
        Command::new(iperf)
            .args(["-s", "-u", "-y", "C", "-p", &server_port.to_string()])
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .context("starting the iperf server")?,
    );
    // The server binds before it prints anything; give it a moment.
    std::thread::sleep(Duration::from_millis(300));
    // i[impl bench.forward.iperf.rcvbuf]
    let drops_before = rcvbuf_errors_now();
    let status = Command::new(iperf)
        .args(["-c", "127.0.0.1", "-u", "-p", &send_to.to_string()])
        .args(["-l", &DATAGRAM_BYTES.to_string(), "-b", &format!("{rate}M")])
        .args(["-t", &seconds.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running the iperf client")?;
    if !status.success() {
        eprintln!("bench: iperf client ({path}, {rate} Mbit/s) failed: {status}");
    }
    // The server writes its report when the session ends; the client has waited for it already.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if let Some(mut session) = text.lines().find_map(parse_server_report) {
            session.rcvbuf_errors = drops_during(drops_before, rcvbuf_errors_now());
            return Ok(Some(session));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines iperf 2.1.8 wrote on this machine: a server's report, and the client's own line.
    const SERVER: &str = "19700101000000,127.0.0.1,48441,127.0.0.1,47002,1,0.0-2.0,240600234,979915953,0.000,18542,225599,8.219,0";
    const CLIENT: &str = "19700101000000,127.0.0.1,35416,127.0.0.1,47001,1,0.0-2.0,52434088,209718421,0.000,0,-1,-0.000,0";

    // i[verify bench.forward.iperf]
    #[test]
    fn a_server_report_gives_rate_and_loss_and_a_client_line_is_not_a_measurement() {
        let s = parse_server_report(SERVER).expect("a server's report");
        assert_eq!(s.lost, 18542);
        assert_eq!(s.total, 225599);
        assert!((s.mbit_per_sec - 979.915953).abs() < 1e-6);
        assert!((s.loss() - 0.08219).abs() < 1e-4, "{}", s.loss());
        assert_eq!(
            parse_server_report(CLIENT),
            None,
            "total -1: the client's view"
        );
        assert_eq!(parse_server_report(""), None);
        assert_eq!(
            parse_server_report("------------------------------------"),
            None
        );
    }

    // i[verify bench.forward.iperf]
    #[test]
    fn loss_through_the_forward_may_be_twice_the_direct_loss_and_no_more() {
        let at = |lost| {
            Some(Session {
                mbit_per_sec: 900.0,
                lost,
                total: 10_000,
                rcvbuf_errors: None,
            })
        };
        assert_eq!(loss_target(at(10), at(20))["met"], true, "exactly twice");
        assert_eq!(loss_target(at(10), at(21))["met"], false);
        assert_eq!(
            loss_target(at(0), at(0))["met"],
            true,
            "none lost either way"
        );
        assert_eq!(loss_target(at(0), at(1))["met"], false);
        // A session without a report is a miss, whichever it is.
        assert_eq!(loss_target(None, at(0))["met"], false);
        assert_eq!(loss_target(at(10), None)["met"], false);
        assert_eq!(loss_target(at(10), None)["measured"], Value::Null);
    }

    // i[verify bench.forward.iperf]
    #[test]
    fn the_report_keeps_each_rate_and_path_and_reads_back() {
        let a = Session {
            mbit_per_sec: 199.0,
            lost: 0,
            total: 43_000,
            rcvbuf_errors: None,
        };
        let b = Session {
            mbit_per_sec: 950.0,
            lost: 500,
            total: 210_000,
            rcvbuf_errors: Some(498),
        };
        let r = report(&[(200, Some(a), Some(a)), (1000, Some(b), None)], 2);
        assert_eq!(sessions_at(&r, 200), (Some(a), Some(a)));
        assert_eq!(sessions_at(&r, 1000), (Some(b), None));
        assert_eq!(sessions_at(&r, 400), (None, None));
        assert_eq!(r["sessions"][1]["forward"], Value::Null);
        assert_eq!(r["datagram_bytes"], 1162);
        assert_eq!(r["sessions"][1]["direct"]["rcvbuf_errors"], 498);
        assert_eq!(r["sessions"][0]["direct"]["rcvbuf_errors"], Value::Null);
    }

    // i[verify bench.forward.iperf.rcvbuf]
    #[test]
    fn the_kernel_s_receive_buffer_drops_are_read_by_name_from_proc_net_snmp() {
        // /proc/net/snmp's Udp lines as Linux 6.x writes them (other protocols' lines around).
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
            Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
            Udp: 1224629 0 2761 690216 2761 0 0 0 0\n\
            UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
            UdpLite: 0 0 0 0 7 0 0 0 0\n";
        assert_eq!(rcvbuf_errors(snmp), Some(2761));
        // Found by its name, wherever the kernel puts it.
        assert_eq!(
            rcvbuf_errors("Udp: RcvbufErrors InDatagrams\nUdp: 5 9\n"),
            Some(5)
        );
        assert_eq!(rcvbuf_errors("Udp: InDatagrams\nUdp: 5\n"), None);
        assert_eq!(rcvbuf_errors("Udp: RcvbufErrors\n"), None, "no values");
        assert_eq!(rcvbuf_errors(""), None);
    }

    // i[verify bench.forward.iperf.rcvbuf]
    #[test]
    fn a_sessions_drops_are_the_counts_difference_or_unknown() {
        assert_eq!(drops_during(Some(2761), Some(5845)), Some(3084));
        assert_eq!(drops_during(Some(7), Some(7)), Some(0));
        // A count that went down was reset or wrapped: unknown, never "none dropped".
        assert_eq!(drops_during(Some(9), Some(4)), None);
        assert_eq!(drops_during(None, Some(4)), None);
        assert_eq!(drops_during(Some(4), None), None);
    }

    proptest::proptest! {
        // i[verify bench.forward.iperf]
        #[test]
        fn any_line_parses_to_a_report_with_loss_within_zero_and_one_or_to_none(
            fields in proptest::collection::vec("[-0-9.]{0,12}", 0..20),
        ) {
            if let Some(s) = parse_server_report(&fields.join(",")) {
                proptest::prop_assert!(s.total > 0 && s.lost <= s.total);
                proptest::prop_assert!((0.0..=1.0).contains(&s.loss()));
                proptest::prop_assert!(s.mbit_per_sec >= 0.0);
            }
        }
    }
}
