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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ready_future_yields_its_output_and_a_pending_one_none() {
        assert_eq!(ready_now(async { 7 }), Some(7));
        assert_eq!(ready_now(std::future::pending::<u8>()), None);
    }
}
