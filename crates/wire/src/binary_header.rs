//! ROCKETMQ binary header (serialize type 1), big-endian:
//!
//! ```text
//! code        i16   (Java writes `(short) code`, so pop codes arrive truncated)
//! language    u8
//! version     i16
//! opaque      i32
//! flag        i32
//! remark      i32 length + UTF-8 (length 0 = null)
//! extFields   i32 total length, then entries: i16 key length, key, i32 value length, value
//! ```

use bytes::{BufMut, Bytes, BytesMut};

use crate::code::untruncate_pop_code;
use crate::command::{Command, Encoding, LanguageCode, FLAG_RESPONSE};
use crate::ext::ExtFields;
use crate::frame_error::FrameError;

/// code + language + version + opaque + flag + remark length + ext length.
const FIXED_BYTES: usize = 2 + 1 + 2 + 4 + 4 + 4 + 4;
const _: () = assert!(FIXED_BYTES == 21);

fn bad(reason: impl Into<String>) -> FrameError {
    FrameError::BadBinaryHeader(reason.into())
}

/// A bounds-checked reader over the header bytes; every read can fail instead of panicking.
struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize, what: &str) -> Result<&'a [u8], FrameError> {
        let end = self
            .position
            .checked_add(count)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| {
                bad(format!(
                    "{what} needs {count} bytes at {} but the header has {}",
                    self.position,
                    self.bytes.len()
                ))
            })?;
        let slice = &self.bytes[self.position..end];
        self.position = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], FrameError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn i16(&mut self, what: &str) -> Result<i16, FrameError> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }

    fn i32(&mut self, what: &str) -> Result<i32, FrameError> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }

    fn length(&mut self, value: i64, what: &str) -> Result<usize, FrameError> {
        usize::try_from(value).map_err(|_| bad(format!("{what} length {value} is negative")))
    }

    /// Skips `count` bytes and returns where they were.
    fn range(&mut self, count: usize, what: &str) -> Result<std::ops::Range<usize>, FrameError> {
        let start = self.position;
        self.take(count, what)?;
        Ok(start..self.position)
    }

    fn text(&mut self, count: usize, what: &str) -> Result<String, FrameError> {
        let raw = self.take(count, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| bad(format!("{what} is not UTF-8")))
    }
}

pub(crate) fn decode(header: &Bytes) -> Result<Command, FrameError> {
    let mut reader = Reader {
        bytes: header,
        position: 0,
    };
    let raw_code = i32::from(reader.i16("code")?);
    let [language] = reader.array::<1>("language")?;
    let version = i32::from(reader.i16("version")?);
    let opaque = reader.i32("opaque")?;
    let flag = reader.i32("flag")?;

    let remark = decode_remark(&mut reader)?;
    let ext = decode_ext(&mut reader, header)?;

    // Only requests can carry a pop code; response codes are small and must stay as sent.
    let code = if flag & FLAG_RESPONSE == 0 {
        untruncate_pop_code(raw_code)
    } else {
        raw_code
    };
    Ok(Command {
        code,
        language: LanguageCode(language),
        version,
        opaque,
        flag,
        remark,
        ext,
        body: Bytes::new(),
        encoding: Encoding::RocketMq,
    })
}

/// The remark: a 4-byte length, then UTF-8. Java reads a zero-length string as null.
fn decode_remark(reader: &mut Reader<'_>) -> Result<Option<String>, FrameError> {
    let remark_length = reader.i32("remark length")?;
    let remark_bytes = reader.length(i64::from(remark_length), "remark")?;
    match remark_bytes {
        0 => Ok(None),
        n => Ok(Some(reader.text(n, "remark")?)),
    }
}

/// The ext fields: a 4-byte section length, then pairs of a 2-byte key length and key and a
/// 4-byte value length and value. None when the section is empty.
fn decode_ext(reader: &mut Reader<'_>, header: &Bytes) -> Result<Option<ExtFields>, FrameError> {
    let ext_length = reader.i32("ext length")?;
    let ext_bytes = reader.length(i64::from(ext_length), "ext")?;
    if ext_bytes == 0 {
        return Ok(None);
    }
    let ext_start = reader.position;
    let mut entries = Reader {
        bytes: reader.take(ext_bytes, "ext")?,
        position: 0,
    };
    // Keys and values stay in the frame's bytes; the map records where.
    let mut ranges = Vec::with_capacity(16);
    while entries.position < entries.bytes.len() {
        let key_length = entries.i16("ext key length")?;
        let key_bytes = entries.length(i64::from(key_length), "ext key")?;
        let key = entries.range(key_bytes, "ext key")?;
        let value_length = entries.i32("ext value length")?;
        let value_bytes = entries.length(i64::from(value_length), "ext value")?;
        let value = entries.range(value_bytes, "ext value")?;
        // Empty keys and values are null in Java, which never lands in a header field.
        if !key.is_empty() && !value.is_empty() {
            if ranges.len() == crate::ext::EXT_FIELDS_MAX {
                return Err(bad(format!(
                    "more than {} ext fields",
                    crate::ext::EXT_FIELDS_MAX
                )));
            }
            ranges.push((key, value));
        }
    }
    let section = header.slice(ext_start..ext_start + ext_bytes);
    let ext = ExtFields::from_frame(section, &ranges)
        .ok_or_else(|| bad("an ext key or value is not UTF-8"))?;
    Ok(Some(ext))
}

