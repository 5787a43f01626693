//! A hand-driven peer on a bare quinn connection: what the node does with requests before
//! authentication and with malformed datagrams and frames.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use holdfast_forward::control::{self, FrameDecoder, Message, Refusal};
use holdfast_forward::identity::SERVER_NAME;

struct Raw {
    conn: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    decoder: FrameDecoder,
    _endpoint: quinn::Endpoint,
}

// Test harness code: a broken setup should stop the test loudly.
#[allow(clippy::expect_used)]
impl Raw {
    async fn connect(server: &holdfast_forward::Server) -> Raw {
        let (config, _) = holdfast_forward::client::quinn_client_config(
            server.fingerprint(),
            Duration::from_secs(5),
        )
        .expect("client config");
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

    async fn send_frame(&mut self, bytes: &[u8]) {
        self.send.write_all(bytes).await.expect("write");
    }

    async fn next(&mut self) -> Message {
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

// r[verify forward.auth]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_before_authentication_is_refused_and_nothing_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    let target = echo().await;
    let mut raw = Raw::connect(&server).await;
    raw.send_frame(&control::encode(&Message::Open {
        forward: 1,
        target: target.addr,
    }))
    .await;
    match raw.next().await {
        Message::Refused {
            forward: 0,
            refusal: Refusal::NotAuthenticated,
            ..
        } => {}
        other => panic!("expected NotAuthenticated, got {other:?}"),
    }
    let closed = tokio::time::timeout(WAIT, raw.conn.closed())
        .await
        .expect("closed");
    assert!(closed.to_string().contains("authenticate"), "{closed}");
    assert!(server.forwards().is_empty());
}

// r[verify forward.codec.malformed]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_datagrams_and_frames_are_counted_and_dropped_and_the_connection_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = server(dir.path()).await;
    let target = echo().await;
    let mut raw = Raw::connect(&server).await;
    raw.send_frame(&control::encode(&Message::Hello {
        credential: TOKEN.as_bytes().to_vec(),
    }))
    .await;
    assert_eq!(raw.next().await, Message::Welcome);

    // A truncated header, and a datagram for a forward that is not open.
    raw.conn
        .send_datagram(Bytes::from_static(&[0x40]))
        .expect("send");
    raw.conn
        .send_datagram(Bytes::from_static(&[0x09, 0x00, b'x']))
        .expect("send");
    eventually("both counted", || {
        let u = server.unattributed();
        u.dropped.malformed >= 1 && u.dropped.unknown_forward >= 1
    })
    .await;

    // An unknown message type and a frame of another version; then a real request.
    raw.send_frame(&[0, 0, 0, 2, control::VERSION, 0x7f]).await;
    raw.send_frame(&[0, 0, 0, 2, 99, 0x02]).await;
    raw.send_frame(&control::encode(&Message::Open {
        forward: 1,
        target: target.addr,
    }))
    .await;
    assert_eq!(raw.next().await, Message::Opened { forward: 1 });
    assert!(server.unattributed().dropped.malformed >= 3);

    // The forward relays: one datagram out, its echo back.
    raw.conn
        .send_datagram(Bytes::from_static(&[0x01, 0x00, b'h', b'i']))
        .expect("send");
    let reply = tokio::time::timeout(WAIT, raw.conn.read_datagram())
        .await
        .expect("reply in time")
        .expect("datagram");
    assert_eq!(&reply[..], &[0x01, 0x00, b'h', b'i']);
}
