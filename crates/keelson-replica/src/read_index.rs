//! Batched ReadIndex: every linearizable read waiting at the moment a round starts
//! shares that round's single leader confirmation.
//!
//! Correctness: a read joins only a round that starts after the read arrived (the loop
//! takes all queued readers, then asks the leader), so the index it gets covers every
//! write acknowledged before the read began.

use keelson_client::api::StoreError;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::replica::Replica;

type Waiter = oneshot::Sender<Result<u64, StoreError>>;

/// The readers' side of the batcher.
pub(crate) struct ReadIndexBatcher {
    tx: mpsc::UnboundedSender<Waiter>,
}

impl ReadIndexBatcher {
    /// Creates the batcher; [`run`] must be started with the receiver.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Waiter>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }

    /// A read index confirmed by the leader after this call began.
    pub async fn read_index(&self) -> Result<u64, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(tx).map_err(|_| StoreError::Unavailable("replica is shutting down".into()))?;
        rx.await.map_err(|_| StoreError::Unavailable("replica is shutting down".into()))?
    }
}

/// The batching loop; ends on shutdown.
pub(crate) async fn run(replica: Replica, mut rx: mpsc::UnboundedReceiver<Waiter>, shutdown: CancellationToken) {
    loop {
        let first = tokio::select! {
            _ = shutdown.cancelled() => return,
            w = rx.recv() => match w { Some(w) => w, None => return },
        };
        let mut waiters = vec![first];
        while let Ok(w) = rx.try_recv() {
            waiters.push(w);
        }
        replica.stats().read_index_rounds.inc();
        let res = tokio::select! {
            _ = shutdown.cancelled() => Err(StoreError::Unavailable("replica is shutting down".into())),
            r = replica.fetch_read_index() => r,
        };
        for w in waiters {
            let _ = w.send(res.clone());
        }
    }
}
