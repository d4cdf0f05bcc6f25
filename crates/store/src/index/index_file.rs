//! One index file in RocketMQ's IndexFile format (wire spec §6.5): layout, names, and the
//! slot table the active file keeps in memory.
//!
//! File layout (big-endian):
//! - header, 40 bytes: beginTimestamp i64 | endTimestamp i64 | beginPhyOffset i64 |
//!   endPhyOffset i64 | hashSlotCount i32 (slots in use) | indexCount i32 (starts at 1)
//! - `slots` × 4 bytes: number of the newest entry for that slot, 0 = empty
//! - `entries_max` × 20 bytes: keyHash i32 | position i64 | timeDiff seconds i32 | prevIndex i32
//!
//! Files are created sparse with `set_len` and named by creation time `yyyyMMddHHmmssSSS` (UTC;
//! bumped by one when a name would not sort after the previous file's).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{OnceLock, RwLock};

pub const HEADER_BYTES: u64 = 40;
pub const SLOT_BYTES: u64 = 4;
pub const ENTRY_BYTES: u64 = 20;
const _: () = assert!(HEADER_BYTES == 8 * 4 + 4 + 4);
const _: () = assert!(ENTRY_BYTES == 4 + 8 + 4 + 4);
/// The page the kernel caches a file in. The header and slot table go to the file in whole
/// pages: a write that covers a page in part makes the kernel read the page first when it is
/// no longer cached, holding the file's lock, and the appender's next entry write waited for
/// that disk read.
const PAGE_BYTES: u64 = 4096;
/// The most one write of the slot table carries: a write holds the file's lock throughout,
/// and the appender's next entry write waits for it.
const WRITE_BYTES_MAX: usize = 16 * PAGE_BYTES as usize;
// Page boundaries fall between slots.
const _: () = assert!((PAGE_BYTES - HEADER_BYTES).is_multiple_of(SLOT_BYTES));
pub const NAME_DIGITS: usize = 17;

pub fn file_bytes(slots: u32, entries_max: u32) -> u64 {
    HEADER_BYTES + u64::from(slots) * SLOT_BYTES + u64::from(entries_max) * ENTRY_BYTES
}

pub fn slot_at(slot: u32) -> u64 {
    HEADER_BYTES + u64::from(slot) * SLOT_BYTES
}

pub fn entry_at(slots: u32, number: u32) -> u64 {
    HEADER_BYTES + u64::from(slots) * SLOT_BYTES + u64::from(number) * ENTRY_BYTES
}

/// The slot of a (non-negative) key hash.
pub fn slot_of(key_hash: i32, slots: u32) -> u32 {
    assert!(slots > 0, "an index file needs at least one slot");
    key_hash.unsigned_abs() % slots
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub begin_timestamp_ms: i64,
    pub end_timestamp_ms: i64,
    pub begin_position: u64,
    pub end_position: u64,
    pub slots_used: u32,
    pub index_count: u32,
}

impl Header {
    pub fn empty() -> Header {
        Header {
            index_count: 1,
            ..Header::default()
        }
    }

    pub fn encode(&self) -> [u8; HEADER_BYTES as usize] {
        let mut out = [0u8; HEADER_BYTES as usize];
        out[0..8].copy_from_slice(&self.begin_timestamp_ms.to_be_bytes());
        out[8..16].copy_from_slice(&self.end_timestamp_ms.to_be_bytes());
        out[16..24].copy_from_slice(&self.begin_position.to_be_bytes());
        out[24..32].copy_from_slice(&self.end_position.to_be_bytes());
        out[32..36].copy_from_slice(&self.slots_used.to_be_bytes());
        out[36..40].copy_from_slice(&self.index_count.to_be_bytes());
        out
    }

    pub fn decode(b: &[u8; HEADER_BYTES as usize]) -> Header {
        let u64_at = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[at..at + 8]);
            u64::from_be_bytes(a)
        };
        let u32_at = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        Header {
            begin_timestamp_ms: u64_at(0) as i64,
            end_timestamp_ms: u64_at(8) as i64,
            begin_position: u64_at(16),
            end_position: u64_at(24),
            slots_used: u32_at(32),
            index_count: u32_at(36),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub key_hash: i32,
    pub position: u64,
    pub time_diff_s: i32,
    pub prev: u32,
}

