//! [`CallMux`]: range and transaction calls to one replica, multiplexed on one long-lived
//! `Store.Batch` stream.
//!
//! Every clone of a [`crate::StoreClient`] shares one mux per endpoint. Calls that wait at
//! the same moment leave in one frame and replies that are ready together come back in
//! one frame, so a busy client pays one HTTP/2 message (and one TLS record) per batch
//! instead of a whole HTTP/2 request per call; under light load a frame holds one call and
//! nothing waits. The stream is opened on first use and again after it breaks.
//!
//! # What a failed call tells the caller
//! - The stream could not be opened because the connection could not be made: no call on
//!   it reached the replica. The status is the channel's own connect error, which reads as
//!   never sent ([`crate::never_sent`]).
//! - Opening the stream failed otherwise (the connection closed while the call waited for
//!   the replica's answer headers: the first frame may have been written and run): code
//!   `Unknown`, as below.
//! - The stream broke while a call was in flight: the call may or may not have run. The
//!   status has code `Unknown`, which never reads as never sent.
//! - The client was closing: `Unavailable` with a message starting with [`NOT_SENT`],
//!   which reads as never sent.
//!
//! The task behind a mux ends when the last client clone holding it is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use futures::StreamExt;
use keelson_proto::v1::store_client::StoreClient as GrpcStoreClient;
use keelson_proto::v1::Envelope;
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::api::{CallFrame, ReplyFrame, StoreCall, StoreCallReply};

/// Start of the message of a call that was never written to a stream.
pub const NOT_SENT: &str = "call not sent";

/// Most calls in one frame.
const MAX_FRAME_CALLS: usize = 256;
/// A frame stops taking calls once it holds about this many bytes.
const MAX_FRAME_BYTES: usize = 4 << 20;

type ReplySender = oneshot::Sender<Result<StoreCallReply, Status>>;

struct Queued {
    call: StoreCall,
    reply: ReplySender,
}

/// Which of a client's endpoints is the leader, as the replicas' last reply frames said.
pub(crate) struct LeaderHint {
    endpoints: Vec<String>,
    /// Index into `endpoints` plus one; 0 = unknown (or the leader is none of them).
    slot: AtomicUsize,
}

impl LeaderHint {
    pub fn new(endpoints: Vec<String>) -> Self {
        Self { endpoints, slot: AtomicUsize::new(0) }
    }

    /// The index of the leader's endpoint, if known.
    pub fn get(&self) -> Option<usize> {
        self.slot.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Records what a replica said about the leader.
    pub fn set(&self, leader: Option<&str>) {
        let slot = leader.and_then(|l| self.endpoints.iter().position(|e| e == l)).map_or(0, |i| i + 1);
        self.slot.store(slot, Ordering::Relaxed);
    }

    /// Forgets the leader (after a call to it failed, or when the caller moves on).
    pub fn clear(&self) {
        self.slot.store(0, Ordering::Relaxed);
    }
}

/// The callers' side of one replica's batch stream.
pub(crate) struct CallMux {
    endpoint: String,
    channel: Channel,
    leader: Arc<LeaderHint>,
    queue: OnceLock<mpsc::UnboundedSender<Queued>>,
}

impl CallMux {
    /// A mux for `endpoint` over `channel`; reply frames update `leader`.
    pub fn new(endpoint: String, channel: Channel, leader: Arc<LeaderHint>) -> Self {
        Self { endpoint, channel, leader, queue: OnceLock::new() }
    }

    /// Sends `call` on the stream (opening it if needed) and waits for its reply.
    pub async fn call(&self, call: StoreCall) -> Result<StoreCallReply, Status> {
        if keelson_tracecontext::TraceParent::current_sampled().is_none() {
            return self.send(call).await;
        }
        // Inside a recorded trace: a span for the call, named to the replica.
        let span = tracing::info_span!("store-call", kind = call.kind(), endpoint = %self.endpoint);
        let call = match keelson_tracecontext::TraceParent::of(&span) {
            Some(parent) => StoreCall::Traced { traceparent: parent.to_string(), call: Box::new(call) },
            None => call,
        };
        tracing::Instrument::instrument(self.send(call), span).await
    }

    async fn send(&self, call: StoreCall) -> Result<StoreCallReply, Status> {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(run(self.endpoint.clone(), self.channel.clone(), self.leader.clone(), rx));
            tx
        });
        let (tx, rx) = oneshot::channel();
        let gone = || Status::unavailable(format!("{NOT_SENT}: the client for {} is closing", self.endpoint));
        queue.send(Queued { call, reply: tx }).map_err(|_| gone())?;
        rx.await.map_err(|_| Status::unknown(format!("the call to {} was dropped; outcome unknown", self.endpoint)))?
    }
}

