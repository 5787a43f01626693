//! holdfast-drain-demo, run by `cargo xtask drain-demo [--clients N]` — what a drain buys,
//! measured on real processes. A crate of its own, outside the workspace's `default-members`, so
//! that xtask (the spec gate) builds neither holdfast-gateway, tokio-tungstenite nor plotters.
//!
//! It starts the real etcd and Redis (the test harness's own service code), builds the node and
//! runs two `holdfast run -c` replicas in cluster mode on them, connects N WebSocket clients spread
//! over both (tokens signed by the shared key, one room), and pushes a steady room stream through
//! replica B's admin API. Then, once per arm, replica A is stopped — `control`: SIGKILL, no drain;
//! `graceful`: SIGTERM, the node drains — its clients reconnect to B (after the 1012 hint, or a
//! fallback back-off), and A is restarted; `recovery`: SIGTERM, and the clients rejoin with
//! `since` so the room's history (a Redis stream) gives them what they missed. Per arm it reports close codes, time to notice, how long
//! A's registration outlived the stop, messages sent vs received, frames on the survivor and A's
//! stop duration, in `target/drain-demo/report.json`, `report.md` and `timeline.svg`.
//!
//! Layout: `cluster` (replica configs and processes), `clients`, `stream` (the pushes),
//! `registration` (the etcd key), `measures` (pure figures from the logs), `schedule` (an arm's
//! waits, deadlines and caps, decided from values), `verdict` (the graceful arm's rules and the
//! exit), `report` (JSON and Markdown), `plot` (the SVG), `limits` (RLIMIT_NOFILE), `http` (a
//! one-request client).

mod clients;
mod cluster;
mod http;
mod limits;
mod measures;
mod plot;
mod registration;
mod report;
mod schedule;
mod stream;
mod verdict;

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use clients::{ClientPlan, Progress, Targets};
use cluster::{Replica, ReplicaSpec, Shared};
use holdfast_harness::layout::{self, ServiceDir};
use holdfast_harness::process::{self, Supervisor};
use measures::{Arm, ArmLog};
use schedule::{JoinWait, MoveWait};

/// `cargo xtask drain-demo`'s command line.
#[derive(clap::Parser)]
#[command(
    name = "cargo xtask drain-demo",
    bin_name = "cargo xtask drain-demo",
    about = "Two replicas, N clients, one replica stopped with and without a drain (target/drain-demo/)"
)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn main() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    match run(cli.args) {
        Ok(code) => code,
        // A run that could not do its job at all: xtask's usage error.
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Arguments of `cargo xtask drain-demo`.
/// Room messages pushed per second, unless `--rate` says otherwise.
pub const DEFAULT_RATE: u32 = 20;
/// The replicas' etcd lease TTL in seconds, unless `--lease-ttl-secs` says otherwise.
pub const DEFAULT_LEASE_TTL_SECS: u64 = 10;

// i[impl xtask.drain-demo.command+2]
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Clients per arm, spread evenly over the two replicas (2 to 62,500: one loopback source
    /// address each).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(2..=62_500))]
    pub clients: u64,
    /// Room messages pushed per second.
    #[arg(long, default_value_t = DEFAULT_RATE)]
    pub rate: u32,
    /// The replicas' etcd lease TTL, in seconds (how long a killed replica stays registered).
    #[arg(long, default_value_t = DEFAULT_LEASE_TTL_SECS)]
    pub lease_ttl_secs: u64,
    /// Run only this arm (repeatable); default all three: control, graceful, recovery.
    #[arg(long, value_enum)]
    pub arm: Vec<Arm>,
    /// Use this holdfast binary instead of building one.
    #[arg(long)]
    pub holdfast: Option<PathBuf>,
    /// Build the node with `--release`.
    #[arg(long)]
    pub release: bool,
}

/// The room every client joins.
const ROOM: &str = "demo";
/// How long the stream runs before the signal, so every client is receiving.
const WARM_UP: Duration = Duration::from_millis(1500);
/// How long it runs on after the arm has settled, so the survivor's frames are counted.
const SETTLE: Duration = Duration::from_secs(1);

/// Runs `cargo xtask drain-demo`: raises the file limit, builds the node, runs the arms, writes
/// the outputs, prints the report, then exits as [`verdict::exit_status`] says. The waits and
/// deadlines of an arm are decided in `schedule`.
// i[impl xtask.drain-demo.command+2]
// i[impl xtask.drain-demo.verdict+2]
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let workspace = holdfast_harness::root::find(None)
        .map_err(|message| anyhow::anyhow!("drain-demo: {message}"))?;
    holdfast_harness::output::print(&holdfast_harness::root::banner(&workspace));
    ctrlc::set_handler(|| {
        eprintln!("\ndrain-demo: interrupted; stopping");
        process::INTERRUPTED.store(true, Ordering::SeqCst);
    })
    .context("installing the Ctrl-C handler")?;
    let target = holdfast_harness::root::target_dir(&workspace);
    let out = target.join("drain-demo");
    let nofile = limits::raise_nofile(limits::needed(args.clients as usize))?;
    progress(format_args!("RLIMIT_NOFILE {nofile}"));
    let binary = match &args.holdfast {
        Some(path) => path.clone(),
        None => build_node(&workspace, &target, args.release)?,
    };
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let report = runtime.block_on(demo(&args, &binary, &out, load_before.trim()))?;
    write_outputs(&out, &report)?;
    holdfast_harness::output::print(&report::markdown(&report.report));
    let (status, lines) = verdict::exit_status(&report.report.failures);
    for line in lines {
        eprintln!("{line}");
    }
    Ok(status)
}

