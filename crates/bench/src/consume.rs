//! `quiver bench consume`: a clustering push consumer that records, for every message, the
//! time from its birth on the producer (B2C) and from its storage on the broker (S2C) to its
//! arrival here. Both use millisecond wall clocks, as the Java benchmark consumer does, except
//! that B2C of a message sent by `quiver bench produce`, `sweep` or `peak` is measured from the
//! microsecond send time it carries (`SENT_US_PROPERTY`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hdrhistogram::Histogram;
use quiver_client::{
    Client, ClientConfig, ConsumeFrom, GrpcSimpleConsumer, MessageQueue, PopConsumer,
    PopConsumerConfig, PushConsumer, PushConsumerConfig, StoredMessage,
};
use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::histogram::{new_histogram, Percentiles, Recorder, SHARDS_MAX};
use crate::machine::{process_cpu_s, Machine};
use crate::produce::SENT_US_PROPERTY;
use crate::report::{progress, ConsumeInterval, Counters, Goal, MeasureStart, Summary};
use crate::schedule::{wait_until, Schedule, Stop};
use crate::{lookup_error, write_json, BenchError, ConsumeArgs};

/// What the consumers received: counts and born/store-to-consume latencies.
pub(crate) struct Tally {
    pub b2c: Recorder,
    pub s2c: Recorder,
    messages: AtomicU64,
    bytes: AtomicU64,
    goal_messages: Option<u64>,
    goal_reached: Notify,
}

impl Tally {
    pub fn new(goal_messages: Option<u64>) -> Tally {
        Tally {
            b2c: Recorder::new(SHARDS_MAX),
            s2c: Recorder::new(SHARDS_MAX),
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            goal_messages,
            goal_reached: Notify::new(),
        }
    }

    pub fn counters(&self) -> Counters {
        Counters {
            messages: self.messages.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            ..Counters::default()
        }
    }

    fn consumed(&self, queue: &MessageQueue, messages: &[StoredMessage]) {
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_micros() as i64);
        let now_ms = now_us / 1_000;
        let shard = queue.queue_id as usize;
        let mut bytes = 0;
        for message in messages {
            // Clocks of other hosts may run ahead; a negative span is recorded as the minimum.
            // A producer sets the born time: a corrupt one must not overflow. A message from
            // the bench's own producers carries its send time in microseconds: born-to-consume
            // is measured from that instead, below the millisecond.
            let sent_us = message
                .property(SENT_US_PROPERTY)
                .and_then(|value| value.parse::<i64>().ok());
            let b2c_us = match sent_us {
                Some(sent_us) => now_us.saturating_sub(sent_us).max(0) as u64,
                None => (now_ms.saturating_sub(message.born_timestamp).max(0) as u64)
                    .saturating_mul(1_000),
            };
            let s2c_ms = now_ms.saturating_sub(message.store_timestamp).max(0) as u64;
            self.b2c.record(shard, b2c_us);
            self.s2c.record(shard, s2c_ms.saturating_mul(1_000));
            bytes += message.body.len() as u64;
        }
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let before = self
            .messages
            .fetch_add(messages.len() as u64, Ordering::Relaxed);
        if let Some(goal) = self.goal_messages {
            if before < goal && before + messages.len() as u64 >= goal {
                self.goal_reached.notify_one();
            }
        }
    }
}

#[derive(Serialize)]
struct Record<'a> {
    tool: &'static str,
    version: &'static str,
    machine: &'a Machine,
    parameters: &'a ConsumeArgs,
    intervals: &'a [ConsumeInterval],
    summary: &'a Summary,
    b2c: Percentiles,
    s2c: Percentiles,
    stopped_by: Stop,
}

