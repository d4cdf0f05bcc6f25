//! One TCP connection to a name server or broker, shared by every caller of that address.
//!
//! Requests are pipelined: a caller registers a oneshot under a fresh opaque, hands the encoded
//! frame to the writer task and waits; the reader task decodes responses in whatever order they
//! come and completes the oneshot with the matching opaque. The writer gathers every queued
//! frame into one socket write, so many concurrent callers cost few system calls.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use quiver_wire::code::response_code;
use quiver_wire::{decode_frame, encode_frame, Command};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::{timeout_at, Instant};

use crate::error::ClientError;

/// Frames gathered into one write: enough to batch a few hundred 1 KiB sends, small enough
/// that one write does not hold the socket for long.
const WRITE_BATCH_BYTES_MAX: usize = 256 * 1024;
/// Frames at least this big are written as they are instead of being copied into the batch.
const WRITE_DIRECT_BYTES_MIN: usize = 64 * 1024;
/// Initial read buffer; it grows to the largest frame seen (at most 16 MiB, checked by the codec).
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Limits of one connection.
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    pub connect_timeout_ms: u64,
    /// Requests sent and not yet answered; further callers wait for a slot (back-pressure).
    pub in_flight_max: usize,
    /// Encoded frames queued for the writer task.
    pub write_queue_frames_max: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            connect_timeout_ms: 3_000,
            // The broker admits 4096 in flight per connection; stay below it.
            in_flight_max: 2_048,
            write_queue_frames_max: 4_096,
        }
    }
}

/// A request the server sent us (NOTIFY_CONSUMER_IDS_CHANGED and the like).
#[derive(Clone, Debug)]
pub struct ServerRequest {
    pub addr: String,
    pub command: Command,
}

/// Responses awaited, by opaque. `closed` is set once by the reader when the connection ends,
/// under the same lock, so no caller can register after the final drain.
#[derive(Default)]
struct Pending {
    waiters: HashMap<i32, Waiter, BuildHasherDefault<OpaqueHasher>>,
    /// When the expiry task will look next; None while it waits for a first waiter.
    next_expiry: Option<Instant>,
    closed: bool,
}

/// Hashes an opaque with one multiplication: opaques are counters this side hands out, so
/// nobody can pick them to collide, and the default hasher cost more than the rest of a lookup.
#[derive(Default)]
struct OpaqueHasher(u64);

impl Hasher for OpaqueHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 << 8 | u64::from(*byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_i32(&mut self, value: i32) {
        // Fibonacci hashing spreads consecutive values over the table's high bits.
        self.0 = u64::from(value as u32).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A caller waiting for a response. Past its deadline the expiry task drops the sender, which
/// ends the caller's wait: one timer for the connection instead of one per request.
struct Waiter {
    sender: oneshot::Sender<Command>,
    deadline: Instant,
}

struct Shared {
    addr: String,
    /// Set by the reader when the connection ends (after `Pending::closed`).
    closed: Arc<AtomicBool>,
    outgoing: mpsc::Sender<Bytes>,
    pending: Arc<Mutex<Pending>>,
    next_opaque: AtomicI32,
    in_flight: Arc<Semaphore>,
    /// Wakes the expiry task when a waiter's deadline comes before the one it sleeps toward.
    expiry: Arc<Notify>,
    tasks: [JoinHandle<()>; 3],
}

impl Drop for Shared {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A cheap handle; clones share the socket.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
}

fn lock(pending: &Mutex<Pending>) -> MutexGuard<'_, Pending> {
    // A panic while holding this lock cannot leave the map inconsistent (single inserts and
    // removes), so a poisoned lock is still usable.
    pending
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Removes the caller's waiter if it gives up (timeout or its future is dropped). Once the
/// response came, the reader has removed it already and the guard is disarmed.
struct WaiterGuard<'a> {
    pending: &'a Mutex<Pending>,
    opaque: i32,
    armed: bool,
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            lock(self.pending).waiters.remove(&self.opaque);
        }
    }
}

