//! The slave side: connect to the master's HA port, report this log's end, append what the
//! master streams at the same positions (through the store's replica write path, which also
//! builds the ConsumeQueues and key index), report again after each append and at least every
//! heartbeat interval. Any error closes the connection; the next one resumes from this log's
//! end, so nothing is applied twice and nothing is skipped. What to append and when to report
//! is decided by `SlaveSession`; this shell moves the bytes and reads the clock.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use super::codec::{encode_report, StreamError, Units};
use super::slave_session::{SlaveSession, SlaveSessionError};
use crate::state::{Broker, Replicating};

/// Between attempts to reach the master.
const RECONNECT_DELAY_MS: u64 = 1_000;
const CONNECT_TIMEOUT_MS: u64 = 3_000;
const READ_BUFFER_BYTES: usize = 256 * 1024;

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Session(#[from] SlaveSessionError),
    #[error(
        "the master's log does not contain this slave's: its record at position {position} \
         {difference}; the slave keeps its own log and follows no further"
    )]
    Foreign { position: u64, difference: String },
}

/// Follows the master until `stop`.
pub async fn run(owner: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let broker = owner.replicating();
    let mut failing = false;
    loop {
        let master = broker.replication.master();
        let Some(addr) = master.ha else {
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
                tracing::info!(master = %addr, "following the master");
                failing = false;
                session(stream, broker, &mut stop).await
            }
            Ok(Err(error)) => Err(SessionError::Io(error)),
            Err(_) => Err(SessionError::Io(std::io::ErrorKind::TimedOut.into())),
        };
        match result {
            Ok(()) => return,
            Err(SessionError::Session(SlaveSessionError::Stream(
                error @ StreamError::Diverged { .. },
            ))) => {
                broker.replication.refuse_master(true);
                tracing::error!(master = %addr, %error, "refusing this master; the slave keeps its own log");
            }
            Err(error @ SessionError::Foreign { .. }) => {
                broker.replication.refuse_master(true);
                tracing::error!(master = %addr, %error, "refusing this master");
            }
            Err(error) if !failing => {
                tracing::warn!(master = %addr, %error, "lost the master; trying again every second");
                failing = true;
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            _ = tokio::time::sleep(Duration::from_millis(RECONNECT_DELAY_MS)) => {}
        }
    }
}

/// How long the check of the master's log may take.
const CHECK_TIMEOUT_MS: u64 = 3_000;

/// Before following a master, checks that its log holds this slave's last record, byte for
/// byte, at the same position: a slave pointed at another broker's master (or at a master
/// whose log was replaced) would otherwise append that master's bytes after its own, and its
/// log would be neither. The master is asked through its broker port (VIEW_MESSAGE_BY_ID), as
/// any RocketMQ broker answers; without a known broker address the check is skipped.
async fn check_master_holds_our_log(broker: Replicating<'_>) -> Result<(), SessionError> {
    let Some((position, ours)) = last_record(broker.store) else {
        return Ok(());
    };
    let Some(master) = broker.replication.master().broker else {
        tracing::debug!("master's broker address unknown: its log is not checked");
        return Ok(());
    };
    let header = quiver_wire::header::ViewMessageRequestHeader {
        topic: None,
        offset: position as i64,
    };
    let request = quiver_wire::Command::request(
        quiver_wire::code::request_code::VIEW_MESSAGE_BY_ID,
        quiver_wire::Encoding::Json,
    )
    .with_ext(header.to_ext());
    let mut link = crate::outbound::Link::new(master.clone());
    let timeout = Duration::from_millis(CHECK_TIMEOUT_MS);
    let answer = link
        .call(request, timeout)
        .await
        .map_err(|error| SessionError::Io(std::io::Error::other(error.to_string())))?;
    let difference = if answer.code != quiver_wire::code::response_code::SUCCESS {
        format!("is not there ({}: {:?})", answer.code, answer.remark)
    } else if answer.body[..] != ours[..] {
        "differs".to_string()
    } else {
        return Ok(());
    };
    Err(SessionError::Foreign {
        position,
        difference,
    })
}

/// The last record of this slave's log: the newest entry over its queues.
fn last_record(store: &quiver_store::Store) -> Option<(u64, Vec<u8>)> {
    let mut last: Option<(u64, Vec<u8>)> = None;
    for (topic, queue_id) in store.queues() {
        let bounds = store.bounds(&topic, queue_id);
        if bounds.max_offset <= bounds.min_offset {
            continue;
        }
        let Ok(read) = store.read(
            &topic,
            queue_id,
            bounds.max_offset - 1,
            1,
            u32::MAX,
            &|_| true,
        ) else {
            continue;
        };
        let Some(position) =
            quiver_record::read_i64(&read.bytes, quiver_record::PHYSICAL_OFFSET_AT)
        else {
            continue;
        };
        let position = position as u64;
        if last.as_ref().is_none_or(|(at, _)| position > *at) {
            last = Some((position, read.bytes));
        }
    }
    last
}

/// One connection to the master; Ok when stopped. Bytes between the socket, the store and the
/// `SlaveSession`, which decides what to append and when to report; the clock read here.
async fn session(
    stream: TcpStream,
    broker: Replicating<'_>,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), SessionError> {
    stream.set_nodelay(true)?;
    let (mut reader, mut writer) = stream.into_split();
    let store = broker.store;
    let log_end = store.stats().written_position;
    check_master_holds_our_log(broker).await?;
    broker.replication.refuse_master(false);
    let started = Instant::now();
    let now_ms = || started.elapsed().as_millis() as u64;
    let mut session = SlaveSession::new(log_end, store.segment_bytes(), now_ms());
    let mut buffer = vec![0u8; READ_BUFFER_BYTES];
    loop {
        let ready = session.step(now_ms())?;
        if let Some(position) = ready.report {
            writer.write_all(&encode_report(position)).await?;
        }
        if !ready.append.is_empty() {
            // Into the page cache (with sync flush the store's sync thread fsyncs after):
            // shorter than the hop to a blocking thread and back.
            session.appended(apply(store, ready.append))?;
            continue;
        }
        let deadline = started + Duration::from_millis(ready.deadline_ms);
        tokio::select! {
            _ = stop.changed() => return Ok(()),
            _ = tokio::time::sleep_until(deadline) => {}
            read = reader.read(&mut buffer) => match read? {
                0 => return Err(SessionError::Io(std::io::ErrorKind::UnexpectedEof.into())),
                read => session.receive(&buffer[..read], now_ms())?,
            },
        }
    }
}

/// Appends what the master sent, in order; the log's end after the last.
fn apply(
    store: &quiver_store::Store,
    batch: Vec<Units>,
) -> Result<u64, quiver_store::ReplicaError> {
    let mut written = 0;
    for unit in batch {
        written = store.append_replicated(unit.position, &unit.bytes)?;
    }
    Ok(written)
}
