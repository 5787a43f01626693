//! Batched UDP I/O at the relay's edges: many datagrams per system call where the kernel allows
//! it (recvmmsg and GRO on receive, GSO on send, through quinn-udp), one datagram per call where
//! it does not. The relay's cost per datagram is dominated by system calls, so this is where it
//! pays to batch.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;

use quinn::udp::{RecvMeta, Transmit, UdpSockRef, UdpSocketState};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// The largest datagram a receive buffer must hold whole (a GRO batch is at most this too).
pub(crate) const MAX_DATAGRAM: usize = 65_536;

/// The most bytes one GSO send carries (the kernel's limit is 64 KiB including headers).
const GSO_MAX_BYTES: usize = 60_000;

/// The socket buffers a client's local socket asks for, each way: every datagram of its forward
/// enters there, so it gets the room quinn's own datagram buffers have (4 MiB).
pub(crate) const LOCAL_BUFFER: usize = 4 << 20;

/// The socket buffers a node's flow socket asks for, each way: one flow's share, with thousands
/// of flows possible. The kernel charges only what is queued, and caps both at its maximum.
pub(crate) const FLOW_BUFFER: usize = 1 << 20;

/// A UDP socket with quinn-udp's batched send and receive.
// r[impl forward.batch]
#[derive(Debug)]
pub(crate) struct UdpIo {
    socket: UdpSocket,
    state: UdpSocketState,
}

impl UdpIo {
    /// Wraps `socket` (enables GRO where the platform has it) with send and receive buffers of
    /// `buffer` bytes (as far as the kernel allows); the socket fragments as plain UDP.
    pub(crate) fn new(socket: UdpSocket, buffer: usize) -> io::Result<Self> {
        let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
        // r[impl forward.buffers+2]
        // A burst that arrives while the relay is busy waits here instead of being dropped by
        // the kernel (the default, about 200 KiB, holds a few milliseconds at full rate). A
        // kernel that gives less is logged, never fatal.
        crate::buffers::ask(&socket, &state, buffer);
        // quinn-udp's setup sets "don't fragment", which is QUIC's need, not a relay's.
        // r[impl forward.fragment]
        #[cfg(any(target_os = "linux", target_os = "android"))]
        crate::fragmentation::leave_to_kernel(
            std::os::fd::AsFd::as_fd(&socket),
            socket.local_addr()?.is_ipv6(),
        )?;
        Ok(UdpIo { socket, state })
    }

