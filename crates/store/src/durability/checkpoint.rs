//! The checkpoint: how far the CommitLog, the ConsumeQueues and the index are known durable.
//!
//! Layout, 56 bytes, big-endian:
//!
//! | byte | field                              |
//! |------|------------------------------------|
//! | 0    | magic `QVCP` (u32)                 |
//! | 4    | format version = 2 (u32)           |
//! | 8    | CommitLog flushed position (u64)   |
//! | 16   | dispatched-and-flushed position (u64): every record below it has its ConsumeQueue entries fsynced |
//! | 24   | CommitLog flush time, ms since the epoch (i64) |
//! | 32   | dispatch flush time, ms since the epoch (i64)  |
//! | 40   | index flushed position (u64): every record below it has its keys fsynced in the index |
//! | 48   | CRC32 of bytes 0..48 (u32)         |
//! | 52   | zero (u32)                         |
//!
//! Version 1 was 48 bytes, without the index position (its index was flushed with the queues,
//! so the dispatch position stands for it); it is read, and the next checkpoint is version 2.
//!
//! It is replaced atomically: written to `<path>.tmp`, fsynced, renamed over, directory fsynced.

use std::io;
use std::path::Path;

use crate::durable_file::replace_file;

pub const CHECKPOINT_BYTES: usize = 56;
const MAGIC: u32 = u32::from_be_bytes(*b"QVCP");
const VERSION: u32 = 2;
const CRC_AT: usize = 48;
const _: () = assert!(CRC_AT + 8 == CHECKPOINT_BYTES);
const V1_BYTES: usize = 48;
const V1_CRC_AT: usize = 40;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    pub commitlog_flushed_position: u64,
    pub dispatched_flushed_position: u64,
    pub commitlog_flushed_ms: i64,
    pub dispatched_flushed_ms: i64,
    pub index_flushed_position: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckpointError {
    #[error("checkpoint is {actual_bytes} bytes, expected {CHECKPOINT_BYTES}")]
    WrongSize { actual_bytes: usize },
    #[error("checkpoint has magic {magic:#010x} version {version}")]
    UnknownFormat { magic: u32, version: u32 },
    #[error("checkpoint CRC {stored:#010x} does not match its contents ({computed:#010x})")]
    CrcMismatch { stored: u32, computed: u32 },
}

impl Checkpoint {
    /// The checkpoint of a log truncated at `position`: it vouches for nothing past it.
    pub fn truncated_at(self, position: u64) -> Checkpoint {
        Checkpoint {
            commitlog_flushed_position: self.commitlog_flushed_position.min(position),
            dispatched_flushed_position: self.dispatched_flushed_position.min(position),
            index_flushed_position: self.index_flushed_position.min(position),
            ..self
        }
    }

    pub fn encode(&self) -> [u8; CHECKPOINT_BYTES] {
        let mut out = [0u8; CHECKPOINT_BYTES];
        out[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        out[4..8].copy_from_slice(&VERSION.to_be_bytes());
        out[8..16].copy_from_slice(&self.commitlog_flushed_position.to_be_bytes());
        out[16..24].copy_from_slice(&self.dispatched_flushed_position.to_be_bytes());
        out[24..32].copy_from_slice(&self.commitlog_flushed_ms.to_be_bytes());
        out[32..40].copy_from_slice(&self.dispatched_flushed_ms.to_be_bytes());
        out[40..48].copy_from_slice(&self.index_flushed_position.to_be_bytes());
        let crc = crc32fast::hash(&out[..CRC_AT]);
        out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
        if bytes.len() != CHECKPOINT_BYTES && bytes.len() != V1_BYTES {
            return Err(CheckpointError::WrongSize {
                actual_bytes: bytes.len(),
            });
        }
        let u32_at = |at: usize| {
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let u64_at = |at: usize| (u64::from(u32_at(at)) << 32) | u64::from(u32_at(at + 4));
        let (magic, version) = (u32_at(0), u32_at(4));
        let crc_at = match (bytes.len(), version) {
            (CHECKPOINT_BYTES, VERSION) => CRC_AT,
            (V1_BYTES, 1) => V1_CRC_AT,
            _ => return Err(CheckpointError::UnknownFormat { magic, version }),
        };
        if magic != MAGIC {
            return Err(CheckpointError::UnknownFormat { magic, version });
        }
        let stored = u32_at(crc_at);
        let computed = crc32fast::hash(&bytes[..crc_at]);
        if stored != computed {
            return Err(CheckpointError::CrcMismatch { stored, computed });
        }
        let dispatched_flushed_position = u64_at(16);
        Ok(Checkpoint {
            commitlog_flushed_position: u64_at(8),
            dispatched_flushed_position,
            commitlog_flushed_ms: u64_at(24) as i64,
            dispatched_flushed_ms: u64_at(32) as i64,
            index_flushed_position: if version == 1 {
                dispatched_flushed_position
            } else {
                u64_at(40)
            },
        })
    }
}

/// Reads the checkpoint; `Ok(None)` when there is none.
pub fn read(path: &Path) -> io::Result<Option<Result<Checkpoint, CheckpointError>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(Checkpoint::decode(&bytes))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

pub fn write(path: &Path, checkpoint: &Checkpoint) -> io::Result<()> {
    replace_file(path, &checkpoint.encode())
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_any_flipped_bit() {
        let c = Checkpoint {
            commitlog_flushed_position: 1 << 40,
            dispatched_flushed_position: 12345,
            commitlog_flushed_ms: 1_700_000_000_000,
            dispatched_flushed_ms: -1,
            index_flushed_position: 999,
        };
        let bytes = c.encode();
        assert_eq!(Checkpoint::decode(&bytes), Ok(c));
        for at in 0..CRC_AT + 4 {
            let mut flipped = bytes;
            flipped[at] ^= 0x10;
            assert!(
                Checkpoint::decode(&flipped).is_err(),
                "flip at {at} accepted"
            );
        }
        assert!(Checkpoint::decode(&bytes[..40]).is_err());
        assert!(
            Checkpoint::decode(&bytes[..48]).is_err(),
            "48 bytes are version 1"
        );
    }

    /// A version 1 checkpoint (48 bytes, no index position) reads with the index taken as
    /// flushed up to the dispatch position, as that version flushed it.
    #[test]
    fn reads_the_first_format() {
        let mut v1 = [0u8; V1_BYTES];
        v1[0..4].copy_from_slice(b"QVCP");
        v1[4..8].copy_from_slice(&1u32.to_be_bytes());
        v1[8..16].copy_from_slice(&5000u64.to_be_bytes());
        v1[16..24].copy_from_slice(&4000u64.to_be_bytes());
        let crc = crc32fast::hash(&v1[..V1_CRC_AT]);
        v1[V1_CRC_AT..V1_CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        let c = Checkpoint::decode(&v1).expect("version 1");
        assert_eq!(c.commitlog_flushed_position, 5000);
        assert_eq!(c.dispatched_flushed_position, 4000);
        assert_eq!(c.index_flushed_position, 4000);
        v1[20] ^= 1;
        assert!(Checkpoint::decode(&v1).is_err());
    }

    #[test]
    fn write_replaces_atomically() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("checkpoint");
        assert_eq!(read(&path).expect("read"), None);
        let c = Checkpoint {
            commitlog_flushed_position: 7,
            ..Checkpoint::default()
        };
        write(&path, &c).expect("write");
        assert_eq!(read(&path).expect("read"), Some(Ok(c)));
        assert!(!dir.path().join("checkpoint.tmp").exists());
    }
}
