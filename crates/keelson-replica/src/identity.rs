//! A replica's persistent identity: its Raft id and name, chosen on first start.

use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberIdentity {
    pub id: u64,
    pub name: String,
}

/// The file in a data directory naming its replica (present once a replica started there).
pub const FILE: &str = "member.json";

/// Loads the identity from `data_dir`, or creates one with a random id.
/// Returns the identity and whether it was just created.
pub fn load_or_create(data_dir: &Path, name: &str) -> std::io::Result<(MemberIdentity, bool)> {
    let path = data_dir.join(FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let id: MemberIdentity = serde_json::from_slice(&bytes)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))?;
            Ok((id, false))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Never 0: openraft and humans both read 0 as "unset".
            let id = loop {
                let id: u64 = rand::random::<u64>() >> 1;
                if id != 0 {
                    break id;
                }
            };
            let ident = MemberIdentity { id, name: name.to_string() };
            let tmp = data_dir.join("member.json.tmp");
            std::fs::write(&tmp, serde_json::to_vec_pretty(&ident).map_err(std::io::Error::other)?)?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            Ok((ident, true))
        }
        Err(e) => Err(e),
    }
}