    /// The address the socket is bound to.
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The address the socket is connected to.
    #[cfg(test)]
    pub(crate) fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.socket.peer_addr()
    }

    /// How many segments one send may carry.
    pub(crate) fn max_segments(&self) -> usize {
        self.state.max_gso_segments().max(1)
    }

    /// Waits until a datagram or a pending error has arrived, without taking either; true when
    /// a datagram waits (a receive needs its buffers), false for an error alone (see
    /// [`UdpIo::take_error`]).
    pub(crate) async fn readable(&self) -> io::Result<bool> {
        let ready = self
            .socket
            .ready(Interest::READABLE | Interest::ERROR)
            .await?;
        Ok(ready.is_readable())
    }

    /// Takes the socket's pending error (an ICMP refusal on a connected socket) without
    /// receiving anything; `None` when there is none (the error readiness is then cleared).
    pub(crate) fn take_error(&self) -> io::Result<Option<io::Error>> {
        let taken = self.socket.try_io(Interest::ERROR, || {
            self.socket
                .take_error()?
                .ok_or_else(|| io::ErrorKind::WouldBlock.into())
        });
        match taken {
            Ok(err) => Ok(Some(err)),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Receives at least one buffer's worth (waiting for it); returns how many of `bufs` were
    /// filled. A filled buffer may hold several datagrams (GRO): see [`segments`]. A pending
    /// socket error (an ICMP refusal on a connected socket) is returned as soon as it arrives.
    pub(crate) async fn recv(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        // A pending error makes epoll report EPOLLERR without EPOLLIN, which tokio does not count
        // as readable: waiting for readability alone would leave a refusal unseen until the next
        // datagram or send. tokio's `try_io` takes one interest (a combined one is never ready):
        // the one that woke us, so a WouldBlock clears that one.
        loop {
            let ready = self
                .socket
                .ready(Interest::READABLE | Interest::ERROR)
                .await?;
            let interest = if ready.is_error() {
                Interest::ERROR
            } else {
                Interest::READABLE
            };
            // A batch that took fewer datagrams than one call could have emptied the socket's
            // queue: its readiness is cleared now, as a WouldBlock would, instead of by one more
            // receive that can only fail. That receive is a system call on the path of every
            // datagram of the batch (the task that takes them over runs only once this one
            // waits). A datagram that arrives after the batch is a new readiness event, which a
            // clear with the tick seen before the batch cannot erase.
            let batch = batch_limit(bufs.len());
            let mut partial = None;
            match self.socket.try_io(interest, || {
                let filled = self
                    .state
                    .recv(UdpSockRef::from(&self.socket), bufs, meta)?;
                if interest == Interest::READABLE && filled < batch {
                    partial = Some(filled);
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(filled)
            }) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => match partial {
                    Some(filled) => return Ok(filled),
                    None => continue,
                },
                other => return other,
            }
        }
    }

    /// Sends `contents` to `to`: one datagram, or with `segment` set, datagrams of that size
    /// (the last may be shorter) in one call. Callers set `segment` only for two datagrams or
    /// more: quinn-udp drops a segment size that covers the whole contents on Unix, not on
    /// Windows, where a lone datagram sent with one could be refused instead of sent plain.
    pub(crate) async fn send(
        &self,
        to: SocketAddr,
        contents: &[u8],
        segment: Option<usize>,
    ) -> io::Result<()> {
        let transmit = Transmit {
            destination: to,
            ecn: None,
            contents,
            segment_size: segment,
            src_ip: None,
        };
        loop {
            match self.socket.try_io(Interest::WRITABLE, || {
                self.state
                    .try_send(UdpSockRef::from(&self.socket), &transmit)
            }) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    self.socket.writable().await?;
                }
                other => return other,
            }
        }
    }
}

/// The datagrams in one received buffer: `len` bytes cut every `stride` bytes (a buffer without
/// GRO holds one datagram, which may be empty).
// r[impl forward.batch]
pub(crate) fn segments<'a>(
    buf: &'a [u8],
    meta: &RecvMeta,
) -> impl Iterator<Item = &'a [u8]> + use<'a> {
    let data = &buf[..meta.len.min(buf.len())];
    let stride = if meta.stride == 0 || meta.stride >= data.len() {
        data.len().max(1)
    } else {
        meta.stride
    };
    let count = if data.is_empty() {
        1
    } else {
        data.len().div_ceil(stride)
    };
    (0..count).map(move |i| {
        let start = (i * stride).min(data.len());
        &data[start..((i + 1) * stride).min(data.len())]
    })
}

/// The most bytes the datagrams of received buffers take framed for the connection: each
/// buffer's bytes plus a header of at most `header` bytes per datagram it holds, with at most
/// one header to spare per buffer, so one allocation serves the whole batch without holding
/// much more.
// r[impl forward.batch]
pub(crate) fn framed_capacity(meta: &[RecvMeta], header: usize) -> usize {
    // `len / stride + 1` datagrams per buffer: the exact count, or one more when the last
    // segment is full (quinn-udp gives a buffer without GRO its length as stride).
    meta.iter()
        .map(|m| m.len + header * (m.len / m.stride.max(1) + 1))
        .sum()
}

/// Datagrams of one size to one destination, gathered so they leave in one send.
// r[impl forward.batch]
#[derive(Debug, Default)]
pub(crate) struct Gather<K> {
    /// Whose datagrams these are (a flow, a peer), with their destination and size.
    key: Option<(K, SocketAddr, usize)>,
    buf: Vec<u8>,
    count: usize,
}

impl<K: PartialEq + Copy> Gather<K> {
    /// Adds `payload` if it can join the datagrams gathered; `false` when it cannot, and the
    /// gathered ones must be flushed first.
    pub(crate) fn push(
        &mut self,
        key: K,
        to: SocketAddr,
        payload: &[u8],
        max_segments: usize,
    ) -> bool {
        match self.key {
            None => {
                self.key = Some((key, to, payload.len()));
                self.buf.clear();
                self.buf.extend_from_slice(payload);
                self.count = 1;
                true
            }
            // Equal, non-empty sizes only: a GSO send cuts at one segment size, and an empty
            // datagram cannot be a segment.
            Some((k, dest, size))
                if k == key
                    && dest == to
                    && size == payload.len()
                    && size > 0
                    && self.count < max_segments
                    && self.buf.len() + size <= GSO_MAX_BYTES =>
            {
                self.buf.extend_from_slice(payload);
                self.count += 1;
                true
            }
            Some(_) => false,
        }
    }