fn progress(line: std::fmt::Arguments<'_>) {
    eprintln!("drain-demo: {line}");
}

/// The node's build features: the gateway's etcd registry (behind a feature because its client
/// needs protoc to build).
const NODE_FEATURES: &str = "holdfast-gateway/etcd";

/// `cargo build -p holdfast --bin holdfast --features holdfast-gateway/etcd [--release]` in
/// `workspace`, without what `cargo run` set for running this demo (`i[bench.no-rebuild+2]`).
// i[impl bench.no-rebuild+2]
fn build_node_command(workspace: &Path, release: bool) -> Command {
    let mut command = holdfast_harness::root::cargo();
    command
        .current_dir(workspace)
        .args(["build", "-p", "holdfast", "--bin", "holdfast"])
        .args(["--features", NODE_FEATURES]);
    if release {
        command.arg("--release");
    }
    command
}

/// `cargo build -p holdfast --features holdfast-gateway/etcd`; returns the binary's path.
fn build_node(workspace: &Path, target: &Path, release: bool) -> anyhow::Result<PathBuf> {
    progress(format_args!(
        "building the node (cargo build -p holdfast --features {NODE_FEATURES})"
    ));
    let status = build_node_command(workspace, release)
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("cargo build -p holdfast failed: {status}");
    }
    Ok(target
        .join(if release { "release" } else { "debug" })
        .join("holdfast"))
}

/// Everything the outputs are made of.
struct Outcome {
    report: report::Report,
    timelines: Vec<plot::Timeline>,
}

fn write_outputs(out: &Path, outcome: &Outcome) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let svg = plot::svg(&outcome.timelines)?;
    for (name, text) in [
        ("report.json", report::json(&outcome.report)),
        ("report.md", report::markdown(&outcome.report)),
        ("timeline.svg", svg),
    ] {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        progress(format_args!("wrote {}", path.display()));
    }
    Ok(())
}

/// A random secret, hex-encoded (so that a trimmed and an untrimmed read agree).
fn secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", path.display()))
}

