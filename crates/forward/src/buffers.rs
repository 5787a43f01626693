//! Socket buffer sizes: asked for, granted as far as the kernel allows, and never a reason for a
//! socket not to be used.
//!
//! Linux clamps SO_RCVBUF/SO_SNDBUF to `net.core.rmem_max`/`wmem_max` silently; the BSDs and
//! macOS refuse a size above `kern.ipc.maxsockbuf` (ENOBUFS) instead. Either way the socket
//! still works with a smaller buffer, so a cap is logged and a refusal falls back to smaller
//! sizes rather than failing the relay, the forward or the node's endpoint.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use quinn::udp::{UdpSockRef, UdpSocketState};

/// The smallest size worth asking for after a refusal: below it, the kernel's default stands.
const FLOOR: usize = 64 << 10;

/// What one socket got, each way: the size the kernel accepted and reports (`None` when it
/// accepted no size asked for, or could not be read), Linux's doubling for bookkeeping undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Granted {
    pub(crate) recv: Option<usize>,
    pub(crate) send: Option<usize>,
}

/// Logged once per process, so thousands of flow sockets do not repeat one sysctl's story.
static CAPPED: AtomicBool = AtomicBool::new(false);
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Asks for `want` bytes of receive and send buffer on `socket` (with `state`, its quinn-udp
/// state); logs once when the kernel gives less, and never fails.
// r[impl forward.buffers+2]
pub(crate) fn ask<'s, S>(socket: &'s S, state: &UdpSocketState, want: usize) -> Granted
where
    UdpSockRef<'s>: From<&'s S>,
{
    let sock = || UdpSockRef::from(socket);
    let recv = accept_largest(want, |size| state.set_recv_buffer_size(sock(), size))
        .and_then(|_| state.recv_buffer_size(sock()).ok().map(reported));
    let send = accept_largest(want, |size| state.set_send_buffer_size(sock(), size))
        .and_then(|_| state.send_buffer_size(sock()).ok().map(reported));
    let granted = Granted { recv, send };
    match first_notice(granted, want, &REFUSED, &CAPPED) {
        Some(Shortfall::Refused) => tracing::warn!(
            asked = want,
            recv = ?recv,
            send = ?send,
            "forward: the kernel accepted no socket buffer size asked for; the socket keeps its default"
        ),
        Some(Shortfall::Capped) => tracing::info!(
            asked = want,
            recv = ?recv,
            send = ?send,
            "forward: socket buffers capped by the kernel (net.core.rmem_max and wmem_max on \
             Linux); a burst beyond them is dropped at the relay's edge"
        ),
        None => {}
    }
    granted
}

/// How a socket's buffers fell short of the size asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shortfall {
    /// The kernel accepted no size for one direction at least: it keeps its default.
    Refused,
    /// Both directions got a size, one of them less than asked.
    Capped,
}

/// The shortfall of `granted` against `want` that is to be logged: each kind only the first time
/// it happens (`refused` and `capped` remember that), so thousands of flow sockets log it once.
// r[impl forward.buffers+2]
fn first_notice(
    granted: Granted,
    want: usize,
    refused: &AtomicBool,
    capped: &AtomicBool,
) -> Option<Shortfall> {
    let (kind, seen) = match (granted.recv, granted.send) {
        (Some(recv), Some(send)) if recv >= want && send >= want => return None,
        (Some(_), Some(_)) => (Shortfall::Capped, capped),
        _ => (Shortfall::Refused, refused),
    };
    (!seen.swap(true, Ordering::Relaxed)).then_some(kind)
}

/// Tries `want`, then halves on each refusal down to [`FLOOR`]; the size accepted, if any.
fn accept_largest(want: usize, mut set: impl FnMut(usize) -> io::Result<()>) -> Option<usize> {
    let mut size = want;
    loop {
        match set(size) {
            Ok(()) => return Some(size),
            Err(_) if size / 2 >= FLOOR => size /= 2,
            Err(_) => return None,
        }
    }
}

/// The size the kernel reports as the one set: Linux reports twice it (the rest is its own
/// bookkeeping).
fn reported(size: usize) -> usize {
    if cfg!(any(target_os = "linux", target_os = "android")) {
        size / 2
    } else {
        size
    }
}

