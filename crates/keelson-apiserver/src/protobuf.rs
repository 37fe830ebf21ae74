//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`), decoded
//! to the JSON the rest of the server works in.

use serde_json::Value;

use crate::error::ApiError;

pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    keelson_kube_protobuf::decode(body).map_err(|e| {
        if e.is_unsupported() {
            ApiError::UnsupportedMediaType(format!("{e}; send this object as application/json"))
        } else {
            ApiError::BadRequest(format!("the protobuf request body is malformed: {e}"))
        }
    })
}