// i[impl xtask.drain-demo.cluster]
async fn demo(
    args: &Args,
    binary: &Path,
    out: &Path,
    load_before: &str,
) -> anyhow::Result<Outcome> {
    // Declared first, dropped last: the replicas stop before their backends do.
    let services_root = out.join("services");
    let mut supervisor = Supervisor::new(services_root.clone());
    process::sweep_processes(&services_root, process::SERVICE_PROGRAMS);
    let ports = layout::free_ports(4)?;
    let redis_env = holdfast_harness::redis::start(
        &mut supervisor,
        &ServiceDir::fresh(&services_root, "redis")?,
        ports[0],
    )?;
    let etcd_env = holdfast_harness::etcd::start(
        &mut supervisor,
        &ServiceDir::fresh(&services_root, "etcd")?,
        ports[1],
        ports[2],
    )?;
    let run_dir = out.join("run");
    if run_dir.exists() {
        std::fs::remove_dir_all(&run_dir)
            .with_context(|| format!("removing {}", run_dir.display()))?;
    }
    std::fs::create_dir_all(&run_dir)?;
    // Unix socket paths are limited to 108 bytes: the sockets live in a short directory.
    let sockets = std::env::temp_dir().join(format!("holdfast-drain-demo-{}", std::process::id()));
    std::fs::create_dir_all(&sockets)?;
    std::fs::set_permissions(&sockets, std::fs::Permissions::from_mode(0o700))?;
    let _sockets_cleanup = RemoveOnDrop(sockets.clone());

    let secret = secret()?;
    let key_file = run_dir.join("gateway.key");
    write_private(&key_file, &secret)?;
    let token_key = holdfast_gateway::Signer::new(secret.as_bytes());
    let shared = Shared {
        etcd: etcd_env[0].1.clone(),
        etcd_prefix: "/holdfast/drain-demo".into(),
        redis: redis_env[0].1.clone(),
        redis_prefix: "holdfast:drain-demo".into(),
        lease_ttl: Duration::from_secs(args.lease_ttl_secs.max(1)),
        token_key_file: key_file,
    };
    let gateway_ports = layout::free_ports(2)?;
    let spec = |id: &str, port: u16| ReplicaSpec {
        id: id.into(),
        listen: layout::loopback(port),
        dir: run_dir.join(id),
        socket: sockets.join(format!("{id}.sock")),
    };
    progress(format_args!(
        "starting replicas gw-a and gw-b ({})",
        binary.display()
    ));
    let mut a = Replica::start(binary, spec("gw-a", gateway_ports[0]), &shared).await?;
    let b = Replica::start(binary, spec("gw-b", gateway_ports[1]), &shared).await?;
    let targets = Arc::new(Targets {
        a: a.spec.listen,
        b: b.spec.listen,
        room: ROOM.into(),
    });
    let arms = schedule::arms(&args.arm);
    let mut measured = Vec::new();
    let mut timelines = Vec::new();
    for (i, &arm) in arms.iter().enumerate() {
        let log = run_arm(
            arm,
            schedule::first_seq(i),
            args,
            &mut a,
            &b,
            &shared,
            &targets,
            &token_key,
        )
        .await?;
        let m = measures::measure(&log);
        progress(format_args!(
            "[{}] close codes {:?}, notice p50 {:?} ms, registration outlived {:?} ms, lost {}",
            arm.name(),
            m.close_codes,
            m.notice_p50_ms.map(|v| v.round()),
            m.registration_outlived_ms.map(|v| v.round()),
            m.lost
        ));
        timelines.push(plot::timeline(&log));
        measured.push(m);
    }
    drop(a);
    drop(b);
    supervisor.stop_all();
    let command = schedule::command_line(args);
    let failures = measured.iter().flat_map(verdict::failures).collect();
    Ok(Outcome {
        report: report::Report {
            command,
            clients: args.clients as usize,
            rate_per_s: args.rate,
            room: ROOM.into(),
            lease_ttl_s: shared.lease_ttl.as_secs(),
            machine: report::Machine {
                cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
                loadavg_before: load_before.to_owned(),
            },
            arms: measured,
            failures,
        },
        timelines,
    })
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn check_interrupted() -> anyhow::Result<()> {
    if process::interrupted() {
        bail!("interrupted");
    }
    Ok(())
}

/// One arm: fresh clients, the stream, A stopped with the arm's signal, A's clients moved to B,
/// the figures' raw material collected, then A restarted.
// i[impl xtask.drain-demo.arms+2]
#[allow(clippy::too_many_arguments)]
async fn run_arm(
    arm: Arm,
    first_seq: u64,
    args: &Args,
    a: &mut Replica,
    b: &Replica,
    shared: &Shared,
    targets: &Arc<Targets>,
    token_key: &holdfast_gateway::Signer,
) -> anyhow::Result<ArmLog> {
    let name = arm.name();
    let n = args.clients as usize;
    let t0 = Instant::now();
    let (stop_clients, stop_rx) = watch::channel(false);
    let progress_counts = Arc::new(Progress::default());
    let handshakes = Arc::new(Semaphore::new(clients::MAX_HANDSHAKES));
    let expires = schedule::token_expiry(SystemTime::now());
    let mut tasks = Vec::with_capacity(n);
    for index in 0..n {
        let plan = ClientPlan {
            index,
            first: clients::first_side(index),
            token: token_key.token(&format!("user-{index}"), expires)?,
            recover: arm.recovers(),
        };
        tasks.push(tokio::spawn(clients::run(
            plan,
            targets.clone(),
            t0,
            progress_counts.clone(),
            stop_rx.clone(),
            handshakes.clone(),
        )));
    }
    let n_a = schedule::clients_on_a(n);
    let join_deadline = schedule::join_deadline(t0, n);
    let mut last_line = Instant::now();
    loop {
        check_interrupted()?;
        let joined = progress_counts.joined.load(Ordering::SeqCst);
        let now = Instant::now();
        match schedule::join_wait(joined, n, now, join_deadline, last_line) {
            JoinWait::Done => break,
            JoinWait::TimedOut => bail!(
                "[{name}] only {joined} of {} clients joined the room in time",
                n
            ),
            JoinWait::Progress => {
                progress(format_args!("[{name}] {joined}/{} clients joined", n));
                last_line = now;
            }
            JoinWait::Wait => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    progress(format_args!(
        "[{name}] {} clients joined room {ROOM:?} in {:.1} s ({n_a} on gw-a); streaming {} msg/s through gw-b",
        n,
        t0.elapsed().as_secs_f64(),
        args.rate
    ));
    let (stop_stream, stream_rx) = watch::channel(false);
    let stream = tokio::spawn(stream::run(
        t0,
        b.spec.socket.clone(),
        ROOM.into(),
        args.rate,
        first_seq,
        stream_rx,
    ));
    tokio::time::sleep(WARM_UP).await;

    let etcd = registration::etcd_addr(&shared.etcd)?;
    let key = registration::key(&shared.etcd_prefix, &a.spec.id);
    // A registration that was never there cannot outlive anything: the figure would be a lie.
    schedule::require_registered(registration::present(etcd, &key).await?, name, &key)?;

    // Everything below is timed from the signal.
    // The watch is in place before the signal, so it sees the delete as etcd commits it.
    let watch = match registration::watch(etcd, &key).await {
        Ok(watch) => Some(watch),
        Err(e) => {
            progress(format_args!(
                "[{name}] no etcd watch ({e:#}); polling the registration instead"
            ));
            None
        }
    };
    // Armed before the signal: as soon as the first client of A has its close, etcd is read.
    let (armed, is_armed) = tokio::sync::oneshot::channel();
    let at_first_close = tokio::spawn({
        let progress = progress_counts.clone();
        let key = key.clone();
        let cap = schedule::registration_cap(shared.lease_ttl);
        async move {
            let first_close = progress.closed_on_a.notified();
            tokio::pin!(first_close);
            first_close.as_mut().enable();
            let _ = armed.send(());
            tokio::time::timeout(cap, first_close).await.ok()?;
            schedule::gone_at_read(registration::present(etcd, &key).await)
        }
    });
    is_armed.await.context("arming the first-close read")?;
    let signal_at_ms = schedule::at_ms(t0, Instant::now());
    let since = Instant::now();
    a.signal(arm.signal())?;
    progress(format_args!(
        "[{name}] {} sent to gw-a",
        arm.signal().as_str()
    ));
    let watch_cap = schedule::registration_cap(shared.lease_ttl);
    let registration =
        tokio::spawn(
            async move { registration::until_gone(etcd, &key, watch, since, watch_cap).await },
        );
    let mut exited_at_ms = None;
    loop {
        check_interrupted()?;
        if schedule::exit_newly_seen(exited_at_ms.is_some(), a.exited()) {
            exited_at_ms = Some(schedule::at_ms(t0, Instant::now()));
            progress(format_args!(
                "[{name}] gw-a exited {:.0} ms after the signal",
                schedule::ms(since.elapsed())
            ));
        }
        let moved = progress_counts.moved_to_b.load(Ordering::SeqCst);
        match schedule::move_wait(exited_at_ms.is_some(), moved, n_a, since.elapsed()) {
            MoveWait::Done => {
                progress(format_args!(
                    "[{name}] all {n_a} clients of gw-a are on gw-b, {:.1} s after the signal",
                    since.elapsed().as_secs_f64()
                ));
                break;
            }
            MoveWait::GaveUp => {
                progress(format_args!(
                    "[{name}] gave up waiting: {moved}/{n_a} clients moved, gw-a {}",
                    if exited_at_ms.is_some() {
                        "exited"
                    } else {
                        "still running"
                    }
                ));
                break;
            }
            MoveWait::Wait => {}
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (gone, watched) = registration.await.context("the registration watch")?;
    let gone_at_first_close = at_first_close.await.context("the first-close read")?;
    match gone {
        Some(at) => progress(format_args!(
            "[{name}] gw-a's registration was gone {:.0} ms after the signal",
            schedule::ms(at)
        )),
        None => progress(format_args!(
            "[{name}] gw-a's registration was still there after {:.1} s",
            watched.as_secs_f64()
        )),
    }
    tokio::time::sleep(SETTLE).await;
    let _ = stop_stream.send(true);
    let sent = stream.await.context("the stream task")?;
    // In-flight deliveries land before the clients stop counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_clients.send(true);
    let mut logs = Vec::with_capacity(tasks.len());
    for task in tasks {
        logs.push(task.await.context("a client task")?);
    }
    progress(format_args!(
        "[{name}] stream: {} pushed, {} failed; restarting gw-a",
        sent.accepted.len(),
        sent.errors
    ));
    a.restart().await?;
    let state = a.gateway_state().await.unwrap_or_default();
    progress(format_args!(
        "[{name}] gw-a is back (ready: {})",
        state["ready"]
    ));
    Ok(ArmLog {
        arm,
        signal_at_ms,
        exited_at_ms,
        registration_gone_at_ms: schedule::gone_at_ms(signal_at_ms, gone),
        registration_watched_ms: schedule::ms(watched),
        registration_gone_at_first_close: gone_at_first_close,
        sent: sent.accepted,
        push_errors: sent.errors,
        clients: logs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify bench.no-rebuild+2]
    #[test]
    fn the_node_is_built_without_what_cargo_set_for_running_the_demo() {
        // `cargo test` sets it for this binary, as `cargo run` does for the demo.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let c = build_node_command(Path::new("/w"), false);
        assert!(
            c.get_envs()
                .any(|(name, value)| name == "CARGO_MANIFEST_DIR" && value.is_none()),
            "CARGO_MANIFEST_DIR removed"
        );
    }
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    // i[verify xtask.drain-demo.command+2]
    #[test]
    fn the_command_line_defaults_to_100_clients_and_every_arm() {
        let cli = Cli::try_parse_from(["drain-demo"]).unwrap();
        assert_eq!(cli.args.clients, 100);
        assert_eq!(cli.args.rate, 20);
        assert!(cli.args.arm.is_empty());
        let cli =
            Cli::try_parse_from(["drain-demo", "--clients", "1000", "--arm", "graceful"]).unwrap();
        assert_eq!(cli.args.clients, 1000);
        assert_eq!(cli.args.arm, vec![Arm::Graceful]);
        for bad in ["1", "62501", "x"] {
            assert!(
                Cli::try_parse_from(["drain-demo", "--clients", bad]).is_err(),
                "{bad}"
            );
        }
    }
}
