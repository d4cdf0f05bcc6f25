//! `quiver bench peak`: seed 000's peak finding. Senders are raised step by step until
//! throughput stops rising (less than `--gain-min-percent` over the best step so far),
//! failures appear or p99 passes `--p99-limit-ms`; the report gives the peak, the knee past
//! which added senders mostly wait (latency starts to climb faster than throughput), and the
//! daily load to plan for: a third to a half of the peak, which leaves room for bursts of two
//! to three times the daily load.

use std::path::PathBuf;

use crate::plan::Plan;
use crate::plan::Scenario;
use crate::point::{self, PointSettings};
use crate::progress::{duration_words, print_findings, Progress};
use crate::study::{PeakVerdict, PointRecord, StudyRecord};
use crate::{write_json, BenchError};

#[derive(Debug, Clone, clap::Args)]
pub struct PeakArgs {
    /// Name server addresses, `host:port;host:port`.
    #[arg(short = 'n', long = "namesrv", default_value = "127.0.0.1:9876")]
    pub namesrv: String,
    /// Sender counts to try, in order; the search stops early when a stop rule is met.
    #[arg(short = 'w', long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128,256,512,1024", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: Vec<u32>,
    #[arg(short = 's', long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=4_194_304))]
    pub size: u32,
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub queues: u32,
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub batch: u32,
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub producers: u32,
    /// A step that raises throughput by less than this over the best step so far ends the
    /// search.
    #[arg(long = "gain-min-percent", default_value_t = 5.0, value_parser = percent)]
    pub gain_min_percent: f64,
    /// A step whose p99 send latency passes this ends the search.
    #[arg(long = "p99-limit-ms", default_value_t = 500.0, value_parser = crate::positive_rate)]
    pub p99_limit_ms: f64,
    #[arg(long, default_value_t = 5.0, value_parser = crate::seconds)]
    pub warmup: f64,
    #[arg(long, default_value_t = 20.0, value_parser = crate::positive_seconds)]
    pub duration: f64,
    #[arg(short = 't', long, default_value = "BenchPeak")]
    pub topic: String,
    #[arg(long = "report-interval", default_value_t = 1.0, value_parser = crate::report_seconds)]
    pub report_interval: f64,
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long)]
    pub html: Option<PathBuf>,
    #[arg(long, default_value = "quiver")]
    pub label: String,
    #[arg(long = "send-timeout-ms", default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub send_timeout_ms: u64,
    #[arg(long = "runtime-threads", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub runtime_threads: u32,
    /// The broker's process id, when it runs on this machine: the disk line then says what
    /// the broker itself wrote to storage.
    #[arg(long = "broker-pid")]
    pub broker_pid: Option<u32>,
}

fn percent(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && (0.0..=1000.0).contains(&value) => Ok(value),
        _ => Err(format!("{text:?} is not a percentage from 0 to 1000")),
    }
}

/// The rules that end a search, as given on the command line.
#[derive(Clone, Copy, Debug)]
pub struct StopRules {
    pub gain_min_percent: f64,
    pub p99_limit_ms: f64,
}

/// Why the search stops after its last step; None: go on to the next step.
pub fn stop_reason(points: &[PointRecord], rules: StopRules) -> Option<String> {
    let last = points.last()?;
    let threads = last.scenario.threads;
    if last.failed > 0 {
        return Some(format!("{} sends failed at {threads} senders", last.failed));
    }
    let p99 = last.summary.latency.p99_ms;
    if p99 > rules.p99_limit_ms {
        return Some(format!(
            "p99 reached {p99:.1} ms at {threads} senders, above the {:.0} ms limit",
            rules.p99_limit_ms
        ));
    }
    let earlier = &points[..points.len() - 1];
    let best = earlier.iter().max_by(|a, b| tps(a).total_cmp(&tps(b)))?;
    let gain = (tps(last) / tps(best).max(1e-9) - 1.0) * 100.0;
    if gain < rules.gain_min_percent {
        return Some(format!(
            "throughput at {threads} senders ({:.0} msg/s) is {} over the best so far ({:.0} msg/s at {} senders), under {:.0}%",
            tps(last),
            if gain >= 0.0 {
                format!("{gain:.1}%")
            } else {
                format!("{:.1}% below, not", -gain)
            },
            tps(best),
            best.scenario.threads,
            rules.gain_min_percent
        ));
    }
    None
}

