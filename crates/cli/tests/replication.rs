//! Master and slave as separate processes on loopback: the slave follows the master over the
//! HA port in RocketMQ's protocol, serves what it has, and a SYNC_MASTER acknowledges only what
//! the slave confirmed.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::{binary, pull_all, up_with_config};
use quiver_testkit::{wait_until, QuiverProcess, SendOptions, WireClient};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding, ExtFields};

/// Small segments, so that a few hundred messages cross segment ends.
const SEGMENT_BYTES: u64 = 256 * 1024;
const CATCH_UP: Duration = Duration::from_secs(30);

fn master(dir: &Path, role: &str) -> QuiverProcess {
    up_with_config(
        dir,
        &format!(
            "brokerRole={role}\nhaListenPort=0\nmappedFileSizeCommitLog={SEGMENT_BYTES}\nslaveTimeout=2000\n"
        ),
    )
}

/// `quiver broker` as broker-a's slave, registered with `namesrv`, data in `dir/slave`.
fn slave(dir: &Path, namesrv: impl std::fmt::Display) -> QuiverProcess {
    slave_with(dir, namesrv, "")
}

/// The same with more `broker.conf` lines.
/// `namesrv` may list several, `;`-separated.
fn slave_with(dir: &Path, namesrv: impl std::fmt::Display, extra: &str) -> QuiverProcess {
    let conf = dir.join("slave.conf");
    let text = format!(
        "brokerName=broker-a\nbrokerId=1\nbrokerRole=SLAVE\nlistenPort=0\n\
         storePathRootDir={}\nmappedFileSizeCommitLog={SEGMENT_BYTES}\nregisterNameServerPeriod=1000\n{extra}",
        dir.join("slave").display()
    );
    std::fs::write(&conf, text).expect("write slave.conf");
    let namesrv = namesrv.to_string();
    QuiverProcess::start(
        &binary(),
        &["broker", "-c", conf.to_str().unwrap(), "-n", &namesrv],
        &dir.join("slave-log"),
    )
    .expect("the slave starts")
}

/// The slave's folder (`dir/slave`, the slave stopped) started again as broker-a's master.
fn promote(dir: &Path, namesrv: impl std::fmt::Display) -> QuiverProcess {
    let conf = dir.join("promoted.conf");
    std::fs::write(
        &conf,
        format!(
            "brokerName=broker-a\nbrokerId=0\nbrokerRole=ASYNC_MASTER\nlistenPort=0\nhaListenPort=0\n\
             storePathRootDir={}\nmappedFileSizeCommitLog={SEGMENT_BYTES}\n",
            dir.join("slave").display()
        ),
    )
    .expect("write promoted.conf");
    let namesrv = namesrv.to_string();
    QuiverProcess::start(
        &binary(),
        &["broker", "-c", conf.to_str().unwrap(), "-n", &namesrv],
        &dir.join("promoted-log"),
    )
    .expect("the slave's data starts as a master")
}

fn max_offset(client: &mut WireClient, topic: &str, queue_id: i32) -> Option<i64> {
    queue_offset(client, request_code::GET_MAX_OFFSET, topic, queue_id)
}

/// GET_MAX_OFFSET or GET_MIN_OFFSET.
fn queue_offset(client: &mut WireClient, code: i32, topic: &str, queue_id: i32) -> Option<i64> {
    let request = Command::request(code, Encoding::Json).with_ext(
        ExtFields::new()
            .with("topic", topic)
            .with("queueId", queue_id),
    );
    let response = client.call(request).ok()?;
    (response.code == response_code::SUCCESS)
        .then(|| response.ext_get("offset")?.parse().ok())
        .flatten()
}

fn send(client: &mut WireClient, topic: &str, queue_id: i32, body: &[u8]) -> Command {
    let options = SendOptions {
        queue_id: Some(queue_id),
        ..SendOptions::default()
    };
    client.send(topic, body, &options).expect("send answered")
}

