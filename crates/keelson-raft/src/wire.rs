//! Encoding of the Rust messages carried in protobuf envelopes (postcard).

use keelson_proto::v1::Envelope;
use serde::{de::DeserializeOwned, Serialize};

/// A message that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[error("malformed {what} message: {source}")]
pub struct WireError {
    pub what: &'static str,
    #[source]
    pub source: postcard::Error,
}

pub fn encode<T: Serialize>(what: &'static str, msg: &T) -> Result<Envelope, WireError> {
    postcard::to_stdvec(msg).map(|payload| Envelope { payload }).map_err(|source| WireError { what, source })
}

pub fn decode<T: DeserializeOwned>(what: &'static str, env: &Envelope) -> Result<T, WireError> {
    postcard::from_bytes(&env.payload).map_err(|source| WireError { what, source })
}

impl From<WireError> for tonic::Status {
    fn from(e: WireError) -> Self {
        tonic::Status::invalid_argument(e.to_string())
    }
}
