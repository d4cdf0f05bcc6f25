//! `quiver bench sweep`, `peak`, `compare` and produce's pulsar-perf mode as a user runs them,
//! against a real `quiver up`: short points (under a second each), so the studies' logic is
//! what is tested, not the machine's speed. A test binary of its own: its brokers do not share
//! the machine's two cores with bench_cli's connection counting.

mod common;

use std::process::Command;

use common::bench::{assert_fails, bench, text};

#[test]
fn new_flags_and_files_are_refused_with_the_reason() {
    assert_fails(
        &bench(&["produce", "--batch-max-publish-delay-ms", "3"]),
        "--batch-max-messages",
    );
    assert_fails(
        &bench(&["produce", "--batch", "2", "--batch-max-messages", "3"]),
        "cannot be used with",
    );
    assert_fails(
        &bench(&[
            "produce",
            "--batch-max-messages",
            "1",
            "--batch-max-publish-delay-ms=-1",
        ]),
        "must be from 0 to 10000 milliseconds",
    );
    assert_fails(
        &bench(&["sweep", "-w", "1,0"]),
        "invalid value '0' for '--threads",
    );
    assert_fails(
        &bench(&["peak", "--gain-min-percent", "lots"]),
        "is not a percentage",
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = dir.path().join("plan.txt");
    std::fs::write(&plan, "threads = 1\nsizes = 1k\n").expect("write plan");
    assert_fails(
        &bench(&["sweep", "--plan", plan.to_str().expect("utf-8 path")]),
        "plan.txt, line 2: sizes: \"1k\" is not a whole number",
    );
    let not_a_record = dir.path().join("other.json");
    std::fs::write(&not_a_record, "{\"tool\": \"something else\"}").expect("write");
    assert_fails(
        &bench(&["compare", not_a_record.to_str().expect("utf-8 path")]),
        "not a record of `quiver bench sweep` or `peak`",
    );
    assert_fails(&bench(&["compare"]), "required");
}

fn json_of(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("json written")).expect("valid json")
}

