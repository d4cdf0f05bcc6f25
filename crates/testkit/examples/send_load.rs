//! A plain load generator for measuring the broker: N connections, each sending messages
//! synchronously (one in flight per connection, as the official benchmark Producer's threads
//! do), with binary headers. Prints messages/s every interval and at the end.
//!
//! cargo run --release -p quiver-testkit --example send_load -- \
//!     --broker 127.0.0.1:10911 --connections 64 --size 1024 --seconds 30 --topic Load --queues 8

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_testkit::{SendOptions, WireClient};
use quiver_wire::code::response_code;
use quiver_wire::Encoding;

struct Args {
    broker: SocketAddr,
    connections: usize,
    size_bytes: usize,
    seconds: u64,
    topic: String,
    queues: i32,
}

fn parse_args() -> Args {
    let mut args = Args {
        broker: "127.0.0.1:10911".parse().expect("address"),
        connections: 64,
        size_bytes: 1024,
        seconds: 30,
        topic: "Load".into(),
        queues: 8,
    };
    let mut words = std::env::args().skip(1);
    while let Some(flag) = words.next() {
        let value = words
            .next()
            .unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--broker" => args.broker = value.parse().expect("--broker host:port"),
            "--connections" => args.connections = value.parse().expect("--connections N"),
            "--size" => args.size_bytes = value.parse().expect("--size BYTES"),
            "--seconds" => args.seconds = value.parse().expect("--seconds S"),
            "--topic" => args.topic = value,
            "--queues" => args.queues = value.parse().expect("--queues N"),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

fn main() {
    let args = parse_args();
    let mut admin = WireClient::connect(args.broker, Encoding::Json).expect("connect");
    let created = admin
        .create_topic(&args.topic, args.queues)
        .expect("create topic");
    assert_eq!(created.code, response_code::SUCCESS, "{:?}", created.remark);
    let sent = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let body = vec![b'q'; args.size_bytes];
    let mut threads = Vec::new();
    for _ in 0..args.connections {
        let (sent, failed, stop, body, topic) = (
            sent.clone(),
            failed.clone(),
            stop.clone(),
            body.clone(),
            args.topic.clone(),
        );
        let broker = args.broker;
        threads.push(std::thread::spawn(move || {
            let mut client = WireClient::connect(broker, Encoding::RocketMq).expect("connect");
            let options = SendOptions::default();
            while !stop.load(Ordering::Relaxed) {
                match client.send(&topic, &body, &options) {
                    Ok(response) if response.code == response_code::SUCCESS => {
                        sent.fetch_add(1, Ordering::Relaxed)
                    }
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let started = Instant::now();
    let mut last = (started, 0u64);
    while started.elapsed() < Duration::from_secs(args.seconds) {
        std::thread::sleep(Duration::from_secs(5));
        let now = (Instant::now(), sent.load(Ordering::Relaxed));
        let rate = (now.1 - last.1) as f64 / now.0.duration_since(last.0).as_secs_f64();
        println!(
            "send tps {rate:.0}  failed {}",
            failed.load(Ordering::Relaxed)
        );
        last = now;
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    let total = sent.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "total {total} messages in {elapsed:.1} s: {:.0} messages/s, {} failed",
        total as f64 / elapsed,
        failed.load(Ordering::Relaxed)
    );
}
