//! `quiver bench` as a user runs it: bad flags and unreachable or missing things give a clear
//! message and exit code 2; short real runs against `quiver up` report what they did.

mod common;

use std::process::Command;

use common::bench::{assert_fails, bench, text};

#[test]
fn bad_flags_are_refused_with_the_reason() {
    assert_fails(
        &bench(&["produce", "-w", "0"]),
        "invalid value '0' for '--threads",
    );
    assert_fails(
        &bench(&["produce", "-s", "lots"]),
        "invalid value 'lots' for '--size",
    );
    assert_fails(
        &bench(&["produce", "--messages", "5", "--duration", "3"]),
        "cannot be used with",
    );
    assert_fails(
        &bench(&["produce", "--rate=0"]),
        "not a positive number of messages per second",
    );
    assert_fails(
        &bench(&["produce", "--report-interval", "0"]),
        "must be at least 0.1 seconds",
    );
    assert_fails(
        &bench(&["produce", "--duration", "1e20"]),
        "must be from 0 to 1000000000 seconds",
    );
    assert_fails(
        &bench(&["produce", "--messages", "0"]),
        "invalid value '0' for '--messages",
    );
    assert_fails(
        &bench(&["produce", "--send-timeout-ms", "0"]),
        "invalid value '0' for '--send-timeout-ms",
    );
    assert_fails(
        &bench(&["produce", "--batch", "5000"]),
        "invalid value '5000' for '--batch",
    );
    assert_fails(
        &bench(&["consume", "--from", "middle"]),
        "invalid value 'middle' for '--from",
    );
    assert_fails(
        &bench(&["produce", "--nonsense"]),
        "unexpected argument '--nonsense'",
    );
}

#[test]
fn an_unreachable_name_server_is_named() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = unused.local_addr().expect("addr").to_string();
    drop(unused);
    let output = bench(&["produce", "-n", &addr, "--messages", "1"]);
    assert_fails(&output, &format!("cannot reach the name server at {addr}"));
}

#[test]
fn produce_then_consume_report_and_write_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let quiver = common::up(dir.path());
    let namesrv = quiver.namesrv().to_string();

    let missing = bench(&[
        "consume",
        "-n",
        &namesrv,
        "-t",
        "NotThere",
        "--messages",
        "1",
    ]);
    assert_fails(&missing, "topic NotThere does not exist");

    let json = dir.path().join("produce.json");
    let produced = bench(&[
        "produce",
        "-n",
        &namesrv,
        "-t",
        "BenchCli",
        "-w",
        "4",
        "-s",
        "100",
        "-k",
        "--queues",
        "2",
        "--messages",
        "300",
        "--batch",
        "3",
        "--report-interval",
        "0.2",
        "--json",
        json.to_str().expect("utf-8 path"),
    ]);
    let stdout = text(&produced.stdout);
    assert!(
        produced.status.success(),
        "{stdout}\n{}",
        text(&produced.stderr)
    );
    assert!(
        stdout.contains("created topic BenchCli with 2 queues"),
        "{stdout}"
    );
    assert!(stdout.contains("Send TPS: "), "{stdout}");
    assert!(stdout.contains("| p50 "), "{stdout}");
    assert!(stdout.contains("Summary over"), "{stdout}");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("valid json");
    assert_eq!(record["tool"], "quiver bench produce");
    assert_eq!(record["summary"]["counters"]["messages"], 300);
    assert_eq!(record["summary"]["counters"]["bytes"], 30_000);
    assert_eq!(
        record["summary"]["latency"]["count"], 100,
        "one round trip per batch of 3"
    );
    assert_eq!(record["parameters"]["batch"], 3);
    assert!(record["machine"]["cpu_count"].as_u64().unwrap_or(0) >= 1);
    // The machine's steal over the run: Linux reports it, as a share of the CPUs' time.
    assert!(stdout.contains("Hypervisor steal: "), "{stdout}");
    let steal = &record["summary"]["steal"];
    assert_eq!(steal["available"], true, "{steal}");
    let share = steal["share"].as_f64().expect("a share");
    assert!((0.0..=1.0).contains(&share), "{steal}");
    assert!(steal["stalls"].as_u64().is_some(), "{steal}");
    assert!(!record["intervals"]
        .as_array()
        .expect("intervals")
        .is_empty());

    // Done before its warm-up ended: no figures are passed off as measured ones.
    let json = dir.path().join("warmup.json");
    let early = bench(&[
        "produce",
        "-n",
        &namesrv,
        "-t",
        "BenchWarmup",
        "--messages",
        "20",
        "--warmup",
        "60",
        "--json",
        json.to_str().expect("utf-8 path"),
    ]);
    let stdout = text(&early.stdout);
    assert!(early.status.success(), "{stdout}");
    assert!(
        stdout.contains("Stopped during warm-up: nothing was measured (20 messages"),
        "{stdout}"
    );
    assert!(!stdout.contains("Summary over"), "{stdout}");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("valid json");
    assert_eq!(record["summary"]["measured"], false);

    let consumed = bench(&[
        "consume",
        "-n",
        &namesrv,
        "-t",
        "BenchCli",
        "-g",
        "bench_cli_group",
        "--from",
        "first",
        "--messages",
        "300",
        "--report-interval",
        "0.2",
    ]);
    let stdout = text(&consumed.stdout);
    assert!(
        consumed.status.success(),
        "{stdout}\n{}",
        text(&consumed.stderr)
    );
    assert!(stdout.contains("Consume TPS: "), "{stdout}");
    assert!(stdout.contains("AVG(B2C) RT(ms)"), "{stdout}");
    assert!(stdout.contains("300 messages"), "{stdout}");

    // By pop (RocketMQ 5): another group, two pop consumers, every message once.
    let json = dir.path().join("pop.json");
    let popped = bench(&[
        "consume",
        "-n",
        &namesrv,
        "-t",
        "BenchCli",
        "-g",
        "bench_cli_pop",
        "--pop",
        "--pop-consumers",
        "2",
        "--from",
        "first",
        "--messages",
        "300",
        "--report-interval",
        "0.2",
        "--json",
        json.to_str().expect("utf-8 path"),
    ]);
    let stdout = text(&popped.stdout);
    assert!(
        popped.status.success(),
        "{stdout}\n{}",
        text(&popped.stderr)
    );
    assert!(stdout.contains("popping with 2 consumer(s)"), "{stdout}");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("valid json");
    assert_eq!(record["summary"]["counters"]["messages"], 300, "{stdout}");
}