fn tps(point: &PointRecord) -> f64 {
    point.summary.throughput.messages_per_s
}

/// How far above the line from the first step to the peak a step must lie to be a knee, as
/// a share of the normalised range.
const KNEE_MIN_LIFT: f64 = 0.1;

/// The index of the knee among `steps` (sender counts rising, the last one the peak): the
/// step farthest above the straight line from the first step to the last, if any lies
/// `KNEE_MIN_LIFT` above it.
fn knee_index(steps: &[PointRecord]) -> Option<usize> {
    let (first, last) = (steps.first()?, steps.last()?);
    let threads_span = f64::from(last.scenario.threads) - f64::from(first.scenario.threads);
    let tps_span = tps(last) - tps(first);
    if steps.len() < 3 || threads_span <= 0.0 || tps_span <= 0.0 {
        return None;
    }
    let lift = |step: &PointRecord| {
        let x =
            (f64::from(step.scenario.threads) - f64::from(first.scenario.threads)) / threads_span;
        let y = (tps(step) - tps(first)) / tps_span;
        y - x
    };
    let (index, highest) = steps[1..steps.len() - 1]
        .iter()
        .enumerate()
        .map(|(i, step)| (i + 1, lift(step)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    (highest >= KNEE_MIN_LIFT).then_some(index)
}

/// The step of highest throughput among those that are a load to run at, or among all steps
/// when none is; None without a step.
fn best(points: &[PointRecord], rules: StopRules) -> Option<&PointRecord> {
    // A step with failures or past the latency limit is not a load to run at.
    let healthy = |point: &&PointRecord| {
        point.failed == 0 && point.summary.latency.p99_ms <= rules.p99_limit_ms
    };
    points
        .iter()
        .filter(healthy)
        .max_by(|a, b| tps(a).total_cmp(&tps(b)))
        .or_else(|| points.iter().max_by(|a, b| tps(a).total_cmp(&tps(b))))
}

/// The verdict's sentence on the knee; `reached` false when the peak came before any knee.
fn knee_words(knee: &PointRecord, reached: bool) -> String {
    if reached {
        format!(
            "Knee: {} senders ({:.0} msg/s, mean RT {:.3} ms); up to it added senders raised throughput most, past it they mostly wait and latency climbs faster than throughput.",
            knee.scenario.threads,
            tps(knee),
            knee.average_rt_ms
        )
    } else {
        format!(
            "Knee: not reached; up to the peak at {} senders throughput rose about in step with the senders.",
            knee.scenario.threads
        )
    }
}

/// The peak, the knee and the plan from the steps run; None without a step.
pub fn verdict(
    points: &[PointRecord],
    rules: StopRules,
    stopped_because: &str,
) -> Option<PeakVerdict> {
    let peak = best(points, rules)?;
    // The knee is read from the steps up to the peak: normalise senders and throughput to
    // [0, 1] between the first step and the peak; the knee is the step farthest above the
    // straight line between them (Satopää et al.'s "Kneedle"). Up to it each added sender
    // bought more throughput than the average step to the peak; past it added senders mostly
    // wait, so latency climbs faster than throughput. A curve that never rises clearly above
    // that line (a tenth of the range) has no knee before its peak.
    let peak_index = points
        .iter()
        .position(|point| std::ptr::eq(point, peak))
        .unwrap_or(points.len() - 1);
    let knee_index = knee_index(&points[..=peak_index]);
    let knee = &points[knee_index.unwrap_or(peak_index)];
    let mut words = vec![
        format!(
            "Peak: {:.0} msg/s at {} senders (mean send RT {:.3} ms, p99 {:.3} ms).",
            tps(peak),
            peak.scenario.threads,
            peak.average_rt_ms,
            peak.summary.latency.p99_ms
        ),
        knee_words(knee, knee_index.is_some()),
        format!(
            "Plan daily traffic at {:.0} to {:.0} msg/s, a third to a half of the peak, which leaves room for bursts of two to three times that.",
            tps(peak) / 3.0,
            tps(peak) / 2.0
        ),
        format!("The search stopped because {stopped_because}."),
    ];
    if let Some(limited) = &peak.summary.disk.limited {
        words.push(format!("At the peak the run was {limited}."));
    }
    Some(PeakVerdict {
        peak_threads: peak.scenario.threads,
        peak_tps: tps(peak),
        peak_mean_rt_ms: peak.average_rt_ms,
        peak_p99_ms: peak.summary.latency.p99_ms,
        knee_threads: knee.scenario.threads,
        knee_tps: tps(knee),
        knee_mean_rt_ms: knee.average_rt_ms,
        plan_low_tps: tps(peak) / 3.0,
        plan_high_tps: tps(peak) / 2.0,
        stopped_because: stopped_because.to_owned(),
        words,
    })
}

/// The p99 above which a sweep's point is not a load to plan for (peak's default limit).
pub const SWEEP_P99_LIMIT_MS: f64 = 500.0;

/// Seed 000's reading of a whole sweep: the peak over every point, and the knee along the
/// sender counts of the peak's family (the points that differ from it only in senders).
pub fn sweep_verdict(points: &[PointRecord]) -> Option<PeakVerdict> {
    let rules = StopRules {
        gain_min_percent: 0.0,
        p99_limit_ms: SWEEP_P99_LIMIT_MS,
    };
    let best = best(points, rules)?;
    let same_family = |point: &&PointRecord| {
        let mut scenario = point.scenario.clone();
        scenario.threads = best.scenario.threads;
        scenario == best.scenario
    };
    let mut family: Vec<PointRecord> = points.iter().filter(same_family).cloned().collect();
    family.sort_by_key(|point| point.scenario.threads);
    let family_name = best
        .scenario
        .name()
        .split_once(", ")
        .map_or(String::new(), |(_, rest)| rest.to_owned());
    let mut verdict = verdict(&family, rules, "the sweep ran its points")?;
    // A sweep is not a search that stopped: its last sentence says what was read from where.
    let read = format!(
        "Read from the sweep's {} points; the knee along the peak's family ({family_name}).",
        points.len()
    );
    if let Some(last) = verdict
        .words
        .iter_mut()
        .find(|w| w.starts_with("The search stopped"))
    {
        *last = read;
    }
    Some(verdict)
}

pub async fn run(args: PeakArgs) -> Result<(), BenchError> {
    let plan = args.plan();
    let rules = StopRules {
        gain_min_percent: args.gain_min_percent,
        p99_limit_ms: args.p99_limit_ms,
    };
    let settings = args.point_settings();
    let scenarios = plan.scenarios();
    println!(
        "quiver bench peak: up to {} steps of {}s + {}s warm-up against {} ({}), at most {}; stops under {}% gain, on failures or p99 over {} ms",
        scenarios.len(),
        crate::html::number(args.duration),
        crate::html::number(args.warmup),
        args.namesrv,
        args.label,
        duration_words(plan.seconds()),
        args.gain_min_percent,
        args.p99_limit_ms
    );
    let mut record = StudyRecord::new("quiver bench peak", &args.label, &args.namesrv, plan);
    let stopped_because = climb(&settings, &scenarios, rules, &mut record).await?;
    record.peak = verdict(&record.points, rules, &stopped_because);
    print_findings(&record);
    if let Some(path) = &args.json {
        write_json(path, &record)?;
        println!("Wrote {}", path.display());
    }
    if let Some(path) = &args.html {
        crate::html::write(path, &crate::pages::study_page(&record))?;
        println!("Wrote {}", path.display());
    }
    Ok(())
}

impl PeakArgs {
    /// One scenario per sender count, everything else fixed.
    fn plan(&self) -> Plan {
        Plan {
            threads: self.threads.clone(),
            sizes: vec![self.size],
            queues: vec![self.queues],
            batch: vec![self.batch],
            rates: vec![None],
            producers: vec![self.producers],
            consumers: 0,
            warmup_s: self.warmup,
            duration_s: self.duration,
            topic: self.topic.clone(),
        }
    }

    fn point_settings(&self) -> PointSettings {
        PointSettings {
            namesrv: self.namesrv.clone(),
            topic_prefix: self.topic.clone(),
            warmup_s: self.warmup,
            duration_s: self.duration,
            report_interval_s: self.report_interval,
            send_timeout_ms: self.send_timeout_ms,
            broker_pid: self.broker_pid,
        }
    }
}

/// Runs the steps in order into `record` until a stop rule ends the search or Ctrl-C does;
/// returns why it stopped.
async fn climb(
    settings: &PointSettings,
    scenarios: &[Scenario],
    rules: StopRules,
    record: &mut StudyRecord,
) -> Result<String, BenchError> {
    let machine = record.machine.clone();
    let mut progress = Progress::new(scenarios.len(), settings.warmup_s + settings.duration_s);
    let mut stopped_because = format!(
        "every step in --threads ran ({} senders at most)",
        scenarios.last().map_or(0, |s| s.threads)
    );
    let signalled = crate::schedule::Interrupt::get();
    for (index, scenario) in scenarios.iter().enumerate() {
        if signalled.is_set() {
            stopped_because = "it was interrupted".into();
            break;
        }
        progress.start(index, scenario);
        let Some(point) = point::run(settings, scenario, &machine).await? else {
            stopped_because = "it was interrupted".into();
            break;
        };
        progress.finish(index, &point);
        record.points.push(point);
        if let Some(reason) = stop_reason(&record.points, rules) {
            stopped_because = reason;
            break;
        }
    }
    progress.clear();
    Ok(stopped_because)
}

/// A scenario of a peak search at `threads` senders, for tests elsewhere.
#[cfg(test)]
pub(crate) fn step(threads: u32, tps: f64, mean_ms: f64, p99_ms: f64, failed: u64) -> PointRecord {
    use crate::plan::Scenario;
    use crate::report::{Counters, Summary};
    use crate::Percentiles;
    let latency = Percentiles {
        count: 1,
        mean_ms,
        p99_ms,
        max_ms: p99_ms * 2.0,
        ..Percentiles::default()
    };
    let counters = Counters {
        messages: (tps * 10.0) as u64,
        bytes: (tps * 10.0 * 1024.0) as u64,
        send_failed: failed,
        response_failed: 0,
        ..Counters::default()
    };
    PointRecord {
        scenario: Scenario {
            threads,
            size: 1024,
            queues: 8,
            batch: 1,
            rate: None,
            producers: 1,
            consumers: 0,
        },
        topic: "BenchPeak8".into(),
        max_tps: tps * 1.05,
        max_rt_ms: latency.max_ms,
        average_rt_ms: mean_ms,
        failed,
        summary: Summary::new(10.0, counters, latency, 1.0, 10.0),
        intervals: Vec::new(),
        consume: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: StopRules = StopRules {
        gain_min_percent: 5.0,
        p99_limit_ms: 100.0,
    };

    #[test]
    fn the_search_goes_on_while_throughput_rises_and_stops_when_it_flattens() {
        let mut points = vec![step(1, 4_000.0, 0.25, 1.0, 0)];
        assert_eq!(
            stop_reason(&points, RULES),
            None,
            "one step: nothing to compare"
        );
        points.push(step(2, 7_800.0, 0.26, 1.0, 0));
        assert_eq!(stop_reason(&points, RULES), None);
        points.push(step(4, 8_000.0, 0.5, 2.0, 0));
        let reason = stop_reason(&points, RULES).expect("2.6% gain stops");
        assert!(
            reason.contains("is 2.6% over the best so far (7800 msg/s at 2 senders), under 5%"),
            "{reason}"
        );
        points.pop();
        points.push(step(4, 7_000.0, 0.5, 2.0, 0));
        let reason = stop_reason(&points, RULES).expect("a drop stops");
        assert!(
            reason.contains("10.3% below, not over the best"),
            "{reason}"
        );
    }

    #[test]
    fn failures_or_latency_past_the_limit_stop_the_search() {
        let points = vec![
            step(1, 4_000.0, 0.25, 1.0, 0),
            step(2, 9_000.0, 0.3, 1.0, 3),
        ];
        assert_eq!(
            stop_reason(&points, RULES).as_deref(),
            Some("3 sends failed at 2 senders")
        );
        let points = vec![
            step(1, 4_000.0, 0.25, 1.0, 0),
            step(2, 9_000.0, 0.3, 150.0, 0),
        ];
        let reason = stop_reason(&points, RULES).expect("p99 stops");
        assert!(reason.starts_with("p99 reached 150.0 ms at 2 senders, above the 100 ms limit"));
    }

    #[test]
    fn the_verdict_names_peak_knee_and_plan() {
        // Like seed 000: throughput doubles with the senders until 4, then latency takes over.
        let points = vec![
            step(1, 4_000.0, 0.25, 1.0, 0),
            step(2, 8_000.0, 0.25, 1.0, 0),
            step(4, 12_000.0, 0.33, 1.5, 0),
            step(8, 13_000.0, 0.61, 3.0, 0),
            step(16, 12_600.0, 1.27, 9.0, 2),
        ];
        let verdict = verdict(&points, RULES, "2 sends failed at 16 senders").expect("verdict");
        assert_eq!(verdict.peak_threads, 8, "the failing step is not the peak");
        assert_eq!(verdict.peak_tps, 13_000.0);
        // Between (1, 4000) and the peak (8, 13000), 4 senders lie farthest above the line.
        assert_eq!(verdict.knee_threads, 4);
        assert!((verdict.plan_low_tps - 4_333.3).abs() < 0.1);
        assert_eq!(verdict.plan_high_tps, 6_500.0);
        assert!(verdict.words[2].starts_with("Plan daily traffic at 4333 to 6500 msg/s"));
        assert_eq!(
            verdict.words[3],
            "The search stopped because 2 sends failed at 16 senders."
        );
        assert!(verdict.words[1].starts_with("Knee: 4 senders"));
        assert_eq!(verdict_of_nothing(), None);
        let rising = [
            step(1, 4_000.0, 0.25, 1.0, 0),
            step(2, 8_000.0, 0.25, 1.0, 0),
        ];
        let verdict = super::verdict(&rising, RULES, "").expect("verdict");
        assert_eq!(verdict.knee_threads, 2);
        assert!(verdict.words[1].starts_with("Knee: not reached; up to the peak at 2 senders"));
        // Throughput rising in step with the senders has no knee before its peak.
        let straight = [
            step(1, 4_000.0, 0.25, 1.0, 0),
            step(2, 8_000.0, 0.25, 1.0, 0),
            step(4, 16_000.0, 0.25, 1.0, 0),
            step(8, 32_000.0, 0.25, 1.0, 0),
        ];
        let verdict = super::verdict(&straight, RULES, "").expect("verdict");
        assert_eq!(verdict.knee_threads, 8);
        assert!(verdict.words[1].starts_with("Knee: not reached"));
    }

    #[test]
    fn a_sweeps_verdict_takes_the_knee_along_the_peaks_family() {
        let big = |threads, tps, mean_ms| {
            let mut point = step(threads, tps, mean_ms, 1.0, 0);
            point.scenario.size = 3072;
            point
        };
        let points = vec![
            step(1, 4_000.0, 0.25, 1.0, 0),
            big(1, 3_000.0, 0.3),
            step(10, 30_000.0, 0.3, 1.0, 0),
            big(10, 40_000.0, 0.25),
            step(30, 31_000.0, 0.9, 1.0, 0),
            big(30, 45_000.0, 0.6),
        ];
        let verdict = sweep_verdict(&points).expect("verdict");
        assert_eq!((verdict.peak_threads, verdict.peak_tps), (30, 45_000.0));
        assert_eq!(
            verdict.knee_threads, 10,
            "3072 B: 10 senders took 92% of the way to the peak's throughput"
        );
        assert_eq!(
            verdict.words[3],
            "Read from the sweep's 6 points; the knee along the peak's family (3072 B, 8 queues)."
        );
        assert_eq!(sweep_verdict(&[]), None);
    }

    fn verdict_of_nothing() -> Option<PeakVerdict> {
        verdict(&[], RULES, "")
    }
}
