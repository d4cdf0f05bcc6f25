//! Records written by a real RocketMQ 5.5.0 broker, taken from the bodies of pull, pop and
//! lite-pull answers the wire crate keeps as golden frames (`crates/wire/tests/golden/`, see
//! its README). Both readers must read them as Java wrote them, and the encoder must write
//! them back byte for byte.

use quiver_record::*;

macro_rules! golden_body {
    ($name:literal) => {
        frame_body(include_str!(concat!(
            "../../wire/tests/golden/",
            $name,
            ".hex"
        )))
    };
}

/// The body of one remoting frame: length (4), serialize type (1) and header length (3), the
/// header, then the body. Only as much of the frame as finding the body needs; the wire crate
/// tests the frame itself.
fn frame_body(hex: &str) -> Vec<u8> {
    let hex = hex.trim();
    let frame: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("golden file is hex"))
        .collect();
    let frame_length = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(frame_length, frame.len() - 4, "one whole frame");
    let header_length = u32::from_be_bytes([0, frame[5], frame[6], frame[7]]) as usize;
    frame[8 + header_length..].to_vec()
}

/// Each record of a body with `RecordView`, walking by TOTALSIZE as the store does.
fn views(body: &[u8]) -> Vec<RecordView<'_>> {
    let mut views = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let size = read_i32(body, at).expect("TOTALSIZE") as usize;
        views.push(RecordView::parse(&body[at..at + size]).expect("a whole record"));
        at += size;
    }
    views
}

#[test]
fn pulled_records_decode_and_re_encode_to_the_captured_bytes() {
    let body = golden_body!("pull_response_json");
    let messages = StoredMessage::decode_all(&body).unwrap();
    assert_eq!(messages.len(), 10);
    for (index, message) in messages.iter().enumerate() {
        assert_eq!(message.topic, "wire_bench");
        assert_eq!(message.queue_id, 3);
        assert_eq!(message.queue_offset, 64 + index as i64);
        assert_eq!(message.body.len(), 128);
        assert_eq!(message.store_host, "127.0.0.1:10911".parse().unwrap());
        assert!(message.property(property::UNIQ_KEY).is_some());
    }
    assert_eq!(messages[0].physical_offset, 93340);
    // Every record re-encodes to the captured bytes, CRC included.
    let mut again = Vec::new();
    for message in &messages {
        message.encode(&mut again).unwrap();
    }
    assert_eq!(again, body);
    for (message, size) in messages.iter().map(|m| (m, m.encoded_len())) {
        assert_eq!(size, 359, "{}", message.queue_offset);
    }
    assert!(StoredMessage::decode(&body, true).is_ok());
}

#[test]
fn pulled_records_parse_in_place_as_the_store_reads_them() {
    let body = golden_body!("pull_response_json");
    let messages = StoredMessage::decode_all(&body).unwrap();
    let views = views(&body);
    assert_eq!(views.len(), messages.len());
    for (view, message) in views.iter().zip(&messages) {
        assert!(view.body_crc_matches());
        assert_eq!(view.topic, message.topic);
        assert_eq!(view.queue_offset, message.queue_offset);
        assert_eq!(view.physical_offset, message.physical_offset);
        assert_eq!(view.store_timestamp_ms, message.store_timestamp);
        assert_eq!(view.properties, message.properties.as_bytes());
        let tags = message.property(property::TAGS);
        assert_eq!(view.tags_code(), tags.as_deref().map_or(0, tags_code));
        let mut keys = Vec::new();
        view.for_each_key(|key| keys.push(key.to_owned()));
        assert_eq!(keys.last(), message.property(property::UNIQ_KEY).as_ref());
    }
}

#[test]
fn popped_and_lite_pulled_records_decode() {
    let body = golden_body!("pop_response_json");
    let messages = StoredMessage::decode_all(&body).unwrap();
    let offsets: Vec<(i32, i64)> = messages
        .iter()
        .map(|m| (m.queue_id, m.queue_offset))
        .collect();
    assert_eq!(offsets, [(3, 0), (2, 0), (2, 1), (2, 2), (1, 0)]);
    assert!(messages.iter().all(|m| m.topic == "wire_json"));
    assert_eq!(
        messages[1].offset_msg_id(),
        "7F00000100002A9F000000000001B112"
    );
    assert_eq!(views(&body).len(), messages.len());

    let body = golden_body!("lite_pull_response_json");
    let messages = StoredMessage::decode_all(&body).unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].physical_offset, 111502);
    assert_eq!(views(&body)[0].physical_offset, 111502);
}
