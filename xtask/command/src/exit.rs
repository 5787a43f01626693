//! The exit codes every command shares beyond 0 (judged, nothing wrong) and 1 (judged, something
//! wrong), which each command's own code says.

/// A usage or fatal error: nothing was judged (no root, a flag refused, a tool that failed).
pub const USAGE_ERROR: u8 = 2;
