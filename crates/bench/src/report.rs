//! Report arithmetic and the printed lines: the official tools' fields first (so existing
//! scripts that grep for them keep working), then percentiles and throughput in bytes.

use serde::{Deserialize, Serialize};

use tokio::time::Instant;

use crate::disk::{DiskFigures, DiskSample};
use crate::histogram::Percentiles;
use crate::machine::process_cpu_s;
use crate::steal::{StealFigures, StealMark};

/// How `bench produce` prints its interval and summary lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStyle {
    /// RocketMQ's benchmark Producer fields, then percentiles and MB/s.
    #[default]
    Rocketmq,
    /// pulsar-perf's `Throughput produced: ... msg/s --- ... Mbit/s --- failure ... ---
    /// Latency: mean: ...` lines.
    Pulsar,
}

/// Whether a run prints its header and a line per interval (`bench produce`) or nothing (a
/// point of a sweep, which prints its own progress).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Print {
    Lines(OutputStyle),
    Quiet,
}

/// Cumulative counts kept by the senders or the consumer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub messages: u64,
    pub bytes: u64,
    /// Client-side failures: no connection, timeout (Java's "Send Failed").
    pub send_failed: u64,
    /// The broker answered with an error code (Java's "Response Failed").
    pub response_failed: u64,
    /// Stored but not acknowledged as durable, by the send status the broker answered: not in
    /// `messages` (RocketMQ's benchmark Producer counts them as sent; they are not safe).
    #[serde(default)]
    pub not_durable: NotDurable,
}

/// Sends the broker stored but did not acknowledge as durable, by send status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotDurable {
    /// FLUSH_DISK_TIMEOUT: written, but no fsync covered it in time (or it failed).
    pub flush_disk_timeout: u64,
    /// FLUSH_SLAVE_TIMEOUT: a SYNC_MASTER's slave did not confirm it in time.
    pub flush_slave_timeout: u64,
    /// SLAVE_NOT_AVAILABLE: a SYNC_MASTER had no slave in sync to wait for.
    pub slave_not_available: u64,
}

impl NotDurable {
    pub fn total(&self) -> u64 {
        self.flush_disk_timeout + self.flush_slave_timeout + self.slave_not_available
    }

    fn since(&self, earlier: &NotDurable) -> NotDurable {
        NotDurable {
            flush_disk_timeout: self
                .flush_disk_timeout
                .saturating_sub(earlier.flush_disk_timeout),
            flush_slave_timeout: self
                .flush_slave_timeout
                .saturating_sub(earlier.flush_slave_timeout),
            slave_not_available: self
                .slave_not_available
                .saturating_sub(earlier.slave_not_available),
        }
    }

    /// The summary's line for them, when there are any.
    pub fn line(&self) -> Option<String> {
        (self.total() > 0).then(|| {
            format!(
                "Stored but not acknowledged as durable (not counted as sent): FLUSH_DISK_TIMEOUT {}, FLUSH_SLAVE_TIMEOUT {}, SLAVE_NOT_AVAILABLE {}",
                self.flush_disk_timeout, self.flush_slave_timeout, self.slave_not_available
            )
        })
    }
}

impl Counters {
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            messages: self.messages.saturating_sub(earlier.messages),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            send_failed: self.send_failed.saturating_sub(earlier.send_failed),
            response_failed: self.response_failed.saturating_sub(earlier.response_failed),
            not_durable: self.not_durable.since(&earlier.not_durable),
        }
    }
}

/// Messages, megabytes (10^6 bytes) and megabits (10^6 bits) per second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub messages_per_s: f64,
    pub mb_per_s: f64,
    pub mbit_per_s: f64,
}

impl Throughput {
    pub fn of(counters: &Counters, seconds: f64) -> Throughput {
        if seconds <= 0.0 {
            return Throughput::default();
        }
        let bytes_per_s = counters.bytes as f64 / seconds;
        Throughput {
            messages_per_s: counters.messages as f64 / seconds,
            mb_per_s: bytes_per_s / 1e6,
            mbit_per_s: bytes_per_s * 8.0 / 1e6,
        }
    }

    fn line(&self) -> String {
        format!("{:.2} MB/s {:.1} Mbit/s", self.mb_per_s, self.mbit_per_s)
    }
}

/// What a run aims for, for the progress column.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Goal {
    Forever,
    Seconds(f64),
    Messages(u64),
}

