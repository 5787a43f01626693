//! The demo's WebSocket clients: each authenticates with a token signed by the shared key, joins
//! the room, counts the stream's messages, and — when its connection to A ends — reconnects to B
//! after the close frame's reconnect hint (1012) or the fallback back-off, as a real client would.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures_util::{SinkExt as _, StreamExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use super::measures::{ClientLog, Close, Side};

type Ws = WebSocketStream<TcpStream>;

/// Longest a connect, the authentication or the join may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// Without a hint, clients come back after this, spread like the gateway's own hints (so both
/// arms reconnect on the same schedule and differ only in what the server says).
const FALLBACK_MIN: Duration = Duration::from_millis(500);
/// The spread of the fallback back-off over clients.
const FALLBACK_SPREAD_MS: u64 = 2000;

/// At most this many client handshakes run at once: a thousand at once only time each other out.
// i[impl xtask.drain-demo.scale+2]
pub const MAX_HANDSHAKES: usize = 64;

/// Where the clients connect.
#[derive(Debug, Clone)]
pub struct Targets {
    /// Replica A's gateway.
    pub a: SocketAddr,
    /// Replica B's gateway.
    pub b: SocketAddr,
    /// The room every client joins.
    pub room: String,
}

impl Targets {
    fn addr(&self, side: Side) -> SocketAddr {
        match side {
            Side::A => self.a,
            Side::B => self.b,
        }
    }
}

/// One client's identity.
#[derive(Debug, Clone)]
pub struct ClientPlan {
    /// Its index (its user is `user-INDEX`).
    pub index: usize,
    /// The replica it starts on.
    pub first: Side,
    /// Its signed token.
    pub token: String,
    /// Whether it rejoins with `since` (the recovery arm).
    pub recover: bool,
}

/// Replicas alternate over the clients, so each gets half.
// i[impl xtask.drain-demo.arms+2]
pub fn first_side(index: usize) -> Side {
    if index % 2 == 0 { Side::A } else { Side::B }
}

/// The loopback source address of client `index`: each client has its own address in 127.0.0.0/8
/// (up to 62,500 clients), as clients in the field do, so the gateway's per-IP limit never binds
/// on one address holding them all.
pub fn source_ip(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(
        127,
        0,
        1 + (index / 250 % 250) as u8,
        1 + (index % 250) as u8,
    )
}

/// How long a client waits before reconnecting after its connection ended with `code` and
/// `reason`: the hint of a 1012 close frame, else the fallback back-off spread by index.
// i[impl xtask.drain-demo.arms+2]
pub fn reconnect_delay(code: Option<u16>, reason: &str, index: usize) -> Duration {
    if code == Some(1012)
        && let Ok(hint) = serde_json::from_str::<serde_json::Value>(reason)
        && let Some(ms) = hint["reconnect_in_ms"].as_u64()
    {
        return Duration::from_millis(ms);
    }
    // A multiplicative hash spreads neighbouring indices apart.
    FALLBACK_MIN
        + Duration::from_millis((index as u64).wrapping_mul(2_654_435_761) % FALLBACK_SPREAD_MS)
}

/// Counters the run watches to know when a phase is over.
#[derive(Debug, Default)]
pub struct Progress {
    /// Clients whose first session has joined the room.
    pub joined: AtomicUsize,
    /// Clients of A that have joined the room again on B.
    pub moved_to_b: AtomicUsize,
    /// Woken whenever a connection to A ends (its close received, or its error).
    pub closed_on_a: tokio::sync::Notify,
}

/// How a session ended.
enum Ending {
    /// The run asked the client to stop.
    Stop,
    /// The connection ended: the close frame's code (`None`: no frame) and reason.
    Closed(Option<u16>, String),
}