pub(crate) fn encode(cmd: &Command, out: &mut BytesMut) -> Result<(), FrameError> {
    let remark = cmd.remark.as_deref().unwrap_or("");
    let ext_bytes: usize = cmd
        .ext
        .iter()
        .flat_map(ExtFields::iter)
        .map(|(key, value)| 2 + key.len() + 4 + value.len())
        .sum();
    let remark_length = i32::try_from(remark.len()).map_err(|_| bad("remark too long"))?;
    let ext_length = i32::try_from(ext_bytes).map_err(|_| bad("ext fields too long"))?;
    out.reserve(FIXED_BYTES + remark.len() + ext_bytes);

    // Truncation to 16 bits is what Java does; the decoder maps pop codes back.
    out.put_i16(cmd.code as i16);
    out.put_u8(cmd.language.0);
    out.put_i16(cmd.version as i16);
    out.put_i32(cmd.opaque);
    out.put_i32(cmd.flag);
    out.put_i32(remark_length);
    out.put_slice(remark.as_bytes());
    out.put_i32(ext_length);
    for (key, value) in cmd.ext.iter().flat_map(ExtFields::iter) {
        let key_length = i16::try_from(key.len())
            .map_err(|_| bad(format!("ext key of {} bytes exceeds 32767", key.len())))?;
        let value_length = i32::try_from(value.len()).map_err(|_| bad("ext value too long"))?;
        out.put_i16(key_length);
        out.put_slice(key.as_bytes());
        out.put_i32(value_length);
        out.put_slice(value.as_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(cmd: &Command) -> Bytes {
        let mut out = BytesMut::new();
        encode(cmd, &mut out).unwrap();
        out.freeze()
    }

    #[test]
    fn ext_fields_past_the_limit_are_an_error() {
        let with = |count: usize| {
            let mut ext = ExtFields::new();
            for i in 0..count {
                ext.insert(format!("k{i}"), "v");
            }
            header(&Command::request(10, Encoding::RocketMq).with_ext(ext))
        };
        let at_limit = decode(&with(crate::ext::EXT_FIELDS_MAX)).expect("at the limit");
        assert_eq!(
            at_limit.ext.map(|e| e.len()),
            Some(crate::ext::EXT_FIELDS_MAX)
        );
        let error = decode(&with(crate::ext::EXT_FIELDS_MAX + 1)).expect_err("past the limit");
        assert!(error.to_string().contains("ext fields"), "{error}");
    }

    #[test]
    fn pop_code_is_truncated_and_restored() {
        let cmd = Command::request(200050, Encoding::RocketMq);
        let bytes = header(&cmd);
        assert_eq!(&bytes[..2], &3442i16.to_be_bytes());
        assert_eq!(decode(&bytes).unwrap().code, 200050);
    }

    #[test]
    fn empty_strings_decode_as_absent() {
        let mut ext = ExtFields::new();
        ext.insert("empty", "");
        ext.insert("k", "v");
        let cmd = Command::request(10, Encoding::RocketMq)
            .with_remark("")
            .with_ext(ext);
        let decoded = decode(&header(&cmd)).unwrap();
        assert_eq!(decoded.remark, None);
        assert_eq!(decoded.ext, Some(ExtFields::new().with("k", "v")));
    }

    #[test]
    fn truncated_header_is_an_error() {
        let cmd = Command::request(10, Encoding::RocketMq)
            .with_remark("hello")
            .with_ext(ExtFields::new().with("topic", "T"));
        let bytes = header(&cmd);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes.slice(..cut)).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn negative_lengths_are_errors() {
        let mut bytes = header(&Command::request(10, Encoding::RocketMq)).to_vec();
        bytes[13..17].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(decode(&Bytes::from(bytes)).is_err());
    }
}
