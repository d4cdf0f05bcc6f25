//! A slave's session with its master, as a state machine that does no I/O: the caller feeds it
//! the master's bytes (`receive`, cut into whole units by `codec::SlaveStream`) and the outcome
//! of appending the units it handed out (`appended`), and asks it what to do next (`step`,
//! given the time): units to append, a position to report, or an error that ends the session.
//! The async shell in `slave.rs` only moves bytes between the socket, the store and this.
//!
//! Reports, as RocketMQ's slave sends them: the log's end on connect, again after each append
//! that moved it, and at least every heartbeat interval.
//!
//! Time is any monotonic millisecond count the caller chooses, so tests set it.

use quiver_store::ReplicaError;

use super::codec::{SlaveStream, StreamError, Units};
use super::{HEARTBEAT_INTERVAL_MS, SLAVE_SILENCE_MS_MAX};

/// Why a session ends. The slave reconnects and resumes from its log's end, except after
/// `Stream(Diverged)`: a master whose log does not continue this one is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlaveSessionError {
    #[error("the master sent nothing for {SLAVE_SILENCE_MS_MAX} ms")]
    Silent,
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error("the store refused what the master sent: {0}")]
    Store(#[from] ReplicaError),
}

/// What a step asks of the caller.
#[derive(Debug, PartialEq, Eq)]
pub struct Ready {
    /// Send this position to the master as a report (`codec::encode_report`).
    pub report: Option<u64>,
    /// Append these whole units, in order, with `Store::append_replicated`, pass the outcome to
    /// `appended`, then step again.
    pub append: Vec<Units>,
    /// Step again by then even if nothing else happens: the next interval report or the
    /// silence limit.
    pub deadline_ms: u64,
}

pub struct SlaveSession {
    stream: SlaveStream,
    /// Units received and not yet handed out to append.
    received: Vec<Units>,
    /// Where the log ends, as the store last said.
    written: u64,
    /// The highest position reported.
    reported: u64,
    report_due: bool,
    /// When the master last sent anything, and when the next interval report is due.
    heard_ms: u64,
    next_report_ms: u64,
}

impl SlaveSession {
    /// A session on a new connection. `log_end`: where this slave's log ends (0 when it holds
    /// nothing: the master then says where it starts). `segment_bytes`: the largest unit, as a
    /// segment's end-of-segment padding can be nearly one segment.
    pub fn new(log_end: u64, segment_bytes: u64, now_ms: u64) -> SlaveSession {
        SlaveSession {
            stream: SlaveStream::new((log_end > 0).then_some(log_end), segment_bytes),
            received: Vec::new(),
            written: log_end,
            reported: log_end,
            // The first report says where to start.
            report_due: true,
            heard_ms: now_ms,
            next_report_ms: now_ms + HEARTBEAT_INTERVAL_MS,
        }
    }

