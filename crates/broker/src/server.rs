//! The broker's TCP shell: accept loop with a connection limit, a reader and a writer task per
//! connection, and a limit on requests in flight per connection (back-pressure: the reader
//! stops reading while the limit is reached).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use quiver_store::{Append, AppendDone, AppendOutcome, FileSlice, FlushMode};
use quiver_wire::code::response_code;
use quiver_wire::{decode_frame, encode_frame, encode_frame_head_for, Command};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinSet;

use crate::budget::{Budget, Budgets, Held};
use crate::clock::now_ms;
use crate::connection::{Connection, Outgoing, Responder};
use crate::ha::Replicated;
use crate::handler::{self, AnswerAppend, Call, Reply};
use crate::state::{Broker, Serving};

/// A connection with no frame for this long is closed: Java clients heartbeat every 30 s.
const IDLE_TIMEOUT_MS: u64 = 120_000;
/// Frames gathered into one write: enough to batch many small responses, small enough that a
/// slow reader does not make us hold much.
const WRITE_BATCH_BYTES_MAX: usize = 256 * 1024;
/// Bodies this large are written from where they are instead of being copied behind their
/// header (a pull or pop answer's records); smaller ones are cheaper to copy than to send as
/// a piece of their own.
const BODY_COPY_BYTES_MAX: usize = 16 * 1024;
/// Pieces handed to one vectored write.
const WRITE_CHUNKS_MAX: usize = 64;
/// Free space offered to a read: it starts small, so idle connections hold little, and doubles
/// while reads fill it, so that a client with many requests in flight has them read at once.
const READ_SPACE_MIN: usize = 4 * 1024;
const READ_SPACE_MAX: usize = 256 * 1024;
/// At shutdown, how long a connection that stopped reading waits for its answers to be written
/// (a client that reads none of them is not waited for longer).
const ANSWER_DRAIN_MS: u64 = 3_000;
/// After that, how long it reads on (and drops what it reads) while the client takes the last
/// answers and closes. Closing with unread input makes the kernel reset the connection, which
/// throws away answers still on their way: the client would see sends it made fail although
/// the broker stored them.
const CLOSE_LINGER_MS: u64 = 1_000;
/// The key of a connection's byte budget, named in the log when it is reached.
pub(crate) const CONNECTION_BYTES_KEY: &str = "quiverConnectionBytesMax";
/// How long the writer may take to finish the write it is in when told to stop.
const WRITER_STOP_MS: u64 = 500;

pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    mut shutdown: watch::Receiver<bool>,
) {
    let serving = broker.serving();
    let permits = Arc::new(Semaphore::new(serving.config.connections_max));
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => break,
            // Reap ended connections, so the set holds only live ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "connection refused: {} connections open", serving.config.connections_max);
            continue;
        };
        let id = crate::connection::next_id();
        let broker = broker.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let (connection, outgoing) = Connection::new(id, peer);
            if let Err(error) =
                serve_connection(stream, &broker, connection.clone(), outgoing, shutdown).await
            {
                tracing::debug!(%peer, %error, "connection ended");
            }
            connection.abandon_asks();
            broker.serving().connection_closed(&connection);
            drop(permit);
        });
    }
    // Nothing more is accepted; the connections stop reading, answer what they read and end.
    // Once every connection task has ended (those that overstay are aborted, their writers
    // with them), none is left to dispatch a request or write an answer after the broker
    // persists its state.
    drop(listener);
    let drain = Duration::from_millis(ANSWER_DRAIN_MS + WRITER_STOP_MS + CLOSE_LINGER_MS + 1_000);
    let ended = tokio::time::timeout(drain, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if ended.is_err() {
        tracing::warn!(
            open = connections.len(),
            "connections still open {drain:?} after the stop; closing them"
        );
        connections.shutdown().await;
    }
}

/// Aborts the task when dropped: a connection's writer ends with its connection task, even
/// when that task is aborted.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

