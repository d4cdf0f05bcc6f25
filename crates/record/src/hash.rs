//! The checksum and the hashes RocketMQ puts on disk. Each must match Java bit for bit: a
//! record's BODYCRC is checked by Java tools, a tag code is compared with the hash a Java
//! consumer sends in its subscription, and the key index is probed by Java's hash of the key.

/// BODYCRC: zlib CRC32 of the stored body, sign bit cleared, as `UtilAll.crc32` does.
pub fn body_crc(body: &[u8]) -> i32 {
    (crc32fast::hash(body) & 0x7FFF_FFFF) as i32
}

/// Java's `String.hashCode`: h = 31·h + c over UTF-16 code units, wrapping. Tag codes and
/// index keys depend on it, so it must not run over UTF-8 bytes.
pub fn java_string_hash(s: &str) -> i32 {
    continue_java_hash(0, s)
}

/// Feeds `s` into a hash already holding earlier text: the hash of a concatenation without
/// building the string.
fn continue_java_hash(hash: i32, s: &str) -> i32 {
    s.encode_utf16().fold(hash, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// ConsumeQueue tagsCode: the tag's Java hash, sign-extended as Java's int-to-long does; 0
/// without tags.
pub fn tags_code(tags: &str) -> i64 {
    if tags.is_empty() {
        0
    } else {
        i64::from(java_string_hash(tags))
    }
}

/// Index key hash: |hashCode("topic#key")|, with i32::MIN (whose abs overflows) mapped to 0,
/// as `IndexService.buildKey` and `IndexFile.indexKeyHashMethod` do.
pub fn index_key_hash(topic: &str, key: &str) -> i32 {
    let hash = [topic, "#", key]
        .iter()
        .fold(0, |hash, part| continue_java_hash(hash, part));
    if hash == i32::MIN {
        0
    } else {
        hash.abs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "polygenelubricants".hashCode() == Integer.MIN_VALUE in Java.
    const MIN_VALUE_HASH: &str = "polygenelubricants";

    #[test]
    fn java_hash_matches_known_values() {
        // "hello".hashCode() == 99162322 in Java; "TagA".hashCode() == 2598919.
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("TagA"), 2_598_919);
        assert_eq!(java_string_hash(""), 0);
        // "é" is one UTF-16 unit (0xE9) but two UTF-8 bytes.
        assert_eq!(java_string_hash("é"), 0xE9);
        assert_eq!(java_string_hash(MIN_VALUE_HASH), i32::MIN);
    }

    #[test]
    fn tags_code_sign_extends_and_is_zero_without_tags() {
        assert_eq!(tags_code("TagA"), 2_598_919);
        assert_eq!(tags_code(""), 0);
        // A negative hash stays negative when widened.
        assert_eq!(tags_code(MIN_VALUE_HASH), i64::from(i32::MIN));
    }

    #[test]
    fn index_hash_is_the_abs_of_the_joined_key_and_never_negative() {
        assert_eq!(index_key_hash("T", "k"), java_string_hash("T#k").abs());
        assert!(index_key_hash("T", "k") >= 0);
        // Hashing the parts in turn is hashing the joined text.
        assert_eq!(
            continue_java_hash(continue_java_hash(java_string_hash("T"), "#"), "k"),
            java_string_hash("T#k")
        );
    }

    #[test]
    fn body_crc_clears_the_sign_bit() {
        // crc32("hello") = 0x3610A686; crc32 of four 0xFF bytes is 0xFFFFFFFF, top bit set.
        assert_eq!(body_crc(b"hello"), 0x3610_A686);
        assert_eq!(crc32fast::hash(&[0xFF; 4]), 0xFFFF_FFFF);
        assert_eq!(body_crc(&[0xFF; 4]), 0x7FFF_FFFF);
    }
}
