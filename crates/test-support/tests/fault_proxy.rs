//! The fault proxy against small real servers on 127.0.0.1: an HTTP/1.1 keep-alive server and a
//! UDP echo server.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup should panic.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use holdfast_test_support::{FaultProxy, Mode, UdpConfig, UdpFaultProxy, UdpMode};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

const BODY: &str = "hello from upstream";
/// How long "nothing arrives" is watched for in the stall tests.
const QUIET: Duration = Duration::from_millis(300);

/// A keep-alive HTTP server that answers every request with 200 and `BODY`; counts connections.
async fn http_upstream() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicU64::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.is_empty() {
                        let response = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{BODY}",
                            BODY.len()
                        );
                        if write.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// Sends one GET and reads one whole response (status line, headers, body); returns (status, body).
async fn get(stream: &mut BufReader<TcpStream>, path: &str) -> std::io::Result<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    stream.get_mut().write_all(request.as_bytes()).await?;
    read_response(stream, false).await
}

async fn read_response(
    stream: &mut BufReader<TcpStream>,
    head_only: bool,
) -> std::io::Result<(u16, String)> {
    let mut status_line = String::new();
    if stream.read_line(&mut status_line).await? == 0 {
        return Err(ErrorKind::UnexpectedEof.into());
    }
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await?;
        if line == "\r\n" {
            break;
        }
        if let Some(value) = line.strip_prefix("Content-Length: ") {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0u8; if head_only { 0 } else { length }];
    stream.read_exact(&mut body).await?;
    Ok((status, String::from_utf8(body).unwrap()))
}

async fn connect(addr: SocketAddr) -> BufReader<TcpStream> {
    BufReader::new(TcpStream::connect(addr).await.unwrap())
}

// i[verify harness.fault-proxy.count]
#[tokio::test]
async fn forward_counts_connections_and_keep_alive_requests_exactly() {
    let (upstream, _) = http_upstream().await;
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let mut first = connect(proxy.addr()).await;
    for path in ["/v2/", "/v2/a/manifests/latest", "/v2/a/blobs/sha256:1"] {
        assert_eq!(get(&mut first, path).await.unwrap(), (200, BODY.into()));
    }
    let mut second = connect(proxy.addr()).await;
    assert_eq!(
        get(&mut second, "/again").await.unwrap(),
        (200, BODY.into())
    );
    assert_eq!(proxy.connections(), 2);
    assert_eq!(
        proxy.requests(),
        [
            "GET /v2/ HTTP/1.1",
            "GET /v2/a/manifests/latest HTTP/1.1",
            "GET /v2/a/blobs/sha256:1 HTTP/1.1",
            "GET /again HTTP/1.1"
        ]
    );
}

// i[verify harness.fault-proxy.count]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_connections_are_counted_exactly() {
    let (upstream, _) = http_upstream().await;
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let addr = proxy.addr();
    let clients: Vec<_> = (0..40)
        .map(|i| {
            tokio::spawn(async move {
                let mut stream = connect(addr).await;
                get(&mut stream, &format!("/{i}")).await.unwrap()
            })
        })
        .collect();
    for client in clients {
        assert_eq!(client.await.unwrap().0, 200);
    }
    // Every client saw its answer, so every connection and request is already counted.
    assert_eq!(proxy.connections(), 40);
    assert_eq!(proxy.request_count(), 40);
}

// i[verify harness.fault-proxy.count]
#[tokio::test]
async fn connections_are_counted_in_every_mode_that_accepts_them() {
    let (upstream, _) = http_upstream().await;
    let proxy = FaultProxy::start(upstream).await.unwrap();
    // Close: accepted, counted, closed without a byte.
    proxy.set_mode(Mode::Close).await.unwrap();
    let mut closed = connect(proxy.addr()).await;
    assert_eq!(closed.read(&mut [0u8; 1]).await.unwrap(), 0);
    assert_eq!(proxy.connections(), 1);
    // A status answer: the connection and its request are counted, the service never asked.
    proxy.set_mode(Mode::status(503)).await.unwrap();
    let mut answered = connect(proxy.addr()).await;
    assert_eq!(get(&mut answered, "/busy").await.unwrap().0, 503);
    // Refuse: nothing reaches the proxy, so nothing is counted.
    proxy.set_mode(Mode::Refuse).await.unwrap();
    let refused = TcpStream::connect(proxy.addr()).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
    proxy.set_mode(Mode::Forward).await.unwrap();
    let mut forwarded = connect(proxy.addr()).await;
    assert_eq!(
        get(&mut forwarded, "/again").await.unwrap(),
        (200, BODY.into())
    );
    assert_eq!(proxy.connections(), 3);
    assert_eq!(
        proxy.requests(),
        ["GET /busy HTTP/1.1", "GET /again HTTP/1.1"]
    );
}