    /// Adds `payload` if it continues the run gathered for `key` (same key, same size, room
    /// left); `false` otherwise, and the caller takes the slow path. Lets a relay skip looking up
    /// a datagram's flow when it belongs to the run under way, as most of a batch does.
    pub(crate) fn push_same(&mut self, key: K, payload: &[u8], max_segments: usize) -> bool {
        // `push` refuses another key: only the destination is taken from the run.
        match self.key {
            Some((_, to, _)) => self.push(key, to, payload, max_segments),
            None => false,
        }
    }

    /// Takes what was gathered: key, destination, segment size, datagram count and bytes.
    pub(crate) fn take(&mut self) -> Option<Gathered<'_, K>> {
        let (key, to, size) = self.key.take()?;
        Some(Gathered {
            key,
            to,
            segment: size,
            count: self.count,
            contents: &self.buf,
        })
    }
}

/// One gathered send.
#[derive(Debug)]
pub(crate) struct Gathered<'a, K> {
    pub(crate) key: K,
    pub(crate) to: SocketAddr,
    pub(crate) segment: usize,
    pub(crate) count: usize,
    pub(crate) contents: &'a [u8],
}

/// Where a gathered run is sent: one `sendmsg`, segmented (GSO) when `segment` is given.
/// [`UdpIo`] is the real one; unit tests put a socket there that refuses what they choose.
pub(crate) trait SendTo {
    /// Sends `contents` to `to`, as datagrams of `segment` bytes when given.
    fn send_to(
        &self,
        to: SocketAddr,
        contents: &[u8],
        segment: Option<usize>,
    ) -> impl Future<Output = io::Result<()>>;
}

impl SendTo for UdpIo {
    fn send_to(
        &self,
        to: SocketAddr,
        contents: &[u8],
        segment: Option<usize>,
    ) -> impl Future<Output = io::Result<()>> {
        self.send(to, contents, segment)
    }
}

impl<K> Gathered<'_, K> {
    // r[impl forward.batch]
    /// Sends the datagrams; a GSO send the path refuses (EIO, EINVAL: no offload there) is
    /// retried a datagram at a time. Any other error of a GSO send is what the first datagram
    /// would have met alone (a pending ICMP refusal is returned once): that one is lost and the
    /// rest go a datagram at a time, as one by one would have sent them. Returns the datagrams
    /// sent and the first error.
    pub(crate) async fn send(&self, io: &impl SendTo) -> (usize, Option<io::Error>) {
        if self.count <= 1 {
            return match io.send_to(self.to, self.contents, None).await {
                Ok(()) => (self.count, None),
                Err(err) => (0, Some(err)),
            };
        }
        match io.send_to(self.to, self.contents, Some(self.segment)).await {
            Ok(()) => (self.count, None),
            Err(err) => {
                let no_offload = matches!(err.raw_os_error(), Some(EIO | EINVAL));
                let (skip, mut first) = if no_offload {
                    (0, None)
                } else {
                    (1, Some(err))
                };
                let mut sent = 0;
                for one in self.contents.chunks(self.segment).skip(skip) {
                    match io.send_to(self.to, one, None).await {
                        Ok(()) => sent += 1,
                        Err(err) => {
                            first.get_or_insert(err);
                        }
                    }
                }
                (sent, first)
            }
        }
    }
}

// The errors (Linux errno values) a path without segmentation offload answers a GSO send with;
// GSO is only used on Linux.
const EIO: i32 = 5;
const EINVAL: i32 = 22;

