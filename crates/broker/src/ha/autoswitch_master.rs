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
use crate::state::Broker;

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

async fn session(
    stream: TcpStream,
    owner: &Arc<Broker>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), SessionError> {
    stream.set_nodelay(true)?;
    let broker = owner.replicating();
    let replication = broker.replication;
    let controlled = replication.controlled.as_ref().expect("controller mode");
    let store = broker.store;
    let role_changed = replication.role_changed.notified();
    tokio::pin!(role_changed);
    role_changed.as_mut().enable();
    if !replication.is_master() {
        return Ok(());
    }
    let connected = SlaveConnected::new(replication);
    let epochs = controlled
        .epochs
        .lock()
        .expect("epochs lock poisoned")
        .entries()
        .clone();
    let mut stream_state = Stream { next: None, epochs };
    let (mut reader, mut writer) = stream.into_split();
    let mut messages = SlaveMessageReader::default();
    let mut received = Vec::new();
    let mut buffer = [0u8; READ_BUFFER_BYTES];
    let mut handshaken = false;
    let mut heard = Instant::now();
    let mut sent = Instant::now();
    // The confirm offset last sent: a higher one goes out at once, in a heartbeat if nothing
    // else is due, since the slave shows its readers only what it says.
    let mut told_confirm = 0u64;
    loop {
        // Registered before the written position is read: growth after that read wakes the
        // wait below (`notify_waiters` keeps no permit for a waiter that comes later).
        let grew = replication.log_grew.notified();
        tokio::pin!(grew);
        grew.as_mut().enable();
        let written = store.stats().written_position;
        if let Some((position, header, bytes_max)) = stream_state.plan(written)? {
            let chunk =
                store
                    .read_log(position, bytes_max)
                    .map_err(|error| SessionError::Read {
                        position,
                        message: error.to_string(),
                    })?;
            if chunk.bytes.is_empty() {
                stream_state.next = Some(chunk.next_position.max(position + 1));
                continue;
            }
            told_confirm = replication.confirmed_position().min(written);
            let header = TransferHeader {
                confirm_offset: told_confirm as i64,
                ..header
            };
            writer
                .write_all(&encode_transfer_header(&header, chunk.bytes.len()))
                .await?;
            writer.write_all(&chunk.bytes).await?;
            stream_state.next = Some(chunk.next_position);
            sent = Instant::now();
        }
        let confirm = replication.confirmed_position().min(written);
        let caught_up = stream_state.next.is_some_and(|next| next >= written);
        if sent.elapsed() >= Duration::from_millis(HEARTBEAT_INTERVAL_MS)
            || (caught_up && confirm > told_confirm)
        {
            told_confirm = confirm;
            let heartbeat = TransferHeader {
                offset: stream_state.next.map_or(-1, |next| next as i64),
                epoch: controlled.master_epoch(),
                epoch_start_offset: 0,
                confirm_offset: confirm as i64,
            };
            writer
                .write_all(&encode_transfer_header(&heartbeat, 0))
                .await?;
            sent = Instant::now();
        }
        if heard.elapsed() >= Duration::from_millis(SLAVE_SILENCE_MS_MAX) {
            return Err(SessionError::Silent);
        }
        let more = stream_state.next.is_some_and(|next| next < written);
        if more {
            // Reports waiting are read between frames, without blocking.
            if let Ok(Ok(read)) =
                tokio::time::timeout(Duration::ZERO, reader.read(&mut buffer)).await
            {
                if read == 0 {
                    return Ok(());
                }
                heard = Instant::now();
                messages.feed(&buffer[..read], &mut received)?;
            }
        } else {
            tokio::select! {
                _ = stop.wait_for(|stop| *stop) => return Ok(()),
                _ = &mut role_changed => return Ok(()),
                _ = grew => {}
                _ = tokio::time::sleep(Duration::from_millis(HEARTBEAT_INTERVAL_MS / 5)) => {}
                read = reader.read(&mut buffer) => match read? {
                    0 => return Ok(()),
                    read => {
                        heard = Instant::now();
                        messages.feed(&buffer[..read], &mut received)?;
                    }
                },
            }
        }
        for message in received.drain(..) {
            match message {
                SlaveMessage::Handshake(handshake) => {
                    connected.identify(handshake.broker_id);
                    handshaken = true;
                    let answer = HandshakeAnswer {
                        master_max_offset: store.stats().written_position,
                        last_epoch: stream_state.epochs.last().map_or(-1, |entry| entry.epoch),
                        epochs: stream_state.epochs.as_slice().to_vec(),
                    };
                    writer.write_all(&encode_handshake_answer(&answer)).await?;
                }
                SlaveMessage::Report { offset } => {
                    if !handshaken {
                        return Err(SessionError::ReportBeforeHandshake { reported: offset });
                    }
                    let written = store.stats().written_position;
                    if offset > written {
                        return Err(SessionError::SlaveAhead {
                            reported: offset,
                            written,
                        });
                    }
                    if stream_state.next.is_none() {
                        // An empty slave starts at the oldest position this master keeps.
                        let min = store.stats().min_position;
                        stream_state.next = Some(if offset == 0 { min } else { offset });
                    }
                    let sent_end = stream_state.next.unwrap_or(offset);
                    connected.confirmed(offset.min(sent_end));
                    if offset >= written {
                        connected.caught_up(now_ms());
                    }
                }
            }
        }
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