pub async fn run(args: ConsumeArgs) -> Result<(), BenchError> {
    let machine = Machine::read();
    let cpu_at_start = process_cpu_s();
    let namesrv = &args.run.namesrv;
    let client = Client::new(ClientConfig::new(namesrv))?;
    let tally = Arc::new(Tally::new(args.run.messages));
    let consumer = Consumer::start(&args, client, &tally).await?;
    let assigned = consumer.assigned();
    println!(
        "quiver bench consume: topic {}, group {}, expression {}, {assigned}, name server {}\n\
         S2C comes from millisecond timestamps (0.001 ms means under 1 ms), and so does B2C except for \
         messages from quiver bench, which carry their send time in microseconds\nmachine: {}",
        args.topic,
        args.group,
        args.expression,
        namesrv,
        machine.line()
    );
    let start = Instant::now();
    let goal = match (args.run.messages, args.run.duration) {
        (Some(messages), _) => Goal::Messages(messages),
        (None, Some(seconds)) => Goal::Seconds(args.run.warmup + seconds),
        (None, None) => Goal::Forever,
    };
    let outcome = report_loop(&args, &tally, start, goal, cpu_at_start).await;
    let (intervals, summary, b2c, s2c, stopped_by) = outcome;
    for line in summary.lines("B2C") {
        println!("{line}");
    }
    println!("S2C: mean {:.3} ms, {}", s2c.mean_ms, s2c.line());
    consumer.shutdown().await;
    if let Some(path) = &args.run.json {
        let record = Record {
            tool: "quiver bench consume",
            version: env!("CARGO_PKG_VERSION"),
            machine: &machine,
            parameters: &args,
            intervals: &intervals,
            summary: &summary,
            b2c,
            s2c,
            stopped_by,
        };
        write_json(path, &record)?;
        println!("Wrote {}", path.display());
    }
    if let Some(path) = &args.run.html {
        let page = crate::pages::consume_page(&args.topic, &machine, &intervals);
        crate::html::write(path, &page)?;
        println!("Wrote {}", path.display());
    }
    Ok(())
}

enum Consumer {
    Push(PushConsumer),
    Pop(Vec<PopConsumer>),
    /// `--protocol grpc`: SimpleConsumers' receive loops.
    Grpc(Vec<tokio::task::JoinHandle<()>>),
}

impl Consumer {
    async fn start(
        args: &ConsumeArgs,
        client: Client,
        tally: &Arc<Tally>,
    ) -> Result<Consumer, BenchError> {
        let mut config = PushConsumerConfig::new(&args.group, &args.topic);
        config.expression = args.expression.clone();
        config.consume_from = if args.from == "first" {
            ConsumeFrom::FirstOffset
        } else {
            ConsumeFrom::LastOffset
        };
        Ok(if args.run.protocol == crate::Protocol::Grpc {
            Consumer::Grpc(start_grpc_consumers(args, tally).await?)
        } else if args.pop {
            Consumer::Pop(start_pop_consumers(args, client, tally).await?)
        } else {
            Consumer::Push(start_consumer(client, config, tally, &args.run.namesrv).await?)
        })
    }

    /// What the first line says the consumer got.
    fn assigned(&self) -> String {
        match self {
            Consumer::Push(push) => format!("{} queue(s) assigned", push.assigned().len()),
            Consumer::Pop(pops) => format!("popping with {} consumer(s)", pops.len()),
            Consumer::Grpc(loops) => {
                format!("receiving over gRPC with {} SimpleConsumer(s)", loops.len())
            }
        }
    }

    async fn shutdown(self) {
        match self {
            Consumer::Push(push) => {
                if let Err(error) = push.shutdown().await {
                    eprintln!("quiver bench: committing offsets at the end failed: {error}");
                }
            }
            Consumer::Pop(pops) => {
                for pop in pops {
                    pop.shutdown().await;
                }
            }
            Consumer::Grpc(loops) => {
                for receiving in loops {
                    receiving.abort();
                }
            }
        }
    }
}

