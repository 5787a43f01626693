//! `holdfast forward udp`: the operator's end of a UDP forward, with a status line on a terminal
//! or one JSON event per line otherwise, and the forward's stats when it exits.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;

use holdfast_forward::client::{self, ClientConfig, ClientEvent, ForwardSpec};
use holdfast_forward::{Credential, Fingerprint, ForwardStats};

use crate::render::escape;

/// What `holdfast forward udp` was asked to do.
#[derive(Debug, Clone)]
pub struct UdpArgs {
    /// The local address to listen on.
    pub local: SocketAddr,
    /// The target, as the node sees it.
    pub target: SocketAddr,
    /// The node's forward endpoint, as given (a name is resolved, and re-resolved on reconnect).
    pub node: NodeAddr,
    /// The node's pinned identity.
    pub pin: Fingerprint,
    /// The credential file (else `HOLDFAST_FORWARD_TOKEN`).
    pub token_file: Option<PathBuf>,
    /// One JSON event per line even on a terminal.
    pub json: bool,
}

/// `--node HOST:PORT`: the node's forward endpoint as the operator wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAddr {
    /// An address: nothing to resolve.
    Ip(SocketAddr),
    /// A DNS name and a port.
    Name {
        /// The name.
        host: String,
        /// The port.
        port: u16,
    },
}

impl std::fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeAddr::Ip(addr) => write!(f, "{addr}"),
            NodeAddr::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// Whether `host` is a DNS name: dot-separated labels of 1 to 63 letters, digits and hyphens, not
/// starting or ending with a hyphen, 253 bytes at most, an optional final dot.
fn is_dns_name(host: &str) -> bool {
    let name = host.strip_suffix('.').unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
        // All digits and dots is a malformed IPv4 address, not a name.
        && !name.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

// i[impl node.forward.cli.resolve]
impl std::str::FromStr for NodeAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(addr) = s.parse::<SocketAddr>() {
            if addr.port() == 0 {
                return Err(format!("{s}: port 0 is no node's port"));
            }
            if addr.is_ipv6() {
                return Err(format!("{s}: {IPV4_ONLY}"));
            }
            return Ok(NodeAddr::Ip(addr));
        }
        let Some((host, port)) = s.rsplit_once(':') else {
            return Err(format!("{s}: expected HOST:PORT"));
        };
        if host.contains(':') || host.starts_with('[') {
            return Err(format!("{s}: {IPV4_ONLY}"));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{s}: {port:?} is not a port"))?;
        if port == 0 {
            return Err(format!("{s}: port 0 is no node's port"));
        }
        if !is_dns_name(host) {
            return Err(format!(
                "{s}: {host:?} is neither a DNS name nor an IP address"
            ));
        }
        Ok(NodeAddr::Name {
            host: host.to_owned(),
            port,
        })
    }
}

/// The forward client's QUIC endpoint is bound to an IPv4 address (holdfast-forward's client), so
/// it can reach a node over IPv4 only.
const IPV4_ONLY: &str =
    "the forward client connects over IPv4 only (give an IPv4 address or a name with an A record)";

// i[impl node.forward.cli.resolve]
/// A name's addresses the client can reach: its IPv4 ones, in the resolver's order (a dual-stack
/// name often lists its IPv6 addresses first).
fn ipv4_only(addrs: Vec<SocketAddr>) -> std::io::Result<Vec<SocketAddr>> {
    if addrs.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the name has no address",
        ));
    }
    let v4: Vec<SocketAddr> = addrs.into_iter().filter(SocketAddr::is_ipv4).collect();
    if v4.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("the name has only IPv6 addresses; {IPV4_ONLY}"),
        ));
    }
    Ok(v4)
}

/// How long a lookup of the node's name may take.
const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl NodeAddr {
    /// Every address the node is at now that the client can reach (an address is itself; a name
    /// is looked up, and its IPv4 addresses kept).
    pub async fn resolve(&self) -> std::io::Result<Vec<SocketAddr>> {
        match self {
            NodeAddr::Ip(addr) => Ok(vec![*addr]),
            NodeAddr::Name { host, port } => {
                let lookup = tokio::net::lookup_host((host.as_str(), *port));
                let addrs: Vec<SocketAddr> = tokio::time::timeout(RESOLVE_TIMEOUT, lookup)
                    .await
                    .map_err(|_| {
                        std::io::Error::new(std::io::ErrorKind::TimedOut, "the lookup timed out")
                    })??
                    .collect();
                ipv4_only(addrs)
            }
        }
    }
}

