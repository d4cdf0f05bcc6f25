//! A crash harness: many producers send while the broker is killed with SIGKILL, recording
//! every acknowledged message; after a restart, checks decide what had to survive.
//!
//! What a kill -9 tests: the process loses its memory but the kernel keeps the page cache, so
//! it checks recovery logic (torn groups, ConsumeQueues rebuilt from the CommitLog, offsets
//! kept), not power loss. Randomness comes from a seed the caller passes and prints.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::message::StoredMessage;
use quiver_wire::{Command, Encoding, ExtFields};

use crate::client::{SendOptions, WireClient};
use crate::wait_until;

/// Messages one pull asks for while reading a queue back.
const PULL_BATCH_MESSAGES: i32 = 32;
/// How long a producer waits for one answer; a killed broker closes the socket at once.
const SEND_TIMEOUT: Duration = Duration::from_secs(20);

/// One acknowledged send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub queue_id: i32,
    pub queue_offset: i64,
    /// CommitLog position, from the offset message id in the response.
    pub position: u64,
    pub body: Vec<u8>,
}

/// A small deterministic generator (xorshift64*), so a failing round can be replayed from
/// its printed seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform enough in `[low, high)` for picking test moments.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        assert!(low < high, "empty range");
        low + self.next_u64() % (high - low)
    }
}

/// Producers sending to one topic until stopped or until the broker goes away.
pub struct Producers {
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Vec<Ack>>>,
    /// Why each producer that stopped on its own stopped, in the order they stopped.
    stopped: Arc<Mutex<Vec<String>>>,
    threads: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Producers {
    /// Starts `count` producers, each on its own connection with binary headers, each
    /// sending bodies of 1 to `body_bytes_max` bytes that name the seed, the producer and a
    /// sequence number (so every body is unique, across rounds on one topic too), to queues
    /// chosen by the seed.
    pub fn start(
        broker: SocketAddr,
        topic: &str,
        queues: i32,
        count: usize,
        body_bytes_max: usize,
        seed: u64,
    ) -> anyhow::Result<Producers> {
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(Mutex::new(Vec::new()));
        let stopped = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::with_capacity(count);
        for producer in 0..count {
            let mut client = WireClient::connect(broker, Encoding::RocketMq)?;
            client.set_read_timeout(SEND_TIMEOUT)?;
            let (stop, acks, topic) = (stop.clone(), acks.clone(), topic.to_string());
            let stopped = stopped.clone();
            let mut rng = Rng::new(seed ^ (producer as u64 + 1).wrapping_mul(0x9E37_79B9));
            threads.push(std::thread::spawn(move || {
                let result = produce(
                    &mut client,
                    &topic,
                    queues,
                    (seed, producer),
                    body_bytes_max,
                    &mut rng,
                    &stop,
                    &acks,
                );
                if !stop.load(Ordering::Relaxed) {
                    let why = match &result {
                        Ok(reason) => reason.clone(),
                        Err(error) => format!("{error:#}"),
                    };
                    stopped
                        .lock()
                        .expect("stop lock poisoned")
                        .push(format!("producer {producer}: {why}"));
                }
                result.map(drop)
            }));
        }
        Ok(Producers {
            stop,
            acks,
            stopped,
            threads,
        })
    }

    pub fn acked(&self) -> usize {
        self.acks.lock().expect("ack lock poisoned").len()
    }

    /// Why the producers that stopped on their own stopped; all of them once the broker died.
    pub fn stopped(&self) -> Vec<String> {
        self.stopped.lock().expect("stop lock poisoned").clone()
    }

    /// Stops the producers (they also stop on their own when the broker dies) and returns
    /// every acknowledged send. A producer that got a response other than SUCCESS, or a
    /// SYNC_MASTER's "no slave confirmed it", fails.
    pub fn finish(self) -> anyhow::Result<Vec<Ack>> {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            thread
                .join()
                .map_err(|_| anyhow::anyhow!("a producer panicked"))??;
        }
        let acks = std::mem::take(&mut *self.acks.lock().expect("ack lock poisoned"));
        Ok(acks)
    }
}

