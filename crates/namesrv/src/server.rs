//! The name server's TCP shell: accept loop with a connection limit, one task per connection,
//! frames decoded by the wire codec and answered by `handle`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use quiver_wire::code::response_code;
use quiver_wire::{decode_frame, encode_frame, Command};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::handle::{handle, Call};
use crate::route_table::{ConnectionId, RouteTable, BROKER_EXPIRY_MS_DEFAULT};

#[derive(Debug, Clone)]
pub struct NamesrvConfig {
    /// Expiry for brokers that do not say their own (`heartbeatTimeoutMillis`).
    pub broker_expiry_ms: i64,
    /// How often expired brokers are looked for (Java: `scanNotActiveBrokerInterval`).
    pub scan_interval_ms: u64,
    pub connections_max: usize,
    /// A connection with no frame for this long is closed; brokers register every 30 s and
    /// clients refresh routes every 30 s, so a live peer never gets near it.
    pub idle_timeout_ms: u64,
}

impl Default for NamesrvConfig {
    fn default() -> Self {
        NamesrvConfig {
            broker_expiry_ms: BROKER_EXPIRY_MS_DEFAULT,
            scan_interval_ms: 5_000,
            connections_max: 10_000,
            idle_timeout_ms: 120_000,
        }
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Serves until `shutdown` turns true.
pub async fn run(
    listener: TcpListener,
    config: NamesrvConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let table = Arc::new(Mutex::new(RouteTable::new(config.broker_expiry_ms)));
    let permits = Arc::new(Semaphore::new(config.connections_max));
    let next_connection = Arc::new(AtomicU64::new(1));
    let mut scan = tokio::time::interval(Duration::from_millis(config.scan_interval_ms.max(100)));
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = scan.tick() => {
                let expired = table.lock().expect("route table lock poisoned").expire(now_ms());
                for addr in expired {
                    tracing::warn!(broker = %addr, "broker expired: no registration within its timeout");
                }
            }
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, "connection refused: {} connections open", config.connections_max);
                    continue;
                };
                let id = next_connection.fetch_add(1, Ordering::Relaxed);
                let table = table.clone();
                let idle = Duration::from_millis(config.idle_timeout_ms);
                tokio::spawn(async move {
                    if let Err(error) = serve_connection(stream, &table, id, idle).await {
                        tracing::debug!(%peer, %error, "connection ended");
                    }
                    let gone = table.lock().expect("route table lock poisoned").connection_closed(id);
                    for addr in gone {
                        tracing::info!(broker = %addr, "broker removed: its connection closed");
                    }
                    drop(permit);
                });
            }
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    table: &Mutex<RouteTable>,
    connection: ConnectionId,
    idle: Duration,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let (mut reader, mut writer) = stream.into_split();
    let mut input = BytesMut::with_capacity(16 * 1024);
    let mut output = BytesMut::with_capacity(16 * 1024);
    loop {
        loop {
            let request = match decode_frame(&mut input) {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(%error, "closing connection: malformed frame");
                    return Ok(());
                }
            };
            if request.is_response() {
                continue;
            }
            let call = Call {
                table,
                connection,
                now_ms: now_ms(),
            };
            let response = handle(&call, &request);
            if !request.is_oneway() {
                encode_response(&request, &response, &mut output);
            }
            // Answers to a long run of pipelined requests go out as they pile up, so a client
            // that sends without reading holds one buffer's worth of them, not all.
            if output.len() >= OUTPUT_BYTES_MAX {
                write_out(&mut writer, &mut output, idle).await?;
            }
        }
        if !output.is_empty() {
            write_out(&mut writer, &mut output, idle).await?;
        }
        let read = tokio::time::timeout(idle, reader.read_buf(&mut input)).await;
        match read {
            Ok(Ok(0)) | Err(_) => return Ok(()),
            Ok(Ok(_)) => {}
            Ok(Err(error)) => return Err(error),
        }
    }
}

/// Answers buffered before they are written out in the middle of a read's requests.
const OUTPUT_BYTES_MAX: usize = 1024 * 1024;

/// Writes `output` out; a peer that reads nothing for `idle` is given up, as one that sends
/// nothing is, so it cannot hold a connection slot forever.
async fn write_out(
    writer: &mut OwnedWriteHalf,
    output: &mut BytesMut,
    idle: Duration,
) -> std::io::Result<()> {
    match tokio::time::timeout(idle, writer.write_all(output)).await {
        Ok(result) => result?,
        Err(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the peer read nothing for the idle timeout",
            ))
        }
    }
    output.clear();
    if output.capacity() > 4 * OUTPUT_BYTES_MAX {
        *output = BytesMut::with_capacity(16 * 1024);
    }
    Ok(())
}

fn encode_response(request: &Command, response: &Command, output: &mut BytesMut) {
    if let Err(error) = encode_frame(response, output) {
        let fallback = request
            .response_to(response_code::SYSTEM_ERROR)
            .with_remark(error.to_string());
        encode_frame(&fallback, output).expect("a bodyless error response always fits in a frame");
    }
}
