//! Fuzz targets for what this crate reads from peers: frames, JSON headers, JSON bodies and
//! pop receipt handles. Each takes arbitrary bytes, must not panic on any input, and asserts
//! what has to hold of whatever it decodes. `fuzz/` runs them: under cargo-fuzz (nightly,
//! `scripts/fuzz.sh`), and for a bounded time on stable in `cargo test`.
//!
//! They live here, not in `fuzz/`, because some reach what the crate keeps private (the JSON
//! header's two readers, the bodies' key quoting), and because being compiled with the crate
//! keeps them in step with it. Not part of the crate's API.

use bytes::BytesMut;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::body::{quote_integer_keys, *};
use crate::frame::{encode_frame, FRAME_BYTES_MAX};
use crate::stats::{ConsumeStats, ResetOffsetBody, TopicStatsTable};
use crate::{decode_batch, json_header, Command, ReceiptHandle, StoredMessage, TimerCheckpoint};

/// Bytes as a connection delivers them: cut into frames until one does not decode, each
/// frame's body read as the records and batches it may carry. A decoded command written
/// again reads back the same: once normalized (an unknown language becomes OTHER in JSON),
/// encoding and decoding change nothing.
pub fn decode_frame(data: &[u8]) {
    let mut buffer = BytesMut::from(data);
    while let Ok(Some(command)) = crate::frame::decode_frame(&mut buffer) {
        let _ = StoredMessage::decode_all(&command.body);
        let _ = decode_batch(&command.body);
        if let Some(normalized) = round_trip(&command) {
            assert_eq!(round_trip(&normalized).as_ref(), Some(&normalized));
        }
    }
    // A length prefix may reserve one frame ahead, no more.
    assert!(buffer.capacity() <= FRAME_BYTES_MAX.max(data.len()));
    // Bodies straight, so that they are explored without first building a frame around them.
    let _ = StoredMessage::decode_all(data);
    let _ = decode_batch(data);
}

/// `command` encoded and decoded again; None when it does not encode (too large).
fn round_trip(command: &Command) -> Option<Command> {
    let mut out = BytesMut::new();
    encode_frame(command, &mut out).ok()?;
    let again = crate::frame::decode_frame(&mut out)
        .expect("an encoded frame decodes")
        .expect("an encoded frame is whole");
    assert!(out.is_empty(), "one frame encoded, one decoded");
    Some(again)
}

/// A JSON header alone. Where the one-pass reader of the common shape answers, serde_json's
/// general reader must give the same command.
pub fn json_header(data: &[u8]) {
    let header = bytes::Bytes::copy_from_slice(data);
    let decoded = json_header::decode(&header);
    if let Some(fast) = json_header::fast::decode(&header) {
        let general = json_header::decode_general(&header);
        assert_eq!(general.as_ref().ok(), Some(&fast), "{general:?}");
        assert_eq!(decoded.ok(), Some(fast));
    }
}

/// One body as every JSON body type a broker, name server or client reads from a peer: the
/// requests' (heartbeat, registration, lock and unlock, BATCH_ACK, QUERY_ASSIGNMENT, ...), the
/// answers a slave reads from its master, and the answers a client reads. A body that parses
/// serializes to JSON that parses back to the same value, and fastjson's bare integer keys are
/// quoted only where the text is not JSON already.
pub fn json_body(data: &[u8]) {
    standard_json_is_left_alone(data);
    parses_back::<HeartbeatData>(data);
    parses_back::<CheckClientRequestBody>(data);
    parses_back::<SubscriptionGroupConfig>(data);
    parses_back::<LockBatchRequestBody>(data);
    parses_back::<LockBatchResponseBody>(data);
    parses_back::<BatchAckMessageRequestBody>(data);
    parses_back::<SetMessageRequestModeRequestBody>(data);
    parses_back::<MessageRequestModeSerializeWrapper>(data);
    parses_back::<QueryAssignmentRequestBody>(data);
    parses_back::<QueryAssignmentResponseBody>(data);
    parses_back::<RegisterBrokerBody>(data);
    parses_back::<DataVersion>(data);
    parses_back::<TopicConfigAndMappingSerializeWrapper>(data);
    parses_back::<ConsumerOffsetSerializeWrapper>(data);
    parses_back::<DelayOffsetSerializeWrapper>(data);
    parses_back::<SubscriptionGroupWrapper>(data);
    parses_back::<KvTable>(data);
    parses_back::<TopicRouteData>(data);
    parses_back::<ClusterInfo>(data);
    parses_back::<TopicList>(data);
    parses_back::<ConsumerIdList>(data);
    parses_back::<GroupList>(data);
    parses_back::<ConsumerConnection>(data);
    parses_back::<ProducerConnection>(data);
    java_keyed_bodies(data);
    let _ = TimerCheckpoint::decode(data);
}

fn parses_back<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(value) = from_json::<T>(data) {
        let again = from_json::<T>(&to_json(&value));
        assert_eq!(again.as_ref().ok(), Some(&value), "{again:?}");
    }
}

/// The bodies keyed by a bare JSON object (`{{"topic":..}:..}`), which have writers of their own.
fn java_keyed_bodies(data: &[u8]) {
    if let Ok(table) = TopicStatsTable::from_java_json(data) {
        let again = TopicStatsTable::from_java_json(&table.to_java_json());
        assert_eq!(again.ok(), Some(table));
    }
    if let Ok(stats) = ConsumeStats::from_java_json(data) {
        let again = ConsumeStats::from_java_json(&stats.to_java_json());
        assert_eq!(again.ok(), Some(stats));
    }
    if let Ok(reset) = ResetOffsetBody::from_java_json(data) {
        let again = ResetOffsetBody::from_java_json(&reset.to_java_json());
        assert_eq!(again.ok(), Some(reset));
    }
}

/// JSON has no bare keys, so text that is JSON already must reach serde_json unchanged.
fn standard_json_is_left_alone(data: &[u8]) {
    if serde_json::from_slice::<serde_json::Value>(data).is_ok() {
        assert!(
            matches!(quote_integer_keys(data), std::borrow::Cow::Borrowed(_)),
            "JSON rewritten"
        );
    }
}

/// A receipt handle as ACK_MESSAGE's `extraInfo` or a popped message's POP_CK brings it. One
/// that parses encodes to a handle that parses to the same value.
pub fn receipt_handle(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(handle) = ReceiptHandle::parse(text) {
        assert_eq!(ReceiptHandle::parse(&handle.encode()), Ok(handle));
    }
}