#[allow(clippy::too_many_arguments)]
fn produce(
    client: &mut WireClient,
    topic: &str,
    queues: i32,
    (seed, producer): (u64, usize),
    body_bytes_max: usize,
    rng: &mut Rng,
    stop: &AtomicBool,
    acks: &Mutex<Vec<Ack>>,
) -> anyhow::Result<String> {
    let (mut sequence, mut acked, mut unconfirmed) = (0u64, 0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let queue_id = rng.range(0, queues as u64) as i32;
        let header = format!("s{seed:x}-p{producer}-m{sequence}-");
        let size = (rng.range(1, body_bytes_max as u64 + 1) as usize).max(header.len());
        let mut body = header.into_bytes();
        body.resize(size, b'a' + (sequence % 26) as u8);
        let options = SendOptions {
            queue_id: Some(queue_id),
            ..SendOptions::default()
        };
        // Any I/O error means the broker is gone: the send is not acknowledged.
        let response = match client.send(topic, &body, &options) {
            Ok(response) => response,
            Err(error) => {
                return Ok(format!(
                    "connection ended after {acked} acks and {unconfirmed} unconfirmed: {error:#}"
                ))
            }
        };
        sequence += 1;
        // A SYNC_MASTER stored the message but no slave confirmed it in time: an honest
        // "not acknowledged", so it is not recorded, and the producer goes on.
        if matches!(
            response.code,
            response_code::FLUSH_SLAVE_TIMEOUT | response_code::SLAVE_NOT_AVAILABLE
        ) {
            unconfirmed += 1;
            continue;
        }
        if response.code != response_code::SUCCESS {
            bail!(
                "send answered {} ({:?}) before the kill",
                response.code,
                response.remark
            );
        }
        let queue_offset = ext_i64(&response, "queueOffset")?;
        let msg_id = response.ext_get("msgId").context("msgId missing")?;
        acks.lock().expect("ack lock poisoned").push(Ack {
            queue_id,
            queue_offset,
            position: position_of_msg_id(msg_id)?,
            body,
        });
        acked += 1;
    }
    Ok(format!(
        "stopped after {acked} acks and {unconfirmed} unconfirmed"
    ))
}

/// The CommitLog position in an offset message id: its last 16 hex digits.
pub fn position_of_msg_id(msg_id: &str) -> anyhow::Result<u64> {
    let hex = msg_id
        .len()
        .checked_sub(16)
        .and_then(|at| msg_id.get(at..))
        .context("msgId shorter than 16 digits")?;
    u64::from_str_radix(hex, 16).with_context(|| format!("msgId {msg_id} is not hex"))
}

fn ext_i64(command: &Command, key: &str) -> anyhow::Result<i64> {
    command
        .ext_get(key)
        .with_context(|| format!("{key} missing"))?
        .parse()
        .with_context(|| format!("{key} is not a number"))
}

/// Kills the broker once `ready()` holds and at least `acks_min` sends were acknowledged;
/// fails if that takes longer than `timeout`.
pub fn kill_when(
    producers: &Producers,
    acks_min: usize,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
    kill: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let count = producers.threads.len();
    let reached = wait_until(timeout, || {
        if producers.acked() >= acks_min && ready() {
            return Some(true);
        }
        // Every producer gave up before the kill: waiting longer cannot help.
        (producers.stopped().len() == count).then_some(false)
    });
    ensure!(
        reached == Some(true),
        "{acks_min} acknowledgements not reached in {timeout:?}: {} acked; stopped producers: {:?}",
        producers.acked(),
        producers.stopped()
    );
    kill()
}

/// The CommitLog flushed position in a store checkpoint file. A store killed before its first
/// checkpoint round (one a second under sync flush) has none yet: it vouches for nothing, 0.
pub fn checkpoint_flushed_position(path: &Path) -> anyhow::Result<u64> {
    match quiver_store::read_checkpoint(path).with_context(|| format!("read {}", path.display()))? {
        Some(Ok(checkpoint)) => Ok(checkpoint.commitlog_flushed_position),
        Some(Err(error)) => bail!("{} is not a checkpoint: {error}", path.display()),
        None => Ok(0),
    }
}

/// Reads a whole queue with pulls from offset 0, failing on any unexpected answer.
pub fn read_queue(
    client: &mut WireClient,
    topic: &str,
    queue_id: i32,
) -> anyhow::Result<Vec<StoredMessage>> {
    let mut messages = Vec::new();
    let mut offset = 0i64;
    loop {
        let response = client.pull(
            topic,
            "crash_check",
            queue_id,
            offset,
            PULL_BATCH_MESSAGES,
            0,
        )?;
        match response.code {
            response_code::SUCCESS => {
                let batch = StoredMessage::decode_all(&response.body)?;
                ensure!(!batch.is_empty(), "SUCCESS pull with no messages");
                offset = ext_i64(&response, "nextBeginOffset")?;
                messages.extend(batch);
            }
            response_code::PULL_NOT_FOUND => return Ok(messages),
            other => bail!(
                "pull of queue {queue_id} answered {other}: {:?}",
                response.remark
            ),
        }
    }
}