#[test]
fn a_slave_follows_its_master_across_segments_and_serves_the_same_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = master(dir.path(), "ASYNC_MASTER");
    let mut producer = WireClient::connect(master.broker(), Encoding::Json).expect("connect");
    producer
        .create_topic("Replicated", 4)
        .expect("create topic");
    let slave = slave(dir.path(), master.namesrv());
    let body = vec![b'r'; 1000];
    for i in 0..600 {
        let sent = send(&mut producer, "Replicated", i % 4, &body);
        assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
    }
    let mut reader = WireClient::connect(slave.broker(), Encoding::Json).expect("connect slave");
    // The slave copies its master's topics every 2 s.
    wait_until(CATCH_UP, || {
        let pulled = reader.pull("Replicated", "g", 0, 0, 1, 0).ok()?;
        (pulled.code != response_code::TOPIC_NOT_EXIST).then_some(())
    })
    .expect("the slave learns the master's topic");
    for queue_id in 0..4 {
        wait_until(CATCH_UP, || {
            (max_offset(&mut reader, "Replicated", queue_id) == Some(150)).then_some(())
        })
        .unwrap_or_else(|| panic!("queue {queue_id} did not reach the slave"));
        let on_master = pull_all(&mut producer, "Replicated", queue_id, 0);
        let on_slave = pull_all(&mut reader, "Replicated", queue_id, 0);
        assert_eq!(on_slave.len(), 150);
        assert_eq!(on_slave, on_master, "the same records at the same offsets");
    }
    // A slave takes no sends.
    let refused = send(&mut reader, "Replicated", 0, b"to the slave");
    assert_eq!(refused.code, response_code::SERVICE_NOT_AVAILABLE);
}

#[test]
fn a_sync_master_acknowledges_only_what_its_slave_confirmed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = master(dir.path(), "SYNC_MASTER");
    let mut producer = WireClient::connect(master.broker(), Encoding::Json).expect("connect");
    producer.create_topic("Confirmed", 1).expect("create topic");
    let alone = send(&mut producer, "Confirmed", 0, b"no slave yet");
    assert_eq!(alone.code, response_code::SLAVE_NOT_AVAILABLE);

    let mut slave = slave(dir.path(), master.namesrv());
    let mut reader = WireClient::connect(slave.broker(), Encoding::Json).expect("connect slave");
    wait_until(CATCH_UP, || {
        let sent = send(&mut producer, "Confirmed", 0, b"probe");
        (sent.code == response_code::SUCCESS).then_some(())
    })
    .expect("once the slave follows, sends are confirmed");
    for i in 0..50 {
        let sent = send(&mut producer, "Confirmed", 0, format!("m{i}").as_bytes());
        assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
        let offset: i64 = sent.ext_get("queueOffset").unwrap().parse().unwrap();
        // SEND_OK means the slave had it before the answer left the master.
        assert!(max_offset(&mut reader, "Confirmed", 0).unwrap() > offset);
    }

    // Without its slave, nothing more is SEND_OK; the messages are still stored.
    slave.kill9().expect("kill the slave");
    let stored_before = max_offset(&mut producer, "Confirmed", 0).unwrap();
    for _ in 0..3 {
        let sent = send(&mut producer, "Confirmed", 0, b"unconfirmed");
        assert!(
            sent.code == response_code::FLUSH_SLAVE_TIMEOUT
                || sent.code == response_code::SLAVE_NOT_AVAILABLE,
            "answered {} without a slave",
            sent.code
        );
    }
    assert_eq!(
        max_offset(&mut producer, "Confirmed", 0),
        Some(stored_before + 3)
    );

    // The slave restarts from its own end and catches up, the unconfirmed messages included.
    let slave = self::slave(dir.path(), master.namesrv());
    let mut reader = WireClient::connect(slave.broker(), Encoding::Json).expect("connect slave");
    let expected = max_offset(&mut producer, "Confirmed", 0);
    wait_until(CATCH_UP, || {
        (max_offset(&mut reader, "Confirmed", 0) == expected).then_some(())
    })
    .expect("the restarted slave catches up");
    let sent = send(&mut producer, "Confirmed", 0, b"confirmed again");
    assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
}

/// `quiver namesrv` alone, on a free port.
fn namesrv(dir: &Path) -> QuiverProcess {
    QuiverProcess::start(
        &binary(),
        &["namesrv", "--listen", "127.0.0.1:0"],
        &dir.join("namesrv-log"),
    )
    .expect("the name server starts")
}

/// `quiver broker` as broker-a's master, data in `dir/master`.
fn master_broker(dir: &Path, namesrv: SocketAddr, role: &str) -> QuiverProcess {
    named_master(dir, namesrv, role, "broker-a")
}

