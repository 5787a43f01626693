//! The endpoint's bound on connection attempts not yet decided on (quinn's `max_incoming`),
//! pushed past on the node's own server configuration: the accept loop of a real node decides
//! every attempt at once, so here nobody decides and the endpoint is driven by hand.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use holdfast_forward::identity::SERVER_NAME;
use holdfast_forward::server::{MAX_INCOMING, quinn_server_config};
use quinn_proto::{DatagramEvent, Endpoint, EndpointConfig, Incoming};

/// What the endpoint made of one datagram, for a failure message.
fn describe(event: Option<&DatagramEvent>) -> &'static str {
    match event {
        None => "nothing",
        Some(DatagramEvent::NewConnection(_)) => "a new attempt held",
        Some(DatagramEvent::Response(_)) => "an answer",
        Some(DatagramEvent::ConnectionEvent(..)) => "an event of a connection",
    }
}

// Test harness code: a broken setup should stop the test loudly.
#[allow(clippy::expect_used)]
// r[verify forward.limits.windows]
#[test]
fn past_the_undecided_attempts_bound_an_initial_is_dropped_without_state_or_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let identity =
        holdfast_forward::Identity::load_or_create(dir.path()).expect("the node's identity");
    let idle = Duration::from_secs(15);
    let server_config = quinn_server_config(&identity, idle).expect("server config");
    let mut node = Endpoint::new(
        Arc::new(EndpointConfig::default()),
        Some(Arc::new(server_config)),
        true,
        Some([7; 32]),
    );
    let (client_config, _) =
        holdfast_forward::client::quinn_client_config(identity.fingerprint(), idle)
            .expect("client config");
    let mut client = Endpoint::new(
        Arc::new(EndpointConfig::default()),
        None,
        true,
        Some([9; 32]),
    );
    let at: SocketAddr = "127.0.0.1:4433".parse().expect("addr");
    let now = Instant::now();
    // A real client's first flight, each with its connection id, from its own source port.
    let mut attempt = 0u32;
    let mut next_initial = || {
        attempt += 1;
        let (_, mut conn) = client
            .connect(now, client_config.clone(), at, SERVER_NAME)
            .expect("connect");
        let mut out = Vec::new();
        let sent = conn.poll_transmit(now, 1, &mut out).expect("an Initial");
        let port = u16::try_from(1024 + attempt % 60_000).expect("port");
        let from = SocketAddr::from(([127, 0, 0, 2], port));
        (from, BytesMut::from(&out[..sent.size]))
    };
    let mut answer = Vec::new();
    let mut held: Vec<Incoming> = Vec::new();
    for i in 0..MAX_INCOMING {
        let (from, initial) = next_initial();
        match node.handle(now, from, None, None, initial, &mut answer) {
            Some(DatagramEvent::NewConnection(incoming)) => held.push(incoming),
            other => panic!("attempt {i}: {}", describe(other.as_ref())),
        }
    }
    assert_eq!(held.len(), 4_096);
    // One more: the endpoint keeps nothing of it and sends nothing back.
    let (from, initial) = next_initial();
    let past = node.handle(now, from, None, None, initial, &mut answer);
    assert!(
        past.is_none(),
        "past the bound: {}",
        describe(past.as_ref())
    );
    // Once one attempt is decided, there is room for one more again.
    if let Some(one) = held.pop() {
        node.ignore(one);
    }
    let (from, initial) = next_initial();
    match node.handle(now, from, None, None, initial, &mut answer) {
        Some(DatagramEvent::NewConnection(incoming)) => held.push(incoming),
        other => panic!("after a decision: {}", describe(other.as_ref())),
    }
    for incoming in held {
        node.ignore(incoming);
    }
}