// i[impl node.forward.cli.resolve]
/// Where the next client connects when the client at `current` is about to reconnect and the name
/// now lists `resolved`; `None` stays with `current`. An address no longer listed is left for the
/// name's first one; one that is listed is kept if it ever `connected` (the outage is the node's,
/// and the client's back-off covers it) or is the only one, else the name's next address is tried
/// (an address that never answered is not retried alone while others are listed).
pub fn next_address(
    current: SocketAddr,
    resolved: &[SocketAddr],
    connected: bool,
) -> Option<SocketAddr> {
    match resolved.iter().position(|a| *a == current) {
        None => resolved.first().copied(),
        Some(_) if connected || resolved.len() == 1 => None,
        Some(at) => resolved.get((at + 1) % resolved.len()).copied(),
    }
}

/// Adds one client's stats to the total across every address the node was at.
fn add_stats(total: &mut ForwardStats, more: &ForwardStats) {
    total.to_target_datagrams += more.to_target_datagrams;
    total.to_target_bytes += more.to_target_bytes;
    total.from_target_datagrams += more.from_target_datagrams;
    total.from_target_bytes += more.from_target_bytes;
    total.dropped.oversize += more.dropped.oversize;
    total.dropped.malformed += more.dropped.malformed;
    total.dropped.unknown_forward += more.dropped.unknown_forward;
    total.dropped.flow_limit += more.dropped.flow_limit;
    total.dropped.error += more.dropped.error;
    total.transient_errors += more.transient_errors;
    if more.last_error.is_some() {
        total.last_error.clone_from(&more.last_error);
    }
}

/// Exit status: stopped by a signal.
pub const EXIT_STOPPED: u8 = 0;
/// Exit status: the node refused (the forward, the credential or the pin), or the client failed.
pub const EXIT_REFUSED: u8 = 1;

/// Reads the credential: the first non-comment line of a 0600 file, else the environment.
pub fn credential(token_file: Option<&std::path::Path>) -> Result<Credential, String> {
    match token_file {
        Some(path) => {
            let tokens = read_tokens(path)?;
            tokens
                .into_iter()
                .next()
                .ok_or_else(|| format!("token file {} holds no token", path.display()))
        }
        None => std::env::var("HOLDFAST_FORWARD_TOKEN")
            .ok()
            .filter(|t| !t.trim().is_empty())
            .map(|t| Credential::new(t.trim().to_owned()))
            .ok_or_else(|| "give --token-file FILE or set HOLDFAST_FORWARD_TOKEN".to_owned()),
    }
}

/// Reads every token of a token file (mode checked first): one a line, `#` comments and blank
/// lines skipped.
pub fn read_tokens(path: &std::path::Path) -> Result<Vec<Credential>, String> {
    let text = crate::config::token::read_secret_file(path)?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| Credential::new(l.to_owned()))
        .collect())
}

/// How the client reports: a status line rewritten in place, or JSON lines.
enum Output {
    Tty,
    Json,
}

impl Output {
    // i[impl node.forward.cli.udp]
    /// The forward's stats as printed when the client exits. `local` is the address bound, which
    /// differs from the one asked for when that had port 0.
    fn summary(&self, local: SocketAddr, target: SocketAddr, stats: &ForwardStats) -> String {
        match self {
            Output::Json => serde_json::json!({
                "event": "summary", "forward": 1, "local": local, "target": target, "stats": stats
            })
            .to_string(),
            Output::Tty => summary_line(1, &ForwardSpec { local, target }, stats),
        }
    }

    /// The node's name now resolves elsewhere.
    fn moved(&self, name: &NodeAddr, from: SocketAddr, to: SocketAddr) {
        match self {
            Output::Json => println!(
                "{}",
                serde_json::json!({"event": "node_moved", "node": name.to_string(), "from": from, "to": to})
            ),
            Output::Tty => {
                eprintln!("\r\x1b[2K{name} now resolves to {to} (was {from}): reconnecting there")
            }
        }
    }

