//! `quiver bench produce` and `quiver bench consume`: the figures RocketMQ's `producer.sh` /
//! `consumer.sh` print (Send TPS, Max RT, Average RT, Send Failed, Response Failed; consume TPS,
//! born-to-consume and store-to-consume latency), plus HDR percentiles and bytes per second,
//! against Quiver or any RocketMQ cluster. Over them, the studies people otherwise run by hand:
//! `sweep` (a plan of scenarios, unattended, resumable), `peak` (raise concurrency until
//! throughput stops rising, then advise), `compare` (runs side by side), `soak` (hours of
//! producing and consuming with every message accounted for), each with JSON and HTML reports.
//!
//! Senders are tasks on a small tokio runtime, pipelined over one connection per broker, so
//! `-w 64` means 64 requests in flight rather than 64 threads.

mod compare;
mod consume;
mod disk;
mod histogram;
mod html;
mod machine;
mod pages;
mod peak;
mod plan;
mod point;
mod produce;
mod progress;
mod report;
mod schedule;
mod sender;
mod soak;
mod steal;
mod study;
mod sweep;
mod ticker;
mod topic;

use std::path::PathBuf;

use quiver_client::ClientError;
use serde::Serialize;

pub use disk::{DiskFigures, DiskSample};
pub use histogram::{Percentiles, Recorder};
pub use machine::Machine;
pub use report::{
    ConsumeInterval, Counters, Goal, OutputStyle, ProduceInterval, Summary, Throughput,
};
pub use steal::StealFigures;

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Send messages and report send TPS, round-trip latency percentiles and bytes per second.
    Produce(ProduceArgs),
    /// Consume a topic and report consume TPS and born/store-to-consume latency percentiles.
    Consume(ConsumeArgs),
    /// Run a plan of scenarios (threads x sizes x queue counts ...) one after another,
    /// unattended; resumes from the last finished point of its --json file.
    Sweep(plan::SweepArgs),
    /// Raise the number of senders until throughput stops rising, failures appear or latency
    /// passes a limit; report the peak, the knee and the daily load to plan for.
    Peak(peak::PeakArgs),
    /// Put the JSON records of sweeps or peaks side by side, scenario by scenario.
    Compare(compare::CompareArgs),
    /// Produce and consume together for a long time and account for every message.
    Soak(soak::SoakArgs),
}

/// The protocol the bench's clients speak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// RocketMQ's remoting protocol, to the brokers the name server names.
    #[default]
    Remoting,
    /// RocketMQ 5's gRPC protocol, to `--grpc-endpoint`: a Quiver broker's gRPC port or a
    /// RocketMQ proxy.
    Grpc,
}

/// Options shared by both commands.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct RunArgs {
    /// Name server addresses, `host:port;host:port`. With `--protocol grpc` only topics are
    /// created through it.
    #[arg(short = 'n', long = "namesrv", default_value = "127.0.0.1:9876")]
    pub namesrv: String,
    /// `remoting`: RocketMQ's protocol, as producer.sh and consumer.sh speak it. `grpc`: the
    /// protocol of RocketMQ 5's gRPC clients (producers and SimpleConsumers).
    #[arg(long, value_enum, default_value_t = Protocol::Remoting)]
    pub protocol: Protocol,
    /// With `--protocol grpc`: where the clients connect (plaintext HTTP/2).
    #[arg(long = "grpc-endpoint", default_value = "127.0.0.1:8081")]
    pub grpc_endpoint: String,
    /// Stop after this many messages (warm-up included).
    #[arg(long, conflicts_with = "duration", value_parser = clap::value_parser!(u64).range(1..))]
    pub messages: Option<u64>,
    /// Measure for this many seconds after the warm-up (default: until Ctrl-C).
    #[arg(long, value_parser = positive_seconds)]
    pub duration: Option<f64>,
    /// Seconds at the start that are reported but left out of the summary.
    #[arg(long, default_value_t = 0.0, value_parser = seconds)]
    pub warmup: f64,
    /// Seconds between report lines.
    #[arg(long = "report-interval", default_value_t = 10.0, value_parser = report_seconds)]
    pub report_interval: f64,
    /// Also write parameters, every interval, the summary and the machine to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write a self-contained HTML report with charts to this file.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Worker threads of the bench's async runtime.
    #[arg(long = "runtime-threads", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub runtime_threads: u32,
    /// The broker's process id, when it runs on this machine: the disk line then says what
    /// the broker itself wrote to storage.
    #[arg(long = "broker-pid")]
    pub broker_pid: Option<u32>,
}

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct ProduceArgs {
    #[arg(short = 't', long, default_value = "BenchmarkTest")]
    pub topic: String,
    /// Concurrent senders, each with one request in flight (`--async`: a window of them).
    #[arg(short = 'w', long = "threads", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub senders: u32,
    /// Producer instances the senders are spread over, each with a connection of its own to
    /// every broker (as separate producer processes have). 1: all senders share one producer
    /// and one connection, as the threads of RocketMQ's benchmark Producer do. pulsar-perf's
    /// name, producers per topic, is accepted too.
    #[arg(long, visible_alias = "num-producers", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub producers: u32,
    /// Message body size in bytes.
    #[arg(short = 's', long = "size", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=4_194_304))]
    pub size: u32,
    /// Give every message a key (the current second, as the Java benchmark does).
    #[arg(short = 'k', long = "keys")]
    pub keys: bool,
    /// Create the topic with this many queues on every broker of the cluster first.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub queues: Option<u32>,
    /// Messages per second in total; latency is measured from each message's intended send
    /// time, so stalls show in the percentiles (coordinated omission).
    #[arg(long, value_parser = positive_rate)]
    pub rate: Option<f64>,
    /// Messages per SEND_BATCH_MESSAGE request (1: plain sends).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub batch: u32,
    /// Client-side batching as pulsar-perf does it: each producer gathers the senders'
    /// messages and sends a batch when it holds this many or --batch-max-publish-delay-ms
    /// after its first message; latency counts from each message's own send time.
    #[arg(long = "batch-max-messages", conflicts_with_all = ["batch", "async_send"], value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub batch_max_messages: Option<u32>,
    /// The longest a message waits for its client-side batch to fill (pulsar-perf: 1 ms).
    #[arg(long = "batch-max-publish-delay-ms", default_value_t = 1.0, requires = "batch_max_messages", value_parser = publish_delay_ms)]
    pub batch_max_publish_delay_ms: f64,
    /// Interval and summary lines as RocketMQ's benchmark Producer prints them, or as
    /// pulsar-perf does.
    #[arg(long, value_enum, default_value_t = OutputStyle::Rocketmq)]
    pub output: OutputStyle,
    /// Do not wait for each response before the next send (up to --async-window per sender).
    #[arg(long = "async")]
    pub async_send: bool,
    #[arg(long = "async-window", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub async_window: u32,
    #[arg(long, default_value = "benchmark_producer")]
    pub group: String,
    #[arg(long = "send-timeout-ms", default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub send_timeout_ms: u64,
    #[command(flatten)]
    pub run: RunArgs,
}

