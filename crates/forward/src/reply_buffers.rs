//! The receive buffers for targets' replies, shared by every flow of the node.
//!
//! A flow borrows a buffer only for one receive and the relay of what it received, both done
//! without waiting (the flow waits for its socket to be readable before it borrows), so the
//! buffers in use at once are at most the threads relaying replies at that moment: the node's
//! memory for replies does not grow with its flows, however many targets answer.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, PoisonError};

/// Buffers kept for reuse beyond those in use: more than the runtime's threads ever borrow at
/// once; one given back past it is freed.
const KEPT: usize = 64;

/// The node's pool of reply buffers, each `size` bytes.
#[derive(Debug)]
pub(crate) struct ReplyBuffers {
    size: usize,
    free: Mutex<Vec<Vec<u8>>>,
    allocated: std::sync::atomic::AtomicUsize,
}

impl ReplyBuffers {
    /// A pool of buffers of `size` bytes, none allocated yet.
    pub(crate) fn new(size: usize) -> Arc<Self> {
        Arc::new(ReplyBuffers {
            size,
            free: Mutex::new(Vec::new()),
            allocated: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// A buffer for one receive, given back when the lease is dropped.
    // r[impl forward.flows.reply-buffers]
    pub(crate) fn lease(self: &Arc<Self>) -> Lease {
        let reused = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let buf = reused.unwrap_or_else(|| {
            self.allocated
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            vec![0u8; self.size]
        });
        Lease {
            pool: self.clone(),
            buf: Some(buf),
        }
    }

    /// Buffers allocated since the pool was made (those freed past [`KEPT`] included).
    pub(crate) fn allocated(&self) -> usize {
        self.allocated.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// One borrowed buffer.
#[derive(Debug)]
pub(crate) struct Lease {
    pool: Arc<ReplyBuffers>,
    buf: Option<Vec<u8>>,
}

impl Deref for Lease {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.as_deref().unwrap_or_default()
    }
}

impl DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.as_deref_mut().unwrap_or_default()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            let mut free = self
                .pool
                .free
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if free.len() < KEPT {
                free.push(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify forward.flows.reply-buffers]
    #[test]
    fn a_buffer_given_back_is_the_next_one_lent_and_none_is_allocated_before_asked() {
        let pool = ReplyBuffers::new(1024);
        assert_eq!(pool.allocated(), 0);
        // A thousand receives one after another: one buffer in all.
        for _ in 0..1000 {
            let mut lease = pool.lease();
            assert_eq!(lease.len(), 1024);
            lease[0] = 1;
        }
        assert_eq!(pool.allocated(), 1);
        // Two at once: two; given back, both are reused.
        let (a, b) = (pool.lease(), pool.lease());
        assert_eq!(pool.allocated(), 2);
        drop((a, b));
        let _again = (pool.lease(), pool.lease());
        assert_eq!(pool.allocated(), 2);
    }
}