#[test]
fn sweep_runs_its_plan_records_every_point_and_resumes_after_the_last_finished_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let quiver = common::up(dir.path());
    let namesrv = quiver.namesrv().to_string();
    let plan = dir.path().join("plan.txt");
    std::fs::write(
        &plan,
        "# two short points, consumers alongside\nthreads = 1, 3\nsizes = 64\nqueues = 2\n\
         warmup = 0.2\nduration = 0.6\nconsumers = 1\ntopic = SweepCli\n",
    )
    .expect("write plan");
    let json = dir.path().join("sweep.json");
    let sweep = |extra: &[&str]| {
        let mut args = vec![
            "sweep",
            "-n",
            &namesrv,
            "--plan",
            plan.to_str().expect("utf-8 path"),
            "--report-interval",
            "0.2",
            "--json",
            json.to_str().expect("utf-8 path"),
        ];
        args.extend_from_slice(extra);
        bench(&args)
    };
    let first = sweep(&[]);
    let stdout = text(&first.stdout);
    assert!(first.status.success(), "{stdout}\n{}", text(&first.stderr));
    assert!(
        stdout.contains("point 1/2 (1 threads, 64 B, 2 queues, 1 consumers)"),
        "{stdout}"
    );
    assert!(stdout.contains("point 2/2 done: 3 threads"), "{stdout}");
    assert!(
        stdout.contains("| scenario | failed | max TPS |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| 3 threads, 64 B, 2 queues, 1 consumers | 0 |"),
        "{stdout}"
    );
    let record = json_of(&json);
    assert_eq!(record["tool"], "quiver bench sweep");
    let points = record["points"].as_array().expect("points");
    assert_eq!(points.len(), 2);
    for point in points {
        assert!(point["max_tps"].as_f64().unwrap_or(0.0) > 0.0, "{point}");
        assert_eq!(point["failed"], 0);
        assert!(
            point["summary"]["counters"]["messages"]
                .as_u64()
                .unwrap_or(0)
                > 0
        );
        assert!(point["summary"]["latency"]["p99_ms"].as_f64().is_some());
        assert!(point["summary"]["disk"]["write_mb_per_s"]
            .as_f64()
            .is_some());
        let consumed: u64 = point["consume"]["intervals"]
            .as_array()
            .expect("consumer intervals")
            .iter()
            .map(|i| i["messages"].as_u64().unwrap_or(0))
            .sum();
        assert!(
            consumed > 0,
            "the consumer alongside received messages: {point}"
        );
        assert!(point["consume"]["lag_end"].as_u64().is_some());
    }

    // As if the sweep had been stopped during its second point.
    let mut cut = record.clone();
    cut["points"].as_array_mut().expect("points").truncate(1);
    std::fs::write(&json, serde_json::to_vec(&cut).expect("json")).expect("write");
    let resumed = sweep(&[]);
    let stdout = text(&resumed.stdout);
    assert!(resumed.status.success(), "{stdout}");
    assert!(stdout.contains("resuming after point 1"), "{stdout}");
    assert!(
        !stdout.contains("point 1/2 ("),
        "point 1 ran again: {stdout}"
    );
    assert!(stdout.contains("point 2/2 done"), "{stdout}");
    let again = json_of(&json);
    assert_eq!(again["points"].as_array().expect("points").len(), 2);
    assert_eq!(
        again["points"][0], record["points"][0],
        "the finished point is kept"
    );

    let other = sweep(&["-w", "5"]);
    assert_fails(&other, "holds another plan");

    // compare: the same record under another label, the second point at half the TPS.
    let mut slower = again.clone();
    slower["label"] = "slower".into();
    let half = again["points"][1]["max_tps"].as_f64().expect("max_tps") / 2.0;
    slower["points"][1]["max_tps"] = half.into();
    let slower_path = dir.path().join("slower.json");
    std::fs::write(&slower_path, serde_json::to_vec(&slower).expect("json")).expect("write");
    let compare_json = dir.path().join("compare.json");
    let compared = bench(&[
        "compare",
        json.to_str().expect("utf-8 path"),
        slower_path.to_str().expect("utf-8 path"),
        "--json",
        compare_json.to_str().expect("utf-8 path"),
    ]);
    let stdout = text(&compared.stdout);
    assert!(
        compared.status.success(),
        "{stdout}\n{}",
        text(&compared.stderr)
    );
    assert!(
        stdout.contains("| scenario | run | failed | max TPS | max RT ms | avg RT ms | avg B2C ms | avg S2C ms | max B2C ms | max S2C ms |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| 3 threads, 64 B, 2 queues, 1 consumers | quiver | 0 |"),
        "{stdout}"
    );
    let compared = json_of(&compare_json);
    let second = &compared["scenarios"][1]["rows"][1];
    assert_eq!(second["run"], "slower");
    assert!((second["tps_ratio"].as_f64().expect("ratio") - 0.5).abs() < 1e-6);
    assert!(
        second["b2c_average_ms"].as_f64().is_some(),
        "B2C from the consumers"
    );
}

