//! Controller mode on loopback: a `quiver namesrv` with its controller, controller-mode
//! brokers of one broker set (broker-a) with short periods, senders, and what the controller
//! and the brokers say of the set.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quiver_testkit::{wait_until, QuiverProcess, SendOptions, WireClient};
use quiver_wire::body::{self, BrokerReplicasInfo, EpochEntryCache, ReplicasInfo};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding, ExtFields};

use super::{binary, pull_all};

pub const TOPIC: &str = "FailoverTopic";
pub const QUEUES: i32 = 2;
/// Every wait in this test: elections, catch-up and registrations take a few seconds at most
/// with the short periods configured below.
pub const WAIT: Duration = Duration::from_secs(60);
/// The brokers' `controllerHeartBeatTimeoutMills`: how long the controller waits for a
/// heartbeat before it takes a broker for dead, and how long after its last answered heartbeat
/// a master's lease lasts.
pub const HEARTBEAT_TIMEOUT_MS: i64 = 3_000;
/// The brokers' `slaveTimeout`: how long a master's send waits for its SyncStateSet.
pub const SLAVE_TIMEOUT_MS: i64 = 3_000;

pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("bound").port()
}

/// A name server with its controller on a free port: the controller's port, its address and
/// the process.
pub fn controller_namesrv(dir: &Path) -> (u16, SocketAddr, QuiverProcess) {
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    (port, addr, namesrv_with_controller(dir, port))
}

/// Waits until `broker` answers a send of `body` to queue 0 with SEND_OK (a new master takes
/// sends once it has registered and fenced nothing).
pub fn wait_for_send_ok(client: &mut WireClient, body: &[u8]) {
    let options = SendOptions {
        queue_id: Some(0),
        ..SendOptions::default()
    };
    wait_until(WAIT, || {
        let answer = client.send(TOPIC, body, &options).ok()?;
        (answer.code == response_code::SUCCESS).then_some(())
    })
    .expect("the broker takes sends");
}

pub fn namesrv_with_controller(dir: &Path, controller_port: u16) -> QuiverProcess {
    namesrv_with_controller_keys(dir, controller_port, "")
}

/// `namesrv_with_controller` with more keys: `extra` is whole `key=value` lines.
pub fn namesrv_with_controller_keys(
    dir: &Path,
    controller_port: u16,
    extra: &str,
) -> QuiverProcess {
    let conf = dir.join("namesrv.conf");
    let text = format!(
        "listenPort=0\nenableControllerInNamesrv=true\ncontrollerDLegerGroup=group1\n\
         controllerDLegerPeers=n0-127.0.0.1:{controller_port}\ncontrollerDLegerSelfId=n0\n\
         controllerStorePath={}\nscanNotActiveBrokerInterval=1000\n{extra}",
        dir.join("controller").display()
    );
    std::fs::write(&conf, text).expect("write namesrv.conf");
    QuiverProcess::start(
        &binary(),
        &["namesrv", "-c", conf.to_str().unwrap()],
        &dir.join("namesrv-log"),
    )
    .expect("the name server with its controller starts")
}

pub fn broker(dir: &Path, name: &str, controller_port: u16, namesrv: SocketAddr) -> QuiverProcess {
    broker_reaching(dir, name, &format!("127.0.0.1:{controller_port}"), namesrv)
}

/// A controller-mode broker of broker-a whose `controllerAddr` is `controller` (a relay's
/// address, say), its store in `dir/name`.
pub fn broker_reaching(
    dir: &Path,
    name: &str,
    controller: &str,
    namesrv: SocketAddr,
) -> QuiverProcess {
    let conf = dir.join(format!("{name}.conf"));
    std::fs::write(&conf, broker_config(&dir.join(name), controller)).expect("write broker conf");
    let namesrv = namesrv.to_string();
    QuiverProcess::start(
        &binary(),
        &["broker", "-c", conf.to_str().unwrap(), "-n", &namesrv],
        &dir.join(format!("{name}-log")),
    )
    .expect("a controller-mode broker starts")
}

/// broker-a in controller mode (the controller gives it its id and role), acknowledging a send
/// once every member of the SyncStateSet has it, with short periods.
fn broker_config(store: &Path, controller: &str) -> String {
    format!(
        "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=-1\nbrokerRole=SLAVE\n\
         enableControllerMode=true\ncontrollerAddr={controller}\n\
         allAckInSyncStateSet=true\nlistenPort=0\nhaListenPort=0\nstorePathRootDir={}\n\
         mappedFileSizeCommitLog=262144\nregisterNameServerPeriod=1000\n\
         syncBrokerMetadataPeriod=1000\ncheckSyncStateSetPeriod=500\nbrokerHeartbeatInterval=500\n\
         controllerHeartBeatTimeoutMills={HEARTBEAT_TIMEOUT_MS}\nslaveTimeout={SLAVE_TIMEOUT_MS}\n",
        store.display()
    )
}