impl Connection {
    pub async fn connect(
        addr: &str,
        limits: &ConnectionLimits,
        server_requests: broadcast::Sender<ServerRequest>,
    ) -> Result<Connection, ClientError> {
        let timeout = Duration::from_millis(limits.connect_timeout_ms);
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Err(_) => {
                return Err(ClientError::ConnectTimeout {
                    addr: addr.to_owned(),
                    timeout_ms: limits.connect_timeout_ms,
                })
            }
            Ok(Err(error)) => {
                return Err(ClientError::Connect {
                    addr: addr.to_owned(),
                    message: error.to_string(),
                })
            }
            Ok(Ok(stream)) => stream,
        };
        let _ = stream.set_nodelay(true);
        let (reader, writer) = stream.into_split();
        let (outgoing, queued) = mpsc::channel(limits.write_queue_frames_max.max(1));
        let pending = Arc::new(Mutex::new(Pending::default()));
        let closed = Arc::new(AtomicBool::new(false));
        let expiry = Arc::new(Notify::new());
        let writer_task = tokio::spawn(write_frames(writer, queued));
        let expiry_task = tokio::spawn(expire_waiters(pending.clone(), expiry.clone()));
        let reader_task = tokio::spawn(read_frames(
            addr.to_owned(),
            reader,
            pending.clone(),
            closed.clone(),
            outgoing.downgrade(),
            server_requests,
        ));
        Ok(Connection {
            shared: Arc::new(Shared {
                addr: addr.to_owned(),
                closed,
                outgoing,
                pending,
                next_opaque: AtomicI32::new(1),
                in_flight: Arc::new(Semaphore::new(limits.in_flight_max.max(1))),
                expiry,
                tasks: [writer_task, reader_task, expiry_task],
            }),
        })
    }

    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// True once the reader saw the connection end; the pool then opens a new one.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire) || self.shared.outgoing.is_closed()
    }

    /// A fresh opaque for a request the caller encodes itself (see `call_encoded`).
    pub fn next_opaque(&self) -> i32 {
        // Wrapping is harmless: an opaque is only reused after 2^32 requests, long after its
        // first use was answered or timed out.
        self.shared.next_opaque.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `request` and waits for its response, at most `timeout`.
    pub async fn call(
        &self,
        mut request: Command,
        timeout: Duration,
    ) -> Result<Command, ClientError> {
        request.opaque = self.next_opaque();
        let frame = encode(&request)?;
        let deadline = Instant::now() + timeout;
        self.call_encoded(request.opaque, request.code, frame, deadline, timeout)
            .await
    }

    /// Sends a frame already encoded with `opaque` and waits for the response to it until
    /// `deadline`; `timeout` is what the error reports.
    pub async fn call_encoded(
        &self,
        opaque: i32,
        code: i32,
        frame: Bytes,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Command, ClientError> {
        let timed_out = || ClientError::Timeout {
            addr: self.shared.addr.clone(),
            code,
            timeout_ms: timeout.as_millis() as u64,
        };
        let _permit = self.acquire(deadline).await.ok_or_else(timed_out)?;
        let (sender, receiver) = oneshot::channel();
        {
            let mut pending = lock(&self.shared.pending);
            if pending.closed {
                return Err(self.closed());
            }
            pending.waiters.insert(opaque, Waiter { sender, deadline });
            if pending.next_expiry.is_none_or(|next| deadline < next) {
                pending.next_expiry = Some(deadline);
                self.shared.expiry.notify_one();
            }
        }
        let mut guard = WaiterGuard {
            pending: &self.shared.pending,
            opaque,
            armed: true,
        };
        // The writer's queue is rarely full: skip the timer when there is room.
        match self.shared.outgoing.try_send(frame) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(self.closed()),
            Err(mpsc::error::TrySendError::Full(frame)) => {
                match timeout_at(deadline, self.shared.outgoing.send(frame)).await {
                    Err(_) => return Err(timed_out()),
                    Ok(Err(_)) => return Err(self.closed()),
                    Ok(Ok(())) => {}
                }
            }
        }
        match receiver.await {
            Ok(response) => {
                // The reader took the waiter out of the map before sending.
                guard.armed = false;
                Ok(response)
            }
            // The expiry task dropped the waiter, or the connection ended.
            Err(_) if Instant::now() >= deadline => Err(timed_out()),
            Err(_) => Err(self.closed()),
        }
    }

    /// Sends a request that expects no response (the caller sets the oneway flag).
    pub async fn send_oneway(
        &self,
        mut request: Command,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        request.opaque = self.next_opaque();
        let frame = encode(&request)?;
        self.send_encoded_oneway(frame, request.code, timeout).await
    }

    pub async fn send_encoded_oneway(
        &self,
        frame: Bytes,
        code: i32,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        match tokio::time::timeout(timeout, self.shared.outgoing.send(frame)).await {
            Err(_) => Err(ClientError::Timeout {
                addr: self.shared.addr.clone(),
                code,
                timeout_ms: timeout.as_millis() as u64,
            }),
            Ok(Err(_)) => Err(self.closed()),
            Ok(Ok(())) => Ok(()),
        }
    }

    async fn acquire(&self, deadline: Instant) -> Option<OwnedSemaphorePermit> {
        let permits = self.shared.in_flight.clone();
        if let Ok(permit) = permits.clone().try_acquire_owned() {
            return Some(permit);
        }
        match timeout_at(deadline, permits.acquire_owned()).await {
            Ok(Ok(permit)) => Some(permit),
            // The semaphore is never closed; only the deadline can end the wait.
            _ => None,
        }
    }

    fn closed(&self) -> ClientError {
        ClientError::ConnectionClosed {
            addr: self.shared.addr.clone(),
        }
    }
}