impl ProduceArgs {
    /// `bench produce`'s defaults for `topic`, created with `queues` queues: what a sweep
    /// point or a soak starts from.
    pub(crate) fn for_topic(namesrv: &str, topic: &str, queues: u32) -> ProduceArgs {
        ProduceArgs {
            topic: topic.to_owned(),
            senders: 1,
            producers: 1,
            size: 128,
            keys: false,
            queues: Some(queues),
            rate: None,
            batch: 1,
            batch_max_messages: None,
            batch_max_publish_delay_ms: 1.0,
            output: OutputStyle::Rocketmq,
            async_send: false,
            async_window: 16,
            group: "benchmark_producer".into(),
            send_timeout_ms: 3_000,
            run: RunArgs {
                namesrv: namesrv.to_owned(),
                protocol: Protocol::Remoting,
                grpc_endpoint: "127.0.0.1:8081".into(),
                messages: None,
                duration: None,
                warmup: 0.0,
                report_interval: 10.0,
                json: None,
                html: None,
                runtime_threads: 1,
                broker_pid: None,
            },
        }
    }
}

#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct ConsumeArgs {
    #[arg(short = 't', long, default_value = "BenchmarkTest")]
    pub topic: String,
    #[arg(short = 'g', long, default_value = "benchmark_consumer")]
    pub group: String,
    /// Tag expression: `*` or `tagA || tagB`.
    #[arg(short = 'e', long, default_value = "*")]
    pub expression: String,
    /// Where a queue without a committed offset starts.
    #[arg(long, default_value = "last", value_parser = ["last", "first"])]
    pub from: String,
    /// Consume by pop (RocketMQ 5): switch the group to POP on every master of the topic and
    /// pop from any queue, acknowledging each pop's messages in one batch.
    #[arg(long)]
    pub pop: bool,
    /// With --pop: pop consumers in the group, each with its own connection.
    #[arg(long = "pop-consumers", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256), requires = "pop")]
    pub pop_consumers: u32,
    /// With --pop: pops in flight per consumer and master.
    #[arg(long = "pop-loops", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256), requires = "pop")]
    pub pop_loops: u32,
    /// With `--protocol grpc`: SimpleConsumers in the group, each with its own connection and
    /// one receive in flight.
    #[arg(long = "receivers", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub receivers: u32,
    #[command(flatten)]
    pub run: RunArgs,
}

pub(crate) fn seconds(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if value.is_finite() && (0.0..=SECONDS_MAX).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{text} must be from 0 to {SECONDS_MAX} seconds"))
    }
}

/// Longer than any run (about 31 years), and far from where `Instant` arithmetic overflows.
const SECONDS_MAX: f64 = 1e9;

/// Report lines more often than this would be noise, and a run keeps every one for `--json`.
const REPORT_INTERVAL_MIN_S: f64 = 0.1;