/// Below how many datagrams a receive into `bufs` buffers proves the socket's queue empty.
/// Only Linux's `recvmmsg` (which quinn-udp uses there) stops short of its buffers for no
/// other reason than an empty queue (or a pending error, which has its own readiness), and
/// it takes at most quinn-udp's batch per call. Elsewhere a receive takes one datagram
/// whatever the buffers (`recvmsg` on the BSDs, macOS and illumos, `WSARecvMsg` on
/// Windows): no count proves anything, and `0` keeps the readiness until a receive that
/// would block.
// Public (hidden) for the relay bench's load generator, whose sockets clear their readiness the
// same way, so that it charges the forward no system call the forward's own sockets save.
#[doc(hidden)]
pub fn batch_limit(bufs: usize) -> usize {
    if cfg!(any(target_os = "linux", target_os = "android")) {
        bufs.min(quinn::udp::BATCH_SIZE)
    } else {
        0
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn meta(len: usize, stride: usize) -> RecvMeta {
        RecvMeta {
            len,
            stride,
            ..RecvMeta::default()
        }
    }

    // r[verify forward.batch]
    #[test]
    fn a_buffer_is_cut_at_its_stride_and_an_empty_datagram_is_one_datagram() {
        let buf: Vec<u8> = (0..10).collect();
        let cut: Vec<&[u8]> = segments(&buf, &meta(10, 4)).collect();
        assert_eq!(cut, vec![&buf[0..4], &buf[4..8], &buf[8..10]]);
        let whole: Vec<&[u8]> = segments(&buf, &meta(10, 10)).collect();
        assert_eq!(whole, vec![&buf[..]]);
        // No stride (a buffer without GRO), or one beyond the length: one datagram, whole.
        for stride in [0, 11, MAX_DATAGRAM] {
            let one: Vec<&[u8]> = segments(&buf, &meta(10, stride)).collect();
            assert_eq!(one, vec![&buf[..]], "stride {stride}");
        }
        let empty: Vec<&[u8]> = segments(&buf, &meta(0, 0)).collect();
        assert_eq!(empty, vec![&[] as &[u8]]);
    }

    // r[verify forward.batch]
    #[test]
    fn a_batch_s_framed_capacity_holds_every_datagram_with_a_header_to_spare_at_most_per_buffer() {
        // Buffers without GRO (quinn-udp reports the length as the stride, so an empty one has
        // stride 0), and GRO buffers whose last segment is full or short.
        let batches = [
            vec![meta(100, 100)],
            vec![meta(0, 0), meta(1162, 1162)],
            vec![meta(1000, 100)],
            vec![meta(1050, 100), meta(60_000, 1200), meta(7, 7)],
            vec![meta(65_507, 65_507); 16],
        ];
        // The node's one flow header (two bytes for small ids), and the client's bound for any.
        for header in [2, 16] {
            for batch in &batches {
                let buffers = batch.len();
                let framed: usize = batch
                    .iter()
                    .map(|m| {
                        let buf = vec![0u8; m.len];
                        segments(&buf, m).map(|d| header + d.len()).sum::<usize>()
                    })
                    .sum();
                let capacity = framed_capacity(batch, header);
                assert!(
                    (framed..=framed + header * buffers).contains(&capacity),
                    "{batch:?}, {header}-byte headers: {capacity} for {framed} bytes framed"
                );
            }
        }
    }

    // r[verify forward.batch]
    #[tokio::test]
    async fn a_batch_that_fills_one_call_of_more_buffers_keeps_the_rest_of_the_queue_readable() {
        // More buffers than one receive call takes: a full call leaves buffers empty without
        // the queue being empty, and its readiness must stay (nothing new arrives to restore it).
        const BUFS: usize = quinn::udp::BATCH_SIZE + 8;
        let io = UdpIo::new(
            UdpSocket::bind("127.0.0.1:0").await.expect("bind"),
            FLOW_BUFFER,
        )
        .expect("udp io");
        let to = io.local_addr().expect("addr");
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").expect("peer");
        // Sizes all different, so the kernel coalesces none of them (GRO joins equal sizes).
        let sent: Vec<Vec<u8>> = (1..=BUFS).map(|n| vec![n as u8; n]).collect();
        for payload in &sent {
            peer.send_to(payload, to).expect("send");
        }
        let mut buf = vec![0u8; BUFS * MAX_DATAGRAM];
        let mut meta = [RecvMeta::default(); BUFS];
        let mut received: Vec<Vec<u8>> = Vec::new();
        while received.len() < sent.len() {
            let filled = {
                let mut chunks = buf.chunks_mut(MAX_DATAGRAM);
                let mut slices: [IoSliceMut<'_>; BUFS] =
                    std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or(&mut [])));
                tokio::time::timeout(
                    std::time::Duration::from_secs(5),
                    io.recv(&mut slices, &mut meta),
                )
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{} of {} queued datagrams received, then no wakeup for the rest",
                        received.len(),
                        sent.len()
                    )
                })
                .expect("recv")
            };
            for (i, m) in meta[..filled].iter().enumerate() {
                received.extend(segments(&buf[i * MAX_DATAGRAM..], m).map(<[u8]>::to_vec));
            }
        }
        assert_eq!(received, sent);
    }

    // r[verify forward.batch]
    #[tokio::test]
    async fn a_batch_that_empties_the_socket_still_wakes_for_the_next_datagram() {
        let io = UdpIo::new(
            UdpSocket::bind("127.0.0.1:0").await.expect("bind"),
            FLOW_BUFFER,
        )
        .expect("udp io");
        let to = io.local_addr().expect("addr");
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").expect("peer");
        let mut buf = vec![0u8; 4 * MAX_DATAGRAM];
        let mut meta = [RecvMeta::default(); 4];
        for (round, payload) in [&b"one"[..], b"two", b"three"].into_iter().enumerate() {
            peer.send_to(payload, to).expect("send");
            let filled = {
                let mut chunks = buf.chunks_mut(MAX_DATAGRAM);
                let mut slices: [IoSliceMut<'_>; 4] =
                    std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or(&mut [])));
                tokio::time::timeout(
                    std::time::Duration::from_secs(5),
                    io.recv(&mut slices, &mut meta),
                )
                .await
                .unwrap_or_else(|_| panic!("round {round}: the datagram woke the receive"))
                .expect("recv")
            };
            // One of four buffers: a partial batch, after which readiness was cleared (where a
            // partial batch proves the queue empty): tokio runs no receive until a new event.
            assert_eq!(filled, 1);
            assert_eq!(&buf[..meta[0].len], payload);
            if cfg!(any(target_os = "linux", target_os = "android")) {
                let ran = io.socket.try_io(Interest::READABLE, || Ok(()));
                assert!(
                    ran.is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock),
                    "round {round}: the partial batch left the socket's readiness set"
                );
            }
        }
    }

    /// A connected `UdpIo` towards a port nothing listens on (bound, then released).
    pub(crate) async fn towards_closed_port() -> (UdpIo, SocketAddr) {
        let closed = std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("port");
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        socket.connect(closed).await.expect("connect");
        (UdpIo::new(socket, FLOW_BUFFER).expect("udp io"), closed)
    }

    /// Sends one datagram from `io`, connected to `closed`, and waits until the ICMP refusal it
    /// draws is pending on the socket (not consumed: nothing receives).
    pub(crate) async fn refusal_pending(io: &UdpIo, closed: SocketAddr) {
        io.send(closed, b"x", None).await.expect("send");
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            io.socket.ready(Interest::ERROR),
        )
        .await
        .expect("refusal arrives")
        .expect("ready");
    }

    // What a flow's reply task allocates its buffers on: a refusal alone says "no datagram" and
    // is taken without a receive; a datagram says "readable".
    // r[verify forward.flows.reply-buffers]
    #[tokio::test]
    async fn a_refusal_alone_is_taken_without_buffers_and_a_datagram_asks_for_them() {
        let (io, closed) = towards_closed_port().await;
        refusal_pending(&io, closed).await;
        assert!(
            !io.readable().await.expect("ready"),
            "a refusal is no datagram"
        );
        let err = io.take_error().expect("take").expect("the refusal");
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
        // Taken: nothing is pending any more, and the error readiness is cleared.
        assert!(io.take_error().expect("take").is_none());
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(200), io.readable())
                .await
                .is_err(),
            "nothing arrived, yet the socket is ready"
        );
        // A datagram from the target (the port is bound now) makes the socket readable.
        let target = std::net::UdpSocket::bind(closed).expect("rebind the target port");
        target
            .send_to(b"a reply", io.local_addr().expect("addr"))
            .expect("reply");
        let readable = tokio::time::timeout(std::time::Duration::from_secs(5), io.readable())
            .await
            .expect("the reply wakes it")
            .expect("ready");
        assert!(readable);
    }

    // A batched receive returns a refusal as a receive of one datagram does.
    // i[verify forward.relay.resilience]
    // r[verify forward.batch]
    #[tokio::test]
    async fn a_refusal_is_received_without_any_further_datagram_or_send() {
        let (io, closed) = towards_closed_port().await;
        io.send(closed, b"anyone?", None).await.expect("send");
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut meta = [RecvMeta::default()];
        let mut slices = [IoSliceMut::new(&mut buf)];
        let received = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            io.recv(&mut slices, &mut meta),
        )
        .await
        .expect("the refusal wakes the receive");
        let err = received.expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
    }

    // r[verify forward.batch]
    #[tokio::test]
    async fn a_pending_refusal_costs_a_gathered_run_one_datagram_as_one_by_one() {
        let (io, closed) = towards_closed_port().await;
        refusal_pending(&io, closed).await;
        let target = UdpSocket::bind(closed)
            .await
            .expect("the target listens now");
        let mut gather = Gather::<u8>::default();
        for payload in [b"aa", b"bb", b"cc"] {
            assert!(gather.push(1, closed, payload, 64));
        }
        let gathered = gather.take().expect("gathered");
        let (sent, err) = gathered.send(&io).await;
        // Alone, the first datagram meets the refusal and the next two go out.
        assert_eq!(sent, 2);
        assert_eq!(
            err.map(|e| e.kind()),
            Some(io::ErrorKind::ConnectionRefused)
        );
        let mut buf = [0u8; 16];
        for expected in [b"bb", b"cc"] {
            let n = tokio::time::timeout(std::time::Duration::from_secs(5), target.recv(&mut buf))
                .await
                .expect("delivered")
                .expect("recv");
            assert_eq!(&buf[..n], expected, "in order");
        }
    }

    // r[verify forward.fragment]
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[tokio::test]
    async fn relay_sockets_leave_fragmentation_to_the_kernel() {
        use crate::fragmentation::get;
        use std::os::fd::AsFd;
        let v4 = UdpIo::new(
            UdpSocket::bind("127.0.0.1:0").await.expect("bind"),
            FLOW_BUFFER,
        )
        .expect("udp io");
        let fd = v4.socket.as_fd();
        assert_eq!(
            get(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER).expect("get"),
            libc::IP_PMTUDISC_WANT
        );
        let v6 = UdpIo::new(
            UdpSocket::bind("[::1]:0").await.expect("bind ::1"),
            FLOW_BUFFER,
        )
        .expect("udp io");
        let fd = v6.socket.as_fd();
        assert_eq!(
            get(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER).expect("get"),
            libc::IP_PMTUDISC_WANT
        );
        assert_eq!(
            get(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER).expect("get"),
            libc::IPV6_PMTUDISC_WANT
        );
        assert_eq!(
            get(fd, libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG).expect("get"),
            0
        );
    }

    // A datagram above a 1500-byte MTU goes out whole. On loopback (MTU 65536) this passes with
    // or without fragmentation; run in a network namespace whose loopback MTU is 1400 it shows
    // the kernel fragmenting (with "don't fragment" set the send fails with EMSGSIZE).
    // r[verify forward.fragment]
    #[tokio::test]
    async fn a_datagram_larger_than_1500_bytes_is_sent_whole() {
        let target = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let to = target.local_addr().expect("addr");
        let io = UdpIo::new(
            UdpSocket::bind("127.0.0.1:0").await.expect("bind"),
            FLOW_BUFFER,
        )
        .expect("udp io");
        let payload: Vec<u8> = (0..4000u32).map(|i| i as u8).collect();
        io.send(to, &payload, None).await.expect("send");
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), target.recv(&mut buf))
            .await
            .expect("delivered")
            .expect("recv");
        assert_eq!(&buf[..n], &payload[..]);
    }

    // r[verify forward.buffers+2]
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[tokio::test]
    async fn relay_sockets_get_the_buffers_they_ask_for_up_to_the_kernels_maximum() {
        use crate::buffers::kernel_max;
        use crate::fragmentation::get;
        use std::os::fd::AsFd;
        let (rmem_max, wmem_max) = (kernel_max("rmem_max"), kernel_max("wmem_max"));
        for buffer in [FLOW_BUFFER, LOCAL_BUFFER] {
            let io = UdpIo::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind"), buffer)
                .expect("udp io");
            let fd = io.socket.as_fd();
            // Linux reports twice what was set (the rest is its bookkeeping).
            let rcv = get(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).expect("get") as usize / 2;
            let snd = get(fd, libc::SOL_SOCKET, libc::SO_SNDBUF).expect("get") as usize / 2;
            assert_eq!(rcv, buffer.min(rmem_max), "receive buffer for {buffer}");
            assert_eq!(snd, buffer.min(wmem_max), "send buffer for {buffer}");
        }
        // Where the kernel allows it, more than a plain socket's default, which a burst overflowed.
        let plain = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let default =
            get(plain.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).expect("get") as usize / 2;
        if rmem_max > default {
            assert!(FLOW_BUFFER.min(rmem_max) > default, "{default}");
        }
    }

    // r[verify forward.batch]
    #[test]
    fn only_equal_non_empty_datagrams_to_one_destination_are_gathered() {
        let to: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        let mut gather = Gather::<u8>::default();
        assert!(gather.push(1, to, b"ab", 64));
        assert!(gather.push(1, to, b"cd", 64));
        assert!(!gather.push(1, to, b"e", 64), "another size");
        assert!(!gather.push(2, to, b"ef", 64), "another flow");
        let taken = gather.take().expect("gathered");
        assert_eq!(
            (taken.count, taken.segment, taken.contents),
            (2, 2, &b"abcd"[..])
        );
        assert!(gather.take().is_none());
        assert!(!gather.push_same(1, b"ab", 64), "nothing under way");
        assert!(gather.push(1, to, b"ab", 64));
        assert!(gather.push_same(1, b"cd", 64), "the run under way");
        assert!(!gather.push_same(2, b"ef", 64), "another flow");
        assert!(!gather.push_same(1, b"e", 64), "another size");
        assert!(!gather.push_same(1, b"gh", 2), "no room left");
        assert_eq!(gather.take().map(|t| t.count), Some(2));
        assert!(gather.push(1, to, b"", 64));
        assert!(!gather.push(1, to, b"", 64), "empty datagrams go alone");
    }

    // r[verify forward.batch]
    #[test]
    fn a_run_stops_at_the_segment_count_and_at_one_gso_send_s_bytes() {
        let to: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        let full = |size: usize, max_segments: usize| {
            let mut gather = Gather::<u8>::default();
            let payload = vec![7u8; size];
            let mut count = 0;
            while gather.push(1, to, &payload, max_segments) {
                count += 1;
                assert!(count <= 64, "{size}-byte datagrams never stop gathering");
            }
            count
        };
        // 1,200-byte datagrams: 50 make 60,000 bytes, the most one GSO send carries.
        assert_eq!(full(1200, 64), 50);
        assert_eq!(full(1201, 64), 49);
        // Small datagrams stop at the segment count the socket allows.
        assert_eq!(full(100, 64), 64);
        assert_eq!(full(100, 3), 3);
        assert_eq!(full(100, 1), 1);
    }

    // r[verify forward.batch]
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[allow(unsafe_code)]
    #[tokio::test]
    async fn a_socket_offers_several_segments_per_send_where_the_kernel_segments() {
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        // Whether this kernel takes UDP_SEGMENT (Linux 4.18 on), asked of a socket of our own.
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").expect("probe");
        let size: libc::c_int = 1200;
        // SAFETY: a valid socket, and an option value that lives across the call with its size.
        let gso = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&probe),
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                (&raw const size).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        } == 0;
        let io = UdpIo::new(socket, FLOW_BUFFER).expect("udp io");
        if gso {
            assert!(io.max_segments() > 1, "{}", io.max_segments());
        } else {
            assert_eq!(io.max_segments(), 1);
        }
    }

    /// A socket that records each `sendmsg` and answers it with the errno its rule gives.
    struct Refusing {
        /// The errno for a segmented send, if it is refused.
        segmented: Option<i32>,
        /// The errno for a single send of these contents, if it is refused.
        single: Option<(&'static [u8], i32)>,
        calls: std::sync::Mutex<Vec<(Vec<u8>, Option<usize>)>>,
    }

    impl Refusing {
        fn new(segmented: Option<i32>, single: Option<(&'static [u8], i32)>) -> Self {
            Self {
                segmented,
                single,
                calls: std::sync::Mutex::default(),
            }
        }

        fn calls(&self) -> Vec<(Vec<u8>, Option<usize>)> {
            self.calls.lock().expect("calls").clone()
        }
    }

    impl SendTo for Refusing {
        async fn send_to(
            &self,
            _to: SocketAddr,
            contents: &[u8],
            segment: Option<usize>,
        ) -> io::Result<()> {
            self.calls
                .lock()
                .expect("calls")
                .push((contents.to_vec(), segment));
            let refused = match (segment, self.single) {
                (Some(_), _) => self.segmented,
                (None, Some((one, errno))) if one == contents => Some(errno),
                (None, _) => None,
            };
            refused.map_or(Ok(()), |errno| Err(io::Error::from_raw_os_error(errno)))
        }
    }

    fn run(contents: &[u8], segment: usize) -> Gathered<'_, ()> {
        Gathered {
            key: (),
            to: "127.0.0.1:9".parse().expect("addr"),
            segment,
            count: contents.len().div_ceil(segment).max(1),
            contents,
        }
    }

    const ECONNREFUSED: i32 = 111;

    fn one(contents: &[u8]) -> (Vec<u8>, Option<usize>) {
        (contents.to_vec(), None)
    }

    // r[verify forward.batch]
    #[tokio::test]
    async fn a_run_goes_out_in_one_segmented_send_and_a_lone_datagram_unsegmented() {
        let socket = Refusing::new(None, None);
        let (sent, err) = run(b"aaabbbccc", 3).send(&socket).await;
        assert_eq!((sent, err.is_none()), (3, true));
        assert_eq!(socket.calls(), [(b"aaabbbccc".to_vec(), Some(3))]);

        for lone in [&b"abc"[..], b""] {
            let socket = Refusing::new(Some(EIO), None);
            let (sent, err) = run(lone, 3).send(&socket).await;
            assert_eq!((sent, err.is_none()), (1, true), "{lone:?}");
            assert_eq!(socket.calls(), [one(lone)]);
        }
        let socket = Refusing::new(None, Some((b"abc", ECONNREFUSED)));
        let (sent, err) = run(b"abc", 3).send(&socket).await;
        assert_eq!(sent, 0);
        assert_eq!(err.and_then(|e| e.raw_os_error()), Some(ECONNREFUSED));
    }

    // r[verify forward.batch]
    #[tokio::test]
    async fn a_segmented_send_the_path_refuses_is_resent_a_datagram_at_a_time() {
        for errno in [EIO, EINVAL] {
            let socket = Refusing::new(Some(errno), None);
            let (sent, err) = run(b"aaabbbccc", 3).send(&socket).await;
            assert_eq!((sent, err.is_none()), (3, true), "errno {errno}");
            assert_eq!(
                socket.calls(),
                [
                    (b"aaabbbccc".to_vec(), Some(3)),
                    one(b"aaa"),
                    one(b"bbb"),
                    one(b"ccc")
                ]
            );
        }
        // One of the single sends failing loses that one only, and its error is reported.
        let socket = Refusing::new(Some(EIO), Some((b"bbb", ECONNREFUSED)));
        let (sent, err) = run(b"aaabbbccc", 3).send(&socket).await;
        assert_eq!(sent, 2);
        assert_eq!(err.and_then(|e| e.raw_os_error()), Some(ECONNREFUSED));
        assert_eq!(socket.calls().len(), 4);
    }

    // r[verify forward.batch]
    #[tokio::test]
    async fn another_error_of_a_segmented_send_is_the_first_datagrams_and_the_rest_go_alone() {
        let socket = Refusing::new(Some(ECONNREFUSED), None);
        let (sent, err) = run(b"aaabbbccc", 3).send(&socket).await;
        assert_eq!(sent, 2);
        assert_eq!(err.and_then(|e| e.raw_os_error()), Some(ECONNREFUSED));
        assert_eq!(
            socket.calls(),
            [(b"aaabbbccc".to_vec(), Some(3)), one(b"bbb"), one(b"ccc")]
        );
    }
}