// Longer than a screen on purpose: one loop reads, cuts frames, admits each request against
// its in-flight permits and byte budgets (`try_admit`, `admit`), dispatches and writes a
// read's group, and its exits (a malformed frame, the idle timeout, a stop, a peer gone) leave from
// the middle of it; split further, each part would return an enum of those exits for this
// loop to match again, on the path every request takes.
async fn serve_connection(
    stream: TcpStream,
    broker: &Arc<Broker>,
    connection: Connection,
    outgoing: mpsc::UnboundedReceiver<Outgoing>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let serving = broker.serving();
    stream.set_nodelay(true)?;
    let (mut reader, writer) = stream.into_split();
    let (stop_writer, writer_stop) = oneshot::channel();
    let writer_task = AbortOnDrop(tokio::spawn(write_frames(writer, outgoing, writer_stop)));
    let in_flight = Arc::new(Semaphore::new(
        serving.config.requests_in_flight_per_connection_max,
    ));
    let budgets = Budgets {
        connection: Budget::new(CONNECTION_BYTES_KEY, serving.config.connection_bytes_max),
        broker: serving.budget.clone(),
    };
    // The bytes read and not yet cut into frames (a large frame on its way).
    let mut reading = budgets.hold(0);
    let mut input = BytesMut::with_capacity(READ_SPACE_MIN);
    let mut read_space = READ_SPACE_MIN;
    let idle = Duration::from_millis(IDLE_TIMEOUT_MS);
    let sync_flush = matches!(serving.config.flush, FlushMode::Sync { .. });
    // The records of one read's sends, written as one group once the read is dispatched.
    let mut appends = Vec::new();
    let result = loop {
        let mut now_ms = now_ms();
        loop {
            let unframed = input.len();
            let request = match decode_frame(&mut input) {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(error) => {
                    drop(serving.store.append(std::mem::take(&mut appends)));
                    tracing::warn!(peer = %connection.peer, %error, "closing connection: malformed frame");
                    return Ok(());
                }
            };
            if request.is_response() {
                // The answer to a request the broker sent this client (or to a NOTIFY, which
                // nobody waits for).
                connection.answered(request);
                continue;
            }
            let frame_bytes = unframed - input.len();
            let held = match try_admit(&budgets, &in_flight, frame_bytes) {
                Some(held) => held,
                None => {
                    // Written answers make room and free permits, and the sends read so far
                    // wait to be written.
                    drop(serving.store.append(std::mem::take(&mut appends)));
                    let admitted = admit(&budgets, &in_flight, frame_bytes, connection.peer);
                    match wait_until(admitted, &mut shutdown, &connection).await {
                        Waited::Ready(held) => {
                            now_ms = self::now_ms();
                            held
                        }
                        Waited::Stop => break,
                        Waited::Idle => return Ok(()),
                    }
                }
            };
            let responder = Responder::new(connection.clone(), request.is_oneway(), held);
            let call = Call {
                broker,
                connection: &connection,
                now_ms,
            };
            carry_out(
                broker,
                handler::dispatch(&call, &request),
                responder,
                &mut appends,
            );
        }
        write_read_appends(serving, std::mem::take(&mut appends), sync_flush).await;
        reading.set(input.len());
        // Let the writer send this read's answers before the next read is handled: woken from
        // here it waits in this worker's next-task slot, where no other worker can take it,
        // until this task yields, and reading on while more input is ready would hold the
        // answers back and merge the client's next requests into one ever larger round.
        tokio::task::yield_now().await;
        // A stop while waiting for room is taken by the read's select below.
        if !budgets.has_room() {
            let room = budgets.room(&connection.peer);
            if let Waited::Idle = wait_until(room, &mut shutdown, &connection).await {
                return Ok(());
            }
        }
        if input.capacity() - input.len() < read_space {
            input.reserve(read_space);
        }
        let offered = input.capacity() - input.len();
        let read = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => None,
            // The writer gave up on the peer (or failed): nothing read could be answered.
            _ = connection.closed() => break Ok(()),
            read = tokio::time::timeout(idle, reader.read_buf(&mut input)) => Some(read),
        };
        let Some(read) = read else {
            drain_answers(&in_flight, serving.config).await;
            close_after_answers(stop_writer, writer_task, &mut reader).await;
            return Ok(());
        };
        match read {
            Ok(Ok(0)) | Err(_) => break Ok(()),
            Ok(Ok(read)) => read_space = next_read_space(read_space, read, offered),
            Ok(Err(error)) => break Err(error),
        }
    };
    result
}

