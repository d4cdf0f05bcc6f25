//! `quiver bench soak`: producers and consumers together for hours, with every message
//! accounted for. Each message carries the run's id, its sender and a sequence number of that
//! sender; the ledger marks each one sent, acknowledged and consumed, and from that counts the
//! missing (acknowledged, never consumed), duplicated and reordered (a sender's messages out of
//! order within one queue). The run rides through broker restarts: a failed send is counted
//! and retried with the next message after a short pause, and every stretch of failures or of
//! silence is reported with its cause. It exits non-zero when an acknowledged message is
//! missing.
//!
//! The ledger keeps two bits per message (acknowledged, consumed): 10,000 msg/s for 8 hours is
//! 288 million messages, 72 MB.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use quiver_client::{
    Client, ClientConfig, ClientError, ConsumeFrom, Message, MessageQueue, Producer,
    ProducerConfig, PushConsumerConfig, SendStatus, StoredMessage,
};
use serde::Serialize;
use tokio::time::Instant;

use crate::disk::{DiskFigures, DiskSample};
use crate::histogram::{Percentiles, Recorder, SHARDS_MAX};
use crate::html::{Chart, Page, Section, Table};
use crate::machine::Machine;
use crate::steal::{StealFigures, StealMark};
use crate::{write_json, BenchError, ProduceArgs};

mod ledger;

pub use ledger::{gaps, Gap, Ledger, Missing, SoakInterval, Totals};

/// Property names; RocketMQ keeps user properties as they are.
const RUN_PROPERTY: &str = "QUIVER_SOAK_RUN";
const SENDER_PROPERTY: &str = "QUIVER_SOAK_SENDER";
const SEQUENCE_PROPERTY: &str = "QUIVER_SOAK_SEQ";
/// A sender's pause after a failed send: short enough to notice a restarted broker within a
/// report interval, long enough not to spin while it is down.
const FAILURE_BACKOFF: Duration = Duration::from_millis(200);
/// How often the end of a run looks whether the consumers have caught up.
const DRAIN_POLL: Duration = Duration::from_millis(50);
/// Missing sequence ranges printed per sender; the JSON has them all.
const RANGES_PRINTED_MAX: usize = 10;

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct SoakArgs {
    #[arg(short = 'n', long = "namesrv", default_value = "127.0.0.1:9876")]
    pub namesrv: String,
    #[arg(short = 't', long, default_value = "BenchSoak")]
    pub topic: String,
    /// Create the topic with this many queues on every broker first.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub queues: u32,
    /// Concurrent senders, each with one send in flight.
    #[arg(short = 'w', long = "threads", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub senders: u32,
    /// Consumers in one group. 0 checks the accounting itself: nothing can arrive, so every
    /// acknowledged message is reported missing.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub consumers: u32,
    #[arg(short = 's', long = "size", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=4_194_304))]
    pub size: u32,
    /// Messages per second in total (default: as fast as the senders go).
    #[arg(long, value_parser = crate::positive_rate)]
    pub rate: Option<f64>,
    /// Seconds of producing (default: until Ctrl-C).
    #[arg(long, value_parser = crate::positive_seconds)]
    pub duration: Option<f64>,
    /// After producing stops, how long to wait for the consumers to receive every
    /// acknowledged message before calling the rest missing.
    #[arg(long = "drain-timeout", default_value_t = 60.0, value_parser = crate::positive_seconds)]
    pub drain_timeout: f64,
    #[arg(long = "report-interval", default_value_t = 10.0, value_parser = crate::report_seconds)]
    pub report_interval: f64,
    #[arg(short = 'g', long, default_value = "benchmark_soak")]
    pub group: String,
    #[arg(long = "send-timeout-ms", default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub send_timeout_ms: u64,
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long)]
    pub html: Option<PathBuf>,
    #[arg(long = "runtime-threads", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub runtime_threads: u32,
    /// The broker's process id, when it runs on this machine: the disk line then says what
    /// the broker itself wrote to storage.
    #[arg(long = "broker-pid")]
    pub broker_pid: Option<u32>,
    /// How often the producer and the consumers read their routes from the name server again
    /// (RocketMQ's pollNameServerInterval): after a failover, the time before they find the
    /// new master.
    #[arg(long = "poll-name-server-interval-ms", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub route_refresh_ms: u64,
}

