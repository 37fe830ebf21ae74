//! The store and cluster gRPC services: decode, call [`Replica`], encode. Nothing else.

use std::pin::Pin;

use futures::Stream;
use keelson_client::api::*;
use keelson_client::api::TxnReply;
use keelson_mvcc::TxnRequest;
use keelson_proto::v1::cluster_server::Cluster;
use keelson_proto::v1::store_server::Store;
use keelson_proto::v1::{Envelope, SnapshotChunk};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use crate::replica::{wire_encode, Replica, FORWARDED_HEADER};
use crate::{batch_stream, watch};

fn decode<T: serde::de::DeserializeOwned>(req: &Request<Envelope>) -> Result<T, Status> {
    postcard::from_bytes(&req.get_ref().payload).map_err(|e| Status::invalid_argument(format!("malformed request: {e}")))
}

fn reply<T: serde::Serialize>(res: Result<T, StoreError>) -> Result<Response<Envelope>, Status> {
    wire_encode(&res).map(Response::new).map_err(|e| Status::internal(e.to_string()))
}

fn is_forwarded<T>(req: &Request<T>) -> bool {
    req.metadata().get(FORWARDED_HEADER).is_some()
}

/// `keelson.v1.Store` over a replica.
pub struct StoreService {
    pub replica: Replica,
    pub slow_watcher_timeout: std::time::Duration,
    pub shutdown: CancellationToken,
}

#[tonic::async_trait]
impl Store for StoreService {
    #[tracing::instrument(name = "range", level = "debug", skip_all)]
    async fn range(&self, req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        let call: RangeCall = decode(&req)?;
        reply(self.replica.range(call).await)
    }

    #[tracing::instrument(name = "txn", level = "debug", skip_all)]
    async fn txn(&self, req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        let forwarded = is_forwarded(&req);
        let txn: TxnRequest = decode(&req)?;
        reply(self.replica.txn(txn, forwarded).await)
    }

    #[tracing::instrument(name = "txn_batch", level = "debug", skip_all)]
    async fn txn_batch(&self, req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        let txns: Vec<TxnRequest> = decode(&req)?;
        let header = req.metadata().get(crate::forward::TRACEPARENTS_HEADER).and_then(|v| v.to_str().ok());
        let traces = crate::forward::traces_of(header, txns.len());
        let replies: Vec<Result<TxnReply, StoreError>> = self.replica.txn_batch(txns, traces).await;
        // The batch itself always succeeds; each reply carries its own result.
        wire_encode(&replies).map(Response::new).map_err(|e| Status::internal(e.to_string()))
    }

    #[tracing::instrument(name = "compact", level = "debug", skip_all)]
    async fn compact(&self, req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        let forwarded = is_forwarded(&req);
        let call: CompactCall = decode(&req)?;
        reply(self.replica.compact(call.revision, forwarded).await)
    }

    type BatchStream = Pin<Box<dyn Stream<Item = Result<Envelope, Status>> + Send + 'static>>;

    async fn batch(&self, req: Request<Streaming<Envelope>>) -> Result<Response<Self::BatchStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(batch_stream::REPLY_QUEUE);
        tokio::spawn(batch_stream::serve_stream(self.replica.clone(), req.into_inner(), tx, self.shutdown.clone()));
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<Envelope, Status>> + Send + 'static>>;

    async fn watch(&self, req: Request<Streaming<Envelope>>) -> Result<Response<Self::WatchStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(watch::STREAM_QUEUE);
        tokio::spawn(watch::serve_stream(
            self.replica.clone(),
            req.into_inner(),
            tx,
            self.slow_watcher_timeout,
            self.shutdown.clone(),
        ));
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn read_index(&self, req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        // A follower's round asked inside a recorded trace names it; the confirmation
        // joins that trace.
        let parent = req.metadata().get(keelson_tracecontext::HEADER).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<keelson_tracecontext::TraceParent>().ok());
        let confirm = self.replica.leader_read_index();
        let res = match parent {
            Some(parent) => {
                let span = tracing::info_span!("leader-read-index", leader = self.replica.id(), index = tracing::field::Empty, trace_id = tracing::field::Empty);
                keelson_tracecontext::continue_trace(&span, Some(parent));
                let res = tracing::Instrument::instrument(confirm, span.clone()).await;
                if let Ok(index) = &res {
                    span.record("index", index);
                }
                res
            }
            None => confirm.await,
        };
        reply(res.map(|index| ReadIndexReply { index, leader_id: self.replica.id() }))
    }
}

/// `keelson.v1.Cluster` over a replica.
pub struct ClusterService {
    pub replica: Replica,
    /// Ends backup streams when the replica stops.
    pub shutdown: CancellationToken,
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn status(&self, _req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        reply(Ok(self.replica.status()))
    }

    async fn member_list(&self, _req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        reply(Ok(self.replica.members()))
    }

    async fn member_add(&self, req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        let forwarded = is_forwarded(&req);
        let call: MemberAddCall = decode(&req)?;
        reply(self.replica.member_add(call, forwarded).await)
    }

    async fn member_remove(&self, req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        let forwarded = is_forwarded(&req);
        let call: MemberRemoveCall = decode(&req)?;
        reply(self.replica.member_remove(call.id, forwarded).await)
    }

    async fn hash_kv(&self, req: Request<Envelope>) -> Result<Response<Envelope>, Status> {
        let call: HashKvCall = decode(&req)?;
        reply(self.replica.hash_kv(call.revision).await)
    }

    type BackupStream = Pin<Box<dyn Stream<Item = Result<SnapshotChunk, Status>> + Send + 'static>>;

    async fn backup(&self, _req: Request<Envelope>) -> Result<Response<Self::BackupStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(crate::backup::serve(self.replica.clone(), tx, self.shutdown.clone()));
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}
