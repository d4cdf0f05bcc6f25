//! Message ids and the Java string hash used for tag codes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{put_host, MessageError};

/// Offset message id: store IP (4 or 16 bytes), port (i32), physical offset (i64), upper hex.
pub fn offset_msg_id(store_host: SocketAddr, physical_offset: i64) -> String {
    let mut raw = Vec::with_capacity(28);
    put_host(&mut raw, &store_host);
    raw.extend_from_slice(&physical_offset.to_be_bytes());
    upper_hex(&raw)
}

pub fn decode_offset_msg_id(id: &str) -> Result<(SocketAddr, i64), MessageError> {
    let bad = || MessageError::BadMsgId(id.to_owned());
    let raw = decode_hex(id).ok_or_else(bad)?;
    let (ip, rest) = match raw.len() {
        16 => {
            let octets: [u8; 4] = raw[..4].try_into().map_err(|_| bad())?;
            (IpAddr::V4(Ipv4Addr::from(octets)), &raw[4..])
        }
        28 => {
            let octets: [u8; 16] = raw[..16].try_into().map_err(|_| bad())?;
            (IpAddr::V6(Ipv6Addr::from(octets)), &raw[16..])
        }
        _ => return Err(bad()),
    };
    let port_raw: [u8; 4] = rest[..4].try_into().map_err(|_| bad())?;
    let port = u16::try_from(i32::from_be_bytes(port_raw)).map_err(|_| bad())?;
    let offset_raw: [u8; 8] = rest[4..12].try_into().map_err(|_| bad())?;
    Ok((SocketAddr::new(ip, port), i64::from_be_bytes(offset_raw)))
}

/// Every send answer carries an id, so this avoids the formatting machinery: a table lookup
/// per nibble.
fn upper_hex(raw: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(raw.len() * 2);
    for byte in raw {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let pairs = text.as_bytes().chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return None;
    }
    let nibble = |digit: u8| (digit as char).to_digit(16).map(|n| n as u8);
    pairs
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

/// Java's `String.hashCode`: h = 31·h + c over UTF-16 code units, wrapping. Tag codes and
/// index keys depend on it, so it must not run over UTF-8 bytes.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// ConsumeQueue tagsCode: the tag's Java hash, sign-extended; 0 without tags.
pub fn tags_code(tags: &str) -> i64 {
    if tags.is_empty() {
        0
    } else {
        i64::from(java_string_hash(tags))
    }
}

/// A UNIQ_KEY for messages that arrive without one: IPv4 address (4 bytes; the last 4 bytes of
/// an IPv6 one), `now_ms` (8) and `counter` (4), as 32 upper-case hex characters. Peers treat
/// the id as opaque; the leading IP matches where Java tools look for it.
pub fn new_uniq_id(ip: IpAddr, counter: u32, now_ms: i64) -> String {
    let ip_bytes: [u8; 4] = match ip {
        IpAddr::V4(ip) => ip.octets(),
        IpAddr::V6(ip) => {
            let octets = ip.octets();
            [octets[12], octets[13], octets[14], octets[15]]
        }
    };
    let mut raw = [0u8; 16];
    raw[..4].copy_from_slice(&ip_bytes);
    raw[4..12].copy_from_slice(&now_ms.to_be_bytes());
    raw[12..].copy_from_slice(&counter.to_be_bytes());
    upper_hex(&raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_matches_known_values() {
        assert_eq!(java_string_hash("TagA"), 2598919);
        assert_eq!(java_string_hash(""), 0);
        // "é" is one UTF-16 unit (0xE9) but two UTF-8 bytes.
        assert_eq!(java_string_hash("é"), 0xE9);
        assert_eq!(tags_code("TagA"), 2598919);
        assert_eq!(tags_code(""), 0);
        // A negative hash stays negative when widened, as Java's int-to-long does.
        assert!(java_string_hash("polygenelubricants") < 0);
        assert_eq!(tags_code("polygenelubricants"), i64::from(i32::MIN));
    }

    #[test]
    fn msg_ids_round_trip() {
        let host: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        let id = offset_msg_id(host, 0x1B112);
        assert_eq!(id, "7F00000100002A9F000000000001B112");
        assert_eq!(decode_offset_msg_id(&id), Ok((host, 0x1B112)));
        let v6: SocketAddr = "[2001:db8::7]:10911".parse().unwrap();
        let id = offset_msg_id(v6, 99);
        assert_eq!(id.len(), 56);
        assert_eq!(decode_offset_msg_id(&id), Ok((v6, 99)));
        assert!(decode_offset_msg_id("XYZ").is_err());
        assert!(decode_offset_msg_id("7F000001").is_err());
        assert!(decode_offset_msg_id("7F00000100002A9F000000000001B11G").is_err());
    }

    #[test]
    fn uniq_ids_are_32_upper_hex() {
        let ip: IpAddr = "10.1.2.3".parse().unwrap();
        let id = new_uniq_id(ip, 7, 1_795_293_274_693);
        assert_eq!(id.len(), 32);
        assert!(id.starts_with("0A010203"));
        assert!(id
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
        assert_ne!(id, new_uniq_id(ip, 8, 1_795_293_274_693));
    }
}