/// Calls written to the stream and waiting for their replies.
#[derive(Default)]
struct InFlight {
    next_id: u64,
    waiting: HashMap<u64, ReplySender>,
}

impl InFlight {
    /// Takes up to a frame's worth of calls (`first`, then whatever else is queued) and
    /// encodes them.
    fn frame(&mut self, first: Queued, queue: &mut mpsc::UnboundedReceiver<Queued>) -> Result<Envelope, Status> {
        let mut calls = Vec::new();
        let mut bytes = 0;
        let mut next = Some(first);
        while let Some(q) = next.take() {
            bytes += q.call.wire_size();
            let id = self.next_id;
            self.next_id += 1;
            calls.push((id, q.call));
            self.waiting.insert(id, q.reply);
            if calls.len() < MAX_FRAME_CALLS && bytes < MAX_FRAME_BYTES {
                next = queue.try_recv().ok();
            }
        }
        let ids: Vec<u64> = calls.iter().map(|(id, _)| *id).collect();
        match postcard::to_stdvec(&CallFrame { calls }) {
            Ok(payload) => Ok(Envelope { payload }),
            Err(e) => {
                let status = Status::invalid_argument(format!("{NOT_SENT}: encoding failed: {e}"));
                for id in ids {
                    if let Some(w) = self.waiting.remove(&id) {
                        let _ = w.send(Err(status.clone()));
                    }
                }
                Err(status)
            }
        }
    }

    fn answer(&mut self, frame: ReplyFrame) {
        for (id, reply) in frame.replies {
            if let Some(w) = self.waiting.remove(&id) {
                let _ = w.send(Ok(reply));
            }
        }
    }

    fn fail_all(&mut self, status: &Status) {
        for (_, w) in self.waiting.drain() {
            let _ = w.send(Err(status.clone()));
        }
    }
}

fn outcome_unknown(endpoint: &str, why: &str) -> Status {
    Status::new(Code::Unknown, format!("the stream to {endpoint} ended with calls in flight ({why}); their outcome is unknown"))
}