/// Handles one request as if `connection` had read it, for a front end with no socket of its
/// own (gRPC, `grpc/session.rs`): dispatched through the one handler table, its records
/// written as a group of their own, its answer queued on the connection's writer queue like
/// any other. `held` is what the request holds of its budgets and in-flight permits.
pub(crate) async fn handle_one(
    broker: &Arc<Broker>,
    connection: &Connection,
    request: Command,
    held: Held,
) {
    let serving = broker.serving();
    let responder = Responder::new(connection.clone(), request.is_oneway(), held);
    let call = Call {
        broker,
        connection,
        now_ms: now_ms(),
    };
    let mut appends = Vec::new();
    carry_out(
        broker,
        handler::dispatch(&call, &request),
        responder,
        &mut appends,
    );
    let sync_flush = matches!(serving.config.flush, FlushMode::Sync { .. });
    write_read_appends(serving, appends, sync_flush).await;
}

/// The space offered to the next read: doubled while reads fill it (up to `READ_SPACE_MAX`),
/// so that a busy client's requests in flight arrive in one read, halved otherwise.
fn next_read_space(read_space: usize, read: usize, offered: usize) -> usize {
    if read == offered {
        (read_space * 2).min(READ_SPACE_MAX)
    } else {
        READ_SPACE_MIN.max(read_space / 2)
    }
}

/// Carries out what a handler returned: an answer now, records for this read's group (answered
/// once the store has them), or a wait on a task of its own.
fn carry_out(broker: &Arc<Broker>, reply: Reply, responder: Responder, appends: &mut Vec<Append>) {
    match reply {
        Reply::Now(response) => responder.reply(response),
        Reply::FromFiles(answer) => responder.reply(answer),
        Reply::Append { records, answer } => appends.push(Append {
            records,
            done: completion(broker, answer, responder),
        }),
        Reply::Wait(answer) => {
            tokio::spawn(async move { responder.reply(answer.await) });
        }
    }
}

/// A request of `frame_bytes` taken in at once: its in-flight permit and its bytes charged to
/// the budgets; None when either has to be waited for.
fn try_admit(budgets: &Budgets, in_flight: &Arc<Semaphore>, frame_bytes: usize) -> Option<Held> {
    if !budgets.has_room() {
        return None;
    }
    let permit = in_flight.clone().try_acquire_owned().ok()?;
    Some(budgets.hold(frame_bytes).with_permit(permit))
}

/// `try_admit`, waiting for room in the budgets and then for a permit.
async fn admit(
    budgets: &Budgets,
    in_flight: &Arc<Semaphore>,
    frame_bytes: usize,
    peer: std::net::SocketAddr,
) -> Held {
    budgets.room(&peer).await;
    let permit = in_flight.clone().acquire_owned().await;
    let permit = permit.expect("the in-flight semaphore is never closed");
    budgets.hold(frame_bytes).with_permit(permit)
}

/// How a wait for an in-flight permit or for room in the byte budgets ended.
enum Waited<T> {
    Ready(T),
    /// The broker is stopping.
    Stop,
    /// The peer read none of its answers for the idle timeout (given up, as one that sends
    /// nothing is, so that it does not hold a connection slot forever), or is gone.
    Idle,
}

async fn wait_until<T>(
    ready: impl std::future::Future<Output = T>,
    shutdown: &mut watch::Receiver<bool>,
    connection: &Connection,
) -> Waited<T> {
    let idle = Duration::from_millis(IDLE_TIMEOUT_MS);
    let wait = tokio::time::timeout(idle, ready);
    let waited = tokio::select! {
        biased;
        _ = shutdown.wait_for(|stop| *stop) => return Waited::Stop,
        // The writer gave up on the peer: nothing more is read from it.
        _ = connection.closed() => return Waited::Idle,
        waited = wait => waited,
    };
    match waited {
        Ok(ready) => Waited::Ready(ready),
        Err(_) => {
            tracing::debug!(peer = %connection.peer, "closing connection: answers unread for the idle timeout");
            Waited::Idle
        }
    }
}