/// `quiver broker` as the master of `name`, data in `dir/<name>`.
fn named_master(
    dir: &Path,
    namesrv: impl std::fmt::Display,
    role: &str,
    name: &str,
) -> QuiverProcess {
    let conf = dir.join(format!("{name}.conf"));
    let text = format!(
        "brokerName={name}\nbrokerId=0\nbrokerRole={role}\nlistenPort=0\nhaListenPort=0\n\
         storePathRootDir={}\nmappedFileSizeCommitLog={SEGMENT_BYTES}\nslaveTimeout=2000\n",
        dir.join(name).display()
    );
    std::fs::write(&conf, text).expect("write the master's conf");
    let namesrv = namesrv.to_string();
    QuiverProcess::start(
        &binary(),
        &["broker", "-c", conf.to_str().unwrap(), "-n", &namesrv],
        &dir.join(format!("{name}-log")),
    )
    .expect("the master starts")
}

#[test]
fn every_message_a_sync_master_acknowledged_is_on_the_slave_after_the_master_is_killed() {
    use quiver_testkit::crash::{check_survival, kill_when, Producers};
    const TOPIC: &str = "Failover";
    const QUEUES: i32 = 8;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    println!("seed={seed}");
    let dir = tempfile::tempdir().expect("tempdir");
    let namesrv = namesrv(dir.path());
    let mut master = master_broker(dir.path(), namesrv.namesrv(), "SYNC_MASTER");
    let mut admin = WireClient::connect(master.broker(), Encoding::Json).expect("connect");
    admin.create_topic(TOPIC, QUEUES).expect("create topic");
    let slave = slave(dir.path(), namesrv.namesrv());
    let mut reader = WireClient::connect(slave.broker(), Encoding::Json).expect("connect slave");
    let mut probes = 0;
    wait_until(CATCH_UP, || {
        let pulled = reader.pull(TOPIC, "g", 0, 0, 1, 0).ok()?;
        probes += 1;
        let sent = send(&mut admin, TOPIC, 0, format!("probe {probes}").as_bytes());
        (pulled.code != response_code::TOPIC_NOT_EXIST && sent.code == response_code::SUCCESS)
            .then_some(())
    })
    .expect("the slave follows and knows the topic");

    let producers =
        Producers::start(master.broker(), TOPIC, QUEUES, 64, 2048, seed).expect("producers");
    // Each send waits for the slave's confirmation: on a loaded 2-core machine (the whole
    // suite running beside it) 2,000 of them once took longer than 30 s. The wait is for a
    // condition, so its deadline is generous.
    let under_load = Duration::from_secs(120);
    kill_when(&producers, 2_000, under_load, || true, || master.kill9())
        .expect("the master is killed under load");
    let acks = producers
        .finish()
        .expect("every answer before the kill was SEND_OK");
    let survival = check_survival(&mut reader, TOPIC, QUEUES, &acks, |_| true)
        .expect("every acknowledged message is on the slave at its offset with its body");
    assert!(survival.acked >= 2_000, "{survival:?}");

    // A consumer carries on from the slave: it reads there and commits its offsets there.
    let update = Command::request(request_code::UPDATE_CONSUMER_OFFSET, Encoding::Json).with_ext(
        ExtFields::new()
            .with("topic", TOPIC)
            .with("consumerGroup", "after_failover")
            .with("queueId", 0)
            .with("commitOffset", 5),
    );
    assert_eq!(reader.call(update).unwrap().code, response_code::SUCCESS);
    let query = Command::request(request_code::QUERY_CONSUMER_OFFSET, Encoding::Json).with_ext(
        ExtFields::new()
            .with("topic", TOPIC)
            .with("consumerGroup", "after_failover")
            .with("queueId", 0),
    );
    assert_eq!(reader.call(query).unwrap().ext_get("offset"), Some("5"));
}

