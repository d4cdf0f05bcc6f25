//! The slave side of controller mode's HA port (RocketMQ 5's AutoSwitch protocol). A slave
//! says who it is; from the master's epochs it finds the last position both logs agree on
//! (`quiver_store::consistent_point`) and cuts its own log there, durably, the log first and
//! then the epoch file, before it reports its end. It then appends what the master streams at
//! the same positions; a frame of an epoch this slave has not recorded adds that epoch to the
//! epoch file before its bytes are written. Any error closes the connection and the next one
//! starts over with a handshake.

use std::sync::Arc;
use std::time::Duration;

use quiver_store::consistent_point;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use super::autoswitch_codec::{
    encode_slave_handshake, encode_slave_report, AutoSwitchError, HandshakeAnswer, MasterMessage,
    MasterMessageReader, SlaveHandshake, TransferFrame,
};
use super::codec::{self, SlaveStream, StreamError, Units};
use super::{HEARTBEAT_INTERVAL_MS, SLAVE_SILENCE_MS_MAX};
use crate::state::Broker;

const RECONNECT_DELAY_MS: u64 = 1_000;
const CONNECT_TIMEOUT_MS: u64 = 3_000;
const READ_BUFFER_BYTES: usize = 256 * 1024;

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Protocol(#[from] AutoSwitchError),
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error("appending the master's bytes: {0}")]
    Append(#[from] quiver_store::ReplicaError),
    #[error(
        "no epoch of this slave's log is in the master's with the same start: the logs share \
         nothing an epoch vouches for; the slave keeps its log and follows no further"
    )]
    NoConsistentPoint,
    #[error("cutting the log at {position}: {message}")]
    Truncate { position: u64, message: String },
    #[error("recording epoch {epoch}: {message}")]
    Epoch { epoch: i32, message: String },
    #[error("the master sent a transfer frame before its handshake answer")]
    FrameBeforeAnswer,
    #[error("the master sent nothing for {SLAVE_SILENCE_MS_MAX} ms")]
    Silent,
}

/// Follows the master until `stop`.
pub async fn run(owner: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let mut failing = false;
    loop {
        let broker = owner.replicating();
        let Some(addr) = broker.replication.master().ha else {
            // Registration tells us the master's HA address; wait for it.
            tokio::select! {
                _ = stop.wait_for(|stop| *stop) => return,
                _ = broker.replication.master_changed.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(RECONNECT_DELAY_MS)) => {}
            }
            continue;
        };
        let connect = tokio::time::timeout(
            Duration::from_millis(CONNECT_TIMEOUT_MS),
            TcpStream::connect(&addr),
        );
        let connected = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            connected = connect => connected,
        };
        let result = match connected {
            Ok(Ok(stream)) => {
                tracing::info!(master = %addr, "following the master (AutoSwitch)");
                session(stream, &owner, &mut stop).await
            }
            Ok(Err(error)) => Err(SessionError::Io(error)),
            Err(_) => Err(SessionError::Io(std::io::ErrorKind::TimedOut.into())),
        };
        match result {
            Ok(()) => return,
            Err(error) if !failing || matches!(error, SessionError::NoConsistentPoint) => {
                tracing::warn!(master = %addr, %error, "lost the master; trying again every second");
                failing = true;
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            _ = broker.replication.master_changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(RECONNECT_DELAY_MS)) => {}
        }
    }
}

/// Where this slave's log must be cut for the master's answer: None to keep it whole.
/// A slave without epochs keeps its log, as RocketMQ's does: the stream's positions then
/// show whether it continues the master's.
fn cut_for(
    local: &[quiver_store::EpochEntry],
    log_end: u64,
    answer: &HandshakeAnswer,
) -> Result<Option<u64>, SessionError> {
    if local.is_empty() {
        return Ok(None);
    }
    let point = consistent_point(local, log_end, &answer.epochs, answer.master_max_offset)
        .ok_or(SessionError::NoConsistentPoint)?;
    Ok(Some(point))
}