struct Shared {
    ledger: Mutex<Ledger>,
    send_latency: Recorder,
    b2c: Recorder,
    run_id: String,
}

impl Shared {
    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // Every ledger method leaves it consistent, so a poisoned lock still holds sound data.
        self.ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn consumed(&self, queue: &MessageQueue, messages: &[StoredMessage]) {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64);
        let mut ledger = self.ledger();
        for message in messages {
            let ours = message.property(RUN_PROPERTY).as_deref() == Some(self.run_id.as_str());
            let sender = message
                .property(SENDER_PROPERTY)
                .and_then(|s| s.parse::<u32>().ok());
            let sequence = message
                .property(SEQUENCE_PROPERTY)
                .and_then(|s| s.parse::<u64>().ok());
            match (ours, sender, sequence) {
                (true, Some(sender), Some(sequence)) => {
                    ledger.consumed(&queue.broker_name, queue.queue_id, sender, sequence);
                    let b2c_ms = now_ms.saturating_sub(message.born_timestamp).max(0) as u64;
                    self.b2c
                        .record(queue.queue_id as usize, b2c_ms.saturating_mul(1_000));
                }
                _ => ledger.foreign(),
            }
        }
    }
}

/// What a soak found: printed at the end, written to JSON and drawn.
#[derive(Serialize)]
struct Findings {
    intervals: Vec<SoakInterval>,
    totals: Totals,
    missing: u64,
    missing_ranges: Vec<Missing>,
    delivered_unacknowledged: u64,
    gaps: Vec<Gap>,
    disk: DiskFigures,
    /// CPU time the hypervisor took over the run, and the machine's stalls.
    steal: StealFigures,
}

#[derive(Serialize)]
struct Record<'a> {
    tool: &'static str,
    version: &'static str,
    machine: &'a Machine,
    parameters: &'a SoakArgs,
    run_id: &'a str,
    #[serde(flatten)]
    findings: &'a Findings,
}

pub async fn run(args: SoakArgs) -> Result<(), BenchError> {
    let machine = Machine::read();
    let run_id = run_id();
    // The topic is created the way `bench produce --queues` does it.
    let mut topic = ProduceArgs::for_topic(&args.namesrv, &args.topic, args.queues);
    topic.send_timeout_ms = args.send_timeout_ms;
    crate::topic::ensure(&topic).await?;
    let shared = Arc::new(Shared {
        ledger: Mutex::new(Ledger::new(args.senders)),
        send_latency: Recorder::new(args.senders as usize),
        b2c: Recorder::new(SHARDS_MAX),
        run_id: run_id.clone(),
    });
    let consumers = start_consumers(&args, &shared).await?;
    let producer = start_producer(&args)?;
    println!(
        "quiver bench soak: run {run_id}, topic {} ({} queues), {} senders, {} consumer(s), {} B bodies, {}, name server {}\nmachine: {}",
        args.topic,
        args.queues,
        args.senders,
        args.consumers,
        args.size,
        args.rate.map_or("as fast as possible".into(), |r| format!("{r:.0} msg/s")),
        args.namesrv,
        machine.line()
    );
    let start = Instant::now();
    let disk_at_start = DiskSample::read(args.broker_pid);
    let steal_at_start = StealMark::now();
    let senders = spawn_senders(&args, &shared, &producer);
    let intervals = report_loop(&args, &shared, start).await;
    let disk_now = DiskSample::read(args.broker_pid);
    let disk = disk_at_start.figures(&disk_now, start.elapsed().as_secs_f64());
    let steal = steal_at_start.figures();
    for sender in senders {
        sender.abort();
    }
    for consumer in consumers {
        let _ = consumer.shutdown().await;
    }
    producer.shutdown().await;
    let findings = findings(&args, &shared.ledger(), intervals, disk, steal);
    report(&args, &machine, &run_id, &findings)?;
    if findings.missing > 0 {
        return Err(BenchError::MessagesMissing {
            missing: findings.missing,
        });
    }
    Ok(())
}

