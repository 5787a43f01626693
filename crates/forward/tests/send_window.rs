//! The node's send window, pushed past: a peer with enormous receive windows that never reads
//! and never acknowledges cannot make the node keep more than `SEND_WINDOW` of its own writes.
//! A real node's peer acknowledges whatever its window takes, so the quinn endpoints are driven
//! by hand here: after the handshake, nothing the client sends reaches the node.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use holdfast_forward::identity::SERVER_NAME;
use holdfast_forward::server::quinn_server_config;
use holdfast_forward::transport::SEND_WINDOW;
use quinn_proto::{
    Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig, StreamId, VarInt,
    WriteError,
};

struct Side {
    endpoint: Endpoint,
    addr: SocketAddr,
    conns: HashMap<ConnectionHandle, Connection>,
}

// Test harness code: a broken setup should stop the test loudly.
#[allow(clippy::expect_used)]
impl Side {
    /// Every datagram this side's connections want to send now, with where it goes.
    fn outgoing(&mut self, now: Instant) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut out = Vec::new();
        for conn in self.conns.values_mut() {
            let mut buf = Vec::new();
            while let Some(t) = conn.poll_transmit(now, 1, &mut buf) {
                out.push((t.destination, buf[..t.size].to_vec()));
                buf.clear();
            }
        }
        out
    }

    /// Takes one datagram from `from`; a new attempt is accepted at once.
    fn incoming(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &[u8],
    ) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut answer = Vec::new();
        let mut replies = Vec::new();
        match self
            .endpoint
            .handle(now, from, None, None, BytesMut::from(data), &mut answer)
        {
            Some(DatagramEvent::NewConnection(incoming)) => {
                let (ch, conn) = self
                    .endpoint
                    .accept(incoming, now, &mut answer, None)
                    .expect("accepted");
                self.conns.insert(ch, conn);
            }
            Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                if let Some(conn) = self.conns.get_mut(&ch) {
                    conn.handle_event(event);
                }
            }
            Some(DatagramEvent::Response(t)) => {
                replies.push((t.destination, answer[..t.size].to_vec()))
            }
            None => {}
        }
        // What the connections tell their endpoint, and its answers.
        for (ch, conn) in &mut self.conns {
            while let Some(event) = conn.poll_endpoint_events() {
                if let Some(back) = self.endpoint.handle_event(*ch, event) {
                    conn.handle_event(back);
                }
            }
        }
        replies
    }
}

/// Delivers datagrams both ways until neither side has anything to send (`client_to_node`
/// false: the client's datagrams are lost).
fn pump(client: &mut Side, node: &mut Side, now: Instant, client_to_node: bool) {
    for _ in 0..100 {
        let mut moved = false;
        for (to, data) in client.outgoing(now) {
            moved = true;
            if client_to_node && to == node.addr {
                for (back, reply) in node.incoming(now, client.addr, &data) {
                    if back == client.addr {
                        client.incoming(now, node.addr, &reply);
                    }
                }
            }
        }
        for (to, data) in node.outgoing(now) {
            moved = true;
            if to == client.addr {
                client.incoming(now, node.addr, &data);
            }
        }
        if !moved {
            return;
        }
    }
}

// Test harness code: a broken setup should stop the test loudly.
#[allow(clippy::expect_used)]
// r[verify forward.limits.windows]
#[test]
fn a_peer_that_never_reads_nor_acknowledges_gets_no_more_than_the_send_window_buffered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let identity =
        holdfast_forward::Identity::load_or_create(dir.path()).expect("the node's identity");
    let idle = Duration::from_secs(15);
    let server_config = quinn_server_config(&identity, idle).expect("server config");
    let mut node = Side {
        endpoint: Endpoint::new(
            Arc::new(EndpointConfig::default()),
            Some(Arc::new(server_config)),
            true,
            Some([7; 32]),
        ),
        addr: "127.0.0.1:4433".parse().expect("addr"),
        conns: HashMap::new(),
    };
    // The hostile client offers windows far beyond the node's send window: flow control would
    // let the node send megabytes.
    let (mut client_config, _) =
        holdfast_forward::client::quinn_client_config(identity.fingerprint(), idle)
            .expect("client config");
    let mut transport = Arc::try_unwrap(holdfast_forward::transport::transport_config(idle))
        .expect("a configuration of our own");
    transport
        .stream_receive_window(VarInt::from_u32(64 << 20))
        .receive_window(VarInt::from_u32(64 << 20));
    client_config.transport_config(Arc::new(transport));
    let mut client = Side {
        endpoint: Endpoint::new(
            Arc::new(EndpointConfig::default()),
            None,
            true,
            Some([9; 32]),
        ),
        addr: "127.0.0.2:50000".parse().expect("addr"),
        conns: HashMap::new(),
    };
    let mut now = Instant::now();
    let (ch, conn) = client
        .endpoint
        .connect(now, client_config, node.addr, SERVER_NAME)
        .expect("connect");
    client.conns.insert(ch, conn);
    for _ in 0..20 {
        pump(&mut client, &mut node, now, true);
        now += Duration::from_millis(10);
    }
    let client_conn = client.conns.get_mut(&ch).expect("client connection");
    assert!(!client_conn.is_handshaking(), "the handshake completed");
    // The client opens its control stream; the node takes it.
    let stream: StreamId = client_conn
        .streams()
        .open(Dir::Bi)
        .expect("the control stream");
    client_conn
        .send_stream(stream)
        .write(b"hello")
        .expect("write");
    pump(&mut client, &mut node, now, true);
    let node_conn = node
        .conns
        .values_mut()
        .next()
        .expect("the node's connection");
    let accepted = node_conn
        .streams()
        .accept(Dir::Bi)
        .expect("the node takes the stream");
    // From now on nothing of the client's reaches the node: no acknowledgement, ever.
    let mut written = 0usize;
    let chunk = vec![0u8; 16 << 10];
    for _ in 0..1_000 {
        let node_conn = node
            .conns
            .values_mut()
            .next()
            .expect("the node's connection");
        match node_conn.send_stream(accepted).write(&chunk) {
            Ok(n) => written += n,
            Err(WriteError::Blocked) => break,
            Err(err) => panic!("write: {err:?}"),
        }
        pump(&mut client, &mut node, now, false);
        now += Duration::from_millis(1);
    }
    assert!(written > 0, "the node wrote nothing");
    assert!(
        written as u64 <= SEND_WINDOW,
        "the node buffered {written} bytes unacknowledged, its send window is {SEND_WINDOW}"
    );
}
