//! Forwarding writes from a follower to the leader.
//!
//! Transactions that wait to be forwarded at the same moment travel together in one
//! `TxnBatch` call (the leader runs each on its own and answers each on its own), so a
//! busy follower pays one round trip per batch instead of one per write. Under light load
//! a batch holds a single transaction and nothing waits.
//!
//! A transaction proposed inside a recorded trace takes its trace along: the batch's
//! `keelson-traceparents` metadata lists `index=traceparent` for its traced items, and the
//! leader writes those as traced log entries, so every replica's apply joins the trace of
//! the request that reached the follower. A leader that does not know the header ignores
//! it (the items are written untraced).

use std::collections::HashMap;

use keelson_client::api::{StoreError, TxnReply};
use keelson_client::never_sent;
use keelson_mvcc::TxnRequest;
use keelson_proto::v1::store_client::StoreClient as GrpcStore;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use keelson_tracecontext::TraceParent;

use crate::replica::{forwarded_request, wire_decode, wire_encode, Replica};

/// How forwarding a write to the leader failed.
#[derive(Debug)]
pub(crate) enum Forward {
    /// The leader certainly did not apply it (no connection, or it was not the leader):
    /// safe to retry elsewhere.
    NeverSent(StoreError),
    /// Anything else; the outcome may be unknown.
    Failed(StoreError),
}

/// Classifies a failed call to the leader at `addr`.
pub(crate) fn status_to_forward(addr: &str, s: &tonic::Status) -> Forward {
    if never_sent(s) {
        Forward::NeverSent(StoreError::NoLeader(format!("leader {addr} unreachable: {}", s.message())))
    } else {
        Forward::Failed(StoreError::Unavailable(format!(
            "forwarding to leader {addr} failed, outcome unknown: {}",
            s.message()
        )))
    }
}

/// Most transactions in one forwarded batch.
const MAX_BATCH: usize = 256;

/// The metadata naming the traced items of a forwarded batch.
pub(crate) const TRACEPARENTS_HEADER: &str = "keelson-traceparents";

/// Most traced items one batch names (each is about 60 bytes of metadata).
const MAX_TRACED: usize = 64;

type Reply = oneshot::Sender<Result<TxnReply, Forward>>;
type Waiter = (String, TxnRequest, Option<TraceParent>, Reply);

/// Transactions for one leader, each with its trace and where its reply goes.
type Group = Vec<(TxnRequest, Option<TraceParent>, Reply)>;

/// The `keelson-traceparents` value for a batch whose items have `traces` (`None` when
/// no item is traced).
pub(crate) fn traces_header(traces: &[Option<TraceParent>]) -> Option<String> {
    let listed: Vec<String> = traces.iter().enumerate().filter_map(|(i, t)| Some(format!("{i}={}", t.as_ref()?))).take(MAX_TRACED).collect();
    (!listed.is_empty()).then(|| listed.join(","))
}

/// Each of a batch's `n` items' trace, from its `keelson-traceparents` value; entries
/// that do not parse or name no item are left out.
pub(crate) fn traces_of(header: Option<&str>, n: usize) -> Vec<Option<TraceParent>> {
    let mut traces = vec![None; n];
    for entry in header.unwrap_or("").split(',') {
        let Some((i, tp)) = entry.split_once('=') else { continue };
        if let (Ok(i), Ok(tp)) = (i.trim().parse::<usize>(), tp.trim().parse::<TraceParent>()) {
            if let Some(slot) = traces.get_mut(i) {
                *slot = Some(tp);
            }
        }
    }
    traces
}

/// The writers' side of the forwarding batcher.
pub(crate) struct ForwardBatcher {
    tx: mpsc::UnboundedSender<Waiter>,
}

impl ForwardBatcher {
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Waiter>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }

    /// Forwards `txn` to the leader at `addr`, in the current span's trace if recorded.
    pub async fn txn(&self, addr: &str, txn: TxnRequest) -> Result<TxnReply, Forward> {
        let (tx, rx) = oneshot::channel();
        let down = || Forward::NeverSent(StoreError::Unavailable("replica is shutting down".into()));
        self.tx.send((addr.to_string(), txn, TraceParent::current_sampled(), tx)).map_err(|_| down())?;
        rx.await.map_err(|_| down())?
    }
}

