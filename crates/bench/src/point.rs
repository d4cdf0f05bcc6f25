//! One point of a sweep or a peak search: the producers of a scenario for its warm-up and
//! duration, with consumers alongside when the scenario has them, recorded as the seeds
//! tabulate it (`study::PointRecord`).

use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use quiver_client::{Client, ClientConfig, ConsumeFrom, PushConsumerConfig};
use tokio::time::Instant;

use crate::consume::{start_consumer, Tally};
use crate::histogram::{new_histogram, Percentiles};
use crate::machine::Machine;
use crate::plan::Scenario;
use crate::produce;
use crate::report::{ConsumeInterval, Counters, Print};
use crate::schedule::Stop;
use crate::study::{ConsumeRecord, PointRecord};
use crate::{BenchError, ProduceArgs};

/// How long a point waits after its producers stop for the consumers to catch up before it
/// reads the lag: the consumers' long polls answer within a few ms of an arrival, so what is
/// still missing after this is lag, not delivery delay.
const CONSUMER_SETTLE: Duration = Duration::from_millis(500);

/// What every point of a study shares.
#[derive(Clone, Debug)]
pub struct PointSettings {
    pub namesrv: String,
    pub topic_prefix: String,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub report_interval_s: f64,
    pub send_timeout_ms: u64,
    pub broker_pid: Option<u32>,
}

/// Runs one point; None when it was interrupted (Ctrl-C): such a point is not recorded, so a
/// resumed sweep runs it again.
pub async fn run(
    settings: &PointSettings,
    scenario: &Scenario,
    machine: &Machine,
) -> Result<Option<PointRecord>, BenchError> {
    let topic = format!("{}{}", settings.topic_prefix, scenario.queues);
    let mut args = ProduceArgs::for_topic(&settings.namesrv, &topic, scenario.queues);
    args.senders = scenario.threads;
    args.producers = scenario.producers;
    args.size = scenario.size;
    args.rate = scenario.rate;
    args.batch = scenario.batch;
    args.send_timeout_ms = settings.send_timeout_ms;
    args.run.duration = Some(settings.duration_s);
    args.run.warmup = settings.warmup_s;
    args.run.report_interval = settings.report_interval_s;
    args.run.broker_pid = settings.broker_pid;
    let consumers = if scenario.consumers > 0 {
        // The consumers must find the topic, which the producers would create only later.
        crate::topic::ensure(&args).await?;
        Some(Consumers::start(settings, &topic, scenario.consumers).await?)
    } else {
        None
    };
    let outcome = produce::measure(&args, machine, Print::Quiet).await;
    let consume = match consumers {
        Some(consumers) => Some(consumers.finish().await),
        None => None,
    };
    let outcome = outcome?;
    if outcome.stopped_by == Stop::Interrupted {
        return Ok(None);
    }
    let mut consume = consume;
    if let Some(consume) = &mut consume {
        let sent: u64 = outcome.intervals.iter().map(|i| i.messages).sum();
        consume.fill_lag(&outcome.intervals, sent);
    }
    Ok(Some(PointRecord::new(
        scenario,
        topic,
        outcome.intervals,
        outcome.summary,
        consume,
    )))
}

/// Consumers of one group, started before the producers so they see every message, and a
/// task that samples what they received every report interval.
struct Consumers {
    consumers: Vec<quiver_client::PushConsumer>,
    sampler: tokio::task::JoinHandle<Sampled>,
    stop: Arc<tokio::sync::Notify>,
}

/// What the sampler gathered.
struct Sampled {
    intervals: Vec<ConsumeInterval>,
    consumed: Vec<u64>,
    b2c: Histogram<u64>,
    s2c: Histogram<u64>,
    measured: Counters,
    measured_s: f64,
}

impl Consumers {
    async fn start(
        settings: &PointSettings,
        topic: &str,
        count: u32,
    ) -> Result<Consumers, BenchError> {
        let tally = Arc::new(Tally::new(None));
        // A group of its own per point: a group an earlier point used would resume from its
        // committed offset and count that point's lag as this one's throughput.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        let group = format!("{topic}_sweep_{nanos:x}");
        let mut consumers = Vec::new();
        for index in 0..count {
            let mut config = ClientConfig::new(&settings.namesrv);
            config.instance_name = format!("{}-consumer-{index}", config.instance_name);
            let client = Client::new(config)?;
            let mut config = PushConsumerConfig::new(&group, topic);
            config.consume_from = ConsumeFrom::LastOffset;
            consumers.push(start_consumer(client, config, &tally, &settings.namesrv).await?);
        }
        let stop = Arc::new(tokio::sync::Notify::new());
        let sampler = tokio::spawn(sample(
            tally.clone(),
            Instant::now(),
            settings.warmup_s,
            settings.report_interval_s,
            stop.clone(),
        ));
        Ok(Consumers {
            consumers,
            sampler,
            stop,
        })
    }

    async fn finish(self) -> ConsumeRecord {
        tokio::time::sleep(CONSUMER_SETTLE).await;
        self.stop.notify_one();
        let sampled = match self.sampler.await {
            Ok(sampled) => sampled,
            Err(_) => Sampled::empty(),
        };
        for consumer in self.consumers {
            let _ = consumer.shutdown().await;
        }
        let b2c = Percentiles::of(&sampled.b2c);
        ConsumeRecord {
            consume_tps: sampled.measured.messages as f64 / sampled.measured_s.max(1e-9),
            b2c,
            s2c: Percentiles::of(&sampled.s2c),
            lag_end: 0,
            intervals: sampled.intervals,
            lag: sampled.consumed,
        }
    }
}

impl Sampled {
    fn empty() -> Sampled {
        Sampled {
            intervals: Vec::new(),
            consumed: Vec::new(),
            b2c: new_histogram(),
            s2c: new_histogram(),
            measured: Counters::default(),
            measured_s: 0.0,
        }
    }
}

async fn sample(
    tally: Arc<Tally>,
    start: Instant,
    warmup_s: f64,
    every_s: f64,
    stop: Arc<tokio::sync::Notify>,
) -> Sampled {
    let mut sampled = Sampled::empty();
    let warmup_end = start + Duration::from_secs_f64(warmup_s);
    let every = Duration::from_secs_f64(every_s);
    let mut last = Counters::default();
    let mut last_at = start;
    let mut measure_from: Option<(Instant, Counters)> = (warmup_s <= 0.0).then_some((start, last));
    loop {
        let mut next = last_at + every;
        if last_at < warmup_end {
            next = next.min(warmup_end);
        }
        let stopped = tokio::select! {
            _ = tokio::time::sleep_until(next) => false,
            _ = stop.notified() => true,
        };
        let now = Instant::now();
        let counters = tally.counters();
        let (b2c, s2c) = (tally.b2c.drain(), tally.s2c.drain());
        let warmup = last_at < warmup_end;
        sampled.intervals.push(ConsumeInterval::new(
            (now - start).as_secs_f64(),
            (now - last_at).as_secs_f64(),
            warmup,
            &counters.since(&last),
            Percentiles::of(&b2c),
            Percentiles::of(&s2c),
        ));
        sampled.consumed.push(counters.messages);
        if warmup && now >= warmup_end {
            measure_from = Some((now, counters));
        } else if !warmup {
            let _ = sampled.b2c.add(&b2c);
            let _ = sampled.s2c.add(&s2c);
        }
        last = counters;
        last_at = now;
        if stopped {
            if let Some((at, counters_then)) = measure_from {
                sampled.measured = counters.since(&counters_then);
                sampled.measured_s = (now - at).as_secs_f64();
            }
            return sampled;
        }
    }
}
