//! A flood of bad frames must not flood the log: a real `quiver namesrv` gets thousands of
//! malformed frames, each on a fresh connection, and writes a few of the warnings plus a summary
//! that counts the rest; it still answers afterwards.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use quiver_testkit::{wait_until, QuiverProcess, WireClient};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding};

const FRAMES: u64 = 3_000;
/// crates/cli/src/log.rs EVENTS_PER_INTERVAL_MAX: lines of one kind written per window.
const LINES_PER_WINDOW_MAX: u64 = 5;
const MALFORMED: &str = "closing connection: malformed frame";
const TARGET: &str = "quiver_namesrv::server";

fn namesrv(dir: &std::path::Path) -> QuiverProcess {
    QuiverProcess::start(
        &common::binary(),
        &["namesrv", "--listen", "127.0.0.1:0"],
        dir,
    )
    .expect("quiver namesrv starts")
}

/// Sends one frame whose length field says 32 MiB (over the 16 MiB limit) on a fresh connection
/// and waits until the server closes it, so the server has logged it before the next.
fn send_malformed_frame(addr: SocketAddr) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    stream
        .write_all(&[0x02, 0, 0, 0, 0, 0, 0, 0])
        .expect("write frame");
    let mut rest = Vec::new();
    match stream.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "answered a malformed frame: {rest:?}"),
        Err(error) if error.kind() == ErrorKind::ConnectionReset => {}
        Err(error) => panic!("server did not close a malformed connection: {error}"),
    }
}

/// Whole lines only: the server may be halfway through writing the last one.
fn complete_lines(log: &str) -> impl Iterator<Item = &str> {
    log.split_inclusive('\n')
        .filter(|line| line.ends_with('\n'))
}

/// The malformed-frame warnings written, and the counts of those the summaries say were not.
fn malformed_accounting(log: &str) -> (u64, Vec<u64>) {
    let summary_tail = format!(" more {MALFORMED:?} ({TARGET}) in the last ");
    let mut written = 0;
    let mut summarised = Vec::new();
    for line in complete_lines(log) {
        if let Some((head, _)) = line.split_once(&summary_tail) {
            let (_, count) = head
                .rsplit_once("quiver::log: ")
                .unwrap_or_else(|| panic!("summary without its target: {line}"));
            summarised.push(count.parse().expect("summary count"));
        } else if line.contains(&format!("{TARGET}: {MALFORMED}")) {
            written += 1;
        }
    }
    (written, summarised)
}

fn assert_answers(addr: SocketAddr) {
    let mut client = WireClient::connect(addr, Encoding::Json).expect("connect");
    client
        .set_read_timeout(Duration::from_secs(20))
        .expect("read timeout");
    let response = client
        .call(Command::request(
            request_code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
            Encoding::Json,
        ))
        .expect("topic list answered");
    assert_eq!(response.code, response_code::SUCCESS, "{response:?}");
}

#[test]
fn malformed_frames_are_logged_a_few_times_then_summarised_with_their_count() {
    let dir = tempfile::tempdir().unwrap();
    let mut quiver = namesrv(dir.path());
    let addr = quiver.namesrv();
    for _ in 0..FRAMES {
        send_malformed_frame(addr);
    }
    assert_answers(addr);

    // The summary comes from a periodic check once its 10 s window ends, with no further event.
    let accounted = wait_until(Duration::from_secs(60), || {
        let (written, summarised) = malformed_accounting(&quiver.log());
        (written + summarised.iter().sum::<u64>() == FRAMES).then_some((written, summarised))
    });
    let Some((written, summarised)) = accounted else {
        panic!(
            "the log does not account for {FRAMES} malformed frames within 60 s: {:?}",
            malformed_accounting(&quiver.log())
        );
    };
    // Each window writes at most 5 lines and ends in at most one summary; the sending may
    // have spanned several windows on a slow machine.
    assert!(!summarised.is_empty());
    let windows = summarised.len() as u64 + 1;
    assert!(
        written <= LINES_PER_WINDOW_MAX * windows,
        "{written} lines written in {windows} windows"
    );

    let status = quiver.terminate().expect("stops on SIGTERM");
    assert!(status.success(), "{status:?}");
    let (written_at_exit, summarised_at_exit) = malformed_accounting(&quiver.log());
    assert_eq!(
        (written_at_exit, summarised_at_exit.iter().sum::<u64>()),
        (written, summarised.iter().sum::<u64>()),
        "nothing counted twice at exit"
    );
}

#[test]
fn dropped_lines_still_owed_at_exit_are_summarised() {
    let dir = tempfile::tempdir().unwrap();
    let mut quiver = namesrv(dir.path());
    let addr = quiver.namesrv();
    for _ in 0..200 {
        send_malformed_frame(addr);
    }
    assert_answers(addr);
    // Stopped at once, well inside the 10 s window: the count is written on the way out.
    let status = quiver.terminate().expect("stops on SIGTERM");
    assert!(status.success(), "{status:?}");
    let (written, summarised) = malformed_accounting(&quiver.log());
    assert_eq!(
        written + summarised.iter().sum::<u64>(),
        200,
        "{:?}",
        (written, &summarised)
    );
    assert!(!summarised.is_empty());
    assert!(written <= LINES_PER_WINDOW_MAX * (summarised.len() as u64 + 1));
}
