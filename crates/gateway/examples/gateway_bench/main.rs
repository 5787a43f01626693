//! The gateway benchmark's processes, in one binary: `cargo xtask bench gateway` builds it and runs
//! `gateway_bench run`, which starts the others as separate processes so that each one's resident
//! memory and file descriptors are its own.
//!
//! - `run --connections N`: the orchestrator. Starts the servers and the client fleets, measures,
//!   and prints one `RESULT {json}` line on stdout.
//! - `gateway`: a holdfast gateway (memory registry and routing), driven by line commands on stdin.
//! - `bare`: a bare tokio-tungstenite broadcast server, driven the same way (the baseline).
//! - `clients --addr A --connections N --silent-every K --source-base B`: N WebSocket clients that
//!   authenticate, join the room and count what they receive.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bare_server;
mod clients;
mod control;
mod gateway_server;
mod orchestrate;
mod proc_stats;

/// The room every client joins and every broadcast goes to.
pub const ROOM: &str = "bench";
/// The secret the orchestrator's clients and the gateway share.
pub const SECRET: &[u8] = b"holdfast gateway bench";
/// Messages queued per connection, on the gateway and the bare server alike.
pub const SEND_QUEUE: usize = 64;
/// tungstenite's read buffer per connection, on both servers and in the clients.
pub const READ_BUFFER: usize = 4 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("run");
    let opts = Opts::parse(args.get(1..).unwrap_or_default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = rt.block_on(async move {
        match mode {
            "run" => orchestrate::run(opts).await,
            "gateway" => gateway_server::run().await,
            "bare" => bare_server::run().await,
            "clients" => clients::run(opts).await,
            other => Err(format!(
                "unknown mode {other:?} (run, gateway, bare, clients)"
            )),
        }
    });
    if let Err(e) = code {
        eprintln!("gateway_bench {mode}: {e}");
        std::process::exit(1);
    }
}

/// `--name value` options; every mode reads the ones it needs.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Clients per fleet.
    pub connections: usize,
    /// The server the clients connect to.
    pub addr: Option<std::net::SocketAddr>,
    /// Every Kth client never reads (0: all read).
    pub silent_every: usize,
    /// The first loopback source address block this fleet uses (see `clients::source_addr`).
    pub source_base: u32,
    /// Connections per loopback source address.
    pub per_source: usize,
    /// Broadcast trials per server.
    pub trials: usize,
}

impl Opts {
    fn parse(args: &[String]) -> Opts {
        let mut o = Opts {
            connections: 10_000,
            addr: None,
            silent_every: 0,
            source_base: 0,
            per_source: 200,
            trials: 3,
        };
        let mut it = args.iter();
        while let Some(name) = it.next() {
            let value = it.next().map(String::as_str).unwrap_or_default();
            match name.as_str() {
                "--connections" => o.connections = value.parse().expect("--connections N"),
                "--addr" => o.addr = Some(value.parse().expect("--addr HOST:PORT")),
                "--silent-every" => o.silent_every = value.parse().expect("--silent-every K"),
                "--source-base" => o.source_base = value.parse().expect("--source-base B"),
                "--per-source" => o.per_source = value.parse().expect("--per-source N"),
                "--trials" => o.trials = value.parse().expect("--trials N"),
                other => panic!("unknown option {other}"),
            }
        }
        o
    }
}