async fn start_consumers(
    args: &SoakArgs,
    shared: &Arc<Shared>,
) -> Result<Vec<quiver_client::PushConsumer>, BenchError> {
    let mut consumers = Vec::new();
    for index in 0..args.consumers {
        let mut config = ClientConfig::new(&args.namesrv);
        config.instance_name = format!("{}-soak-{index}", config.instance_name);
        config.route_refresh_ms = args.route_refresh_ms;
        let client = Client::new(config)?;
        let mut config = PushConsumerConfig::new(&args.group, &args.topic);
        config.consume_from = ConsumeFrom::LastOffset;
        // Back to pulling soon after a broker restart rather than Java's 3 s.
        config.pull_error_backoff_ms = 500;
        let sink = shared.clone();
        let consumer = quiver_client::PushConsumer::start(
            client,
            config,
            Arc::new(move |queue: &MessageQueue, messages: &[StoredMessage]| {
                sink.consumed(queue, messages)
            }),
        )
        .await
        .map_err(|error| crate::lookup_error(error, &args.namesrv, &args.topic))?;
        consumers.push(consumer);
    }
    Ok(consumers)
}

fn start_producer(args: &SoakArgs) -> Result<Producer, BenchError> {
    let mut config = ClientConfig::new(&args.namesrv);
    config.request_timeout_ms = args.send_timeout_ms;
    config.route_refresh_ms = args.route_refresh_ms;
    Ok(Producer::new(
        Client::new(config)?,
        ProducerConfig {
            group: format!("{}_producer", args.group),
            send_timeout_ms: args.send_timeout_ms,
            ..ProducerConfig::default()
        },
    ))
}

fn spawn_senders(
    args: &SoakArgs,
    shared: &Arc<Shared>,
    producer: &Producer,
) -> Vec<tokio::task::JoinHandle<()>> {
    // --rate is shared evenly: each sender sends every senders / rate seconds.
    let interval = args
        .rate
        .map(|rate| Duration::from_secs_f64(args.senders as f64 / rate));
    (0..args.senders)
        .map(|sender| {
            let shared = shared.clone();
            let producer = producer.clone();
            let body = Bytes::from(vec![b's'; args.size as usize]);
            let message = Message::new(args.topic.clone(), body);
            tokio::spawn(
                async move { send_loop(sender, &shared, &producer, message, interval).await },
            )
        })
        .collect()
}

fn findings(
    args: &SoakArgs,
    ledger: &Ledger,
    intervals: Vec<SoakInterval>,
    disk: DiskFigures,
    steal: StealFigures,
) -> Findings {
    let missing_ranges = ledger.missing();
    Findings {
        gaps: gaps(&intervals, args.report_interval),
        intervals,
        totals: ledger.totals(),
        missing: missing_ranges.iter().map(|m| m.last - m.first + 1).sum(),
        missing_ranges,
        delivered_unacknowledged: ledger.delivered_unacknowledged(),
        disk,
        steal,
    }
}

/// The closing lines, the JSON record and the HTML report.
fn report(
    args: &SoakArgs,
    machine: &Machine,
    run_id: &str,
    findings: &Findings,
) -> Result<(), BenchError> {
    for line in closing_lines(findings) {
        println!("{line}");
    }
    println!("{}", findings.disk.line());
    println!("{}", findings.steal.line());
    if let Some(path) = &args.json {
        let record = Record {
            tool: "quiver bench soak",
            version: env!("CARGO_PKG_VERSION"),
            machine,
            parameters: args,
            run_id,
            findings,
        };
        write_json(path, &record)?;
        println!("Wrote {}", path.display());
    }
    if let Some(path) = &args.html {
        crate::html::write(path, &page(args, machine, findings))?;
        println!("Wrote {}", path.display());
    }
    Ok(())
}