/// Cuts the log at `position` and then the epoch file (entries starting at or past it; the
/// master's frames add back the epochs it has there), off the runtime: both fsync.
async fn truncate(owner: &Arc<Broker>, position: u64) -> Result<(), SessionError> {
    let owner = owner.clone();
    let cut = tokio::task::spawn_blocking(move || {
        let broker = owner.replicating();
        let controlled = broker
            .replication
            .controlled
            .as_ref()
            .expect("controller mode");
        if position < broker.store.stats().written_position {
            let report = broker
                .store
                .truncate_log(position)
                .map_err(|e| e.to_string())?;
            tracing::warn!(
                position,
                segments_removed = report.segments_removed,
                "cut this slave's log where its new master's differs"
            );
        }
        let mut epochs = controlled.epochs.lock().expect("epochs lock poisoned");
        epochs.truncate_from(position).map_err(|e| e.to_string())?;
        Ok::<(), String>(())
    });
    let message = match cut.await {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(message)) => message,
        Err(error) => error.to_string(),
    };
    Err(SessionError::Truncate { position, message })
}

/// Records `epoch` from `start_offset` before any byte of it is appended, off the runtime.
async fn record_epoch(
    owner: &Arc<Broker>,
    epoch: i32,
    start_offset: u64,
) -> Result<(), SessionError> {
    let owner = owner.clone();
    let recorded = tokio::task::spawn_blocking(move || {
        let broker = owner.replicating();
        let controlled = broker
            .replication
            .controlled
            .as_ref()
            .expect("controller mode");
        let mut epochs = controlled.epochs.lock().expect("epochs lock poisoned");
        if epochs.last().is_some_and(|last| last.epoch >= epoch) {
            return Ok(());
        }
        epochs
            .append(epoch, start_offset)
            .map_err(|e| e.to_string())
    });
    let message = match recorded.await {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(message)) => message,
        Err(error) => error.to_string(),
    };
    Err(SessionError::Epoch { epoch, message })
}

/// One connection to the master; Ok when stopped.
async fn session(
    stream: TcpStream,
    owner: &Arc<Broker>,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), SessionError> {
    stream.set_nodelay(true)?;
    let broker = owner.replicating();
    let controlled = broker
        .replication
        .controlled
        .as_ref()
        .expect("controller mode");
    let store = broker.store;
    let (mut reader, mut writer) = stream.into_split();
    let handshake = SlaveHandshake {
        sync_from_last_file: false,
        async_learner: false,
        broker_id: controlled.own_id(),
    };
    writer
        .write_all(&encode_slave_handshake(&handshake))
        .await?;
    let mut messages = MasterMessageReader::default();
    let mut received = Vec::new();
    let mut buffer = vec![0u8; READ_BUFFER_BYTES];
    // Set once the handshake answer is handled: the stream of whole records.
    let mut units: Option<SlaveStream> = None;
    let mut epoch = -1;
    let mut reported = 0u64;
    let mut report_sent = Instant::now();
    let mut heard = Instant::now();
    loop {
        let read = tokio::select! {
            _ = stop.changed() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(HEARTBEAT_INTERVAL_MS / 5)) => None,
            read = reader.read(&mut buffer) => Some(read?),
        };
        match read {
            Some(0) => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
            Some(read) => {
                heard = Instant::now();
                messages.feed(&buffer[..read], &mut received)?;
            }
            None if heard.elapsed() >= Duration::from_millis(SLAVE_SILENCE_MS_MAX) => {
                return Err(SessionError::Silent);
            }
            None => {}
        }
        for message in received.drain(..) {
            match message {
                MasterMessage::HandshakeAnswer(answer) => {
                    let log_end = store.stats().written_position;
                    let local = controlled
                        .epochs
                        .lock()
                        .expect("epochs lock poisoned")
                        .entries()
                        .clone();
                    if let Some(point) = cut_for(local.as_slice(), log_end, &answer)? {
                        truncate(owner, point).await?;
                    }
                    let log_end = store.stats().written_position;
                    let start = (log_end > 0).then_some(log_end);
                    units = Some(SlaveStream::new(start, store.segment_bytes()));
                    epoch = -1;
                    // Reported at once, even unchanged: the master sends nothing before.
                    writer.write_all(&encode_slave_report(log_end)).await?;
                    reported = log_end;
                    report_sent = Instant::now();
                }
                MasterMessage::Transfer(frame) => {
                    let stream = units.as_mut().ok_or(SessionError::FrameBeforeAnswer)?;
                    if !frame.body.is_empty() && frame.header.epoch != epoch {
                        record_epoch(
                            owner,
                            frame.header.epoch,
                            frame.header.epoch_start_offset as u64,
                        )
                        .await?;
                        epoch = frame.header.epoch;
                    }
                    let cut = cut_frame(stream, &frame)?;
                    for run in cut {
                        store.append_replicated(run.position, &run.bytes)?;
                    }
                    // What every replica of the SyncStateSet holds: readers here see that.
                    if frame.header.confirm_offset >= 0 {
                        store.confirm(frame.header.confirm_offset as u64);
                    }
                }
            }
        }
        let log_end = store.stats().written_position;
        let due = report_sent.elapsed() >= Duration::from_millis(HEARTBEAT_INTERVAL_MS);
        if units.is_some() && (log_end > reported || due) {
            writer.write_all(&encode_slave_report(log_end)).await?;
            reported = log_end;
            report_sent = Instant::now();
        }
    }
}

