//! Fuzz targets for what the broker reads from peers beyond the wire crate's codec: SQL92
//! selectors and the properties they are evaluated over, the HA stream a slave reads and the
//! two HA sessions, and BATCH_ACK's bit sets. Each takes arbitrary bytes, must not panic on
//! any input, and asserts what has to hold of what it makes of them. `fuzz/` runs them: under
//! cargo-fuzz (nightly, `scripts/fuzz.sh`), and for a bounded time on stable in `cargo test`.
//! They live here, beside what they test, so that they are compiled, and kept in step, with
//! it. Not part of the crate's API.

use std::borrow::Cow;

use quiver_record::{read_i32, MAGIC_AT, TOTAL_SIZE_AT};
use quiver_store::{LogChunk, ReplicaError};
use quiver_wire::body::{self, BatchAckMessageRequestBody};
use quiver_wire::message::find_property;

use crate::filter::Selector;
use crate::ha::autoswitch_codec::{
    encode_handshake_answer, encode_slave_handshake, encode_slave_report, encode_transfer_header,
    MasterMessage, MasterMessageReader, SlaveMessage, SlaveMessageReader,
};
use crate::ha::codec::{SlaveStream, Units, TRANSFER_HEADER_BYTES};
use crate::ha::master_session::{LogRead, MasterSession};
use crate::ha::slave_session::SlaveSession;

/// Bytes on an AutoSwitch HA connection, read by both sides' readers: whole and in pieces of
/// 7 bytes each must give the same messages and the same error, and every message read
/// encodes back to the bytes it came from.
pub fn ha_autoswitch_stream(data: &[u8]) {
    let mut whole = (SlaveMessageReader::default(), Vec::new());
    let whole_result = whole.0.feed(data, &mut whole.1);
    let mut pieces = (SlaveMessageReader::default(), Vec::new());
    let pieces_result = data
        .chunks(7)
        .try_for_each(|piece| pieces.0.feed(piece, &mut pieces.1));
    assert_eq!(whole_result, pieces_result);
    assert_eq!(whole.1, pieces.1);
    let encoded: Vec<u8> = whole
        .1
        .iter()
        .flat_map(|message| match message {
            SlaveMessage::Handshake(handshake) => encode_slave_handshake(handshake).to_vec(),
            SlaveMessage::Report { offset } => encode_slave_report(*offset).to_vec(),
        })
        .collect();
    assert_eq!(&data[..encoded.len()], &encoded[..]);

    let mut whole = (MasterMessageReader::default(), Vec::new());
    let whole_result = whole.0.feed(data, &mut whole.1);
    let mut pieces = (MasterMessageReader::default(), Vec::new());
    let pieces_result = data
        .chunks(7)
        .try_for_each(|piece| pieces.0.feed(piece, &mut pieces.1));
    assert_eq!(whole_result, pieces_result);
    assert_eq!(whole.1, pieces.1);
    let encoded: Vec<u8> = whole
        .1
        .iter()
        .flat_map(|message| match message {
            MasterMessage::HandshakeAnswer(answer) => encode_handshake_answer(answer),
            MasterMessage::Transfer(frame) => {
                let mut bytes = encode_transfer_header(&frame.header, frame.body.len()).to_vec();
                bytes.extend_from_slice(&frame.body);
                bytes
            }
        })
        .collect();
    assert_eq!(&data[..encoded.len()], &encoded[..]);
}

/// A SQL92 selector, then (after a 0 byte, if any) message properties in RocketMQ's
/// `name 0x01 value 0x02` form. A selector that parses is evaluated over those properties,
/// over none and over properties that are all "1", as a SQL92 pull judges each record.
pub fn sql92(data: &[u8]) {
    let (text, properties) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let properties = String::from_utf8_lossy(properties);
    let Ok(selector) = Selector::parse(&text) else {
        return;
    };
    selector.matches(&|name| find_property(&properties, name).map(Cow::Borrowed));
    selector.matches(&|_| None);
    selector.matches(&|_| Some(Cow::Borrowed("1")));
}

/// The largest unit the HA targets' slaves accept: small, so that the fuzzer reaches it.
const HA_UNIT_BYTES_MAX: u64 = 4096;