/// A run id unique enough to tell this run's messages from an earlier run's in the topic.
fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    format!("{:x}-{:x}", nanos, std::process::id())
}

async fn send_loop(
    sender: u32,
    shared: &Shared,
    producer: &Producer,
    mut message: Message,
    interval: Option<Duration>,
) {
    let mut next_due = Instant::now();
    for sequence in 0.. {
        if let Some(interval) = interval {
            tokio::time::sleep_until(next_due).await;
            next_due += interval;
        }
        message.properties = vec![
            (RUN_PROPERTY.into(), shared.run_id.clone()),
            (SENDER_PROPERTY.into(), sender.to_string()),
            (SEQUENCE_PROPERTY.into(), sequence.to_string()),
        ];
        // Refused under the ledger's lock once producing has stopped (during the wait, too).
        if !shared.ledger().sent(sender, sequence) {
            return;
        }
        let started = Instant::now();
        match producer.send(&message).await {
            Ok(sent) if sent.status == SendStatus::Ok => {
                shared
                    .send_latency
                    .record(sender as usize, started.elapsed().as_micros() as u64);
                shared.ledger().acknowledged(sender, sequence);
            }
            // Stored, but the broker did not say it is safe (no fsync or no slave in time): not
            // acknowledged, so the soak holds the broker to nothing for it.
            Ok(sent) => {
                shared
                    .ledger()
                    .failed(format!("answered {:?}: not acknowledged", sent.status));
                tokio::time::sleep(FAILURE_BACKOFF).await;
                next_due = Instant::now();
            }
            Err(error) => {
                shared.ledger().failed(describe(&error));
                tokio::time::sleep(FAILURE_BACKOFF).await;
                next_due = Instant::now();
            }
        }
    }
}

fn describe(error: &ClientError) -> String {
    let text = error.to_string();
    // One line, bounded: it is printed in every interval line that had failures.
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(160)
        .collect()
}

/// A line per interval while producing, then while draining, until every acknowledged
/// message arrived or the drain timeout passed (or a second Ctrl-C).
async fn report_loop(args: &SoakArgs, shared: &Shared, start: Instant) -> Vec<SoakInterval> {
    let every = Duration::from_secs_f64(args.report_interval);
    let produce_end = args.duration.map(|s| start + Duration::from_secs_f64(s));
    let mut intervals = Vec::new();
    let mut last = Totals::default();
    let mut next = start + every;
    let mut drain_end: Option<Instant> = None;
    loop {
        let mut wake = next;
        if let Some(end) = produce_end.filter(|_| drain_end.is_none()) {
            wake = wake.min(end);
        }
        let interrupted = tokio::select! {
            _ = sleep_or_drained(wake, drain_end.is_some(), shared) => false,
            _ = tokio::signal::ctrl_c() => true,
        };
        let now = Instant::now();
        let producing = drain_end.is_none();
        if drain_end.is_none() && (interrupted || produce_end.is_some_and(|end| now >= end)) {
            shared.ledger().stop();
            drain_end = Some(now + Duration::from_secs_f64(args.drain_timeout));
            if interrupted {
                println!("Interrupted: waiting for the consumers to catch up.");
            }
        } else if interrupted {
            // A second Ctrl-C while draining: account now.
            drain_end = Some(now);
        }
        let caught_up = drain_end.is_some() && shared.ledger().settled();
        if now >= next || caught_up || drain_end.is_some_and(|end| now >= end) {
            let (totals, pending, error) = {
                let mut ledger = shared.ledger();
                (ledger.totals(), ledger.pending(), ledger.take_error())
            };
            let interval = SoakInterval {
                elapsed_s: (now - start).as_secs_f64(),
                producing,
                counts: totals.since(&last),
                pending,
                send_latency: Percentiles::of(&shared.send_latency.drain()),
                b2c: Percentiles::of(&shared.b2c.drain()),
                send_error: error,
            };
            println!("{}", interval.line());
            intervals.push(interval);
            last = totals;
            next = now + every;
        }
        if drain_end.is_some_and(|end| caught_up || now >= end) {
            // Sends still in flight when producing stopped are answered within the send
            // timeout, well inside the drain timeout.
            return intervals;
        }
    }
}

