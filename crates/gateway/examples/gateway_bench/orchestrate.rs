//! `gateway_bench run`: the measurement. Every server and every client fleet is a process of its
//! own, so each one's resident memory and descriptor table are its own:
//!
//! 1. a gateway and a bare server start; their VmRSS is read;
//! 2. a fleet of N clients connects to each (authenticated, in the room); once idle, VmRSS again;
//! 3. broadcast trials, alternating gateway and bare so that load from the rest of the machine
//!    falls on both alike: each trial pushes bursts of `BURST` messages (under the send queue's
//!    depth, so a reading client is never a slow consumer) and waits for the fleet to count them;
//! 4. the gateway drains with every client reading;
//! 5. a fresh gateway and fleet, every tenth client never reading, a short message stream, a
//!    drain.
//!
//! Prints `RESULT {json}` with the raw figures; `cargo xtask bench gateway` derives the summary.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Opts;
use crate::control::Peer;
use crate::proc_stats::{cpu_ms, nofile, rss_bytes};

/// Messages pushed back to back before waiting for the fleet (below `SEND_QUEUE`).
const BURST: usize = 32;
/// Frames a broadcast trial aims to deliver (fewer connections, more rounds).
const FRAMES_PER_TRIAL: usize = 480_000;

struct Server {
    name: &'static str,
    server: Peer,
    clients: Peer,
    reading: u64,
    received: u64,
    slow: u64,
    /// Time the server has spent queueing pushes (microseconds, in total).
    push_us: u64,
    short: u64,
    trials: Vec<Value>,
    rss_before: u64,
    rss_idle: u64,
}

pub async fn run(opts: Opts) -> Result<(), String> {
    let n = opts.connections;
    let limit = nofile();
    if limit < n as u64 + 64 {
        return Err(format!(
            "RLIMIT_NOFILE is {limit}: each process needs N + 64 descriptors (N = {n}); run \
             `cargo xtask bench gateway --connections {n}`, which raises the limit or says what \
             raising it needs"
        ));
    }
    let started = Instant::now();
    let mut gateway = start("gateway", "gateway", &opts, 0, 0).await?;
    let mut bare = start("bare", "bare", &opts, 64, 0).await?;
    let setup = Instant::now();
    let (g, b) = tokio::join!(connected(&mut gateway), connected(&mut bare));
    g?;
    b?;
    let setup_secs = setup.elapsed().as_secs_f64();
    eprintln!("gateway_bench: {n} clients on each server in {setup_secs:.1} s");
    // Let the connection tasks settle into their idle state before reading memory.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for s in [&mut gateway, &mut bare] {
        s.rss_idle = rss_bytes(s.server.pid())?;
    }

    let rounds = FRAMES_PER_TRIAL.div_ceil(n.max(1) * BURST).max(5);
    for trial in 0..opts.trials {
        for s in [&mut gateway, &mut bare] {
            broadcast_trial(s, rounds).await?;
            eprintln!(
                "gateway_bench: trial {trial} {}: {}",
                s.name,
                s.trials.last().unwrap_or(&Value::Null)
            );
        }
    }
    let broadcast = json!({
        "burst": BURST,
        "rounds": rounds,
        "payload_bytes": crate::bare_server::payload().len(),
        "gateway": figures(&gateway),
        "bare": figures(&bare),
    });
    let memory = json!({
        "gateway": {"rss_before": gateway.rss_before, "rss_idle": gateway.rss_idle},
        "bare": {"rss_before": bare.rss_before, "rss_idle": bare.rss_idle},
    });
    bare.server.quit().await;
    bare.clients.quit().await;

    eprintln!("gateway_bench: drain, every client reading");
    let all_reading = drain(gateway, "all_reading").await?;

    eprintln!("gateway_bench: drain, every tenth client not reading");
    let mut second = start("gateway (silent tenth)", "gateway", &opts, 128, 10).await?;
    connected(&mut second).await?;
    // A short message stream before the stop, so the silent clients hold unread frames.
    for _ in 0..4 {
        push_and_wait(&mut second, BURST / 2).await?;
    }
    let silent_tenth = drain(second, "silent_tenth").await?;

    let result = json!({
        "connections": n,
        "nofile": limit,
        "per_source": opts.per_source,
        "send_queue": crate::SEND_QUEUE,
        "read_buffer": crate::READ_BUFFER,
        "setup_secs": setup_secs,
        "memory": memory,
        "broadcast": broadcast,
        "drain": [all_reading, silent_tenth],
        "wall_secs": started.elapsed().as_secs_f64(),
    });
    crate::control::answer(&format!("RESULT {result}"));
    Ok(())
}

