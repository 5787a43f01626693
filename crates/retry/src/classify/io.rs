//! `std::io::Error` classified once, in one table, for every loop that meets one.
//!
//! Both ends of a forward, the gateway and the event streams call [`io`], so the same error means
//! the same thing everywhere. The raw OS error decides when there is one (it is more precise than
//! the `ErrorKind` std derives from it: `EMSGSIZE` and `ENOBUFS` have no kind of their own); the
//! kind decides for errors built without one (by tokio, quinn, a codec).

use std::io::{Error, ErrorKind};

use super::Class;

/// The class of an I/O error met by a long-lived loop. See the tables on [`by_errno`] and
/// [`by_kind`]: each row says why.
// r[impl classify.io]
pub fn io(err: &Error) -> Class {
    err.raw_os_error()
        .and_then(by_errno)
        .unwrap_or_else(|| by_kind(err.kind()))
}

/// Raw OS errors (Unix errno values), `None` for a code not in the table (the kind decides).
///
/// - **Transient**, report and go on (paced):
///   `ECONNREFUSED` (nobody listens there *now*; on UDP, the ICMP answer to an earlier datagram),
///   `ECONNRESET`, `ECONNABORTED` (one connection or one ICMP report, not the socket),
///   `ENETUNREACH`, `EHOSTUNREACH`, `ENETDOWN`, `EHOSTDOWN`, `ENETRESET` (routing comes back),
///   `ETIMEDOUT`, `ENOBUFS`, `ENOMEM` (the kernel is short of buffers for a moment),
///   `EAGAIN`/`EWOULDBLOCK`, `EINTR` (try again), `EMFILE`, `ENFILE` (out of descriptors: an
///   accept loop backs off instead of dying), `EADDRNOTAVAIL`, `EADDRINUSE` (an address or port
///   that comes and goes), `EPERM` (a firewall rule refusing this send).
/// - **Item**, drop this one and go on: `EMSGSIZE` (this datagram is larger than the path
///   carries), `EACCES` (this destination is never allowed, e.g. broadcast), `EAFNOSUPPORT` (this
///   destination's address family does not fit the socket), `EINVAL` (this call's arguments).
/// - **Fatal**, the channel is gone: `EBADF`, `ENOTSOCK` (the descriptor itself is gone),
///   `ENOTCONN`, `EPIPE`, `ESHUTDOWN` (the socket was closed or shut down).
#[cfg(unix)]
fn by_errno(code: i32) -> Option<Class> {
    Some(match code {
        libc::ECONNREFUSED
        | libc::ECONNRESET
        | libc::ECONNABORTED
        | libc::ENETUNREACH
        | libc::EHOSTUNREACH
        | libc::ENETDOWN
        | libc::EHOSTDOWN
        | libc::ENETRESET
        | libc::ETIMEDOUT
        | libc::ENOBUFS
        | libc::ENOMEM
        | libc::EAGAIN
        | libc::EINTR
        | libc::EMFILE
        | libc::ENFILE
        | libc::EADDRNOTAVAIL
        | libc::EADDRINUSE
        | libc::EPERM => Class::Transient,
        libc::EMSGSIZE | libc::EACCES | libc::EAFNOSUPPORT | libc::EINVAL => Class::Item,
        libc::EBADF | libc::ENOTSOCK | libc::ENOTCONN | libc::EPIPE | libc::ESHUTDOWN => {
            Class::Fatal
        }
        _ => return None,
    })
}

#[cfg(not(unix))]
fn by_errno(_code: i32) -> Option<Class> {
    None
}