fn encode(request: &Command) -> Result<Bytes, ClientError> {
    let mut frame = BytesMut::new();
    encode_frame(request, &mut frame).map_err(|source| ClientError::Encode {
        code: request.code,
        source,
    })?;
    Ok(frame.freeze())
}

async fn write_frames(mut writer: OwnedWriteHalf, mut queued: mpsc::Receiver<Bytes>) {
    let mut batch = BytesMut::with_capacity(WRITE_BATCH_BYTES_MAX);
    while let Some(frame) = queued.recv().await {
        if frame.len() >= WRITE_DIRECT_BYTES_MIN {
            if writer.write_all(&frame).await.is_err() {
                break;
            }
            continue;
        }
        batch.extend_from_slice(&frame);
        // Let the other tasks that are ready queue their frames before the write: a burst of
        // responses wakes many callers at once, and their next requests then share one system
        // call instead of taking one each.
        tokio::task::yield_now().await;
        while batch.len() < WRITE_BATCH_BYTES_MAX {
            match queued.try_recv() {
                Ok(frame) => batch.extend_from_slice(&frame),
                Err(_) => break,
            }
        }
        if writer.write_all(&batch).await.is_err() {
            break;
        }
        batch.clear();
    }
    let _ = writer.shutdown().await;
}

/// Ends the waits that passed their deadline. It sleeps until the earliest deadline (callers
/// that register an earlier one wake it), or until a first waiter arrives.
async fn expire_waiters(pending: Arc<Mutex<Pending>>, wake: Arc<Notify>) {
    loop {
        let next = {
            let mut pending = lock(&pending);
            if pending.closed {
                return;
            }
            let now = Instant::now();
            pending.waiters.retain(|_, waiter| waiter.deadline > now);
            pending.next_expiry = pending.waiters.values().map(|w| w.deadline).min();
            pending.next_expiry
        };
        match next {
            None => wake.notified().await,
            Some(deadline) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => {}
                    _ = wake.notified() => {}
                }
            }
        }
    }
}

