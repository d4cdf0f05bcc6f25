//! Controller mode end to end on loopback: `quiver namesrv` with the controller and two
//! `quiver broker` processes of one broker set in controller mode. The controller makes one
//! master and the other joins its SyncStateSet; sends go on while the master is killed with
//! SIGKILL; the other is elected at a higher epoch and takes sends, and holds every message
//! that was acknowledged; the old master, restarted, rejoins as a slave and holds the new
//! master's log.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::binary;
use common::controller::*;
use quiver_testkit::crash::max_offset;
use quiver_testkit::{wait_until, QuiverProcess, SendOptions, WireClient};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding};

#[test]
fn the_controller_fails_a_quiver_broker_set_over_and_the_old_master_rejoins_as_a_slave() {
    let dir = tempfile::tempdir().unwrap();
    let (controller_port, controller, namesrv_process) = controller_namesrv(dir.path());
    let namesrv = namesrv_process.namesrv();
    let mut first = broker(dir.path(), "b1", controller_port, namesrv);
    let mut second = broker(dir.path(), "b2", controller_port, namesrv);

    let info = wait_for_master(controller, 2, None);
    let first_epoch = info.master_epoch;
    let (master, other, master_name) = if info.master_address == first.broker().to_string() {
        (&mut first, &mut second, "b1")
    } else {
        (&mut second, &mut first, "b2")
    };
    let master_addr = master.broker();
    let other_addr = other.broker();
    create_topic(master_addr);
    create_topic(other_addr);

    // Sends go on while the master is killed; every SEND_OK must survive.
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (acked, stop) = (acked.clone(), stop.clone());
        std::thread::spawn(move || send_until(master_addr, "before", stop, acked))
    };
    wait_until(WAIT, || (acked.lock().unwrap().len() >= 100).then_some(()))
        .expect("the master acknowledges sends with a SyncStateSet of two");
    // A consumer's offset committed on the master reaches the slave before the master dies.
    let mut committer = WireClient::connect(master_addr, Encoding::Json).expect("connect");
    let committed = committer.call(offset_request(
        request_code::UPDATE_CONSUMER_OFFSET,
        Some(42),
    ));
    assert_eq!(committed.unwrap().code, response_code::SUCCESS);
    wait_until(WAIT, || (committed_offset(other_addr)? == 42).then_some(()))
        .expect("the slave copies the committed offset");
    master.kill9().expect("kill -9 the master");
    stop.store(true, Ordering::Release);
    sender.join().unwrap();

    let info = wait_for_master(controller, 1, Some(&master_addr.to_string()));
    assert_eq!(info.master_address, other_addr.to_string());
    assert!(info.master_epoch > first_epoch, "a higher epoch: {info:?}");

    // The new master takes sends (once it has registered and fenced nothing).
    let mut client = WireClient::connect(other_addr, Encoding::Json).expect("connect");
    wait_for_send_ok(&mut client, b"after-0");
    acked.lock().unwrap().push("after-0".into());

    assert_eq!(
        committed_offset(other_addr),
        Some(42),
        "the new master keeps the consumer's offset"
    );
    let held = bodies_on(other_addr);
    for body in acked.lock().unwrap().iter() {
        assert!(
            held.contains(body),
            "acknowledged {body} is missing on the new master"
        );
    }

    // The old master, restarted, follows the new one and is taken into its SyncStateSet.
    drop(client);
    let restarted = broker(dir.path(), master_name, controller_port, namesrv);
    let info = wait_for_master(controller, 2, None);
    assert_eq!(info.master_address, other_addr.to_string());
    let new_master_epochs = epoch_cache(other_addr).expect("the new master's epochs");
    let rejoined = wait_until(WAIT, || {
        let cache = epoch_cache(restarted.broker())?;
        (cache.epoch_list == new_master_epochs.epoch_list).then_some(cache)
    });
    assert!(
        rejoined.is_some(),
        "the old master's epochs become the new master's"
    );
    let expected = bodies_on(other_addr);
    let same = wait_until(WAIT, || {
        (bodies_on(restarted.broker()) == expected).then_some(())
    });
    assert!(
        same.is_some(),
        "the rejoined slave holds the new master's log, and no more"
    );
    let _ = other;
}

