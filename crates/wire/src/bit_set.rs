//! A BATCH_ACK_MESSAGE entry's bit set as it travels: a Java `BitSet`'s little-endian bytes
//! (`toByteArray`), in standard base64 (`java.util.Base64`). Bit i of the bytes names offset
//! `startOffset + i`. The client encodes it, the broker decodes it.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as Java writes it.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, byte)| n | u32::from(*byte) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard or URL-safe base64, with or without padding; None for any other character.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3 + 2);
    let mut buffer = 0u32;
    let mut bits = 0;
    for c in text.bytes().filter(|c| *c != b'=') {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_sets_read_and_write_as_java_does() {
        // BitSet {0, 2, 9}: bytes 0b101, 0b10 -> "BQI=".
        assert_eq!(encode(&[5, 2]), "BQI=");
        assert_eq!(encode(&[1]), "AQ==");
        assert_eq!(encode(&[1, 2, 3]), "AQID");
        assert_eq!(encode(&[]), "");
        assert_eq!(decode("BQI="), Some(vec![5, 2]));
        assert_eq!(decode("BQI"), Some(vec![5, 2]));
        assert_eq!(decode("B*"), None);
    }

    #[test]
    fn what_is_encoded_decodes_to_itself() {
        for length in 0..40u8 {
            let bytes: Vec<u8> = (0..length).map(|i| i.wrapping_mul(37)).collect();
            assert_eq!(decode(&encode(&bytes)), Some(bytes));
        }
    }
}
