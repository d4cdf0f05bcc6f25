//! `quiver bench produce`.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hdrhistogram::Histogram;
use quiver_client::{
    Client, ClientConfig, ClientError, GrpcProducer, Message, Producer, ProducerConfig, SendResult,
    SendStatus,
};
use serde::Serialize;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use crate::histogram::{new_histogram, Percentiles, Recorder};
use crate::machine::{process_cpu_s, Machine};
use crate::report::{
    progress, Counters, Goal, MeasureStart, NotDurable, OutputStyle, Print, ProduceInterval,
    Summary,
};
use crate::schedule::{wait_until, Schedule, Stop};
use crate::sender::Sender;
use crate::{write_json, BenchError, ProduceArgs};

/// How long the run waits for sends still in flight after it stopped, beyond the send timeout
/// that bounds each of them.
const DRAIN_GRACE_MS: u64 = 1_000;
/// A sender's pause after a failed send (the Java benchmark Producer sleeps 3 s).
const FAILURE_BACKOFF: Duration = Duration::from_secs(3);
/// How often a sleeping sender looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(50);
/// A paced sender leaves the runtime's millisecond timer this long before its due time and
/// waits the rest on the bench's ticker.
const COARSE_WAKE_EARLY: Duration = Duration::from_millis(3);

/// Everything the senders share: the producers, the counters, the latency recorder and the
/// limits of the run.
struct Shared {
    /// Sender `task` uses `producers[task % producers.len()]`.
    producers: Vec<Sender>,
    message: Message,
    batch: usize,
    keys: bool,
    recorder: Recorder,
    messages: AtomicU64,
    bytes: AtomicU64,
    send_failed: AtomicU64,
    response_failed: AtomicU64,
    /// FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE answers, in messages.
    not_durable: [AtomicU64; 3],
    /// Messages left to send with `--messages`; None runs until stopped.
    remaining: Option<AtomicI64>,
    pacer: Option<Pacer>,
    stop: AtomicBool,
    running: AtomicUsize,
    all_done: Notify,
    send_timeout_ms: u64,
}

/// `--rate`: message n is due at start + n / rate, whatever happened to earlier ones.
struct Pacer {
    start: Instant,
    nanos_per_message: f64,
    tickets: AtomicU64,
}

impl Pacer {
    /// When the last of the next `count` messages is due.
    fn next(&self, count: u64) -> Instant {
        let first = self.tickets.fetch_add(count, Ordering::Relaxed);
        let last = first + count - 1;
        self.start + Duration::from_nanos((last as f64 * self.nanos_per_message) as u64)
    }
}

impl Shared {
    /// `batchers` tasks run beside the senders; the run is done when all of them have ended.
    fn new(args: &ProduceArgs, producers: Vec<Sender>, start: Instant, batchers: usize) -> Shared {
        Shared {
            producers,
            message: Message::new(args.topic.clone(), Bytes::from(body(args.size as usize))),
            batch: args.batch as usize,
            keys: args.keys,
            recorder: Recorder::new(args.senders as usize),
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            send_failed: AtomicU64::new(0),
            response_failed: AtomicU64::new(0),
            not_durable: Default::default(),
            remaining: args
                .run
                .messages
                .map(|n| AtomicI64::new(n.min(i64::MAX as u64) as i64)),
            pacer: args.rate.map(|rate| Pacer {
                start,
                nanos_per_message: 1e9 / rate,
                tickets: AtomicU64::new(0),
            }),
            stop: AtomicBool::new(false),
            running: AtomicUsize::new(args.senders as usize + batchers),
            all_done: Notify::new(),
            send_timeout_ms: args.send_timeout_ms,
        }
    }

    fn producer(&self, task: usize) -> &Sender {
        &self.producers[task % self.producers.len()]
    }

    fn counters(&self) -> Counters {
        Counters {
            messages: self.messages.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            send_failed: self.send_failed.load(Ordering::Relaxed),
            response_failed: self.response_failed.load(Ordering::Relaxed),
            not_durable: NotDurable {
                flush_disk_timeout: self.not_durable[0].load(Ordering::Relaxed),
                flush_slave_timeout: self.not_durable[1].load(Ordering::Relaxed),
                slave_not_available: self.not_durable[2].load(Ordering::Relaxed),
            },
        }
    }

