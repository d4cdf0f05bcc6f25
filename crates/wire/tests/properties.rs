//! Property tests: encode/decode round trips for frames and batches, and "never panics, never
//! over-allocates" on arbitrary input. Stored messages, properties and message ids are tested
//! in `quiver-record`, which owns them.

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
