//! The master side of the HA port: each slave connection reports its log end, and the master
//! streams its CommitLog from there (from the base of its last segment for a slave that has
//! nothing, as RocketMQ does), a heartbeat when idle.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::codec::{encode_transfer_header, ReportReader, TRANSFER_BATCH_BYTES};
use super::SlaveConnected;
use crate::state::Broker;

/// RocketMQ's haSendHeartbeatInterval: an idle master tells the slave where it stands this often.
pub const HEARTBEAT_INTERVAL_MS: u64 = 5_000;
/// RocketMQ's haHousekeepingInterval: a slave silent this long is given up.
pub const SLAVE_SILENCE_MS_MAX: u64 = 20_000;
/// An ASYNC_MASTER waits this long after the log grows before it reads what to send: one frame
/// then carries what many groups wrote, where a frame per group costs the master, the slave and
/// the link a wakeup each, and no send waits for it. A SYNC_MASTER's sends wait for the slave,
/// so it sends at once.
const ASYNC_GATHER_US: u64 = 1_000;
/// Slave connections at once: a master has one or two slaves; more is a misconfiguration or an
/// attack, and each costs a stream of the whole log.
const SLAVE_CONNECTIONS_MAX: usize = 16;

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the slave sent no report for {SLAVE_SILENCE_MS_MAX} ms")]
    Silent,
    #[error("the slave's log ends at {slave}, past this master's end {master}: it holds what this master does not")]
    SlaveAhead { slave: u64, master: u64 },
    #[error("cannot read the CommitLog at {position}: {message}")]
    Read { position: u64, message: String },
}

/// Serves slaves on `listener` until `stop`.
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
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "slave connection refused: {SLAVE_CONNECTIONS_MAX} connected");
            continue;
        };
        let broker = broker.clone();
        let stop = stop.clone();
        sessions.spawn(async move {
            tracing::info!(%peer, "slave connected");
            match session(stream, &broker, stop).await {
                Ok(()) => tracing::info!(%peer, "slave connection ended"),
                Err(error) => tracing::warn!(%peer, %error, "slave connection closed"),
            }
            drop(permit);
        });
    }
    sessions.shutdown().await;
}

async fn session(
    stream: TcpStream,
    broker: &Broker,
    mut stop: watch::Receiver<bool>,
) -> Result<(), SessionError> {
    stream.set_nodelay(true)?;
    let replication = &broker.replication;
    let _connected = SlaveConnected::new(replication);
    let (mut reader, mut writer) = stream.into_split();
    let (reported_tx, mut reported) = watch::channel(None::<u64>);
    // Reports: confirmations for SYNC_MASTER sends, and the first one says where to start.
    let read_reports = async {
        let mut reports = ReportReader::default();
        let mut buffer = [0u8; 1024];
        let silence = Duration::from_millis(SLAVE_SILENCE_MS_MAX);
        loop {
            let read = tokio::time::timeout(silence, reader.read(&mut buffer)).await;
            match read {
                Err(_) => return Err(SessionError::Silent),
                Ok(Ok(0)) => return Ok(()),
                Ok(Ok(n)) => {
                    if let Some(position) = reports.feed(&buffer[..n]) {
                        replication.confirmed(position);
                        reported_tx.send_replace(Some(position));
                    }
                }
                Ok(Err(error)) => return Err(error.into()),
            }
        }
    };
    let stream_log = async {
        let first = loop {
            if let Some(position) = *reported.borrow_and_update() {
                break position;
            }
            if reported.changed().await.is_err() {
                return Ok(());
            }
        };
        transfer(broker, &mut writer, first).await
    };
    tokio::select! {
        _ = stop.wait_for(|stop| *stop) => Ok(()),
        result = read_reports => result,
        result = stream_log => result,
    }
}

/// Streams the log to the slave from `reported`, its first report, for as long as it lasts.
async fn transfer(
    broker: &Broker,
    writer: &mut OwnedWriteHalf,
    reported: u64,
) -> Result<(), SessionError> {
    let store = &broker.store;
    let written = store.stats().written_position;
    let mut next = if reported == 0 {
        // A slave with nothing starts at the base of the last segment, not the first: it
        // need not copy what retention may delete soon.
        written - written % store.segment_bytes()
    } else {
        reported
    };
    if next > written {
        return Err(SessionError::SlaveAhead {
            slave: next,
            master: written,
        });
    }
    let heartbeat = Duration::from_millis(HEARTBEAT_INTERVAL_MS);
    let gather =
        (!broker.replication.waits_for_slave()).then(|| Duration::from_micros(ASYNC_GATHER_US));
    let mut frame = Vec::with_capacity(TRANSFER_BATCH_BYTES + 12);
    loop {
        let grew = broker.replication.log_grew.notified();
        let chunk = store
            .read_log(next, TRANSFER_BATCH_BYTES)
            .map_err(|error| SessionError::Read {
                position: next,
                message: error.to_string(),
            })?;
        if !chunk.bytes.is_empty() {
            frame.clear();
            frame.extend_from_slice(&encode_transfer_header(next, chunk.bytes.len() as u32));
            frame.extend_from_slice(&chunk.bytes);
            writer.write_all(&frame).await?;
            next = chunk.next_position;
            continue;
        }
        if next != chunk.next_position {
            // Past a segment's end: the next segment starts here.
            next = chunk.next_position;
            continue;
        }
        match tokio::time::timeout(heartbeat, grew).await {
            Err(_) => writer.write_all(&encode_transfer_header(next, 0)).await?,
            Ok(()) => {
                if let Some(gather) = gather {
                    tokio::time::sleep(gather).await;
                }
            }
        }
    }
}
