//! An in-process broker for handler tests: the real state over a real store in a temporary
//! folder, requests dispatched through the one handler table as the connection layer does,
//! and a clock the test sets. No sockets: what a handler returns is carried out here.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use quiver_broker::connection::{Answer, Connection, Outgoing};
use quiver_broker::handler::{self, Call, Reply};
use quiver_broker::{Broker, BrokerConfig, Persisted};
use quiver_store::Append;
use quiver_testkit::{create_topic_request, pull_header, send_request, SendOptions};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::message::StoredMessage;
use quiver_wire::{Command, Encoding};
use tokio::sync::mpsc::UnboundedReceiver;

/// How long a test waits for the store to complete an append.
const APPEND_WAIT: Duration = Duration::from_secs(10);
/// The clock's start: a fixed, realistic time (2026-11-01), so figures in answers are stable.
pub const START_MS: i64 = 1_793_491_200_000;

pub struct Harness {
    pub broker: Arc<Broker>,
    pub connection: Connection,
    /// Frames the broker sends this connection on its own (notifications).
    pub outgoing: UnboundedReceiver<Outgoing>,
    pub now_ms: i64,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_config("")
    }

    /// A broker configured by `broker.conf` lines on top of small test sizes.
    pub fn with_config(properties: &str) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = BrokerConfig {
            store_root: dir.path().join("store"),
            commitlog_segment_bytes: 16 << 20,
            consume_queue_entries_per_file: 1_000,
            index_slots: 1_000,
            index_entries_max: 4_000,
            ..BrokerConfig::default()
        };
        config
            .apply_properties(properties)
            .expect("test broker.conf is valid");
        let (persisted, _) = Persisted::open(&config, START_MS).expect("state opens");
        let store_host: SocketAddr = "127.0.0.1:10911".parse().expect("address");
        let ha_host: SocketAddr = "127.0.0.1:10912".parse().expect("address");
        let broker = Arc::new(Broker::new(
            config, persisted, store_host, ha_host, START_MS,
        ));
        Harness::over(broker, dir, 1)
    }

    /// Closes the store, lets `edit` change the files under the store root, and opens a new
    /// broker over them, as a restart does.
    pub fn reopen(self, edit: impl FnOnce(&std::path::Path)) -> Harness {
        let Harness { broker, _dir, .. } = self;
        let config = broker.lifecycle().config.clone();
        // As a clean stop does: the topics not yet written (changes are batched) are written.
        broker
            .lifecycle()
            .topics
            .persist_if_dirty()
            .expect("the topics are written");
        broker.lifecycle().store.close().expect("the store closes");
        drop(broker);
        edit(&config.store_root);
        let (persisted, _) = Persisted::open(&config, START_MS).expect("state reopens");
        let store_host: SocketAddr = "127.0.0.1:10911".parse().expect("address");
        let ha_host: SocketAddr = "127.0.0.1:10912".parse().expect("address");
        let broker = Arc::new(Broker::new(
            config, persisted, store_host, ha_host, START_MS,
        ));
        Harness::over(broker, _dir, 1)
    }

    fn over(broker: Arc<Broker>, dir: tempfile::TempDir, id: u64) -> Harness {
        let peer: SocketAddr = format!("127.0.0.1:{}", 40_000 + id).parse().expect("peer");
        let (connection, outgoing) = Connection::new(id, peer);
        Harness {
            broker,
            connection,
            outgoing,
            now_ms: START_MS,
            _dir: dir,
        }
    }

    /// A second client connection to the same broker, sharing nothing but the broker.
    pub fn second_connection(&self) -> (Connection, UnboundedReceiver<Outgoing>) {
        Connection::new(2, "127.0.0.1:40002".parse().expect("peer"))
    }

    pub fn advance(&mut self, ms: i64) {
        self.now_ms += ms;
    }

    /// What the handler table returns for `request`, at the harness's time.
    pub fn dispatch(&self, request: &Command) -> Reply {
        self.dispatch_on(&self.connection, request)
    }

    pub fn dispatch_on(&self, connection: &Connection, request: &Command) -> Reply {
        let call = Call {
            broker: &self.broker,
            connection,
            now_ms: self.now_ms,
        };
        handler::dispatch(&call, request)
    }

    /// The answer to `request`, with its work carried out: records written (and fsynced with
    /// sync flush) as the connection layer writes them, a wait awaited.
    pub async fn call(&self, request: Command) -> Command {
        self.call_on(&self.connection, request).await
    }

    pub async fn call_on(&self, connection: &Connection, request: Command) -> Command {
        let reply = self.dispatch_on(connection, &request);
        finish(&self.broker, reply).await
    }

    pub async fn send(&self, topic: &str, body: &[u8], options: &SendOptions) -> Command {
        self.call(send_request(topic, body, options, false)).await
    }

    /// Pulls up to 32 messages from `offset`, with a `*` subscription and no suspend.
    pub async fn pull(&self, topic: &str, group: &str, queue_id: i32, offset: i64) -> Command {
        self.call(pull_request(topic, group, queue_id, offset, 0))
            .await
    }

    pub async fn create_topic(&self, topic: &str, queues: i32) -> Command {
        self.call(create_topic_request(topic, queues, Encoding::Json))
            .await
    }
}

/// A pull request; `suspend_ms > 0` sets the SUSPEND bit.
pub fn pull_request(
    topic: &str,
    group: &str,
    queue_id: i32,
    offset: i64,
    suspend_ms: i64,
) -> Command {
    use quiver_wire::header::pull_sys_flag::{SUBSCRIPTION, SUSPEND};
    let header = quiver_wire::header::PullMessageRequestHeader {
        queue_offset: offset,
        sys_flag: SUBSCRIPTION | if suspend_ms > 0 { SUSPEND } else { 0 },
        suspend_timeout_millis: suspend_ms,
        ..pull_header(topic, group, queue_id)
    };
    Command::request(request_code::PULL_MESSAGE, Encoding::Json).with_ext(header.to_ext())
}

/// Carries out a reply's work as the connection layer does, and returns the answer.
pub async fn finish(broker: &Broker, reply: Reply) -> Command {
    match reply {
        Reply::Now(response) => response,
        Reply::FromFiles(answer) => whole(answer),
        Reply::Wait(answer) => whole(answer.await),
        Reply::Append { records, answer } => {
            let (done, completed) = mpsc::channel();
            let append = Append {
                records,
                done: Box::new(move |result| {
                    let _ = done.send(answer(result));
                }),
            };
            drop(broker.serving().store.append(vec![append]));
            completed
                .recv_timeout(APPEND_WAIT)
                .expect("the store completes an append")
        }
    }
}

/// The answer with its body whole: the records it left in the store's files read in.
pub fn whole(answer: Answer) -> Command {
    let Answer { command, files } = answer;
    let body = quiver_store::assemble(&command.body, &files).expect("the files are readable");
    command.with_body(body)
}

/// The messages in a pull's answer.
pub fn messages(response: &Command) -> Vec<StoredMessage> {
    assert_eq!(
        response.code,
        response_code::SUCCESS,
        "{:?}",
        response.remark
    );
    let mut rest = &response.body[..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (message, size) = StoredMessage::decode(rest, false).expect("a stored record");
        out.push(message);
        rest = &rest[size..];
    }
    out
}

/// An ext field of an answer.
pub fn field<'a>(response: &'a Command, name: &str) -> &'a str {
    response
        .ext
        .as_ref()
        .and_then(|ext| ext.get(name))
        .unwrap_or_else(|| panic!("no {name} in {response:?}"))
}

pub fn options() -> SendOptions {
    SendOptions::default()
}