/// `--pop`: the group switched to POP on every master of the topic, and `--pop-consumers`
/// pop consumers whose messages go to `tally`, each acknowledging every message it gets.
async fn start_pop_consumers(
    args: &ConsumeArgs,
    client: Client,
    tally: &Arc<Tally>,
) -> Result<Vec<PopConsumer>, BenchError> {
    let namesrv = &args.run.namesrv;
    let route = client
        .refresh_route(&args.topic)
        .await
        .map_err(|error| lookup_error(error, namesrv, &args.topic))?;
    for addr in route.masters.values() {
        client
            .set_pop_mode(addr, &args.topic, &args.group, true)
            .await?;
    }
    let mut consumers = Vec::new();
    for _ in 0..args.pop_consumers {
        let mut config = PopConsumerConfig::new(&args.group, &args.topic);
        config.expression = args.expression.clone();
        config.from_first = args.from == "first";
        config.loops = args.pop_loops as usize;
        let sink = tally.clone();
        let listener = Arc::new(move |message: &StoredMessage| {
            let queue = MessageQueue {
                queue_id: message.queue_id,
                ..MessageQueue::default()
            };
            sink.consumed(&queue, std::slice::from_ref(message));
            true
        });
        // Each consumer its own client, so its pops travel on a connection of their own.
        let own = Client::new(ClientConfig::new(namesrv))?;
        consumers.push(PopConsumer::start(own, config, listener).await?);
    }
    Ok(consumers)
}

/// How long a gRPC receive keeps its messages from others, and waits for the first one.
const GRPC_INVISIBLE: std::time::Duration = std::time::Duration::from_secs(30);
const GRPC_LONG_POLL: std::time::Duration = std::time::Duration::from_secs(20);
/// The most messages one gRPC receive asks for (the proxy's bound).
const GRPC_RECEIVE_BATCH: i32 = 32;

