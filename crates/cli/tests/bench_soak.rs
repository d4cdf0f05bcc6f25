//! `quiver bench soak` against a real `quiver up`: a short soak rides through the broker being
//! killed with SIGKILL and restarted under SYNC_FLUSH and finds nothing acknowledged missing;
//! a soak whose messages cannot arrive reports them missing and exits 1.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use quiver_testkit::QuiverProcess;

/// Generous bounds for a loaded 2-core machine; the soak itself produces for 8 s.
const FIRST_ACKS_DEADLINE: Duration = Duration::from_secs(60);
const RESTART_DEADLINE: Duration = Duration::from_secs(30);
const SOAK_END_DEADLINE: Duration = Duration::from_secs(180);

fn up_at(dir: &Path, namesrv_port: u16, broker_port: u16) -> anyhow::Result<QuiverProcess> {
    let conf = dir.join("broker.conf");
    let data = dir.join("data");
    let (namesrv_port, broker_port) = (namesrv_port.to_string(), broker_port.to_string());
    let args = [
        "up",
        "-c",
        conf.to_str().expect("utf-8 path"),
        "--data",
        data.to_str().expect("utf-8 path"),
        "--namesrv-port",
        &namesrv_port,
        "--broker-port",
        &broker_port,
    ];
    QuiverProcess::start(&common::binary(), &args, dir)
}

fn acked_in(line: &str) -> Option<u64> {
    let rest = line.split(" acked ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn a_soak_rides_through_a_sigkill_under_sync_flush_with_nothing_missing() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("broker.conf"), "flushDiskType=SYNC_FLUSH\n").expect("conf");
    let mut quiver = up_at(dir.path(), 0, 0).expect("quiver up starts");
    let (namesrv, broker) = (quiver.namesrv(), quiver.broker());
    let json = dir.path().join("soak.json");
    let mut soak = Command::new(common::binary())
        .args([
            "bench",
            "soak",
            "-n",
            &namesrv.to_string(),
            "-t",
            "SoakKill",
        ])
        .args(["--queues", "4", "-w", "4", "-s", "128", "--duration", "8"])
        .args(["--report-interval", "0.5", "--drain-timeout", "60"])
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the soak");
    let (lines, received) = mpsc::channel();
    let stdout = soak.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + FIRST_ACKS_DEADLINE;
    while !seen
        .iter()
        .any(|line: &String| acked_in(line).is_some_and(|n| n > 0))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("no acknowledged send within {FIRST_ACKS_DEADLINE:?}: {seen:?}"),
        }
    }
    let intervals_before_kill = seen.iter().filter(|l| acked_in(l).is_some()).count();

    quiver.kill9().expect("kill -9");
    // The same ports, so the clients find it again; the kernel may hold them for a moment.
    let deadline = Instant::now() + RESTART_DEADLINE;
    let restarted = loop {
        match up_at(dir.path(), namesrv.port(), broker.port()) {
            Ok(process) => break process,
            Err(error) if Instant::now() < deadline => {
                eprintln!("restart not yet possible: {error}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(error) => panic!("quiver did not restart: {error}"),
        }
    };

    let deadline = Instant::now() + SOAK_END_DEADLINE;
    let status = loop {
        if let Some(status) = soak.try_wait().expect("soak status") {
            break status;
        }
        assert!(Instant::now() < deadline, "the soak did not end: {seen:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    seen.extend(received.try_iter());
    let stdout = seen.join("\n");
    let mut stderr = String::new();
    if let Some(mut pipe) = soak.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    println!("{stdout}");
    assert!(
        status.success(),
        "{stdout}\n{stderr}\nbroker log:\n{}",
        restarted.log()
    );
    assert!(stdout.contains(", missing 0,"), "{stdout}");
    assert!(
        stdout.contains("Every acknowledged message was consumed."),
        "{stdout}"
    );
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("json");
    assert_eq!(record["missing"], 0);
    // The machine's stalls over the soak are in its findings, beside the disk's.
    assert!(stdout.contains("Hypervisor steal: "), "{stdout}");
    assert_eq!(record["steal"]["available"], true, "{}", record["steal"]);
    let acknowledged = record["totals"]["acknowledged"].as_u64().expect("acked");
    let consumed = record["totals"]["consumed"].as_u64().expect("consumed");
    assert!(acknowledged > 0);
    assert!(consumed >= acknowledged, "{consumed} < {acknowledged}");
    let after_restart: u64 = record["intervals"]
        .as_array()
        .expect("intervals")
        .iter()
        .skip(intervals_before_kill + 1)
        .map(|i| i["acknowledged"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        after_restart > 0,
        "sends were acknowledged after the restart: {stdout}"
    );
}

#[test]
fn a_soak_whose_messages_never_arrive_says_so_and_exits_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let quiver = common::up(dir.path());
    let json = dir.path().join("soak.json");
    // No consumer: every acknowledged message is missing by construction.
    let output = Command::new(common::binary())
        .args(["bench", "soak", "-n", &quiver.namesrv().to_string()])
        .args([
            "-t",
            "SoakNobody",
            "--queues",
            "2",
            "-w",
            "2",
            "--rate",
            "200",
        ])
        .args([
            "--consumers",
            "0",
            "--duration",
            "1",
            "--drain-timeout",
            "0.5",
        ])
        .args(["--report-interval", "0.5", "--json"])
        .arg(&json)
        .output()
        .expect("run the soak");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("acknowledged message(s) never arrived"),
        "{stderr}"
    );
    assert!(
        stdout.contains("Missing: sender 0 sequence 0 to "),
        "{stdout}"
    );
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("json");
    let acknowledged = record["totals"]["acknowledged"].as_u64().expect("acked");
    assert!(acknowledged > 0);
    assert_eq!(record["missing"].as_u64(), Some(acknowledged));
}
