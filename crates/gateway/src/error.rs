//! The cluster backends' error, in a leaf module: the bus, the history and the cluster traits
//! all return it, and none of them needs another to name it.

/// A failure of a cluster backend (registry, routing map, bus or history).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The backend could not be reached or answered with an error; the call may be retried.
    #[error("cluster backend unavailable: {0}")]
    Unavailable(String),
    /// The backend refused the call for a reason that will not pass by itself (bad
    /// configuration, authentication, a feature this build lacks). Loops still retry it, at the
    /// back-off's cap, and report it as persistent.
    #[error("cluster backend misconfigured: {0}")]
    Config(String),
}

impl holdfast_retry::Classify for ClusterError {
    fn class(&self) -> holdfast_retry::Class {
        match self {
            ClusterError::Unavailable(_) => holdfast_retry::Class::Transient,
            ClusterError::Config(_) => holdfast_retry::Class::Fatal,
        }
    }
}
