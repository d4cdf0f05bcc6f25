//! A client connection as the handlers see it: a way to send frames back, the peer's address,
//! and the requests the broker itself sends to the client: oneway ones
//! (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE, RESET_CONSUMER_CLIENT_OFFSET) and ones
//! whose answer it waits for (GET_CONSUMER_RUNNING_INFO, PUSH_REPLY_MESSAGE_TO_CLIENT).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use quiver_store::FileSlice;
use quiver_wire::{Command, Encoding, ExtFields, LanguageCode};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::budget::{answer_bytes, Held};

pub type ConnectionId = u64;

/// A new connection's id, unique in the process: the client table tells connections apart by
/// it, whichever port (the main one, the VIP channel, gRPC) they came on.
pub fn next_id() -> ConnectionId {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A frame for the writer, with what bounds its kind: an answer holds the in-flight permit of
/// the request it answers and the bytes of both charged to the byte budgets (`Held`), a broker
/// request one of `BROKER_REQUESTS_QUEUED_MAX`. The writer lets them go once the frame is
/// written, so a client that stops reading stops the broker from reading its requests and from
/// queuing notifications for it, instead of growing this queue.
pub struct Outgoing {
    pub command: Command,
    /// Parts of the body the writer sends from the store's files (`Answer::files`).
    pub files: Vec<FileSlice>,
    pub permit: Option<OwnedSemaphorePermit>,
    pub held: Option<Held>,
}

/// An answer whose body may lie partly in the store's files: a pull's large records, left in
/// the page cache for the writer to send from there. On the wire the body is `command.body`
/// with each of `files` at its place.
pub struct Answer {
    pub command: Command,
    pub files: Vec<FileSlice>,
}

impl From<Command> for Answer {
    fn from(command: Command) -> Answer {
        Answer {
            command,
            files: Vec::new(),
        }
    }
}

/// Requests the broker itself sends (NOTIFY_CONSUMER_IDS_CHANGED) that may wait unwritten on
/// one connection. Past this the next is dropped: they are hints (clients also rebalance on
/// their own every 20 s), and a member that reads nothing must not make the broker hold one
/// more frame for every change another client makes to its group.
pub const BROKER_REQUESTS_QUEUED_MAX: usize = 64;

#[derive(Clone, Debug)]
pub struct Connection {
    pub id: ConnectionId,
    pub peer: SocketAddr,
    outgoing: mpsc::UnboundedSender<Outgoing>,
    next_opaque: Arc<AtomicI32>,
    /// One permit per queued broker request; the writer lets it go once the frame is written.
    broker_requests: Arc<Semaphore>,
    /// The broker's requests waiting for the client's answer, by opaque.
    awaiting: Arc<Mutex<HashMap<i32, oneshot::Sender<Command>>>>,
    /// The client's language and version, from its first heartbeat (for admin listings).
    client: Arc<OnceLock<(LanguageCode, i32)>>,
}

/// Why a request the broker sent a client got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskError {
    /// The connection is gone, or too many broker requests wait unwritten on it.
    NotSent,
    /// The client answered nothing within the time given (or its connection closed first).
    NoAnswer,
}

impl Connection {
    /// The writer half: frames queued on the returned receiver go out in order. The queue is
    /// unbounded, but what enters it is bounded: every response holds one of the connection's
    /// in-flight permits until it is written, and broker requests are capped the same way.
    pub fn new(
        id: ConnectionId,
        peer: SocketAddr,
    ) -> (Connection, mpsc::UnboundedReceiver<Outgoing>) {
        let (outgoing, receiver) = mpsc::unbounded_channel();
        let connection = Connection {
            id,
            peer,
            outgoing,
            next_opaque: Arc::new(AtomicI32::new(1)),
            broker_requests: Arc::new(Semaphore::new(BROKER_REQUESTS_QUEUED_MAX)),
            awaiting: Arc::default(),
            client: Arc::default(),
        };
        (connection, receiver)
    }

    fn queue(&self, command: Command, permit: Option<OwnedSemaphorePermit>) -> bool {
        let held = None;
        self.outgoing
            .send(Outgoing {
                command,
                files: Vec::new(),
                permit,
                held,
            })
            .is_ok()
    }

    /// Sends a oneway request to the client, with the broker's own opaque sequence. False when
    /// the connection is gone, or when `BROKER_REQUESTS_QUEUED_MAX` are still waiting to be
    /// written (the request is dropped).
    pub fn send_oneway_request(&self, code: i32, ext: ExtFields, encoding: Encoding) -> bool {
        self.send_oneway(Command::request(code, encoding).with_ext(ext))
    }