/// `--protocol grpc`: `--receivers` SimpleConsumers at `--grpc-endpoint`, each receiving in a
/// loop, counting what it gets in `tally` and acknowledging it in one call per receive.
async fn start_grpc_consumers(
    args: &ConsumeArgs,
    tally: &Arc<Tally>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, BenchError> {
    let endpoint = &args.run.grpc_endpoint;
    let timeout = GRPC_LONG_POLL + std::time::Duration::from_secs(10);
    let mut loops = Vec::new();
    for _ in 0..args.receivers {
        let consumer = GrpcSimpleConsumer::start(
            endpoint,
            &args.group,
            &args.topic,
            &args.expression,
            timeout,
        )
        .await
        .map_err(|error| {
            BenchError::Usage(format!(
                "cannot start a gRPC consumer at {endpoint}: {error}"
            ))
        })?;
        let sink = tally.clone();
        loops.push(tokio::spawn(async move {
            loop {
                let received = consumer
                    .receive(GRPC_RECEIVE_BATCH, GRPC_INVISIBLE, GRPC_LONG_POLL)
                    .await;
                let received = match received {
                    Ok(received) => received,
                    Err(error) => {
                        eprintln!("quiver bench: a gRPC receive failed: {error}");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        continue;
                    }
                };
                for one in &received {
                    let queue = MessageQueue {
                        queue_id: one.message.queue_id,
                        ..MessageQueue::default()
                    };
                    sink.consumed(&queue, std::slice::from_ref(&one.message));
                }
                if let Err(error) = consumer.ack(&received).await {
                    eprintln!("quiver bench: a gRPC ack failed: {error}");
                }
            }
        }));
    }
    Ok(loops)
}

/// A push consumer whose messages go to `tally`.
pub(crate) async fn start_consumer(
    client: Client,
    config: PushConsumerConfig,
    tally: &Arc<Tally>,
    namesrv: &str,
) -> Result<PushConsumer, BenchError> {
    let sink = tally.clone();
    let topic = config.topic.clone();
    PushConsumer::start(
        client,
        config,
        Arc::new(move |queue: &MessageQueue, messages: &[StoredMessage]| {
            sink.consumed(queue, messages)
        }),
    )
    .await
    .map_err(|error| lookup_error(error, namesrv, &topic))
}

type Outcome = (
    Vec<ConsumeInterval>,
    Summary,
    Percentiles,
    Percentiles,
    Stop,
);

async fn report_loop(
    args: &ConsumeArgs,
    tally: &Tally,
    start: Instant,
    goal: Goal,
    cpu_at_start: f64,
) -> Outcome {
    let run = &args.run;
    let mut schedule = Schedule::new(start, run.warmup, run.duration, run.report_interval);
    let mut intervals = Vec::new();
    let mut last = Counters::default();
    let mut measure_start =
        MeasureStart::now(Counters::default(), run.warmup <= 0.0, run.broker_pid);
    let mut b2c_measured: Histogram<u64> = new_histogram();
    let mut s2c_measured: Histogram<u64> = new_histogram();
    loop {
        let mut stopped_by = wait_until(schedule.next_report_at(), &tally.goal_reached).await;
        if stopped_by.is_none() && schedule.finished(Instant::now()) {
            stopped_by = Some(Stop::Goal);
        }
        let now = Instant::now();
        let interval = schedule.close(now);
        let counters = tally.counters();
        let (b2c, s2c) = (tally.b2c.drain(), tally.s2c.drain());
        let line = ConsumeInterval::new(
            interval.elapsed_s,
            interval.length_s,
            interval.warmup,
            &counters.since(&last),
            Percentiles::of(&b2c),
            Percentiles::of(&s2c),
        );
        println!(
            "{} {}",
            progress(interval.elapsed_s, goal, counters.messages, interval.warmup),
            line.line()
        );
        intervals.push(line);
        last = counters;
        if !interval.warmup {
            let _ = b2c_measured.add(&b2c);
            let _ = s2c_measured.add(&s2c);
        } else if interval.ends_warmup {
            measure_start = MeasureStart::now(counters, true, run.broker_pid);
        }
        if let Some(stop) = stopped_by {
            if stop == Stop::Interrupted {
                println!("Interrupted.");
            }
            let latency = Percentiles::of(&b2c_measured);
            let summary = measure_start.summary(now, &counters, latency, start, cpu_at_start);
            let s2c = Percentiles::of(&s2c_measured);
            let b2c = summary.latency;
            return (intervals, summary, b2c, s2c, stop);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddr};

    fn stored(born_ms: i64, properties: String) -> StoredMessage {
        let host = SocketAddr::from((Ipv4Addr::LOCALHOST, 10911));
        StoredMessage {
            queue_id: 0,
            flag: 0,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: 0,
            born_timestamp: born_ms,
            born_host: host,
            store_timestamp: born_ms,
            store_host: host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: bytes::Bytes::from_static(b"x"),
            topic: "T".to_owned(),
            properties,
        }
    }

    #[test]
    fn born_to_consume_uses_the_microsecond_send_time_when_the_message_carries_one() {
        let queue = MessageQueue {
            topic: "T".to_owned(),
            broker_name: "broker-a".to_owned(),
            queue_id: 0,
        };
        let wall_us = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_micros() as u64
        };
        // Sent 2.5 ms ago by the bench; a born timestamp alone would say 2 or 3 ms.
        let before = wall_us();
        let sent_us = before - 2_500;
        let properties = format!("{SENT_US_PROPERTY}\u{1}{sent_us}\u{2}");
        let tally = Tally::new(None);
        tally.consumed(&queue, &[stored((sent_us / 1_000) as i64, properties)]);
        let after = wall_us();
        let b2c_us = tally.b2c.drain().value_at_quantile(0.5);
        // The histogram keeps 3 significant digits: a bucket is at most 0.1% wide.
        let (low, high) = (before - sent_us, after - sent_us);
        assert!(
            low * 999 / 1_000 <= b2c_us && b2c_us <= high * 1_001 / 1_000 + 1,
            "B2C {b2c_us} us, not between {low} and {high}"
        );
        // Without the property: the born timestamp, whole milliseconds.
        tally.consumed(
            &queue,
            &[stored((wall_us() / 1_000 - 3) as i64, String::new())],
        );
        let b2c_us = tally.b2c.drain().value_at_quantile(0.5);
        assert!(
            (b2c_us + 5) % 1_000 <= 10,
            "{b2c_us} us from a millisecond born time"
        );
    }
}