/// A stopping broker's close of a connection whose answers are written: the writer ends
/// between two writes (never inside a frame) and drops its half, which sends FIN after the
/// answers (one stuck on a client that reads nothing is aborted); then the input is read and
/// dropped until the client closes.
async fn close_after_answers(
    stop_writer: oneshot::Sender<()>,
    mut writer_task: AbortOnDrop,
    reader: &mut OwnedReadHalf,
) {
    let _ = stop_writer.send(());
    let writer_stopped = Duration::from_millis(WRITER_STOP_MS);
    let _ = tokio::time::timeout(writer_stopped, &mut writer_task.0).await;
    drop(writer_task);
    linger(reader).await;
}

/// What runs once the store has an append durable: the answer, at once, or on a SYNC_MASTER
/// once a slave has the records too (FLUSH_SLAVE_TIMEOUT when none confirms them in time,
/// SLAVE_NOT_AVAILABLE when no slave is in sync to wait for).
fn completion(broker: &Arc<Broker>, answer: AnswerAppend, responder: Responder) -> AppendDone {
    if !broker.serving().replication.waits_for_slave() {
        return Box::new(move |result| responder.reply(answer(result)));
    }
    let owner = broker.clone();
    Box::new(move |result| {
        let broker = owner.serving();
        let end = result.as_ref().ok().and_then(AppendOutcome::log_end);
        let response = answer(result);
        let Some(end) = end.filter(|_| response.code == response_code::SUCCESS) else {
            return responder.reply(response);
        };
        let written = broker.store.stats().written_position;
        broker.replication.after_replicated(
            end,
            written,
            Box::new(move |replicated| {
                let mut response = response;
                response.code = match replicated {
                    Replicated::Yes => response.code,
                    Replicated::TimedOut => response_code::FLUSH_SLAVE_TIMEOUT,
                    Replicated::NoSlave => response_code::SLAVE_NOT_AVAILABLE,
                };
                responder.reply(response)
            }),
        );
    })
}

/// Writes the sends of one read as one group. Writing on the reader's own thread costs no
/// wake-up: a page-cache write is short. With sync flush the group is written at once but its
/// fdatasync runs after one yield: every other connection whose input is ready in this
/// scheduler turn writes its group meanwhile, and one fdatasync then covers them all instead
/// of one each. Handing the fsync to a task of its own cost a wake-up and a scheduling delay on
/// every group (bench/results/2026-11-22-sync-flush-yield-and-page-zeros.md).
async fn write_read_appends(broker: Serving<'_>, appends: Vec<Append>, sync_flush: bool) {
    // With async flush an empty read has nothing to do: whoever holds the appender writes
    // everything queued before letting go.
    if appends.is_empty() && !sync_flush {
        return;
    }
    let commit = broker.store.append(appends);
    if sync_flush {
        tokio::task::yield_now().await;
    }
    drop(commit);
}

/// Reads and drops input until the client closes, for at most `CLOSE_LINGER_MS`.
async fn linger(reader: &mut OwnedReadHalf) {
    let mut scratch = vec![0u8; READ_SPACE_MIN];
    let _ = tokio::time::timeout(Duration::from_millis(CLOSE_LINGER_MS), async {
        while let Ok(1..) = reader.read(&mut scratch).await {}
    })
    .await;
}

/// Waits until every request this connection read has been answered and the answer written
/// (each holds an in-flight permit until then), for at most `ANSWER_DRAIN_MS`.
async fn drain_answers(in_flight: &Semaphore, config: &crate::config::BrokerConfig) {
    let all = u32::try_from(config.requests_in_flight_per_connection_max).unwrap_or(u32::MAX);
    let drain = Duration::from_millis(ANSWER_DRAIN_MS);
    let _ = tokio::time::timeout(drain, in_flight.acquire_many(all)).await;
}