/// A transfer frame through the default protocol's reader, which checks that it continues
/// this log and cuts whole records: the bytes are the same, only the header differs.
fn cut_frame(stream: &mut SlaveStream, frame: &TransferFrame) -> Result<Vec<Units>, SessionError> {
    let mut out = Vec::new();
    // A heartbeat before the master chose a position says nothing to check.
    if frame.header.offset < 0 {
        return Ok(out);
    }
    let header = codec::encode_transfer_header(frame.header.offset as u64, frame.body.len() as u32);
    stream.feed(&header, &mut out)?;
    stream.feed(&frame.body, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_store::EpochEntry;

    fn entries(list: &[(i32, u64)]) -> Vec<EpochEntry> {
        list.iter()
            .map(|(epoch, start_offset)| EpochEntry {
                epoch: *epoch,
                start_offset: *start_offset,
            })
            .collect()
    }

    fn answer(list: &[(i32, u64)], max: u64) -> HandshakeAnswer {
        HandshakeAnswer {
            master_max_offset: max,
            last_epoch: list.last().map_or(-1, |e| e.0),
            epochs: entries(list),
        }
    }

    #[test]
    fn an_old_master_cuts_the_tail_its_successor_never_had() {
        let local = entries(&[(1, 0)]);
        let cut = cut_for(&local, 900, &answer(&[(1, 0), (2, 600)], 1200)).unwrap();
        assert_eq!(cut, Some(600));
    }

    #[test]
    fn a_slave_behind_its_master_keeps_its_log() {
        let local = entries(&[(1, 0)]);
        let cut = cut_for(&local, 300, &answer(&[(1, 0), (2, 600)], 1200)).unwrap();
        assert_eq!(cut, Some(300));
    }

    #[test]
    fn a_slave_without_epochs_keeps_its_log_and_one_sharing_none_is_refused() {
        assert_eq!(cut_for(&[], 300, &answer(&[(1, 0)], 100)).unwrap(), None);
        let local = entries(&[(1, 0)]);
        let refused = cut_for(&local, 300, &answer(&[(1, 50)], 400));
        assert!(matches!(refused, Err(SessionError::NoConsistentPoint)));
    }
}
