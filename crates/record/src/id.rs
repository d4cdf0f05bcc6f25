//! Message ids: the offset message id (where a record sits, so a lookup by id is a read at a
//! position) and the UNIQ_KEY a broker gives messages that arrive without one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::layout::{put_host, HOST_V4_BYTES, HOST_V6_BYTES};

/// Offset-message-id bytes: the stored host, then PHYSICALOFFSET (8).
const ID_BYTES_V4: usize = HOST_V4_BYTES + 8;
const ID_BYTES_V6: usize = HOST_V6_BYTES + 8;
const _: () = assert!(ID_BYTES_V4 == 16 && ID_BYTES_V6 == 28);

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum MsgIdError {
    #[error("message id {id:?} is not hex")]
    NotHex { id: String },
    #[error("message id {id:?} has {bytes} bytes, not 16 (IPv4) or 28 (IPv6)")]
    BadLength { id: String, bytes: usize },
    #[error("message id {id:?} holds port {port}")]
    BadPort { id: String, port: i32 },
}

/// Offset message id: store IP (4 or 16 bytes), port (i32), physical offset (i64), upper hex.
pub fn offset_msg_id(store_host: SocketAddr, physical_offset: i64) -> String {
    let mut raw = Vec::with_capacity(ID_BYTES_V6);
    put_host(&mut raw, &store_host);
    raw.extend_from_slice(&physical_offset.to_be_bytes());
    upper_hex(&raw)
}

/// The store host and physical offset an offset message id names.
pub fn decode_offset_msg_id(id: &str) -> Result<(SocketAddr, i64), MsgIdError> {
    let raw = decode_hex(id).ok_or_else(|| MsgIdError::NotHex { id: id.to_owned() })?;
    let ip_bytes = match raw.len() {
        ID_BYTES_V4 => 4,
        ID_BYTES_V6 => 16,
        bytes => {
            return Err(MsgIdError::BadLength {
                id: id.to_owned(),
                bytes,
            })
        }
    };
    let ip = match raw[..ip_bytes] {
        [a, b, c, d] => IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        ref octets => {
            let mut v6 = [0u8; 16];
            v6.copy_from_slice(octets);
            IpAddr::V6(Ipv6Addr::from(v6))
        }
    };
    let mut port = [0u8; 4];
    port.copy_from_slice(&raw[ip_bytes..ip_bytes + 4]);
    let port = i32::from_be_bytes(port);
    let port = u16::try_from(port).map_err(|_| MsgIdError::BadPort {
        id: id.to_owned(),
        port,
    })?;
    let mut offset = [0u8; 8];
    offset.copy_from_slice(&raw[ip_bytes + 4..]);
    Ok((SocketAddr::new(ip, port), i64::from_be_bytes(offset)))
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

/// A UNIQ_KEY for messages that arrive without one: IPv4 address (4 bytes; the last 4 bytes of
/// an IPv6 one), `now_ms` (8) and `counter` (4), as 32 upper-case hex characters. Peers treat
/// the id as opaque; the leading IP matches where Java tools look for it. The caller passes
/// the time and the counter, so ids are reproducible in tests.
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
    fn msg_ids_round_trip() {
        let host: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        let id = offset_msg_id(host, 0x1B112);
        assert_eq!(id, "7F00000100002A9F000000000001B112");
        assert_eq!(decode_offset_msg_id(&id), Ok((host, 0x1B112)));
        let v6: SocketAddr = "[2001:db8::7]:10911".parse().unwrap();
        let id = offset_msg_id(v6, 99);
        assert_eq!(id.len(), 56);
        assert_eq!(decode_offset_msg_id(&id), Ok((v6, 99)));
    }

    #[test]
    fn malformed_msg_ids_are_refused() {
        assert!(matches!(
            decode_offset_msg_id("XYZ"),
            Err(MsgIdError::NotHex { .. })
        ));
        assert!(matches!(
            decode_offset_msg_id("7F000001"),
            Err(MsgIdError::BadLength { bytes: 4, .. })
        ));
        assert!(matches!(
            decode_offset_msg_id("7F00000100002A9F000000000001B11G"),
            Err(MsgIdError::NotHex { .. })
        ));
        assert!(matches!(
            decode_offset_msg_id("7F000001FFFFFFFF000000000001B112"),
            Err(MsgIdError::BadPort { port: -1, .. })
        ));
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
        assert_eq!(new_uniq_id(ip, 7, 1_795_293_274_693), id);
    }
}