    fn event(&self, event: &ClientEvent) {
        match self {
            Output::Json => {
                let line = serde_json::to_string(event).unwrap_or_default();
                println!("{line}");
            }
            Output::Tty => {
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r\x1b[2K{}", status_line(event));
                // Refusals and ends stay on screen; the rest is overwritten by the next state.
                if matches!(
                    event,
                    ClientEvent::Refused { .. }
                        | ClientEvent::Ended { .. }
                        | ClientEvent::ConnectFailed { .. }
                        | ClientEvent::LocalFailed { .. }
                ) {
                    let _ = writeln!(err);
                }
                let _ = err.flush();
            }
        }
    }
}

// i[impl node.forward.cli.status]
// i[impl node.cli.escape]
/// The status line for one event: connected, reconnecting in N s, ended because …. The node's
/// words (refusals, statuses, ends) are [`escape`]d: they reach the operator's terminal.
pub fn status_line(event: &ClientEvent) -> String {
    match event {
        ClientEvent::Connected { node } => format!("connected to {node}"),
        ClientEvent::Reconnecting { in_ms, failures } => format!(
            "reconnecting in {} s ({failures} failed attempts)",
            in_ms.div_ceil(1000)
        ),
        other => escape(&other.to_string()),
    }
}

// i[impl node.cli.escape]
/// The exit summary of one forward; its last error (the node's words, maybe) [`escape`]d.
pub fn summary_line(forward: u32, spec: &ForwardSpec, s: &ForwardStats) -> String {
    let d = &s.dropped;
    format!(
        "forward {forward} {} -> {}: sent {} datagrams ({} bytes), received {} datagrams ({} bytes); \
         dropped: {} oversize, {} malformed, {} unknown forward, {} over the flow limit, {} on error; \
         {} transient errors; last error: {}",
        spec.local,
        spec.target,
        s.to_target_datagrams,
        s.to_target_bytes,
        s.from_target_datagrams,
        s.from_target_bytes,
        d.oversize,
        d.malformed,
        d.unknown_forward,
        d.flow_limit,
        d.error,
        s.transient_errors,
        escape(s.last_error.as_deref().unwrap_or("none")),
    )
}

// i[impl node.cli.escape]
/// The last line printed when the node refused: its reason carries the node's words, so it is
/// [`escape`]d.
fn refused_line(reason: &str) -> String {
    format!("holdfast: {}", escape(reason))
}

/// Why the client stops.
enum End {
    Signal,
    Refused(String),
}

/// How one client (one address of the node) ended.
enum Step {
    End(End),
    /// The node's name no longer lists the address: reconnect to this one after this wait.
    Moved(SocketAddr, u64),
}

// i[impl node.forward.cli.udp]
// i[impl node.forward.cli.resolve]
/// Runs the client until a signal, or until the node refuses it; prints the summary; returns the
/// exit status. A client runs per address the node's name resolves to: when a reconnect finds
/// the name moved, the client stops and one for the new address starts on the same local address.
pub async fn run(args: UdpArgs) -> u8 {
    use tokio::signal::unix::{SignalKind, signal};
    let credential = match credential(args.token_file.as_deref()) {
        Ok(c) => c,
        Err(err) => {
            eprintln!("holdfast: {err}");
            return EXIT_REFUSED;
        }
    };
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        eprintln!("holdfast: cannot install signal handlers");
        return EXIT_REFUSED;
    };
    let mut node = match args.node.resolve().await {
        Ok(addrs) => addrs[0],
        Err(err) => {
            eprintln!("holdfast: cannot resolve the node {}: {err}", args.node);
            return EXIT_REFUSED;
        }
    };
    let output = if args.json || !std::io::stderr().is_terminal() {
        Output::Json
    } else {
        Output::Tty
    };
    let mut local = args.local;
    let mut total = ForwardStats::default();
    let mut first = true;
    // Paces moves between the name's addresses (each restarts the client, whose own back-off
    // starts over): a move fails the pending attempt, a connection succeeds it. The attempt is
    // held while a client runs, so it must not go stale.
    let mut moves = holdfast_retry::KeyedGate::new(
        holdfast_retry::Policy::builder()
            .base(std::time::Duration::from_secs(1))
            .cap(std::time::Duration::from_secs(60))
            .stale_after(std::time::Duration::from_secs(365 * 24 * 3600))
            .build()
            .unwrap_or_default(),
    );
    let mut attempt = moves.begin(&(), std::time::Instant::now()).ok();
    let end = loop {
        let spec = ForwardSpec {
            local,
            target: args.target,
        };
        let mut config = ClientConfig::new(node, args.pin, credential.clone());
        config.forwards = vec![spec];
        let mut forwarding = match client::spawn(config).await {
            Ok(f) => f,
            Err(err) if first => {
                eprintln!("holdfast: cannot listen on {}: {err}", args.local);
                return EXIT_REFUSED;
            }
            Err(err) => break End::Refused(format!("cannot listen on {local} again: {err}")),
        };
        // The address bound (port 0 asked for picks one): a later client binds the same.
        local = forwarding.local_addrs().first().copied().unwrap_or(local);
        if first {
            if let Output::Json = output {
                println!(
                    "{}",
                    serde_json::json!({"event": "listening", "local": local, "target": args.target, "node": args.node.to_string(), "address": node})
                );
            } else {
                eprintln!(
                    "listening on {local}, forwarding to {} through {} ({node})",
                    args.target, args.node
                );
            }
            first = false;
        }
        let mut connected = false;
        let step = loop {
            tokio::select! {
                _ = term.recv() => break Step::End(End::Signal),
                _ = int.recv() => break Step::End(End::Signal),
                event = forwarding.next_event() => {
                    let Some(event) = event else {
                        break Step::End(End::Refused("the client stopped".to_owned()));
                    };
                    output.event(&event);
                    // What retrying cannot fix ends the client: the operator must change something.
                    match &event {
                        // A node that is shutting down refuses for now only: reconnect and re-open.
                        ClientEvent::Refused { refusal, message, .. }
                            if *refusal != holdfast_forward::control::Refusal::ShuttingDown =>
                        {
                            break Step::End(End::Refused(format!(
                                "the node refused the forward {local} -> {}: {message}",
                                args.target
                            )));
                        }
                        // An update of the node's lists ended the forward: reconnecting would
                        // only be refused again.
                        ClientEvent::Ended {
                            reason: holdfast_forward::control::EndReason::NotAllowed,
                            message,
                            ..
                        } => {
                            break Step::End(End::Refused(format!(
                                "the node no longer allows the forward {local} -> {}: {message}",
                                args.target
                            )));
                        }
                        ClientEvent::ConnectFailed { error, pin_mismatch: true, .. }
                        | ClientEvent::ConnectFailed { error, bad_credential: true, .. } => {
                            break Step::End(End::Refused(error.clone()));
                        }
                        ClientEvent::Connected { .. } => {
                            connected = true;
                            if let Some(token) = attempt.take() {
                                moves.succeed(token, std::time::Instant::now());
                            }
                        }
                        // About to reconnect: a name may point elsewhere by now.
                        ClientEvent::Reconnecting { in_ms, .. } => {
                            if let Ok(addrs) = args.node.resolve().await {
                                if let Some(new) = next_address(node, &addrs, connected) {
                                    break Step::Moved(new, *in_ms);
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
        };
        let stats = forwarding.stats();
        forwarding.stop().await;
        if let Some(stats) = stats.first() {
            add_stats(&mut total, stats);
        }
        match step {
            Step::End(end) => break end,
            Step::Moved(new, wait_ms) => {
                output.moved(&args.node, node, new);
                node = new;
                // The back-off the old client was about to wait, or the moves' own if longer.
                let now = std::time::Instant::now();
                if let Some(token) = attempt.take() {
                    moves.fail(token, now, None);
                }
                let mut until = now + std::time::Duration::from_millis(wait_ms);
                loop {
                    match moves.begin(&(), std::time::Instant::now()) {
                        Ok(token) => {
                            attempt = Some(token);
                            break;
                        }
                        Err(not_yet) => until = until.max(not_yet.until),
                    }
                    tokio::select! {
                        _ = term.recv() => break,
                        _ = int.recv() => break,
                        () = tokio::time::sleep_until(until.into()) => {}
                    }
                }
                if attempt.is_none() {
                    break End::Signal;
                }
                tokio::select! {
                    _ = term.recv() => break End::Signal,
                    _ = int.recv() => break End::Signal,
                    () = tokio::time::sleep_until(until.into()) => {}
                }
            }
        }
    };
    let summary = output.summary(local, args.target, &total);
    match output {
        Output::Json => println!("{summary}"),
        Output::Tty => eprintln!("\r\x1b[2K{summary}"),
    }
    match end {
        End::Signal => EXIT_STOPPED,
        End::Refused(reason) => {
            eprintln!("{}", refused_line(&reason));
            EXIT_REFUSED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // i[verify node.forward.cli.resolve]
    #[test]
    fn node_takes_a_name_or_an_ipv4_address_with_a_port() {
        let ok = |s: &str| s.parse::<NodeAddr>().unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(
            ok("192.0.2.1:4433"),
            NodeAddr::Ip("192.0.2.1:4433".parse().unwrap())
        );
        assert_eq!(
            ok("node-1.example.org:4433"),
            NodeAddr::Name {
                host: "node-1.example.org".into(),
                port: 4433
            }
        );
        assert_eq!(ok("localhost:1").to_string(), "localhost:1");
        assert_eq!(ok("example.org.:443").to_string(), "example.org.:443");
        for bad in [
            "localhost",
            "localhost:",
            ":4433",
            "localhost:0",
            "192.0.2.1:0",
            "localhost:65536",
            "localhost:https",
            "::1:4433",
            "[::1:4433",
            // The client's endpoint is IPv4: an IPv6 node could never be reached.
            "[::1]:4433",
            "[2001:db8::1]:4433",
            "-bad.example:1",
            "bad-.example:1",
            "a..b:1",
            "under_score.example:1",
            "999.1.1.1:4433",
            "1.2.3:4433",
            "spa ce:1",
        ] {
            assert!(bad.parse::<NodeAddr>().is_err(), "{bad} parsed");
        }
        let long = format!("{}.example:1", "a".repeat(64));
        assert!(long.parse::<NodeAddr>().is_err());
    }

    // i[verify node.forward.cli.resolve]
    #[test]
    fn a_name_s_addresses_are_its_ipv4_ones_in_order_and_ipv6_only_is_an_error() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let both = vec![
            a("[2001:db8::1]:4433"),
            a("192.0.2.1:4433"),
            a("[2001:db8::2]:4433"),
            a("192.0.2.2:4433"),
        ];
        assert_eq!(
            ipv4_only(both).unwrap(),
            [a("192.0.2.1:4433"), a("192.0.2.2:4433")]
        );
        let err = ipv4_only(vec![a("[2001:db8::1]:4433")]).unwrap_err();
        assert!(err.to_string().contains("only IPv6 addresses"), "{err}");
        let err = ipv4_only(Vec::new()).unwrap_err();
        assert_eq!(err.to_string(), "the name has no address");
    }

    proptest! {
        // i[verify node.forward.cli.resolve]
        #[test]
        fn node_parsing_never_panics_and_what_parses_prints_back_the_same(s in "\\PC{0,40}") {
            if let Ok(addr) = s.parse::<NodeAddr>() {
                let again: NodeAddr = addr.to_string().parse().unwrap();
                prop_assert_eq!(again, addr);
            }
        }

        // i[verify node.forward.cli.resolve]
        #[test]
        fn a_valid_name_and_port_parse_as_a_name(
            labels in proptest::collection::vec("[a-z][a-z0-9-]{0,10}[a-z0-9]", 1..4),
            port in 1u16..,
        ) {
            let host = labels.join(".");
            let parsed: NodeAddr = format!("{host}:{port}").parse().unwrap();
            prop_assert_eq!(parsed, NodeAddr::Name { host, port });
        }
    }

    // i[verify node.forward.cli.resolve]
    #[test]
    fn a_reconnect_moves_only_off_an_address_that_is_gone_or_never_answered() {
        let a: SocketAddr = "192.0.2.1:4433".parse().unwrap();
        let b: SocketAddr = "192.0.2.2:4433".parse().unwrap();
        let c: SocketAddr = "192.0.2.3:4433".parse().unwrap();
        // Gone from the name: to its first address, connected before or not.
        assert_eq!(next_address(a, &[b, c], true), Some(b));
        assert_eq!(next_address(a, &[b, c], false), Some(b));
        // Still listed and it worked: stay (the outage is the node's).
        assert_eq!(next_address(a, &[b, a, c], true), None);
        // Still listed, never answered, others listed: the next one, wrapping around.
        assert_eq!(next_address(a, &[b, a, c], false), Some(c));
        assert_eq!(next_address(c, &[b, a, c], false), Some(b));
        // The only address: stay.
        assert_eq!(next_address(a, &[a], false), None);
        // Nothing resolved: stay.
        assert_eq!(next_address(a, &[], false), None);
    }

    // i[verify node.forward.cli.resolve]
    #[tokio::test]
    async fn localhost_resolves_to_loopback_and_an_address_to_itself() {
        let name: NodeAddr = "localhost:4433".parse().unwrap();
        let addrs = name.resolve().await.unwrap();
        assert!(!addrs.is_empty());
        assert!(
            addrs
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 4433),
            "{addrs:?}"
        );
        let ip: NodeAddr = "192.0.2.1:4433".parse().unwrap();
        assert_eq!(
            ip.resolve().await.unwrap(),
            ["192.0.2.1:4433".parse().unwrap()]
        );
    }

    // i[verify node.forward.cli.resolve]
    #[test]
    fn the_summary_counts_the_forward_across_every_address() {
        let mut total = ForwardStats::default();
        let one = ForwardStats {
            to_target_datagrams: 2,
            to_target_bytes: 20,
            last_error: Some("first".into()),
            ..ForwardStats::default()
        };
        let two = ForwardStats {
            to_target_datagrams: 3,
            from_target_datagrams: 1,
            transient_errors: 1,
            ..ForwardStats::default()
        };
        add_stats(&mut total, &one);
        add_stats(&mut total, &two);
        assert_eq!(total.to_target_datagrams, 5);
        assert_eq!(total.to_target_bytes, 20);
        assert_eq!(total.from_target_datagrams, 1);
        assert_eq!(total.transient_errors, 1);
        assert_eq!(total.last_error.as_deref(), Some("first"));
    }

    // i[verify node.forward.cli.status]
    #[test]
    fn the_status_line_says_connected_reconnecting_or_ended() {
        let node: SocketAddr = "192.0.2.1:4433".parse().unwrap();
        assert_eq!(
            status_line(&ClientEvent::Connected { node }),
            "connected to 192.0.2.1:4433"
        );
        assert_eq!(
            status_line(&ClientEvent::Reconnecting {
                in_ms: 2_100,
                failures: 3
            }),
            "reconnecting in 3 s (3 failed attempts)"
        );
        let ended = status_line(&ClientEvent::Ended {
            forward: 1,
            reason: holdfast_forward::control::EndReason::ConnectionLost,
            message: "the connection was lost".into(),
        });
        assert_eq!(ended, "forward 1 ended because the connection was lost");
    }

    // i[verify node.cli.escape]
    #[test]
    fn the_nodes_refusals_status_and_end_messages_print_as_visible_escapes() {
        let hostile = "no\x1b[2J\x1b]0;owned\x07\r\nfake prompt $ \u{9b}31m";
        let events = [
            ClientEvent::Refused {
                forward: 1,
                refusal: holdfast_forward::control::Refusal::NotAllowed,
                message: hostile.into(),
            },
            ClientEvent::Status {
                forward: 1,
                from_node: true,
                message: hostile.into(),
            },
            ClientEvent::Ended {
                forward: 1,
                reason: holdfast_forward::control::EndReason::ConnectionLost,
                message: hostile.into(),
            },
            ClientEvent::ConnectFailed {
                error: hostile.into(),
                pin_mismatch: false,
                bad_credential: true,
            },
        ];
        let stats = ForwardStats {
            last_error: Some(hostile.into()),
            ..ForwardStats::default()
        };
        let spec = ForwardSpec {
            local: "127.0.0.1:5353".parse().unwrap(),
            target: "10.0.0.7:53".parse().unwrap(),
        };
        let lines = events
            .iter()
            .map(status_line)
            .chain([summary_line(1, &spec, &stats)]);
        let refused = refused_line(&format!("the node refused the forward: {hostile}"));
        for line in lines.chain([refused]) {
            assert!(
                line.contains("no\\x1b[2J\\x1b]0;owned\\x07\\r\\nfake"),
                "{line:?}"
            );
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
    }

    // i[verify node.forward.cli.udp]
    #[test]
    fn the_exit_summary_names_the_address_bound_not_the_one_asked_for() {
        let bound: SocketAddr = "127.0.0.1:40123".parse().unwrap();
        let target: SocketAddr = "10.0.0.7:53".parse().unwrap();
        let stats = ForwardStats {
            to_target_datagrams: 3,
            ..ForwardStats::default()
        };
        let tty = Output::Tty.summary(bound, target, &stats);
        assert!(
            tty.starts_with("forward 1 127.0.0.1:40123 -> 10.0.0.7:53: sent 3 datagrams"),
            "{tty}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&Output::Json.summary(bound, target, &stats)).unwrap();
        assert_eq!(json["event"], "summary");
        assert_eq!(json["forward"], 1);
        assert_eq!(json["local"], "127.0.0.1:40123");
        assert_eq!(json["target"], "10.0.0.7:53");
        assert_eq!(json["stats"]["to_target_datagrams"], 3);
    }
}