/// `[  10.0s  17% of 60s]`, `[  10.0s  12% of 1000000 msgs]`, `[  10.0s]`; the warm-up is
/// marked so nobody mistakes it for the measurement.
pub fn progress(elapsed_s: f64, goal: Goal, messages: u64, warmup: bool) -> String {
    let done = match goal {
        Goal::Forever => String::new(),
        Goal::Seconds(total) => format!(" {:3.0}% of {total:.0}s", percent(elapsed_s, total)),
        Goal::Messages(total) => {
            format!(
                " {:3.0}% of {total} msgs",
                percent(messages as f64, total as f64)
            )
        }
    };
    let phase = if warmup { " warm-up" } else { "" };
    format!("[{elapsed_s:7.1}s{done}{phase}]")
}

fn percent(done: f64, total: f64) -> f64 {
    if total <= 0.0 {
        100.0
    } else {
        (done / total * 100.0).min(100.0)
    }
}

/// One report interval of `bench produce`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProduceInterval {
    /// Seconds since the run started, at the end of this interval.
    pub elapsed_s: f64,
    pub interval_s: f64,
    pub warmup: bool,
    pub send_tps: f64,
    /// Largest round trip so far in this phase (warm-up or measurement), as Java's Max RT.
    pub max_rt_ms: f64,
    /// Mean round trip of this interval.
    pub average_rt_ms: f64,
    /// Cumulative in this phase, as Java prints them.
    pub send_failed: u64,
    pub response_failed: u64,
    pub throughput: Throughput,
    pub latency: Percentiles,
    pub messages: u64,
    /// Failed messages in this interval alone (both kinds).
    #[serde(default)]
    pub failed: u64,
}

impl ProduceInterval {
    pub fn new(
        elapsed_s: f64,
        interval_s: f64,
        warmup: bool,
        delta: &Counters,
        phase: &Counters,
        latency: Percentiles,
        phase_max_rt_ms: f64,
    ) -> ProduceInterval {
        let throughput = Throughput::of(delta, interval_s);
        ProduceInterval {
            elapsed_s,
            interval_s,
            warmup,
            send_tps: throughput.messages_per_s,
            max_rt_ms: phase_max_rt_ms.max(latency.max_ms),
            average_rt_ms: latency.mean_ms,
            send_failed: phase.send_failed,
            response_failed: phase.response_failed,
            throughput,
            latency,
            messages: delta.messages,
            failed: delta.send_failed + delta.response_failed,
        }
    }

    /// pulsar-perf's line: `Throughput produced: 5000.5 msg/s --- 156.3 Mbit/s --- failure 0.0
    /// msg/s --- Latency: mean: 227.782 ms - med: 7.242 - 95pct: ... - Max: 1978.335`.
    pub fn pulsar_line(&self) -> String {
        let l = &self.latency;
        format!(
            "Throughput produced: {:10.1}  msg/s --- {:8.1} Mbit/s --- failure {:6.1} msg/s --- Latency: mean: {:7.3} ms - med: {:7.3} - 95pct: {:7.3} - 99pct: {:7.3} - 99.9pct: {:7.3} - 99.99pct: {:7.3} - Max: {:7.3}",
            self.send_tps,
            self.throughput.mbit_per_s,
            self.failed as f64 / self.interval_s.max(1e-9),
            l.mean_ms,
            l.p50_ms,
            l.p95_ms,
            l.p99_ms,
            l.p999_ms,
            l.p9999_ms,
            l.max_ms
        )
    }

    /// `Send TPS: 61234 | Max RT(ms): 12 | Average RT(ms): 1.043 | Send Failed: 0 | Response
    /// Failed: 0 | p50 ... ms | 62.70 MB/s 501.6 Mbit/s`
    pub fn line(&self) -> String {
        format!(
            "Send TPS: {:.0} | Max RT(ms): {:.0} | Average RT(ms): {:.3} | Send Failed: {} | Response Failed: {} | {} | {}",
            self.send_tps,
            self.max_rt_ms.ceil(),
            self.average_rt_ms,
            self.send_failed,
            self.response_failed,
            self.latency.line(),
            self.throughput.line()
        )
    }
}

/// The whole measured part of a run (after warm-up).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// False when the run stopped before its warm-up ended: the figures are warm-up figures.
    pub measured: bool,
    pub measured_s: f64,
    pub counters: Counters,
    pub throughput: Throughput,
    pub latency: Percentiles,
    /// CPU time of the bench process over the whole run, warm-up included.
    pub process_cpu_s: f64,
    pub process_cores: f64,
    /// The machine's disks over the measured part; says when they were the limit.
    #[serde(default)]
    pub disk: DiskFigures,
    /// CPU time the hypervisor took from the machine over the measured part.
    #[serde(default)]
    pub steal: StealFigures,
}

