//! A master's session with one slave, as a state machine that does no I/O: the caller feeds it
//! what the slave sent (`receive`), the chunks of the log it asked for (`log_read`) and what of
//! its frame the socket took (`wrote`), and asks it what to do next (`step`, given the time and
//! the log's written position). The async shell in `master.rs` only moves bytes between the
//! socket, the store and this session, and hands `Ready::confirmed` to `Replication`.
//!
//! Time is any monotonic millisecond count the caller chooses (the shell counts from the
//! session's start), so tests set it.

use quiver_store::LogChunk;

use super::codec::{encode_transfer_header, ReportReader, TRANSFER_BATCH_BYTES};
use super::{HEARTBEAT_INTERVAL_MS, SLAVE_SILENCE_MS_MAX};

/// Why a session ends; the shell closes the connection and the slave starts over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MasterSessionError {
    #[error("the slave sent no report for {SLAVE_SILENCE_MS_MAX} ms")]
    Silent,
    #[error("the slave says it holds up to {slave}, past {master}, what this master wrote or holds: it claims what it cannot have")]
    SlaveAhead { slave: u64, master: u64 },
    #[error("the CommitLog read at {position} returned nothing below the written position")]
    ReadNothing { position: u64 },
}

/// A read of the log the session needs before it can send more: `Store::read_log(position,
/// bytes_max)`, its chunk then passed to `MasterSession::log_read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRead {
    pub position: u64,
    pub bytes_max: usize,
}

/// What a step asks of the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// Read this from the log and pass the chunk to `log_read`, then step again.
    pub read: Option<LogRead>,
    /// The slave holds the log below this position, counted only up to what this session has
    /// written to it: the caller hands it to `Replication` (it grows; never repeated).
    pub confirmed: Option<u64>,
    /// Everything up to the written position has been sent: nothing to do until the log grows
    /// (or `deadline_ms`).
    pub waiting_for_log: bool,
    /// Step again by then even if nothing else happens: a heartbeat or the silence limit.
    pub deadline_ms: u64,
}

pub struct MasterSession {
    segment_bytes: u64,
    reports: ReportReader,
    /// The slave's newest report: its log ends there.
    reported: Option<u64>,
    /// Where the next frame starts. None until the slave's first report says where to begin.
    next: Option<u64>,
    /// The frame being written: the caller writes `outgoing[outgoing_written..]`. It holds one
    /// frame at most (a read is asked for only once the last frame is written), so what is
    /// unwritten is a tail of it, and the last `outgoing_data_bytes` are log bytes ending at
    /// `next`.
    outgoing: Vec<u8>,
    outgoing_written: usize,
    outgoing_data_bytes: usize,
    /// A read asked for and not yet answered by `log_read`.
    reading: Option<LogRead>,
    /// The highest confirmation handed out.
    confirmed: u64,
    /// When the slave last sent anything, and when this session last queued a frame.
    heard_ms: u64,
    sent_ms: u64,
}

impl MasterSession {
    /// A session with a slave that just connected. `segment_bytes`: the CommitLog's segment
    /// size, where a slave with an empty log starts.
    pub fn new(segment_bytes: u64, now_ms: u64) -> MasterSession {
        assert!(segment_bytes > 0, "a CommitLog segment holds bytes");
        MasterSession {
            segment_bytes,
            reports: ReportReader::default(),
            reported: None,
            next: None,
            outgoing: Vec::with_capacity(TRANSFER_BATCH_BYTES + 12),
            outgoing_written: 0,
            outgoing_data_bytes: 0,
            reading: None,
            confirmed: 0,
            heard_ms: now_ms,
            sent_ms: now_ms,
        }
    }

    /// Bytes the slave sent: its reports. Any bytes, even part of a report, show it is alive.
    pub fn receive(&mut self, bytes: &[u8], now_ms: u64) {
        if bytes.is_empty() {
            return;
        }
        self.heard_ms = now_ms;
        if let Some(position) = self.reports.feed(bytes) {
            self.reported = Some(position);
        }
    }

    /// The bytes to write to the slave next; after writing some, call `wrote`.
    pub fn unsent(&self) -> &[u8] {
        &self.outgoing[self.outgoing_written..]
    }

    /// The socket took `bytes` of `unsent()`.
    pub fn wrote(&mut self, bytes: usize) {
        assert!(
            bytes <= self.unsent().len(),
            "wrote {bytes} bytes of {} unsent",
            self.unsent().len()
        );
        self.outgoing_written += bytes;
        if self.outgoing_written == self.outgoing.len() {
            self.outgoing.clear();
            self.outgoing_written = 0;
            self.outgoing_data_bytes = 0;
        }
    }

