//! `quiver bench compare RUN.json RUN.json ...`: seed 004's table. For every scenario the
//! runs share, each run's failures, max TPS, max and average send RT, B2C and S2C average and
//! max, and the ratios of TPS and average RT to the first run.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::html::{Chart, Page, Section, Table};
use crate::plan::Scenario;
use crate::study::{PointRecord, StudyRecord};
use crate::{read_json, write_json, BenchError};

#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// JSON records written by `quiver bench sweep --json` or `quiver bench peak --json`; the
    /// first is the baseline of the ratios.
    #[arg(required = true, num_args = 1..)]
    pub runs: Vec<PathBuf>,
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long)]
    pub html: Option<PathBuf>,
}

/// One run's figures in one scenario.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub run: String,
    pub failed: u64,
    pub max_tps: f64,
    pub max_rt_ms: f64,
    pub average_rt_ms: f64,
    pub b2c_average_ms: Option<f64>,
    pub s2c_average_ms: Option<f64>,
    pub b2c_max_ms: Option<f64>,
    pub s2c_max_ms: Option<f64>,
    /// This run's max TPS over the baseline's (the first run that has the scenario).
    pub tps_ratio: f64,
    pub average_rt_ratio: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScenarioComparison {
    pub scenario: Scenario,
    pub name: String,
    pub rows: Vec<Row>,
}

#[derive(Serialize)]
struct Record<'a> {
    tool: &'static str,
    version: &'static str,
    runs: Vec<String>,
    scenarios: &'a [ScenarioComparison],
}

pub fn run(args: CompareArgs) -> Result<(), BenchError> {
    let mut studies = Vec::new();
    for path in &args.runs {
        let study: StudyRecord = read_json(path).map_err(|error| match error {
            BenchError::Read { path, reason } => BenchError::Read {
                path,
                reason: format!("not a record of `quiver bench sweep` or `peak` ({reason})"),
            },
            other => other,
        })?;
        studies.push(study);
    }
    let labels = labels(&studies, &args.runs);
    let comparisons = compare(&studies, &labels);
    if comparisons.is_empty() {
        return Err(BenchError::Usage(
            "the runs have no finished point to compare".into(),
        ));
    }
    for line in comparison_table(&comparisons).markdown() {
        println!("{line}");
    }
    if let Some(path) = &args.json {
        let record = Record {
            tool: "quiver bench compare",
            version: env!("CARGO_PKG_VERSION"),
            runs: labels.clone(),
            scenarios: &comparisons,
        };
        write_json(path, &record)?;
        println!("Wrote {}", path.display());
    }
    if let Some(path) = &args.html {
        crate::html::write(path, &page(&studies, &labels, &comparisons))?;
        println!("Wrote {}", path.display());
    }
    Ok(())
}

/// Each run's label, made unique with the file name when two runs share one.
fn labels(studies: &[StudyRecord], paths: &[PathBuf]) -> Vec<String> {
    studies
        .iter()
        .zip(paths)
        .map(|(study, path)| {
            let shared = studies.iter().filter(|s| s.label == study.label).count() > 1;
            if shared {
                let stem = path
                    .file_stem()
                    .map_or(String::new(), |s| s.to_string_lossy().into_owned());
                format!("{} ({stem})", study.label)
            } else {
                study.label.clone()
            }
        })
        .collect()
}

/// Scenario by scenario, in the order the first run that has each one ran them.
pub fn compare(studies: &[StudyRecord], labels: &[String]) -> Vec<ScenarioComparison> {
    let mut order: Vec<Scenario> = Vec::new();
    for study in studies {
        for point in &study.points {
            if !order.contains(&point.scenario) {
                order.push(point.scenario.clone());
            }
        }
    }
    order
        .into_iter()
        .map(|scenario| {
            let found: Vec<(&String, &PointRecord)> = studies
                .iter()
                .zip(labels)
                .filter_map(|(study, label)| {
                    let point = study.points.iter().find(|p| p.scenario == scenario)?;
                    Some((label, point))
                })
                .collect();
            let base = found[0].1;
            let rows = found
                .iter()
                .map(|(label, point)| row(label, point, base))
                .collect();
            ScenarioComparison {
                name: scenario.name(),
                scenario,
                rows,
            }
        })
        .collect()
}

fn row(label: &str, point: &PointRecord, base: &PointRecord) -> Row {
    let consume = point.consume.as_ref();
    Row {
        run: label.to_owned(),
        failed: point.failed,
        max_tps: point.max_tps,
        max_rt_ms: point.max_rt_ms,
        average_rt_ms: point.average_rt_ms,
        b2c_average_ms: consume.map(|c| c.b2c.mean_ms),
        s2c_average_ms: consume.map(|c| c.s2c.mean_ms),
        b2c_max_ms: consume.map(|c| c.b2c.max_ms),
        s2c_max_ms: consume.map(|c| c.s2c.max_ms),
        tps_ratio: point.max_tps / base.max_tps.max(1e-9),
        average_rt_ratio: point.average_rt_ms / base.average_rt_ms.max(1e-9),
    }
}