/// Consumers read only what the SyncStateSet holds, as RocketMQ dispatches only up to the
/// confirm offset: with the slave stalled (SIGSTOP), a message the master wrote is neither
/// acknowledged nor readable there; once the slave runs again and confirms it, it is read.
/// Otherwise a consumer could commit an offset past a message that a failover then cuts, and
/// skip what the new master stores at those offsets.
#[test]
fn a_master_shows_consumers_only_what_every_replica_of_its_sync_state_set_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (controller_port, controller, namesrv_process) = controller_namesrv(dir.path());
    let namesrv = namesrv_process.namesrv();
    let first = broker(dir.path(), "b1", controller_port, namesrv);
    let second = broker(dir.path(), "b2", controller_port, namesrv);
    let info = wait_for_master(controller, 2, None);
    let (master, slave) = if info.master_address == first.broker().to_string() {
        (&first, &second)
    } else {
        (&second, &first)
    };
    create_topic(master.broker());
    create_topic(slave.broker());
    let mut client = WireClient::connect(master.broker(), Encoding::Json).expect("connect");
    let _ = client.set_read_timeout(WAIT);
    let options = SendOptions {
        queue_id: Some(0),
        ..SendOptions::default()
    };
    let answer = client.send(TOPIC, b"confirmed", &options).expect("send");
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    assert_eq!(bodies_on(master.broker()), ["confirmed"]);

    // The controller holds the set of two as soon as it commits it, the master once its answer
    // arrives: a send acknowledged with the slave stalled was taken before then, and the probe
    // is tried again. A master that never waits for the slave fails here after WAIT.
    let mut probes = 0;
    let held_back = wait_until(WAIT, || {
        probes += 1;
        let body = format!("unconfirmed-{probes}");
        slave.pause().expect("SIGSTOP the slave");
        // Answered when the slave's time is up (slaveTimeout), not acknowledged.
        let answer = client.send(TOPIC, body.as_bytes(), &options).expect("send");
        let shown_while_stalled = bodies_on(master.broker());
        slave.resume().expect("SIGCONT the slave");
        (answer.code != response_code::SUCCESS).then_some((body, shown_while_stalled))
    });
    let (body, shown_while_stalled) = held_back.unwrap_or_else(|| {
        panic!(
            "every send was acknowledged with the slave stalled; the master's log:\n{}",
            master.log()
        )
    });
    assert!(
        !shown_while_stalled.contains(&body),
        "a message the slave has not confirmed is not read on the master: {shown_while_stalled:?}"
    );
    let shown = wait_until(WAIT, || {
        let bodies = bodies_on(master.broker());
        bodies.contains(&body).then_some(bodies)
    });
    assert!(shown.is_some(), "read once the slave confirmed it");
}

/// Ten failovers back and forth under `quiver bench soak`: the master of the set is killed
/// with SIGKILL, the other elected, and the killed broker restarted to rejoin as a slave, ten
/// times, while the soak sends from eight senders and consumes with one push consumer. At the
/// end the soak accounts for every acknowledged message: it exits non-zero if any is missing.
#[test]
fn ten_failovers_back_and_forth_under_a_soak_lose_no_acknowledged_message() {
    const FAILOVERS: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let (controller_port, controller, namesrv_process) = controller_namesrv(dir.path());
    let namesrv = namesrv_process.namesrv();
    let names = ["b1", "b2"];
    let mut brokers = names.map(|name| Some(broker(dir.path(), name, controller_port, namesrv)));
    wait_for_master(controller, 2, None);
    for broker in brokers.iter().flatten() {
        create_topic(broker.broker());
    }
    let json = dir.path().join("soak.json");
    let mut soak = std::process::Command::new(binary())
        .args(["bench", "soak", "-n", &namesrv.to_string(), "-t", TOPIC])
        .args([
            "--queues",
            &QUEUES.to_string(),
            "--threads",
            "8",
            "--rate",
            "800",
        ])
        .args(["--report-interval", "2", "--drain-timeout", "60"])
        .args([
            "--poll-name-server-interval-ms",
            "500",
            "--send-timeout-ms",
            "3000",
        ])
        .arg("--json")
        .arg(&json)
        .stdout(std::fs::File::create(dir.path().join("soak.out")).unwrap())
        .stderr(std::fs::File::create(dir.path().join("soak.log")).unwrap())
        .spawn()
        .expect("quiver bench soak starts");
    let soak_pid = soak.id();
    let stored = |addr: SocketAddr| -> i64 {
        let Ok(mut client) = WireClient::connect(addr, Encoding::Json) else {
            return 0;
        };
        (0..QUEUES)
            .map(|q| max_offset(&mut client, TOPIC, q).unwrap_or(0))
            .sum()
    };
    // A set that does not settle says what the controller holds and what each process logged.
    let settled = |brokers: &[Option<QuiverProcess>; 2], members, not: Option<&str>, round| {
        master_within(controller, members, not).unwrap_or_else(|| {
            let processes = brokers.iter().flatten().chain([&namesrv_process]);
            panic!(
                "round {round}: no master with {members} in sync within {WAIT:?}: {:?}\n{}",
                replicas(controller),
                log_tails(processes, 4000)
            )
        })
    };
    for round in 0..FAILOVERS {
        let info = settled(&brokers, 2, None, round);
        let master = brokers
            .iter()
            .position(|b| {
                b.as_ref()
                    .is_some_and(|b| b.broker().to_string() == info.master_address)
            })
            .expect("the master is one of the set");
        let master_addr = brokers[master].as_ref().unwrap().broker();
        // The soak's messages reach this master before it dies.
        let before = stored(master_addr);
        wait_until(WAIT, || (stored(master_addr) >= before + 100).then_some(()))
            .unwrap_or_else(|| panic!("round {round}: the soak's sends reach {master_addr}"));
        brokers[master]
            .take()
            .unwrap()
            .kill9()
            .expect("kill -9 the master");
        settled(&brokers, 1, Some(&master_addr.to_string()), round);
        brokers[master] = Some(broker(dir.path(), names[master], controller_port, namesrv));
    }
    settled(&brokers, 2, None, FAILOVERS);
    // SIGINT: the soak stops sending, drains and accounts.
    quiver_testkit::interrupt_pid(soak_pid).expect("SIGINT the soak");
    let status = wait_until(Duration::from_secs(90), || soak.try_wait().ok().flatten())
        .expect("the soak ends within its drain time");
    let stdout = std::fs::read_to_string(dir.path().join("soak.out")).unwrap_or_default();
    assert!(
        status.success(),
        "the soak accounts for every message: {status}\n{stdout}\n{}",
        std::fs::read_to_string(dir.path().join("soak.log")).unwrap_or_default()
    );
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the soak's JSON")).unwrap();
    assert_eq!(record["missing"], 0, "{stdout}");
    let acknowledged = record["totals"]["acknowledged"].as_u64().unwrap();
    let consumed = record["totals"]["consumed"].as_u64().unwrap();
    assert!(
        acknowledged >= 100 * FAILOVERS as u64 && consumed >= acknowledged,
        "{stdout}"
    );
}

