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

/// A UDP socket with quinn-udp's batched send and receive.
// r[impl forward.batch]
#[derive(Debug)]
pub(crate) struct UdpIo {
    socket: UdpSocket,
    state: UdpSocketState,
}

impl UdpIo {
    /// Wraps `socket` (enables GRO where the platform has it).
    pub(crate) fn new(socket: UdpSocket) -> io::Result<Self> {
        let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
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

    /// Receives at least one buffer's worth (waiting for it); returns how many of `bufs` were
    /// filled. A filled buffer may hold several datagrams (GRO): see [`segments`].
    pub(crate) async fn recv(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        loop {
            self.socket.readable().await?;
            match self.socket.try_io(Interest::READABLE, || {
                self.state.recv(UdpSockRef::from(&self.socket), bufs, meta)
            }) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }

    /// Sends `contents` to `to`: one datagram, or with `segment` set, datagrams of that size
    /// (the last may be shorter) in one call.
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
            segment_size: segment.filter(|s| *s < contents.len()),
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

impl<K> Gathered<'_, K> {
    /// Sends the datagrams; a GSO send the path refuses (EIO, EINVAL: no offload there) is
    /// retried a datagram at a time. Returns the datagrams sent and the first error.
    pub(crate) async fn send(&self, io: &UdpIo) -> (usize, Option<io::Error>) {
        if self.count <= 1 {
            return match io.send(self.to, self.contents, None).await {
                Ok(()) => (self.count, None),
                Err(err) => (0, Some(err)),
            };
        }
        match io.send(self.to, self.contents, Some(self.segment)).await {
            Ok(()) => (self.count, None),
            Err(err) if matches!(err.raw_os_error(), Some(EIO | EINVAL)) => {
                let mut sent = 0;
                let mut first = None;
                for one in self.contents.chunks(self.segment) {
                    match io.send(self.to, one, None).await {
                        Ok(()) => sent += 1,
                        Err(err) => {
                            first.get_or_insert(err);
                        }
                    }
                }
                (sent, first)
            }
            Err(err) => (0, Some(err)),
        }
    }
}

// The errors (Linux errno values) a path without segmentation offload answers a GSO send with;
// GSO is only used on Linux.
const EIO: i32 = 5;
const EINVAL: i32 = 22;

#[cfg(test)]
mod tests {
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
        let empty: Vec<&[u8]> = segments(&buf, &meta(0, 0)).collect();
        assert_eq!(empty, vec![&[] as &[u8]]);
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
        assert!(gather.push(1, to, b"", 64));
        assert!(!gather.push(1, to, b"", 64), "empty datagrams go alone");
    }
}
