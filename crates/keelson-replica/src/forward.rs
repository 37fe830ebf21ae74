//! Forwarding writes from a follower to the leader.
//!
//! Transactions that wait to be forwarded at the same moment travel together in one
//! `TxnBatch` call (the leader runs each on its own and answers each on its own), so a
//! busy follower pays one round trip per batch instead of one per write. Under light load
//! a batch holds a single transaction and nothing waits.

use std::collections::HashMap;

use keelson_client::api::{StoreError, TxnReply};
use keelson_client::never_sent;
use keelson_mvcc::TxnRequest;
use keelson_proto::v1::store_client::StoreClient as GrpcStore;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

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

type Waiter = (String, TxnRequest, oneshot::Sender<Result<TxnReply, Forward>>);

/// Transactions for one leader, each with where its reply goes.
type Group = Vec<(TxnRequest, oneshot::Sender<Result<TxnReply, Forward>>)>;

/// The writers' side of the forwarding batcher.
pub(crate) struct ForwardBatcher {
    tx: mpsc::UnboundedSender<Waiter>,
}

impl ForwardBatcher {
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Waiter>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }

    /// Forwards `txn` to the leader at `addr`.
    pub async fn txn(&self, addr: &str, txn: TxnRequest) -> Result<TxnReply, Forward> {
        let (tx, rx) = oneshot::channel();
        let down = || Forward::NeverSent(StoreError::Unavailable("replica is shutting down".into()));
        self.tx.send((addr.to_string(), txn, tx)).map_err(|_| down())?;
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
        groups.entry(first.0).or_default().push((first.1, first.2));
        while n < MAX_BATCH {
            let Ok((addr, txn, tx)) = rx.try_recv() else { break };
            groups.entry(addr).or_default().push((txn, tx));
            n += 1;
        }
        for (addr, items) in groups {
            tokio::spawn(send_batch(replica.clone(), addr, items));
        }
    }
}

async fn send_batch(replica: Replica, addr: String, items: Group) {
    replica.stats().forwarded.inc_by(items.len() as u64);
    let (txns, waiters): (Vec<TxnRequest>, Vec<_>) = items.into_iter().unzip();
    let replies = call(&replica, &addr, &txns).await;
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

async fn call(replica: &Replica, addr: &str, txns: &[TxnRequest]) -> Result<Vec<Result<TxnReply, StoreError>>, Forward> {
    let ch = replica.inner.peers.get(addr).map_err(Forward::NeverSent)?;
    let env = wire_encode(&txns).map_err(Forward::NeverSent)?;
    let resp = GrpcStore::new(ch)
        .max_decoding_message_size(256 << 20)
        .max_encoding_message_size(256 << 20)
        .txn_batch(forwarded_request(env))
        .await
        .map_err(|s| status_to_forward(addr, &s))?;
    let replies: Vec<Result<TxnReply, StoreError>> = wire_decode(resp.get_ref()).map_err(Forward::Failed)?;
    if replies.len() != txns.len() {
        return Err(Forward::Failed(StoreError::Unavailable("leader answered a batch with the wrong count".into())));
    }
    Ok(replies)
}