impl IndexEntry {
    pub fn encode(&self) -> [u8; ENTRY_BYTES as usize] {
        let mut out = [0u8; ENTRY_BYTES as usize];
        out[0..4].copy_from_slice(&self.key_hash.to_be_bytes());
        out[4..12].copy_from_slice(&self.position.to_be_bytes());
        out[12..16].copy_from_slice(&self.time_diff_s.to_be_bytes());
        out[16..20].copy_from_slice(&self.prev.to_be_bytes());
        out
    }

    pub fn decode(b: &[u8; ENTRY_BYTES as usize]) -> IndexEntry {
        let mut position = [0u8; 8];
        position.copy_from_slice(&b[4..12]);
        IndexEntry {
            key_hash: i32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            position: u64::from_be_bytes(position),
            time_diff_s: i32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            prev: u32::from_be_bytes([b[16], b[17], b[18], b[19]]),
        }
    }
}

pub struct IndexFile {
    pub path: PathBuf,
    pub file: File,
    pub slots: u32,
    pub begin_timestamp_ms: AtomicI64,
    pub end_timestamp_ms: AtomicI64,
    pub index_count: AtomicU32,
    /// Present while the file is the active one.
    pub memory_slots: RwLock<Option<Box<[AtomicU32]>>>,
    /// The entries that share the slot table's last page, read once they are all written, so
    /// that the page can be written whole.
    pub table_end_page: OnceLock<Box<[u8]>>,
}

impl IndexFile {
    pub fn slot(&self, slot: u32) -> io::Result<u32> {
        if let Some(slots) = self
            .memory_slots
            .read()
            .expect("index lock poisoned")
            .as_ref()
        {
            return Ok(slots[slot as usize].load(Ordering::Acquire));
        }
        let mut b = [0u8; 4];
        self.file.read_exact_at(&mut b, slot_at(slot))?;
        Ok(u32::from_be_bytes(b))
    }

    pub fn entry(&self, number: u32) -> io::Result<IndexEntry> {
        let mut b = [0u8; ENTRY_BYTES as usize];
        self.file
            .read_exact_at(&mut b, entry_at(self.slots, number))?;
        Ok(IndexEntry::decode(&b))
    }

    /// Writes every slot and the header: the file becomes read-only history.
    pub fn seal(&self, header: &Header) -> io::Result<()> {
        let mut guard = self.memory_slots.write().expect("index lock poisoned");
        let Some(slots) = guard.as_ref() else {
            return Ok(());
        };
        let pages = slot_at(self.slots).div_ceil(PAGE_BYTES);
        write_table_pages(self, slots, header, 0..pages)?;
        *guard = None;
        Ok(())
    }

    /// The entries from the slot table's end to its last page's end, once `index_count` says
    /// they are all written (entry 0 is never written: it reads as zeros).
    fn table_end_page(&self, index_count: u32) -> io::Result<Option<&[u8]>> {
        if let Some(bytes) = self.table_end_page.get() {
            return Ok(Some(bytes));
        }
        let table_end = slot_at(self.slots);
        let len = table_end.next_multiple_of(PAGE_BYTES) - table_end;
        if u64::from(index_count) * ENTRY_BYTES < len {
            return Ok(None);
        }
        let mut bytes = vec![0u8; len as usize];
        self.file.read_exact_at(&mut bytes, table_end)?;
        Ok(Some(self.table_end_page.get_or_init(|| bytes.into())))
    }
}

pub fn zero_slots(slots: u32) -> Box<[AtomicU32]> {
    (0..slots).map(|_| AtomicU32::new(0)).collect()
}

/// Writes the pages of the slot table that hold `dirty` slots (sorted), and the header's page.
pub fn write_slots(file: &IndexFile, dirty: &[u32], header: &Header) -> io::Result<()> {
    let guard = file.memory_slots.read().expect("index lock poisoned");
    // Sealed meanwhile: sealing wrote every slot and the final header.
    let Some(slots) = guard.as_ref() else {
        return Ok(());
    };
    let pages = std::iter::once(0).chain(dirty.iter().map(|&slot| slot_at(slot) / PAGE_BYTES));
    write_table_pages(file, slots, header, pages)
}