/// Runs one client until `stop` turns true; returns what it saw.
pub async fn run(
    plan: ClientPlan,
    targets: Arc<Targets>,
    t0: Instant,
    progress: Arc<Progress>,
    mut stop: watch::Receiver<bool>,
    handshakes: Arc<Semaphore>,
) -> ClientLog {
    let mut log = ClientLog {
        first: plan.first,
        joined: Vec::new(),
        closes: Vec::new(),
        seqs: Vec::new(),
        survivor_frames: 0,
        last_pos: None,
        gaps: 0,
    };
    let mut side = plan.first;
    let mut delay = Duration::ZERO;
    loop {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|s| *s) => return log,
        }
        let session = {
            // Bounded concurrent handshakes: a thousand at once only time each other out.
            let _permit = handshakes.acquire().await;
            tokio::select! {
                s = session(&targets, side, &plan, &mut log) => s,
                _ = stop.wait_for(|s| *s) => return log,
            }
        };
        let mut ws = match session {
            Ok(ws) => ws,
            Err(_) => {
                // A refused or failed connect: the replica is not there (yet); try B soon.
                side = Side::B;
                delay = Duration::from_millis(200);
                continue;
            }
        };
        log.joined.push((ms(t0), side));
        if log.joined.len() == 1 {
            progress.joined.fetch_add(1, Ordering::SeqCst);
        } else if plan.first == Side::A
            && side == Side::B
            && log.joined.iter().filter(|j| j.1 == Side::B).count() == 1
        {
            progress.moved_to_b.fetch_add(1, Ordering::SeqCst);
        }
        match read(&mut ws, side, &plan, &mut log, &mut stop).await {
            Ending::Stop => {
                // The client leaves cleanly; a server already gone is no error here.
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    let _ = ws.close(None).await;
                    while let Some(Ok(_)) = ws.next().await {}
                })
                .await;
                return log;
            }
            Ending::Closed(code, reason) => {
                if side == Side::A {
                    progress.closed_on_a.notify_waiters();
                }
                log.closes.push(Close {
                    at_ms: ms(t0),
                    side,
                    code,
                });
                delay = reconnect_delay(code, &reason, plan.index);
                // Clients of A come back on B: the survivor is the cluster's other replica.
                side = Side::B;
            }
        }
    }
}

/// The milliseconds since `t0`, as the log records them.
fn ms(t0: Instant) -> f64 {
    super::schedule::at_ms(t0, Instant::now())
}

/// Connects from the client's source address, authenticates and joins the room.
async fn session(
    targets: &Targets,
    side: Side,
    plan: &ClientPlan,
    log: &mut ClientLog,
) -> anyhow::Result<Ws> {
    let addr = targets.addr(side);
    let work = async {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::V4(SocketAddrV4::new(source_ip(plan.index), 0)))?;
        let tcp = socket.connect(addr).await?;
        let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp).await?;
        let auth = serde_json::json!({"type": "auth", "token": plan.token});
        ws.send(Message::Text(auth.to_string().into())).await?;
        until_ack(&mut ws, "authenticated", side, plan, log).await?;
        let mut join = serde_json::json!({"type": "join", "room": targets.room});
        // The recovery arm's clients ask for what they missed since their last message.
        if plan.recover
            && let Some(pos) = &log.last_pos
        {
            join["since"] = serde_json::Value::from(pos.as_str());
        }
        ws.send(Message::Text(join.to_string().into())).await?;
        until_ack(&mut ws, "joined", side, plan, log).await?;
        anyhow::Ok(ws)
    };
    tokio::time::timeout(STEP_TIMEOUT, work)
        .await
        .context("session setup timed out")?
}

/// Reads until a `{"type": kind}` acknowledgement (stream frames before it are counted).
async fn until_ack(
    ws: &mut Ws,
    kind: &str,
    side: Side,
    plan: &ClientPlan,
    log: &mut ClientLog,
) -> anyhow::Result<()> {
    while let Some(msg) = ws.next().await {
        match msg? {
            Message::Text(text) if !count(text.as_str(), side, plan, log) => {
                let v: serde_json::Value = serde_json::from_str(text.as_str())?;
                if v["type"] == kind {
                    if v["gap"] == true {
                        log.gaps += 1;
                    }
                    return Ok(());
                }
            }
            Message::Close(frame) => bail!("closed before {kind}: {frame:?}"),
            _ => {}
        }
    }
    bail!("connection ended before {kind}")
}

/// Records a stream message (`{"seq":N}`, with the room and position the gateway puts first:
/// `{"room":R,"pos":P,"seq":N}`); false for anything else.
fn count(text: &str, side: Side, plan: &ClientPlan, log: &mut ClientLog) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
        return false;
    };
    let Some(seq) = v["seq"].as_u64() else {
        return false;
    };
    if let Some(pos) = v["pos"].as_str() {
        log.last_pos = Some(pos.to_owned());
    }
    log.seqs.push(seq);
    if plan.first == Side::A && side == Side::B {
        log.survivor_frames += 1;
    }
    true
}

