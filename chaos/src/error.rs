//! The harness's one error type.

use keelson_runner::RunnerError;

/// A failure of the harness.
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// The cluster failed: a member could not be started, stopped or supervised, a
    /// subprocess (`nft`, `tc`) failed, the cluster did not reach the awaited state in
    /// time (`RunnerError::NotReady`), or a fault was invalid for it
    /// (`RunnerError::Cluster`: no such server, a member removal refused).
    #[error(transparent)]
    Runner(#[from] RunnerError),
    /// Writing the harness's event log failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The fault is not available in this isolation mode or cluster size; the text says why.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl ChaosError {
    /// The cluster did not reach the awaited state (no leader, no eligible server, …).
    pub(crate) fn not_ready(why: impl Into<String>) -> Self {
        ChaosError::Runner(RunnerError::NotReady(why.into()))
    }

    /// The fault was invalid for the cluster or the cluster refused it.
    pub(crate) fn cluster(why: impl Into<String>) -> Self {
        ChaosError::Runner(RunnerError::Cluster(why.into()))
    }
}