    /// Sends `request` (code, fields and body set by the caller) as a oneway request, under the
    /// same limit as `send_oneway_request`.
    pub fn send_oneway(&self, request: Command) -> bool {
        let Ok(permit) = self.broker_requests.clone().try_acquire_owned() else {
            return false;
        };
        let opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed);
        self.queue(request.with_opaque(opaque).oneway(), Some(permit))
    }

    /// Sends `request` to the client and waits up to `timeout` for its answer.
    pub async fn ask(&self, request: Command, timeout: Duration) -> Result<Command, AskError> {
        let Ok(permit) = self.broker_requests.clone().try_acquire_owned() else {
            return Err(AskError::NotSent);
        };
        let opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed);
        let (answered, answer) = oneshot::channel();
        self.awaiting_table().insert(opaque, answered);
        if !self.queue(request.with_opaque(opaque), Some(permit)) {
            self.awaiting_table().remove(&opaque);
            return Err(AskError::NotSent);
        }
        let result = tokio::time::timeout(timeout, answer).await;
        // Gone already when answered; removed here when it timed out.
        self.awaiting_table().remove(&opaque);
        match result {
            Ok(Ok(response)) => Ok(response),
            _ => Err(AskError::NoAnswer),
        }
    }

    /// Hands a response the client sent to the request of the broker's that waits for it; one
    /// nobody waits for (a NOTIFY's answer, or one past its timeout) is dropped.
    pub fn answered(&self, response: Command) {
        if let Some(waiting) = self.awaiting_table().remove(&response.opaque) {
            let _ = waiting.send(response);
        }
    }

    /// Ends every wait for an answer on this connection: it has closed.
    pub fn abandon_asks(&self) {
        self.awaiting_table().clear();
    }

    fn awaiting_table(&self) -> std::sync::MutexGuard<'_, HashMap<i32, oneshot::Sender<Command>>> {
        self.awaiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records the client's language and version (the first heartbeat's say).
    pub fn identify(&self, language: LanguageCode, version: i32) {
        let _ = self.client.set((language, version));
    }

    /// The client's language and version, once it has sent a heartbeat.
    pub fn client_version(&self) -> Option<(LanguageCode, i32)> {
        self.client.get().copied()
    }

    pub fn is_closed(&self) -> bool {
        self.outgoing.is_closed()
    }

    /// Completes once the writer is gone (the connection failed or stopped writing).
    pub async fn closed(&self) {
        self.outgoing.closed().await
    }
}

/// Answers exactly one request. Dropping it without replying is allowed (oneway requests), and
/// the reply to a oneway request is discarded, since Java clients expect none.
pub struct Responder {
    connection: Connection,
    oneway: bool,
    /// The request's in-flight permit and bytes; the answer's bytes join them.
    held: Held,
}

impl Responder {
    pub fn new(connection: Connection, oneway: bool, held: Held) -> Responder {
        Responder {
            connection,
            oneway,
            held,
        }
    }

    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// Queues the answer for the writer. Its bytes, those it leaves in files too, count
    /// against the budgets until written: they bound what is queued to be written, wherever
    /// it waits.
    pub fn reply(self, answer: impl Into<Answer>) {
        if self.oneway {
            return;
        }
        let Answer { command, files } = answer.into();
        let mut held = self.held;
        let file_bytes: u64 = files.iter().map(FileSlice::len).sum();
        held.add(answer_bytes(&command) + file_bytes as usize);
        let outgoing = Outgoing {
            command,
            files,
            permit: None,
            held: Some(held),
        };
        let _ = self.connection.outgoing.send(outgoing);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_requests_a_client_does_not_read_are_held_up_to_the_limit() {
        let (connection, mut outgoing) = Connection::new(1, "127.0.0.1:1".parse().unwrap());
        let notify = || connection.send_oneway_request(40, ExtFields::new(), Encoding::Json);
        for _ in 0..BROKER_REQUESTS_QUEUED_MAX {
            assert!(notify());
        }
        assert!(!notify(), "one past the limit is dropped");
        // Once the writer has written one (and let its permit go), the next is queued.
        drop(outgoing.try_recv().expect("a queued request"));
        assert!(notify());
        assert!(!notify());
        let mut queued = 0;
        while outgoing.try_recv().is_ok() {
            queued += 1;
        }
        assert_eq!(queued, BROKER_REQUESTS_QUEUED_MAX);
    }

    #[tokio::test]
    async fn an_answer_reaches_the_request_it_answers_and_a_silent_client_times_out() {
        let (connection, mut outgoing) = Connection::new(1, "127.0.0.1:1".parse().unwrap());
        let asking = connection.clone();
        let ask = tokio::spawn(async move {
            let request = Command::request(307, Encoding::Json).with_body(&b"question"[..]);
            asking.ask(request, Duration::from_secs(30)).await
        });
        let sent = outgoing
            .recv()
            .await
            .expect("the request is queued")
            .command;
        assert_eq!(sent.code, 307);
        assert!(!sent.is_oneway());
        // An answer to something else is dropped; the one with the request's opaque is taken.
        let mut stray = sent.response_to(0).with_body(&b"stray"[..]);
        stray.opaque = sent.opaque + 1000;
        connection.answered(stray);
        connection.answered(sent.response_to(0).with_body(&b"answer"[..]));
        let answer = ask.await.unwrap().expect("answered");
        assert_eq!(&answer.body[..], b"answer");

        let silent = connection
            .ask(
                Command::request(307, Encoding::Json),
                Duration::from_millis(20),
            )
            .await;
        assert_eq!(silent, Err(AskError::NoAnswer));
        assert!(
            connection.awaiting_table().is_empty(),
            "a timed-out ask leaves nothing behind"
        );
        drop(outgoing);
        let gone = connection
            .ask(
                Command::request(307, Encoding::Json),
                Duration::from_secs(30),
            )
            .await;
        assert_eq!(gone, Err(AskError::NotSent));
    }
}
