//! The master side of controller mode's HA port (RocketMQ 5's AutoSwitch protocol, bytes in
//! `autoswitch_codec`). The port is bound from start on every controller-mode broker, since
//! the controller may make any of them master; a connection is served only while this broker
//! is master, and every connection ends when the role changes. A slave says who it is, gets
//! the master's epochs (to cut what its log holds that this one does not), reports its log
//! end, and is streamed the log from there in frames that never cross an epoch's start, each
//! with its epoch and that epoch's start. Reports confirm sends (`SlaveConnected`) and mark
//! the slave caught up when it holds everything written, which the SyncStateSet check reads.

use std::sync::Arc;
use std::time::Duration;

use quiver_store::EpochEntries;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::autoswitch_codec::{
    encode_handshake_answer, encode_transfer_header, AutoSwitchError, HandshakeAnswer,
    SlaveMessage, SlaveMessageReader, TransferHeader,
};
use super::{SlaveConnected, HEARTBEAT_INTERVAL_MS, SLAVE_SILENCE_MS_MAX};
use crate::clock::now_ms;
use crate::state::{Broker, Replicating};

/// Slave connections at once (see `master.rs`).
const SLAVE_CONNECTIONS_MAX: usize = 16;
/// RocketMQ's haTransferBatchSize: the most log bytes one frame carries.
const TRANSFER_BATCH_BYTES: usize = 32 * 1024;
const READ_BUFFER_BYTES: usize = 1024;

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Protocol(#[from] AutoSwitchError),
    #[error("the slave reported {reported} before its handshake")]
    ReportBeforeHandshake { reported: u64 },
    #[error("the slave's log ends at {reported}, past this master's end {written}")]
    SlaveAhead { reported: u64, written: u64 },
    #[error("position {position} is in no epoch of this master")]
    NoEpoch { position: u64 },
    #[error("cannot read the CommitLog at {position}: {message}")]
    Read { position: u64, message: String },
    #[error("the slave sent nothing for {SLAVE_SILENCE_MS_MAX} ms")]
    Silent,
}

/// Serves AutoSwitch slaves on `listener` until `stop`; connections that arrive while this
/// broker is not master are closed at once.
pub async fn serve(listener: TcpListener, broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let permits = Arc::new(Semaphore::new(SLAVE_CONNECTIONS_MAX));
    let mut sessions = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => break,
            Some(_) = sessions.join_next(), if !sessions.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(error) => {
                tracing::warn!(%error, "HA accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if !broker.replicating().replication.is_master() {
            tracing::debug!(%peer, "HA connection closed: this broker is not master");
            continue;
        }
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "slave connection refused: {SLAVE_CONNECTIONS_MAX} connected");
            continue;
        };
        let broker = broker.clone();
        let stop = stop.clone();
        sessions.spawn(async move {
            tracing::info!(%peer, "AutoSwitch slave connected");
            match session(stream, &broker, stop).await {
                Ok(()) => tracing::info!(%peer, "AutoSwitch slave connection ended"),
                Err(error) => tracing::warn!(%peer, %error, "AutoSwitch slave connection closed"),
            }
            // The SyncStateSet check looks at once: a slave gone may leave the set.
            broker.replicating().replication.slaves_changed.notify_one();
            drop(permit);
        });
    }
    sessions.shutdown().await;
}

/// Where the stream goes next and what it has written.
struct Stream {
    /// The next position to send; None before the slave's first report.
    next: Option<u64>,
    epochs: EpochEntries,
}

impl Stream {
    /// The next frame's read: its position, its epoch and how many bytes it may carry (to
    /// its epoch's end), or None with nothing to send.
    fn plan(&self, written: u64) -> Result<Option<(u64, TransferHeader, usize)>, SessionError> {
        let Some(next) = self.next.filter(|next| *next < written) else {
            return Ok(None);
        };
        let (entry, end) = self
            .epochs
            .containing(next, written)
            .ok_or(SessionError::NoEpoch { position: next })?;
        let bytes = (end.saturating_sub(next) as usize).min(TRANSFER_BATCH_BYTES);
        let header = TransferHeader {
            offset: next as i64,
            epoch: entry.epoch,
            epoch_start_offset: entry.start_offset as i64,
            confirm_offset: 0,
        };
        Ok(Some((next, header, bytes.max(1))))
    }
}

