//! Hostile and careless peers against a real `quiver up`: what they can make the broker hold is
//! bounded in bytes, and a well-behaved client is served meanwhile.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use quiver_testkit::{pull_header, wait_until, QuiverProcess, SendOptions, WireClient};
use quiver_wire::body::{self, KvTable};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::pull_sys_flag;
use quiver_wire::{encode_frame, Command, Encoding};

const MIB: u64 = 1024 * 1024;
/// The default `quiverConnectionBytesMax`.
const CONNECTION_BYTES_MAX: u64 = 16 * MIB;

fn runtime_info(client: &mut WireClient) -> KvTable {
    let request = Command::request(request_code::GET_BROKER_RUNTIME_INFO, Encoding::Json);
    let answer = client.call(request).expect("runtime info");
    assert_eq!(answer.code, response_code::SUCCESS);
    body::from_json(&answer.body).expect("runtime info body")
}

fn bytes_held(client: &mut WireClient) -> u64 {
    let info = runtime_info(client);
    info.table["quiverBytesHeld"].parse().expect("a number")
}

/// `count` pull requests for the first message of `topic`, back to back, as one buffer.
fn pipelined_pulls(topic: &str, count: i32) -> Vec<u8> {
    let mut out = BytesMut::new();
    for opaque in 0..count {
        let header = quiver_wire::header::PullMessageRequestHeader {
            queue_offset: 0,
            max_msg_nums: 32,
            sys_flag: pull_sys_flag::SUBSCRIPTION,
            ..pull_header(topic, "slow_readers", 0)
        };
        let request = Command::request(request_code::PULL_MESSAGE, Encoding::Json)
            .with_ext(header.to_ext())
            .with_opaque(opaque + 1);
        encode_frame(&request, &mut out).expect("encode");
    }
    out.to_vec()
}

/// Four connections pipeline thousands of pulls of a 4 MB message and read none of the answers
/// (once, this took a broker from 81 MiB to 12.8 GiB in 20 s): each stops being read at its
/// byte budget, the broker stays far below 1 GiB, and another client sends and pulls meanwhile.
#[test]
fn slow_readers_pipelining_pulls_of_a_large_message_are_held_to_their_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let quiver: QuiverProcess = common::up(dir.path());
    let mut good = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    assert_eq!(
        good.create_topic("Big", 1).expect("create").code,
        response_code::SUCCESS
    );
    let options = SendOptions::default();
    let big = vec![b'b'; 4_000_000];
    let sent = good.send("Big", &big, &options).expect("send");
    assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);

    let pulls = pipelined_pulls("Big", 2_000);
    let mut hostile = Vec::new();
    for _ in 0..4 {
        let stream = TcpStream::connect(quiver.broker()).expect("connect");
        stream
            .set_write_timeout(Some(Duration::from_secs(2)))
            .expect("write timeout");
        let pulls = pulls.clone();
        let writer = stream.try_clone().expect("clone");
        hostile.push(stream);
        // The broker stops reading: the write ends in its timeout, which is what we want.
        std::thread::spawn(move || {
            let mut writer = writer;
            let _ = writer.write_all(&pulls);
        });
    }
    // Each connection fills its budget and is read no further.
    let held = wait_until(Duration::from_secs(60), || {
        let held = bytes_held(&mut good);
        (held >= 4 * CONNECTION_BYTES_MAX).then_some(held)
    })
    .expect("the slow readers fill their budgets");
    // Past its budget a connection takes at most one more answer (4 MB) and a read's frames.
    assert!(
        held <= 4 * (CONNECTION_BYTES_MAX + 5 * MIB),
        "{held} bytes held"
    );
    let rss = quiver.rss_bytes().expect("rss");
    assert!(rss < 512 * MIB, "the broker holds {} MiB", rss / MIB);

    // A well-behaved client is served all the while.
    let sent = good.send("Big", b"small", &options).expect("send");
    assert_eq!(sent.code, response_code::SUCCESS);
    let pulled = good.pull("Big", "good_group", 0, 1, 32, 0).expect("pull");
    assert_eq!(pulled.code, response_code::SUCCESS);

    // Gone, they hold nothing.
    drop(hostile);
    wait_until(Duration::from_secs(60), || {
        (bytes_held(&mut good) < MIB).then_some(())
    })
    .expect("closed connections let their bytes go");
}

/// Eight bytes that announce a 16 MiB frame, on many connections, make the broker hold what
/// arrived, not what was announced, and an idle connection holds a few KiB.
#[test]
fn announced_frames_that_never_come_hold_no_memory() {
    const CONNECTIONS: u64 = 500;
    let dir = tempfile::tempdir().expect("tempdir");
    let quiver: QuiverProcess = common::up(dir.path());
    let mut good = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    let before = quiver.rss_bytes().expect("rss");
    let prefix = [0x00, 0xff, 0xff, 0xf0, 0, 0, 0, 0];
    let mut open = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut stream = TcpStream::connect(quiver.broker()).expect("connect");
        stream.write_all(&prefix).expect("write");
        open.push(stream);
    }
    wait_until(Duration::from_secs(30), || {
        (bytes_held(&mut good) >= CONNECTIONS * 8).then_some(())
    })
    .expect("each prefix is read and counted");
    let after = quiver.rss_bytes().expect("rss");
    // Reserving the announced frames would be 8 GiB; 64 KiB each, 32 MiB.
    assert!(
        after < before + 24 * MIB,
        "{} MiB before, {} MiB after {CONNECTIONS} connections",
        before / MIB,
        after / MIB
    );
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

/// A process on a SYNC_MASTER's HA port that reports positions it was never sent (first a
/// valid start, then far past the master's log) confirms nothing: sends are not SEND_OK.
#[test]
fn a_fake_slave_reporting_positions_it_was_never_sent_confirms_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ha_port = free_port();
    let quiver = common::up_with_config(
        dir.path(),
        &format!("brokerRole=SYNC_MASTER\nhaListenPort={ha_port}\nslaveTimeout=1000\n"),
    );
    let mut producer = WireClient::connect(quiver.broker(), Encoding::Json).expect("connect");
    assert_eq!(
        producer.create_topic("Guarded", 1).expect("create").code,
        response_code::SUCCESS
    );
    let options = SendOptions::default();
    let mut fake = TcpStream::connect(("127.0.0.1", ha_port)).expect("connect to the HA port");
    fake.write_all(&0u64.to_be_bytes()).expect("report");
    for i in 0..5 {
        // Whatever the fake reports, it was sent at most the log so far.
        let _ = fake.write_all(&(1u64 << 40).to_be_bytes());
        let sent = producer
            .send("Guarded", format!("m{i}").as_bytes(), &options)
            .expect("send");
        assert!(
            sent.code == response_code::FLUSH_SLAVE_TIMEOUT
                || sent.code == response_code::SLAVE_NOT_AVAILABLE,
            "answered {} ({:?}) with only a fake slave",
            sent.code,
            sent.remark
        );
    }
}