/// Groups waiting transactions by leader address and sends each group as one call.
pub(crate) async fn run(replica: Replica, mut rx: mpsc::UnboundedReceiver<Waiter>, shutdown: CancellationToken) {
    loop {
        let first = tokio::select! {
            _ = shutdown.cancelled() => return,
            w = rx.recv() => match w { Some(w) => w, None => return },
        };
        let mut groups: HashMap<String, Group> = HashMap::new();
        let mut n = 1;
        groups.entry(first.0).or_default().push((first.1, first.2, first.3));
        while n < MAX_BATCH {
            let Ok((addr, txn, trace, tx)) = rx.try_recv() else { break };
            groups.entry(addr).or_default().push((txn, trace, tx));
            n += 1;
        }
        for (addr, items) in groups {
            tokio::spawn(send_batch(replica.clone(), addr, items));
        }
    }
}

async fn send_batch(replica: Replica, addr: String, items: Group) {
    replica.stats().forwarded.inc_by(items.len() as u64);
    let mut txns = Vec::with_capacity(items.len());
    let mut traces = Vec::with_capacity(items.len());
    let mut waiters = Vec::with_capacity(items.len());
    for (txn, trace, w) in items {
        txns.push(txn);
        traces.push(trace);
        waiters.push(w);
    }
    let replies = call(&replica, &addr, &txns, traces_header(&traces)).await;
    match replies {
        Ok(replies) => {
            for (w, r) in waiters.into_iter().zip(replies) {
                let r = r.map_err(|e| match e {
                    // The remote was not the leader: nothing was appended.
                    StoreError::NotLeader { .. } | StoreError::NoLeader(_) => Forward::NeverSent(e),
                    other => Forward::Failed(other),
                });
                let _ = w.send(r);
            }
        }
        Err(e) => {
            for w in waiters {
                let _ = w.send(Err(match &e {
                    Forward::NeverSent(s) => Forward::NeverSent(s.clone()),
                    Forward::Failed(s) => Forward::Failed(s.clone()),
                }));
            }
        }
    }
}

async fn call(replica: &Replica, addr: &str, txns: &[TxnRequest], traces: Option<String>) -> Result<Vec<Result<TxnReply, StoreError>>, Forward> {
    let ch = replica.inner.peers.get(addr).map_err(Forward::NeverSent)?;
    let env = wire_encode(&txns).map_err(Forward::NeverSent)?;
    let mut request = forwarded_request(env);
    if let Some(value) = traces.and_then(|t| t.parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>().ok()) {
        request.metadata_mut().insert(TRACEPARENTS_HEADER, value);
    }
    let resp = GrpcStore::new(ch)
        .max_decoding_message_size(256 << 20)
        .max_encoding_message_size(256 << 20)
        .txn_batch(request)
        .await
        .map_err(|s| status_to_forward(addr, &s))?;
    let replies: Vec<Result<TxnReply, StoreError>> = wire_decode(resp.get_ref()).map_err(Forward::Failed)?;
    if replies.len() != txns.len() {
        return Err(Forward::Failed(StoreError::Unavailable("leader answered a batch with the wrong count".into())));
    }
    Ok(replies)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(span: &str) -> TraceParent {
        format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{span}-01").parse().unwrap()
    }

    #[test]
    fn a_batch_names_its_traced_items_and_the_leader_reads_them_back() {
        let traces = vec![None, Some(tp("00f067aa0ba902b7")), None, Some(tp("00f067aa0ba902b8"))];
        let header = traces_header(&traces).unwrap();
        assert_eq!(header, "1=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01,3=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b8-01");
        assert_eq!(traces_of(Some(&header), 4), traces);
        assert_eq!(traces_header(&[None, None]), None);
        assert_eq!(traces_of(None, 2), vec![None, None]);
    }

    #[test]
    fn unreadable_or_out_of_range_entries_are_left_out() {
        let read = traces_of(Some("0=garbage,7=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01,x,1=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b9-01"), 2);
        assert_eq!(read, vec![None, Some(tp("00f067aa0ba902b9"))]);
    }

    #[test]
    fn at_most_max_traced_items_are_named() {
        let traces: Vec<Option<TraceParent>> = (0..200).map(|_| Some(tp("00f067aa0ba902b7"))).collect();
        assert_eq!(traces_header(&traces).unwrap().split(',').count(), MAX_TRACED);
    }
}