/// What the session has queued for the slave: whole frames, handed to the socket as it takes
/// them while the slave's reports go on being read.
#[derive(Default)]
struct Outgoing {
    bytes: Vec<u8>,
    written: usize,
}

impl Outgoing {
    fn is_empty(&self) -> bool {
        self.written == self.bytes.len()
    }

    fn unwritten(&self) -> &[u8] {
        &self.bytes[self.written..]
    }

    fn wrote(&mut self, bytes: usize) {
        self.written += bytes;
        if self.is_empty() {
            self.bytes.clear();
            self.written = 0;
        }
    }
}

/// One slave's session: what it was sent and what it said.
struct Session<'a> {
    broker: Replicating<'a>,
    connected: SlaveConnected<'a>,
    stream: Stream,
    outgoing: Outgoing,
    handshaken: bool,
    /// When a frame was last queued, for the heartbeat.
    sent: Instant,
    /// The confirm offset last sent: a higher one goes out at once, in a heartbeat if nothing
    /// else is due, since the slave shows its readers only what it says.
    told_confirm: u64,
}

async fn session(
    stream: TcpStream,
    owner: &Arc<Broker>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), SessionError> {
    stream.set_nodelay(true)?;
    let broker = owner.replicating();
    let replication = broker.replication;
    let role_changed = replication.role_changed.notified();
    tokio::pin!(role_changed);
    role_changed.as_mut().enable();
    if !replication.is_master() {
        return Ok(());
    }
    let mut session = Session::new(broker);
    let (mut reader, mut writer) = stream.into_split();
    let mut messages = SlaveMessageReader::default();
    let mut received = Vec::new();
    let mut buffer = [0u8; READ_BUFFER_BYTES];
    let mut heard = Instant::now();
    loop {
        // Registered before the written position is read: growth after that read wakes the
        // wait below (`notify_waiters` keeps no permit for a waiter that comes later).
        let grew = replication.log_grew.notified();
        tokio::pin!(grew);
        grew.as_mut().enable();
        let written = session.broker.store.stats().written_position;
        if session.outgoing.is_empty() {
            session.queue_next(written)?;
        }
        if heard.elapsed() >= Duration::from_millis(SLAVE_SILENCE_MS_MAX) {
            return Err(SessionError::Silent);
        }
        let idle = session.outgoing.is_empty();
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return Ok(()),
            _ = &mut role_changed => return Ok(()),
            wrote = writer.write(session.outgoing.unwritten()), if !idle => match wrote? {
                0 => return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into()),
                wrote => session.outgoing.wrote(wrote),
            },
            read = reader.read(&mut buffer) => match read? {
                0 => return Ok(()),
                read => {
                    heard = Instant::now();
                    messages.feed(&buffer[..read], &mut received)?;
                }
            },
            _ = grew, if idle => {}
            _ = tokio::time::sleep(Duration::from_millis(HEARTBEAT_INTERVAL_MS / 5)), if idle => {}
        }
        for message in received.drain(..) {
            session.handle(message)?;
        }
    }
}