/// The controller node that leads, as `node` names it.
fn leader_named_by(node: SocketAddr) -> Option<SocketAddr> {
    let mut client = WireClient::connect(node, Encoding::Json).ok()?;
    let answer = client
        .call(Command::request(
            request_code::CONTROLLER_GET_METADATA_INFO,
            Encoding::Json,
        ))
        .ok()?;
    answer
        .ext
        .as_ref()?
        .get("controllerLeaderAddress")?
        .parse()
        .ok()
}

/// `quiver up --controller` runs three controller nodes and a broker set whose master they
/// elect: sends through the route are stored on the master and reach the slave over AutoSwitch
/// HA, with the SyncStateSet holding both.
#[test]
fn quiver_up_with_a_controller_runs_a_set_whose_master_it_elects_and_whose_slave_follows() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let up = QuiverProcess::start(
        &binary(),
        &[
            "up",
            "--controller",
            "--masters",
            "1",
            "--slaves",
            "1",
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
            "--data",
            data.to_str().unwrap(),
        ],
        dir.path(),
    )
    .expect("quiver up --controller starts");
    let leader = wait_until(WAIT, || leader_named_by(up.controller()))
        .expect("the controller nodes elect a leader");
    let info = wait_for_master(leader, 2, None);
    let master: SocketAddr = info.master_address.parse().unwrap();
    let slave: SocketAddr = info
        .in_sync_replicas
        .iter()
        .map(|r| r.broker_address.parse::<SocketAddr>().unwrap())
        .find(|a| *a != master)
        .expect("a slave in the SyncStateSet");
    create_topic(master);
    let mut client = WireClient::connect(master, Encoding::Json).unwrap();
    let mut sent = Vec::new();
    for n in 0..200 {
        let body = format!("up-{n}");
        let options = SendOptions {
            queue_id: Some(n % QUEUES),
            ..SendOptions::default()
        };
        let answer = client.send(TOPIC, body.as_bytes(), &options).unwrap();
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
        sent.push(body);
    }
    sent.sort();
    let on_slave = wait_until(WAIT, || {
        let mut client = WireClient::connect(slave, Encoding::Json).ok()?;
        let total: i64 = (0..QUEUES)
            .map(|q| max_offset(&mut client, TOPIC, q).unwrap_or(0))
            .sum();
        (total == 200).then_some(total)
    });
    assert_eq!(on_slave, Some(200), "the slave holds every message");
    assert_eq!(bodies_on(master), sent);
}