    /// Counts `count` messages the broker stored but did not acknowledge as durable; false for
    /// SEND_OK, which the caller counts as sent.
    fn not_durable(&self, status: SendStatus, count: usize) -> bool {
        let index = match status {
            SendStatus::Ok => return false,
            SendStatus::FlushDiskTimeout => 0,
            SendStatus::FlushSlaveTimeout => 1,
            SendStatus::SlaveNotAvailable => 2,
        };
        self.not_durable[index].fetch_add(count as u64, Ordering::Relaxed);
        true
    }

    /// How many of the next `wanted` messages may still be sent.
    fn take(&self, wanted: usize) -> usize {
        if self.stop.load(Ordering::Relaxed) {
            return 0;
        }
        let Some(remaining) = &self.remaining else {
            return wanted;
        };
        let before = remaining.fetch_sub(wanted as i64, Ordering::Relaxed);
        before.clamp(0, wanted as i64) as usize
    }

    /// Counts a send of `count` messages; false when it failed.
    fn finish(
        &self,
        task: usize,
        started: Instant,
        count: usize,
        result: Result<SendResult, ClientError>,
    ) -> bool {
        match result {
            // Answered, so no back-off; but not sent as far as the figures go.
            Ok(sent) if self.not_durable(sent.status, count) => return true,
            Ok(_) => {
                let latency_us = started.elapsed().as_micros() as u64;
                self.recorder.record(task, latency_us);
                self.messages.fetch_add(count as u64, Ordering::Relaxed);
                self.bytes
                    .fetch_add((count * self.message.body.len()) as u64, Ordering::Relaxed);
                return true;
            }
            // Failures count messages, as throughput does, so a batch counts as its size.
            Err(ClientError::Refused { .. }) => {
                self.response_failed
                    .fetch_add(count as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.send_failed.fetch_add(count as u64, Ordering::Relaxed);
            }
        }
        false
    }

    /// Counts a client-side batch: each message's latency from its own start.
    fn finish_each(
        &self,
        task: usize,
        starts: &[Instant],
        result: Result<SendResult, ClientError>,
    ) {
        let count = starts.len();
        match result {
            Ok(sent) if self.not_durable(sent.status, count) => {}
            Ok(_) => {
                let now = Instant::now();
                for started in starts {
                    let latency_us = (now - *started).as_micros() as u64;
                    self.recorder.record(task, latency_us);
                }
                self.messages.fetch_add(count as u64, Ordering::Relaxed);
                self.bytes
                    .fetch_add((count * self.message.body.len()) as u64, Ordering::Relaxed);
            }
            Err(ClientError::Refused { .. }) => {
                self.response_failed
                    .fetch_add(count as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.send_failed.fetch_add(count as u64, Ordering::Relaxed);
            }
        }
    }

    /// Sleeps until `until` or the stop, whichever is first; false when stopped.
    async fn sleep_until(&self, until: Instant) -> bool {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return false;
            }
            let now = Instant::now();
            if now >= until {
                return true;
            }
            tokio::time::sleep_until((now + STOP_CHECK).min(until)).await;
        }
    }

    /// After a failed send, as RocketMQ's benchmark Producer does: a broker that is gone or
    /// refusing is not hammered by every sender in a tight loop.
    async fn back_off(&self) {
        self.sleep_until(Instant::now() + FAILURE_BACKOFF).await;
    }
}

#[derive(Serialize)]
struct Record<'a> {
    tool: &'static str,
    version: &'static str,
    machine: &'a Machine,
    parameters: &'a ProduceArgs,
    intervals: &'a [ProduceInterval],
    summary: &'a Summary,
    stopped_by: Stop,
}

/// What one produce run measured.
pub(crate) struct ProduceOutcome {
    pub intervals: Vec<ProduceInterval>,
    pub summary: Summary,
    pub stopped_by: Stop,
}

/// `quiver bench produce`: one run, its lines, its summary and its files.
pub async fn run(args: ProduceArgs) -> Result<(), BenchError> {
    let machine = Machine::read();
    let print = Print::Lines(args.output);
    let outcome = measure(&args, &machine, print).await?;
    for line in summary_lines(&args, &outcome.summary) {
        println!("{line}");
    }
    if let Some(path) = &args.run.json {
        let record = Record {
            tool: "quiver bench produce",
            version: env!("CARGO_PKG_VERSION"),
            machine: &machine,
            parameters: &args,
            intervals: &outcome.intervals,
            summary: &outcome.summary,
            stopped_by: outcome.stopped_by,
        };
        write_json(path, &record)?;
        println!("Wrote {}", path.display());
    }
    if let Some(path) = &args.run.html {
        let page =
            crate::pages::produce_page(&args, &machine, &outcome.intervals, &outcome.summary);
        crate::html::write(path, &page)?;
        println!("Wrote {}", path.display());
    }
    Ok(())
}