/// Errors without a raw OS error (or with one the errno table does not list), by kind.
///
/// - **Transient**: the connection-level kinds (`ConnectionRefused`, `ConnectionReset`,
///   `ConnectionAborted`, `HostUnreachable`, `NetworkUnreachable`, `NetworkDown`), `TimedOut`,
///   `WouldBlock`, `Interrupted`, `OutOfMemory`, `ResourceBusy`, `AddrInUse`,
///   `AddrNotAvailable`, and every kind not listed here (`Other`, `Unsupported`, future kinds): an
///   error nobody classified is reported and paced, never silently dropped and never the end.
/// - **Item**: `InvalidData` (this message does not decode), `InvalidInput`, `FileTooLarge` (this
///   one is too big), `PermissionDenied` (this one is not allowed).
/// - **Fatal**: `BrokenPipe`, `NotConnected`, `UnexpectedEof` (the peer closed mid-stream),
///   `WriteZero` (the stream no longer takes bytes).
fn by_kind(kind: ErrorKind) -> Class {
    match kind {
        ErrorKind::InvalidData
        | ErrorKind::InvalidInput
        | ErrorKind::FileTooLarge
        | ErrorKind::PermissionDenied => Class::Item,
        ErrorKind::BrokenPipe
        | ErrorKind::NotConnected
        | ErrorKind::UnexpectedEof
        | ErrorKind::WriteZero => Class::Fatal,
        _ => Class::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify classify.io]
    #[cfg(unix)]
    #[test]
    fn every_errno_row_classifies_as_documented() {
        let rows: &[(&str, i32, Class)] = &[
            ("ECONNREFUSED", libc::ECONNREFUSED, Class::Transient),
            ("ECONNRESET", libc::ECONNRESET, Class::Transient),
            ("ECONNABORTED", libc::ECONNABORTED, Class::Transient),
            ("ENETUNREACH", libc::ENETUNREACH, Class::Transient),
            ("EHOSTUNREACH", libc::EHOSTUNREACH, Class::Transient),
            ("ENETDOWN", libc::ENETDOWN, Class::Transient),
            ("EHOSTDOWN", libc::EHOSTDOWN, Class::Transient),
            ("ENETRESET", libc::ENETRESET, Class::Transient),
            ("ETIMEDOUT", libc::ETIMEDOUT, Class::Transient),
            ("ENOBUFS", libc::ENOBUFS, Class::Transient),
            ("ENOMEM", libc::ENOMEM, Class::Transient),
            ("EAGAIN", libc::EAGAIN, Class::Transient),
            ("EWOULDBLOCK", libc::EWOULDBLOCK, Class::Transient),
            ("EINTR", libc::EINTR, Class::Transient),
            ("EMFILE", libc::EMFILE, Class::Transient),
            ("ENFILE", libc::ENFILE, Class::Transient),
            ("EADDRNOTAVAIL", libc::EADDRNOTAVAIL, Class::Transient),
            ("EADDRINUSE", libc::EADDRINUSE, Class::Transient),
            ("EPERM", libc::EPERM, Class::Transient),
            ("EMSGSIZE", libc::EMSGSIZE, Class::Item),
            ("EACCES", libc::EACCES, Class::Item),
            ("EAFNOSUPPORT", libc::EAFNOSUPPORT, Class::Item),
            ("EINVAL", libc::EINVAL, Class::Item),
            ("EBADF", libc::EBADF, Class::Fatal),
            ("ENOTSOCK", libc::ENOTSOCK, Class::Fatal),
            ("ENOTCONN", libc::ENOTCONN, Class::Fatal),
            ("EPIPE", libc::EPIPE, Class::Fatal),
            ("ESHUTDOWN", libc::ESHUTDOWN, Class::Fatal),
        ];
        for (name, code, class) in rows {
            let err = Error::from_raw_os_error(*code);
            assert_eq!(io(&err), *class, "{name} ({err})");
        }
        // The errno decides over the kind std derives from it: EPERM and EACCES are both
        // PermissionDenied, EMSGSIZE and ENOBUFS have no kind of their own.
        assert_eq!(
            Error::from_raw_os_error(libc::EPERM).kind(),
            Error::from_raw_os_error(libc::EACCES).kind()
        );
        // A code the table does not list falls back to its kind (ENOENT: NotFound, transient).
        assert_eq!(
            io(&Error::from_raw_os_error(libc::ENOENT)),
            Class::Transient
        );
    }

    // r[verify classify.io]
    #[test]
    fn errors_without_an_os_code_classify_by_kind() {
        let rows = [
            (ErrorKind::ConnectionRefused, Class::Transient),
            (ErrorKind::ConnectionReset, Class::Transient),
            (ErrorKind::ConnectionAborted, Class::Transient),
            (ErrorKind::HostUnreachable, Class::Transient),
            (ErrorKind::NetworkUnreachable, Class::Transient),
            (ErrorKind::NetworkDown, Class::Transient),
            (ErrorKind::TimedOut, Class::Transient),
            (ErrorKind::WouldBlock, Class::Transient),
            (ErrorKind::Interrupted, Class::Transient),
            (ErrorKind::OutOfMemory, Class::Transient),
            (ErrorKind::ResourceBusy, Class::Transient),
            (ErrorKind::AddrInUse, Class::Transient),
            (ErrorKind::AddrNotAvailable, Class::Transient),
            (ErrorKind::Other, Class::Transient),
            (ErrorKind::Unsupported, Class::Transient),
            (ErrorKind::InvalidData, Class::Item),
            (ErrorKind::InvalidInput, Class::Item),
            (ErrorKind::FileTooLarge, Class::Item),
            (ErrorKind::PermissionDenied, Class::Item),
            (ErrorKind::BrokenPipe, Class::Fatal),
            (ErrorKind::NotConnected, Class::Fatal),
            (ErrorKind::UnexpectedEof, Class::Fatal),
            (ErrorKind::WriteZero, Class::Fatal),
        ];
        for (kind, class) in rows {
            assert_eq!(io(&Error::new(kind, "no os code")), class, "{kind:?}");
            assert_eq!(io(&Error::from(kind)), class, "{kind:?}");
        }
    }
}
