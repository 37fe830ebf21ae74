//! Batched ReadIndex: every linearizable read waiting at the moment a round starts
//! shares that round's single leader confirmation.
//!
//! Correctness: a read joins only a round that starts after the read arrived (the loop
//! takes all queued readers, then asks the leader), so the index it gets covers every
//! write acknowledged before the read began.
//!
//! Rounds overlap: up to [`MAX_ROUNDS`] run at once, so a read that arrives while a round
//! is out waits for one round of its own instead of the rest of that one plus its own.
//! Each round still takes every reader queued when it starts, so under load rounds carry
//! many reads each.

use std::sync::Arc;

use keelson_client::api::StoreError;
use tokio::sync::{mpsc, oneshot, Semaphore};
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

/// Most rounds out at once.
pub const MAX_ROUNDS: usize = 3;

/// The batching loop; ends on shutdown.
pub(crate) async fn run(replica: Replica, mut rx: mpsc::UnboundedReceiver<Waiter>, shutdown: CancellationToken) {
    let rounds = Arc::new(Semaphore::new(MAX_ROUNDS));
    loop {
        let first = tokio::select! {
            _ = shutdown.cancelled() => return,
            w = rx.recv() => match w { Some(w) => w, None => return },
        };
        // Wait for a free round before collecting, so that the readers who arrive
        // meanwhile join this round.
        let permit = tokio::select! {
            _ = shutdown.cancelled() => return,
            p = rounds.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
        };
        let mut waiters = vec![first];
        while let Ok(w) = rx.try_recv() {
            waiters.push(w);
        }
        replica.stats().read_index_rounds.inc();
        let (replica, shutdown) = (replica.clone(), shutdown.clone());
        tokio::spawn(async move {
            let res = tokio::select! {
                _ = shutdown.cancelled() => Err(StoreError::Unavailable("replica is shutting down".into())),
                r = replica.fetch_read_index() => r,
            };
            drop(permit);
            for w in waiters {
                let _ = w.send(res.clone());
            }
        });
    }
}
