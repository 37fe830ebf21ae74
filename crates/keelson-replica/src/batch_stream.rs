//! `Store.Batch` streams: range and transaction calls multiplexed on one stream per client
//! connection (the client side is `keelson_client`'s call mux).
//!
//! Each call runs in its own task, exactly as the unary `Range` and `Txn` calls do; replies
//! that are ready together leave in one frame, in the order the calls finished. Memory is
//! bounded: at most [`MAX_IN_FLIGHT`] calls of a stream run at once, and the stream reads
//! no further frames while that many are running.

use std::sync::Arc;

use futures::StreamExt;
use keelson_client::api::{CallFrame, ReplyFrame, StoreCall, StoreCallReply};
use keelson_proto::v1::Envelope;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tonic::{Status, Streaming};
use tracing::Instrument;

use crate::replica::Replica;

/// Most calls of one stream running at once.
pub const MAX_IN_FLIGHT: usize = 4096;
/// Reply frames queued for the client's connection.
pub const REPLY_QUEUE: usize = 64;
/// Most replies in one frame.
const MAX_FRAME_REPLIES: usize = 256;
/// A frame stops taking replies once it holds about this many bytes.
const MAX_FRAME_BYTES: usize = 4 << 20;

type Outbound = mpsc::Sender<Result<Envelope, Status>>;

/// Runs one call against the replica.
async fn run_call(replica: &Replica, call: StoreCall) -> StoreCallReply {
    match call {
        StoreCall::Range(r) => StoreCallReply::Range(replica.range(r).await),
        StoreCall::Txn(t) => StoreCallReply::Txn(replica.txn(t, false).await),
        StoreCall::Traced { traceparent, call } => {
            // The caller's trace, continued here (a call can be wrapped only once).
            let span = tracing::info_span!("replica-call", kind = call.kind(), member = replica.id(), trace_id = tracing::field::Empty);
            keelson_tracecontext::continue_trace(&span, traceparent.parse().ok());
            let call = match *call {
                StoreCall::Traced { call, .. } => *call,
                plain => plain,
            };
            Box::pin(run_call(replica, call)).instrument(span).await
        }
    }
}

/// Serves one batch stream until the client closes its side and every call has been
/// answered, the client goes away, or the replica shuts down.
pub(crate) async fn serve_stream(replica: Replica, mut frames: Streaming<Envelope>, out: Outbound, shutdown: CancellationToken) {
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let (done_tx, mut done) = mpsc::unbounded_channel::<(u64, StoreCallReply)>();
    let mut running = 0usize;
    let mut client_done = false;
    loop {
        if client_done && running == 0 {
            return;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            msg = frames.next(), if !client_done => match msg {
                None => client_done = true,
                Some(Err(status)) => {
                    tracing::debug!(%status, "batch stream broke");
                    return;
                }
                Some(Ok(env)) => {
                    let frame: CallFrame = match postcard::from_bytes(&env.payload) {
                        Ok(f) => f,
                        Err(e) => {
                            let _ = out.send(Err(Status::invalid_argument(format!("malformed call frame: {e}")))).await;
                            return;
                        }
                    };
                    for (id, call) in frame.calls {
                        let Ok(permit) = permits.clone().acquire_owned().await else { return };
                        running += 1;
                        let (replica, done_tx) = (replica.clone(), done_tx.clone());
                        let span = tracing::debug_span!("batch_call", id, kind = call.kind());
                        tokio::spawn(
                            async move {
                                let reply = run_call(&replica, call).await;
                                let _ = done_tx.send((id, reply));
                                drop(permit);
                            }
                            .instrument(span),
                        );
                    }
                }
            },
            Some(first) = done.recv() => {
                let mut replies = vec![first];
                let mut bytes = replies[0].1.wire_size();
                while replies.len() < MAX_FRAME_REPLIES && bytes < MAX_FRAME_BYTES {
                    let Ok(r) = done.try_recv() else { break };
                    bytes += r.1.wire_size();
                    replies.push(r);
                }
                running -= replies.len();
                let env = match postcard::to_stdvec(&ReplyFrame { replies, leader: replica.leader().map(|(_, addr)| addr) }) {
                    Ok(payload) => Envelope { payload },
                    Err(e) => {
                        let _ = out.send(Err(Status::internal(format!("encoding replies: {e}")))).await;
                        return;
                    }
                };
                if out.send(Ok(env)).await.is_err() {
                    return; // The client went away.
                }
            }
        }
    }
}