pub fn max_offset(client: &mut WireClient, topic: &str, queue_id: i32) -> anyhow::Result<i64> {
    let request = Command::request(request_code::GET_MAX_OFFSET, Encoding::Json).with_ext(
        ExtFields::new()
            .with("topic", topic)
            .with("queueId", queue_id),
    );
    ext_i64(&client.call(request)?, "offset")
}

/// What a check found.
#[derive(Debug, Clone, Default)]
pub struct Survival {
    pub stored: usize,
    pub acked: usize,
    /// Acknowledged sends that had to survive.
    pub required: usize,
}

/// Checks a restarted broker against the acknowledgements: every queue reads back as offsets
/// 0, 1, 2, ... with no hole and no body twice; its max offset equals what was read; every
/// acknowledged send for which `required` holds is there at its offset with its body; and any
/// other acknowledged send that is there is at its own offset too.
pub fn check_survival(
    client: &mut WireClient,
    topic: &str,
    queues: i32,
    acks: &[Ack],
    required: impl Fn(&Ack) -> bool,
) -> anyhow::Result<Survival> {
    let mut by_queue: BTreeMap<i32, BTreeMap<i64, &Ack>> = BTreeMap::new();
    for ack in acks {
        let previous = by_queue
            .entry(ack.queue_id)
            .or_default()
            .insert(ack.queue_offset, ack);
        ensure!(
            previous.is_none(),
            "offset {} of queue {} acknowledged twice",
            ack.queue_offset,
            ack.queue_id
        );
    }
    let mut survival = Survival {
        acked: acks.len(),
        ..Survival::default()
    };
    for queue_id in 0..queues {
        let stored = read_queue(client, topic, queue_id)?;
        let max = max_offset(client, topic, queue_id)?;
        ensure!(
            max == stored.len() as i64,
            "queue {queue_id}: max offset {max} but {} messages read",
            stored.len()
        );
        let mut bodies = HashSet::new();
        for (index, message) in stored.iter().enumerate() {
            ensure!(
                message.queue_offset == index as i64,
                "queue {queue_id}: message {index} has offset {} (a hole or a duplicate)",
                message.queue_offset
            );
            ensure!(
                bodies.insert(message.body.clone()),
                "queue {queue_id}: a body is stored twice (offset {index})"
            );
        }
        let acked = by_queue.remove(&queue_id).unwrap_or_default();
        for (offset, ack) in acked {
            let found = stored.get(offset as usize);
            if required(ack) {
                survival.required += 1;
                ensure!(
                    found.is_some(),
                    "queue {queue_id}: acknowledged offset {offset} is lost"
                );
            }
            if let Some(message) = found {
                ensure!(
                    message.body.as_ref() == ack.body.as_slice(),
                    "queue {queue_id}: offset {offset} holds another body than the one acknowledged"
                );
            }
        }
        survival.stored += stored.len();
    }
    ensure!(by_queue.is_empty(), "acknowledged queues beyond {queues}");
    Ok(survival)
}

/// Commits consumer offsets for `group` (UPDATE_CONSUMER_OFFSET).
pub fn commit_offsets(
    client: &mut WireClient,
    group: &str,
    topic: &str,
    offsets: &BTreeMap<i32, i64>,
) -> anyhow::Result<()> {
    for (queue_id, offset) in offsets {
        let update = Command::request(request_code::UPDATE_CONSUMER_OFFSET, Encoding::Json)
            .with_ext(
                ExtFields::new()
                    .with("consumerGroup", group)
                    .with("topic", topic)
                    .with("queueId", *queue_id)
                    .with("commitOffset", *offset),
            );
        let response = client.call(update)?;
        ensure!(
            response.code == response_code::SUCCESS,
            "commit offset answered {}: {:?}",
            response.code,
            response.remark
        );
    }
    Ok(())
}

/// The committed offset of `group` on a queue, None if there is none.
pub fn committed_offset(
    client: &mut WireClient,
    group: &str,
    topic: &str,
    queue_id: i32,
) -> anyhow::Result<Option<i64>> {
    let query = Command::request(request_code::QUERY_CONSUMER_OFFSET, Encoding::Json).with_ext(
        ExtFields::new()
            .with("consumerGroup", group)
            .with("topic", topic)
            .with("queueId", queue_id),
    );
    let response = client.call(query)?;
    if response.code != response_code::SUCCESS {
        return Ok(None);
    }
    Ok(Some(ext_i64(&response, "offset")?))
}