impl<'a> Session<'a> {
    /// A slave just connected, counted from now; the master's epochs as they are now.
    fn new(broker: Replicating<'a>) -> Session<'a> {
        let replication = broker.replication;
        let controlled = replication.controlled.as_ref().expect("controller mode");
        let epochs = controlled
            .epochs
            .lock()
            .expect("epochs lock poisoned")
            .entries()
            .clone();
        Session {
            broker,
            connected: SlaveConnected::new(replication),
            stream: Stream { next: None, epochs },
            outgoing: Outgoing::default(),
            handshaken: false,
            sent: Instant::now(),
            told_confirm: 0,
        }
    }

    /// Queues the next frame: the log from where the slave is, up to the written position and
    /// never across an epoch's start, or a heartbeat when one is due (every interval, or at
    /// once when the confirm offset moved and the slave has everything).
    fn queue_next(&mut self, written: u64) -> Result<(), SessionError> {
        let replication = self.broker.replication;
        let confirm = replication.confirmed_position().min(written);
        while let Some((position, header, bytes_max)) = self.stream.plan(written)? {
            let chunk = self
                .broker
                .store
                .read_log(position, bytes_max)
                .map_err(|error| SessionError::Read {
                    position,
                    message: error.to_string(),
                })?;
            if chunk.bytes.is_empty() {
                self.stream.next = Some(chunk.next_position.max(position + 1));
                continue;
            }
            let header = TransferHeader {
                confirm_offset: confirm as i64,
                ..header
            };
            self.queue(&header, &chunk.bytes, confirm);
            self.stream.next = Some(chunk.next_position);
            return Ok(());
        }
        let caught_up = self.stream.next.is_some_and(|next| next >= written);
        let due = self.sent.elapsed() >= Duration::from_millis(HEARTBEAT_INTERVAL_MS);
        if self.handshaken && (due || (caught_up && confirm > self.told_confirm)) {
            let controlled = replication.controlled.as_ref().expect("controller mode");
            let heartbeat = TransferHeader {
                offset: self.stream.next.map_or(-1, |next| next as i64),
                epoch: controlled.master_epoch(),
                epoch_start_offset: 0,
                confirm_offset: confirm as i64,
            };
            self.queue(&heartbeat, &[], confirm);
        }
        Ok(())
    }

    fn queue(&mut self, header: &TransferHeader, body: &[u8], confirm: u64) {
        let out = &mut self.outgoing.bytes;
        out.extend_from_slice(&encode_transfer_header(header, body.len()));
        out.extend_from_slice(body);
        self.told_confirm = confirm;
        self.sent = Instant::now();
    }

    fn handle(&mut self, message: SlaveMessage) -> Result<(), SessionError> {
        let store = self.broker.store;
        match message {
            SlaveMessage::Handshake(handshake) => {
                self.connected.identify(handshake.broker_id);
                self.handshaken = true;
                let epochs = &self.stream.epochs;
                let answer = HandshakeAnswer {
                    master_max_offset: store.stats().written_position,
                    last_epoch: epochs.last().map_or(-1, |entry| entry.epoch),
                    epochs: epochs.as_slice().to_vec(),
                };
                // Nothing else is queued before the handshake: frames wait for a report.
                self.outgoing
                    .bytes
                    .extend_from_slice(&encode_handshake_answer(&answer));
            }
            SlaveMessage::Report { offset } => {
                if !self.handshaken {
                    return Err(SessionError::ReportBeforeHandshake { reported: offset });
                }
                let written = store.stats().written_position;
                if offset > written {
                    return Err(SessionError::SlaveAhead {
                        reported: offset,
                        written,
                    });
                }
                if self.stream.next.is_none() {
                    // An empty slave starts at the oldest position this master keeps.
                    let min = store.stats().min_position;
                    self.stream.next = Some(if offset == 0 { min } else { offset });
                }
                let sent_end = self.stream.next.unwrap_or(offset);
                self.connected.confirmed(offset.min(sent_end));
                if offset >= written {
                    self.connected.caught_up(now_ms());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_store::EpochEntry;

    fn stream(next: Option<u64>, epochs: &[(i32, u64)]) -> Stream {
        let entries = epochs
            .iter()
            .map(|(epoch, start_offset)| EpochEntry {
                epoch: *epoch,
                start_offset: *start_offset,
            })
            .collect();
        Stream {
            next,
            epochs: EpochEntries::new(entries).unwrap(),
        }
    }

    #[test]
    fn a_frame_stops_at_the_start_of_the_next_epoch() {
        let s = stream(Some(900), &[(1, 0), (2, 1000)]);
        let (position, header, bytes) = s.plan(5000).unwrap().unwrap();
        assert_eq!(
            (position, header.epoch, header.epoch_start_offset),
            (900, 1, 0)
        );
        assert_eq!(bytes, 100);
        let s = stream(Some(1000), &[(1, 0), (2, 1000)]);
        let (_, header, bytes) = s.plan(5000).unwrap().unwrap();
        assert_eq!((header.epoch, header.epoch_start_offset), (2, 1000));
        assert_eq!(bytes, 4000);
    }

    #[test]
    fn nothing_is_planned_before_the_first_report_or_at_the_log_end() {
        assert!(stream(None, &[(1, 0)]).plan(100).unwrap().is_none());
        assert!(stream(Some(100), &[(1, 0)]).plan(100).unwrap().is_none());
    }

    #[test]
    fn a_position_before_every_epoch_is_refused() {
        let s = stream(Some(10), &[(1, 50)]);
        assert!(matches!(
            s.plan(100),
            Err(SessionError::NoEpoch { position: 10 })
        ));
    }
}
