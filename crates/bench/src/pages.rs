//! What each command's HTML report shows: the sections, tables and charts, built from the same
//! records the JSON holds. How they are drawn is `html`'s business.

use std::collections::BTreeMap;

use crate::html::{nines, nines_ticks, Chart, Page, Section};
use crate::machine::Machine;
use crate::report::{ConsumeInterval, ProduceInterval, Summary};
use crate::study::{disk_notes, study_table, PointRecord, StudyRecord};
use crate::{Percentiles, ProduceArgs};

/// The points of a latency percentile curve, x in "nines".
pub fn percentile_curve(latency: &Percentiles) -> Vec<(f64, f64)> {
    [
        (50.0, latency.p50_ms),
        (95.0, latency.p95_ms),
        (99.0, latency.p99_ms),
        (99.9, latency.p999_ms),
        (99.99, latency.p9999_ms),
    ]
    .iter()
    .map(|(p, ms)| (nines(*p), *ms))
    .collect()
}

pub fn percentile_chart(title: &str) -> Chart {
    let mut chart = Chart::new(title, "percentile", "latency ms (log)").log_y();
    chart.x_ticks = Some(nines_ticks());
    chart
}

/// The points of one series.
type Line = Vec<(f64, f64)>;

/// Send TPS and p99 against time, for a run's intervals; `offset_s` places them on a longer
/// time line (a sweep's).
fn over_time(intervals: &[ProduceInterval], offset_s: f64) -> (Line, Line) {
    let tps = intervals
        .iter()
        .map(|i| (offset_s + i.elapsed_s, i.send_tps))
        .collect();
    let p99 = intervals
        .iter()
        .filter(|i| i.latency.count > 0)
        .map(|i| (offset_s + i.elapsed_s, i.latency.p99_ms))
        .collect();
    (tps, p99)
}

fn machine_line(machine: &Machine) -> String {
    format!("Machine: {}.", machine.line())
}

pub fn produce_page(
    args: &ProduceArgs,
    machine: &Machine,
    intervals: &[ProduceInterval],
    summary: &Summary,
) -> Page {
    let mut paragraphs = vec![
        format!(
            "Topic {}, {} senders over {} producer(s), {} B bodies, name server {}.",
            args.topic, args.senders, args.producers, args.size, args.run.namesrv
        ),
        machine_line(machine),
    ];
    paragraphs.extend(summary.lines("Send RT"));
    let (tps, p99) = over_time(intervals, 0.0);
    Page {
        title: format!("quiver bench produce: {}", args.topic),
        sections: vec![Section {
            heading: "Run".into(),
            paragraphs,
            table: None,
            charts: vec![
                Chart::new("Send TPS over time", "seconds", "msg/s").with_series("send TPS", tps),
                Chart::new("p99 send latency over time", "seconds", "ms (log)")
                    .log_y()
                    .with_series("p99", p99),
                percentile_chart("Send latency percentiles (after warm-up)")
                    .with_series("send RT", percentile_curve(&summary.latency)),
            ],
        }],
    }
}

pub fn consume_page(topic: &str, machine: &Machine, intervals: &[ConsumeInterval]) -> Page {
    let tps = intervals
        .iter()
        .map(|i| (i.elapsed_s, i.consume_tps))
        .collect();
    let latency = |pick: fn(&ConsumeInterval) -> f64| -> Vec<(f64, f64)> {
        intervals
            .iter()
            .filter(|i| i.messages > 0)
            .map(|i| (i.elapsed_s, pick(i)))
            .collect()
    };
    Page {
        title: format!("quiver bench consume: {topic}"),
        sections: vec![Section {
            heading: "Run".into(),
            paragraphs: vec![machine_line(machine)],
            table: None,
            charts: vec![
                Chart::new("Consume rate over time", "seconds", "msg/s")
                    .with_series("consume TPS", tps),
                Chart::new(
                    "Born / stored to consume, p99 over time",
                    "seconds",
                    "ms (log)",
                )
                .log_y()
                .with_series("B2C p99", latency(|i| i.b2c.p99_ms))
                .with_series("S2C p99", latency(|i| i.s2c.p99_ms)),
            ],
        }],
    }
}

/// Series name for the points that share everything but the sender count.
fn family(point: &PointRecord) -> String {
    let mut scenario = point.scenario.clone();
    scenario.threads = 0;
    let name = scenario.name();
    name.trim_start_matches("0 threads, ").to_owned()
}

pub fn study_page(record: &StudyRecord) -> Page {
    let points = &record.points;
    let mut paragraphs = vec![
        format!(
            "{} against {} ({}), {} of {} points, {}s + {}s warm-up each.",
            record.tool,
            record.namesrv,
            record.label,
            points.len(),
            record.plan.scenarios().len(),
            crate::html::number(record.plan.duration_s),
            crate::html::number(record.plan.warmup_s)
        ),
        machine_line(&record.machine),
    ];
    if let Some(peak) = &record.peak {
        paragraphs.extend(peak.words.iter().cloned());
    }
    let disk = disk_notes(points);
    if disk.is_empty() {
        paragraphs.push("No point was limited by the disk.".into());
    } else {
        paragraphs.push("Points limited by the disk:".into());
        paragraphs.extend(disk);
    }
    let mut sections = vec![Section {
        heading: format!("{}: {}", record.label, record.tool),
        paragraphs,
        table: Some(study_table(points)),
        charts: Vec::new(),
    }];
    sections.push(Section {
        heading: "Throughput and latency against senders".into(),
        charts: scaling_charts(points),
        ..Section::default()
    });
    sections.push(Section {
        heading: "Latency percentiles (log scale), per size and queue count".into(),
        charts: percentile_charts(points),
        ..Section::default()
    });
    sections.push(Section {
        heading: "Over time, point after point".into(),
        charts: timeline_charts(points),
        ..Section::default()
    });
    Page {
        title: format!("{} ({})", record.tool, record.label),
        sections,
    }
}