    /// Where the log bytes the slave can have received from this session end: the stream's
    /// position less the log bytes of the frame still unwritten. The session starts where the
    /// slave's first report put it, which the slave said it holds. None before that report.
    pub fn sent_end(&self) -> Option<u64> {
        let next = self.next?;
        let unsent_data = self.unsent().len().min(self.outgoing_data_bytes);
        Some(next - unsent_data as u64)
    }

    /// The chunk read for the `Ready::read` asked for; `now_ms` for the heartbeat's idle time.
    pub fn log_read(&mut self, chunk: LogChunk, now_ms: u64) -> Result<(), MasterSessionError> {
        let asked = self.reading.take().expect("a chunk the session asked for");
        assert_eq!(
            chunk.position, asked.position,
            "the chunk at the position asked"
        );
        if chunk.bytes.is_empty() {
            if chunk.next_position > chunk.position {
                // Past a segment's end: the next segment starts there.
                self.next = Some(chunk.next_position);
                return Ok(());
            }
            // A read is asked for only below the written position, where the store always has
            // bytes; asking again would spin.
            return Err(MasterSessionError::ReadNothing {
                position: chunk.position,
            });
        }
        let size = u32::try_from(chunk.bytes.len()).expect("a chunk of at most a batch");
        self.outgoing
            .extend_from_slice(&encode_transfer_header(chunk.position, size));
        self.outgoing.extend_from_slice(&chunk.bytes);
        self.outgoing_data_bytes = chunk.bytes.len();
        self.next = Some(chunk.position + chunk.bytes.len() as u64);
        self.sent_ms = now_ms;
        Ok(())
    }

    /// What to do now that the log is written up to `written_position`.
    pub fn step(
        &mut self,
        now_ms: u64,
        written_position: u64,
    ) -> Result<Ready, MasterSessionError> {
        if now_ms.saturating_sub(self.heard_ms) >= SLAVE_SILENCE_MS_MAX {
            return Err(MasterSessionError::Silent);
        }
        let silence_deadline_ms = self.heard_ms + SLAVE_SILENCE_MS_MAX;
        let Some(next) = self.start(now_ms, written_position)? else {
            // Nothing is sent before the slave says where its log ends.
            return Ok(Ready {
                read: None,
                confirmed: None,
                waiting_for_log: false,
                deadline_ms: silence_deadline_ms,
            });
        };
        let idle = self.unsent().is_empty() && self.reading.is_none();
        if idle && next < written_position {
            // One chunk at a time, and only once the last frame is written: the bytes this
            // session holds stay within one frame (12 + 32 KiB).
            self.reading = Some(LogRead {
                position: next,
                bytes_max: TRANSFER_BATCH_BYTES,
            });
        } else if idle && now_ms.saturating_sub(self.sent_ms) >= HEARTBEAT_INTERVAL_MS {
            // A heartbeat carries the master's position, so the slave checks it still
            // continues its log.
            self.outgoing
                .extend_from_slice(&encode_transfer_header(next, 0));
            self.sent_ms = now_ms;
        }
        let waiting_for_log = self.unsent().is_empty() && self.reading.is_none();
        let deadline_ms = if waiting_for_log {
            silence_deadline_ms.min(self.sent_ms + HEARTBEAT_INTERVAL_MS)
        } else {
            silence_deadline_ms
        };
        Ok(Ready {
            read: self.reading,
            confirmed: self.confirm()?,
            waiting_for_log,
            deadline_ms,
        })
    }

    /// The stream's position, set from the slave's first report: there for a slave that has a
    /// log, the base of the master's last segment for one with nothing (it need not copy what
    /// retention may delete soon, as RocketMQ does). A slave whose log ends past this master's
    /// holds what this master never wrote: refused before anything of it is confirmed.
    fn start(
        &mut self,
        now_ms: u64,
        written_position: u64,
    ) -> Result<Option<u64>, MasterSessionError> {
        if self.next.is_some() {
            return Ok(self.next);
        }
        let Some(reported) = self.reported else {
            return Ok(None);
        };
        let start = if reported == 0 {
            written_position - written_position % self.segment_bytes
        } else {
            reported
        };
        if start > written_position {
            return Err(MasterSessionError::SlaveAhead {
                slave: start,
                master: written_position,
            });
        }
        self.next = Some(start);
        // The heartbeat's idle time counts from the stream's start.
        self.sent_ms = now_ms;
        Ok(self.next)
    }