/// Sleeps until `until`; while draining, returns as soon as everything is settled.
async fn sleep_or_drained(until: Instant, draining: bool, shared: &Shared) {
    if !draining {
        tokio::time::sleep_until(until).await;
        return;
    }
    while Instant::now() < until {
        if shared.ledger().settled() {
            return;
        }
        tokio::time::sleep(DRAIN_POLL.min(until - Instant::now())).await;
    }
}

fn closing_lines(findings: &Findings) -> Vec<String> {
    let Findings {
        totals,
        missing,
        missing_ranges: ranges,
        delivered_unacknowledged,
        gaps,
        ..
    } = findings;
    let mut lines = vec![format!(
        "Soak: sent {}, acknowledged {}, failed {}, consumed {}, duplicated {}, reordered {}, missing {missing}, delivered without acknowledgement {delivered_unacknowledged}, other runs' messages {}",
        totals.sent,
        totals.acknowledged,
        totals.failed,
        totals.consumed,
        totals.duplicated,
        totals.reordered,
        totals.foreign
    )];
    for gap in gaps {
        lines.push(format!(
            "Gap from {:.1}s to {:.1}s: {}",
            gap.from_s, gap.to_s, gap.what
        ));
    }
    for range in ranges.iter().take(RANGES_PRINTED_MAX) {
        lines.push(format!(
            "Missing: sender {} sequence {} to {}",
            range.sender, range.first, range.last
        ));
    }
    if ranges.len() > RANGES_PRINTED_MAX {
        lines.push(format!(
            "... and {} more missing ranges (all in --json)",
            ranges.len() - RANGES_PRINTED_MAX
        ));
    }
    lines.push(if *missing == 0 {
        "Every acknowledged message was consumed.".into()
    } else {
        format!("{missing} acknowledged message(s) were never consumed.")
    });
    lines
}

fn page(args: &SoakArgs, machine: &Machine, findings: &Findings) -> Page {
    let intervals = &findings.intervals;
    let mut paragraphs = accounting_paragraphs(args, machine, findings);
    let shown = table_rows(intervals);
    if shown.len() < intervals.len() {
        paragraphs.push(format!(
            "The table shows {} of {} intervals: evenly spaced ones and every one with failures, duplicates, reordering or draining; all are in the JSON record.",
            shown.len(),
            intervals.len()
        ));
    }
    Page {
        title: format!("quiver bench soak: {}", args.topic),
        sections: vec![Section {
            heading: "Accounting".into(),
            paragraphs,
            table: Some(interval_table(shown)),
            charts: interval_charts(intervals),
        }],
    }
}

/// The run, its totals, its gaps, the disk and the machine, in words.
fn accounting_paragraphs(args: &SoakArgs, machine: &Machine, findings: &Findings) -> Vec<String> {
    let Findings {
        totals,
        missing,
        gaps,
        disk,
        steal,
        ..
    } = findings;
    let mut paragraphs = vec![
        format!(
            "Topic {}, {} senders, {} consumer(s), {} B bodies; machine: {}.",
            args.topic,
            args.senders,
            args.consumers,
            args.size,
            machine.line()
        ),
        format!(
            "Sent {}, acknowledged {}, failed {}, consumed {}, duplicated {}, reordered {}, missing {missing}.",
            totals.sent, totals.acknowledged, totals.failed, totals.consumed, totals.duplicated, totals.reordered
        ),
    ];
    paragraphs.extend(gaps.iter().map(|gap| {
        format!(
            "Gap from {:.1}s to {:.1}s: {}",
            gap.from_s, gap.to_s, gap.what
        )
    }));
    paragraphs.push(disk.line());
    paragraphs.push(steal.line());
    paragraphs
}