/// Where the measured part of a run (after warm-up) began: the instant, the counters and the
/// disks' counters then.
#[derive(Clone)]
pub struct MeasureStart {
    pub at: Instant,
    pub counters: Counters,
    /// Whether the warm-up is over (or there was none).
    pub warmed_up: bool,
    pub disk: DiskSample,
    pub steal: StealMark,
}

impl MeasureStart {
    /// From now, with the broker process `broker_pid`'s writes when it runs here.
    pub fn now(counters: Counters, warmed_up: bool, broker_pid: Option<u32>) -> MeasureStart {
        MeasureStart {
            at: Instant::now(),
            counters,
            warmed_up,
            disk: DiskSample::read(broker_pid),
            steal: StealMark::now(),
        }
    }
}

impl MeasureStart {
    /// The summary at `now` of what `counters` and `latency` gathered since this start; the
    /// process's CPU is counted from `cpu_at_start`, over the run that began at `run_start`.
    pub fn summary(
        &self,
        now: Instant,
        counters: &Counters,
        latency: Percentiles,
        run_start: Instant,
        cpu_at_start: f64,
    ) -> Summary {
        let measured_s = (now - self.at).as_secs_f64();
        let mut summary = Summary::new(
            measured_s,
            counters.since(&self.counters),
            latency,
            process_cpu_s() - cpu_at_start,
            (now - run_start).as_secs_f64(),
        );
        summary.measured = self.warmed_up;
        let disk_now = DiskSample::read(self.disk.broker_pid());
        summary.disk = self.disk.figures(&disk_now, measured_s);
        summary.steal = self.steal.figures();
        summary
    }
}

impl Summary {
    /// The summary over the measured part of a run: `counters` and `latency` after warm-up,
    /// the process's CPU over the whole run of `wall_s` seconds.
    pub fn new(
        measured_s: f64,
        counters: Counters,
        latency: Percentiles,
        cpu_s: f64,
        wall_s: f64,
    ) -> Summary {
        Summary {
            measured: true,
            measured_s,
            counters,
            throughput: Throughput::of(&counters, measured_s),
            latency,
            process_cpu_s: cpu_s,
            process_cores: cpu_s / wall_s.max(1e-9),
            disk: DiskFigures::default(),
            steal: StealFigures::default(),
        }
    }

    pub fn lines(&self, latency_name: &str) -> Vec<String> {
        if !self.measured {
            return vec![format!(
                "Stopped during warm-up: nothing was measured ({} messages in {:.1}s of warm-up)",
                self.counters.messages, self.measured_s
            )];
        }
        vec![
            format!(
                "Summary over {:.1}s after warm-up: {} messages, {:.0} msg/s, {}, send failed {}, response failed {}",
                self.measured_s,
                self.counters.messages,
                self.throughput.messages_per_s,
                self.throughput.line(),
                self.counters.send_failed,
                self.counters.response_failed
            ),
            format!(
                "{latency_name}: mean {:.3} ms, {}",
                self.latency.mean_ms,
                self.latency.line()
            ),
            format!(
                "Bench process CPU: {:.2}s user+system, {:.2} cores on average",
                self.process_cpu_s, self.process_cores
            ),
            self.disk.line(),
            self.steal.line(),
        ]
        .into_iter()
        .chain(self.counters.not_durable.line())
        .collect()
    }
}

/// One report interval of `bench consume`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConsumeInterval {
    pub elapsed_s: f64,
    pub interval_s: f64,
    pub warmup: bool,
    pub consume_tps: f64,
    pub throughput: Throughput,
    /// Born (producer clock) to consume.
    pub b2c: Percentiles,
    /// Stored (broker clock) to consume.
    pub s2c: Percentiles,
    pub messages: u64,
}

impl ConsumeInterval {
    pub fn new(
        elapsed_s: f64,
        interval_s: f64,
        warmup: bool,
        delta: &Counters,
        b2c: Percentiles,
        s2c: Percentiles,
    ) -> ConsumeInterval {
        let throughput = Throughput::of(delta, interval_s);
        ConsumeInterval {
            elapsed_s,
            interval_s,
            warmup,
            consume_tps: throughput.messages_per_s,
            throughput,
            b2c,
            s2c,
            messages: delta.messages,
        }
    }

