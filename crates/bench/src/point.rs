//! One point of a sweep or a peak search: the producers of a scenario for its warm-up and
//! duration, with consumers alongside when the scenario has them, recorded as the seeds
//! tabulate it.

use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use quiver_client::{Client, ClientConfig, ConsumeFrom, PushConsumerConfig};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::consume::{start_consumer, Tally};
use crate::histogram::{new_histogram, Percentiles};
use crate::machine::Machine;
use crate::plan::Scenario;
use crate::produce::{self, Print};
use crate::report::{ConsumeInterval, Counters, ProduceInterval, Summary};
use crate::schedule::Stop;
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

/// One finished point, with the figures seed 000 reads off each scenario (max TPS, max and
/// average RT, failures) and everything `produce` and `consume` record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointRecord {
    pub scenario: Scenario,
    pub topic: String,
    /// The largest interval Send TPS after warm-up (the seeds' "max TPS").
    pub max_tps: f64,
    pub max_rt_ms: f64,
    pub average_rt_ms: f64,
    pub failed: u64,
    pub summary: Summary,
    pub intervals: Vec<ProduceInterval>,
    pub consume: Option<ConsumeRecord>,
}

/// The consumers alongside a point's producers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConsumeRecord {
    /// Messages consumed per second over the measured part.
    pub consume_tps: f64,
    pub b2c: Percentiles,
    pub s2c: Percentiles,
    /// Messages sent during the point and not consumed when it ended.
    pub lag_end: u64,
    pub intervals: Vec<ConsumeInterval>,
    /// Messages sent and not yet consumed at the end of each interval.
    pub lag: Vec<u64>,
}

impl PointRecord {
    /// The measured-part figures from a produce outcome.
    fn new(
        scenario: &Scenario,
        topic: String,
        intervals: Vec<ProduceInterval>,
        summary: Summary,
        consume: Option<ConsumeRecord>,
    ) -> PointRecord {
        let measured = intervals.iter().filter(|interval| !interval.warmup);
        let max_tps = measured.clone().map(|i| i.send_tps).fold(0.0, f64::max);
        PointRecord {
            scenario: scenario.clone(),
            topic,
            max_tps,
            max_rt_ms: summary.latency.max_ms,
            average_rt_ms: summary.latency.mean_ms,
            failed: summary.counters.send_failed + summary.counters.response_failed,
            summary,
            intervals,
            consume,
        }
    }
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

impl ConsumeRecord {
    /// Turns the cumulative consumed counts kept in `lag` into lag: messages the producers had
    /// sent by then (from their intervals) minus messages consumed.
    fn fill_lag(&mut self, produced: &[ProduceInterval], sent_total: u64) {
        let consumed_total = self.lag.last().copied().unwrap_or(0);
        let lag = self
            .intervals
            .iter()
            .zip(&self.lag)
            .map(|(interval, consumed)| {
                let sent: u64 = produced
                    .iter()
                    .take_while(|p| p.elapsed_s <= interval.elapsed_s + 1e-3)
                    .map(|p| p.messages)
                    .sum();
                sent.saturating_sub(*consumed)
            })
            .collect();
        self.lag = lag;
        self.lag_end = sent_total.saturating_sub(consumed_total);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn produced(elapsed_s: f64, messages: u64) -> ProduceInterval {
        let delta = Counters {
            messages,
            ..Counters::default()
        };
        ProduceInterval::new(
            elapsed_s,
            1.0,
            false,
            &delta,
            &delta,
            Percentiles::default(),
            0.0,
        )
    }

    #[test]
    fn lag_is_what_was_sent_by_each_sample_minus_what_was_consumed() {
        let consumed_at = |elapsed_s: f64| {
            ConsumeInterval::new(
                elapsed_s,
                1.0,
                false,
                &Counters::default(),
                Percentiles::default(),
                Percentiles::default(),
            )
        };
        let mut record = ConsumeRecord {
            consume_tps: 0.0,
            b2c: Percentiles::default(),
            s2c: Percentiles::default(),
            lag_end: 0,
            intervals: vec![consumed_at(1.0), consumed_at(2.0), consumed_at(2.5)],
            lag: vec![80, 150, 300],
        };
        let producer = [produced(1.0, 100), produced(2.0, 100), produced(2.4, 100)];
        record.fill_lag(&producer, 300);
        assert_eq!(record.lag, vec![20, 50, 0]);
        assert_eq!(record.lag_end, 0);
        record.lag = vec![10, 20, 290];
        record.fill_lag(&producer, 300);
        assert_eq!(record.lag_end, 10);
    }

    #[test]
    fn max_tps_leaves_out_the_warmup() {
        let mut warm = produced(1.0, 9_000);
        warm.warmup = true;
        let intervals = vec![warm, produced(2.0, 500), produced(3.0, 700)];
        let summary = Summary::new(2.0, Counters::default(), Percentiles::default(), 0.0, 3.0);
        let scenario = Scenario {
            threads: 1,
            size: 1,
            queues: 1,
            batch: 1,
            rate: None,
            producers: 1,
            consumers: 0,
        };
        let point = PointRecord::new(&scenario, "T1".into(), intervals, summary, None);
        assert_eq!(point.max_tps, 700.0);
    }
}
