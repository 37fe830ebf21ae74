//! The on-disk snapshot format: the state machine's key/value pairs streamed one record
//! at a time, then a trailer with the record count and the Raft snapshot meta (known only
//! once the consistent view has been read). Neither writing nor reading holds the state
//! in memory.
//!
//! ```text
//! magic "KLSNAP01"
//! { u32 key_len | key | u32 value_len | value }*
//! u32 0xFFFF_FFFF | u64 record_count | postcard(SnapshotMeta) | u32 meta_len | magic
//! ```

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::types::SnapshotMeta;

const MAGIC: &[u8; 8] = b"KLSNAP01";
const END_MARKER: u32 = u32::MAX;

/// A snapshot's data: a file on disk, handed between the state machine and the transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    pub path: PathBuf,
}

/// Streams records into a new snapshot file.
pub struct SnapshotWriter {
    out: BufWriter<File>,
    records: u64,
}

impl SnapshotWriter {
    pub fn create(path: &Path) -> io::Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
        out.write_all(MAGIC)?;
        Ok(Self { out, records: 0 })
    }

    pub fn record(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.out.write_all(&(key.len() as u32).to_le_bytes())?;
        self.out.write_all(key)?;
        self.out.write_all(&(value.len() as u32).to_le_bytes())?;
        self.out.write_all(value)?;
        self.records += 1;
        Ok(())
    }

    /// Writes the trailer with `meta` and fsyncs the file.
    pub fn finish(mut self, meta: &SnapshotMeta) -> io::Result<u64> {
        self.out.write_all(&END_MARKER.to_le_bytes())?;
        self.out.write_all(&self.records.to_le_bytes())?;
        let meta = postcard::to_stdvec(meta).map_err(io::Error::other)?;
        self.out.write_all(&meta)?;
        self.out.write_all(&(meta.len() as u32).to_le_bytes())?;
        self.out.write_all(MAGIC)?;
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(self.records)
    }
}

/// Reads a snapshot file: the meta first, then records through the iterator.
pub struct SnapshotReader {
    input: BufReader<File>,
    records: u64,
    done: bool,
}

impl SnapshotReader {
    pub fn open(path: &Path) -> io::Result<(SnapshotMeta, Self)> {
        let not_snapshot = || invalid(format!("{} is not a complete Keelson snapshot", path.display()));
        let mut input = BufReader::with_capacity(1 << 20, File::open(path)?);
        let mut magic = [0u8; 8];
        input.read_exact(&mut magic)?;
        if &magic != MAGIC {
            return Err(not_snapshot());
        }
        input.seek(SeekFrom::End(-12)).map_err(|_| not_snapshot())?;
        let meta_len = read_u32(&mut input)?;
        input.read_exact(&mut magic)?;
        if &magic != MAGIC {
            return Err(not_snapshot());
        }
        input.seek(SeekFrom::End(-12 - i64::from(meta_len))).map_err(|_| not_snapshot())?;
        let meta = read_bytes(&mut input, meta_len as usize)?;
        let meta: SnapshotMeta = postcard::from_bytes(&meta).map_err(|e| invalid(e.to_string()))?;
        input.seek(SeekFrom::Start(MAGIC.len() as u64))?;
        Ok((meta, Self { input, records: 0, done: false }))
    }

    fn next_record(&mut self) -> io::Result<Option<(Vec<u8>, Vec<u8>)>> {
        let key_len = read_u32(&mut self.input)?;
        if key_len == END_MARKER {
            let mut count = [0u8; 8];
            self.input.read_exact(&mut count)?;
            let count = u64::from_le_bytes(count);
            if count != self.records {
                return Err(invalid(format!(
                    "snapshot trailer says {count} records, read {}",
                    self.records
                )));
            }
            return Ok(None);
        }
        let key = read_bytes(&mut self.input, key_len as usize)?;
        let value_len = read_u32(&mut self.input)? as usize;
        let value = read_bytes(&mut self.input, value_len)?;
        self.records += 1;
        Ok(Some((key, value)))
    }
}

impl Iterator for SnapshotReader {
    type Item = io::Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_record() {
            Ok(Some(kv)) => Some(Ok(kv)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_bytes(r: &mut impl Read, len: usize) -> io::Result<Vec<u8>> {
    let mut b = vec![0u8; len];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}
