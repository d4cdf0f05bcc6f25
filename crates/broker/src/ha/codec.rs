//! Apache RocketMQ's default HA protocol, as bytes (no I/O): what a slave and its master say on
//! the HA port (`store/ha/DefaultHAConnection` and `DefaultHAClient` in apache/rocketmq).
//!
//! - Slave to master: its CommitLog max position as 8 big-endian bytes, on connect, after each
//!   append, and at least every heartbeat interval. The master reads only the newest whole
//!   report in what it has received.
//! - Master to slave: `[position i64][size i32]` then `size` CommitLog bytes from `position`,
//!   cut wherever the master's batch ends (often inside a record); `size` 0 is a heartbeat that
//!   carries the master's next position.
//!
//! The slave side (`SlaveStream`) re-cuts the stream into whole units — stored records, and an
//! end-of-segment blank marker with the padding to the segment end — because the store takes
//! only whole units; the tail of a cut record waits here for its next frame.

use quiver_record::{is_record_magic, read_i32, MAGIC_AT, MAGIC_BLANK, TOTAL_SIZE_AT};

pub const REPORT_BYTES: usize = 8;
pub const TRANSFER_HEADER_BYTES: usize = 12;
/// RocketMQ's haTransferBatchSize: CommitLog bytes per transfer frame at most.
pub const TRANSFER_BATCH_BYTES: usize = 32 * 1024;

const _: () = assert!(TRANSFER_HEADER_BYTES == 8 + 4);

pub fn encode_report(position: u64) -> [u8; REPORT_BYTES] {
    position.to_be_bytes()
}

pub fn encode_transfer_header(position: u64, size: u32) -> [u8; TRANSFER_HEADER_BYTES] {
    let mut header = [0u8; TRANSFER_HEADER_BYTES];
    header[..8].copy_from_slice(&position.to_be_bytes());
    header[8..].copy_from_slice(&size.to_be_bytes());
    header
}

/// The master's reader of a slave's reports: bytes in, the newest whole report out.
#[derive(Default)]
pub struct ReportReader {
    partial: Vec<u8>,
}

impl ReportReader {
    /// Feeds received bytes; returns the newest position reported in them, if a whole report
    /// completed. Reports are 8 bytes each and the stream is nothing else, so a report ends
    /// at every multiple of 8 bytes received.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Option<u64> {
        let mut newest = None;
        while !bytes.is_empty() {
            let take = (REPORT_BYTES - self.partial.len()).min(bytes.len());
            self.partial.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.partial.len() == REPORT_BYTES {
                let raw: [u8; REPORT_BYTES] = self.partial[..].try_into().expect("8 bytes");
                newest = Some(u64::from_be_bytes(raw));
                self.partial.clear();
            }
        }
        newest
    }
}

/// What went wrong in a master's stream; the slave closes the connection and starts over from
/// its own position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error(
        "the master sent position {master} but this slave's log ends at {slave}: its log does \
         not continue this one"
    )]
    Diverged { slave: u64, master: u64 },
    #[error("a transfer frame with a negative position or size ({position}, {size})")]
    BadHeader { position: i64, size: i32 },
    #[error(
        "no record or end-of-segment marker at position {position} (size {size}, magic {magic:#x})"
    )]
    BadUnit {
        position: u64,
        size: i32,
        magic: i32,
    },
    #[error("a unit of {size} bytes at position {position} is larger than {limit} bytes")]
    UnitTooLarge {
        position: u64,
        size: u64,
        limit: u64,
    },
}

/// Whole units ready for the store, starting at `position`.
#[derive(Debug, PartialEq, Eq)]
pub struct Units {
    pub position: u64,
    pub bytes: Vec<u8>,
}

/// The slave's reader of its master's stream.
pub struct SlaveStream {
    /// Where the next unit starts: the end of the slave's log. None while the log is empty:
    /// the master then picks where the slave starts (the base of its last segment).
    next: Option<u64>,
    /// Bytes of the frame being read: a header, then its body.
    header: Vec<u8>,
    body_left: usize,
    /// Received bytes that do not yet make a whole unit; they start at `next`.
    pending: Vec<u8>,
    unit_bytes_max: u64,
}

impl SlaveStream {
    /// `log_end`: where the slave's log ends, None if it holds nothing. `unit_bytes_max`: the
    /// largest unit accepted, the segment size (a blank marker's padding can be nearly that).
    pub fn new(log_end: Option<u64>, unit_bytes_max: u64) -> SlaveStream {
        SlaveStream {
            next: log_end,
            header: Vec::with_capacity(TRANSFER_HEADER_BYTES),
            body_left: 0,
            pending: Vec::new(),
            unit_bytes_max,
        }
    }