    /// Bytes from the master. A frame that does not continue this log, or bytes that are not
    /// records, end the session.
    pub fn receive(&mut self, bytes: &[u8], now_ms: u64) -> Result<(), SlaveSessionError> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.heard_ms = now_ms;
        self.stream.feed(bytes, &mut self.received)?;
        Ok(())
    }

    /// What appending the units of the last step did: the log's end after them, or why the
    /// store refused them (the session ends; the next one resumes from the store's end).
    pub fn appended(
        &mut self,
        outcome: Result<u64, ReplicaError>,
    ) -> Result<(), SlaveSessionError> {
        self.written = outcome?;
        if self.written > self.reported {
            self.report_due = true;
        }
        Ok(())
    }

    /// What to do now.
    pub fn step(&mut self, now_ms: u64) -> Result<Ready, SlaveSessionError> {
        if now_ms.saturating_sub(self.heard_ms) >= SLAVE_SILENCE_MS_MAX {
            return Err(SlaveSessionError::Silent);
        }
        if now_ms >= self.next_report_ms {
            // On a fixed schedule from the connection's start, a missed one skipped: one
            // report says all an overdue few would.
            self.report_due = true;
            let missed = (now_ms - self.next_report_ms) / HEARTBEAT_INTERVAL_MS;
            self.next_report_ms += (missed + 1) * HEARTBEAT_INTERVAL_MS;
        }
        let report = std::mem::take(&mut self.report_due).then_some(self.written);
        if let Some(position) = report {
            self.reported = self.reported.max(position);
        }
        Ok(Ready {
            report,
            append: std::mem::take(&mut self.received),
            deadline_ms: self
                .next_report_ms
                .min(self.heard_ms + SLAVE_SILENCE_MS_MAX),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ha::codec::encode_transfer_header;
    use proptest::prelude::*;
    use quiver_record::MAGIC_V2;

    const SEGMENT_BYTES: u64 = 1 << 20;

    /// A unit of `size` bytes that parses as a record: size, magic, then filler.
    fn record(size: usize, fill: u8) -> Vec<u8> {
        let mut bytes = vec![fill; size];
        bytes[..4].copy_from_slice(&(size as i32).to_be_bytes());
        bytes[4..8].copy_from_slice(&MAGIC_V2.to_be_bytes());
        bytes
    }

    fn frame(position: u64, bytes: &[u8]) -> Vec<u8> {
        let mut frame = encode_transfer_header(position, bytes.len() as u32).to_vec();
        frame.extend_from_slice(bytes);
        frame
    }

    /// A store that holds the log from `start`, appending as `Store::append_replicated` does:
    /// only at its end.
    struct Store {
        start: Option<u64>,
        log: Vec<u8>,
    }

    impl Store {
        fn append(&mut self, units: Vec<Units>) -> Result<u64, ReplicaError> {
            let mut end = 0;
            for unit in units {
                let start = *self.start.get_or_insert(unit.position);
                let expected = start + self.log.len() as u64;
                if unit.position != expected {
                    return Err(ReplicaError::PositionMismatch {
                        expected,
                        got: unit.position,
                    });
                }
                self.log.extend_from_slice(&unit.bytes);
                end = start + self.log.len() as u64;
            }
            Ok(end)
        }
    }

    #[test]
    fn the_first_step_reports_the_log_end_once() {
        let mut session = SlaveSession::new(500, SEGMENT_BYTES, 0);
        assert_eq!(session.step(0).unwrap().report, Some(500));
        let ready = session.step(1).unwrap();
        assert_eq!(ready.report, None);
        assert_eq!(ready.deadline_ms, HEARTBEAT_INTERVAL_MS);
    }

    #[test]
    fn units_received_are_appended_then_the_new_end_is_reported() {
        let mut session = SlaveSession::new(1_000, SEGMENT_BYTES, 0);
        session.step(0).unwrap();
        let mut log = record(100, 1);
        log.extend(record(60, 2));
        // The second record cut: only the first is whole.
        session.receive(&frame(1_000, &log[..130]), 1).unwrap();
        let ready = session.step(1).unwrap();
        assert_eq!(ready.report, None);
        assert_eq!(
            ready.append,
            vec![Units {
                position: 1_000,
                bytes: log[..100].to_vec()
            }]
        );
        session.appended(Ok(1_100)).unwrap();
        assert_eq!(session.step(1).unwrap().report, Some(1_100));
        session.receive(&frame(1_130, &log[130..]), 2).unwrap();
        let ready = session.step(2).unwrap();
        assert_eq!(ready.append[0].position, 1_100);
        session.appended(Ok(1_160)).unwrap();
        assert_eq!(session.step(2).unwrap().report, Some(1_160));
    }

    #[test]
    fn a_fresh_slave_appends_from_where_the_master_starts_it() {
        let mut session = SlaveSession::new(0, SEGMENT_BYTES, 0);
        assert_eq!(session.step(0).unwrap().report, Some(0));
        session
            .receive(&frame(3 * SEGMENT_BYTES, &record(50, 1)), 0)
            .unwrap();
        assert_eq!(
            session.step(0).unwrap().append[0].position,
            3 * SEGMENT_BYTES
        );
    }

    #[test]
    fn the_log_end_is_reported_every_interval_even_with_nothing_new() {
        let mut session = SlaveSession::new(700, SEGMENT_BYTES, 0);
        session.step(0).unwrap();
        // The master's heartbeats keep the session alive meanwhile.
        session
            .receive(&frame(700, &[]), HEARTBEAT_INTERVAL_MS - 1)
            .unwrap();
        assert_eq!(
            session.step(HEARTBEAT_INTERVAL_MS - 1).unwrap().report,
            None
        );
        assert_eq!(
            session.step(HEARTBEAT_INTERVAL_MS).unwrap().report,
            Some(700)
        );
        // Late by more than an interval: one report, and the schedule keeps its phase.
        session.receive(&frame(700, &[]), 11_500).unwrap();
        let ready = session.step(11_500).unwrap();
        assert_eq!(ready.report, Some(700));
        assert_eq!(ready.deadline_ms, 3 * HEARTBEAT_INTERVAL_MS);
    }

    #[test]
    fn a_master_silent_past_the_limit_ends_the_session() {
        let mut session = SlaveSession::new(700, SEGMENT_BYTES, 0);
        session.receive(&frame(700, &[])[..5], 1_000).unwrap();
        assert!(
            session.step(SLAVE_SILENCE_MS_MAX).is_ok(),
            "part of a frame is a sign of life"
        );
        assert_eq!(
            session.step(1_000 + SLAVE_SILENCE_MS_MAX),
            Err(SlaveSessionError::Silent)
        );
    }

    #[test]
    fn a_master_stream_that_does_not_continue_this_log_is_divergence() {
        let mut session = SlaveSession::new(500, SEGMENT_BYTES, 0);
        assert_eq!(
            session.receive(&frame(400, &[]), 0),
            Err(SlaveSessionError::Stream(StreamError::Diverged {
                slave: 500,
                master: 400
            }))
        );
    }

    #[test]
    fn a_store_refusal_ends_the_session_without_a_report() {
        let mut session = SlaveSession::new(500, SEGMENT_BYTES, 0);
        session.step(0).unwrap();
        session.receive(&frame(500, &record(40, 1)), 0).unwrap();
        session.step(0).unwrap();
        let refused = ReplicaError::PositionMismatch {
            expected: 480,
            got: 500,
        };
        assert_eq!(
            session.appended(Err(refused.clone())),
            Err(SlaveSessionError::Store(refused))
        );
        assert_eq!(session.step(0).unwrap().report, None);
    }

    proptest! {
        /// However the master cuts its frames and the socket its reads, the store gets the log
        /// in order, every report is a position the store holds, reports only grow, and the
        /// last one is the log's end.
        #[test]
        fn any_cut_of_a_master_stream_builds_the_log_and_reports_its_end(
            sizes in prop::collection::vec(9usize..300, 1..40),
            batch in 1usize..700,
            reads in prop::collection::vec(1usize..97, 1..50),
            millis_per_read in 0u64..3_000,
        ) {
            let start = 2 * SEGMENT_BYTES;
            let log: Vec<u8> = sizes
                .iter()
                .enumerate()
                .flat_map(|(i, size)| record(*size, i as u8))
                .collect();
            let mut wire = Vec::new();
            for (i, chunk) in log.chunks(batch).enumerate() {
                wire.extend(frame(start + (i * batch) as u64, chunk));
            }
            let mut store = Store { start: None, log: Vec::new() };
            let mut session = SlaveSession::new(0, SEGMENT_BYTES, 0);
            let mut reports = Vec::new();
            let (mut at, mut now_ms) = (0, 0);
            let mut drain = |session: &mut SlaveSession, store: &mut Store, now_ms| loop {
                let ready = session.step(now_ms).unwrap();
                reports.extend(ready.report);
                if ready.append.is_empty() {
                    break;
                }
                session.appended(store.append(ready.append)).unwrap();
            };
            for read in reads.iter().cycle() {
                drain(&mut session, &mut store, now_ms);
                if at >= wire.len() {
                    break;
                }
                let end = (at + read).min(wire.len());
                now_ms += millis_per_read;
                session.receive(&wire[at..end], now_ms).unwrap();
                at = end;
            }
            prop_assert_eq!(store.start, Some(start));
            prop_assert_eq!(&store.log, &log);
            prop_assert_eq!(reports[0], 0);
            prop_assert!(reports.windows(2).all(|pair| pair[0] <= pair[1]));
            prop_assert_eq!(*reports.last().unwrap(), start + log.len() as u64);
        }
    }
}