pub(crate) fn report_seconds(text: &str) -> Result<f64, String> {
    match seconds(text)? {
        value if value >= REPORT_INTERVAL_MIN_S => Ok(value),
        _ => Err(format!(
            "{text} must be at least {REPORT_INTERVAL_MIN_S} seconds"
        )),
    }
}

pub(crate) fn positive_seconds(text: &str) -> Result<f64, String> {
    match seconds(text)? {
        value if value > 0.0 => Ok(value),
        _ => Err(format!("{text} must be more than zero seconds")),
    }
}

/// A publish delay longer than this would be a batch per many seconds: a mistake, not a plan.
const PUBLISH_DELAY_MS_MAX: f64 = 10_000.0;

fn publish_delay_ms(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && (0.0..=PUBLISH_DELAY_MS_MAX).contains(&value) => {
            Ok(value)
        }
        _ => Err(format!(
            "{text:?} must be from 0 to {PUBLISH_DELAY_MS_MAX} milliseconds"
        )),
    }
}

pub(crate) fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && value > 0.0 => Ok(value),
        _ => Err(format!(
            "{text:?} is not a positive number of messages per second"
        )),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot reach the name server at {namesrv}: {reason}")]
    NamesrvUnreachable { namesrv: String, reason: String },
    #[error("topic {topic} does not exist on the cluster of {namesrv}; create it with `quiver bench produce -t {topic} --queues 8` or `mqadmin updateTopic`")]
    TopicMissing { topic: String, namesrv: String },
    #[error("the name server at {namesrv} knows no broker")]
    NoBroker { namesrv: String },
    #[error("cannot create topic {topic} on broker {broker}: {reason}")]
    CreateTopic {
        topic: String,
        broker: String,
        reason: String,
    },
    #[error("cannot write {path}: {reason}")]
    Json { path: PathBuf, reason: String },
    #[error("cannot read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{path}, line {line}: {reason}")]
    Plan {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("{0}")]
    Usage(String),
    #[error("{path} holds another plan ({reason}); pass --fresh to start it over, or another --json file")]
    ResumeMismatch { path: PathBuf, reason: String },
    #[error("interrupted after {done} of {total} points; run the same command again to resume")]
    Interrupted { done: usize, total: usize },
    #[error("soak: {missing} acknowledged message(s) never arrived")]
    MessagesMissing { missing: u64 },
    #[error("cannot start the async runtime: {0}")]
    Runtime(String),
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Runs a bench command on its own small runtime; returns when the run ends (goal reached or
/// Ctrl-C) and everything was reported.
pub fn run(command: BenchCommand) -> Result<(), BenchError> {
    let threads = match &command {
        BenchCommand::Produce(args) => args.run.runtime_threads,
        BenchCommand::Consume(args) => args.run.runtime_threads,
        BenchCommand::Sweep(args) => args.runtime_threads,
        BenchCommand::Peak(args) => args.runtime_threads,
        BenchCommand::Compare(_) => 1,
        BenchCommand::Soak(args) => args.runtime_threads,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads as usize)
        .enable_all()
        .build()
        .map_err(|error| BenchError::Runtime(error.to_string()))?;
    runtime.block_on(async move {
        match command {
            BenchCommand::Produce(args) => produce::run(args).await,
            BenchCommand::Consume(args) => consume::run(args).await,
            BenchCommand::Sweep(args) => sweep::run(args).await,
            BenchCommand::Peak(args) => peak::run(args).await,
            BenchCommand::Compare(args) => compare::run(args),
            BenchCommand::Soak(args) => soak::run(args).await,
        }
    })
}

/// Maps a failed first lookup to the error a person needs to see.
pub(crate) fn lookup_error(error: ClientError, namesrv: &str, topic: &str) -> BenchError {
    match error {
        ClientError::NamesrvUnreachable { last_error, .. } => BenchError::NamesrvUnreachable {
            namesrv: namesrv.to_owned(),
            reason: last_error,
        },
        ClientError::TopicNotFound { .. } => BenchError::TopicMissing {
            topic: topic.to_owned(),
            namesrv: namesrv.to_owned(),
        },
        other => BenchError::Client(other),
    }
}

/// Writes the JSON record of a run: to a temporary file renamed over `path`, so that a sweep
/// interrupted while writing still finds its last whole record.
pub(crate) fn write_json(
    path: &std::path::Path,
    record: &impl Serialize,
) -> Result<(), BenchError> {
    let text = serde_json::to_vec_pretty(record).map_err(|error| BenchError::Json {
        path: path.to_owned(),
        reason: error.to_string(),
    })?;
    write_file(path, &text)
}

/// Writes `bytes` to a temporary file beside `path` and renames it into place.
pub(crate) fn write_file(path: &std::path::Path, bytes: &[u8]) -> Result<(), BenchError> {
    let failed = |error: std::io::Error| BenchError::Json {
        path: path.to_owned(),
        reason: error.to_string(),
    };
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".partial");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, bytes).map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(failed)
}

/// Reads and parses a JSON file this tool wrote.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
) -> Result<T, BenchError> {
    let failed = |reason: String| BenchError::Read {
        path: path.to_owned(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|error| failed(error.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|error| failed(error.to_string()))
}