/// A master's stream as a slave reads it: the first 8 bytes are the slave's log end (0: an
/// empty log), the rest what the master sent. Read whole and read in small pieces, it must
/// give the same outcome, and the units it gives continue one another and are whole.
pub fn ha_slave_stream(data: &[u8]) {
    let Some((log_end, stream)) = data.split_first_chunk::<8>() else {
        return;
    };
    let log_end = Some(u64::from_be_bytes(*log_end)).filter(|end| *end > 0);
    let mut whole = (SlaveStream::new(log_end, HA_UNIT_BYTES_MAX), Vec::new());
    let whole_result = whole.0.feed(stream, &mut whole.1);
    let mut pieces = (SlaveStream::new(log_end, HA_UNIT_BYTES_MAX), Vec::new());
    let pieces_result = stream
        .chunks(7)
        .try_for_each(|piece| pieces.0.feed(piece, &mut pieces.1));
    assert_eq!(whole_result, pieces_result);
    let whole_end = check_units(log_end, &whole.1);
    let pieces_end = check_units(log_end, &pieces.1);
    if whole_result.is_ok() {
        assert_eq!(whole_end, pieces_end, "the same log however the reads fall");
    }
}

/// Asserts that `units` continue one another from `log_end` (for an empty log, from where the
/// first starts) and are each a run of whole units (size, then a magic code); returns where
/// they end.
fn check_units(log_end: Option<u64>, units: &[Units]) -> Option<u64> {
    let mut end = log_end.or_else(|| units.first().map(|run| run.position));
    for run in units {
        assert_eq!(Some(run.position), end, "units continue the log");
        let mut at = 0;
        while at < run.bytes.len() {
            let size = read_i32(&run.bytes[at..], TOTAL_SIZE_AT).expect("a unit's size");
            assert!(read_i32(&run.bytes[at..], MAGIC_AT).is_some());
            assert!(
                size > 8 && size as u64 <= HA_UNIT_BYTES_MAX,
                "unit of {size}"
            );
            at += size as usize;
        }
        assert_eq!(at, run.bytes.len(), "whole units only");
        end = Some(run.position + run.bytes.len() as u64);
    }
    end
}

/// The master's log in the HA session targets: made up, in small segments, so that reads
/// cross segment ends often.
const HA_SEGMENT_BYTES: u64 = 4096;
const HA_LOG_BYTES: u64 = 64 * 1024;

fn log_byte(position: u64) -> u8 {
    (position % 251) as u8
}

/// A master's session driven by a script: each byte is an event (the slave sends the next few
/// bytes of the script, the log grows, the socket takes some bytes, time passes), then a step.
/// A confirmation only grows and never passes the log bytes the slave was sent, and what the
/// slave is sent is the log, each frame continuing the last.
pub fn ha_master_session(data: &[u8]) {
    let mut session = MasterSession::new(HA_SEGMENT_BYTES, 0);
    let mut slave = Receiver::default();
    let (mut written, mut now_ms, mut confirmed) = (1_000u64, 0u64, 0u64);
    let mut start = None;
    let mut script = data;
    while let Some((&event, rest)) = script.split_first() {
        script = rest;
        let amount = usize::from(event >> 2);
        match event & 3 {
            0 => {
                let (sent, rest) = script.split_at(amount.min(script.len()));
                session.receive(sent, now_ms);
                script = rest;
            }
            1 => written = (written + amount as u64 * 97).min(HA_LOG_BYTES),
            2 => {
                let taken = (amount * 211).min(session.unsent().len());
                slave.feed(&session.unsent()[..taken]);
                session.wrote(taken);
            }
            _ => now_ms += amount as u64 * 400,
        }
        let Ok(ready) = session.step(now_ms, written) else {
            return;
        };
        start = start.or(session.sent_end());
        if let Some(position) = ready.confirmed {
            assert!(position > confirmed, "confirmations grow");
            let limit = slave
                .received_end
                .or(start)
                .expect("placed before confirming");
            assert!(position <= limit, "confirmed {position} past {limit}");
            confirmed = position;
        }
        if let Some(read) = ready.read {
            assert!(read.position < written, "reads only what is written");
            if session.log_read(read_log(read, written), now_ms).is_err() {
                return;
            }
        }
    }
}