    /// Feeds bytes from the master; whole units found go to `out` (one `Units` per run of
    /// consecutive units in this call).
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<Units>) -> Result<(), StreamError> {
        while !bytes.is_empty() {
            if self.body_left == 0 {
                let take = (TRANSFER_HEADER_BYTES - self.header.len()).min(bytes.len());
                self.header.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if self.header.len() < TRANSFER_HEADER_BYTES {
                    break;
                }
                self.start_frame()?;
                continue;
            }
            let take = self.body_left.min(bytes.len());
            self.pending.extend_from_slice(&bytes[..take]);
            self.body_left -= take;
            bytes = &bytes[take..];
            self.cut_units(out)?;
        }
        Ok(())
    }

    fn start_frame(&mut self) -> Result<(), StreamError> {
        let position = i64::from_be_bytes(self.header[..8].try_into().expect("8 bytes"));
        let size = i32::from_be_bytes(self.header[8..].try_into().expect("4 bytes"));
        self.header.clear();
        if position < 0 || size < 0 {
            return Err(StreamError::BadHeader { position, size });
        }
        let position = position as u64;
        // Every frame, heartbeats included, must continue where the bytes so far end.
        let expected = match self.next {
            Some(next) => next + self.pending.len() as u64,
            None => {
                self.next = Some(position);
                position
            }
        };
        if position != expected {
            return Err(StreamError::Diverged {
                slave: expected,
                master: position,
            });
        }
        self.body_left = size as usize;
        Ok(())
    }

    /// Moves the whole units at the front of `pending` to `out`.
    fn cut_units(&mut self, out: &mut Vec<Units>) -> Result<(), StreamError> {
        let next = self.next.expect("a frame set the position");
        let mut whole = 0usize;
        loop {
            let rest = &self.pending[whole..];
            let (Some(size), Some(magic)) =
                (read_i32(rest, TOTAL_SIZE_AT), read_i32(rest, MAGIC_AT))
            else {
                break;
            };
            let position = next + whole as u64;
            if size <= 8 || !(is_record_magic(magic) || magic == MAGIC_BLANK) {
                return Err(StreamError::BadUnit {
                    position,
                    size,
                    magic,
                });
            }
            if size as u64 > self.unit_bytes_max {
                return Err(StreamError::UnitTooLarge {
                    position,
                    size: size as u64,
                    limit: self.unit_bytes_max,
                });
            }
            if rest.len() < size as usize {
                break;
            }
            whole += size as usize;
        }
        if whole > 0 {
            let rest = self.pending.split_off(whole);
            let bytes = std::mem::replace(&mut self.pending, rest);
            self.next = Some(next + whole as u64);
            out.push(Units {
                position: next,
                bytes,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use quiver_record::{blank_marker, MAGIC_V2};

    /// A unit of `size` bytes that parses as a record: size, magic, then filler.
    fn record(size: usize, fill: u8) -> Vec<u8> {
        let mut bytes = vec![fill; size];
        bytes[..4].copy_from_slice(&(size as i32).to_be_bytes());
        bytes[4..8].copy_from_slice(&MAGIC_V2.to_be_bytes());
        bytes
    }

    /// A master's stream of `log` from `start`, in frames of at most `batch` bytes, with a
    /// heartbeat after every `heartbeat_every` frames.
    fn frames(start: u64, log: &[u8], batch: usize, heartbeat_every: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, chunk) in log.chunks(batch).enumerate() {
            let position = start + (i * batch) as u64;
            out.extend_from_slice(&encode_transfer_header(position, chunk.len() as u32));
            out.extend_from_slice(chunk);
            if (i + 1) % heartbeat_every == 0 {
                let next = position + chunk.len() as u64;
                out.extend_from_slice(&encode_transfer_header(next, 0));
            }
        }
        out
    }

    #[test]
    fn reports_are_read_whole_and_only_the_newest_counts() {
        let mut reader = ReportReader::default();
        let mut stream = encode_report(7).to_vec();
        stream.extend_from_slice(&encode_report(1_000_000));
        assert_eq!(reader.feed(&stream[..5]), None);
        assert_eq!(reader.feed(&stream[5..12]), Some(7));
        assert_eq!(reader.feed(&stream[12..]), Some(1_000_000));
    }

    #[test]
    fn a_fresh_slave_starts_where_the_master_says() {
        let mut stream = SlaveStream::new(None, 1 << 20);
        let mut out = Vec::new();
        let log = record(100, 1);
        stream.feed(&frames(4096, &log, 1000, 1), &mut out).unwrap();
        assert_eq!(
            out,
            vec![Units {
                position: 4096,
                bytes: log
            }]
        );
    }

    #[test]
    fn a_frame_that_does_not_continue_the_slave_log_is_divergence() {
        let mut stream = SlaveStream::new(Some(500), 1 << 20);
        let mut out = Vec::new();
        let error = stream
            .feed(&encode_transfer_header(400, 0), &mut out)
            .unwrap_err();
        assert_eq!(
            error,
            StreamError::Diverged {
                slave: 500,
                master: 400
            }
        );
    }

    #[test]
    fn a_blank_marker_waits_for_its_padding_then_the_next_segment_follows() {
        let mut log = record(100, 1);
        log.extend_from_slice(&blank_marker(156));
        log.extend(std::iter::repeat_n(0, 148));
        log.extend_from_slice(&record(64, 2));
        let mut stream = SlaveStream::new(Some(0), 256);
        let mut out = Vec::new();
        stream
            .feed(&frames(0, &log[..150], 150, 1), &mut out)
            .unwrap();
        assert_eq!(
            out.len(),
            1,
            "the record, not the marker without its padding"
        );
        assert_eq!(out[0].bytes.len(), 100);
        stream
            .feed(&frames(150, &log[150..], 50, 2), &mut out)
            .unwrap();
        let total: Vec<u8> = out.iter().flat_map(|u| u.bytes.clone()).collect();
        assert_eq!(total, log);
    }

    #[test]
    fn garbage_where_a_unit_should_start_is_an_error() {
        let mut stream = SlaveStream::new(Some(0), 1 << 20);
        let mut out = Vec::new();
        let error = stream.feed(&frames(0, &[7u8; 40], 40, 1), &mut out);
        assert!(matches!(
            error,
            Err(StreamError::BadUnit { position: 0, .. })
        ));
    }

    proptest! {
        /// However the master cuts its frames and however the socket cuts its reads, the slave
        /// gets exactly the log, in whole units, in order.
        #[test]
        fn any_cut_of_the_stream_yields_the_log_in_whole_units(
            sizes in prop::collection::vec(9usize..300, 1..40),
            batch in 1usize..700,
            heartbeat_every in 1usize..5,
            reads in prop::collection::vec(1usize..97, 1..50),
        ) {
            let log: Vec<u8> = sizes
                .iter()
                .enumerate()
                .flat_map(|(i, size)| record(*size, i as u8))
                .collect();
            let wire = frames(1 << 16, &log, batch, heartbeat_every);
            let mut stream = SlaveStream::new(None, 1 << 20);
            let mut out = Vec::new();
            let mut at = 0;
            for read in reads.iter().cycle() {
                if at >= wire.len() {
                    break;
                }
                let end = (at + read).min(wire.len());
                stream.feed(&wire[at..end], &mut out).unwrap();
                at = end;
            }
            let mut position = 1 << 16;
            let mut received = Vec::new();
            for units in &out {
                prop_assert_eq!(units.position, position);
                position += units.bytes.len() as u64;
                received.extend_from_slice(&units.bytes);
            }
            prop_assert_eq!(received, log);
        }

        /// A reconnect resumes from the slave's position: a stream restarted at any unit
        /// boundary continues the log; one restarted elsewhere is refused.
        #[test]
        fn a_resumed_stream_must_start_at_the_slave_log_end(
            sizes in prop::collection::vec(9usize..200, 2..20),
            cut in 0usize..20,
            skew in 1u64..50,
        ) {
            let units: Vec<Vec<u8>> = sizes.iter().map(|s| record(*s, 3)).collect();
            let cut = cut % units.len();
            let end: u64 = units[..cut].iter().map(|u| u.len() as u64).sum();
            let rest: Vec<u8> = units[cut..].concat();
            let mut stream = SlaveStream::new(Some(end), 1 << 20);
            let mut out = Vec::new();
            stream.feed(&frames(end, &rest, 64, 3), &mut out).unwrap();
            prop_assert_eq!(out.iter().map(|u| u.bytes.len()).sum::<usize>(), rest.len());
            let mut stale = SlaveStream::new(Some(end), 1 << 20);
            let refused = stale.feed(&frames(end + skew, &rest, 64, 3), &mut out);
            let diverged = matches!(refused, Err(StreamError::Diverged { .. }));
            prop_assert!(diverged);
        }
    }
}
