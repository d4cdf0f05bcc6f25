//! A client connection as the handlers see it: a way to send frames back, the peer's address,
//! and a counter for the requests the broker itself sends (NOTIFY_CONSUMER_IDS_CHANGED).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use quiver_wire::{Command, Encoding, ExtFields};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

pub type ConnectionId = u64;

/// A frame for the writer, with the permit that bounds its kind: an answer holds the in-flight
/// permit of the request it answers, a broker request one of `BROKER_REQUESTS_QUEUED_MAX`. The
/// writer lets the permit go once the frame is written, so a client that stops reading stops
/// the broker from reading its requests and from queuing notifications for it, instead of
/// growing this queue.
pub struct Outgoing {
    pub command: Command,
    pub permit: Option<OwnedSemaphorePermit>,
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
        };
        (connection, receiver)
    }

    fn queue(&self, command: Command, permit: Option<OwnedSemaphorePermit>) -> bool {
        self.outgoing.send(Outgoing { command, permit }).is_ok()
    }

    /// Sends a oneway request to the client, with the broker's own opaque sequence. False when
    /// the connection is gone, or when `BROKER_REQUESTS_QUEUED_MAX` are still waiting to be
    /// written (the request is dropped).
    pub fn send_oneway_request(&self, code: i32, ext: ExtFields, encoding: Encoding) -> bool {
        let Ok(permit) = self.broker_requests.clone().try_acquire_owned() else {
            return false;
        };
        let opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed);
        self.queue(
            Command::request(code, encoding)
                .with_ext(ext)
                .with_opaque(opaque)
                .oneway(),
            Some(permit),
        )
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
    permit: OwnedSemaphorePermit,
}

impl Responder {
    pub fn new(connection: Connection, oneway: bool, permit: OwnedSemaphorePermit) -> Responder {
        Responder {
            connection,
            oneway,
            permit,
        }
    }

    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    pub fn reply(self, response: Command) {
        if !self.oneway {
            self.connection.queue(response, Some(self.permit));
        }
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
}
