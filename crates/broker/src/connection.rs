//! A client connection as the handlers see it: a way to send frames back, the peer's address,
//! and a counter for the requests the broker itself sends (NOTIFY_CONSUMER_IDS_CHANGED).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use quiver_wire::{Command, Encoding, ExtFields};
use tokio::sync::{mpsc, OwnedSemaphorePermit};

pub type ConnectionId = u64;

/// A frame for the writer, with the in-flight permit of the request it answers (if any): the
/// writer lets the permit go once the frame is written, so a client that stops reading stops
/// the broker from reading its requests instead of growing this queue.
pub struct Outgoing {
    pub command: Command,
    pub permit: Option<OwnedSemaphorePermit>,
}

#[derive(Clone, Debug)]
pub struct Connection {
    pub id: ConnectionId,
    pub peer: SocketAddr,
    outgoing: mpsc::UnboundedSender<Outgoing>,
    next_opaque: Arc<AtomicI32>,
}

impl Connection {
    /// The writer half: frames queued on the returned receiver go out in order. The queue is
    /// unbounded, but what enters it is bounded: every response holds one of the connection's
    /// in-flight permits until it is written, and broker-initiated requests are rare.
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
        };
        (connection, receiver)
    }

    /// Queues a frame; false when the connection is gone.
    pub fn send(&self, command: Command) -> bool {
        self.queue(command, None)
    }

    fn queue(&self, command: Command, permit: Option<OwnedSemaphorePermit>) -> bool {
        self.outgoing.send(Outgoing { command, permit }).is_ok()
    }

    /// Sends a oneway request to the client, with the broker's own opaque sequence.
    pub fn send_oneway_request(&self, code: i32, ext: ExtFields, encoding: Encoding) -> bool {
        let opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed);
        self.send(
            Command::request(code, encoding)
                .with_ext(ext)
                .with_opaque(opaque)
                .oneway(),
        )
    }

    pub fn is_closed(&self) -> bool {
        self.outgoing.is_closed()
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
