//! `quiver bench sweep`: every point of a plan, one after another, unattended. The record is
//! rewritten after each point, so a sweep started again with the same `--json` resumes after
//! the last point it finished.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::html::Table;
use crate::machine::Machine;
use crate::peak::PeakVerdict;
use crate::plan::{Plan, Scenario, SweepArgs};
use crate::point::{self, PointRecord, PointSettings};
use crate::{read_json, write_json, BenchError};

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

pub async fn run(args: SweepArgs) -> Result<(), BenchError> {
    let plan = Plan::resolve(&args)?;
    let scenarios = plan.scenarios();
    let mut record = match (&args.json, args.fresh) {
        (Some(path), false) if path.exists() => resume(path, &plan)?,
        _ => StudyRecord::new(
            "quiver bench sweep",
            &args.label,
            &args.namesrv,
            plan.clone(),
        ),
    };
    let settings = PointSettings {
        namesrv: args.namesrv.clone(),
        topic_prefix: plan.topic.clone(),
        warmup_s: plan.warmup_s,
        duration_s: plan.duration_s,
        report_interval_s: args.report_interval,
        send_timeout_ms: args.send_timeout_ms,
        broker_pid: args.broker_pid,
    };
    let done = record.points.len();
    println!(
        "quiver bench sweep: {} points of {}s + {}s warm-up against {} ({}), about {}{}",
        scenarios.len(),
        crate::html::number(plan.duration_s),
        crate::html::number(plan.warmup_s),
        args.namesrv,
        args.label,
        duration_words(plan.seconds()),
        if done > 0 {
            format!("; resuming after point {done}")
        } else {
            String::new()
        }
    );
    let mut progress = Progress::new(scenarios.len(), plan.warmup_s + plan.duration_s);
    let machine = record.machine.clone();
    let mut interrupted = false;
    let signalled = crate::schedule::Interrupt::get();
    for (index, scenario) in scenarios.iter().enumerate().skip(done) {
        if signalled.is_set() {
            interrupted = true;
            break;
        }
        progress.start(index, scenario);
        let Some(point) = point::run(&settings, scenario, &machine).await? else {
            interrupted = true;
            break;
        };
        progress.finish(index, &point);
        record.points.push(point);
        save(&args, &record)?;
    }
    progress.clear();
    record.peak = crate::peak::sweep_verdict(&record.points);
    save(&args, &record)?;
    for line in table(&record.points) {
        println!("{line}");
    }
    if let Some(verdict) = &record.peak {
        println!();
        for line in &verdict.words {
            println!("{line}");
        }
    }
    if let Some(path) = &args.json {
        println!("Wrote {}", path.display());
    }
    if interrupted {
        // Not a success: a script running several sweeps must not go on to the next one.
        return Err(BenchError::Interrupted {
            done: record.points.len(),
            total: scenarios.len(),
        });
    }
    Ok(())
}

fn save(args: &SweepArgs, record: &StudyRecord) -> Result<(), BenchError> {
    if let Some(path) = &args.json {
        write_json(path, record)?;
    }
    if let Some(path) = &args.html {
        crate::html::write(path, &crate::pages::study_page(record))?;
    }
    Ok(())
}