#[test]
fn producers_keep_sending_through_the_other_master_while_one_is_down() {
    use quiver_client::{Client, ClientConfig, Message, Producer, ProducerConfig, SendStatus};
    let dir = tempfile::tempdir().expect("tempdir");
    let namesrv = namesrv(dir.path());
    let mut a = named_master(dir.path(), namesrv.namesrv(), "ASYNC_MASTER", "broker-a");
    let b = named_master(dir.path(), namesrv.namesrv(), "ASYNC_MASTER", "broker-b");
    for broker in [a.broker(), b.broker()] {
        let mut admin = WireClient::connect(broker, Encoding::Json).expect("connect");
        admin.create_topic("Spread", 4).expect("create topic");
    }
    common::wait_for_route_on(namesrv.namesrv(), "Spread", 2);
    let b_addr = b.broker().to_string();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let client =
            Client::new(ClientConfig::new(&namesrv.namesrv().to_string())).expect("client");
        let producer = Producer::new(client, ProducerConfig::default());
        let mut brokers = std::collections::BTreeSet::new();
        for i in 0..40 {
            let sent = producer
                .send(&Message::new("Spread", format!("before {i}")))
                .await
                .expect("sent while both masters run");
            brokers.insert(sent.queue.broker_name.clone());
        }
        assert_eq!(
            brokers.len(),
            2,
            "sends spread over both masters: {brokers:?}"
        );
        a.kill9().expect("kill broker-a's master");
        for i in 0..100 {
            let sent = producer
                .send(&Message::new("Spread", format!("after {i}")))
                .await
                .expect("a send goes through the master still up");
            assert_eq!(sent.status, SendStatus::Ok);
            assert_eq!(sent.queue.broker_name, "broker-b");
        }
        producer.shutdown().await;
    });
    let mut reader = WireClient::connect(b_addr.parse().unwrap(), Encoding::Json).expect("connect");
    let stored: i64 = (0..4)
        .map(|queue_id| max_offset(&mut reader, "Spread", queue_id).unwrap())
        .sum();
    assert!(stored >= 100, "broker-b stored {stored}");
}

#[test]
fn quiver_up_runs_masters_with_slaves_that_follow_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("cluster");
    let cluster = QuiverProcess::start(
        &binary(),
        &[
            "up",
            "--masters",
            "2",
            "--slaves",
            "1",
            "--data",
            data.to_str().unwrap(),
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
        ],
        dir.path(),
    )
    .expect("the cluster starts");
    let route = wait_until(CATCH_UP, || {
        let route = common::wait_for_route(cluster.namesrv(), "TBW102");
        let complete = route.broker_datas.len() == 2
            && route.broker_datas.iter().all(|b| b.broker_addrs.len() == 2);
        complete.then_some(route)
    })
    .expect("two masters with a slave each register");
    for broker in &route.broker_datas {
        let master: SocketAddr = broker.broker_addrs[&0].parse().unwrap();
        let slave: SocketAddr = broker.broker_addrs[&1].parse().unwrap();
        let mut producer = WireClient::connect(master, Encoding::Json).expect("connect master");
        producer.create_topic("Pairs", 1).expect("create topic");
        for i in 0..20 {
            let sent = send(
                &mut producer,
                "Pairs",
                0,
                format!("{} {i}", broker.broker_name).as_bytes(),
            );
            assert_eq!(sent.code, response_code::SUCCESS);
        }
        let mut reader = WireClient::connect(slave, Encoding::Json).expect("connect slave");
        wait_until(CATCH_UP, || {
            (max_offset(&mut reader, "Pairs", 0) == Some(20)).then_some(())
        })
        .unwrap_or_else(|| panic!("{}'s slave did not follow", broker.broker_name));
        assert!(data.join(&broker.broker_name).join("slave-1").is_dir());
    }
}

/// A TCP relay on loopback whose link can be cut and restored, to part a slave from its master
/// without stopping either.
struct Link {
    addr: SocketAddr,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Link {
    fn to(target: SocketAddr) -> Link {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind relay");
        let addr = listener.local_addr().unwrap();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (cut_flag, open_list) = (cut.clone(), open.clone());
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                let Ok(inbound) = inbound else { return };
                if cut_flag.load(Ordering::Acquire) {
                    continue; // dropped: the slave sees its connection closed
                }
                let Ok(outbound) = std::net::TcpStream::connect(target) else {
                    continue;
                };
                let mut sockets = open_list.lock().unwrap();
                for (mut from, mut to) in [
                    (inbound.try_clone().unwrap(), outbound.try_clone().unwrap()),
                    (outbound.try_clone().unwrap(), inbound.try_clone().unwrap()),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
                sockets.extend([inbound, outbound]);
            }
        });
        Link { addr, cut, open }
    }

    /// Closes every relayed connection and refuses new ones until `restore`.
    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::Release);
        for socket in self.open.lock().unwrap().drain(..) {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
    }

    fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::Release);
    }
}

