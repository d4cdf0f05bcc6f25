//! Property tests: encode/decode round trips for frames, stored messages, batches and
//! properties, and "never panics, never over-allocates" on arbitrary input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{Bytes, BytesMut};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use quiver_wire::*;

fn arb_ext_text() -> impl Strategy<Value = String> {
    // Any Unicode, control characters included: JSON must escape them and binary must carry
    // them raw.
    any::<String>().prop_map(|s| s.chars().take(24).collect())
}

fn arb_command() -> impl Strategy<Value = Command> {
    let encoding = prop_oneof![Just(Encoding::Json), Just(Encoding::RocketMq)];
    (
        (
            any::<i32>(),
            0u8..14,
            any::<i32>(),
            any::<i32>(),
            any::<i32>(),
        ),
        option::of(arb_ext_text()),
        option::of(btree_map(arb_ext_text(), arb_ext_text(), 0..6)),
        vec(any::<u8>(), 0..64),
        encoding,
    )
        .prop_map(
            |((code, language, version, opaque, flag), remark, ext, body, encoding)| Command {
                code,
                language: LanguageCode(language),
                version,
                opaque,
                flag,
                remark,
                ext: ext.map(|map| map.into_iter().collect()),
                body: Bytes::from(body),
                encoding,
            },
        )
}

/// What survives a trip through the binary header: 16-bit code and version (pop codes of
/// requests mapped back), and no empty strings, which Java reads as null.
fn as_binary_decodes(cmd: &Command) -> Command {
    let mut expected = cmd.clone();
    let short_code = i32::from(cmd.code as i16);
    expected.code = if cmd.is_response() {
        short_code
    } else {
        untruncate_pop_code(short_code)
    };
    expected.version = i32::from(cmd.version as i16);
    expected.remark = cmd.remark.clone().filter(|r| !r.is_empty());
    // An ext section of zero bytes reads as absent; a non-empty one stays present even when
    // every entry in it is dropped.
    expected.ext = cmd.ext.as_ref().filter(|ext| !ext.is_empty()).map(|ext| {
        ext.iter()
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    });
    expected
}

fn encode(cmd: &Command) -> BytesMut {
    let mut out = BytesMut::new();
    encode_frame(cmd, &mut out).unwrap();
    out
}

fn arb_host() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<u32>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)),
        (any::<u128>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port)),
    ]
}

fn arb_message() -> impl Strategy<Value = StoredMessage> {
    (
        (
            any::<i32>(),
            any::<i32>(),
            any::<i64>(),
            any::<i64>(),
            any::<i32>(),
        ),
        (any::<i64>(), arb_host(), any::<i64>(), arb_host()),
        (any::<i32>(), any::<i64>()),
        vec(any::<u8>(), 0..300),
        "[a-zA-Z0-9_%|-]{1,200}",
        any::<String>().prop_map(|s| s.chars().take(100).collect::<String>()),
    )
        .prop_map(
            |(
                (queue_id, flag, queue_offset, physical_offset, sys_flag),
                (born_timestamp, born_host, store_timestamp, store_host),
                (reconsume_times, prepared_transaction_offset),
                body,
                topic,
                properties,
            )| StoredMessage {
                queue_id,
                flag,
                queue_offset,
                physical_offset,
                sys_flag,
                born_timestamp,
                born_host,
                store_timestamp,
                store_host,
                reconsume_times,
                prepared_transaction_offset,
                body: Bytes::from(body),
                topic,
                properties,
            },
        )
}

fn with_host_bits(message: &StoredMessage) -> StoredMessage {
    let mut expected = message.clone();
    expected.sys_flag &= !(sys_flag::BORN_HOST_V6 | sys_flag::STORE_HOST_V6);
    if message.born_host.is_ipv6() {
        expected.sys_flag |= sys_flag::BORN_HOST_V6;
    }
    if message.store_host.is_ipv6() {
        expected.sys_flag |= sys_flag::STORE_HOST_V6;
    }
    expected
}

/// Runs the decoder over `bytes` the way a connection would, and checks it never reserves
/// more than one maximal frame.
fn drain(bytes: &[u8]) {
    let mut buf = BytesMut::from(bytes);
    while let Ok(Some(cmd)) = decode_frame(&mut buf) {
        let _ = StoredMessage::decode_all(&cmd.body);
        let _ = decode_batch(&cmd.body);
    }
    assert!(buf.capacity() <= FRAME_BYTES_MAX.max(bytes.len()));
}

