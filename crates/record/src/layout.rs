//! Where each field of a record sits, the sizes that follow from it, and the few byte-level
//! operations that need no full parse (the store reads a record's head before it has the rest).

use std::net::{IpAddr, SocketAddr};

/// MAGIC of a v1 record (1-byte topic length).
pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// MAGIC of a v2 record (2-byte topic length), written when the topic does not fit v1's.
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// MAGIC of the 8-byte marker that ends a segment when the next record does not fit.
pub const MAGIC_BLANK: i32 = 0xCBD4_3194_u32 as i32;
// The values Java prints, so a hex dump and a Java stack trace can be matched by eye.
const _: () = assert!(MAGIC_V1 == -626_843_481);
const _: () = assert!(MAGIC_V2 == -626_843_477);
const _: () = assert!(MAGIC_BLANK == -875_286_124);

pub const TOTAL_SIZE_AT: usize = 0;
pub const MAGIC_AT: usize = 4;
pub const BODY_CRC_AT: usize = 8;
pub const QUEUE_ID_AT: usize = 12;
pub const FLAG_AT: usize = 16;
pub const QUEUE_OFFSET_AT: usize = 20;
pub const PHYSICAL_OFFSET_AT: usize = 28;
pub const SYS_FLAG_AT: usize = 36;
pub const BORN_TIMESTAMP_AT: usize = 40;
/// The last fixed position: the hosts' widths depend on SYSFLAG, so later fields move.
pub const BORN_HOST_AT: usize = 48;
// Each position is the one before it plus that field's width.
const _: () = assert!(MAGIC_AT == TOTAL_SIZE_AT + 4);
const _: () = assert!(BODY_CRC_AT == MAGIC_AT + 4);
const _: () = assert!(QUEUE_ID_AT == BODY_CRC_AT + 4);
const _: () = assert!(FLAG_AT == QUEUE_ID_AT + 4);
const _: () = assert!(QUEUE_OFFSET_AT == FLAG_AT + 4);
const _: () = assert!(PHYSICAL_OFFSET_AT == QUEUE_OFFSET_AT + 8);
const _: () = assert!(SYS_FLAG_AT == PHYSICAL_OFFSET_AT + 8);
const _: () = assert!(BORN_TIMESTAMP_AT == SYS_FLAG_AT + 4);
const _: () = assert!(BORN_HOST_AT == BORN_TIMESTAMP_AT + 8);

/// A host as stored: IPv4 address (4) or IPv6 address (16), then the port as an i32 (4).
pub const HOST_V4_BYTES: usize = 4 + 4;
pub const HOST_V6_BYTES: usize = 16 + 4;

/// The smallest record: IPv4 hosts, empty body, topic and properties.
/// 4+4+4+4+4+8+8+4+8+8+8+8+4+8 fixed = 84, +4 body length, +1 topic length, +2 properties length.
pub const RECORD_BYTES_MIN: usize = 91;
const _: () = assert!(RECORD_BYTES_MIN == 84 + 4 + 1 + 2);
const _: () = assert!(
    RECORD_BYTES_MIN == BORN_HOST_AT + HOST_V4_BYTES + 8 + HOST_V4_BYTES + 4 + 8 + 4 + 1 + 2
);

/// Enough of a record's start to reach STORETIMESTAMP with an IPv6 born host: 48 + 20 + 8.
pub const STORE_TIMESTAMP_PREFIX_BYTES: usize = BORN_HOST_AT + HOST_V6_BYTES + 8;
// So any whole record holds the prefix, whatever its hosts.
const _: () = assert!(STORE_TIMESTAMP_PREFIX_BYTES <= RECORD_BYTES_MIN);

/// Longest topic whose length fits the signed byte of a v1 record.
pub const TOPIC_BYTES_MAX_V1: usize = i8::MAX as usize;
/// Topic (v2) and properties lengths are signed shorts.
pub const SHORT_STRING_BYTES_MAX: usize = i16::MAX as usize;

/// TOTALSIZE + MAGIC: the end-of-segment marker, and the least room a segment keeps free.
pub const BLANK_BYTES: u64 = 8;

/// MessageSysFlag bits.
pub mod sys_flag {
    pub const COMPRESSED: i32 = 0x1;
    pub const MULTI_TAGS: i32 = 0x2;
    pub const TRANSACTION_PREPARED: i32 = 0x4;
    pub const TRANSACTION_COMMIT: i32 = 0x8;
    pub const TRANSACTION_ROLLBACK: i32 = 0xC;
    /// Both transaction bits; `sys_flag & TRANSACTION_MASK` gives the transaction type.
    pub const TRANSACTION_MASK: i32 = 0xC;
    pub const BORN_HOST_V6: i32 = 0x10;
    pub const STORE_HOST_V6: i32 = 0x20;
    pub const NEED_UNWRAP: i32 = 0x40;
    pub const INNER_BATCH: i32 = 0x80;
    /// Bits 8..10: compression type (1 LZ4, 2 ZSTD, 3 ZLIB, 0 = ZLIB from old producers).
    pub const COMPRESSION_TYPE_MASK: i32 = 0x700;
}

