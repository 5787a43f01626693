//! Cross-crate end-to-end suites for holdfast (work in progress).