/// Starts a server and its client fleet (source block `base`, every `silent_every`th silent).
async fn start(
    name: &'static str,
    mode: &str,
    opts: &Opts,
    base: u32,
    silent_every: usize,
) -> Result<Server, String> {
    let mut server = Peer::spawn(name, mode, &[])?;
    let addr = server.expect("listen").await?;
    // The runtime and listener are up; this is the baseline the connections add to.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_before = rss_bytes(server.pid())?;
    let args: Vec<String> = [
        "--addr".to_owned(),
        addr,
        "--connections".to_owned(),
        opts.connections.to_string(),
        "--silent-every".to_owned(),
        silent_every.to_string(),
        "--source-base".to_owned(),
        base.to_string(),
        "--per-source".to_owned(),
        opts.per_source.to_string(),
    ]
    .into();
    let clients = Peer::spawn(&format!("{name} clients"), "clients", &args)?;
    Ok(Server {
        name,
        server,
        clients,
        reading: 0,
        received: 0,
        slow: 0,
        push_us: 0,
        short: 0,
        trials: Vec::new(),
        rss_before,
        rss_idle: 0,
    })
}

async fn connected(s: &mut Server) -> Result<(), String> {
    let line = s.clients.expect("connected").await?;
    let mut words = line.split_whitespace();
    let total: usize = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
    s.reading = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
    eprintln!(
        "gateway_bench: {}: {total} connected, {} reading",
        s.name, s.reading
    );
    Ok(())
}

/// Pushes `burst` messages and waits until the reading clients have counted them.
async fn push_and_wait(s: &mut Server, burst: usize) -> Result<bool, String> {
    let pushed = s.server.ask(&format!("push {burst}"), "pushed").await?;
    let field = |i: usize| -> u64 {
        pushed
            .split_whitespace()
            .nth(i)
            .and_then(|w| w.parse().ok())
            .unwrap_or(0)
    };
    s.slow = field(1);
    s.push_us = field(2);
    let want = s.received + burst as u64 * s.reading;
    let got: u64 = s
        .clients
        .ask(&format!("wait {want}"), "received")
        .await?
        .parse()
        .map_err(|e| format!("{}: {e}", s.name))?;
    s.received = got;
    if got < want {
        s.short += want - got;
        return Ok(false);
    }
    Ok(true)
}

async fn broadcast_trial(s: &mut Server, rounds: usize) -> Result<(), String> {
    let cpu0 = cpu_ms(s.server.pid())?;
    let push0 = s.push_us;
    let from = s.received;
    let t0 = Instant::now();
    let mut complete = true;
    for _ in 0..rounds {
        if !push_and_wait(s, BURST).await? {
            complete = false;
            break;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_ms(s.server.pid())?.saturating_sub(cpu0);
    let frames = s.received - from;
    s.trials.push(json!({
        "frames": frames,
        "secs": secs,
        "frames_per_sec": frames as f64 / secs.max(1e-9),
        "server_cpu_ms": cpu,
        "push_ms": (s.push_us - push0) / 1000,
        "complete": complete,
    }));
    Ok(())
}

fn figures(s: &Server) -> Value {
    json!({
        "connections": s.reading,
        "trials": s.trials,
        "slow_consumers": s.slow,
        "frames_short": s.short,
    })
}

/// Drains the gateway, then collects how its clients' connections ended.
async fn drain(mut s: Server, arm: &str) -> Result<Value, String> {
    let t0 = Instant::now();
    let report = s.server.ask("drain", "drained").await?;
    let wall_ms = t0.elapsed().as_millis() as u64;
    let report: Value = serde_json::from_str(&report).map_err(|e| format!("drain report: {e}"))?;
    let closes = s.clients.ask("closes 10000", "closes").await?;
    let closes: Value = serde_json::from_str(&closes).map_err(|e| format!("closes: {e}"))?;
    s.server.quit().await;
    s.clients.quit().await;
    Ok(json!({
        "arm": arm,
        "wall_ms": wall_ms,
        "clients": closes,
        "report": report,
    }))
}
