//! Controller mode across a partition, on loopback: `quiver namesrv` with the controller and two
//! `quiver broker` processes of one broker set, each reaching the controller only through a
//! relay of its own (`common/relay.rs`). The test cuts the master's relay: the master is cut off
//! from the controller but not from its clients, nor from its slave. The controller, hearing no
//! heartbeat from it, elects the other broker at a higher epoch, while a client goes on sending
//! to the old master directly. The old master must stop acknowledging within its lease, and
//! every send it acknowledged must be on the new master, which takes sends.
//!
//! The lease, in numbers: a master acknowledges a send only if it read it no later than
//! `controllerHeartBeatTimeoutMills` after sending the last heartbeat a controller answered
//! (`ha/controlled.rs`, `controller_mode/heartbeat.rs`). No heartbeat sent after the cut is
//! answered, so the lease ends no later than the cut plus that timeout, and a send made later
//! (the broker reads it later still) must be refused. Both clocks are this machine's wall
//! clock, so the bound holds exactly, however loaded the machine is.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::controller::*;
use common::relay::Relay;
use quiver_testkit::{wait_until, QuiverProcess, SendOptions, WireClient};
use quiver_wire::code::response_code;
use quiver_wire::Encoding;

/// Sends the master acknowledges before the cut.
const ACKNOWLEDGED_BEFORE_CUT: usize = 50;
/// How long sends go on to the old master after the new master was seen.
const SENDS_AFTER_ELECTION_MS: i64 = 3_000;
/// What an acknowledgement may take beyond the wait for the slave, however loaded the machine:
/// the store's write before the wait, the 20 ms round of the check that ends waits past
/// `slaveTimeout`, and the answer's way back.
const ANSWER_SLACK_MS: i64 = 2_000;
/// Between a refused send and the next, and between attempts to connect.
const PAUSE: Duration = Duration::from_millis(20);

/// One send to the old master: when it was made and when it was answered (wall-clock ms, the
/// clock the lease is kept in), and the answer (none: the connection failed).
struct Attempt {
    body: String,
    sent_ms: i64,
    answered_ms: i64,
    code: Option<i32>,
    remark: Option<String>,
}

impl Attempt {
    fn acknowledged(&self) -> bool {
        self.code == Some(response_code::SUCCESS)
    }
}

fn now_ms() -> i64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    since_epoch.as_millis() as i64
}

fn connect(broker: SocketAddr) -> Option<WireClient> {
    let client = WireClient::connect(broker, Encoding::Json).ok()?;
    client.set_read_timeout(Duration::from_secs(10)).ok()?;
    Some(client)
}

/// Sends `sent-n` to `broker` for n from 0 until `stop`, recording every attempt; a refused
/// send is followed by a pause, a failed connection by a new one.
fn send_recording(broker: SocketAddr, stop: &AtomicBool, attempts: &Mutex<Vec<Attempt>>) {
    let mut client = None;
    let mut n = 0;
    while !stop.load(Ordering::Acquire) {
        let Some(connected) = client.as_mut() else {
            client = connect(broker);
            if client.is_none() {
                std::thread::sleep(PAUSE);
            }
            continue;
        };
        let body = format!("sent-{n}");
        let options = SendOptions {
            queue_id: Some(n % QUEUES),
            ..SendOptions::default()
        };
        n += 1;
        let sent_ms = now_ms();
        let answer = connected.send(TOPIC, body.as_bytes(), &options).ok();
        let attempt = Attempt {
            body,
            sent_ms,
            answered_ms: now_ms(),
            code: answer.as_ref().map(|answer| answer.code),
            remark: answer.and_then(|answer| answer.remark),
        };
        match attempt.code {
            Some(response_code::SUCCESS) => {}
            Some(_) => std::thread::sleep(PAUSE),
            None => client = None,
        }
        attempts.lock().unwrap().push(attempt);
    }
}

/// What the test saw, in ms after the cut, for the report and the failure messages.
fn timeline(attempts: &[Attempt], cut_ms: i64, seen_ms: i64) -> String {
    let acked = attempts.iter().filter(|a| a.acknowledged());
    let last_acked = acked.max_by_key(|a| a.answered_ms);
    let first_refused = attempts
        .iter()
        .find(|a| a.sent_ms > cut_ms && a.code.is_some() && !a.acknowledged());
    format!(
        "new master seen at +{} ms; last SEND_OK: sent at +{:?} ms, answered at +{:?} ms; \
         first refusal after the cut: sent at +{:?} ms, {:?}; {} sends, {} acknowledged",
        seen_ms - cut_ms,
        last_acked.map(|a| a.sent_ms - cut_ms),
        last_acked.map(|a| a.answered_ms - cut_ms),
        first_refused.map(|a| a.sent_ms - cut_ms),
        first_refused.map(|a| (a.code, a.remark.as_deref())),
        attempts.len(),
        attempts.iter().filter(|a| a.acknowledged()).count(),
    )
}

/// The name server with its controller, and the two brokers, each behind its own relay.
struct BrokerSet {
    controller: SocketAddr,
    relays: [Relay; 2],
    brokers: [QuiverProcess; 2],
    _namesrv: QuiverProcess,
}

impl BrokerSet {
    fn start(dir: &Path) -> BrokerSet {
        let controller_port = free_port();
        let controller: SocketAddr = format!("127.0.0.1:{controller_port}").parse().unwrap();
        // The controller pushes a role change to a broker's own address, which no relay is in
        // front of; without the pushes a broker hears of an election only by asking, through
        // its relay.
        let namesrv =
            namesrv_with_controller_keys(dir, controller_port, "notifyBrokerRoleChanged=false\n");
        // Whichever broker is elected, the test can cut it off alone.
        let relays = [Relay::start(controller), Relay::start(controller)];
        let broker = |name, relay: &Relay| {
            broker_reaching(dir, name, &relay.addr().to_string(), namesrv.namesrv())
        };
        let brokers = [broker("b1", &relays[0]), broker("b2", &relays[1])];
        BrokerSet {
            controller,
            relays,
            brokers,
            _namesrv: namesrv,
        }
    }

