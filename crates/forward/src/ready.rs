//! Taking what is ready without waiting: a relay that has been woken drains every datagram
//! already queued before it yields again, instead of paying one wakeup per datagram.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// The output of `future` if it is ready now; `None` (and the future dropped) if it would wait.
pub(crate) fn ready_now<F: Future>(future: F) -> Option<F::Output> {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}

/// At most this many datagrams are relayed per wakeup, so control messages and a stop are
/// still seen between bursts.
// Public (hidden) for the relay bench's floor, which drains as the forward does.
#[doc(hidden)]
pub const DRAIN: usize = 256;

/// The bound of one wakeup's drain: counts the datagrams relayed and says whether to take
/// another already queued.
// r[impl forward.batch]
#[derive(Debug, Default)]
pub(crate) struct Drain {
    relayed: usize,
}

// r[impl forward.batch]
impl Drain {
    /// One more datagram relayed: the next one from `take` (what is queued now), or `None` once
    /// [`DRAIN`] have been relayed, and `take` is not called.
    #[inline]
    pub(crate) fn more<T>(&mut self, take: impl FnOnce() -> Option<T>) -> Option<T> {
        self.relayed += 1;
        if self.relayed < DRAIN { take() } else { None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn a_ready_future_yields_its_output_and_a_pending_one_none() {
        assert_eq!(ready_now(async { 7 }), Some(7));
        assert_eq!(ready_now(std::future::pending::<u8>()), None);
    }

    /// What one wakeup relays from `queue`, as the relays' loops do: the datagram that woke it,
    /// then what `Drain` lets it take.
    fn wakeup(queue: &mut VecDeque<usize>) -> Vec<usize> {
        let mut drain = Drain::default();
        let mut next = queue.pop_front();
        let mut relayed = Vec::new();
        while let Some(datagram) = next {
            relayed.push(datagram);
            // Bounded here too, so a drain that never stops fails instead of hanging.
            if relayed.len() > 4 * DRAIN {
                break;
            }
            next = drain.more(|| queue.pop_front());
        }
        relayed
    }

    // r[verify forward.batch]
    #[test]
    fn a_wakeup_relays_every_datagram_already_waiting_up_to_the_bound() {
        for queued in [1, 2, DRAIN - 1, DRAIN] {
            let mut queue: VecDeque<usize> = (0..queued).collect();
            assert_eq!(
                wakeup(&mut queue),
                (0..queued).collect::<Vec<_>>(),
                "{queued} waiting: all relayed in one wakeup"
            );
            assert!(queue.is_empty());
        }
    }

    // r[verify forward.batch]
    #[test]
    fn beyond_the_bound_a_wakeup_relays_exactly_the_bound_and_leaves_the_rest_waiting() {
        let mut queue: VecDeque<usize> = (0..2 * DRAIN + 5).collect();
        assert_eq!(wakeup(&mut queue), (0..DRAIN).collect::<Vec<_>>());
        assert_eq!(queue.len(), DRAIN + 5, "the rest waits for the next wakeup");
        assert_eq!(wakeup(&mut queue), (DRAIN..2 * DRAIN).collect::<Vec<_>>());
        assert_eq!(
            wakeup(&mut queue),
            (2 * DRAIN..2 * DRAIN + 5).collect::<Vec<_>>()
        );
        assert!(queue.is_empty());
    }
}
