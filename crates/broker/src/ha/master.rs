//! The master side of the HA port: each slave connection reports its log end, and the master
//! streams its CommitLog from there (from the base of its last segment for a slave that has
//! nothing, as RocketMQ does), a heartbeat when idle. What to send and what a report confirms
//! is decided by `MasterSession`; this shell moves the bytes and reads the clock.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::master_session::{MasterSession, MasterSessionError};
use super::SlaveConnected;
use crate::state::{Broker, Replicating};

/// An ASYNC_MASTER waits this long after the log grows before it reads what to send: one frame
/// then carries what many groups wrote, where a frame per group costs the master, the slave and
/// the link a wakeup each, and no send waits for it. A SYNC_MASTER's sends wait for the slave,
/// so it sends at once.
const ASYNC_GATHER_US: u64 = 1_000;
/// Slave connections at once: a master has one or two slaves; more is a misconfiguration or an
/// attack, and each costs a stream of the whole log.
const SLAVE_CONNECTIONS_MAX: usize = 16;
/// What one read of the slave's reports takes at most: 128 reports of 8 bytes, far more than a
/// slave sends between two reads.
const REPORT_READ_BYTES: usize = 1024;

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Session(#[from] MasterSessionError),
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
            match session(stream, broker.replicating(), stop).await {
                Ok(()) => tracing::info!(%peer, "slave connection ended"),
                Err(error) => tracing::warn!(%peer, %error, "slave connection closed"),
            }
            drop(permit);
        });
    }
    sessions.shutdown().await;
}

/// One slave's connection: bytes between the socket, the store and the `MasterSession`, which
/// decides what to send and what the slave confirmed; the clock read here and passed in.
async fn session(
    stream: TcpStream,
    broker: Replicating<'_>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), SessionError> {
    stream.set_nodelay(true)?;
    let replication = broker.replication;
    let store = broker.store;
    // Counts this slave and holds its confirmation until the connection ends.
    let connected = SlaveConnected::new(replication);
    let (mut reader, mut writer) = stream.into_split();
    let started = Instant::now();
    let now_ms = || started.elapsed().as_millis() as u64;
    let gather = (!replication.waits_for_slave()).then(|| Duration::from_micros(ASYNC_GATHER_US));
    let mut session = MasterSession::new(store.segment_bytes(), now_ms());
    let mut buffer = [0u8; REPORT_READ_BYTES];
    loop {
        // Registered before the written position is read: growth after that read wakes it.
        let grew = replication.log_grew.notified();
        let ready = session.step(now_ms(), store.stats().written_position)?;
        if let Some(position) = ready.confirmed {
            connected.confirmed(position);
        }
        if let Some(read) = ready.read {
            let chunk = store
                .read_log(read.position, read.bytes_max)
                .map_err(|error| SessionError::Read {
                    position: read.position,
                    message: error.to_string(),
                })?;
            session.log_read(chunk, now_ms())?;
            continue;
        }
        let deadline = started + Duration::from_millis(ready.deadline_ms);
        let unsent = session.unsent();
        let mut log_grew = false;
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return Ok(()),
            written = writer.write(unsent), if !unsent.is_empty() => match written? {
                0 => return Err(SessionError::Io(std::io::ErrorKind::WriteZero.into())),
                written => session.wrote(written),
            },
            read = reader.read(&mut buffer) => match read? {
                0 => return Ok(()),
                read => session.receive(&buffer[..read], now_ms()),
            },
            _ = grew, if ready.waiting_for_log => log_grew = true,
            _ = tokio::time::sleep_until(deadline) => {}
        }
        if let (true, Some(gather)) = (log_grew, gather) {
            tokio::time::sleep(gather).await;
        }
    }
}