/// The record of an earlier run of the same plan; refused when the plan differs, because its
/// points would not be the ones this plan runs next.
fn resume(path: &Path, plan: &Plan) -> Result<StudyRecord, BenchError> {
    let record: StudyRecord = read_json(path)?;
    let mismatch = |reason: String| BenchError::ResumeMismatch {
        path: path.to_owned(),
        reason,
    };
    if record.tool != "quiver bench sweep" {
        return Err(mismatch(format!("written by {}", record.tool)));
    }
    if &record.plan != plan {
        return Err(mismatch("its axes or timing differ".into()));
    }
    let scenarios = plan.scenarios();
    for (index, point) in record.points.iter().enumerate() {
        if scenarios.get(index) != Some(&point.scenario) {
            return Err(mismatch(format!(
                "its point {} is {}",
                index + 1,
                point.scenario.name()
            )));
        }
    }
    Ok(record)
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

/// `1h 12m`, `3m 20s`, `45s`.
pub fn duration_words(seconds: f64) -> String {
    let seconds = seconds.max(0.0).round() as u64;
    match seconds {
        s if s >= 3_600 => format!("{}h {:02}m", s / 3_600, s % 3_600 / 60),
        s if s >= 60 => format!("{}m {:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// The progress of a study: a bar redrawn in place on a terminal, plain lines otherwise (a log
/// file or a CI job gets one line per point).
pub struct Progress {
    total: usize,
    point_s: f64,
    terminal: bool,
    started: Instant,
    ran: usize,
}

const BAR_WIDTH: usize = 24;

impl Progress {
    pub fn new(total: usize, point_s: f64) -> Progress {
        Progress {
            total,
            point_s,
            terminal: std::io::stdout().is_terminal(),
            started: Instant::now(),
            ran: 0,
        }
    }

    /// Time left: the points still to run at the pace of those run so far (the plan's own
    /// timing before the first one finished).
    fn left_s(&self, index: usize) -> f64 {
        let per_point = if self.ran == 0 {
            self.point_s
        } else {
            self.started.elapsed().as_secs_f64() / self.ran as f64
        };
        (self.total - index) as f64 * per_point
    }

    pub fn start(&mut self, index: usize, scenario: &Scenario) {
        let line = progress_line(index, self.total, &scenario.name(), self.left_s(index));
        if self.terminal {
            let filled = BAR_WIDTH * index / self.total.max(1);
            let bar = format!("[{}{}]", "#".repeat(filled), ".".repeat(BAR_WIDTH - filled));
            print!("\r\x1b[2K{bar} {line}");
            let _ = std::io::stdout().flush();
        } else {
            println!("{line}");
        }
    }

    pub fn finish(&mut self, index: usize, point: &PointRecord) {
        self.ran += 1;
        let line = format!(
            "point {}/{} done: {}: max TPS {:.0}, avg RT {:.3} ms, max RT {:.0} ms, failed {}{}",
            index + 1,
            self.total,
            point.scenario.name(),
            point.max_tps,
            point.average_rt_ms,
            point.max_rt_ms.ceil(),
            point.failed,
            if point.summary.disk.limited.is_some() {
                ", limited by the disk"
            } else {
                ""
            }
        );
        if self.terminal {
            print!("\r\x1b[2K");
        }
        println!("{line}");
    }

    pub fn clear(&self) {
        if self.terminal {
            print!("\r\x1b[2K");
            let _ = std::io::stdout().flush();
        }
    }
}

/// `point 3/36 (10 threads, 1024 B, 8 queues), about 12m 30s left`
pub fn progress_line(index: usize, total: usize, name: &str, left_s: f64) -> String {
    format!(
        "point {}/{total} ({name}), about {} left",
        index + 1,
        duration_words(left_s)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Counters, Summary};
    use crate::Percentiles;

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

    fn plan() -> Plan {
        Plan {
            threads: vec![1, 2, 4],
            sizes: vec![1024],
            queues: vec![8],
            batch: vec![1],
            rates: vec![None],
            producers: vec![1],
            consumers: 0,
            warmup_s: 0.0,
            duration_s: 1.0,
            topic: "BenchSweep".into(),
        }
    }

    #[test]
    fn a_record_of_the_same_plan_resumes_and_another_plan_is_refused() {
        let dir = std::env::temp_dir().join(format!("quiver-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("sweep.json");
        let mut record = StudyRecord::new("quiver bench sweep", "quiver", "x:1", plan());
        record.points.push(point(1, 1000.0, 1.0));
        write_json(&path, &record).expect("write");
        let resumed = resume(&path, &plan()).expect("same plan resumes");
        assert_eq!(resumed.points.len(), 1);
        assert_eq!(resumed, record, "a record reads back as written");

        let mut other = plan();
        other.duration_s = 2.0;
        let refused = resume(&path, &other).expect_err("other plan");
        assert!(
            refused.to_string().contains("holds another plan"),
            "{refused}"
        );

        record.points[0].scenario.threads = 2;
        write_json(&path, &record).expect("write");
        let refused = resume(&path, &plan()).expect_err("points out of order");
        assert!(
            refused.to_string().contains("its point 1 is 2 threads"),
            "{refused}"
        );

        std::fs::write(&path, "{ not json").expect("write");
        let refused = resume(&path, &plan()).expect_err("garbage");
        assert!(refused.to_string().starts_with("cannot read"), "{refused}");
        std::fs::remove_dir_all(&dir).expect("clean up");
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

    #[test]
    fn progress_says_the_point_the_total_and_the_time_left() {
        assert_eq!(
            progress_line(2, 36, "10 threads, 1024 B, 8 queues", 850.0),
            "point 3/36 (10 threads, 1024 B, 8 queues), about 14m 10s left"
        );
        assert_eq!(duration_words(3_725.0), "1h 02m");
        assert_eq!(duration_words(59.4), "59s");
        let progress = Progress::new(4, 25.0);
        assert_eq!(
            progress.left_s(1),
            75.0,
            "the plan's timing before any point ran"
        );
    }
}