async fn write_frames(
    mut writer: OwnedWriteHalf,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing>,
    mut stop: oneshot::Receiver<()>,
) {
    // Grown by the answers it encodes: a connection that is answered little holds little.
    let mut buffer = BytesMut::new();
    // What one write sends, in order: encoded frames, large bodies where they already are, and
    // records in the store's files.
    let mut chunks: Vec<Chunk> = Vec::new();
    // The in-flight permits of the answers being written: let go once they are written.
    let mut permits = Vec::new();
    let mut helds = Vec::new();
    let idle = Duration::from_millis(IDLE_TIMEOUT_MS);
    loop {
        // Stopped, or the connection task is gone (its sender dropped).
        let first = tokio::select! {
            biased;
            _ = &mut stop => break,
            first = outgoing.recv() => match first {
                Some(first) => first,
                None => break,
            },
        };
        let mut batch_bytes = encode_or_error(first.command, first.files, &mut buffer, &mut chunks);
        permits.extend(first.permit);
        helds.extend(first.held);
        while batch_bytes < WRITE_BATCH_BYTES_MAX {
            match outgoing.try_recv() {
                Ok(next) => {
                    batch_bytes +=
                        encode_or_error(next.command, next.files, &mut buffer, &mut chunks);
                    permits.extend(next.permit);
                    helds.extend(next.held);
                }
                Err(_) => break,
            }
        }
        if !buffer.is_empty() {
            chunks.push(Chunk::Bytes(buffer.split().freeze()));
        }
        // A peer that takes none of our bytes for the idle timeout is given up: its reader
        // sees the writer gone and closes the connection.
        match tokio::time::timeout(idle, write_chunks(&mut writer, &mut chunks)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                if error.kind() == std::io::ErrorKind::UnexpectedEof {
                    tracing::warn!(%error, "closing connection: a pull answer could not be finished");
                }
                return;
            }
            Err(_) => {
                tracing::debug!("closing connection: nothing written for the idle timeout");
                return;
            }
        }
        permits.clear();
        helds.clear();
        // The chunks were dropped, so the buffer's space is its own again (the next encode
        // takes it back); one a large batch grew is let go.
        if buffer.capacity() > 4 * WRITE_BATCH_BYTES_MAX {
            buffer = BytesMut::new();
        }
    }
}

/// A piece of what the writer sends: bytes in memory, or records in a CommitLog segment with
/// how much of them is sent already.
enum Chunk {
    Bytes(Bytes),
    File(FileSlice, u64),
}

/// Writes `chunks` whole and in order, with as few calls as the socket allows: runs of bytes
/// with one vectored write, records in files with `sendfile`; empties it.
async fn write_chunks(writer: &mut OwnedWriteHalf, chunks: &mut Vec<Chunk>) -> std::io::Result<()> {
    use bytes::Buf;
    let mut first = 0;
    loop {
        while chunks.get(first).is_some_and(|chunk| match chunk {
            Chunk::Bytes(bytes) => bytes.is_empty(),
            Chunk::File(slice, sent) => *sent >= slice.len(),
        }) {
            first += 1;
        }
        if first == chunks.len() {
            break;
        }
        if let Chunk::File(slice, sent) = &mut chunks[first] {
            *sent += send_file_slice(writer, slice, *sent).await? as u64;
            continue;
        }
        let slices: Vec<std::io::IoSlice<'_>> = chunks[first..]
            .iter()
            .take(WRITE_CHUNKS_MAX)
            .map_while(|chunk| match chunk {
                Chunk::Bytes(bytes) => Some(std::io::IoSlice::new(bytes)),
                Chunk::File(..) => None,
            })
            .collect();
        let mut written = writer.write_vectored(&slices).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let Chunk::Bytes(chunk) = &mut chunks[first] else {
                unreachable!("a vectored write covers bytes only");
            };
            if written >= chunk.len() {
                written -= chunk.len();
                first += 1;
            } else {
                chunk.advance(written);
                written = 0;
            }
        }
    }
    chunks.clear();
    Ok(())
}

/// Sends as much of `slice` past its first `sent` bytes as the socket takes once writable.
async fn send_file_slice(
    writer: &OwnedWriteHalf,
    slice: &FileSlice,
    sent: u64,
) -> std::io::Result<usize> {
    use std::os::fd::AsFd;
    let stream: &TcpStream = writer.as_ref();
    loop {
        stream.writable().await?;
        match stream.try_io(tokio::io::Interest::WRITABLE, || {
            slice.send(stream.as_fd(), sent)
        }) {
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => continue,
            sent_now => return sent_now,
        }
    }
}