fn interval_table(shown: Vec<&SoakInterval>) -> Table {
    let rows = shown
        .into_iter()
        .map(|i| {
            vec![
                format!("{:.1}", i.elapsed_s),
                i.counts.sent.to_string(),
                i.counts.acknowledged.to_string(),
                i.counts.failed.to_string(),
                i.counts.consumed.to_string(),
                i.counts.duplicated.to_string(),
                i.counts.reordered.to_string(),
                i.pending.to_string(),
            ]
        })
        .collect();
    Table {
        header: [
            "seconds",
            "sent",
            "acked",
            "failed",
            "consumed",
            "duplicated",
            "reordered",
            "not yet consumed",
        ]
        .iter()
        .map(|h| h.to_string())
        .collect(),
        rows,
    }
}

fn interval_charts(intervals: &[SoakInterval]) -> Vec<Chart> {
    let series = |pick: fn(&SoakInterval) -> f64| -> Vec<(f64, f64)> {
        intervals.iter().map(|i| (i.elapsed_s, pick(i))).collect()
    };
    let latency = |pick: fn(&SoakInterval) -> &Percentiles| -> Vec<(f64, f64)> {
        intervals
            .iter()
            .filter(|i| pick(i).count > 0)
            .map(|i| (i.elapsed_s, pick(i).p99_ms))
            .collect()
    };
    vec![
        Chart::new("Messages per interval", "seconds", "messages")
            .with_series("acknowledged", series(|i| i.counts.acknowledged as f64))
            .with_series("consumed", series(|i| i.counts.consumed as f64))
            .with_series("failed", series(|i| i.counts.failed as f64)),
        Chart::new("Latency over time (p99)", "seconds", "ms (log)")
            .log_y()
            .with_series("send", latency(|i| &i.send_latency))
            .with_series("born to consume", latency(|i| &i.b2c)),
        Chart::new("Acknowledged, not yet consumed", "seconds", "messages")
            .with_series("lag", series(|i| i.pending as f64)),
    ]
}

/// Rows of the report's table: a long soak has thousands of intervals; an evenly spaced sample
/// of them keeps the page light, and every interval where something happened stays.
const TABLE_ROWS_SAMPLED: usize = 100;