async fn read_frames(
    addr: String,
    mut reader: OwnedReadHalf,
    pending: Arc<Mutex<Pending>>,
    closed: Arc<AtomicBool>,
    replies: mpsc::WeakSender<Bytes>,
    server_requests: broadcast::Sender<ServerRequest>,
) {
    let mut input = BytesMut::with_capacity(READ_BUFFER_BYTES);
    'read: loop {
        loop {
            match decode_frame(&mut input) {
                Ok(Some(command)) if command.is_response() => {
                    let waiter = lock(&pending).waiters.remove(&command.opaque);
                    // No waiter: the caller timed out or gave up; the response is dropped.
                    if let Some(waiter) = waiter {
                        let _ = waiter.sender.send(command);
                    }
                }
                Ok(Some(command)) => {
                    answer_server_request(&addr, command, &replies, &server_requests)
                }
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(%addr, %error, "closing connection: malformed frame");
                    break 'read;
                }
            }
        }
        match reader.read_buf(&mut input).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let mut pending = lock(&pending);
    pending.closed = true;
    closed.store(true, Ordering::Release);
    // Dropping the senders wakes every waiter with "closed".
    pending.waiters.clear();
}

/// Publishes a server request to whoever listens (consumers watch for
/// NOTIFY_CONSUMER_IDS_CHANGED) and refuses the ones that expect an answer we do not give.
fn answer_server_request(
    addr: &str,
    command: Command,
    replies: &mpsc::WeakSender<Bytes>,
    server_requests: &broadcast::Sender<ServerRequest>,
) {
    if !command.is_oneway() {
        let response = command
            .response_to(response_code::REQUEST_CODE_NOT_SUPPORTED)
            .with_remark(format!("request code {} is not supported", command.code));
        if let (Ok(frame), Some(replies)) = (encode(&response), replies.upgrade()) {
            let _ = replies.try_send(frame);
        }
    }
    // No subscriber is fine: nobody needs to hear about it.
    let _ = server_requests.send(ServerRequest {
        addr: addr.to_owned(),
        command,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_wire::Encoding;
    use tokio::net::TcpListener;

    /// A server on loopback that reads everything and answers nothing, until it is told to
    /// close the connection.
    async fn silent_server() -> (String, oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let (close, closed) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let mut sink = [0u8; 4096];
            tokio::select! {
                _ = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} } => {}
                _ = closed => {}
            }
        });
        (addr, close)
    }

    async fn connect(addr: &str) -> Connection {
        let (server_requests, _) = broadcast::channel(4);
        Connection::connect(addr, &ConnectionLimits::default(), server_requests)
            .await
            .expect("connect")
    }

    /// A call with a 30 s timeout, running in the background.
    fn long_call(connection: &Connection) -> JoinHandle<Result<Command, ClientError>> {
        let connection = connection.clone();
        tokio::spawn(async move {
            let request = Command::request(34, Encoding::RocketMq);
            connection.call(request, Duration::from_secs(30)).await
        })
    }

    #[tokio::test]
    async fn a_short_deadline_expires_while_a_longer_one_still_waits() {
        let (addr, _close) = silent_server().await;
        let connection = connect(&addr).await;
        let long = long_call(&connection);
        // Let the long wait register first: the short one must wake the expiry task early.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        let request = Command::request(34, Encoding::RocketMq);
        let result = connection.call(request, Duration::from_millis(200)).await;
        let waited = started.elapsed();
        assert!(
            matches!(
                result,
                Err(ClientError::Timeout {
                    timeout_ms: 200,
                    ..
                })
            ),
            "{result:?}"
        );
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert!(!long.is_finished(), "the 30 s wait ended early");
        long.abort();
    }

    #[tokio::test]
    async fn waits_end_with_closed_when_the_server_goes_away() {
        let (addr, close) = silent_server().await;
        let connection = connect(&addr).await;
        let waiting = long_call(&connection);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = close.send(());
        let result = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the wait ended")
            .expect("task");
        assert!(
            matches!(result, Err(ClientError::ConnectionClosed { .. })),
            "{result:?}"
        );
        assert!(connection.is_closed());
    }
}
