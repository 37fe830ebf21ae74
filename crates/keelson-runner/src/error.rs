//! The runner's one error type.

/// A failure to run the cluster.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// A file, directory or process operation failed; `context` says on what.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A subprocess (`ip`, `nft`, `keelson token create`) exited unsuccessfully or timed
    /// out. `status` is the exit status or `timed out after …`.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Command { cmd: String, status: String, stderr: String },
    /// The topology (or a member kind) is not available here; the text says why.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The cluster did not reach the awaited state in time (no leader, not all voters,
    /// a node not Ready, …).
    #[error("not ready: {0}")]
    NotReady(String),
    /// The cluster refused a request, or an operation was invalid for it (no such member,
    /// too many servers).
    #[error("cluster: {0}")]
    Cluster(String),
    /// `cluster.json` could not be read or written.
    #[error("cluster.json: {0}")]
    Manifest(String),
    /// The cluster's certificates could not be made or read.
    #[error("cluster certificates: {0}")]
    Pki(#[source] keelson_pki::PkiError),
}

impl RunnerError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunnerError {
        let context = context.into();
        move |source| RunnerError::Io { context, source }
    }
}