pub fn comparison_table(comparisons: &[ScenarioComparison]) -> Table {
    let header = [
        "scenario",
        "run",
        "failed",
        "max TPS",
        "max RT ms",
        "avg RT ms",
        "avg B2C ms",
        "avg S2C ms",
        "max B2C ms",
        "max S2C ms",
        "TPS / first",
        "avg RT / first",
    ];
    let optional = |value: Option<f64>, digits: usize| {
        value.map_or("-".to_owned(), |v| format!("{v:.digits$}"))
    };
    let mut rows = Vec::new();
    for comparison in comparisons {
        for (index, row) in comparison.rows.iter().enumerate() {
            rows.push(vec![
                if index == 0 {
                    comparison.name.clone()
                } else {
                    String::new()
                },
                row.run.clone(),
                row.failed.to_string(),
                format!("{:.0}", row.max_tps),
                format!("{:.0}", row.max_rt_ms.ceil()),
                format!("{:.3}", row.average_rt_ms),
                optional(row.b2c_average_ms, 3),
                optional(row.s2c_average_ms, 3),
                optional(row.b2c_max_ms, 0),
                optional(row.s2c_max_ms, 0),
                format!("{:.2}", row.tps_ratio),
                format!("{:.2}", row.average_rt_ratio),
            ]);
        }
    }
    Table {
        header: header.iter().map(|h| h.to_string()).collect(),
        rows,
    }
}

fn page(studies: &[StudyRecord], labels: &[String], comparisons: &[ScenarioComparison]) -> Page {
    let mut paragraphs: Vec<String> = studies
        .iter()
        .zip(labels)
        .map(|(study, label)| {
            format!(
                "{label}: {} against {}, {} points; machine: {}.",
                study.tool,
                study.namesrv,
                study.points.len(),
                study.machine.line()
            )
        })
        .collect();
    for (study, label) in studies.iter().zip(labels) {
        if let Some(peak) = &study.peak {
            paragraphs.push(format!("{label}: {}", peak.words.join(" ")));
        }
    }
    // One line per run and family (everything but the sender count).
    let mut tps = Chart::new("Max TPS against senders, per run", "senders", "msg/s");
    let mut rt = Chart::new(
        "Average send RT against senders, per run",
        "senders",
        "ms (log)",
    )
    .log_y();
    for (study, label) in studies.iter().zip(labels) {
        let mut families: BTreeMap<String, Vec<&PointRecord>> = BTreeMap::new();
        for point in &study.points {
            let mut family = point.scenario.clone();
            family.threads = 0;
            let name = family.name().trim_start_matches("0 threads, ").to_owned();
            families.entry(name).or_default().push(point);
        }
        for (family, points) in families {
            let name = format!("{label}: {family}");
            let at = |pick: fn(&PointRecord) -> f64| {
                points
                    .iter()
                    .map(|p| (p.scenario.threads as f64, pick(p)))
                    .collect::<Vec<_>>()
            };
            tps = tps.with_series(&name, at(|p| p.max_tps));
            rt = rt.with_series(&name, at(|p| p.average_rt_ms));
        }
    }
    Page {
        title: format!("quiver bench compare: {}", labels.join(" vs ")),
        sections: vec![Section {
            heading: "Scenario by scenario".into(),
            paragraphs,
            table: Some(comparison_table(comparisons)),
            charts: vec![tps, rt],
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peak::step;
    use crate::plan::Plan;

    fn study(label: &str, points: Vec<PointRecord>) -> StudyRecord {
        let plan = Plan {
            threads: vec![1, 2],
            sizes: vec![1024],
            queues: vec![8],
            batch: vec![1],
            rates: vec![None],
            producers: vec![1],
            consumers: 0,
            warmup_s: 0.0,
            duration_s: 1.0,
            topic: "T".into(),
        };
        let mut record = StudyRecord::new("quiver bench sweep", label, "x:1", plan);
        record.points = points;
        record
    }

    #[test]
    fn runs_are_compared_scenario_by_scenario_with_ratios_to_the_first() {
        let a = study(
            "quiver",
            vec![
                step(1, 4_000.0, 0.25, 1.0, 0),
                step(2, 8_000.0, 0.25, 1.0, 0),
            ],
        );
        let b = study("rocketmq", vec![step(2, 4_000.0, 0.5, 2.0, 3)]);
        let labels = vec!["quiver".to_owned(), "rocketmq".to_owned()];
        let comparisons = compare(&[a, b], &labels);
        assert_eq!(comparisons.len(), 2);
        assert_eq!(
            comparisons[0].rows.len(),
            1,
            "only the first run has 1 sender"
        );
        let two = &comparisons[1];
        assert_eq!(two.name, "2 threads, 1024 B, 8 queues");
        assert_eq!(two.rows[1].run, "rocketmq");
        assert_eq!(two.rows[1].failed, 3);
        assert!((two.rows[1].tps_ratio - 0.5).abs() < 1e-9);
        assert!((two.rows[1].average_rt_ratio - 2.0).abs() < 1e-9);
        let lines = comparison_table(&comparisons).markdown();
        assert!(lines[0].starts_with(
            "| scenario | run | failed | max TPS | max RT ms | avg RT ms | avg B2C ms"
        ));
        assert_eq!(
            lines[4],
            "|  | rocketmq | 3 | 4200 | 4 | 0.500 | - | - | - | - | 0.50 | 2.00 |"
        );
    }

    #[test]
    fn runs_with_one_label_are_told_apart_by_file() {
        let studies = vec![study("quiver", vec![]), study("quiver", vec![])];
        let paths = vec![
            PathBuf::from("/r/before.json"),
            PathBuf::from("/r/after.json"),
        ];
        assert_eq!(
            labels(&studies, &paths),
            vec!["quiver (before)", "quiver (after)"]
        );
    }
}
