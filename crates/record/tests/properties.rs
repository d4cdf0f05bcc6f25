//! Property tests: stored messages, properties and offset message ids round-trip; arbitrary
//! bytes never make a decoder panic; and the two readers of a record, `StoredMessage` and
//! `RecordView`, give the same answers for every record the encoder writes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use quiver_record::*;

fn arb_host() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<u32>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)),
        (any::<u128>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port)),
    ]
}

/// Properties as a client writes them, and anything at all, which a record must still carry.
fn arb_properties() -> impl Strategy<Value = String> {
    prop_oneof![
        // Few names, so that some repeat.
        vec(
            ("TAGS|KEYS|UNIQ_KEY|[^\u{1}\u{2}]{1,12}", "[^\u{2}]{0,12}"),
            0..6
        )
        .prop_map(|pairs| {
            encode_properties(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        }),
        any::<String>().prop_map(|s| s.chars().take(100).collect::<String>()),
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
        arb_properties(),
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

proptest! {
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
        prop_assert_eq!(&decoded, &expected);
        let shared = bytes::Bytes::from(buf.clone());
        prop_assert_eq!(StoredMessage::decode_all_shared(&shared).unwrap(), expected);
        let (_, size) = StoredMessage::decode(&buf, true).unwrap();
        prop_assert_eq!(size, messages[0].encoded_len());
    }

    /// The store reads with `RecordView`, clients with `StoredMessage`: whatever the encoder
    /// writes, both must see the same record.
    #[test]
    fn record_view_reads_what_stored_message_writes(message in arb_message()) {
        let mut buf = Vec::new();
        message.encode(&mut buf).unwrap();
        let (decoded, _) = StoredMessage::decode(&buf, true).unwrap();
        let terminated = message.properties.is_empty()
            || message.properties.as_bytes().last() == Some(&PROPERTY_SEPARATOR);
        let view = match RecordView::parse(&buf) {
            Ok(view) => view,
            // The view alone refuses a last property without its 0x02, as a torn tail.
            Err(RecordError::UnterminatedProperties) if !terminated => return Ok(()),
            Err(error) => return Err(TestCaseError::fail(format!("{error}"))),
        };
        prop_assert!(terminated);
        prop_assert_eq!(view.magic, if message.topic.len() > TOPIC_BYTES_MAX_V1 { MAGIC_V2 } else { MAGIC_V1 });
        prop_assert_eq!(view.topic, decoded.topic.as_str());
        prop_assert_eq!(view.queue_id, decoded.queue_id);
        prop_assert_eq!(view.queue_offset, decoded.queue_offset);
        prop_assert_eq!(view.physical_offset, decoded.physical_offset);
        prop_assert_eq!(view.sys_flag, decoded.sys_flag);
        prop_assert_eq!(view.store_timestamp_ms, decoded.store_timestamp);
        prop_assert_eq!(view.body, &decoded.body[..]);
        prop_assert_eq!(view.properties, decoded.properties.as_bytes());
        prop_assert!(view.body_crc_matches());
        prop_assert_eq!(view.body_crc, body_crc(&decoded.body));
        prop_assert_eq!(store_timestamp_from_prefix(&buf), Some(decoded.store_timestamp));
        let view_pairs: Vec<(&[u8], &[u8])> = view.properties().collect();
        let decoded_pairs = decode_properties(&decoded.properties);
        let decoded_pairs: Vec<(&[u8], &[u8])> = decoded_pairs
            .iter()
            .map(|(name, value)| (name.as_bytes(), value.as_bytes()))
            .collect();
        for (name, _) in &view_pairs {
            let name = std::str::from_utf8(name).unwrap();
            prop_assert_eq!(
                view.property(name),
                find_property(&decoded.properties, name).map(str::as_bytes)
            );
        }
        prop_assert_eq!(view_pairs, decoded_pairs);
        let tags = find_property(&decoded.properties, property::TAGS);
        prop_assert_eq!(view.tags_code(), tags.map_or(0, tags_code));
    }

    #[test]
    fn stored_message_decoding_never_panics(bytes in vec(any::<u8>(), 0..400)) {
        let _ = StoredMessage::decode(&bytes, true);
        let _ = StoredMessage::decode_all(&bytes);
        let _ = StoredMessage::decode_all_shared(&bytes::Bytes::from(bytes.clone()));
        let _ = RecordView::parse(&bytes);
    }

    #[test]
    fn corrupted_records_never_panic(message in arb_message(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut buf = Vec::new();
        message.encode(&mut buf).unwrap();
        let position = at.index(buf.len());
        buf[position] = byte;
        let _ = StoredMessage::decode_all(&buf);
        let _ = RecordView::parse(&buf);
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
    fn with_property_sets_one_value_and_keeps_the_rest(
        pairs in vec(("[A-C]{1,2}", "[^\u{2}]{1,6}"), 0..6),
        name in "[A-C]{1,2}",
        value in "[^\u{2}]{1,6}",
    ) {
        let raw = encode_properties(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let set = with_property(&raw, &name, &value);
        prop_assert_eq!(find_property(&set, &name), Some(value.as_str()));
        prop_assert_eq!(decode_properties(&set).iter().filter(|(k, _)| *k == name).count(), 1);
        let removed = without_property(&set, &name);
        prop_assert_eq!(find_property(&removed, &name), None);
        for (other, _) in pairs.iter().filter(|(k, _)| *k != name) {
            prop_assert_eq!(find_property(&removed, other), find_property(&raw, other));
        }
    }

    #[test]
    fn offset_msg_ids_round_trip(host in arb_host(), offset in any::<i64>()) {
        let id = offset_msg_id(host, offset);
        prop_assert_eq!(id.len(), if host.is_ipv4() { 32 } else { 56 });
        prop_assert_eq!(decode_offset_msg_id(&id), Ok((host, offset)));
    }

    #[test]
    fn msg_id_decoding_never_panics(id in "[0-9A-Fa-f]{0,64}|.{0,64}") {
        let _ = decode_offset_msg_id(&id);
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
    fn index_key_hash_is_the_hash_of_the_joined_key(topic in ".{0,20}", key in ".{0,20}") {
        let joined = java_string_hash(&format!("{topic}#{key}"));
        let expected = if joined == i32::MIN { 0 } else { joined.abs() };
        prop_assert_eq!(index_key_hash(&topic, &key), expected);
    }
}