fn table_rows(intervals: &[SoakInterval]) -> Vec<&SoakInterval> {
    let every = intervals.len().div_ceil(TABLE_ROWS_SAMPLED).max(1);
    intervals
        .iter()
        .enumerate()
        .filter(|(index, i)| {
            index % every == 0
                || *index + 1 == intervals.len()
                || !i.producing
                || i.counts.failed + i.counts.duplicated + i.counts.reordered > 0
        })
        .map(|(_, i)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_soaks_table_keeps_a_sample_and_every_eventful_interval() {
        let mut intervals: Vec<SoakInterval> =
            (1..=1_000).map(|n| interval(n as f64, 0, 10, 0)).collect();
        intervals[333].counts.failed = 2;
        let rows = table_rows(&intervals);
        assert_eq!(rows.len(), 100 + 1 + 1, "a sample, the failure, the last");
        assert!(rows.iter().any(|i| i.elapsed_s == 334.0));
        assert_eq!(
            table_rows(&intervals[..50]).len(),
            50,
            "a short soak shows all"
        );
    }

    #[test]
    fn the_ledger_counts_missing_duplicated_and_reordered() {
        let mut ledger = Ledger::new(2);
        for sequence in 0..6 {
            ledger.sent(0, sequence);
            ledger.acknowledged(0, sequence);
        }
        ledger.sent(1, 0);
        ledger.failed("timeout".into());
        assert_eq!(ledger.pending(), 6);
        // Queue 0 gets 0, 2, 1 (reordered), queue 1 gets 3; 2 arrives twice; 4 and 5 never.
        ledger.consumed("b", 0, 0, 0);
        ledger.consumed("b", 0, 0, 2);
        ledger.consumed("b", 0, 0, 1);
        ledger.consumed("b", 1, 0, 3);
        ledger.consumed("b", 0, 0, 2);
        // Sender 1's failed send was stored after all; a sender this run does not have.
        ledger.consumed("b", 1, 1, 0);
        ledger.consumed("b", 1, 7, 0);
        let totals = ledger.totals();
        assert_eq!((totals.sent, totals.acknowledged, totals.failed), (7, 6, 1));
        assert_eq!(
            (totals.consumed, totals.duplicated, totals.reordered),
            (5, 1, 1)
        );
        assert_eq!(totals.foreign, 1);
        assert_eq!(ledger.pending(), 2);
        assert_eq!(
            ledger.missing(),
            vec![Missing {
                sender: 0,
                first: 4,
                last: 5
            }]
        );
        assert_eq!(ledger.delivered_unacknowledged(), 1);
    }

    #[test]
    fn a_send_still_in_flight_keeps_the_drain_going() {
        let mut ledger = Ledger::new(1);
        ledger.sent(0, 0);
        ledger.acknowledged(0, 0);
        ledger.consumed("b", 0, 0, 0);
        // Producing stops with sequence 1 sent and not yet answered: nothing is pending, and
        // yet its answer may still come and its message with it.
        ledger.sent(0, 1);
        assert_eq!(ledger.pending(), 0);
        assert!(!ledger.settled());
        ledger.acknowledged(0, 1);
        assert!(!ledger.settled(), "acknowledged, not yet consumed");
        ledger.consumed("b", 0, 0, 1);
        assert!(ledger.settled());
        // A failed send settles too.
        ledger.sent(0, 2);
        assert!(!ledger.settled());
        ledger.failed("timeout".into());
        assert!(ledger.settled());
        assert!(ledger.missing().is_empty());
        // Once producing stops, a sender that was waiting for its due time sends nothing.
        ledger.stop();
        assert!(!ledger.sent(0, 3));
        assert!(ledger.settled());
        assert_eq!(ledger.totals().sent, 3);
    }

    #[test]
    fn a_message_consumed_before_its_answer_is_not_pending() {
        let mut ledger = Ledger::new(1);
        ledger.sent(0, 0);
        ledger.consumed("b", 0, 0, 0);
        ledger.acknowledged(0, 0);
        ledger.acknowledged(0, 0);
        assert_eq!(ledger.pending(), 0);
        assert_eq!(ledger.totals().acknowledged, 1);
        assert!(ledger.missing().is_empty());
    }

    fn interval(elapsed_s: f64, failed: u64, consumed: u64, pending: u64) -> SoakInterval {
        SoakInterval {
            elapsed_s,
            producing: true,
            counts: Totals {
                failed,
                consumed,
                ..Totals::default()
            },
            pending,
            send_latency: Percentiles::default(),
            b2c: Percentiles::default(),
            send_error: (failed > 0).then(|| "connection refused".to_owned()),
        }
    }

    #[test]
    fn gaps_say_when_sends_failed_and_when_nothing_arrived() {
        let intervals = vec![
            interval(1.0, 0, 10, 0),
            interval(2.0, 3, 0, 5),
            interval(3.0, 4, 0, 5),
            interval(4.0, 0, 12, 0),
        ];
        let gaps = gaps(&intervals, 1.0);
        assert_eq!(gaps.len(), 2, "{gaps:?}");
        assert_eq!((gaps[0].from_s, gaps[0].to_s), (1.0, 3.0));
        assert!(gaps
            .iter()
            .any(|g| g.what == "7 sends failed (last error: connection refused)"));
        assert!(gaps
            .iter()
            .any(|g| g.what.starts_with("consumers received nothing")));
        let line = intervals[1].line();
        assert!(line.contains("failed 3 consumed 0"), "{line}");
        assert!(
            line.ends_with("| last send error: connection refused"),
            "{line}"
        );
    }
}
