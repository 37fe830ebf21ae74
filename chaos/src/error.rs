//! The harness's one error type.

/// A failure of the harness.
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// A file, directory or process operation failed; `context` says on what.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A subprocess (`ip`, `nft`, `tc`) exited unsuccessfully or timed out.
    /// `status` is the exit status or `timed out after …`.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Command { cmd: String, status: String, stderr: String },
    /// The fault (or isolation mode) is not available here; the text says why.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The cluster did not reach the awaited state in time (no leader, not all voters, ...).
    #[error("not ready: {0}")]
    NotReady(String),
    /// The cluster API refused or failed a request, or a fault was invalid for the cluster
    /// (no such node, too few servers).
    #[error("cluster: {0}")]
    Cluster(String),
}

impl ChaosError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ChaosError {
        let context = context.into();
        move |source| ChaosError::Io { context, source }
    }
}