// i[verify harness.fault-proxy.modes+2]
#[tokio::test]
async fn refuse_stops_listening_and_forward_listens_again_on_the_same_port() {
    let (upstream, _) = http_upstream().await;
    let proxy = FaultProxy::start(upstream).await.unwrap();
    proxy.set_mode(Mode::Refuse).await.unwrap();
    let err = TcpStream::connect(proxy.addr()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
    assert_eq!(
        proxy.connections(),
        0,
        "refused connects never reach the proxy"
    );
    proxy.set_mode(Mode::Forward).await.unwrap();
    let mut stream = connect(proxy.addr()).await;
    assert_eq!(get(&mut stream, "/").await.unwrap(), (200, BODY.into()));
    assert_eq!(proxy.connections(), 1);
}

// i[verify harness.fault-proxy.modes+2]
#[tokio::test]
async fn close_and_reset_are_counted_and_never_reach_upstream() {
    let (upstream, upstream_accepts) = http_upstream().await;
    let proxy = FaultProxy::start(upstream).await.unwrap();

    proxy.set_mode(Mode::Close).await.unwrap();
    let mut closed = TcpStream::connect(proxy.addr()).await.unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(
        closed.read(&mut buf).await.unwrap(),
        0,
        "expected a clean EOF"
    );

    proxy.set_mode(Mode::Reset).await.unwrap();
    let mut reset = TcpStream::connect(proxy.addr()).await.unwrap();
    let _ = reset.write_all(b"GET / HTTP/1.1\r\n\r\n").await;
    let err = reset.read(&mut buf).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset);

    assert_eq!(proxy.connections(), 2);
    assert_eq!(upstream_accepts.load(Ordering::SeqCst), 0);
}

