//! `quiver bench sweep`: every point of a plan, one after another, unattended. The record is
//! rewritten after each point, so a sweep started again with the same `--json` resumes after
//! the last point it finished.

use std::path::Path;

use crate::plan::{Plan, Scenario, SweepArgs};
use crate::point::{self, PointSettings};
use crate::progress::{duration_words, print_findings, Progress};
use crate::study::StudyRecord;
use crate::{read_json, write_json, BenchError};

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
    let settings = point_settings(&args, &plan);
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
    let interrupted = run_points_left(&args, &settings, &scenarios, &mut record).await?;
    record.peak = crate::peak::sweep_verdict(&record.points);
    save(&args, &record)?;
    print_findings(&record);
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

fn point_settings(args: &SweepArgs, plan: &Plan) -> PointSettings {
    PointSettings {
        namesrv: args.namesrv.clone(),
        topic_prefix: plan.topic.clone(),
        warmup_s: plan.warmup_s,
        duration_s: plan.duration_s,
        report_interval_s: args.report_interval,
        send_timeout_ms: args.send_timeout_ms,
        broker_pid: args.broker_pid,
    }
}

/// Runs the points `record` does not hold yet, saving it after each; true when Ctrl-C stopped
/// them before the last.
async fn run_points_left(
    args: &SweepArgs,
    settings: &PointSettings,
    scenarios: &[Scenario],
    record: &mut StudyRecord,
) -> Result<bool, BenchError> {
    let done = record.points.len();
    let mut progress = Progress::new(scenarios.len(), settings.warmup_s + settings.duration_s);
    let machine = record.machine.clone();
    let mut interrupted = false;
    let signalled = crate::schedule::Interrupt::get();
    for (index, scenario) in scenarios.iter().enumerate().skip(done) {
        if signalled.is_set() {
            interrupted = true;
            break;
        }
        progress.start(index, scenario);
        let Some(point) = point::run(settings, scenario, &machine).await? else {
            interrupted = true;
            break;
        };
        progress.finish(index, &point);
        record.points.push(point);
        save(args, record)?;
    }
    progress.clear();
    Ok(interrupted)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::tests::point;

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
}
