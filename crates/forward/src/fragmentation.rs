//! Relay sockets fragment as plain UDP does. quinn-udp's socket setup sets "don't fragment"
//! (`IP_PMTUDISC_PROBE`, `IPV6_PMTUDISC_PROBE`, `IPV6_DONTFRAG`), which QUIC wants and a relay
//! does not: a datagram larger than the outgoing interface's MTU would fail with EMSGSIZE where
//! the kernel fragments it for any other UDP program. This puts the kernel's default back.
//!
//! Neither socket2 nor nix names these options, so this is the one place the crate calls
//! `setsockopt` itself. Linux only: that is where quinn-udp sets these options (and where the
//! node runs).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Gives `socket` the kernel's default path-MTU behaviour for UDP: `IP_PMTUDISC_WANT` (and on an
/// IPv6 socket `IPV6_PMTUDISC_WANT` with `IPV6_DONTFRAG` off), so a datagram larger than the
/// path's MTU is fragmented rather than refused.
// r[impl forward.fragment]
pub(crate) fn leave_to_kernel(socket: BorrowedFd<'_>, ipv6: bool) -> io::Result<()> {
    // quinn-udp sets the IPv4 option on IPv6 sockets too (it covers IPv4-mapped destinations).
    set(
        socket,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_WANT,
    )?;
    if ipv6 {
        set(
            socket,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_WANT,
        )?;
        set(socket, libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, 0)?;
    }
    Ok(())
}

/// Sets an integer socket option.
fn set(
    socket: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the descriptor is borrowed (open for the call), and the value pointer and length
    // describe one live c_int, which is what these options take.
    let res = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if res == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads an integer socket option.
#[cfg(test)]
pub(crate) fn get(
    socket: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = -1;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the descriptor is borrowed (open for the call); value and len are live and len is
    // the size of value, so the kernel writes at most that many bytes.
    let res = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw mut value).cast(),
            &raw mut len,
        )
    };
    if res == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}
