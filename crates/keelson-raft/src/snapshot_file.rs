//! The on-disk snapshot format: the state machine's key/value pairs streamed one record
//! at a time, then a trailer with the record count and the Raft snapshot meta (known only
//! once the consistent view has been read), and a CRC32 of every byte before it, checked
//! when the file is opened: a snapshot damaged on disk or on its way from the leader is
//! refused before anything of it is installed. Neither writing nor reading holds the
//! state in memory.
//!
//! ```text
//! magic "KLSNAP02"
//! { u32 key_len | key | u32 value_len | value }*
//! u32 0xFFFF_FFFF | u64 record_count | postcard(SnapshotMeta) | u32 meta_len | u32 crc32 | magic
//! ```
//!
//! Files of the first format (`KLSNAP01`, no CRC) are still read.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::types::SnapshotMeta;

const MAGIC: &[u8; 8] = b"KLSNAP02";
const MAGIC_V1: &[u8; 8] = b"KLSNAP01";
const END_MARKER: u32 = u32::MAX;

/// A snapshot's data: a file on disk, handed between the state machine and the transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    pub path: PathBuf,
}

/// Streams records into a new snapshot file.
pub struct SnapshotWriter {
    out: BufWriter<File>,
    crc: crc32fast::Hasher,
    records: u64,
}

impl SnapshotWriter {
    pub fn create(path: &Path) -> io::Result<Self> {
        let mut writer = Self { out: BufWriter::with_capacity(1 << 20, File::create(path)?), crc: crc32fast::Hasher::new(), records: 0 };
        writer.write(MAGIC)?;
        Ok(writer)
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.crc.update(bytes);
        self.out.write_all(bytes)
    }

    pub fn record(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.write(&(key.len() as u32).to_le_bytes())?;
        self.write(key)?;
        self.write(&(value.len() as u32).to_le_bytes())?;
        self.write(value)?;
        self.records += 1;
        Ok(())
    }

    /// Writes the trailer with `meta` and fsyncs the file.
    pub fn finish(mut self, meta: &SnapshotMeta) -> io::Result<u64> {
        self.write(&END_MARKER.to_le_bytes())?;
        self.write(&self.records.to_le_bytes())?;
        let meta = postcard::to_stdvec(meta).map_err(io::Error::other)?;
        self.write(&meta)?;
        self.write(&(meta.len() as u32).to_le_bytes())?;
        let crc = self.crc.clone().finalize();
        self.out.write_all(&crc.to_le_bytes())?;
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
    /// Opens the snapshot at `path`, checking its CRC (a pass over the whole file) first.
    pub fn open(path: &Path) -> io::Result<(SnapshotMeta, Self)> {
        let not_snapshot = || invalid(format!("{} is not a complete Keelson snapshot", path.display()));
        let mut input = BufReader::with_capacity(1 << 20, File::open(path)?);
        let mut magic = [0u8; 8];
        input.read_exact(&mut magic)?;
        let checked = match &magic {
            m if m == MAGIC => true,
            m if m == MAGIC_V1 => false,
            _ => return Err(not_snapshot()),
        };
        // The tail: meta_len [crc] magic.
        let tail = if checked { 16 } else { 12 };
        let len = input.seek(SeekFrom::End(0))?;
        input.seek(SeekFrom::End(-tail)).map_err(|_| not_snapshot())?;
        let meta_len = read_u32(&mut input)?;
        let stored_crc = if checked { Some(read_u32(&mut input)?) } else { None };
        let mut end_magic = [0u8; 8];
        input.read_exact(&mut end_magic)?;
        if end_magic != magic {
            return Err(not_snapshot());
        }
        if let Some(stored) = stored_crc {
            input.seek(SeekFrom::Start(0))?;
            let computed = crc_of(&mut (&mut input).take(len - 12))?;
            if computed != stored {
                return Err(invalid(format!(
                    "{} fails its checksum (stored {stored:08x}, computed {computed:08x}): the snapshot is corrupt",
                    path.display()
                )));
            }
        }
        input.seek(SeekFrom::End(-tail - i64::from(meta_len))).map_err(|_| not_snapshot())?;
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

/// The CRC32 of everything `r` yields.
fn crc_of(r: &mut impl Read) -> io::Result<u32> {
    let mut crc = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match r.read(&mut buf)? {
            0 => return Ok(crc.finalize()),
            n => crc.update(&buf[..n]),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> SnapshotMeta {
        SnapshotMeta { last_log_id: None, last_membership: Default::default() }
    }

    fn write(path: &Path, records: &[(&[u8], &[u8])]) {
        let mut w = SnapshotWriter::create(path).unwrap();
        for (k, v) in records {
            w.record(k, v).unwrap();
        }
        assert_eq!(w.finish(&meta()).unwrap(), records.len() as u64);
    }

    fn read(path: &Path) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let (m, reader) = SnapshotReader::open(path)?;
        assert_eq!(m, meta());
        reader.collect()
    }

    const RECORDS: &[(&[u8], &[u8])] = &[(b"/registry/a", b"one"), (b"/registry/b", b"two"), (b"rev", b"\x00\x01")];

    #[test]
    fn records_and_meta_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.snap");
        write(&path, RECORDS);
        let got = read(&path).unwrap();
        assert_eq!(got.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect::<Vec<_>>(), RECORDS);
    }

    #[test]
    fn a_flipped_byte_anywhere_is_refused_before_any_record_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.snap");
        write(&path, RECORDS);
        let good = std::fs::read(&path).unwrap();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            std::fs::write(&path, &bad).unwrap();
            let err = SnapshotReader::open(&path).map(|_| ()).expect_err(&format!("byte {at} flipped and the snapshot opened"));
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "byte {at}: {err}");
        }
        std::fs::write(&path, &good[..good.len() - 1]).unwrap();
        assert!(SnapshotReader::open(&path).is_err(), "a truncated snapshot opened");
    }

    #[test]
    fn first_format_snapshots_still_read() {
        // KLSNAP01: the same records and trailer, no CRC.
        let mut v1 = MAGIC_V1.to_vec();
        for (k, v) in RECORDS {
            v1.extend((k.len() as u32).to_le_bytes());
            v1.extend(*k);
            v1.extend((v.len() as u32).to_le_bytes());
            v1.extend(*v);
        }
        v1.extend(END_MARKER.to_le_bytes());
        v1.extend((RECORDS.len() as u64).to_le_bytes());
        let m = postcard::to_stdvec(&meta()).unwrap();
        v1.extend(&m);
        v1.extend((m.len() as u32).to_le_bytes());
        v1.extend(MAGIC_V1);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.snap");
        std::fs::write(&path, v1).unwrap();
        assert_eq!(read(&path).unwrap().len(), RECORDS.len());
    }
}
