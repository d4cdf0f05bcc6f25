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

use common::binary;
use common::controller::*;
use quiver_testkit::crash::max_offset;
use quiver_testkit::{wait_until, QuiverProcess, SendOptions, WireClient};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding};

#[test]
fn the_controller_fails_a_quiver_broker_set_over_and_the_old_master_rejoins_as_a_slave() {
    let dir = tempfile::tempdir().unwrap();
    let controller_port = free_port();
    let controller: SocketAddr = format!("127.0.0.1:{controller_port}").parse().unwrap();
    let namesrv_process = namesrv_with_controller(dir.path(), controller_port);
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
    let options = SendOptions {
        queue_id: Some(0),
        ..SendOptions::default()
    };
    wait_until(WAIT, || {
        let answer = client.send(TOPIC, b"after-0", &options).ok()?;
        (answer.code == response_code::SUCCESS).then_some(())
    })
    .expect("the new master takes sends");
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
