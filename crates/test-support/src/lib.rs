//! holdfast-test-support (work in progress).
