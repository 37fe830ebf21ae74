//! Jepsen-style consistency checking for Keelson.
//!
//! * [`history`]: the JSON Lines history format, [`history::HistoryWriter`]
//!   (thread-safe recorder) and reader;
//! * [`formats`]: loading Keelson JSONL, Jepsen plain-text logs and Jepsen
//!   EDN histories ([`edn`] is the EDN reader);
//! * [`ops`]: pairing invoke/completion events into operations;
//! * [`model`]: sequential specifications (CAS register, key-value map);
//! * [`linear`]: the linearizability checker (Wing–Gong/Lowe search with
//!   memoization, per-key decomposition) and its failure reports;
//! * [`timeline`]: HTML/SVG timelines of (sub-)histories;
//! * [`watch`]: the watch-stream checker;
//! * [`lease`]: the checker of fenced writes by lease holders (terms never go
//!   back, acknowledged writes stored, refused ones not, failover within a bound);
//! * [`self_heal`]: the checker of a cluster of real nodes under node faults (bound
//!   once, no surge, every fault recovered from, converged after healing);
//! * [`synth`]: random linearizable histories and guaranteed anomalies, for
//!   tests and benchmarks.

#![warn(missing_docs)]

pub mod edn;
pub mod formats;
pub mod history;
pub mod lease;
pub mod linear;
pub mod model;
pub mod ops;
pub mod self_heal;
pub mod synth;
pub mod timeline;
pub mod watch;

pub use formats::{Format, FormatError, LoadedHistory};
pub use history::{
    ChangeKind, EventKind, Function, HistoryError, HistoryEvent, HistoryWriter, Value,
};
pub use lease::{check_lease, LeaseHistory, LeaseReport};
pub use linear::{check, check_operations, KeyFailure, LinearReport, ModelKind};
pub use model::{CasRegister, KvMap, Model, ModelError};
pub use ops::{pair_events, Operation, Outcome, PairError};
pub use self_heal::{check_self_heal, SelfHealHistory, SelfHealReport};
pub use watch::{check_watch, WatchReport, WatchViolation};
