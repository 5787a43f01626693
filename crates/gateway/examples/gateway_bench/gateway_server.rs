//! `gateway_bench gateway`: a holdfast gateway on a loopback port, with the memory registry and
//! routing map, driven by the orchestrator's commands:
//!
//! - `push B` → pushes B messages to the room, answers `pushed QUEUED SLOW PUSH_US` (totals so far;
//!   PUSH_US is the time spent queueing, in microseconds);
//! - `drain` → drains (a restart, default 5 s cap), answers `drained {DrainReport}`;
//! - `quit` (or end of input) → exits.

use std::sync::Arc;
use std::time::Duration;

use holdfast_gateway::{Gateway, GatewayConfig, MemoryRegistry, MemoryRouting, TokenKey};
use holdfast_lifecycle::StopReason;

use crate::control::{answer, stdin_lines};

pub async fn run() -> Result<(), String> {
    let mut config = GatewayConfig::new(
        "127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .map_err(|e| e.to_string())?,
        "bench",
        TokenKey::new(crate::SECRET.to_vec()),
    );
    config.send_queue = crate::SEND_QUEUE;
    config.read_buffer = crate::READ_BUFFER;
    // Clients are idle between phases: the bench measures memory and broadcast, not keep-alive.
    config.idle_timeout = Duration::from_secs(3600);
    config.auth_timeout = Duration::from_secs(120);
    config.handshake_timeout = Duration::from_secs(120);
    // The clients share a loopback address per `--per-source` (200) and connect together: the
    // bench measures memory and broadcast, not the per-source cap on unauthenticated ones.
    config.unauthenticated_per_ip_limit = 0;
    let gateway = Gateway::start(
        config,
        Arc::new(MemoryRegistry::new()),
        Arc::new(MemoryRouting::new()),
    )
    .await
    .map_err(|e| e.to_string())?;
    answer(&format!("listen {}", gateway.local_addr()));
    let payload = crate::bare_server::payload();
    let mut lines = stdin_lines();
    let (mut queued, mut slow, mut push_us) = (0usize, 0usize, 0u128);
    while let Some(line) = lines.recv().await {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("push") => {
                let n: usize = words.next().and_then(|w| w.parse().ok()).unwrap_or(1);
                let t0 = std::time::Instant::now();
                for _ in 0..n {
                    let d = gateway.push_room_local(crate::ROOM, &payload);
                    queued += d.queued;
                    slow += d.slow_consumers;
                }
                push_us += t0.elapsed().as_micros();
                answer(&format!("pushed {queued} {slow} {push_us}"));
            }
            Some("drain") => {
                let report = gateway.drain(StopReason::Restart, None).await;
                let json = serde_json::to_string(&report).map_err(|e| e.to_string())?;
                answer(&format!("drained {json}"));
            }
            Some("quit") => break,
            _ => answer(&format!("error unknown command {line:?}")),
        }
    }
    Ok(())
}