/// Encodes `command` into `buffer`, or in its place an error answer with the same opaque when
/// it does not fit in a frame (a batch answer's message ids can outgrow one, with a large
/// maxMessageSize). A body of `BODY_COPY_BYTES_MAX` or more is not copied: the buffer so far
/// and the body go to `chunks`, and so do `files`, each at its place in the body. Returns the
/// frame's size.
fn encode_or_error(
    command: Command,
    files: Vec<FileSlice>,
    buffer: &mut BytesMut,
    chunks: &mut Vec<Chunk>,
) -> usize {
    let start = buffer.len();
    let file_bytes: u64 = files.iter().map(FileSlice::len).sum();
    let body_bytes = command.body.len() + file_bytes as usize;
    match encode_frame_head_for(&command, body_bytes, buffer) {
        Ok(()) if files.is_empty() && body_bytes < BODY_COPY_BYTES_MAX => {
            buffer.extend_from_slice(&command.body);
        }
        Ok(()) => {
            let head = buffer.len() - start;
            chunks.push(Chunk::Bytes(buffer.split().freeze()));
            let mut copied = 0;
            for slice in files {
                chunks.push(Chunk::Bytes(command.body.slice(copied..slice.at)));
                copied = slice.at;
                chunks.push(Chunk::File(slice, 0));
            }
            chunks.push(Chunk::Bytes(command.body.slice(copied..)));
            return head + body_bytes;
        }
        Err(error) => {
            tracing::warn!(code = command.code, opaque = command.opaque, %error, "answer does not fit in a frame");
            let fallback = Command {
                code: response_code::SYSTEM_ERROR,
                remark: Some(error.to_string()),
                ext: None,
                body: Default::default(),
                ..command
            };
            encode_frame(&fallback, buffer)
                .expect("an answer with no header fields and no body always fits in a frame");
        }
    }
    buffer.len() - start
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_wire::{Encoding, ExtFields};

    #[test]
    fn an_answer_too_large_for_a_frame_goes_out_as_an_error_with_its_opaque() {
        let request = Command::request(310, Encoding::Json).with_opaque(77);
        let huge = "1".repeat(17 << 20);
        let answer = request
            .response_to(response_code::SUCCESS)
            .with_ext(ExtFields::new().with("msgId", huge));
        let mut buffer = BytesMut::new();
        let mut chunks = Vec::new();
        encode_or_error(answer, Vec::new(), &mut buffer, &mut chunks);
        assert!(chunks.is_empty());
        let sent = decode_frame(&mut buffer).unwrap().unwrap();
        assert_eq!(sent.code, response_code::SYSTEM_ERROR);
        assert_eq!(sent.opaque, 77);
        assert!(sent.is_response());
        assert!(buffer.is_empty());
    }

    /// Large bodies go out as pieces of their own and small ones behind their headers; the
    /// peer reads the same frames in the same order, across partial writes of a full socket.
    #[tokio::test]
    async fn answers_with_large_bodies_reach_the_peer_whole_and_in_order() {
        let answers: Vec<Command> = (0..40)
            .map(|i| {
                let body = vec![i as u8; if i % 3 == 0 { 300_000 + i } else { 100 + i }];
                Command::request(11, Encoding::Json)
                    .with_opaque(i as i32)
                    .response_to(response_code::SUCCESS)
                    .with_body(body)
            })
            .collect();
        let mut buffer = BytesMut::new();
        let mut chunks = Vec::new();
        let mut sizes = 0;
        for answer in &answers {
            sizes += encode_or_error(answer.clone(), Vec::new(), &mut buffer, &mut chunks);
        }
        chunks.push(Chunk::Bytes(buffer.split().freeze()));
        assert!(chunks.len() > 20, "large bodies are pieces of their own");
        let chunk_bytes = |chunk: &Chunk| match chunk {
            Chunk::Bytes(bytes) => bytes.len(),
            Chunk::File(..) => unreachable!("no answer here has files"),
        };
        assert_eq!(sizes, chunks.iter().map(chunk_bytes).sum::<usize>());

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut received = Vec::new();
            socket.read_to_end(&mut received).await.unwrap();
            received
        });
        let (_, mut writer) = TcpStream::connect(addr).await.unwrap().into_split();
        write_chunks(&mut writer, &mut chunks).await.unwrap();
        assert!(chunks.is_empty());
        drop(writer);
        let mut received = BytesMut::from(&reader.await.unwrap()[..]);
        for answer in &answers {
            let got = decode_frame(&mut received).unwrap().expect("a whole frame");
            assert_eq!(got.opaque, answer.opaque);
            assert_eq!(got.body, answer.body);
        }
        assert!(received.is_empty());
    }

    /// Answers whose records are in the store's files go out with `sendfile` between frames
    /// written from memory; the peer reads the same frames in the same order, with a socket
    /// full long enough that sends stop part way.
    #[tokio::test]
    async fn answers_with_records_in_files_reach_the_peer_whole_and_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = quiver_store::StoreConfig::under(dir.path());
        config.segment_bytes = 16 << 20;
        let (store, _) = quiver_store::Store::open(config).expect("open");
        let records: Vec<quiver_store::Record> = (0..240)
            .map(|i| {
                let body = vec![i as u8; if i % 4 == 3 { 200 } else { 50_000 + i }];
                let bytes = quiver_record::RecordBuilder {
                    topic: "T",
                    queue_id: 0,
                    body: &body,
                    store_timestamp_ms: 1,
                    properties: &[],
                }
                .build();
                quiver_store::Record {
                    topic: "T".to_string(),
                    queue_id: 0,
                    tags_code: 0,
                    keys: Vec::new(),
                    store_timestamp_ms: 1,
                    bytes,
                }
            })
            .collect();
        let (done, appended) = std::sync::mpsc::channel();
        let append = Append {
            records,
            done: Box::new(move |result| {
                let _ = done.send(result.is_ok());
            }),
        };
        drop(store.append(vec![append]));
        assert!(appended.recv().expect("appended"));

        let mut expected = Vec::new();
        let mut buffer = BytesMut::new();
        let mut chunks = Vec::new();
        let mut sizes = 0;
        let mut offset = 0;
        let mut with_files = 0;
        while offset < 240 {
            let read = store
                .read_to_send("T", 0, offset, 7, u32::MAX, &|_| true)
                .expect("read");
            offset = read.next_offset;
            let body = quiver_store::assemble(&read.bytes, &read.files).expect("assemble");
            with_files += usize::from(!read.files.is_empty());
            let answer = Command::request(11, Encoding::Json)
                .with_opaque(offset as i32)
                .response_to(response_code::SUCCESS)
                .with_body(read.bytes);
            expected.push((answer.opaque, body));
            sizes += encode_or_error(answer, read.files, &mut buffer, &mut chunks);
            // A small answer from memory between them.
            let small = Command::request(11, Encoding::Json)
                .with_opaque(-(offset as i32))
                .response_to(response_code::SUCCESS)
                .with_body(vec![7u8; 100]);
            expected.push((small.opaque, small.body.to_vec()));
            sizes += encode_or_error(small, Vec::new(), &mut buffer, &mut chunks);
        }
        assert!(with_files > 20, "most answers leave records in files");
        chunks.push(Chunk::Bytes(buffer.split().freeze()));
        let chunk_bytes = |chunk: &Chunk| match chunk {
            Chunk::Bytes(bytes) => bytes.len(),
            Chunk::File(slice, _) => slice.len() as usize,
        };
        assert_eq!(sizes, chunks.iter().map(chunk_bytes).sum::<usize>());

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_, mut writer) = TcpStream::connect(addr).await.unwrap().into_split();
        let (mut socket, _) = listener.accept().await.unwrap();
        // Nothing is read until the writer has sent all it could or finished: the 10 MB
        // fill the socket's buffers first, so sends stop part way and go on when it drains.
        let writing = tokio::spawn(async move {
            write_chunks(&mut writer, &mut chunks)
                .await
                .map(|()| chunks.len())
        });
        let mut received = Vec::new();
        socket.read_to_end(&mut received).await.unwrap();
        assert_eq!(writing.await.unwrap().unwrap(), 0);
        let mut received = BytesMut::from(&received[..]);
        for (opaque, body) in &expected {
            let got = decode_frame(&mut received).unwrap().expect("a whole frame");
            assert_eq!(got.opaque, *opaque);
            assert!(&got.body[..] == body, "answer {opaque}: the body differs");
        }
        assert!(received.is_empty());
        store.close().expect("close");
    }
}