/// Reads stream messages until the connection ends or the run stops the client.
async fn read(
    ws: &mut Ws,
    side: Side,
    plan: &ClientPlan,
    log: &mut ClientLog,
    stop: &mut watch::Receiver<bool>,
) -> Ending {
    let mut close: Option<(Option<u16>, String)> = None;
    loop {
        let msg = tokio::select! {
            m = ws.next() => m,
            _ = stop.wait_for(|s| *s) => return Ending::Stop,
        };
        match msg {
            Some(Ok(Message::Text(text))) => {
                count(text.as_str(), side, plan, log);
            }
            // tungstenite answers the close frame; the stream then ends. 1005: a frame without a code.
            Some(Ok(Message::Close(frame))) => {
                close = Some(match frame {
                    Some(f) => (Some(u16::from(f.code)), f.reason.as_str().to_owned()),
                    None => (Some(1005), String::new()),
                });
            }
            Some(Ok(_)) => {}
            // An error or the end: the close frame seen before it, if any, says how it ended.
            Some(Err(_)) | None => {
                let (code, reason) = close.unwrap_or((None, String::new()));
                return Ending::Closed(code, reason);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify xtask.drain-demo.arms+2]
    #[test]
    fn a_restart_close_is_followed_by_its_hint_and_anything_else_by_the_fallback() {
        assert_eq!(
            reconnect_delay(Some(1012), r#"{"reconnect_in_ms":1234}"#, 7),
            Duration::from_millis(1234)
        );
        for (code, reason) in [
            (None, ""),
            (Some(1001), ""),
            (Some(1012), "not json"),
            (Some(1001), r#"{"reconnect_in_ms":1}"#),
        ] {
            let d = reconnect_delay(code, reason, 7);
            assert!(
                d >= FALLBACK_MIN && d < FALLBACK_MIN + Duration::from_millis(FALLBACK_SPREAD_MS),
                "{code:?} {reason}: {d:?}"
            );
        }
        // Spread over clients, not one instant.
        let distinct: std::collections::HashSet<_> =
            (0..100).map(|i| reconnect_delay(None, "", i)).collect();
        assert!(distinct.len() > 50);
    }

    // i[verify xtask.drain-demo.arms+2]
    #[test]
    fn clients_alternate_over_the_replicas_and_spread_over_source_addresses() {
        let sides: Vec<Side> = (0..4).map(first_side).collect();
        assert_eq!(sides, [Side::A, Side::B, Side::A, Side::B]);
        let on_a = (0..1000).filter(|&i| first_side(i) == Side::A).count();
        assert_eq!(on_a, 500);
        let ips: std::collections::HashSet<_> = (0..1000).map(source_ip).collect();
        assert_eq!(ips.len(), 1000);
        assert!(ips.iter().all(|ip| ip.is_loopback()));
    }

    /// A gateway on a loopback port, single node.
    async fn gateway(id: &str, key: &holdfast_gateway::TokenKey) -> holdfast_gateway::Gateway {
        let config =
            holdfast_gateway::GatewayConfig::new("127.0.0.1:0".parse().unwrap(), id, key.clone());
        holdfast_gateway::Gateway::start(
            config,
            Arc::new(holdfast_gateway::MemoryRegistry::new()),
            Arc::new(holdfast_gateway::MemoryRouting::new()),
        )
        .await
        .unwrap()
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    // i[verify xtask.drain-demo.arms+2]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_of_a_drained_replica_takes_the_hint_and_moves_to_the_other() {
        const SECRET: &[u8] = b"demo secret 0123456789";
        let key = holdfast_gateway::TokenKey::new(SECRET.to_vec());
        let (a, b) = (gateway("a", &key).await, gateway("b", &key).await);
        let targets = Arc::new(Targets {
            a: a.local_addr(),
            b: b.local_addr(),
            room: "r".into(),
        });
        let progress = Arc::new(Progress::default());
        let (stop, stop_rx) = watch::channel(false);
        let t0 = Instant::now();
        let plan = ClientPlan {
            index: 0,
            first: Side::A,
            token: holdfast_gateway::Signer::new(SECRET)
                .token(
                    "user-0",
                    std::time::SystemTime::now() + Duration::from_secs(60),
                )
                .unwrap(),
            recover: false,
        };
        let client = tokio::spawn(run(
            plan,
            targets,
            t0,
            progress.clone(),
            stop_rx,
            Arc::new(Semaphore::new(MAX_HANDSHAKES)),
        ));
        until("the join", || progress.joined.load(Ordering::SeqCst) == 1).await;
        a.push_room_local("r", "{\"seq\":1}");
        let drained_at = t0.elapsed();
        let report = a.drain(holdfast_lifecycle::StopReason::Restart, None).await;
        assert_eq!(report.code, 1012);
        until("the move to b", || {
            progress.moved_to_b.load(Ordering::SeqCst) == 1
        })
        .await;
        let moved_after = t0.elapsed() - drained_at;
        b.push_room_local("r", "{\"seq\":2}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.send(true).unwrap();
        let log = client.await.unwrap();

        assert_eq!(log.closes.len(), 1, "{log:?}");
        assert_eq!(
            (log.closes[0].side, log.closes[0].code),
            (Side::A, Some(1012))
        );
        assert_eq!(
            log.joined.iter().map(|j| j.1).collect::<Vec<_>>(),
            vec![Side::A, Side::B]
        );
        assert_eq!(log.seqs, vec![1, 2]);
        assert_eq!(log.survivor_frames, 1);
        // It waited for the hint (at least the gateway's 500 ms minimum) before reconnecting.
        assert!(moved_after >= Duration::from_millis(500), "{moved_after:?}");
    }

    #[test]
    fn stream_messages_are_counted_and_acks_are_not() {
        let plan = ClientPlan {
            index: 0,
            first: Side::A,
            token: String::new(),
            recover: false,
        };
        let mut log = ClientLog {
            first: Side::A,
            joined: vec![],
            closes: vec![],
            seqs: vec![],
            survivor_frames: 0,
            last_pos: None,
            gaps: 0,
        };
        assert!(count("{\"seq\":41}", Side::A, &plan, &mut log));
        assert!(count(
            r#"{"room":"r","pos":"7-2","seq":42}"#,
            Side::B,
            &plan,
            &mut log
        ));
        assert_eq!(log.last_pos.as_deref(), Some("7-2"));
        assert!(!count(
            r#"{"type":"joined","room":"r"}"#,
            Side::B,
            &plan,
            &mut log
        ));
        assert_eq!(log.seqs, vec![41, 42]);
        assert_eq!(log.survivor_frames, 1);
    }

    // i[verify xtask.drain-demo.arms+2]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recovering_client_rejoins_with_since_and_gets_what_came_in_its_gap() {
        const SECRET: &[u8] = b"demo secret 0123456789";
        let key = holdfast_gateway::TokenKey::new(SECRET.to_vec());
        // Two replicas sharing a bus and one history, as two nodes on one Redis do.
        let bus = holdfast_gateway::MemoryBus::new();
        let history: Arc<dyn holdfast_gateway::History> =
            Arc::new(holdfast_gateway::MemoryHistory::new());
        let replica = |id: &str| {
            let config = holdfast_gateway::GatewayConfig::new(
                "127.0.0.1:0".parse().unwrap(),
                id,
                key.clone(),
            );
            let cluster = holdfast_gateway::Cluster {
                registry: Arc::new(holdfast_gateway::MemoryRegistry::new()),
                routing: Arc::new(holdfast_gateway::MemoryRouting::new()),
                bus: Arc::new(bus.clone()),
                seed: None,
                history: Some(history.clone()),
            };
            holdfast_gateway::Gateway::start_cluster(config, cluster)
        };
        let (a, b) = (replica("a").await.unwrap(), replica("b").await.unwrap());
        let targets = Arc::new(Targets {
            a: a.local_addr(),
            b: b.local_addr(),
            room: "r".into(),
        });
        let progress = Arc::new(Progress::default());
        let (stop, stop_rx) = watch::channel(false);
        let plan = ClientPlan {
            index: 0,
            first: Side::A,
            token: holdfast_gateway::Signer::new(SECRET)
                .token(
                    "user-0",
                    std::time::SystemTime::now() + Duration::from_secs(60),
                )
                .unwrap(),
            recover: true,
        };
        let client = tokio::spawn(run(
            plan,
            targets,
            Instant::now(),
            progress.clone(),
            stop_rx,
            Arc::new(Semaphore::new(MAX_HANDSHAKES)),
        ));
        until("the join", || progress.joined.load(Ordering::SeqCst) == 1).await;
        a.push_room("r", "{\"seq\":1}").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        a.drain(holdfast_lifecycle::StopReason::Restart, None).await;
        // Published while the client waits out its hint: it is in no room anywhere.
        b.push_room("r", "{\"seq\":2}").await;
        until("the move to b", || {
            progress.moved_to_b.load(Ordering::SeqCst) == 1
        })
        .await;
        b.push_room("r", "{\"seq\":3}").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.send(true).unwrap();
        let log = client.await.unwrap();
        assert_eq!(log.seqs, vec![1, 2, 3], "{log:?}");
        assert_eq!(log.gaps, 0);
    }
}