fn summary_lines(args: &ProduceArgs, summary: &Summary) -> Vec<String> {
    match args.output {
        OutputStyle::Rocketmq => summary.lines("Send RT"),
        OutputStyle::Pulsar => pulsar_summary(summary),
    }
}

/// pulsar-perf's closing lines, then the disk's and the machine's.
fn pulsar_summary(summary: &Summary) -> Vec<String> {
    let t = &summary.throughput;
    let l = &summary.latency;
    vec![
        format!(
            "Aggregated throughput stats --- {} records sent --- {:.3} msg/s --- {:.3} Mbit/s",
            summary.counters.messages, t.messages_per_s, t.mbit_per_s
        ),
        format!(
            "Aggregated latency stats --- Latency: mean: {:7.3} ms - med: {:7.3} - 95pct: {:7.3} - 99pct: {:7.3} - 99.9pct: {:7.3} - 99.99pct: {:7.3} - Max: {:7.3}",
            l.mean_ms, l.p50_ms, l.p95_ms, l.p99_ms, l.p999_ms, l.p9999_ms, l.max_ms
        ),
        summary.disk.line(),
        summary.steal.line(),
    ]
}

/// Creates the producers, runs the senders until the goal or Ctrl-C, and returns what was
/// measured; prints as `print` says.
pub(crate) async fn measure(
    args: &ProduceArgs,
    machine: &Machine,
    print: Print,
) -> Result<ProduceOutcome, BenchError> {
    let mut args = args.clone();
    let batching_asked = args.batch > 1 || args.batch_max_messages.is_some();
    if args.run.protocol == crate::Protocol::Grpc && batching_asked {
        return Err(BenchError::Usage(
            "--protocol grpc sends one message per request: --batch and --batch-max-messages \
             are for remoting"
                .into(),
        ));
    }
    // Every producer has at least one sender; the record shows the count that ran.
    args.producers = args.producers.min(args.senders);
    let cpu_at_start = process_cpu_s();
    let producers = start_producers(&args, print).await?;
    if print != Print::Quiet {
        println!("{}", header(&args, machine));
    }
    let start = Instant::now();
    let batching = args.batch_max_messages.map(|most| Batching {
        most: most as usize,
        delay: Duration::from_micros((args.batch_max_publish_delay_ms * 1e3) as u64),
    });
    // Batchers are tasks too: the run is done when senders and batchers have all ended.
    let batchers = if batching.is_some() {
        producers.len()
    } else {
        0
    };
    let shared = Arc::new(Shared::new(&args, producers, start, batchers));
    let tasks = spawn_senders(&args, &shared, batching);
    let goal = match (args.run.messages, args.run.duration) {
        (Some(messages), _) => Goal::Messages(messages),
        (None, Some(seconds)) => Goal::Seconds(args.run.warmup + seconds),
        (None, None) => Goal::Forever,
    };
    let (intervals, summary, stopped_by) =
        report_loop(&args, &shared, start, goal, cpu_at_start, print).await;
    for task in tasks {
        task.abort();
    }
    shut_down(&shared.producers).await;
    Ok(ProduceOutcome {
        intervals,
        summary,
        stopped_by,
    })
}

/// The run's producers, each on a client of its own, once the topic is ready for them.
async fn start_producers(args: &ProduceArgs, print: Print) -> Result<Vec<Sender>, BenchError> {
    let new_client = |index: u32| {
        let mut config = ClientConfig::new(&args.run.namesrv);
        config.request_timeout_ms = args.send_timeout_ms;
        // Producers of one group must differ in their client ids.
        config.instance_name = format!("{}-{index}", config.instance_name);
        Client::new(config)
    };
    let client = new_client(0)?;
    crate::topic::prepare(&client, args, print).await?;
    let mut producers = Vec::with_capacity(args.producers as usize);
    for index in 0..args.producers {
        let client = if index == 0 {
            client.clone()
        } else {
            new_client(index)?
        };
        if args.run.protocol == crate::Protocol::Grpc {
            let timeout = Duration::from_millis(args.send_timeout_ms);
            let endpoint = &args.run.grpc_endpoint;
            let producer = GrpcProducer::start(endpoint, &args.topic, timeout)
                .await
                .map_err(|error| {
                    BenchError::Usage(format!(
                        "cannot start a gRPC producer at {endpoint}: {error}"
                    ))
                })?;
            producers.push(Sender::Grpc(Box::new(producer)));
            continue;
        }
        producers.push(Sender::Remoting(Producer::new(
            client,
            ProducerConfig {
                group: args.group.clone(),
                send_timeout_ms: args.send_timeout_ms,
                ..ProducerConfig::default()
            },
        )));
    }
    Ok(producers)
}

