//! The command line: `holdfast run`, `check-config`, the admin API's client commands, and
//! `completions`, `man` and `version`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::admin::client::Target;
use crate::config::LogFormat;

/// The holdfast node agent.
#[derive(Debug, Parser)]
#[command(name = "holdfast", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the node (the embedded single-node default without -c).
    Run {
        /// The config file.
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Override node.data_dir.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Override log.format.
        #[arg(long, value_enum)]
        log_format: Option<LogFormat>,
    },
    /// Validate a config file without starting anything.
    CheckConfig {
        /// The config file.
        file: PathBuf,
    },
    /// The node's state: modules, workloads and faults.
    Status(ClientArgs),
    /// Open faults.
    Faults(ClientArgs),
    /// Modules and their supervisors.
    Modules(ClientArgs),
    /// Workloads and their images.
    Workloads(ClientArgs),
    /// A workload's container output, stdout and stderr, control characters escaped (needs the
    /// Unix socket or --token-file: output may hold secrets). Exit status 1 when the node cannot
    /// be reached, has no such workload, the workload has no container now, or the output broke
    /// off.
    Logs {
        /// The workload's name.
        name: String,
        /// The last N lines (default 100, at most 10000).
        #[arg(long, value_name = "N")]
        tail: Option<u64>,
        /// Keep printing new output until interrupted.
        #[arg(short, long)]
        follow: bool,
        /// Only output from the last D (e.g. `10m`, `2h`).
        #[arg(long, value_name = "D", value_parser = parse_since)]
        since: Option<std::time::Duration>,
        /// How to reach the node.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Drain the node and stop it for good: gateway clients get 1001 (Going Away); with
    /// --restart, 1012 (needs the Unix socket or --token-file).
    Drain {
        /// The node will be back: gateway clients get 1012 (Service Restart) with a reconnect
        /// hint instead of 1001 (Going Away), as on SIGTERM.
        #[arg(long)]
        restart: bool,
        /// How to reach the node.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Reload the node's config file: modules whose sections changed restart, new ones start,
    /// removed ones stop, the rest are not touched. Exit 0: applied; 3: applied, but [node],
    /// [admin], [log] or [supervise] changed and need a restart; 1: nothing applied (invalid
    /// file, the node stopping, or no node); needs the Unix socket or --token-file.
    Reload(ClientArgs),
    /// The WebSocket gateway: its replica, readiness, connections and counters, or
    /// `gateway push --room R|--user U TEXT`, or `gateway token -c FILE --user U`.
    Gateway {
        /// `push` sends a message (needs the Unix socket or --token-file).
        #[command(subcommand)]
        action: Option<GatewayAction>,
        /// How to reach the node.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Active UDP forwards on the node, with their stats.
    Forwards(ClientArgs),
    /// UDP forwards: `forward identity`, `forward udp LOCAL --to TARGET --node ADDR --pin FP`.
    #[command(subcommand)]
    Forward(ForwardCommand),
    /// Certificates: each hostname's state, or `certs retry HOST`.
    Certs {
        /// `retry HOST` clears a block (needs the Unix socket or --token-file).
        #[command(subcommand)]
        action: Option<CertsAction>,
        /// How to reach the node.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print the shell completion script for SHELL on stdout (e.g. `holdfast completions bash >
    /// /etc/bash_completion.d/holdfast`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (holdfast.1 and one a subcommand) into DIR.
    Man {
        /// The directory (created if missing).
        dir: PathBuf,
    },
    /// The version, the git commit it was built from, and the features built in.
    Version {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `holdfast forward` subcommands.
#[derive(Debug, Subcommand)]
pub enum ForwardCommand {
    /// Print the node's forward identity (the pin clients give), from its data directory
    /// (created there if it does not exist yet).
    Identity {
        /// The node's data directory (default: from -c, else the embedded default's).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Take the data directory from this config file.
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Forward a local UDP address to TARGET through the node.
    Udp {
        /// The local UDP address to listen on, e.g. 127.0.0.1:5353.
        local: std::net::SocketAddr,
        /// The target as the node sees it, e.g. 10.0.0.2:53.
        #[arg(long)]
        to: std::net::SocketAddr,
        /// The node's forward endpoint (its `[forward] listen`): HOST:PORT, HOST a name or an
        /// IPv4 address (the client connects over IPv4; a name's IPv4 addresses are used).
        #[arg(long)]
        node: crate::forward_client::NodeAddr,
        /// The node's pinned identity (`holdfast forward identity` on the node).
        #[arg(long)]
        pin: holdfast_forward::Fingerprint,
        /// A file holding the token (mode 0600); else HOLDFAST_FORWARD_TOKEN.
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// One JSON event a line even on a terminal.
        #[arg(long)]
        json: bool,
    },
}

/// `holdfast certs` subcommands.
#[derive(Debug, Subcommand)]
pub enum CertsAction {
    /// Clear HOST's block and reset its failure streak, so the next tick attempts it.
    Retry {
        /// The hostname.
        host: String,
        /// How to reach the node.
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// `holdfast gateway` subcommands.
#[derive(Debug, Subcommand)]
pub enum GatewayAction {
    /// Push TEXT to every connection in a room, or of a user, on this node's gateway.
    Push {
        /// The room.
        #[arg(long, conflicts_with = "user", required_unless_present = "user")]
        room: Option<String>,
        /// The user.
        #[arg(long)]
        user: Option<String>,
        /// The message (a text frame, sent as given).
        text: String,
        /// How to reach the node.
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print an HS256 JWT for a user, signed with the config's gateway secret (for testing).
    Token {
        /// The config file whose [gateway] keys sign the token.
        #[arg(short, long = "config")]
        config_file: PathBuf,
        /// The user (`sub`).
        #[arg(long)]
        user: String,
        /// The rooms the token allows (names or prefixes such as chat:*), comma-separated.
        #[arg(long, value_delimiter = ',')]
        rooms: Option<Vec<String>>,
        /// How long the token is valid (a config duration such as 10m or 1h).
        #[arg(long, default_value = "1h")]
        ttl: String,
    },
}

/// How the client commands reach the node.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The admin API: IP:PORT or unix:PATH (default: from -c, else 127.0.0.1:7480).
    #[arg(long, env = "HOLDFAST_ADMIN")]
    pub admin: Option<Target>,
    /// Find the admin API from this config file.
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// The bearer token file for mutating calls over TCP.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `--since`: a duration as the config writes them (`"10m"`).
fn parse_since(text: &str) -> Result<std::time::Duration, String> {
    crate::duration::parse(text).map_err(|e| e.to_string())
}
