//! Generated gRPC code for Keelson's internal protocols (`proto/keelson.proto`).
//!
//! API boundary: only this crate knows protobuf; message contents are defined in Rust.

#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("keelson.v1");
}
