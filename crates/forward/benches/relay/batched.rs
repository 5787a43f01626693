//! The load generator's own UDP sockets — the app that talks to the forward's local address and
//! the UDP echo target behind the node — with quinn-udp's batched I/O: recvmmsg with GRO on
//! receive, GSO on send. They are the bench's load, not the product: one system call per
//! datagram here would be a cost raw quinn never pays, charged to the forward.

// poll(2) on a socket the pacer thread sends on; see `wait_writable`.
#![allow(unsafe_code)]

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use quinn::udp::{RecvMeta, Transmit, UdpSockRef, UdpSocketState};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// The largest datagram (or GRO batch) one receive buffer holds.
const MAX_DATAGRAM: usize = 65_536;

/// Receive buffers per call (quinn-udp's recvmmsg batch on Linux).
const RECV_BATCH: usize = 32;

/// The most bytes one GSO send carries (the kernel's limit is 64 KiB including headers).
const GSO_MAX_BYTES: usize = 60_000;

/// A UDP socket with batched send and receive.
pub struct Batched {
    socket: UdpSocket,
    state: UdpSocketState,
}

impl Batched {
    /// Binds `local` (and connects to `peer`, if given). Needs a tokio runtime.
    pub fn bind(local: SocketAddr, peer: Option<SocketAddr>) -> io::Result<Self> {
        let socket = std::net::UdpSocket::bind(local)?;
        if let Some(peer) = peer {
            socket.connect(peer)?;
        }
        socket.set_nonblocking(true)?;
        let socket = UdpSocket::from_std(socket)?;
        let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
        // Room for a full window of the largest datagrams either way.
        let _ = state.set_recv_buffer_size(UdpSockRef::from(&socket), 4 << 20);
        let _ = state.set_send_buffer_size(UdpSockRef::from(&socket), 4 << 20);
        Ok(Batched { socket, state })
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.socket.local_addr().expect("local addr")
    }

    /// How many datagrams of `size` bytes one send carries.
    pub fn per_send(&self, size: usize) -> usize {
        self.state
            .max_gso_segments()
            .clamp(1, (GSO_MAX_BYTES / size.max(1)).max(1))
    }

    /// Receives one batch (waiting for it); returns how many of `bufs`' buffers were filled.
    pub async fn recv(&self, bufs: &mut RecvBufs) -> io::Result<usize> {
        loop {
            self.socket.readable().await?;
            let RecvBufs { buf, meta } = bufs;
            let mut chunks = buf.chunks_mut(MAX_DATAGRAM);
            let mut slices: [IoSliceMut<'_>; RECV_BATCH] =
                std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or(&mut [])));
            // A batch short of what one call takes emptied the queue (Linux's recvmmsg stops
            // short only then): its readiness is cleared now, as the forward's own sockets do
            // (holdfast-forward's `UdpIo::recv`, with the same limit), instead of by one more
            // receive that can only fail — a system call per wakeup the load generator would
            // charge the forward.
            let batch = holdfast_forward::batch_limit(RECV_BATCH);
            let mut partial = None;
            match self.socket.try_io(Interest::READABLE, || {
                let filled = self
                    .state
                    .recv(UdpSockRef::from(&self.socket), &mut slices, meta)?;
                if filled < batch {
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

    /// Sends `contents` to `to` as datagrams of `segment` bytes (the last may be shorter), in
    /// one GSO send when there are several; waits for room in the socket buffer.
    pub async fn send(&self, to: SocketAddr, contents: &[u8], segment: usize) -> io::Result<()> {
        let transmit = transmit(to, contents, segment);
        let sent = loop {
            match self.socket.try_io(Interest::WRITABLE, || {
                self.state
                    .try_send(UdpSockRef::from(&self.socket), &transmit)
            }) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    self.socket.writable().await?;
                }
                other => break other,
            }
        };
        match sent {
            Err(_) if transmit.segment_size.is_some() => {
                // A path without segmentation offload: one datagram a call.
                for one in contents.chunks(segment) {
                    Box::pin(self.send(to, one, one.len())).await?;
                }
                Ok(())
            }
            other => other,
        }
    }

    /// [`Batched::send`] from a thread outside the runtime (the pacer): the same system call,
    /// waiting for room with poll(2) instead of the runtime's readiness.
    pub fn send_blocking(&self, to: SocketAddr, contents: &[u8], segment: usize) -> io::Result<()> {
        let transmit = transmit(to, contents, segment);
        loop {
            match self
                .state
                .try_send(UdpSockRef::from(&self.socket), &transmit)
            {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => self.wait_writable(),
                Err(_) if transmit.segment_size.is_some() => {
                    for one in contents.chunks(segment) {
                        self.send_blocking(to, one, one.len())?;
                    }
                    return Ok(());
                }
                other => return other,
            }
        }
    }

    fn wait_writable(&self) {
        let mut fd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for a socket this struct owns; a 1 ms cap bounds the wait.
        unsafe { libc::poll(&mut fd, 1, 1) };
    }
}

fn transmit(to: SocketAddr, contents: &[u8], segment: usize) -> Transmit<'_> {
    Transmit {
        destination: to,
        ecn: None,
        contents,
        segment_size: (segment > 0 && segment < contents.len()).then_some(segment),
        src_ip: None,
    }
}

/// Receive buffers for one batch, and what was received into them.
pub struct RecvBufs {
    buf: Vec<u8>,
    meta: [RecvMeta; RECV_BATCH],
}

impl RecvBufs {
    /// Buffers for a full batch.
    pub fn new() -> Self {
        RecvBufs {
            buf: vec![0u8; RECV_BATCH * MAX_DATAGRAM],
            meta: [RecvMeta::default(); RECV_BATCH],
        }
    }

    /// The first `filled` buffers: each one's source, its datagram size (its GRO stride) and
    /// its bytes (one datagram, or several of that size, the last maybe shorter).
    pub fn buffers(&self, filled: usize) -> impl Iterator<Item = (SocketAddr, usize, &[u8])> {
        self.meta[..filled].iter().enumerate().map(|(i, m)| {
            let data = &self.buf[i * MAX_DATAGRAM..i * MAX_DATAGRAM + m.len.min(MAX_DATAGRAM)];
            let stride = if m.stride == 0 || m.stride > data.len() {
                data.len()
            } else {
                m.stride
            };
            (m.addr, stride, data)
        })
    }
}

/// The datagrams in one received buffer of `stride`-sized datagrams.
pub fn datagrams(data: &[u8], stride: usize) -> impl Iterator<Item = &[u8]> {
    data.chunks(stride.max(1))
}
