//! The record of a study (a sweep or a peak search) as its JSON holds it, for `compare` and the
//! HTML report to read: the points with their figures, and the verdict. With it, the table of
//! the points that the terminal and the report both show.

use serde::{Deserialize, Serialize};

use crate::histogram::Percentiles;
use crate::html::Table;
use crate::machine::Machine;
use crate::plan::{Plan, Scenario};
use crate::report::{ConsumeInterval, ProduceInterval, Summary};

/// The JSON record of a sweep or a peak search: what `compare` and the HTML report read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StudyRecord {
    /// `quiver bench sweep` or `quiver bench peak`.
    pub tool: String,
    pub version: String,
    /// The system under test, as `--label` named it.
    pub label: String,
    pub namesrv: String,
    pub machine: Machine,
    pub plan: Plan,
    /// Finished points, in plan order.
    pub points: Vec<PointRecord>,
    /// A peak search's conclusion.
    #[serde(default)]
    pub peak: Option<PeakVerdict>,
}

impl StudyRecord {
    pub fn new(tool: &str, label: &str, namesrv: &str, plan: Plan) -> StudyRecord {
        StudyRecord {
            tool: tool.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            label: label.to_owned(),
            namesrv: namesrv.to_owned(),
            machine: Machine::read(),
            plan,
            points: Vec::new(),
            peak: None,
        }
    }
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
    pub(crate) fn new(
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

impl ConsumeRecord {
    /// Turns the cumulative consumed counts kept in `lag` into lag: messages the producers had
    /// sent by then (from their intervals) minus messages consumed.
    pub(crate) fn fill_lag(&mut self, produced: &[ProduceInterval], sent_total: u64) {
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

/// The conclusion of a peak search, in figures and in words.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeakVerdict {
    pub peak_threads: u32,
    /// Messages per second over the measured part of the peak step.
    pub peak_tps: f64,
    pub peak_mean_rt_ms: f64,
    pub peak_p99_ms: f64,
    pub knee_threads: u32,
    pub knee_tps: f64,
    pub knee_mean_rt_ms: f64,
    /// The daily load to plan for: a third to a half of the peak (seed 000's rule).
    pub plan_low_tps: f64,
    pub plan_high_tps: f64,
    pub stopped_because: String,
    pub words: Vec<String>,
}

/// Seed 000's table, one row per point, plus the MB/s, percentiles and consumer figures seed
/// 001 and 004 add.
pub fn study_table(points: &[PointRecord]) -> Table {
    let header = [
        "scenario",
        "failed",
        "max TPS",
        "avg TPS",
        "MB/s",
        "max RT ms",
        "avg RT ms",
        "p99 ms",
        "B2C avg/max ms",
        "S2C avg/max ms",
        "lag end",
        "bench cores",
        "disk",
    ];
    let rows = points
        .iter()
        .map(|point| {
            let summary = &point.summary;
            let (b2c, s2c, lag) = match &point.consume {
                Some(consume) => (
                    format!("{:.3} / {:.0}", consume.b2c.mean_ms, consume.b2c.max_ms),
                    format!("{:.3} / {:.0}", consume.s2c.mean_ms, consume.s2c.max_ms),
                    consume.lag_end.to_string(),
                ),
                None => ("-".into(), "-".into(), "-".into()),
            };
            vec![
                point.scenario.name(),
                point.failed.to_string(),
                format!("{:.0}", point.max_tps),
                format!("{:.0}", summary.throughput.messages_per_s),
                format!("{:.2}", summary.throughput.mb_per_s),
                format!("{:.0}", point.max_rt_ms.ceil()),
                format!("{:.3}", point.average_rt_ms),
                format!("{:.3}", summary.latency.p99_ms),
                b2c,
                s2c,
                lag,
                format!("{:.2}", summary.process_cores),
                if summary.disk.limited.is_some() {
                    "limited".into()
                } else {
                    "-".into()
                },
            ]
        })
        .collect();
    Table {
        header: header.iter().map(|h| h.to_string()).collect(),
        rows,
    }
}

/// Why points were limited by the disk, one line each.
pub fn disk_notes(points: &[PointRecord]) -> Vec<String> {
    points
        .iter()
        .filter_map(|point| {
            let limited = point.summary.disk.limited.as_ref()?;
            Some(format!("{}: {limited}", point.scenario.name()))
        })
        .collect()
}

/// The table as printed at the end of a sweep, with the disk's notes under it.
pub fn table(points: &[PointRecord]) -> Vec<String> {
    let mut lines = study_table(points).markdown();
    let limited = disk_notes(points);
    if !limited.is_empty() {
        lines.push(String::new());
        lines.push("Points limited by the disk:".into());
        lines.extend(limited);
    }
    lines
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::Counters;

    fn scenario(threads: u32) -> Scenario {
        Scenario {
            threads,
            size: 1024,
            queues: 8,
            batch: 1,
            rate: None,
            producers: 1,
            consumers: 0,
        }
    }

    /// A point of a sweep at `threads` senders, for the sweep's tests too.
    pub(crate) fn point(threads: u32, max_tps: f64, mean_ms: f64) -> PointRecord {
        let latency = Percentiles {
            count: 1,
            mean_ms,
            p99_ms: mean_ms * 3.0,
            max_ms: mean_ms * 10.0,
            ..Percentiles::default()
        };
        let counters = Counters {
            messages: (max_tps * 10.0) as u64,
            bytes: (max_tps * 10.0 * 1024.0) as u64,
            ..Counters::default()
        };
        PointRecord {
            scenario: scenario(threads),
            topic: "BenchSweep8".into(),
            max_tps,
            max_rt_ms: latency.max_ms,
            average_rt_ms: mean_ms,
            failed: 0,
            summary: Summary::new(10.0, counters, latency, 1.0, 10.0),
            intervals: Vec::new(),
            consume: None,
        }
    }

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

    #[test]
    fn the_table_has_a_row_per_point_with_the_seeds_figures() {
        let mut limited = point(10, 41_946.0, 0.238);
        limited.summary.disk.limited = Some("limited by the disk: vda busy".into());
        let lines = table(&[point(1, 4_533.0, 0.221), limited]);
        assert!(lines[0].starts_with("| scenario | failed | max TPS |"));
        assert!(
            lines[2].starts_with(
                "| 1 threads, 1024 B, 8 queues | 0 | 4533 | 4533 | 4.64 | 3 | 0.221 |"
            ),
            "{}",
            lines[2]
        );
        assert!(lines[3].ends_with("| limited |"), "{}", lines[3]);
        assert_eq!(lines[5], "Points limited by the disk:");
        assert!(lines[6].starts_with("10 threads, 1024 B, 8 queues: limited by the disk"));
    }
}