/// Serves one mux: opens the stream when there is something to send, pumps frames both
/// ways, and after the stream ends waits for the next call to open another.
async fn run(endpoint: String, channel: Channel, leader: Arc<LeaderHint>, mut queue: mpsc::UnboundedReceiver<Queued>) {
    let mut inflight = InFlight::default();
    loop {
        let Some(first) = queue.recv().await else { return };
        // Unbounded, so that sending never keeps this task from reading replies (the
        // replica, in turn, may be waiting for those to be read); what is queued is bounded
        // by the callers waiting for replies.
        let (frames, outbound) = mpsc::unbounded_channel::<Envelope>();
        let Ok(frame) = inflight.frame(first, &mut queue) else { continue };
        // Cannot fail: `outbound` is alive.
        let _ = frames.send(frame);
        let mut grpc = GrpcStoreClient::new(channel.clone())
            .max_decoding_message_size(256 << 20)
            .max_encoding_message_size(256 << 20);
        let mut replies = match grpc.batch(tokio_stream::wrappers::UnboundedReceiverStream::new(outbound)).await {
            Ok(r) => r.into_inner(),
            Err(status) => {
                tracing::debug!(%endpoint, %status, "opening the batch stream failed");
                // Only a connection never made proves nothing was sent: the first frame
                // goes out with the request and may have run before, say, the replica died
                // and hyper reported the call canceled ("connection closed").
                if crate::never_sent(&status) {
                    inflight.fail_all(&status);
                } else {
                    inflight.fail_all(&outcome_unknown(&endpoint, status.message()));
                }
                continue;
            }
        };
        let mut closing = false;
        loop {
            tokio::select! {
                q = queue.recv(), if !closing => match q {
                    // Every client is gone: finish what is in flight, then stop.
                    None => closing = true,
                    Some(first) => {
                        let Ok(frame) = inflight.frame(first, &mut queue) else { continue };
                        if frames.send(frame).is_err() {
                            // The stream's request side is gone; the reply side ends in a
                            // moment and fails these calls with the others (as outcome
                            // unknown, which is true if not exact).
                            tracing::debug!(%endpoint, "batch stream closed while sending");
                        }
                    }
                },
                msg = replies.next() => match msg {
                    Some(Ok(env)) => match postcard::from_bytes::<ReplyFrame>(&env.payload) {
                        Ok(frame) => {
                            leader.set(frame.leader.as_deref());
                            inflight.answer(frame);
                        }
                        Err(e) => {
                            inflight.fail_all(&outcome_unknown(&endpoint, &format!("malformed reply frame: {e}")));
                            break;
                        }
                    },
                    Some(Err(status)) => {
                        inflight.fail_all(&outcome_unknown(&endpoint, status.message()));
                        break;
                    }
                    None => {
                        inflight.fail_all(&outcome_unknown(&endpoint, "closed by the replica"));
                        break;
                    }
                },
            }
            if closing && inflight.waiting.is_empty() {
                return;
            }
        }
        if closing {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{RangeCall, ReadConsistency};
    use keelson_mvcc::{KeyRange, Op, PutRequest, RangeRequest, TxnRequest};

    fn put(n: usize, value: usize) -> StoreCall {
        StoreCall::Txn(TxnRequest {
            success: vec![Op::Put(PutRequest { key: format!("/k/{n}").into_bytes(), value: vec![b'v'; value], prev_kv: false })],
            ..Default::default()
        })
    }

    fn queued(call: StoreCall) -> (Queued, oneshot::Receiver<Result<StoreCallReply, Status>>) {
        let (reply, rx) = oneshot::channel();
        (Queued { call, reply }, rx)
    }

    #[test]
    fn a_frame_takes_what_is_queued_up_to_its_limits() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut keep = Vec::new();
        for n in 0..(MAX_FRAME_CALLS + 10) {
            let (q, r) = queued(put(n, 8));
            keep.push(r);
            tx.send(q).expect("queue");
        }
        let mut inflight = InFlight::default();
        let first = rx.try_recv().expect("first");
        let env = inflight.frame(first, &mut rx).expect("frame");
        let frame: CallFrame = postcard::from_bytes(&env.payload).expect("decode");
        assert_eq!(frame.calls.len(), MAX_FRAME_CALLS);
        let ids: Vec<u64> = frame.calls.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, (0..MAX_FRAME_CALLS as u64).collect::<Vec<_>>(), "ids are fresh and in order");
        assert_eq!(inflight.waiting.len(), MAX_FRAME_CALLS);

        // Large calls: the byte limit closes the frame first.
        let (tx, mut rx) = mpsc::unbounded_channel();
        for n in 0..8 {
            let (q, r) = queued(put(n, 1 << 20));
            keep.push(r);
            tx.send(q).expect("queue");
        }
        let first = rx.try_recv().expect("first");
        let env = inflight.frame(first, &mut rx).expect("frame");
        let frame: CallFrame = postcard::from_bytes(&env.payload).expect("decode");
        assert_eq!(frame.calls.len(), 4, "about 4 MiB per frame");
        assert_eq!(frame.calls[0].0, MAX_FRAME_CALLS as u64, "ids continue across frames");
    }

    #[tokio::test]
    async fn replies_reach_their_own_callers_in_any_order() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let range = |k: &str| {
            StoreCall::Range(RangeCall {
                request: RangeRequest { range: KeyRange::single(k.as_bytes()), ..Default::default() },
                consistency: ReadConsistency::Serializable,
            })
        };
        let (a, ra) = queued(range("a"));
        let (b, rb) = queued(range("b"));
        tx.send(b).expect("queue");
        let mut inflight = InFlight::default();
        inflight.frame(a, &mut rx).expect("frame");
        let reply = |n: i64| {
            StoreCallReply::Range(Err(crate::api::StoreError::Compacted { compacted: n }))
        };
        // Answered in the other order, plus an id nobody waits for.
        inflight.answer(ReplyFrame { replies: vec![(1, reply(11)), (7, reply(77)), (0, reply(10))], leader: None });
        assert_eq!(ra.await.expect("a answered").expect("ok"), reply(10));
        assert_eq!(rb.await.expect("b answered").expect("ok"), reply(11));
        assert!(inflight.waiting.is_empty());
    }

    #[test]
    fn the_leader_hint_names_only_known_endpoints() {
        let hint = LeaderHint::new(vec!["a:1".into(), "b:2".into()]);
        assert_eq!(hint.get(), None);
        hint.set(Some("b:2"));
        assert_eq!(hint.get(), Some(1));
        hint.set(Some("elsewhere:3"));
        assert_eq!(hint.get(), None, "a leader the client cannot name is no hint");
        hint.set(Some("a:1"));
        hint.clear();
        assert_eq!(hint.get(), None);
    }

    #[tokio::test]
    async fn a_broken_stream_fails_calls_in_flight_as_outcome_unknown() {
        let (_tx, mut rx) = mpsc::unbounded_channel();
        let (a, ra) = queued(put(1, 8));
        let mut inflight = InFlight::default();
        inflight.frame(a, &mut rx).expect("frame");
        inflight.fail_all(&outcome_unknown("x:1", "connection reset by peer"));
        let status = ra.await.expect("answered").expect_err("failed");
        assert_eq!(status.code(), Code::Unknown);
        assert!(!crate::never_sent(&status), "an in-flight call may have run: {status:?}");
        assert!(crate::never_sent(&Status::unavailable(format!("{NOT_SENT}: x"))));
    }
}