/// Shuts the producers down all at once: each tells every broker it leaves, which waits out a
/// broker that is gone.
async fn shut_down(producers: &[Sender]) {
    let leaving: Vec<_> = producers
        .iter()
        .map(|producer| {
            let producer = producer.clone();
            tokio::spawn(async move { producer.shutdown().await })
        })
        .collect();
    for left in leaving {
        let _ = left.await;
    }
}

/// Client-side batching, as pulsar-perf's producer does it: a batch goes when it holds `most`
/// messages or `delay` after its first message, whichever is first.
#[derive(Clone, Copy, Debug)]
struct Batching {
    most: usize,
    delay: Duration,
}

/// Messages waiting for a batcher, per producer: pulsar-perf's default `maxPendingMessages`.
const PENDING_MESSAGES_MAX: usize = 1_000;
/// Batches in flight per producer when batching: enough to keep a connection busy, bounded so
/// a stalled broker holds at most this many batches of memory.
const BATCHES_IN_FLIGHT_MAX: usize = 16;

fn spawn_senders(
    args: &ProduceArgs,
    shared: &Arc<Shared>,
    batching: Option<Batching>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let done = |shared: &Shared| {
        if shared.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            shared.all_done.notify_one();
        }
    };
    let mut tasks = Vec::new();
    let mut queues = Vec::new();
    if let Some(batching) = batching {
        for index in 0..shared.producers.len() {
            let (sender, receiver) = tokio::sync::mpsc::channel(PENDING_MESSAGES_MAX);
            queues.push(sender);
            let shared = shared.clone();
            tasks.push(tokio::spawn(async move {
                batch_loop(index, &shared, receiver, batching).await;
                done(&shared);
            }));
        }
    }
    for task in 0..args.senders as usize {
        let shared = shared.clone();
        let window = args.async_send.then_some(args.async_window as usize);
        let queue = (!queues.is_empty()).then(|| queues[task % queues.len()].clone());
        tasks.push(tokio::spawn(async move {
            match (queue, window) {
                (Some(queue), _) => feed_loop(&shared, queue).await,
                (None, Some(window)) => send_async_loop(task, &shared, window).await,
                (None, None) => send_loop(task, &shared).await,
            }
            done(&shared);
        }));
    }
    tasks
}

/// A sender under client-side batching: hands each message's intended send time to its
/// producer's batcher, paced by `--rate`, until the run stops.
async fn feed_loop(shared: &Shared, queue: tokio::sync::mpsc::Sender<Instant>) {
    loop {
        if shared.take(1) == 0 {
            return;
        }
        let due = shared.pacer.as_ref().map(|pacer| pacer.next(1));
        let Some(started) = wait_for(shared, due).await else {
            return;
        };
        if queue.send(started).await.is_err() {
            return;
        }
    }
}

/// Gathers the messages of one producer into batches and sends each as one
/// SEND_BATCH_MESSAGE; every message's latency counts from its own intended send time.
async fn batch_loop(
    index: usize,
    shared: &Arc<Shared>,
    mut pending: tokio::sync::mpsc::Receiver<Instant>,
    batching: Batching,
) {
    let permits = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT_MAX));
    while let Some(first) = pending.recv().await {
        let mut starts = vec![first];
        // The publish delay is often 1 ms: the runtime's timer alone would stretch it to 2.
        let close = crate::ticker::sleep_until(Instant::now() + batching.delay);
        tokio::pin!(close);
        while starts.len() < batching.most {
            tokio::select! {
                biased;
                next = pending.recv() => match next {
                    Some(started) => starts.push(started),
                    None => break,
                },
                () = &mut close => break,
            }
        }
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let batch: Vec<Message> = starts
                .iter()
                .map(|started| {
                    let mut message = shared.message.clone();
                    stamp(&mut message, *started);
                    message
                })
                .collect();
            let result = shared.producers[index].send_batch(&batch).await;
            shared.finish_each(index, &starts, result);
            drop(permit);
        });
    }
    let _ = permits.acquire_many(BATCHES_IN_FLIGHT_MAX as u32).await;
}