#[test]
fn with_the_link_to_its_slave_cut_a_sync_master_acknowledges_nothing_and_the_slave_catches_up_after(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let namesrv = namesrv(dir.path());
    let master = master_broker(dir.path(), namesrv.namesrv(), "SYNC_MASTER");
    let mut producer = WireClient::connect(master.broker(), Encoding::Json).expect("connect");
    producer.create_topic("Parted", 1).expect("create topic");
    // The master's HA address, as the name server hands it to slaves: through the relay.
    let ha: SocketAddr = {
        let log = std::fs::read_to_string(&master.log_path).unwrap_or_default();
        let at = log.find("ha=").expect("the master logs its HA address") + 3;
        log[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .expect("HA address")
    };
    let link = Link::to(ha);
    let slave = slave_with(
        dir.path(),
        namesrv.namesrv(),
        &format!("haMasterAddress={}\n", link.addr),
    );
    let mut reader = WireClient::connect(slave.broker(), Encoding::Json).expect("connect slave");
    let mut probes = 0;
    wait_until(CATCH_UP, || {
        probes += 1;
        let sent = send(
            &mut producer,
            "Parted",
            0,
            format!("probe {probes}").as_bytes(),
        );
        (sent.code == response_code::SUCCESS).then_some(())
    })
    .expect("the slave follows through the relay");

    link.cut();
    for i in 0..5 {
        let sent = send(&mut producer, "Parted", 0, format!("parted {i}").as_bytes());
        assert_ne!(
            sent.code,
            response_code::SUCCESS,
            "SEND_OK for what the slave cannot have"
        );
        assert!(
            sent.code == response_code::FLUSH_SLAVE_TIMEOUT
                || sent.code == response_code::SLAVE_NOT_AVAILABLE,
            "{}",
            sent.code
        );
    }
    let on_master = max_offset(&mut producer, "Parted", 0);
    assert!(max_offset(&mut reader, "Parted", 0) < on_master);

    link.restore();
    wait_until(CATCH_UP, || {
        (max_offset(&mut reader, "Parted", 0) == on_master).then_some(())
    })
    .expect("the slave catches up once the link is back");
    let sent = send(&mut producer, "Parted", 0, b"together again");
    assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
}

#[test]
fn a_slave_refuses_a_master_whose_log_does_not_contain_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let namesrv = namesrv(dir.path());
    let mut first = master_broker(dir.path(), namesrv.namesrv(), "ASYNC_MASTER");
    let mut producer = WireClient::connect(first.broker(), Encoding::Json).expect("connect");
    producer.create_topic("Mine", 1).expect("create topic");
    let mut slave = slave(dir.path(), namesrv.namesrv());
    for i in 0..10 {
        let sent = send(&mut producer, "Mine", 0, format!("first {i:03}").as_bytes());
        assert_eq!(sent.code, response_code::SUCCESS);
    }
    let mut reader = WireClient::connect(slave.broker(), Encoding::Json).expect("connect slave");
    wait_until(CATCH_UP, || {
        let pulled = reader.pull("Mine", "g", 0, 0, 32, 0).ok()?;
        (pulled.code == response_code::SUCCESS && max_offset(&mut reader, "Mine", 0) == Some(10))
            .then_some(())
    })
    .expect("the slave follows the first master and knows its topic");
    slave.terminate().expect("stop the slave");
    first.kill9().expect("the first master is gone");

    // Another broker-a master, with a longer log of its own.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let second = master_broker(&other, namesrv.namesrv(), "ASYNC_MASTER");
    let mut producer = WireClient::connect(second.broker(), Encoding::Json).expect("connect");
    producer.create_topic("Mine", 1).expect("create topic");
    for i in 0..30 {
        let sent = send(&mut producer, "Mine", 0, format!("other {i:03}").as_bytes());
        assert_eq!(sent.code, response_code::SUCCESS);
    }
    let slave = self::slave(dir.path(), namesrv.namesrv());
    wait_until(CATCH_UP, || {
        slave
            .log()
            .contains("does not contain this slave's")
            .then_some(())
    })
    .expect("the slave says why it refuses the master");
    let mut reader = WireClient::connect(slave.broker(), Encoding::Json).expect("connect slave");
    let kept = reader.pull("Mine", "g", 0, 0, 32, 0).expect("pull");
    assert_eq!(kept.code, response_code::SUCCESS, "{:?}", kept.remark);
    let bodies: Vec<String> = quiver_wire::message::StoredMessage::decode_all(&kept.body)
        .expect("records")
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert_eq!(bodies.len(), 10, "{bodies:?}");
    assert!(bodies.iter().all(|b| b.starts_with("first")), "{bodies:?}");
}

