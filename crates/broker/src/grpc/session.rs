//! A gRPC client as the handlers see it: a `Connection` of its own (one per client id, as the
//! proxy keeps one per client), on which each call's remoting request is handled and answered,
//! and through which the broker's own requests to the client (a transaction check) reach its
//! telemetry stream. The session holds what the client said of itself in its settings.
//!
//! Bounds: sessions at most `quiverGrpcClientsMax` (then RESOURCE_EXHAUSTED), each with the
//! in-flight requests and byte budget of a remoting connection
//! (`quiverConnectionBytesMax`); a session unused for `IDLE_MS` with no telemetry stream open
//! is ended, which unregisters its client as a closed connection does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use quiver_proto::v2::{ClientType, Settings, TelemetryCommand};
use quiver_wire::{Command, LanguageCode};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinHandle;

use crate::budget::{answer_bytes, Budget, Budgets, Held};
use crate::clock::now_ms;
use crate::connection::{Connection, Outgoing};
use crate::server::{handle_one, CONNECTION_BYTES_KEY};
use crate::state::Broker;

/// A session with no call for this long and no telemetry stream is ended (clients heartbeat
/// every 10 s and keep their telemetry stream open).
const IDLE_MS: i64 = 120_000;
/// How long a call waits for room in the byte budgets before it is refused.
const ROOM_WAIT_MS: u64 = 10_000;

/// Half messages whose outcome is not known yet, by transaction id: what END_TRANSACTION needs
/// that the gRPC call does not carry, from the send's answer or the broker's check. At most this
/// many are kept, for all clients together; past it the oldest are forgotten (the broker's
/// check asks their producers again, and the answer names the half message anew).
const HALF_MESSAGES_MAX: usize = 100_000;

/// What END_TRANSACTION names of a half message.
#[derive(Clone, Debug)]
pub struct HalfMessage {
    pub producer_group: String,
    pub topic: String,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    pub message_id: String,
}

#[derive(Default)]
struct HalfMessages {
    by_id: HashMap<String, HalfMessage>,
    order: std::collections::VecDeque<String>,
}

impl HalfMessages {
    fn remember(&mut self, transaction_id: String, half: HalfMessage) {
        if self.by_id.insert(transaction_id.clone(), half).is_none() {
            self.order.push_back(transaction_id);
        }
        // Bounded by the order, which also holds the ids of halves already ended.
        while self.order.len() > HALF_MESSAGES_MAX {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.by_id.remove(&oldest);
        }
    }
}

/// Why a call could not be handled.
#[derive(Debug)]
pub enum Refused {
    /// The byte budget stayed full (`quiverConnectionBytesMax` / `quiverBrokerBytesMax`).
    Busy(String),
    /// The session ended while the call waited for its answer.
    Ended,
}

/// What a client says of itself: in its call metadata and on its telemetry stream.
#[derive(Clone, Debug, Default)]
pub struct ClientSettings {
    pub settings: Option<Settings>,
    pub language: Option<LanguageCode>,
    pub version: i32,
}

impl ClientSettings {
    pub fn client_type(&self) -> ClientType {
        self.settings
            .as_ref()
            .and_then(|s| s.client_type)
            .and_then(|t| ClientType::try_from(t).ok())
            .unwrap_or(ClientType::Unspecified)
    }

    /// Whether the broker told the client its group consumes in order.
    pub fn fifo(&self) -> bool {
        match self.settings.as_ref().and_then(|s| s.pub_sub.as_ref()) {
            Some(quiver_proto::v2::settings::PubSub::Subscription(subscription)) => {
                subscription.fifo.unwrap_or(false)
            }
            _ => false,
        }
    }
}

pub struct Session {
    pub client_id: String,
    pub connection: Connection,
    broker: Arc<Broker>,
    waiting: Mutex<HashMap<i32, oneshot::Sender<Outgoing>>>,
    next_opaque: AtomicI32,
    in_flight: Arc<Semaphore>,
    budgets: Budgets,
    client: Mutex<ClientSettings>,
    /// The open telemetry stream's sender, for the broker's commands to the client.
    telemetry: Mutex<Option<mpsc::Sender<Result<TelemetryCommand, tonic::Status>>>>,
    last_used_ms: AtomicI64,
    router: Mutex<Option<JoinHandle<()>>>,
    halves: Arc<Mutex<HalfMessages>>,
}