// i[verify harness.fault-proxy.modes+2]
#[tokio::test]
async fn http_status_answers_every_request_with_retry_after() {
    let (upstream, upstream_accepts) = http_upstream().await;
    let proxy = FaultProxy::start(upstream).await.unwrap();
    proxy
        .set_mode(Mode::HttpStatus {
            status: 429,
            retry_after: Some("7".into()),
            body: r#"{"errors":[{"code":"TOOMANYREQUESTS"}]}"#.into(),
        })
        .await
        .unwrap();
    let mut stream = connect(proxy.addr()).await;
    stream
        .get_mut()
        .write_all(b"GET /v2/ HTTP/1.1\r\n\r\nHEAD /v2/x/manifests/latest HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut head = String::new();
    stream.read_line(&mut head).await.unwrap();
    assert_eq!(head, "HTTP/1.1 429 Too Many Requests\r\n");
    let mut headers = String::new();
    while !headers.ends_with("\r\n\r\n") {
        stream.read_line(&mut headers).await.unwrap();
    }
    assert!(headers.contains("Retry-After: 7\r\n"), "{headers}");
    let mut body = vec![0u8; 39];
    stream.read_exact(&mut body).await.unwrap();
    assert_eq!(body, br#"{"errors":[{"code":"TOOMANYREQUESTS"}]}"#);
    // The HEAD answer has headers only; the connection stays usable afterwards.
    assert_eq!(read_response(&mut stream, true).await.unwrap().0, 429);
    assert_eq!(get(&mut stream, "/third").await.unwrap().0, 429);

    proxy.set_mode(Mode::status(404)).await.unwrap();
    let mut other = connect(proxy.addr()).await;
    assert_eq!(
        get(&mut other, "/gone").await.unwrap(),
        (404, String::new())
    );

    assert_eq!(proxy.request_count(), 4);
    assert_eq!(proxy.connections(), 2);
    assert_eq!(upstream_accepts.load(Ordering::SeqCst), 0);
}

// i[verify harness.fault-proxy.modes+2]
#[tokio::test]
async fn stall_after_bytes_lets_exactly_that_much_through_then_goes_silent() {
    let (upstream, _) = http_upstream().await;
    let proxy = FaultProxy::start(upstream).await.unwrap();
    proxy
        .set_mode(Mode::Stall { after_bytes: 12 })
        .await
        .unwrap();
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let mut first = [0u8; 12];
    stream.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let mut more = [0u8; 1];
    let silent = tokio::time::timeout(QUIET, stream.read(&mut more)).await;
    assert!(
        silent.is_err(),
        "a stalled connection must stay silent and open"
    );
    assert_eq!(proxy.request_count(), 1);
}

// i[verify harness.fault-proxy.modes+2]
#[tokio::test]
async fn stall_zero_never_answers_but_counts_the_request() {
    let (upstream, upstream_accepts) = http_upstream().await;
    let proxy = FaultProxy::start(upstream).await.unwrap();
    proxy
        .set_mode(Mode::Stall { after_bytes: 0 })
        .await
        .unwrap();
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    stream
        .write_all(b"GET /v2/ HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(proxy.wait_for_requests(1, Duration::from_secs(5)).await, 1);
    let mut buf = [0u8; 1];
    assert!(
        tokio::time::timeout(QUIET, stream.read(&mut buf))
            .await
            .is_err()
    );
    assert_eq!(upstream_accepts.load(Ordering::SeqCst), 0);
}

// i[verify harness.fault-proxy.modes+2]
#[tokio::test]
async fn live_connections_freeze_on_stall_and_die_on_reset() {
    let (upstream, _) = http_upstream().await;
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let mut frozen = connect(proxy.addr()).await;
    let mut doomed = connect(proxy.addr()).await;
    assert_eq!(get(&mut frozen, "/1").await.unwrap().0, 200);
    assert_eq!(get(&mut doomed, "/1").await.unwrap().0, 200);

    proxy
        .set_mode(Mode::Stall { after_bytes: 0 })
        .await
        .unwrap();
    let answer = tokio::time::timeout(QUIET, get(&mut frozen, "/2")).await;
    assert!(answer.is_err(), "a frozen connection must not answer");

    // Both are frozen now (the second never sent a request); Reset kills them.
    proxy.set_mode(Mode::Reset).await.unwrap();
    for stream in [&mut frozen, &mut doomed] {
        let err = get(stream, "/3").await.unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
            ),
            "{err:?}"
        );
    }
}

// i[verify harness.fault-proxy.modes+2]
#[tokio::test]
async fn connections_stalled_from_the_start_die_on_a_later_reset() {
    let (upstream, upstream_accepts) = http_upstream().await;
    let proxy = FaultProxy::start(upstream).await.unwrap();
    proxy
        .set_mode(Mode::Stall { after_bytes: 0 })
        .await
        .unwrap();
    // One sent a request, one sent nothing: both are held silent.
    let mut asked = connect(proxy.addr()).await;
    let mut quiet = connect(proxy.addr()).await;
    asked
        .get_mut()
        .write_all(b"GET /v2/ HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(proxy.wait_for_requests(1, Duration::from_secs(5)).await, 1);
    assert_eq!(
        proxy.wait_for_connections(2, Duration::from_secs(5)).await,
        2
    );

    proxy.set_mode(Mode::Reset).await.unwrap();
    for stream in [&mut asked, &mut quiet] {
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("a reset must end a connection stalled with after_bytes: 0");
        let err = read.expect_err("reset, not a clean close or an answer");
        assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err:?}");
    }
    assert_eq!(upstream_accepts.load(Ordering::SeqCst), 0);
}

/// Sends `payload` and expects it back.
async fn echo(socket: &UdpSocket, payload: &[u8]) {
    socket.send(payload).await.unwrap();
    let mut buf = vec![0u8; 2048];
    let n = socket.recv(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], payload);
}

async fn udp_echo() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        loop {
            let (n, peer) = socket.recv_from(&mut buf).await.unwrap();
            socket.send_to(&buf[..n], peer).await.unwrap();
        }
    });
    addr
}

