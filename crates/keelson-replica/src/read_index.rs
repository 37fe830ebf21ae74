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
//!
//! Traces: a read made inside a recorded trace waits in a `read-index` span of its own
//! (the round it joined and how many reads that round carried). A round takes along the
//! trace of the first traced read it carries: its request to a remote leader names that
//! read's span in `traceparent` metadata, and the leader confirms inside a
//! `leader-read-index` span of that trace. The other reads of the round find it by its
//! `round` number (one leader confirmation cannot have several parents).

use std::sync::Arc;

use keelson_client::api::StoreError;
use keelson_tracecontext::TraceParent;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::replica::Replica;

/// A read waiting for a round: its trace (when recorded), where its answer goes, and its
/// `read-index` span, which learns the round it joined.
pub(crate) struct Waiter {
    trace: Option<TraceParent>,
    span: tracing::Span,
    reply: oneshot::Sender<Result<u64, StoreError>>,
}

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
        let span = if TraceParent::current_sampled().is_some() {
            tracing::info_span!("read-index", round = tracing::field::Empty, reads = tracing::field::Empty)
        } else {
            tracing::Span::none()
        };
        let waiter = Waiter { trace: TraceParent::of(&span).filter(|t| t.sampled), span: span.clone(), reply: tx };
        self.tx.send(waiter).map_err(|_| StoreError::Unavailable("replica is shutting down".into()))?;
        tracing::Instrument::instrument(rx, span).await.map_err(|_| StoreError::Unavailable("replica is shutting down".into()))?
    }
}

/// Most rounds out at once.
pub const MAX_ROUNDS: usize = 3;

/// The batching loop; ends on shutdown.
pub(crate) async fn run(replica: Replica, mut rx: mpsc::UnboundedReceiver<Waiter>, shutdown: CancellationToken) {
    let rounds = Arc::new(Semaphore::new(MAX_ROUNDS));
    let mut round: u64 = 0;
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
        round += 1;
        let trace = waiters.iter().find_map(|w| w.trace);
        for w in &waiters {
            w.span.record("round", round);
            w.span.record("reads", waiters.len());
        }
        let (replica, shutdown) = (replica.clone(), shutdown.clone());
        tokio::spawn(async move {
            let res = tokio::select! {
                _ = shutdown.cancelled() => Err(StoreError::Unavailable("replica is shutting down".into())),
                r = replica.fetch_read_index(trace) => r,
            };
            drop(permit);
            for w in waiters {
                let _ = w.reply.send(res.clone());
            }
        });
    }
}