    /// A new confirmation, if the slave's report covers more than the last one. A slave can
    /// report only what it received, and it received at most what this session has written: a
    /// report past that is a peer that says what it does not have, and ends the session (its
    /// confirmations go with it) rather than be counted up to whatever is written next.
    fn confirm(&mut self) -> Result<Option<u64>, MasterSessionError> {
        let (Some(reported), Some(sent)) = (self.reported, self.sent_end()) else {
            return Ok(None);
        };
        if reported > sent {
            return Err(MasterSessionError::SlaveAhead {
                slave: reported,
                master: sent,
            });
        }
        if reported <= self.confirmed {
            return Ok(None);
        }
        self.confirmed = reported;
        Ok(Some(reported))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ha::codec::{encode_report, TRANSFER_HEADER_BYTES};
    use proptest::prelude::*;

    const SEGMENT_BYTES: u64 = 1 << 20;

    /// A log of `len` bytes from 0 that a test reads chunks from, as `Store::read_log` does:
    /// at most `bytes_max`, never across a segment's end.
    fn read(log: &[u8], read: LogRead, segment_bytes: u64) -> LogChunk {
        let position = read.position;
        let segment_end = position - position % segment_bytes + segment_bytes;
        let end = (log.len() as u64)
            .min(segment_end)
            .min(position + read.bytes_max as u64);
        LogChunk {
            position,
            bytes: log[position as usize..end as usize].to_vec(),
            next_position: end,
        }
    }

    fn log(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    fn write_all(session: &mut MasterSession) -> Vec<u8> {
        let bytes = session.unsent().to_vec();
        session.wrote(bytes.len());
        bytes
    }

    /// Steps, answers each read from `log` and writes each frame, until the session waits.
    fn run(session: &mut MasterSession, log: &[u8], now_ms: u64) -> (Vec<u8>, Vec<u64>) {
        let (mut wire, mut confirmed) = (Vec::new(), Vec::new());
        loop {
            let ready = session.step(now_ms, log.len() as u64).unwrap();
            confirmed.extend(ready.confirmed);
            if let Some(asked) = ready.read {
                session
                    .log_read(read(log, asked, SEGMENT_BYTES), now_ms)
                    .unwrap();
                continue;
            }
            if session.unsent().is_empty() {
                return (wire, confirmed);
            }
            wire.extend(write_all(session));
        }
    }

    fn header(wire: &[u8]) -> (u64, u32) {
        let position = u64::from_be_bytes(wire[..8].try_into().unwrap());
        let size = u32::from_be_bytes(wire[8..12].try_into().unwrap());
        (position, size)
    }

    #[test]
    fn nothing_is_sent_before_the_slave_first_report() {
        let mut session = MasterSession::new(SEGMENT_BYTES, 0);
        let ready = session.step(HEARTBEAT_INTERVAL_MS * 2, 1000).unwrap();
        assert_eq!(ready.read, None);
        assert!(session.unsent().is_empty());
        assert_eq!(ready.deadline_ms, SLAVE_SILENCE_MS_MAX);
    }

    #[test]
    fn a_fresh_slave_starts_at_the_base_of_the_master_last_segment() {
        // 2.5 segments written: the last segment starts at 2 * SEGMENT_BYTES.
        let log = log((SEGMENT_BYTES * 5 / 2) as usize);
        let mut session = MasterSession::new(SEGMENT_BYTES, 0);
        session.receive(&encode_report(0), 0);
        let ready = session.step(0, log.len() as u64).unwrap();
        assert_eq!(
            ready.read,
            Some(LogRead {
                position: 2 * SEGMENT_BYTES,
                bytes_max: TRANSFER_BATCH_BYTES,
            })
        );
        assert_eq!(ready.confirmed, None, "a report of 0 confirms nothing");
    }

    #[test]
    fn the_log_goes_out_from_the_slave_end_in_frames_of_one_batch_at_most() {
        let log = log(3 * TRANSFER_BATCH_BYTES + 100);
        let mut session = MasterSession::new(SEGMENT_BYTES, 0);
        session.receive(&encode_report(100), 0);
        let (wire, confirmed) = run(&mut session, &log, 0);
        assert_eq!(confirmed, vec![100], "the slave holds what it reported");
        let mut at = 0;
        let mut position = 100;
        while at < wire.len() {
            let (frame_position, size) = header(&wire[at..]);
            assert_eq!(frame_position, position);
            assert!(size as usize <= TRANSFER_BATCH_BYTES);
            let body =
                &wire[at + TRANSFER_HEADER_BYTES..at + TRANSFER_HEADER_BYTES + size as usize];
            assert_eq!(
                body,
                &log[position as usize..position as usize + size as usize]
            );
            position += size as u64;
            at += TRANSFER_HEADER_BYTES + size as usize;
        }
        assert_eq!(position, log.len() as u64);
    }

    #[test]
    fn an_idle_master_sends_a_heartbeat_at_its_position_every_interval() {
        let log = log(500);
        let mut session = MasterSession::new(SEGMENT_BYTES, 0);
        session.receive(&encode_report(500), 0);
        let ready = session.step(0, 500).unwrap();
        assert!(ready.waiting_for_log);
        assert_eq!(ready.deadline_ms, HEARTBEAT_INTERVAL_MS);
        // The slave reports on its own interval, so it is not silent meanwhile.
        session.receive(&encode_report(500), HEARTBEAT_INTERVAL_MS - 1);
        let (wire, _) = run(&mut session, &log, HEARTBEAT_INTERVAL_MS - 1);
        assert!(wire.is_empty(), "not before the interval");
        let (wire, _) = run(&mut session, &log, HEARTBEAT_INTERVAL_MS);
        assert_eq!(wire, encode_transfer_header(500, 0));
        let ready = session.step(HEARTBEAT_INTERVAL_MS, 500).unwrap();
        assert_eq!(ready.deadline_ms, 2 * HEARTBEAT_INTERVAL_MS);
    }

    #[test]
    fn a_slave_silent_past_the_limit_ends_the_session() {
        let mut session = MasterSession::new(SEGMENT_BYTES, 0);
        session.receive(&encode_report(0)[..3], 1_000);
        assert!(
            session.step(SLAVE_SILENCE_MS_MAX, 0).is_ok(),
            "part of a report is a sign of life"
        );
        assert_eq!(
            session.step(1_000 + SLAVE_SILENCE_MS_MAX, 0),
            Err(MasterSessionError::Silent)
        );
    }

    #[test]
    fn a_slave_ahead_of_the_master_is_refused_with_nothing_confirmed() {
        let mut session = MasterSession::new(SEGMENT_BYTES, 0);
        session.receive(&encode_report(5_000), 0);
        assert_eq!(
            session.step(0, 4_000),
            Err(MasterSessionError::SlaveAhead {
                slave: 5_000,
                master: 4_000
            })
        );
        assert_eq!(session.sent_end(), None);
        assert_eq!(session.confirm(), Ok(None));
    }

    #[test]
    fn a_confirmation_counts_what_was_written_to_the_slave_and_a_claim_past_it_ends_the_session() {
        let log = log(1_000);
        let mut session = MasterSession::new(SEGMENT_BYTES, 0);
        session.receive(&encode_report(200), 0);
        let ready = session.step(0, 1_000).unwrap();
        assert_eq!(ready.confirmed, Some(200));
        session
            .log_read(read(&log, ready.read.unwrap(), SEGMENT_BYTES), 0)
            .unwrap();
        // The header and 300 of the 800 log bytes written: a report of what was written counts.
        session.wrote(TRANSFER_HEADER_BYTES + 300);
        session.receive(&encode_report(500), 1);
        assert_eq!(session.step(1, 1_000).unwrap().confirmed, Some(500));
        assert_eq!(session.step(2, 1_000).unwrap().confirmed, None, "said once");
        // A slave claiming the whole log, more than it was sent, ends the session.
        session.receive(&encode_report(1_000), 2);
        assert_eq!(
            session.step(2, 1_000),
            Err(MasterSessionError::SlaveAhead {
                slave: 1_000,
                master: 500
            })
        );
    }

    #[test]
    fn a_read_at_a_segment_end_moves_to_the_next_segment() {
        let mut session = MasterSession::new(100, 0);
        session.receive(&encode_report(100), 0);
        let ready = session.step(0, 250).unwrap();
        let asked = ready.read.unwrap();
        let empty = LogChunk {
            position: asked.position,
            bytes: Vec::new(),
            next_position: 200,
        };
        session.log_read(empty, 0).unwrap();
        assert_eq!(session.step(0, 250).unwrap().read.unwrap().position, 200);
    }

    #[test]
    fn a_read_that_returns_nothing_below_the_written_position_ends_the_session() {
        let mut session = MasterSession::new(SEGMENT_BYTES, 0);
        session.receive(&encode_report(100), 0);
        session.step(0, 250).unwrap();
        let nothing = LogChunk {
            position: 100,
            bytes: Vec::new(),
            next_position: 100,
        };
        assert_eq!(
            session.log_read(nothing, 0),
            Err(MasterSessionError::ReadNothing { position: 100 })
        );
    }

    /// One thing that happens to a session.
    #[derive(Debug, Clone)]
    enum Event {
        /// The log grows by this many bytes.
        Grow(u64),
        /// The slave reports a position: `u64` picks one near the log's end, some past it.
        Report(u64),
        /// The socket takes this many of the unsent bytes.
        Write(usize),
        /// Time passes.
        Wait(u64),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (1u64..5_000).prop_map(Event::Grow),
            any::<u64>().prop_map(Event::Report),
            (1usize..40_000).prop_map(Event::Write),
            (0u64..3_000).prop_map(Event::Wait),
        ]
    }

    /// The slave's view of the wire: frames parsed as they arrive, and where the log bytes it
    /// received end.
    #[derive(Default)]
    struct Receiver {
        header: Vec<u8>,
        body_left: usize,
        received_end: Option<u64>,
        received: Vec<(u64, u8)>,
    }

    impl Receiver {
        fn feed(&mut self, mut bytes: &[u8]) {
            while !bytes.is_empty() {
                if self.body_left == 0 {
                    let take = (TRANSFER_HEADER_BYTES - self.header.len()).min(bytes.len());
                    self.header.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.header.len() == TRANSFER_HEADER_BYTES {
                        let (position, size) = header(&self.header);
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
                let end = self.received_end.unwrap();
                for (i, byte) in bytes[..take].iter().enumerate() {
                    self.received.push((end + i as u64, *byte));
                }
                self.received_end = Some(end + take as u64);
                self.body_left -= take;
                bytes = &bytes[take..];
            }
        }
    }

    proptest! {
        /// Whatever the slave reports and however the log grows and the socket writes, no
        /// confirmation passes the end of the log bytes written to the slave (or, before any,
        /// the position the stream started from), a report past it ends the session,
        /// confirmations only grow, and the bytes the slave gets are the log's, in order.
        #[test]
        fn a_confirmation_never_passes_what_the_session_wrote(
            first_report in 0u64..3_000,
            events in prop::collection::vec(event(), 1..200),
        ) {
            let segment_bytes = 4_096;
            let full = log(200_000);
            let mut written_position = 2_000u64;
            let mut now_ms = 0;
            let mut session = MasterSession::new(segment_bytes, now_ms);
            let mut slave = Receiver::default();
            let mut start = None;
            let mut confirmed = 0;
            session.receive(&encode_report(first_report), now_ms);
            // Stepped at once, so the first report is the one that places the stream.
            let mut events = events;
            events.insert(0, Event::Wait(0));
            for event in events {
                match event {
                    Event::Grow(bytes) => {
                        written_position = (written_position + bytes).min(full.len() as u64);
                    }
                    Event::Report(pick) => {
                        let position = match pick % 4 {
                            0 => pick,
                            _ => written_position.saturating_sub(pick % 3_000) + pick % 50,
                        };
                        session.receive(&encode_report(position), now_ms);
                    }
                    Event::Write(bytes) => {
                        let bytes = bytes.min(session.unsent().len());
                        slave.feed(&session.unsent()[..bytes]);
                        session.wrote(bytes);
                    }
                    Event::Wait(ms) => {
                        now_ms += ms;
                        // A slave reports at least every interval: what it received.
                        let holds = slave.received_end.unwrap_or(first_report);
                        session.receive(&encode_report(holds), now_ms);
                    }
                }
                let ready = match session.step(now_ms, written_position) {
                    Ok(ready) => ready,
                    Err(MasterSessionError::SlaveAhead { slave, master }) => {
                        // At the start, a slave whose log passes the master's; later, a report
                        // past what was written to it. Neither counted anything past it.
                        if start.is_none() {
                            prop_assert!(first_report > written_position);
                            prop_assert_eq!(confirmed, 0);
                        } else {
                            prop_assert!(slave > master);
                            prop_assert!(confirmed <= master);
                        }
                        return Ok(());
                    }
                    Err(MasterSessionError::Silent) => return Ok(()),
                    Err(error) => panic!("{error}"),
                };
                if start.is_none() {
                    start = session.next;
                }
                if let Some(position) = ready.confirmed {
                    prop_assert!(position > confirmed);
                    let limit = slave.received_end.or(start).unwrap();
                    prop_assert!(position <= limit, "confirmed {} past {}", position, limit);
                    confirmed = position;
                }
                if let Some(asked) = ready.read {
                    prop_assert!(asked.position < written_position);
                    let log = &full[..written_position as usize];
                    session.log_read(read(log, asked, segment_bytes), now_ms).unwrap();
                }
            }
            for (position, byte) in slave.received {
                prop_assert_eq!(full[position as usize], byte);
            }
        }
    }
}