/// Established loopback connections whose far end is `port` (the connecting side of each).
fn connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let remote = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 3 && fields[2].ends_with(&remote) && fields[3] == "01"
        })
        .count()
}

#[test]
fn producers_each_open_a_connection_of_their_own() {
    let dir = tempfile::tempdir().expect("temp dir");
    let quiver = common::up(dir.path());
    let namesrv = quiver.namesrv().to_string();
    let broker_port = quiver.broker().port();
    assert_eq!(connections_to(broker_port), 0);

    let json = dir.path().join("producers.json");
    let run = Command::new(common::binary())
        .args(["bench", "produce", "-n", &namesrv, "-t", "BenchProducers"])
        .args(["-w", "6", "--producers", "3", "-s", "64", "--queues", "2"])
        .args([
            "--rate",
            "200",
            "--messages",
            "600",
            "--report-interval",
            "10",
        ])
        .args(["--json", json.to_str().expect("utf-8 path")])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start quiver bench");
    // Paced at 200 msg/s, the run lasts about 3 s: look while it sends, until all three
    // producers are seen or the run ends (a loaded machine may take a while to start it).
    let mut run = run;
    let mut most = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while most < 3 && std::time::Instant::now() < deadline {
        most = most.max(connections_to(broker_port));
        if run.try_wait().expect("poll quiver bench").is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let output = run.wait_with_output().expect("quiver bench ends");
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("6 senders over 3 producer(s)"), "{stdout}");
    assert_eq!(most, 3, "one connection per producer to the broker");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("valid json");
    assert_eq!(record["parameters"]["producers"], 3);
    assert_eq!(record["summary"]["counters"]["messages"], 600);
    assert_eq!(record["summary"]["counters"]["send_failed"], 0);
}

/// A SYNC_MASTER with no slave stores every send and answers SLAVE_NOT_AVAILABLE: the bench
/// counts those apart and not as sent, since nothing said they are safe.
#[test]
fn sends_a_sync_master_cannot_replicate_are_counted_apart_not_as_sent() {
    let dir = tempfile::tempdir().expect("temp dir");
    let quiver = common::up_with_config(dir.path(), "brokerRole=SYNC_MASTER\n");
    let namesrv = quiver.namesrv().to_string();
    let json = dir.path().join("produce.json");
    let produced = bench(&[
        "produce",
        "-n",
        &namesrv,
        "-t",
        "NoSlave",
        "-w",
        "2",
        "-s",
        "64",
        "--messages",
        "40",
        "--json",
        json.to_str().expect("utf-8 path"),
    ]);
    let stdout = text(&produced.stdout);
    assert!(
        stdout.contains("SLAVE_NOT_AVAILABLE 40"),
        "{stdout}\n{}",
        text(&produced.stderr)
    );
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("valid json");
    let counters = &record["summary"]["counters"];
    assert_eq!(counters["messages"], 0, "{record}");
    assert_eq!(
        counters["not_durable"]["slave_not_available"], 40,
        "{record}"
    );
}