    /// The index of the broker at `address`.
    fn index_of(&self, address: &str) -> usize {
        let index = self
            .brokers
            .iter()
            .position(|b| b.broker().to_string() == address);
        index.expect("the controller names one of the two brokers")
    }
}

fn acknowledged(attempts: &Mutex<Vec<Attempt>>) -> usize {
    let attempts = attempts.lock().unwrap();
    attempts.iter().filter(|a| a.acknowledged()).count()
}

#[test]
fn a_master_cut_off_from_the_controller_not_its_clients_stops_acknowledging_within_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let set = BrokerSet::start(dir.path());
    let info = wait_for_master(set.controller, 2, None);
    let old = set.index_of(&info.master_address);
    let (old_master, new_master) = (set.brokers[old].broker(), set.brokers[1 - old].broker());
    create_topic(old_master);
    create_topic(new_master);

    let attempts = Arc::new(Mutex::new(Vec::<Attempt>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (attempts, stop) = (attempts.clone(), stop.clone());
        std::thread::spawn(move || send_recording(old_master, &stop, &attempts))
    };
    // A controller that heard no heartbeat for the timeout (on a starved machine) may fail the
    // master over before the cut; then there is nothing left to cut off, and the test says so.
    let failed_over = || {
        let now = replicas(set.controller);
        now.is_some_and(|now| now.master_epoch != info.master_epoch)
    };
    wait_until(WAIT, || {
        (acknowledged(&attempts) >= ACKNOWLEDGED_BEFORE_CUT || failed_over()).then_some(())
    });
    assert!(
        !failed_over(),
        "the controller failed the master over before the cut: no heartbeat of the master \
         reached it within {HEARTBEAT_TIMEOUT_MS} ms"
    );
    assert!(
        acknowledged(&attempts) >= ACKNOWLEDGED_BEFORE_CUT,
        "the master acknowledges sends with a SyncStateSet of two"
    );

    set.relays[old].cut();
    let cut_ms = now_ms();
    wait_until(WAIT, || {
        let now = replicas(set.controller)?;
        let elected = now.master_address == new_master.to_string();
        (elected && now.master_epoch > info.master_epoch).then_some(())
    })
    .expect("the controller elects the other broker at a higher epoch");
    let seen_ms = now_ms();
    wait_until(WAIT, || {
        let last_sent_ms = attempts.lock().unwrap().last()?.sent_ms;
        (last_sent_ms >= seen_ms + SENDS_AFTER_ELECTION_MS).then_some(())
    })
    .expect("sends to the old master go on after the election");
    stop.store(true, Ordering::Release);
    sender.join().unwrap();

    let attempts = std::mem::take(&mut *attempts.lock().unwrap());
    let timeline = timeline(&attempts, cut_ms, seen_ms);
    eprintln!("{timeline}");
    assert_stopped_within_the_lease(&attempts, cut_ms, seen_ms, &timeline);
    assert_new_master_holds_and_takes_sends(new_master, &attempts);
}

/// The fencing property: the old master acknowledged no send it read after its lease ended,
/// none made after the new master was seen, and answered the ones it took under its lease within
/// `slaveTimeout` of the lease's end; and it still answered its client all along.
///
/// An acknowledgement may come after the election: a send read under the lease waits for the
/// slave, which follows the old master until it hears it was elected. That is safe, as the new
/// master had the send before it was elected (`assert_new_master_holds_and_takes_sends`).
fn assert_stopped_within_the_lease(
    attempts: &[Attempt],
    cut_ms: i64,
    seen_ms: i64,
    timeline: &str,
) {
    let lease_end_ms = cut_ms + HEARTBEAT_TIMEOUT_MS;
    for attempt in attempts.iter().filter(|a| a.acknowledged()) {
        assert!(
            attempt.sent_ms <= lease_end_ms,
            "{} was sent {} ms after the cut and acknowledged, past the lease of {} ms ({timeline})",
            attempt.body,
            attempt.sent_ms - cut_ms,
            HEARTBEAT_TIMEOUT_MS,
        );
        assert!(
            attempt.sent_ms < seen_ms,
            "{} was sent after the new master was seen and acknowledged ({timeline})",
            attempt.body,
        );
        assert!(
            attempt.answered_ms <= lease_end_ms + SLAVE_TIMEOUT_MS + ANSWER_SLACK_MS,
            "{} was acknowledged {} ms after the cut ({timeline})",
            attempt.body,
            attempt.answered_ms - cut_ms,
        );
    }
    assert!(
        attempts
            .iter()
            .any(|a| a.sent_ms > seen_ms + SENDS_AFTER_ELECTION_MS / 2 && a.code.is_some()),
        "the old master answers its client after the election ({timeline})"
    );
}

/// Every send the old master acknowledged is on the new master, which takes sends.
fn assert_new_master_holds_and_takes_sends(new_master: SocketAddr, attempts: &[Attempt]) {
    let mut client = connect(new_master).expect("connect to the new master");
    wait_for_send_ok(&mut client, b"after-0");
    let held = bodies_on(new_master);
    assert!(held.iter().any(|body| body == "after-0"));
    for attempt in attempts.iter().filter(|a| a.acknowledged()) {
        assert!(
            held.binary_search(&attempt.body).is_ok(),
            "acknowledged {} is missing on the new master",
            attempt.body
        );
    }
}