/// The controller's view of broker-a (CONTROLLER_GET_SYNC_STATE_DATA).
pub fn replicas(controller: SocketAddr) -> Option<ReplicasInfo> {
    let mut client = WireClient::connect(controller, Encoding::Json).ok()?;
    let request = Command::request(request_code::CONTROLLER_GET_SYNC_STATE_DATA, Encoding::Json)
        .with_body(br#"["broker-a"]"#.to_vec());
    let answer = client.call(request).ok()?;
    if answer.code != response_code::SUCCESS {
        return None;
    }
    let info: BrokerReplicasInfo = body::from_json(&answer.body).ok()?;
    info.replicas_info_table.get("broker-a").cloned()
}

/// Waits for a master (other than `not`) with a SyncStateSet of `members` replicas.
pub fn wait_for_master(controller: SocketAddr, members: usize, not: Option<&str>) -> ReplicasInfo {
    master_within(controller, members, not)
        .unwrap_or_else(|| panic!("no master with a SyncStateSet of {members} within {WAIT:?}"))
}

/// `wait_for_master`, None when `WAIT` is up.
pub fn master_within(
    controller: SocketAddr,
    members: usize,
    not: Option<&str>,
) -> Option<ReplicasInfo> {
    wait_until(WAIT, || {
        let info = replicas(controller)?;
        let elected = !info.master_address.is_empty() && Some(info.master_address.as_str()) != not;
        (elected && info.in_sync_replicas.len() == members).then_some(info)
    })
}

/// The last `chars` characters of each process's log, for a failure's message.
pub fn log_tails<'a>(
    processes: impl IntoIterator<Item = &'a QuiverProcess>,
    chars: usize,
) -> String {
    processes
        .into_iter()
        .map(|process| {
            let log = process.log();
            let start = log.len().saturating_sub(chars);
            let start = (start..log.len())
                .find(|i| log.is_char_boundary(*i))
                .unwrap_or(0);
            let who = process.started.broker.or(process.started.namesrv);
            format!("--- {who:?}\n{}", &log[start..])
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn epoch_cache(broker: SocketAddr) -> Option<EpochEntryCache> {
    let mut client = WireClient::connect(broker, Encoding::Json).ok()?;
    let answer = client
        .call(Command::request(
            request_code::GET_BROKER_EPOCH_CACHE,
            Encoding::Json,
        ))
        .ok()?;
    (answer.code == response_code::SUCCESS)
        .then(|| body::from_json(&answer.body).ok())
        .flatten()
}

pub fn create_topic(broker: SocketAddr) {
    let mut client = WireClient::connect(broker, Encoding::Json).expect("connect");
    let answer = client.create_topic(TOPIC, QUEUES).expect("create topic");
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
}

/// Sends `tag-n` for n from 0 until `stop`, or until the broker stops answering; returns the
/// bodies acknowledged with SEND_OK.
pub fn send_until(
    broker: SocketAddr,
    tag: &'static str,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
) {
    let Ok(mut client) = WireClient::connect(broker, Encoding::Json) else {
        return;
    };
    let _ = client.set_read_timeout(Duration::from_secs(10));
    for n in 0.. {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let body = format!("{tag}-{n}");
        let options = SendOptions {
            queue_id: Some(n % QUEUES),
            ..SendOptions::default()
        };
        match client.send(TOPIC, body.as_bytes(), &options) {
            Ok(answer) if answer.code == response_code::SUCCESS => {
                acked.lock().unwrap().push(body);
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => return,
        }
    }
}

/// UPDATE_CONSUMER_OFFSET (with an offset) or QUERY_CONSUMER_OFFSET of queue 0 for a group.
pub fn offset_request(code: i32, offset: Option<i64>) -> Command {
    let mut ext = ExtFields::new()
        .with("consumerGroup", "failover_group")
        .with("topic", TOPIC)
        .with("queueId", 0);
    if let Some(offset) = offset {
        ext = ext.with("commitOffset", offset);
    }
    Command::request(code, Encoding::Json).with_ext(ext)
}

/// The offset `broker` holds for the group's queue 0, if any.
pub fn committed_offset(broker: SocketAddr) -> Option<i64> {
    let mut client = WireClient::connect(broker, Encoding::Json).ok()?;
    let answer = client
        .call(offset_request(request_code::QUERY_CONSUMER_OFFSET, None))
        .ok()?;
    if answer.code != response_code::SUCCESS {
        return None;
    }
    answer.ext.as_ref()?.get("offset")?.parse().ok()
}

pub fn bodies_on(broker: SocketAddr) -> Vec<String> {
    let mut client = WireClient::connect(broker, Encoding::Json).expect("connect");
    let mut bodies = Vec::new();
    for queue_id in 0..QUEUES {
        for message in pull_all(&mut client, TOPIC, queue_id, 0) {
            bodies.push(String::from_utf8_lossy(&message.body).into_owned());
        }
    }
    bodies.sort();
    bodies
}