    pub fn line(&self) -> String {
        format!(
            "Consume TPS: {:.0} | AVG(B2C) RT(ms): {:.3} | AVG(S2C) RT(ms): {:.3} | MAX(B2C) RT(ms): {:.0} | MAX(S2C) RT(ms): {:.0} | B2C {} | S2C {} | {}",
            self.consume_tps,
            self.b2c.mean_ms,
            self.s2c.mean_ms,
            self.b2c.max_ms.ceil(),
            self.s2c.max_ms.ceil(),
            self.b2c.line(),
            self.s2c.line(),
            self.throughput.line()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_units() {
        let counters = Counters {
            messages: 20_000,
            bytes: 20_000 * 1_024,
            ..Counters::default()
        };
        let t = Throughput::of(&counters, 2.0);
        assert_eq!(t.messages_per_s, 10_000.0);
        assert!((t.mb_per_s - 10.24).abs() < 1e-9);
        assert!((t.mbit_per_s - 81.92).abs() < 1e-9);
        assert_eq!(Throughput::of(&counters, 0.0), Throughput::default());
    }

    #[test]
    fn deltas_subtract_and_never_underflow() {
        let later = Counters {
            messages: 10,
            bytes: 100,
            send_failed: 2,
            response_failed: 1,
            ..Counters::default()
        };
        let earlier = Counters {
            messages: 4,
            bytes: 40,
            send_failed: 2,
            response_failed: 3,
            ..Counters::default()
        };
        assert_eq!(
            later.since(&earlier),
            Counters {
                messages: 6,
                bytes: 60,
                send_failed: 0,
                response_failed: 0,
                ..Counters::default()
            }
        );
    }

    #[test]
    fn produce_line_has_the_official_fields_then_ours() {
        let delta = Counters {
            messages: 50_000,
            bytes: 50_000 * 1_000,
            ..Counters::default()
        };
        let phase = Counters {
            send_failed: 3,
            response_failed: 1,
            ..delta
        };
        let latency = Percentiles {
            count: 50_000,
            mean_ms: 1.0434,
            max_ms: 11.2,
            ..Percentiles::default()
        };
        let interval = ProduceInterval::new(10.0, 5.0, false, &delta, &phase, latency, 8.0);
        assert_eq!(interval.send_tps, 10_000.0);
        assert_eq!(interval.max_rt_ms, 11.2, "the larger of phase and interval");
        let line = interval.line();
        assert!(
            line.starts_with(
                "Send TPS: 10000 | Max RT(ms): 12 | Average RT(ms): 1.043 | Send Failed: 3 | Response Failed: 1 | p50 "
            ),
            "{line}"
        );
        assert!(line.ends_with("| 10.00 MB/s 80.0 Mbit/s"), "{line}");
    }

    #[test]
    fn pulsar_line_has_pulsar_perf_fields_in_order() {
        let delta = Counters {
            messages: 10_000,
            bytes: 10_000 * 4_096,
            send_failed: 3,
            response_failed: 1,
            ..Counters::default()
        };
        let latency = Percentiles {
            count: 10_000,
            mean_ms: 8.609,
            p50_ms: 6.987,
            p95_ms: 16.778,
            p99_ms: 37.272,
            p999_ms: 68.692,
            p9999_ms: 72.774,
            max_ms: 73.817,
        };
        let interval = ProduceInterval::new(2.0, 2.0, false, &delta, &delta, latency, 0.0);
        assert_eq!(
            interval.pulsar_line(),
            "Throughput produced:     5000.0  msg/s ---    163.8 Mbit/s --- failure    2.0 msg/s --- Latency: mean:   8.609 ms - med:   6.987 - 95pct:  16.778 - 99pct:  37.272 - 99.9pct:  68.692 - 99.99pct:  72.774 - Max:  73.817"
        );
    }

    #[test]
    fn progress_shows_goal_and_phase() {
        assert_eq!(progress(10.0, Goal::Forever, 0, false), "[   10.0s]");
        assert_eq!(
            progress(15.0, Goal::Seconds(60.0), 0, true),
            "[   15.0s  25% of 60s warm-up]"
        );
        assert_eq!(
            progress(1.0, Goal::Messages(1_000), 2_000, false),
            "[    1.0s 100% of 1000 msgs]"
        );
    }

    #[test]
    fn consume_line_names_both_latencies() {
        let b2c = Percentiles {
            mean_ms: 3.5,
            max_ms: 20.0,
            ..Percentiles::default()
        };
        let s2c = Percentiles {
            mean_ms: 2.25,
            max_ms: 19.5,
            ..Percentiles::default()
        };
        let delta = Counters {
            messages: 7_000,
            bytes: 7_000_000,
            ..Counters::default()
        };
        let line = ConsumeInterval::new(5.0, 1.0, false, &delta, b2c, s2c).line();
        assert!(
            line.starts_with(
                "Consume TPS: 7000 | AVG(B2C) RT(ms): 3.500 | AVG(S2C) RT(ms): 2.250 | MAX(B2C) RT(ms): 20 | MAX(S2C) RT(ms): 20 | B2C p50"
            ),
            "{line}"
        );
    }
}