#[test]
fn peak_raises_senders_and_names_peak_knee_and_plan() {
    let dir = tempfile::tempdir().expect("temp dir");
    let quiver = common::up(dir.path());
    let namesrv = quiver.namesrv().to_string();
    let json = dir.path().join("peak.json");
    let output = bench(&[
        "peak",
        "-n",
        &namesrv,
        "-w",
        "1,2,4",
        "-s",
        "64",
        "--queues",
        "2",
        "--warmup",
        "0.2",
        "--duration",
        "0.6",
        "--report-interval",
        "0.2",
        "--json",
        json.to_str().expect("utf-8 path"),
    ]);
    let stdout = text(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    for words in [
        "Peak: ",
        "Knee: ",
        "Plan daily traffic at ",
        "The search stopped because ",
    ] {
        assert!(stdout.contains(words), "{words:?} in {stdout}");
    }
    let record = json_of(&json);
    assert_eq!(record["tool"], "quiver bench peak");
    let points = record["points"].as_array().expect("points").len();
    assert!((2..=3).contains(&points), "{points} steps");
    let peak = &record["peak"];
    let peak_tps = peak["peak_tps"].as_f64().expect("peak_tps");
    assert!(peak_tps > 0.0);
    assert!((peak["plan_low_tps"].as_f64().expect("low") * 3.0 - peak_tps).abs() < 1e-6);
    assert!((peak["plan_high_tps"].as_f64().expect("high") * 2.0 - peak_tps).abs() < 1e-6);
}

#[test]
fn produce_batches_client_side_and_prints_pulsar_perf_lines() {
    let dir = tempfile::tempdir().expect("temp dir");
    let quiver = common::up(dir.path());
    let namesrv = quiver.namesrv().to_string();
    let json = dir.path().join("pulsar.json");
    let output = bench(&[
        "produce",
        "-n",
        &namesrv,
        "-t",
        "PulsarCli",
        "--queues",
        "2",
        "-w",
        "4",
        "--num-producers",
        "2",
        "-s",
        "100",
        "--messages",
        "400",
        "--batch-max-messages",
        "10",
        "--batch-max-publish-delay-ms",
        "5",
        "--output",
        "pulsar",
        "--report-interval",
        "0.2",
        "--json",
        json.to_str().expect("utf-8 path"),
    ]);
    let stdout = text(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    assert!(
        stdout.contains("client-side batches of up to 10 messages or 5 ms"),
        "{stdout}"
    );
    assert!(stdout.contains("Throughput produced: "), "{stdout}");
    assert!(stdout.contains(" Mbit/s --- failure "), "{stdout}");
    assert!(stdout.contains("--- Latency: mean: "), "{stdout}");
    assert!(!stdout.contains("Send TPS"), "{stdout}");
    assert!(
        stdout.contains("Aggregated throughput stats --- 400 records sent"),
        "{stdout}"
    );
    let record = json_of(&json);
    assert_eq!(record["summary"]["counters"]["messages"], 400);
    assert_eq!(
        record["summary"]["latency"]["count"], 400,
        "a latency for every message, not one per batch"
    );
    assert_eq!(record["parameters"]["producers"], 2);
    assert_eq!(record["parameters"]["output"], "pulsar");
}

#[test]
fn an_interrupted_sweep_keeps_its_finished_points_and_says_how_to_resume() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().expect("temp dir");
    let quiver = common::up(dir.path());
    let json = dir.path().join("cut.json");
    let mut sweep = Command::new(common::binary())
        .args(["bench", "sweep", "-n", &quiver.namesrv().to_string()])
        .args(["-w", "1,2,3", "-s", "64", "--queues", "2", "--warmup", "0"])
        .args(["--duration", "1", "-t", "SweepCut", "--json"])
        .arg(&json)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start sweep");
    let stdout = sweep.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let first_done = line.starts_with("point 1/3 done");
        seen.push(line);
        if first_done {
            break;
        }
    }
    assert!(
        seen.last().is_some_and(|l| l.starts_with("point 1/3 done")),
        "{seen:?}"
    );
    let interrupt = Command::new("kill")
        .args(["-INT", &sweep.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(interrupt.success());
    seen.extend(lines);
    let output = sweep.wait_with_output().expect("sweep ends");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{seen:?}\n{stderr}");
    assert!(
        stderr.contains("interrupted after 1 of 3 points; run the same command again to resume"),
        "{stderr}"
    );
    let record = json_of(&json);
    assert_eq!(record["points"].as_array().expect("points").len(), 1);
    assert_eq!(record["points"][0]["scenario"]["threads"], 1);
}