fn scaling_charts(points: &[PointRecord]) -> Vec<Chart> {
    let mut tps = Chart::new("Throughput against senders", "senders", "msg/s");
    let mut mb = Chart::new("MB/s against senders", "senders", "MB/s");
    let mut p99 = Chart::new("p99 send latency against senders", "senders", "ms (log)").log_y();
    let mut families: BTreeMap<String, Vec<&PointRecord>> = BTreeMap::new();
    for point in points {
        families.entry(family(point)).or_default().push(point);
    }
    for (name, members) in &families {
        let series = |pick: fn(&PointRecord) -> f64| -> Vec<(f64, f64)> {
            members
                .iter()
                .map(|p| (p.scenario.threads as f64, pick(p)))
                .collect()
        };
        tps = tps.with_series(name, series(|p| p.summary.throughput.messages_per_s));
        mb = mb.with_series(name, series(|p| p.summary.throughput.mb_per_s));
        p99 = p99.with_series(name, series(|p| p.summary.latency.p99_ms));
    }
    vec![tps, mb, p99]
}

fn percentile_charts(points: &[PointRecord]) -> Vec<Chart> {
    let mut families: BTreeMap<String, Vec<&PointRecord>> = BTreeMap::new();
    for point in points {
        families.entry(family(point)).or_default().push(point);
    }
    families
        .iter()
        .map(|(name, members)| {
            let mut chart = percentile_chart(name);
            for point in members {
                chart = chart.with_series(
                    &format!("{} senders", point.scenario.threads),
                    percentile_curve(&point.summary.latency),
                );
            }
            chart
        })
        .collect()
}

fn timeline_charts(points: &[PointRecord]) -> Vec<Chart> {
    let mut tps = Vec::new();
    let mut p99 = Vec::new();
    let mut consume_tps = Vec::new();
    let mut lag = Vec::new();
    let mut offset_s = 0.0;
    for point in points {
        let (t, p) = over_time(&point.intervals, offset_s);
        tps.extend(t);
        p99.extend(p);
        if let Some(consume) = &point.consume {
            for (interval, lag_then) in consume.intervals.iter().zip(&consume.lag) {
                consume_tps.push((offset_s + interval.elapsed_s, interval.consume_tps));
                lag.push((offset_s + interval.elapsed_s, *lag_then as f64));
            }
        }
        offset_s += point.intervals.last().map_or(0.0, |i| i.elapsed_s);
    }
    let mut charts = vec![
        Chart::new("Send TPS over time", "seconds into the study", "msg/s")
            .with_series("send TPS", tps),
        Chart::new(
            "p99 send latency over time",
            "seconds into the study",
            "ms (log)",
        )
        .log_y()
        .with_series("p99", p99),
    ];
    if !consume_tps.is_empty() {
        charts.push(
            Chart::new("Consume rate over time", "seconds into the study", "msg/s")
                .with_series("consume TPS", consume_tps),
        );
        charts.push(
            Chart::new(
                "Consumer lag over time",
                "seconds into the study",
                "messages",
            )
            .with_series("lag", lag),
        );
    }
    charts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::html::render;
    use crate::peak::step;
    use crate::plan::Plan;

    #[test]
    fn a_study_page_has_every_chart_the_issue_lists() {
        let plan = Plan {
            threads: vec![1, 2],
            sizes: vec![1024, 3072],
            queues: vec![8],
            batch: vec![1],
            rates: vec![None],
            producers: vec![1],
            consumers: 0,
            warmup_s: 0.0,
            duration_s: 1.0,
            topic: "T".into(),
        };
        let mut record = StudyRecord::new("quiver bench sweep", "quiver", "x:1", plan);
        let mut big = step(1, 3_000.0, 0.3, 1.0, 0);
        big.scenario.size = 3072;
        record.points = vec![
            step(1, 4_000.0, 0.25, 1.0, 0),
            big,
            step(2, 7_000.0, 0.3, 1.2, 0),
        ];
        let page = study_page(&record);
        let charts: Vec<&str> = page
            .sections
            .iter()
            .flat_map(|s| s.charts.iter().map(|c| c.title.as_str()))
            .collect();
        assert!(charts.contains(&"Throughput against senders"));
        assert!(charts.contains(&"1024 B, 8 queues"), "{charts:?}");
        assert!(charts.contains(&"3072 B, 8 queues"), "{charts:?}");
        assert!(charts.contains(&"p99 send latency over time"));
        let scaling = &page.sections[1].charts[0];
        assert_eq!(scaling.series.len(), 2, "one line per size and queue count");
        assert_eq!(
            scaling.series[0].points,
            vec![(1.0, 4_000.0), (2.0, 7_000.0)]
        );
        let html = render(&page);
        assert!(html.contains("No point was limited by the disk."));
        assert!(html.contains("<td>2 threads, 1024 B, 8 queues</td>"));
    }
}