#[test]
fn with_two_name_servers_a_cluster_carries_on_when_one_is_killed() {
    use quiver_client::{Client, ClientConfig, Message, Producer, ProducerConfig};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = namesrv(&dir.path().join("ns1"));
    let second = namesrv(&dir.path().join("ns2"));
    let both = format!("{};{}", first.namesrv(), second.namesrv());
    // Brokers register with every name server they are given.
    let master = named_master(dir.path(), &both, "SYNC_MASTER", "broker-a");
    let _slave = slave_with(dir.path(), &both, "");
    let mut admin = WireClient::connect(master.broker(), Encoding::Json).expect("connect");
    admin.create_topic("TwoNames", 4).expect("create topic");
    for namesrv in [first.namesrv(), second.namesrv()] {
        wait_until(CATCH_UP, || {
            let route = common::wait_for_route(namesrv, "TwoNames");
            (route.broker_datas.first()?.broker_addrs.len() == 2).then_some(())
        })
        .expect("each name server routes to the master and its slave");
    }
    let mut probes = 0;
    wait_until(CATCH_UP, || {
        probes += 1;
        let sent = send(
            &mut admin,
            "TwoNames",
            0,
            format!("probe {probes}").as_bytes(),
        );
        (sent.code == response_code::SUCCESS).then_some(())
    })
    .expect("the slave follows");
    first.kill9().expect("kill the first name server");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let client = Client::new(ClientConfig::new(&both)).expect("client");
        let producer = Producer::new(client, ProducerConfig::default());
        for i in 0..20 {
            producer
                .send(&Message::new("TwoNames", format!("m{i}")))
                .await
                .expect("a route from the name server still up, and SEND_OK from the pair");
        }
        producer.shutdown().await;
    });
}

/// No election yet (RocketMQ's controller mode is a later step), but the step an operator takes
/// by hand works: a slave's data restarted as a master serves what it copied at the same
/// offsets, takes sends that go on from there, and a new slave follows it.
#[test]
fn a_slave_restarted_as_master_serves_its_copy_takes_sends_and_is_followed() {
    const TOPIC: &str = "Promoted";
    let dir = tempfile::tempdir().expect("tempdir");
    let namesrv = namesrv(dir.path());
    let mut master = master_broker(dir.path(), namesrv.namesrv(), "SYNC_MASTER");
    let mut admin = WireClient::connect(master.broker(), Encoding::Json).expect("connect");
    admin.create_topic(TOPIC, 2).expect("create topic");
    let mut first_slave = slave(dir.path(), namesrv.namesrv());
    wait_until(CATCH_UP, || {
        let answer = send(&mut admin, TOPIC, 0, b"probe");
        (answer.code == response_code::SUCCESS).then_some(())
    })
    .expect("the slave follows the master");
    let body = vec![b'p'; 1500];
    for i in 0..400 {
        let answer = send(&mut admin, TOPIC, i % 2, &body);
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    }
    let before: Vec<_> = (0..2)
        .map(|queue_id| pull_all(&mut admin, TOPIC, queue_id, 0))
        .collect();
    master.kill9().expect("kill the master");
    first_slave.terminate().expect("stop the slave");

    // The slave's folder, now as broker-a's master.
    let promoted = promote(dir.path(), namesrv.namesrv());
    let mut client = WireClient::connect(promoted.broker(), Encoding::Json).expect("connect");
    for (queue_id, records) in before.iter().enumerate() {
        let queue_id = queue_id as i32;
        assert_eq!(&pull_all(&mut client, TOPIC, queue_id, 0), records);
        let answer = send(&mut client, TOPIC, queue_id, b"after the promotion");
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
        assert_eq!(
            answer.ext_get("queueOffset"),
            Some(records.len().to_string().as_str()),
            "offsets go on from the copy"
        );
    }

    // A new slave, in a folder of its own, follows the promoted master from its start.
    let follower_dir = dir.path().join("follower");
    std::fs::create_dir_all(&follower_dir).expect("follower dir");
    let follower = slave(&follower_dir, namesrv.namesrv());
    let mut reader = WireClient::connect(follower.broker(), Encoding::Json).expect("connect");
    for (queue_id, records) in before.iter().enumerate() {
        let queue_id = queue_id as i32;
        let end = records.len() as i64 + 1;
        // The records arrive over HA, the topic with the next metadata copy.
        wait_until(CATCH_UP, || {
            let pulled = reader.pull(TOPIC, "g", queue_id, 0, 1, 0).ok()?;
            (pulled.code != response_code::TOPIC_NOT_EXIST
                && max_offset(&mut reader, TOPIC, queue_id) == Some(end))
            .then_some(())
        })
        .unwrap_or_else(|| panic!("queue {queue_id} did not reach the new slave"));
        // A new slave starts at its master's last segment, as RocketMQ's does.
        let first = queue_offset(&mut reader, request_code::GET_MIN_OFFSET, TOPIC, queue_id)
            .expect("the new slave's min offset");
        assert!(
            first < end,
            "the new slave holds queue {queue_id}'s last records"
        );
        assert_eq!(
            pull_all(&mut reader, TOPIC, queue_id, first),
            pull_all(&mut client, TOPIC, queue_id, first)
        );
    }
}