proptest! {
    #[test]
    fn frames_round_trip(cmd in arb_command()) {
        let mut buf = encode(&cmd);
        let decoded = decode_frame(&mut buf).unwrap().unwrap();
        prop_assert!(buf.is_empty());
        let expected = match cmd.encoding {
            Encoding::Json => cmd,
            Encoding::RocketMq => as_binary_decodes(&cmd),
        };
        prop_assert_eq!(decoded, expected);
    }

    #[test]
    fn every_strict_prefix_needs_more(cmd in arb_command()) {
        let frame = encode(&cmd);
        for cut in 0..frame.len() {
            let mut buf = BytesMut::from(&frame[..cut]);
            prop_assert_eq!(decode_frame(&mut buf), Ok(None));
            prop_assert_eq!(&buf[..], &frame[..cut]);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
        drain(&bytes);
    }

    #[test]
    fn arbitrary_headers_never_panic(
        serialize_type in 0u8..2,
        header in vec(any::<u8>(), 0..256),
        body in vec(any::<u8>(), 0..256),
    ) {
        // A well-formed prefix sends the random bytes through the header parsers.
        let frame_length = (4 + header.len() + body.len()) as u32;
        let mut bytes = frame_length.to_be_bytes().to_vec();
        bytes.push(serialize_type);
        bytes.extend_from_slice(&(header.len() as u32).to_be_bytes()[1..]);
        bytes.extend_from_slice(&header);
        bytes.extend_from_slice(&body);
        drain(&bytes);
    }

    #[test]
    fn corrupted_frames_never_panic(cmd in arb_command(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut frame = encode(&cmd).to_vec();
        let position = at.index(frame.len());
        frame[position] = byte;
        drain(&frame);
    }

    #[test]
    fn stored_messages_round_trip(messages in vec(arb_message(), 1..4)) {
        let mut buf = Vec::new();
        for message in &messages {
            let before = buf.len();
            message.encode(&mut buf).unwrap();
            prop_assert_eq!(buf.len() - before, message.encoded_len());
        }
        let decoded = StoredMessage::decode_all(&buf).unwrap();
        let expected: Vec<StoredMessage> = messages.iter().map(with_host_bits).collect();
        prop_assert_eq!(decoded, expected);
        let (_, size) = StoredMessage::decode(&buf, true).unwrap();
        prop_assert_eq!(size, messages[0].encoded_len());
    }

    #[test]
    fn stored_message_decoding_never_panics(bytes in vec(any::<u8>(), 0..400)) {
        let _ = StoredMessage::decode(&bytes, true);
        let _ = StoredMessage::decode_all(&bytes);
    }

    #[test]
    fn corrupted_records_never_panic(message in arb_message(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut buf = Vec::new();
        message.encode(&mut buf).unwrap();
        let position = at.index(buf.len());
        buf[position] = byte;
        let _ = StoredMessage::decode_all(&buf);
    }

    #[test]
    fn batches_round_trip(entries in vec(
        (any::<i32>(), vec(any::<u8>(), 0..100), any::<String>()).prop_map(|(flag, body, properties)| BatchEntry {
            flag,
            body: Bytes::from(body),
            properties,
        }),
        0..5,
    )) {
        let body = encode_batch(&entries);
        prop_assert_eq!(decode_batch(&body).unwrap(), entries);
    }

    #[test]
    fn batch_decoding_never_panics(bytes in vec(any::<u8>(), 0..400)) {
        let _ = decode_batch(&bytes);
    }

    #[test]
    fn properties_round_trip(pairs in vec(("[^\u{1}\u{2}]{1,12}", "[^\u{2}]{1,12}"), 0..8)) {
        let raw = encode_properties(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        prop_assert_eq!(decode_properties(&raw), pairs.clone());
        for (name, _) in &pairs {
            let last = pairs.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
            prop_assert_eq!(find_property(&raw, name), last);
        }
    }

    #[test]
    fn offset_msg_ids_round_trip(host in arb_host(), offset in any::<i64>()) {
        let id = offset_msg_id(host, offset);
        prop_assert_eq!(id.len(), if host.is_ipv4() { 32 } else { 56 });
        prop_assert_eq!(decode_offset_msg_id(&id), Ok((host, offset)));
    }

    #[test]
    fn java_hash_matches_the_definition(text in any::<String>()) {
        let mut expected: i32 = 0;
        for unit in text.encode_utf16() {
            expected = expected.wrapping_mul(31).wrapping_add(unit as i32);
        }
        prop_assert_eq!(java_string_hash(&text), expected);
    }

    #[test]
    fn lenient_body_parsing_never_panics(bytes in vec(any::<u8>(), 0..200)) {
        let _ = from_json::<ClusterInfo>(&bytes);
    }
}

#[test]
fn maximal_hostile_length_reserves_at_most_one_frame() {
    // Length of exactly FRAME_BYTES_MAX - 4: allowed, so the decoder may reserve for it, but
    // never beyond the limit.
    let frame_length = (FRAME_BYTES_MAX - 4) as u32;
    let mut bytes = frame_length.to_be_bytes().to_vec();
    bytes.extend_from_slice(&[1, 0, 0, 0]);
    let mut buf = BytesMut::from(&bytes[..]);
    assert_eq!(decode_frame(&mut buf), Ok(None));
    assert!(buf.capacity() <= FRAME_BYTES_MAX);
    let mut over = BytesMut::from(&(frame_length + 1).to_be_bytes()[..]);
    assert_eq!(
        decode_frame(&mut over),
        Err(FrameError::TooLarge {
            frame_bytes: FRAME_BYTES_MAX + 1,
            limit_bytes: FRAME_BYTES_MAX
        })
    );
}