impl Session {
    fn start(
        broker: &Arc<Broker>,
        client_id: &str,
        peer: SocketAddr,
        halves: Arc<Mutex<HalfMessages>>,
    ) -> Arc<Session> {
        let serving = broker.serving();
        let (connection, outgoing) = Connection::new(crate::connection::next_id(), peer);
        let session = Arc::new(Session {
            client_id: client_id.to_string(),
            connection,
            broker: broker.clone(),
            waiting: Mutex::default(),
            next_opaque: AtomicI32::new(1),
            in_flight: Arc::new(Semaphore::new(
                serving.config.requests_in_flight_per_connection_max,
            )),
            budgets: Budgets {
                connection: Budget::new(CONNECTION_BYTES_KEY, serving.config.connection_bytes_max),
                broker: serving.budget.clone(),
            },
            client: Mutex::default(),
            telemetry: Mutex::default(),
            last_used_ms: AtomicI64::new(now_ms()),
            router: Mutex::default(),
            halves,
        });
        let router = tokio::spawn(route(Arc::downgrade(&session), outgoing));
        *lock(&session.router) = Some(router);
        session
    }

    /// Handles `request` as this client's and waits for its answer.
    pub async fn call(&self, request: Command) -> Result<Command, Refused> {
        self.touch();
        let held = self.admit(answer_bytes(&request)).await?;
        let opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed);
        let (answered, answer) = oneshot::channel();
        lock(&self.waiting).insert(opaque, answered);
        // A call the client abandons leaves no entry behind.
        let _unwait = Unwait {
            session: self,
            opaque,
        };
        handle_one(
            &self.broker,
            &self.connection,
            request.with_opaque(opaque),
            held,
        )
        .await;
        let Outgoing { command, files, .. } = answer.await.map_err(|_| Refused::Ended)?;
        if files.is_empty() {
            return Ok(command);
        }
        // A pull's records left in the store's files: read in, as gRPC needs them whole.
        let body = quiver_store::assemble(&command.body, &files).map_err(|error| {
            Refused::Busy(format!("records could not be read from the store: {error}"))
        })?;
        Ok(command.with_body(body))
    }

    /// The request's place among the in-flight requests and its bytes in the budgets.
    async fn admit(&self, bytes: usize) -> Result<Held, Refused> {
        let room = async {
            self.budgets.room(&self.client_id).await;
            let permit = self.in_flight.clone().acquire_owned().await;
            let permit = permit.expect("the in-flight semaphore is never closed");
            self.budgets.hold(bytes).with_permit(permit)
        };
        tokio::time::timeout(Duration::from_millis(ROOM_WAIT_MS), room)
            .await
            .map_err(|_| {
                Refused::Busy(format!(
                    "too many requests in flight or too many bytes held for client {} \
                     ({CONNECTION_BYTES_KEY}, quiverBrokerBytesMax)",
                    self.client_id
                ))
            })
    }

    pub fn remember_half(&self, transaction_id: String, half: HalfMessage) {
        lock(&self.halves).remember(transaction_id, half);
    }

    pub fn half(&self, transaction_id: &str) -> Option<HalfMessage> {
        lock(&self.halves).by_id.get(transaction_id).cloned()
    }

    /// Forgets a half message once its outcome is stored (its id stays in the eviction order
    /// until its turn comes).
    pub fn forget_half(&self, transaction_id: &str) {
        lock(&self.halves).by_id.remove(transaction_id);
    }

    fn touch(&self) {
        self.last_used_ms.store(now_ms(), Ordering::Relaxed);
    }

    pub fn client(&self) -> ClientSettings {
        lock(&self.client).clone()
    }

    pub fn set_settings(&self, settings: Settings) {
        lock(&self.client).settings = Some(settings);
    }

    /// Records the client's language and version (from its calls' metadata), once.
    pub fn identify(&self, language: LanguageCode, version: i32) {
        let mut client = lock(&self.client);
        if client.language.is_none() {
            client.language = Some(language);
            client.version = version;
            self.connection.identify(language, version);
        }
    }

    /// The telemetry stream now open; a later one replaces it.
    pub fn set_telemetry(&self, sender: mpsc::Sender<Result<TelemetryCommand, tonic::Status>>) {
        *lock(&self.telemetry) = Some(sender);
        self.touch();
    }

    /// The telemetry stream ended (it is forgotten only if it is still the one held).
    pub fn telemetry_ended(&self, sender: &mpsc::Sender<Result<TelemetryCommand, tonic::Status>>) {
        let mut held = lock(&self.telemetry);
        if held.as_ref().is_some_and(|open| open.same_channel(sender)) {
            *held = None;
        }
        self.touch();
    }

    /// Sends `command` on the client's telemetry stream; false when none is open or it is
    /// full (the command is dropped: the broker asks again later).
    pub fn tell(&self, command: TelemetryCommand) -> bool {
        let sender = lock(&self.telemetry).clone();
        sender.is_some_and(|sender| sender.try_send(Ok(command)).is_ok())
    }

    fn idle(&self, now_ms: i64) -> bool {
        lock(&self.telemetry).is_none()
            && now_ms - self.last_used_ms.load(Ordering::Relaxed) > IDLE_MS
    }

    /// Ends the session: the broker forgets the client as it does a closed connection.
    fn end(&self) {
        if let Some(router) = lock(&self.router).take() {
            router.abort();
        }
        lock(&self.waiting).clear();
        *lock(&self.telemetry) = None;
        self.broker.serving().connection_closed(&self.connection);
    }
}