/// Timer messages across a failover: the master delivers the first, the slave copies that
/// progress (GET_TIMER_CHECK_POINT) with the delivered copy, and the slave's data restarted as a
/// master delivers the second at its time and not the first again.
#[test]
fn a_slave_promoted_after_its_master_delivered_a_timer_does_not_deliver_it_again() {
    const TOPIC: &str = "Jobs";
    let dir = tempfile::tempdir().expect("tempdir");
    let namesrv = namesrv(dir.path());
    let mut master = master_broker(dir.path(), namesrv.namesrv(), "SYNC_MASTER");
    let mut admin = WireClient::connect(master.broker(), Encoding::Json).expect("connect");
    admin.create_topic(TOPIC, 1).expect("create topic");
    let mut first_slave = slave(dir.path(), namesrv.namesrv());
    wait_until(CATCH_UP, || {
        let answer = send(&mut admin, "Probe", 0, b"probe");
        (answer.code == response_code::SUCCESS).then_some(())
    })
    .expect("the slave follows the master");
    let timer = |delay_ms: u64| SendOptions {
        queue_id: Some(0),
        properties: vec![("TIMER_DELAY_MS".into(), delay_ms.to_string())],
        ..SendOptions::default()
    };
    // Job 1 is due well after the copy below, which takes a few seconds: the master must still
    // hold it when it is killed.
    for (body, delay_ms) in [(&b"job 0"[..], 500), (&b"job 1"[..], 30_000)] {
        let answer = admin.send(TOPIC, body, &timer(delay_ms)).expect("send");
        assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    }
    wait_until(CATCH_UP, || {
        (pull_all(&mut admin, TOPIC, 0, 0).len() == 1).then_some(())
    })
    .expect("the master delivers job 0");
    // The slave records the master's progress once its log holds the delivered copy.
    let checkpoint = dir.path().join("slave/config/timerCheckpoint.json");
    let read_ms = || -> Option<i64> {
        let text = std::fs::read_to_string(&checkpoint).ok()?;
        let value: serde_json::Value = serde_json::from_str(&text).ok()?;
        value.get("masterReadMs")?.as_i64()
    };
    let job_0_due = pull_all(&mut admin, TOPIC, 0, 0)[0]
        .property("TIMER_OUT_MS")
        .and_then(|due| due.parse::<i64>().ok())
        .expect("the delivered message names its time");
    wait_until(Duration::from_secs(20), || {
        (read_ms()? > job_0_due).then_some(())
    })
    .expect("the slave copies the master's timer progress");
    assert_eq!(
        pull_all(&mut admin, TOPIC, 0, 0).len(),
        1,
        "job 1 is not due yet"
    );
    master.kill9().expect("kill the master");
    first_slave.terminate().expect("stop the slave");

    let promoted = promote(dir.path(), namesrv.namesrv());
    let mut client = WireClient::connect(promoted.broker(), Encoding::Json).expect("connect");
    // Job 1 falls due after job 0: once it is there, a second job 0 would be too.
    let delivered = wait_until(Duration::from_secs(60), || {
        let all = pull_all(&mut client, TOPIC, 0, 0);
        all.iter().any(|m| &m.body[..] == b"job 1").then_some(all)
    })
    .expect("the promoted master delivers job 1");
    let bodies: Vec<&[u8]> = delivered.iter().map(|m| &m.body[..]).collect();
    assert_eq!(bodies, [&b"job 0"[..], &b"job 1"[..]]);
}