fn body(size: usize) -> Vec<u8> {
    // Printable and varied, so compression or dedup on the path cannot flatter the figures.
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

fn header(args: &ProduceArgs, machine: &Machine) -> String {
    let mode = match (args.async_send, args.rate) {
        (true, _) => format!("async, window {} per sender", args.async_window),
        (false, _) => "sync".to_owned(),
    };
    let rate = args.rate.map_or(String::from("as fast as possible"), |r| {
        format!("{r:.0} msg/s")
    });
    let batch = match args.batch_max_messages {
        Some(most) => format!(
            "client-side batches of up to {most} messages or {} ms",
            args.batch_max_publish_delay_ms
        ),
        None => format!("batch {}", args.batch),
    };
    let server = match args.run.protocol {
        crate::Protocol::Remoting => format!("name server {}", args.run.namesrv),
        crate::Protocol::Grpc => format!("gRPC at {}", args.run.grpc_endpoint),
    };
    format!(
        "quiver bench produce: topic {}, {} senders over {} producer(s), {} B bodies, {batch}, {mode}, {rate}, {} runtime thread(s), {server}\nmachine: {}",
        args.topic, args.senders, args.producers, args.size, args.run.runtime_threads, machine.line()
    )
}

/// The user property in which the bench's producers carry each message's send time, in
/// microseconds since the epoch (wall clock), so that consumers on the same host measure
/// end-to-end latency under a millisecond, which the born timestamp's milliseconds cannot.
pub(crate) const SENT_US_PROPERTY: &str = "QBENCH_SENT_US";

/// Wall-clock microseconds at `started` (an instant at or before now).
fn wall_us_at(started: Instant) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64);
    now.saturating_sub(started.elapsed().as_micros() as u64)
}

/// Sets the message's send time to `started` (see `SENT_US_PROPERTY`).
fn stamp(message: &mut Message, started: Instant) {
    let value = wall_us_at(started).to_string();
    match message
        .properties
        .iter_mut()
        .find(|(name, _)| name == SENT_US_PROPERTY)
    {
        Some((_, old)) => *old = value,
        None => message
            .properties
            .push((SENT_US_PROPERTY.to_owned(), value)),
    }
}

/// Keys as the Java benchmark sets them: the current second.
fn with_current_key(message: &mut Message, second: &mut u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    if now != *second || message.keys.is_empty() {
        *second = now;
        message.keys = vec![now.to_string()];
    }
}

/// Waits for a paced send's due time; returns the instant its latency counts from.
///
/// The runtime's timer fires on whole milliseconds, at or after its deadline, so the wait
/// starts on it (stopping when the run stops) and ends on the bench's ticker, which wakes
/// within tens of microseconds of `due`: sends go out spread as the rate asks, not in a burst
/// once a millisecond. A send counts from `due`, so one that is late for any reason (a stall,
/// every sender busy) still counts from when it was due.
/// None when the run stopped meanwhile.
async fn wait_for(shared: &Shared, due: Option<Instant>) -> Option<Instant> {
    let Some(due) = due else {
        return Some(Instant::now());
    };
    if let Some(wake) = due.checked_sub(COARSE_WAKE_EARLY) {
        if !shared.sleep_until(wake).await {
            return None;
        }
    }
    crate::ticker::sleep_until(due).await;
    Some(due.min(Instant::now()))
}

async fn send_loop(task: usize, shared: &Shared) {
    let mut message = shared.message.clone();
    let mut batch = vec![message.clone(); shared.batch];
    let mut second = 0;
    loop {
        let count = shared.take(shared.batch);
        if count == 0 {
            return;
        }
        let due = shared.pacer.as_ref().map(|pacer| pacer.next(count as u64));
        let Some(started) = wait_for(shared, due).await else {
            return;
        };
        let result = if shared.batch > 1 {
            if shared.keys {
                with_current_key(&mut message, &mut second);
                batch.iter_mut().for_each(|m| m.keys = message.keys.clone());
            }
            batch.iter_mut().for_each(|m| stamp(m, started));
            shared.producer(task).send_batch(&batch[..count]).await
        } else {
            if shared.keys {
                with_current_key(&mut message, &mut second);
            }
            stamp(&mut message, started);
            shared.producer(task).send(&message).await
        };
        if !shared.finish(task, started, count, result) {
            shared.back_off().await;
        }
    }
}