struct Unwait<'a> {
    session: &'a Session,
    opaque: i32,
}

impl Drop for Unwait<'_> {
    fn drop(&mut self) {
        lock(&self.session.waiting).remove(&self.opaque);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes what the broker queues on the session's connection: answers go to the call that
/// waits for them, the broker's own requests to the client's telemetry stream.
async fn route(session: std::sync::Weak<Session>, mut outgoing: mpsc::UnboundedReceiver<Outgoing>) {
    while let Some(frame) = outgoing.recv().await {
        let Some(session) = session.upgrade() else {
            return;
        };
        if frame.command.is_response() {
            let waiter = lock(&session.waiting).remove(&frame.command.opaque);
            if let Some(waiter) = waiter {
                let _ = waiter.send(frame);
            }
        } else {
            super::service::broker_request(&session, frame.command);
        }
    }
}

/// The sessions, by client id.
pub struct Sessions {
    broker: Arc<Broker>,
    table: Mutex<HashMap<String, Arc<Session>>>,
    halves: Arc<Mutex<HalfMessages>>,
}

impl Sessions {
    pub fn new(broker: Arc<Broker>) -> Sessions {
        Sessions {
            broker,
            table: Mutex::default(),
            halves: Arc::default(),
        }
    }

    /// The session of `client_id`, started on its first call; None when
    /// `quiverGrpcClientsMax` sessions are open.
    pub fn of(&self, client_id: &str, peer: SocketAddr) -> Option<Arc<Session>> {
        let mut table = lock(&self.table);
        if let Some(session) = table.get(client_id) {
            return Some(session.clone());
        }
        if table.len() >= self.broker.serving().config.grpc_clients_max {
            return None;
        }
        let session = Session::start(&self.broker, client_id, peer, self.halves.clone());
        table.insert(client_id.to_string(), session.clone());
        Some(session)
    }

    /// The session of `client_id` if it has one.
    pub fn get(&self, client_id: &str) -> Option<Arc<Session>> {
        lock(&self.table).get(client_id).cloned()
    }

    /// Ends the session of a client that said it terminates.
    pub fn end(&self, client_id: &str) {
        let ended = lock(&self.table).remove(client_id);
        if let Some(session) = ended {
            session.end();
        }
    }

    fn end_idle(&self, now_ms: i64) {
        let ended: Vec<Arc<Session>> = {
            let mut table = lock(&self.table);
            let idle: Vec<String> = table
                .iter()
                .filter(|(_, session)| session.idle(now_ms))
                .map(|(id, _)| id.clone())
                .collect();
            idle.iter().filter_map(|id| table.remove(id)).collect()
        };
        for session in ended {
            tracing::debug!(client = %session.client_id, "gRPC client idle: session ended");
            session.end();
        }
    }

    pub fn end_all(&self) {
        let all: Vec<Arc<Session>> = lock(&self.table).drain().map(|(_, s)| s).collect();
        for session in all {
            session.end();
        }
    }
}

/// Ends idle sessions every 10 s until `shutdown`.
pub async fn sweep(sessions: Arc<Sessions>, mut shutdown: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(Duration::from_secs(10));
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            _ = ticks.tick() => sessions.end_idle(now_ms()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half(offset: i64) -> HalfMessage {
        HalfMessage {
            producer_group: "t".into(),
            topic: "t".into(),
            queue_offset: offset,
            commit_log_offset: offset,
            message_id: offset.to_string(),
        }
    }

    #[test]
    fn past_the_bound_the_oldest_half_messages_are_forgotten_ended_ones_included() {
        let mut halves = HalfMessages::default();
        for id in 0..HALF_MESSAGES_MAX as i64 {
            halves.remember(id.to_string(), half(id));
        }
        // Ended halves still hold their place in the order until their turn comes.
        halves.by_id.remove("1");
        halves.remember("newest".into(), half(-1));
        assert_eq!(halves.order.len(), HALF_MESSAGES_MAX);
        assert!(!halves.by_id.contains_key("0"), "the oldest is forgotten");
        assert!(halves.by_id.contains_key("2") && halves.by_id.contains_key("newest"));
        // The next one takes the ended half's place, and no live one goes.
        halves.remember("after".into(), half(-2));
        assert_eq!(halves.order.len(), HALF_MESSAGES_MAX);
        assert_eq!(halves.by_id.len(), HALF_MESSAGES_MAX);
        assert!(halves.by_id.contains_key("2") && halves.by_id.contains_key("after"));
    }
}
