//! The Raft transport's server side: hands peers' messages to the local Raft node.

use std::path::PathBuf;

use futures::StreamExt;
use keelson_mvcc::KvBackend;
use keelson_proto::v1::raft_transport_server::RaftTransport;
use keelson_proto::v1::{Envelope, SnapshotChunk};
use openraft::raft::{AppendEntriesRequest, TransferLeaderRequest, VoteRequest};
use tokio::io::AsyncWriteExt;
use tonic::{Request, Response, Status, Streaming};

use crate::disk_guard::DiskGuard;
use crate::snapshot_file::SnapshotFile;
use crate::types::{SnapshotMeta, Vote};
use crate::{wire, KeelsonRaftNode};

/// Serves `RaftTransport` for one local Raft node.
pub struct RaftTransportService<B: KvBackend> {
    raft: KeelsonRaftNode<B>,
    /// Where incoming snapshots are spooled before they are installed.
    incoming_dir: PathBuf,
    /// While it says the disk is low, nothing that would write to the log is taken.
    disk: DiskGuard,
}

impl<B: KvBackend> RaftTransportService<B> {
    pub fn new(raft: KeelsonRaftNode<B>, incoming_dir: PathBuf, disk: DiskGuard) -> Self {
        Self { raft, incoming_dir, disk }
    }

    /// Refuses, while the disk is low, a message whose handling would write here.
    fn admit(&self, writes: bool) -> Result<(), Status> {
        if !writes {
            return Ok(());
        }
        self.disk.admit().map_err(|e| Status::resource_exhausted(e.to_string()))
    }
}

#[tonic::async_trait]
impl<B: KvBackend> RaftTransport for RaftTransportService<B> {
    async fn append_entries(&self, req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        let rpc: AppendEntriesRequest<crate::KeelsonRaft> = wire::decode("append-entries", req.get_ref())?;
        // Entries are refused; a heartbeat is taken even when it brings a new vote (a few
        // bytes, what the reserve is for): so a deposed leader learns it was replaced.
        self.admit(!rpc.entries.is_empty())?;
        let res = self.raft.append_entries(rpc).await;
        Ok(Response::new(wire::encode("append-entries reply", &res)?))
    }

    async fn vote(&self, req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        let rpc: VoteRequest<crate::KeelsonRaft> = wire::decode("vote", req.get_ref())?;
        let res = self.raft.vote(rpc).await;
        Ok(Response::new(wire::encode("vote reply", &res)?))
    }

    /// Raft Pre-Vote: whether this node would grant the vote, decided by openraft without
    /// changing the local vote or term.
    async fn pre_vote(&self, req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        let rpc: VoteRequest<crate::KeelsonRaft> = wire::decode("pre-vote", req.get_ref())?;
        let res = self.raft.pre_vote(rpc).await;
        Ok(Response::new(wire::encode("pre-vote reply", &res)?))
    }

    async fn transfer_leader(&self, req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        let rpc: TransferLeaderRequest<crate::KeelsonRaft> = wire::decode("transfer-leader", req.get_ref())?;
        let res = self.raft.handle_transfer_leader(rpc).await;
        Ok(Response::new(wire::encode("transfer-leader reply", &res)?))
    }

    async fn install_snapshot(&self, req: Request<Streaming<SnapshotChunk>>) -> Result<Response<Envelope>, Status> {
        self.admit(true)?;
        let mut stream = req.into_inner();
        let first = stream
            .next()
            .await
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))??;
        let (vote, meta): (Vote, SnapshotMeta) = postcard::from_bytes(&first.header)
            .map_err(|e| Status::invalid_argument(format!("bad snapshot header: {e}")))?;
        tokio::fs::create_dir_all(&self.incoming_dir).await.map_err(io_status)?;
        let path = self.incoming_dir.join(format!(
            "incoming-{}-{}.tmp",
            std::process::id(),
            INCOMING_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mut file = tokio::fs::File::create(&path).await.map_err(io_status)?;
        let received = async {
            file.write_all(&first.data).await?;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(std::io::Error::other)?;
                file.write_all(&chunk.data).await?;
            }
            file.sync_all().await
        }
        .await;
        if let Err(e) = received {
            let _ = tokio::fs::remove_file(&path).await;
            return Err(io_status(e));
        }
        tracing::info!(?meta.last_log_id, "received snapshot, installing");
        let snapshot = openraft::alias::SnapshotOf::<crate::KeelsonRaft, SnapshotFile> {
            meta,
            snapshot: SnapshotFile { path: path.clone() },
        };
        let res = self.raft.install_full_snapshot(vote, snapshot).await;
        // On success the state machine moved the file; otherwise drop the spool.
        let _ = tokio::fs::remove_file(&path).await;
        let res = res.map_err(openraft::errors::RaftError::<crate::KeelsonRaft>::Fatal);
        Ok(Response::new(wire::encode("snapshot reply", &res)?))
    }
}

static INCOMING_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn io_status(e: std::io::Error) -> Status {
    Status::internal(format!("snapshot spool: {e}"))
}
