//! The classification vocabulary for long-lived loops.
//!
//! A relay, a gateway connection or a watch loop meets errors while it runs. Each error is one of
//! three things, and the loop's reaction follows from which — never a bare `_ => break`.
//! [`io()`] classifies `std::io::Error` in one table for every loop.

mod io;

pub use self::io::io;

/// What an error in a long-lived loop means for the loop.
// r[impl classify.loop]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// This one item (a datagram, a message, a request) cannot be carried: drop it, count it,
    /// continue with the next.
    Item,
    /// A transient condition of the channel: report it, continue (optionally paced).
    Transient,
    /// The channel itself is gone: end the loop and announce that it ended.
    Fatal,
}

impl Class {
    /// Whether the loop must end (only for [`Class::Fatal`]).
    pub fn ends_loop(self) -> bool {
        matches!(self, Class::Fatal)
    }
}

/// An error that knows what it means for the loop that met it.
///
/// Both ends of a channel implement this on the same error types, so they classify identically.
pub trait Classify {
    /// The error's class.
    fn class(&self) -> Class;
}

impl<T: Classify + ?Sized> Classify for &T {
    fn class(&self) -> Class {
        (**self).class()
    }
}

impl<T: Classify + ?Sized> Classify for Box<T> {
    fn class(&self) -> Class {
        (**self).class()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    enum RelayError {
        Oversize,
        Refused,
        ConnectionLost,
    }

    impl Classify for RelayError {
        fn class(&self) -> Class {
            match self {
                RelayError::Oversize => Class::Item,
                RelayError::Refused => Class::Transient,
                RelayError::ConnectionLost => Class::Fatal,
            }
        }
    }

    // r[verify classify.loop]
    #[test]
    fn a_loop_ends_only_on_fatal_errors() {
        let errors = [
            RelayError::Oversize,
            RelayError::Refused,
            RelayError::Oversize,
            RelayError::ConnectionLost,
            RelayError::Refused,
        ];
        let (mut dropped, mut reported, mut handled) = (0, 0, 0);
        let mut ended_by = None;
        for err in &errors {
            handled += 1;
            match err.class() {
                Class::Item => dropped += 1,
                Class::Transient => reported += 1,
                Class::Fatal => {
                    ended_by = Some(format!("{err:?}"));
                    break;
                }
            }
        }
        assert_eq!((dropped, reported, handled), (2, 1, 4));
        assert_eq!(ended_by.as_deref(), Some("ConnectionLost"));
        let boxed: Box<RelayError> = Box::new(RelayError::Refused);
        assert!(!boxed.class().ends_loop());
        assert!(Class::Fatal.ends_loop());
    }
}
