//! Patches over JSON objects.

pub mod json_patch;
pub mod merge_patch;
pub mod strategic;