/// The kernel's cap on a socket buffer, `/proc/sys/net/core/NAME` (`rmem_max`, `wmem_max`): what
/// the buffer tests expect a request above it to be granted.
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
#[allow(clippy::expect_used)]
pub(crate) fn kernel_max(name: &str) -> usize {
    std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
        .expect("sysctl")
        .trim()
        .parse()
        .expect("number")
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify forward.buffers+2]
    #[test]
    fn a_refused_size_falls_back_to_the_largest_the_kernel_accepts() {
        // As the BSDs and macOS do above kern.ipc.maxsockbuf.
        let mut asked = Vec::new();
        let got = accept_largest(4 << 20, |size| {
            asked.push(size);
            if size > 1 << 20 {
                Err(io::Error::other("no buffer space"))
            } else {
                Ok(())
            }
        });
        assert_eq!(got, Some(1 << 20));
        assert_eq!(asked, [4 << 20, 2 << 20, 1 << 20]);
        // A kernel that accepts nothing leaves the default; the asking stops at the floor.
        let mut tries = 0;
        let none = accept_largest(4 << 20, |_| {
            tries += 1;
            Err(io::Error::other("no buffer space"))
        });
        assert_eq!(none, None);
        assert_eq!(tries, 7, "4 MiB down to 64 KiB");
    }

    // r[verify forward.buffers+2]
    #[test]
    fn a_cap_and_a_refusal_are_each_noticed_once() {
        let (refused, capped) = (AtomicBool::new(false), AtomicBool::new(false));
        let granted = |recv, send| Granted { recv, send };
        let want = 4 << 20;
        // Everything asked for, or more (a kernel may round up): nothing to say, nothing spent.
        for (recv, send) in [(want, want), (want + 1, want), (want, want + 1)] {
            let got = granted(Some(recv), Some(send));
            assert_eq!(first_notice(got, want, &refused, &capped), None);
        }
        // Either direction one byte short is a cap, said once.
        let short = granted(Some(want - 1), Some(want));
        assert_eq!(
            first_notice(short, want, &refused, &capped),
            Some(Shortfall::Capped)
        );
        let short = granted(Some(want), Some(want - 1));
        assert_eq!(first_notice(short, want, &refused, &capped), None);
        // Either direction refused outright is a refusal, said once, even beside a cap.
        let none = granted(Some(want), None);
        assert_eq!(
            first_notice(none, want, &refused, &capped),
            Some(Shortfall::Refused)
        );
        for (recv, send) in [(None, Some(want)), (None, None), (None, Some(want - 1))] {
            let got = granted(recv, send);
            assert_eq!(first_notice(got, want, &refused, &capped), None);
        }
        // The two are remembered apart: a refusal first leaves the cap still to be said.
        let (refused, capped) = (AtomicBool::new(false), AtomicBool::new(false));
        let none = granted(None, Some(want - 1));
        assert_eq!(
            first_notice(none, want, &refused, &capped),
            Some(Shortfall::Refused)
        );
        let short = granted(Some(want), Some(want - 1));
        assert_eq!(
            first_notice(short, want, &refused, &capped),
            Some(Shortfall::Capped)
        );
    }

    // r[verify forward.buffers+2]
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn a_size_above_the_kernels_maximum_is_granted_up_to_it_without_an_error() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let state = UdpSocketState::new(UdpSockRef::from(&socket)).expect("state");
        let want = 2 * kernel_max("rmem_max").max(kernel_max("wmem_max"));
        let granted = ask(&socket, &state, want);
        assert_eq!(granted.recv, Some(kernel_max("rmem_max")));
        assert_eq!(granted.send, Some(kernel_max("wmem_max")));
    }

    // r[verify forward.buffers+2]
    #[cfg(unix)]
    #[test]
    fn a_socket_whose_buffers_cannot_be_set_is_reported_not_failed() {
        // setsockopt on something that is not a socket fails (ENOTSOCK) as a refusal would.
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let state = UdpSocketState::new(UdpSockRef::from(&socket)).expect("state");
        let not_a_socket = std::fs::File::open("/dev/null").expect("/dev/null");
        let granted = ask(&not_a_socket, &state, 4 << 20);
        assert_eq!(
            granted,
            Granted {
                recv: None,
                send: None
            }
        );
    }
}
