//! The engine's thread pool: the spec and source files are parsed on it, and the work per rule,
//! finding or file that reads only the parsed tree (fingerprints, traces, spec debt) runs on it.

use std::sync::OnceLock;

use rayon::prelude::*;

/// Worker stack size. tree-sitter's parse and tracey-core's walks recurse once per nesting level,
/// so a deeply nested file needs a deep stack: rayon's default (2 MiB) overflows and aborts where
/// the main thread (8 MiB) did not; 16 MiB leaves room beyond what the main thread allowed.
const STACK: usize = 16 << 20;

/// Maps `items` with `f` on a pool with deep worker stacks, results in `items`' order. When no
/// pool can be built (threads cannot be spawned), the items are mapped on the calling thread.
pub(crate) fn map<T: Send, U: Send>(items: Vec<T>, f: impl Fn(T) -> U + Sync + Send) -> Vec<U> {
    match pool() {
        Some(pool) => pool.install(|| items.into_par_iter().map(f).collect()),
        None => items.into_iter().map(f).collect(),
    }
}

/// Runs `a` and `b` side by side on the same pool and returns both results; without a pool, one
/// after the other on the calling thread.
pub(crate) fn join<A: Send, B: Send>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    match pool() {
        Some(pool) => pool.install(|| rayon::join(a, b)),
        None => (a(), b()),
    }
}

/// The pool, built on first use; `None` when its threads cannot be spawned.
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .stack_size(STACK)
            .thread_name(|at| format!("spec-pool-{at}"))
            .build()
            .ok()
    })
    .as_ref()
}
