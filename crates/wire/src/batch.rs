//! SEND_BATCH_MESSAGE body: inner messages back to back, each
//!
//! ```text
//! TOTALSIZE i32 (this record, including the field)   MAGICCODE i32 (client writes 0)
//! BODYCRC i32 (client writes 0)                       FLAG i32
//! BODY i32 len + bytes                                PROPERTIES i16 len + bytes
//! ```
//!
//! The topic and the other per-send fields come from the request header.

use bytes::Bytes;

use crate::message::MessageError;

const FIXED_BYTES: usize = 4 + 4 + 4 + 4 + 4 + 2;
const _: () = assert!(FIXED_BYTES == 22);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchEntry {
    pub flag: i32,
    pub body: Bytes,
    pub properties: String,
}

fn read_i32(buf: &[u8], at: usize) -> Option<i32> {
    let raw: [u8; 4] = buf.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(i32::from_be_bytes(raw))
}

fn read_i16(buf: &[u8], at: usize) -> Option<i16> {
    let raw: [u8; 2] = buf.get(at..at.checked_add(2)?)?.try_into().ok()?;
    Some(i16::from_be_bytes(raw))
}

/// Splits a batch body into its inner messages. Never panics: every length is checked against
/// its own record and the record against the buffer.
pub fn decode_batch(body: &[u8]) -> Result<Vec<BatchEntry>, MessageError> {
    let mut entries = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let truncated =
            |needed: usize, available: usize| MessageError::Truncated { needed, available };
        let total_size = read_i32(rest, 0).ok_or(truncated(4, rest.len()))?;
        let total = usize::try_from(total_size)
            .ok()
            .filter(|total| *total >= FIXED_BYTES)
            .ok_or(MessageError::BadLength {
                field: "TOTALSIZE",
                value: i64::from(total_size),
            })?;
        let record = rest.get(..total).ok_or(truncated(total, rest.len()))?;
        // MAGICCODE and BODYCRC (bytes 4..12) are placeholders from the client; skip them.
        let flag = read_i32(record, 12).ok_or(truncated(16, total))?;
        let body_length = read_i32(record, 16).ok_or(truncated(20, total))?;
        let body_bytes = usize::try_from(body_length).map_err(|_| MessageError::BadLength {
            field: "BODY",
            value: i64::from(body_length),
        })?;
        let body_end = 20usize.saturating_add(body_bytes);
        let entry_body = record.get(20..body_end).ok_or(truncated(body_end, total))?;
        let properties_length =
            read_i16(record, body_end).ok_or(truncated(body_end.saturating_add(2), total))?;
        let properties_bytes =
            usize::try_from(properties_length).map_err(|_| MessageError::BadLength {
                field: "PROPERTIES",
                value: i64::from(properties_length),
            })?;
        let properties_end = body_end + 2 + properties_bytes;
        let properties = record
            .get(body_end + 2..properties_end)
            .ok_or(truncated(properties_end, total))?;
        if properties_end != total {
            return Err(MessageError::BadLength {
                field: "TOTALSIZE",
                value: i64::from(total_size),
            });
        }
        entries.push(BatchEntry {
            flag,
            body: Bytes::copy_from_slice(entry_body),
            properties: std::str::from_utf8(properties)
                .map_err(|_| MessageError::BadUtf8("PROPERTIES"))?
                .to_owned(),
        });
        rest = &rest[total..];
    }
    Ok(entries)
}

/// Builds a batch body the way the Java client does (magic and CRC written as 0).
///
/// Panics if an entry's properties exceed 32767 bytes or a record exceeds `i32::MAX` bytes:
/// the format cannot express either, and only our own test clients build batches.
pub fn encode_batch(entries: &[BatchEntry]) -> Vec<u8> {
    let total: usize = entries
        .iter()
        .map(|entry| FIXED_BYTES + entry.body.len() + entry.properties.len())
        .sum();
    let mut out = Vec::with_capacity(total);
    for entry in entries {
        let properties_length = i16::try_from(entry.properties.len())
            .expect("batch entry properties must fit a signed short");
        let record_size = i32::try_from(FIXED_BYTES + entry.body.len() + entry.properties.len())
            .expect("batch entry must fit an i32 size");
        // Exact: the record size, which includes the body, fits in an i32.
        let body_length = entry.body.len() as i32;
        out.extend_from_slice(&record_size.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&entry.flag.to_be_bytes());
        out.extend_from_slice(&body_length.to_be_bytes());
        out.extend_from_slice(&entry.body);
        out.extend_from_slice(&properties_length.to_be_bytes());
        out.extend_from_slice(entry.properties.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<BatchEntry> {
        vec![
            BatchEntry {
                flag: 0,
                body: Bytes::from_static(b"batch message 0"),
                properties: "KEYS\u{1}k0\u{2}".into(),
            },
            BatchEntry {
                flag: 7,
                body: Bytes::new(),
                properties: String::new(),
            },
        ]
    }

    #[test]
    fn round_trip() {
        let body = encode_batch(&entries());
        assert_eq!(decode_batch(&body), Ok(entries()));
        assert_eq!(decode_batch(&[]), Ok(vec![]));
    }

    #[test]
    fn every_cut_is_an_error() {
        let body = encode_batch(&entries());
        let first = FIXED_BYTES + 15 + 8;
        for cut in 1..body.len() {
            if cut == first {
                continue;
            }
            assert!(decode_batch(&body[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn inconsistent_lengths_are_errors() {
        let mut body = encode_batch(&entries()[..1]);
        body[16..20].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            decode_batch(&body),
            Err(MessageError::BadLength { field: "BODY", .. })
        ));
        let mut body = encode_batch(&entries()[..1]);
        body[3] += 1;
        body.push(0);
        assert!(matches!(
            decode_batch(&body),
            Err(MessageError::BadLength {
                field: "TOTALSIZE",
                ..
            })
        ));
    }
}
