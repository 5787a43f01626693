//! Loopback harness: a node, a client, UDP targets, and waiting for events.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use holdfast_forward::client::{ClientConfig, ClientEvent, ForwardSpec, Forwarding};
use holdfast_forward::control::{self, FrameDecoder, Message};
use holdfast_forward::identity::SERVER_NAME;
use holdfast_forward::{AllowList, Credential, Server, ServerConfig};
use holdfast_retry::{Jitter, Policy};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

pub const TOKEN: &str = "test-token-7f3a";
pub const WAIT: Duration = Duration::from_secs(10);

pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

pub fn server_config(dir: &std::path::Path, listen: SocketAddr) -> ServerConfig {
    let mut config = ServerConfig::new(listen, dir);
    config.credentials = vec![Credential::new(TOKEN)];
    config.allow = AllowList::parse(["127.0.0.1:1024-65535"]).expect("allow-list");
    config.idle_timeout = Duration::from_secs(2);
    config.report_interval = Duration::from_millis(1);
    config
}

pub async fn server(dir: &std::path::Path) -> Server {
    holdfast_forward::start(server_config(dir, loopback()))
        .await
        .expect("server starts")
}

pub fn fast_reconnect() -> Policy {
    Policy::builder()
        .base(Duration::from_millis(100))
        .cap(Duration::from_millis(800))
        .jitter(Jitter::None)
        .build()
        .expect("policy")
}

pub fn client_config(server: &Server, targets: &[SocketAddr]) -> ClientConfig {
    let mut config = ClientConfig::new(
        server.local_addr().expect("server addr"),
        server.fingerprint(),
        Credential::new(TOKEN),
    );
    config.forwards = targets
        .iter()
        .map(|target| ForwardSpec {
            local: loopback(),
            target: *target,
        })
        .collect();
    config.reconnect = fast_reconnect();
    config.must_last = Duration::from_millis(300);
    config.idle_timeout = Duration::from_secs(2);
    config.connect_timeout = Duration::from_secs(2);
    config.report_interval = Duration::from_millis(1);
    config
}

/// Waits for the first event matching `want`, returning it (panics after `WAIT`).
pub async fn expect(
    client: &mut Forwarding,
    what: &str,
    want: impl Fn(&ClientEvent) -> bool,
) -> ClientEvent {
    let found = tokio::time::timeout(WAIT, async {
        loop {
            match client.next_event().await {
                Some(event) if want(&event) => return event,
                Some(_) => {}
                None => panic!("client ended while waiting for {what}"),
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no {what} within {WAIT:?}"))
}

pub async fn opened(client: &mut Forwarding, forwards: usize) {
    for _ in 0..forwards {
        expect(client, "Opened", |e| {
            matches!(e, ClientEvent::Opened { .. })
        })
        .await;
    }
}

/// A UDP target that echoes each datagram; `big:N` is answered with N bytes instead.
pub struct Echo {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn echo_on(addr: SocketAddr) -> Echo {
    let socket = UdpSocket::bind(addr).await.expect("bind echo");
    let addr = socket.local_addr().expect("echo addr");
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        loop {
            let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
                continue;
            };
            let reply = match std::str::from_utf8(&buf[..n])
                .ok()
                .and_then(|s| s.strip_prefix("big:"))
            {
                Some(len) => vec![b'B'; len.parse().unwrap_or(0)],
                None => buf[..n].to_vec(),
            };
            let _ = socket.send_to(&reply, peer).await;
        }
    });
    Echo { addr, task }
}

pub async fn echo() -> Echo {
    echo_on(loopback()).await
}

/// A local peer of a forward.
pub async fn peer() -> UdpSocket {
    UdpSocket::bind(loopback()).await.expect("bind peer")
}

/// Sends `payload` to `to` until a reply arrives (UDP may lose one); returns the reply.
pub async fn round_trip(peer: &UdpSocket, to: SocketAddr, payload: &[u8]) -> Vec<u8> {
    try_round_trip(peer, to, payload, 20)
        .await
        .unwrap_or_else(|| panic!("no reply to {} bytes", payload.len()))
}

pub async fn try_round_trip(
    peer: &UdpSocket,
    to: SocketAddr,
    payload: &[u8],
    tries: usize,
) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 65_536];
    for _ in 0..tries {
        peer.send_to(payload, to).await.expect("peer send");
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_millis(250), peer.recv_from(&mut buf)).await
        {
            return Some(buf[..n].to_vec());
        }
    }
    None
}

/// Polls `cond` (every 20 ms, up to `WAIT`): for state another task changes.
pub async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not {what} within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A hand-driven peer on a bare quinn connection: it sends whatever frames a test likes, when it
/// likes, and reads the node's answers itself.
pub struct Raw {
    pub conn: quinn::Connection,
    pub send: quinn::SendStream,
    pub recv: quinn::RecvStream,
    pub decoder: FrameDecoder,
    pub _endpoint: quinn::Endpoint,
}

impl Raw {
    /// Connected, with its control stream open, before any Hello.
    pub async fn connect(server: &Server) -> Raw {
        Raw::connect_with(server, |_| {}).await
    }

    /// The same, on the client's transport settings as `adjust` changed them.
    pub async fn connect_with(
        server: &Server,
        adjust: impl FnOnce(&mut quinn::TransportConfig),
    ) -> Raw {
        let idle = Duration::from_secs(5);
        let (mut config, _) =
            holdfast_forward::client::quinn_client_config(server.fingerprint(), idle)
                .expect("client config");
        let mut transport =
            std::sync::Arc::try_unwrap(holdfast_forward::transport::transport_config(idle))
                .expect("a configuration of our own");
        adjust(&mut transport);
        config.transport_config(std::sync::Arc::new(transport));
        let endpoint = quinn::Endpoint::client(loopback()).expect("endpoint");
        let conn = endpoint
            .connect_with(config, server.local_addr().expect("addr"), SERVER_NAME)
            .expect("connect")
            .await
            .expect("handshake");
        let (send, recv) = conn.open_bi().await.expect("control stream");
        Raw {
            conn,
            send,
            recv,
            decoder: FrameDecoder::new(),
            _endpoint: endpoint,
        }
    }

    /// A connection that has presented `token`: with the node's answer.
    pub async fn hello(server: &Server, token: &str) -> (Raw, Message) {
        let mut raw = Raw::connect(server).await;
        raw.request(Message::Hello {
            credential: token.as_bytes().to_vec(),
        })
        .await;
        let answer = raw.next().await;
        (raw, answer)
    }

    /// Authenticated with [`TOKEN`].
    pub async fn authenticated(server: &Server) -> Raw {
        let (raw, answer) = Raw::hello(server, TOKEN).await;
        assert_eq!(answer, Message::Welcome);
        raw
    }

    pub async fn send_frame(&mut self, bytes: &[u8]) {
        self.send.write_all(bytes).await.expect("write");
    }

    pub async fn request(&mut self, message: Message) {
        self.send_frame(&control::encode(&message)).await;
    }

    /// The node's next message (within [`WAIT`]).
    pub async fn next(&mut self) -> Message {
        let mut buf = [0u8; 4096];
        loop {
            if let Some(next) = self.decoder.next_message() {
                return next.expect("well-formed frame from the node");
            }
            let n = tokio::time::timeout(WAIT, self.recv.read(&mut buf))
                .await
                .expect("answer in time")
                .expect("read")
                .expect("stream open");
            self.decoder.push(&buf[..n]);
        }
    }
}