/// Writes the given pages (ascending, repeats allowed) of the header and slot table from
/// memory, a run of consecutive pages in one write. The table's last page is written whole
/// once the entries sharing it are known, and up to the table's end before that.
fn write_table_pages(
    file: &IndexFile,
    slots: &[AtomicU32],
    header: &Header,
    pages: impl Iterator<Item = u64>,
) -> io::Result<()> {
    let table_end = slot_at(file.slots);
    let mut pages = pages.peekable();
    let mut bytes = Vec::new();
    while let Some(first) = pages.next() {
        let mut last = first;
        while let Some(&next) = pages.peek() {
            if next > last + 1 {
                break;
            }
            last = next;
            pages.next();
        }
        let start = first * PAGE_BYTES;
        let end = ((last + 1) * PAGE_BYTES).min(table_end);
        bytes.clear();
        if start == 0 {
            bytes.extend_from_slice(&header.encode());
        }
        let first_slot = (start.max(HEADER_BYTES) - HEADER_BYTES) / SLOT_BYTES;
        let end_slot = (end - HEADER_BYTES) / SLOT_BYTES;
        for slot in &slots[first_slot as usize..end_slot as usize] {
            bytes.extend_from_slice(&slot.load(Ordering::Acquire).to_be_bytes());
        }
        if end == table_end {
            if let Some(entries) = file.table_end_page(header.index_count)? {
                bytes.extend_from_slice(entries);
            }
        }
        for (i, chunk) in bytes.chunks(WRITE_BYTES_MAX).enumerate() {
            file.file
                .write_all_at(chunk, start + (i * WRITE_BYTES_MAX) as u64)?;
        }
    }
    Ok(())
}

/// Reads the slots of the active file; slots pointing at or past indexCount (written after the
/// last header flush, before a crash) are walked back along their chain to an entry below it.
pub fn load_slots(file: &IndexFile, header: &Header) -> io::Result<(Box<[AtomicU32]>, Vec<u32>)> {
    let mut bytes = vec![0u8; file.slots as usize * SLOT_BYTES as usize];
    file.file.read_exact_at(&mut bytes, slot_at(0))?;
    let slots = zero_slots(file.slots);
    let mut repaired = Vec::new();
    for (i, chunk) in bytes.chunks_exact(4).enumerate() {
        let mut number = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        if number >= header.index_count {
            let mut steps = 0;
            while number >= header.index_count && steps < header.index_count {
                let prev = file.entry(number).map(|e| e.prev).unwrap_or(0);
                number = if prev < number { prev } else { 0 };
                steps += 1;
            }
            if number >= header.index_count {
                number = 0;
            }
            repaired.push(i as u32);
        }
        slots[i].store(number, Ordering::Relaxed);
    }
    Ok((slots, repaired))
}

/// `yyyyMMddHHmmssSSS` of `now_ms` in UTC, as a number; always above `last`.
pub fn next_name(last: u64, now_ms: i64) -> u64 {
    let days = now_ms.div_euclid(86_400_000);
    let ms_of_day = now_ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let formatted = format!(
        "{year:04}{month:02}{day:02}{:02}{:02}{:02}{:03}",
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000
    );
    let number = formatted.parse::<u64>().unwrap_or(0);
    if number > last {
        number
    } else {
        last + 1
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_math_matches_rocketmq_defaults() {
        assert_eq!(file_bytes(5_000_000, 20_000_000), 420_000_040);
        assert_eq!(slot_at(0), 40);
        assert_eq!(entry_at(5_000_000, 1), 40 + 20_000_000 + 20);
        assert_eq!(slot_of(12, 10), 2);
        assert_eq!(slot_of(0, 10), 0);
    }

    #[test]
    fn names_are_utc_creation_times_and_increase() {
        assert_eq!(next_name(0, 1_700_000_000_123), 20231114221320123);
        assert_eq!(
            next_name(20231114221320123, 1_700_000_000_123),
            20231114221320124
        );
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