async fn send_async_loop(task: usize, shared: &Arc<Shared>, window: usize) {
    let permits = Arc::new(Semaphore::new(window));
    let mut message = shared.message.clone();
    let mut second = 0;
    loop {
        let count = shared.take(shared.batch);
        if count == 0 {
            break;
        }
        let due = shared.pacer.as_ref().map(|pacer| pacer.next(count as u64));
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let Some(started) = wait_for(shared, due).await else {
            break;
        };
        if shared.keys {
            with_current_key(&mut message, &mut second);
        }
        stamp(&mut message, started);
        let shared = shared.clone();
        let batch = (shared.batch > 1).then(|| vec![message.clone(); count]);
        let single = message.clone();
        tokio::spawn(async move {
            let result = match batch {
                Some(batch) => shared.producer(task).send_batch(&batch).await,
                None => shared.producer(task).send(&single).await,
            };
            if !shared.finish(task, started, count, result) {
                // Holding the permit meanwhile keeps this sender's window from refilling.
                shared.back_off().await;
            }
            drop(permit);
        });
    }
    // Wait for this sender's sends still in flight (bounded by the send timeout).
    let _ = permits.acquire_many(window as u32).await;
}

/// Prints a line per interval until the goal or Ctrl-C; returns the intervals, the summary
/// and why the run stopped.
async fn report_loop(
    args: &ProduceArgs,
    shared: &Shared,
    start: Instant,
    goal: Goal,
    cpu_at_start: f64,
    print: Print,
) -> (Vec<ProduceInterval>, Summary, Stop) {
    let run = &args.run;
    let mut schedule = Schedule::new(start, run.warmup, run.duration, run.report_interval);
    let mut intervals = Vec::new();
    let mut last = Counters::default();
    let mut phase_start = Counters::default();
    let mut measure_start =
        MeasureStart::now(Counters::default(), run.warmup <= 0.0, run.broker_pid);
    let mut phase_max_ms = 0.0f64;
    let mut measured: Histogram<u64> = new_histogram();
    let mut stopped_by = None;
    loop {
        if stopped_by.is_none() {
            stopped_by = wait_for_report(&schedule, shared).await;
        }
        if stopped_by.is_some() {
            shared.stop.store(true, Ordering::Relaxed);
            drain(shared).await;
        }
        let now = Instant::now();
        let interval = schedule.close(now);
        let counters = shared.counters();
        let histogram = shared.recorder.drain();
        let latency = Percentiles::of(&histogram);
        let delta = counters.since(&last);
        let phase = counters.since(&phase_start);
        let line = ProduceInterval::new(
            interval.elapsed_s,
            interval.length_s,
            interval.warmup,
            &delta,
            &phase,
            latency,
            phase_max_ms,
        );
        phase_max_ms = line.max_rt_ms;
        if let Print::Lines(style) = print {
            let progress = progress(interval.elapsed_s, goal, counters.messages, interval.warmup);
            print_interval(style, &progress, &line);
        }
        intervals.push(line);
        last = counters;
        if interval.warmup {
            if interval.ends_warmup {
                phase_start = counters;
                phase_max_ms = 0.0;
                measure_start = MeasureStart::now(counters, true, run.broker_pid);
            }
        } else {
            let _ = measured.add(&histogram);
        }
        if let Some(stop) = stopped_by {
            let latency = Percentiles::of(&measured);
            let summary = measure_start.summary(now, &counters, latency, start, cpu_at_start);
            if stop == Stop::Interrupted && print != Print::Quiet {
                println!("Interrupted.");
            }
            return (intervals, summary, stop);
        }
    }
}

/// Waits until the next report is due; why the run stopped, when it did (the goal or Ctrl-C).
async fn wait_for_report(schedule: &Schedule, shared: &Shared) -> Option<Stop> {
    let stopped_by = wait_until(schedule.next_report_at(), &shared.all_done).await;
    if stopped_by.is_none() && schedule.finished(Instant::now()) {
        return Some(Stop::Goal);
    }
    stopped_by
}

/// One interval's line in `style`, after the run's progress.
fn print_interval(style: OutputStyle, progress: &str, line: &ProduceInterval) {
    let text = match style {
        OutputStyle::Rocketmq => line.line(),
        OutputStyle::Pulsar => line.pulsar_line(),
    };
    println!("{progress} {text}");
}

/// Waits for the senders to see the stop flag and their last sends to come back.
async fn drain(shared: &Shared) {
    let grace = Duration::from_millis(shared.send_timeout_ms + DRAIN_GRACE_MS);
    let _ = tokio::time::timeout(grace, async {
        while shared.running.load(Ordering::Acquire) > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}
