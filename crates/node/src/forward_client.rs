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
    /// The node's forward endpoint.
    pub node: SocketAddr,
    /// The node's pinned identity.
    pub pin: Fingerprint,
    /// The credential file (else `HOLDFAST_FORWARD_TOKEN`).
    pub token_file: Option<PathBuf>,
    /// One JSON event per line even on a terminal.
    pub json: bool,
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
    let text = crate::admin::token::read_secret_file(path)?;
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

// i[impl node.forward.cli.udp]
/// Runs the client until a signal, or until the node refuses it; prints the summary; returns the
/// exit status.
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
    let spec = ForwardSpec {
        local: args.local,
        target: args.target,
    };
    let mut config = ClientConfig::new(args.node, args.pin, credential);
    config.forwards = vec![spec];
    let mut forwarding = match client::spawn(config).await {
        Ok(f) => f,
        Err(err) => {
            eprintln!("holdfast: cannot listen on {}: {err}", args.local);
            return EXIT_REFUSED;
        }
    };
    let local = forwarding
        .local_addrs()
        .first()
        .copied()
        .unwrap_or(args.local);
    let output = if args.json || !std::io::stderr().is_terminal() {
        Output::Json
    } else {
        Output::Tty
    };
    if let Output::Json = output {
        println!(
            "{}",
            serde_json::json!({"event": "listening", "local": local, "target": args.target, "node": args.node})
        );
    } else {
        eprintln!(
            "listening on {local}, forwarding to {} through {}",
            args.target, args.node
        );
    }
    let end = loop {
        tokio::select! {
            _ = term.recv() => break End::Signal,
            _ = int.recv() => break End::Signal,
            event = forwarding.next_event() => {
                let Some(event) = event else {
                    break End::Refused("the client stopped".to_owned());
                };
                output.event(&event);
                // What retrying cannot fix ends the client: the operator must change something.
                match &event {
                    // A node that is shutting down refuses for now only: reconnect and re-open.
                    ClientEvent::Refused { refusal, message, .. }
                        if *refusal != holdfast_forward::control::Refusal::ShuttingDown =>
                    {
                        break End::Refused(format!(
                            "the node refused the forward {local} -> {}: {message}",
                            args.target
                        ));
                    }
                    ClientEvent::ConnectFailed { error, pin_mismatch: true, .. }
                    | ClientEvent::ConnectFailed { error, bad_credential: true, .. } => {
                        break End::Refused(error.clone());
                    }
                    _ => {}
                }
            }
        }
    };
    let stats = forwarding.stats();
    forwarding.stop().await;
    let stats = stats.into_iter().next().unwrap_or_default();
    let summary = output.summary(local, args.target, &stats);
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