// i[verify harness.fault-proxy.udp]
#[tokio::test]
async fn udp_forwards_counts_and_drops_datagrams() {
    let proxy = UdpFaultProxy::start(udp_echo().await).await.unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(proxy.addr()).await.unwrap();
    let mut buf = vec![0u8; 2048];
    // A zero-length datagram is a datagram like any other.
    for payload in [&b"one"[..], b"", b"three"] {
        client.send(payload).await.unwrap();
        let n = client.recv(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], payload);
    }
    let stats = proxy.stats();
    assert_eq!(
        (
            stats.from_clients,
            stats.forwarded,
            stats.replies,
            stats.dropped
        ),
        (3, 3, 3, 0)
    );

    proxy.set_mode(UdpMode::Drop);
    client.send(b"lost").await.unwrap();
    client.send(b"lost too").await.unwrap();
    let stats = proxy
        .wait_until(Duration::from_secs(5), |s| s.from_clients == 5)
        .await;
    assert_eq!(
        (stats.from_clients, stats.dropped, stats.forwarded),
        (5, 2, 3)
    );
    assert!(
        tokio::time::timeout(QUIET, client.recv(&mut buf))
            .await
            .is_err()
    );

    proxy.set_mode(UdpMode::Forward);
    client.send(b"back").await.unwrap();
    let n = client.recv(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"back");
}

// i[verify harness.fault-proxy.udp.idle]
#[tokio::test(start_paused = true)]
async fn udp_sessions_expire_after_the_idle_time_and_come_back_on_the_next_datagram() {
    let idle = Duration::from_secs(10);
    let config = UdpConfig { session_idle: idle };
    let proxy = UdpFaultProxy::start_with(udp_echo().await, config)
        .await
        .unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(proxy.addr()).await.unwrap();
    let other = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    other.connect(proxy.addr()).await.unwrap();
    let mut buf = vec![0u8; 2048];
    echo(&client, b"one").await;
    echo(&other, b"two").await;
    assert_eq!(proxy.stats().sessions, 2);

    // Traffic keeps a session alive: `client` speaks every 9 s, `other` stays quiet.
    tokio::time::advance(Duration::from_secs(9)).await;
    echo(&client, b"still here").await;
    tokio::time::advance(Duration::from_secs(2)).await;
    let stats = proxy
        .wait_until(Duration::from_secs(1), |s| s.expired == 1)
        .await;
    assert_eq!(
        (stats.sessions, stats.expired),
        (1, 1),
        "only the quiet one expired"
    );
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(
        proxy.stats().sessions,
        1,
        "9 s of 10 since the last datagram"
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    let stats = proxy
        .wait_until(Duration::from_secs(1), |s| s.sessions == 0)
        .await;
    assert_eq!((stats.sessions, stats.expired), (0, 2));

    // A client whose session expired is relayed again, through a fresh session.
    echo(&other, b"back").await;
    let stats = proxy.stats();
    assert_eq!((stats.sessions, stats.expired, stats.dropped), (1, 2, 0));
    assert!(
        tokio::time::timeout(QUIET, client.recv(&mut buf))
            .await
            .is_err()
    );
}

// i[verify harness.fault-proxy.modes+2]
#[tokio::test]
async fn a_reset_kills_a_live_forwarded_connection_with_an_rst_not_a_clean_close() {
    let (upstream, _) = http_upstream().await;
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let mut live = connect(proxy.addr()).await;
    assert_eq!(get(&mut live, "/1").await.unwrap().0, 200);
    proxy.set_mode(Mode::Reset).await.unwrap();
    // The client only reads: a registry that dies mid-stream must look reset, not finished.
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), live.read(&mut buf))
        .await
        .expect("a reset must end a live connection");
    let err = read.expect_err("reset, not a clean close");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err:?}");
}

// i[verify harness.fault-proxy.modes+2]
#[tokio::test]
async fn a_reset_kills_a_connection_frozen_mid_stream_with_an_rst() {
    let (upstream, _) = http_upstream().await;
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let mut frozen = connect(proxy.addr()).await;
    assert_eq!(get(&mut frozen, "/1").await.unwrap().0, 200);
    proxy
        .set_mode(Mode::Stall { after_bytes: 1 })
        .await
        .unwrap();
    proxy.set_mode(Mode::Reset).await.unwrap();
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), frozen.read(&mut buf))
        .await
        .expect("a reset must end a frozen connection");
    let err = read.expect_err("reset, not a clean close");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err:?}");
}