/// `Store::read_log` over the made-up log: at most `bytes_max`, never across a segment end.
fn read_log(read: LogRead, written: u64) -> LogChunk {
    let segment_end = read.position - read.position % HA_SEGMENT_BYTES + HA_SEGMENT_BYTES;
    let end = written
        .min(segment_end)
        .min(read.position + read.bytes_max as u64);
    LogChunk {
        position: read.position,
        bytes: (read.position..end).map(log_byte).collect(),
        next_position: end,
    }
}

/// The slave's end of a master session: frames parsed as they arrive, checked to continue
/// one another and to carry the log.
#[derive(Default)]
struct Receiver {
    header: Vec<u8>,
    body_left: usize,
    received_end: Option<u64>,
}

impl Receiver {
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.body_left == 0 {
                let take = (TRANSFER_HEADER_BYTES - self.header.len()).min(bytes.len());
                self.header.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if self.header.len() == TRANSFER_HEADER_BYTES {
                    let position = u64::from_be_bytes(self.header[..8].try_into().unwrap());
                    let size = u32::from_be_bytes(self.header[8..].try_into().unwrap());
                    self.header.clear();
                    if let Some(end) = self.received_end {
                        assert_eq!(position, end, "each frame continues the last");
                    }
                    self.received_end = Some(position);
                    self.body_left = size as usize;
                }
                continue;
            }
            let take = self.body_left.min(bytes.len());
            let end = self.received_end.expect("a header came first");
            for (i, byte) in bytes[..take].iter().enumerate() {
                assert_eq!(*byte, log_byte(end + i as u64), "the log's bytes");
            }
            self.received_end = Some(end + take as u64);
            self.body_left -= take;
            bytes = &bytes[take..];
        }
    }
}

/// A slave's session driven by a script: the first 8 bytes are its log end, then each byte is
/// an event (the master sends the next few bytes of the script, the store fails the next
/// append, time passes), then a step whose units go to a store that appends only at its end.
/// The session never hands the store a unit that does not continue its log, and reports only
/// what the store holds.
pub fn ha_slave_session(data: &[u8]) {
    let Some((log_end, mut script)) = data.split_first_chunk::<8>() else {
        return;
    };
    let log_end = u64::from_be_bytes(*log_end) % (1 << 40);
    let mut session = SlaveSession::new(log_end, HA_UNIT_BYTES_MAX, 0);
    let mut store = (log_end > 0).then_some(log_end);
    let (mut now_ms, mut fail_next) = (0u64, false);
    while let Some((&event, rest)) = script.split_first() {
        script = rest;
        let amount = usize::from(event >> 2);
        match event & 3 {
            0 | 1 => {
                let (sent, rest) = script.split_at((amount * 3).min(script.len()));
                script = rest;
                if session.receive(sent, now_ms).is_err() {
                    return;
                }
            }
            2 => fail_next = true,
            _ => now_ms += amount as u64 * 400,
        }
        let Ok(ready) = session.step(now_ms) else {
            return;
        };
        if let Some(report) = ready.report {
            assert!(report <= store.unwrap_or(0), "reports what the store holds");
        }
        if ready.append.is_empty() {
            continue;
        }
        let outcome = append(&mut store, &ready.append, std::mem::take(&mut fail_next));
        if session.appended(outcome).is_err() {
            return;
        }
    }
}

/// A replica's store: it appends only at its log's end (an empty one where the first unit
/// starts), or fails when told to.
fn append(store: &mut Option<u64>, units: &[Units], fail: bool) -> Result<u64, ReplicaError> {
    if fail {
        return Err(ReplicaError::BadRecord {
            position: units[0].position,
            reason: "failed by the fuzz target".to_string(),
        });
    }
    for run in units {
        let end = store.get_or_insert(run.position);
        assert_eq!(*end, run.position, "units continue the slave's log");
        *end += run.bytes.len() as u64;
    }
    Ok(store.expect("units were appended"))
}

/// A BATCH_ACK_MESSAGE body: every entry's bit set turned into the offsets it acknowledges,
/// as the handler does.
pub fn batch_ack(data: &[u8]) {
    let Ok(batch) = body::from_json::<BatchAckMessageRequestBody>(data) else {
        return;
    };
    for entry in &batch.acks {
        if let Some(offsets) = crate::handler::batch_ack_offsets(entry) {
            offsets.for_each(drop);
        }
    }
}