/// Stored width of a host.
pub fn host_bytes(ipv6: bool) -> usize {
    if ipv6 {
        HOST_V6_BYTES
    } else {
        HOST_V4_BYTES
    }
}

pub(crate) fn put_host(out: &mut Vec<u8>, host: &SocketAddr) {
    match host.ip() {
        IpAddr::V4(ip) => out.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => out.extend_from_slice(&ip.octets()),
    }
    out.extend_from_slice(&i32::from(host.port()).to_be_bytes());
}

pub fn read_i32(bytes: &[u8], at: usize) -> Option<i32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

pub fn read_i64(bytes: &[u8], at: usize) -> Option<i64> {
    let b = bytes.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(i64::from_be_bytes(a))
}

/// A message record's MAGIC, as opposed to the blank marker's or none.
pub fn is_record_magic(magic: i32) -> bool {
    magic == MAGIC_V1 || magic == MAGIC_V2
}

/// STORETIMESTAMP from a record's first bytes (at least `STORE_TIMESTAMP_PREFIX_BYTES`), so a
/// time search reads a prefix and not the whole record.
pub fn store_timestamp_from_prefix(prefix: &[u8]) -> Option<i64> {
    let sys_flag = read_i32(prefix, SYS_FLAG_AT)?;
    read_i64(
        prefix,
        BORN_HOST_AT + host_bytes(sys_flag & sys_flag::BORN_HOST_V6 != 0),
    )
}

/// Writes the two fields the store assigns when it appends; the sender cannot know them.
///
/// # Panics
/// If `record` is shorter than PHYSICALOFFSET's end: the caller holds a whole record it built.
pub fn patch_offsets(record: &mut [u8], queue_offset: u64, position: u64) {
    record[QUEUE_OFFSET_AT..QUEUE_OFFSET_AT + 8].copy_from_slice(&queue_offset.to_be_bytes());
    record[PHYSICAL_OFFSET_AT..PHYSICAL_OFFSET_AT + 8].copy_from_slice(&position.to_be_bytes());
}

/// The end-of-segment marker for `remaining_bytes` of unused segment.
pub fn blank_marker(remaining_bytes: u64) -> [u8; BLANK_BYTES as usize] {
    let mut marker = [0u8; BLANK_BYTES as usize];
    // Segments are at most i32::MAX bytes in RocketMQ; saturate rather than wrap if larger.
    let total = i32::try_from(remaining_bytes).unwrap_or(i32::MAX);
    marker[..4].copy_from_slice(&total.to_be_bytes());
    marker[4..].copy_from_slice(&MAGIC_BLANK.to_be_bytes());
    marker
}

/// Bounds-checked reads shared by both decoders: running off the end is `None`, never a
/// panic, and leaves the position where it was, so each decoder can report it in its error.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8], at: usize) -> Self {
        Cursor { bytes, at }
    }

    pub(crate) fn at(&self) -> usize {
        self.at
    }

    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    pub(crate) fn take(&mut self, count: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(count)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_marker_holds_the_remaining_bytes_and_the_blank_magic() {
        let m = blank_marker(100);
        assert_eq!(read_i32(&m, 0), Some(100));
        assert_eq!(read_i32(&m, 4), Some(MAGIC_BLANK));
        assert_eq!(read_i32(&blank_marker(u64::MAX), 0), Some(i32::MAX));
    }

    #[test]
    fn magic_codes_are_the_java_constants() {
        assert_eq!(MAGIC_V1 as u32, 0xDAA3_20A7);
        assert_eq!(MAGIC_V2 as u32, 0xDAA3_20AB);
        assert_eq!(MAGIC_BLANK as u32, 0xCBD4_3194);
        assert!(is_record_magic(MAGIC_V1) && is_record_magic(MAGIC_V2));
        assert!(!is_record_magic(MAGIC_BLANK) && !is_record_magic(0));
    }

    #[test]
    fn reads_past_the_end_are_none() {
        assert_eq!(read_i32(&[0, 0, 0], 0), None);
        assert_eq!(read_i64(&[0; 8], 1), None);
        assert_eq!(read_i32(&[0; 8], usize::MAX), None);
        let mut cursor = Cursor::new(&[1, 2, 3], 1);
        assert_eq!(cursor.take(3), None);
        assert_eq!(cursor.at(), 1);
        assert_eq!(cursor.take(usize::MAX), None);
        assert_eq!(cursor.array::<2>(), Some([2, 3]));
    }
}
