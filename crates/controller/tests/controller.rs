//! The controller over real sockets, as RocketMQ brokers in controller mode talk to it: ids
//! handed out and applied, registration, heartbeats, the first election, the SyncStateSet
//! grown by the master, a new master elected and told when the old one's connection closes, and
//! all of it still there after the controller restarts.

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_controller::{Controller, ControllerConfig};
use quiver_testkit::WireClient;
use quiver_wire::body::{self, BrokerReplicasInfo, ElectMasterResponseBody, SyncStateSet};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding, ExtFields};

const WAIT: Duration = Duration::from_secs(30);

/// A controller node serving on a free loopback port from its own runtime thread, until
/// dropped.
struct Running {
    address: SocketAddr,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// A group of one on a free port, once it leads.
    fn start(config: ControllerConfig) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        Running::start_on(listener, config, true)
    }

    /// A node on `listener`, once it is open (and leads, with `lead`).
    fn start_on(listener: TcpListener, config: ControllerConfig, lead: bool) -> Running {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        listener.set_nonblocking(true).unwrap();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let address = listener.local_addr().unwrap();
                let controller = Arc::new(Controller::open(config, address).await.unwrap());
                // A group of one elects itself after an election timeout.
                let deadline = Instant::now() + WAIT;
                while lead && !controller.is_leader() {
                    assert!(Instant::now() < deadline, "no leader within {WAIT:?}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                ready_tx.send(address).unwrap();
                quiver_controller::run(listener, controller, stopped).await;
            });
        });
        let address = ready_rx.recv_timeout(WAIT).expect("the controller starts");
        Running {
            address,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn client(&self) -> WireClient {
        WireClient::connect(self.address, Encoding::Json).unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn config(store: &std::path::Path) -> ControllerConfig {
    ControllerConfig {
        store_path: store.to_path_buf(),
        scan_interval_ms: 200,
        ..ControllerConfig::default()
    }
}

fn request(code: i32, ext: ExtFields) -> Command {
    Command::request(code, Encoding::Json).with_ext(ext)
}

fn field<'a>(response: &'a Command, name: &str) -> Option<&'a str> {
    response.ext.as_ref().and_then(|ext| ext.get(name))
}

/// A broker of set `broker-a` as a RocketMQ broker starts in controller mode: asks for an id,
/// applies for it, registers and heartbeats. `notify` is where it listens for role changes.
struct FakeBroker {
    client: WireClient,
    id: i64,
    notify: TcpListener,
}

impl FakeBroker {
    fn join(controller: &Running) -> FakeBroker {
        let notify = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = notify.local_addr().unwrap().to_string();
        let mut client = controller.client();
        let names = || {
            ExtFields::new()
                .with("clusterName", "DefaultCluster")
                .with("brokerName", "broker-a")
        };
        let next = client
            .call(request(
                request_code::CONTROLLER_GET_NEXT_BROKER_ID,
                names(),
            ))
            .unwrap();
        assert_eq!(next.code, response_code::SUCCESS);
        let id: i64 = field(&next, "nextBrokerId").unwrap().parse().unwrap();
        let apply = client
            .call(request(
                request_code::CONTROLLER_APPLY_BROKER_ID,
                names()
                    .with("appliedBrokerId", id)
                    .with("registerCheckCode", format!("{address};1700000000000")),
            ))
            .unwrap();
        assert_eq!(apply.code, response_code::SUCCESS, "{:?}", apply.remark);
        let mut broker = FakeBroker { client, id, notify };
        broker.heartbeat(-1, 0);
        broker
    }

    fn address(&self) -> String {
        self.notify.local_addr().unwrap().to_string()
    }

    fn register(&mut self) -> Command {
        let ext = ExtFields::new()
            .with("clusterName", "DefaultCluster")
            .with("brokerName", "broker-a")
            .with("brokerId", self.id)
            .with("brokerAddress", self.address());
        self.client
            .call(request(request_code::CONTROLLER_REGISTER_BROKER, ext))
            .unwrap()
    }

    fn heartbeat(&mut self, epoch: i32, max_offset: i64) {
        let ext = ExtFields::new()
            .with("clusterName", "DefaultCluster")
            .with("brokerAddr", self.address())
            .with("brokerName", "broker-a")
            .with("brokerId", self.id)
            .with("epoch", epoch)
            .with("maxOffset", max_offset)
            .with("confirmOffset", max_offset)
            .with("heartbeatTimeoutMills", 10_000)
            .with("electionPriority", i32::MAX);
        let answer = self
            .client
            .call(request(request_code::BROKER_HEARTBEAT, ext))
            .unwrap();
        assert_eq!(answer.code, response_code::SUCCESS);
    }

    /// The next role change the controller sends this broker.
    fn role_change(&self) -> Command {
        self.notify.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            match self.notify.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    stream.set_read_timeout(Some(WAIT)).unwrap();
                    let mut input = bytes::BytesMut::new();
                    let mut stream = stream;
                    loop {
                        if let Some(frame) = quiver_wire::decode_frame(&mut input).unwrap() {
                            return frame;
                        }
                        let mut chunk = [0u8; 4096];
                        let read = std::io::Read::read(&mut stream, &mut chunk).unwrap();
                        assert!(read > 0, "the controller closed before a whole frame");
                        input.extend_from_slice(&chunk[..read]);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "no role change within {WAIT:?}");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("accept: {e}"),
            }
        }
    }
}

fn replica_info(client: &mut WireClient) -> Command {
    let ext = ExtFields::new().with("brokerName", "broker-a");
    client
        .call(request(request_code::CONTROLLER_GET_REPLICA_INFO, ext))
        .unwrap()
}

#[test]
fn brokers_get_ids_a_master_and_a_new_master_when_the_old_ones_connection_closes() {
    let store = tempfile::tempdir().unwrap();
    let controller = Running::start(config(store.path()));

    let mut first = FakeBroker::join(&controller);
    assert_eq!(first.id, 1);
    let registered = first.register();
    assert_eq!(registered.code, response_code::SUCCESS);
    assert_eq!(field(&registered, "masterBrokerId"), None, "no master yet");
    let elect = ExtFields::new()
        .with("clusterName", "DefaultCluster")
        .with("brokerName", "broker-a")
        .with("brokerId", 1)
        .with("designateElect", false);
    let elected = first
        .client
        .call(request(
            request_code::CONTROLLER_ELECT_MASTER,
            elect.clone(),
        ))
        .unwrap();
    assert_eq!(elected.code, response_code::SUCCESS, "{:?}", elected.remark);
    assert_eq!(field(&elected, "masterBrokerId"), Some("1"));
    assert_eq!(field(&elected, "masterEpoch"), Some("1"));
    let members: ElectMasterResponseBody = body::from_json(&elected.body).unwrap();
    assert_eq!(
        members.broker_member_group.unwrap().broker_addrs[&1],
        first.address()
    );

    let mut second = FakeBroker::join(&controller);
    assert_eq!(second.id, 2);
    let registered = second.register();
    assert_eq!(field(&registered, "masterBrokerId"), Some("1"));
    assert_eq!(
        field(&registered, "masterAddress"),
        Some(first.address().as_str())
    );
    let again = second
        .client
        .call(request(
            request_code::CONTROLLER_ELECT_MASTER,
            elect.with("brokerId", 2),
        ))
        .unwrap();
    assert_eq!(again.code, response_code::CONTROLLER_MASTER_STILL_EXIST);

    // The master takes the second into its SyncStateSet.
    let grow = request(
        request_code::CONTROLLER_ALTER_SYNC_STATE_SET,
        ExtFields::new()
            .with("brokerName", "broker-a")
            .with("masterBrokerId", 1)
            .with("masterEpoch", 1)
            .with("invokeTime", 0),
    )
    .with_body(body::to_json(&SyncStateSet {
        sync_state_set: BTreeSet::from([1, 2]),
        sync_state_set_epoch: 1,
    }));
    let grown = first.client.call(grow).unwrap();
    assert_eq!(grown.code, response_code::SUCCESS, "{:?}", grown.remark);
    assert_eq!(field(&grown, "newSyncStateSetEpoch"), Some("2"));
    second.heartbeat(1, 4096);
    let data = second
        .client
        .call(
            Command::request(request_code::CONTROLLER_GET_SYNC_STATE_DATA, Encoding::Json)
                .with_body(&b"[\"broker-a\",\"nowhere\"]"[..]),
        )
        .unwrap();
    let data: BrokerReplicasInfo = body::from_json(&data.body).unwrap();
    let set = &data.replicas_info_table["broker-a"];
    assert_eq!(set.in_sync_replicas.len(), 2);
    assert!(set.in_sync_replicas.iter().all(|replica| replica.alive));
    assert_eq!(data.replicas_info_table.len(), 1);

    // The master's connection closes (kill -9): the second is elected and told.
    drop(first.client);
    let notify = second.role_change();
    assert_eq!(notify.code, request_code::NOTIFY_BROKER_ROLE_CHANGED);
    assert_eq!(field(&notify, "masterBrokerId"), Some("2"));
    assert_eq!(field(&notify, "masterEpoch"), Some("2"));
    let told: SyncStateSet = body::from_json(&notify.body).unwrap();
    assert_eq!(told.sync_state_set, BTreeSet::from([2]));
    let info = replica_info(&mut second.client);
    assert_eq!(field(&info, "masterBrokerId"), Some("2"));
    assert_eq!(field(&info, "masterEpoch"), Some("2"));

    // The old master's epoch is fenced now.
    let stale = request(
        request_code::CONTROLLER_ALTER_SYNC_STATE_SET,
        ExtFields::new()
            .with("brokerName", "broker-a")
            .with("masterBrokerId", 1)
            .with("masterEpoch", 1),
    )
    .with_body(body::to_json(&SyncStateSet {
        sync_state_set: BTreeSet::from([1]),
        sync_state_set_epoch: 2,
    }));
    let fenced = second.client.call(stale).unwrap();
    assert_eq!(fenced.code, response_code::CONTROLLER_INVALID_MASTER);

    // A restarted controller has it all.
    drop(second);
    drop(controller);
    let controller = Running::start(config(store.path()));
    let info = replica_info(&mut controller.client());
    assert_eq!(field(&info, "masterBrokerId"), Some("2"));
    assert_eq!(field(&info, "masterEpoch"), Some("2"));
    let next = controller
        .client()
        .call(request(
            request_code::CONTROLLER_GET_NEXT_BROKER_ID,
            ExtFields::new()
                .with("clusterName", "DefaultCluster")
                .with("brokerName", "broker-a"),
        ))
        .unwrap();
    assert_eq!(field(&next, "nextBrokerId"), Some("3"));
}

#[test]
fn bad_requests_get_clear_refusals_and_the_broker_table_is_bounded() {
    let store = tempfile::tempdir().unwrap();
    let controller = Running::start(ControllerConfig {
        brokers_max: 2,
        ..config(store.path())
    });
    let mut client = controller.client();
    let unknown = client.call(request(1999, ExtFields::new())).unwrap();
    assert_eq!(unknown.code, response_code::REQUEST_CODE_NOT_SUPPORTED);
    let no_header = client
        .call(Command::request(
            request_code::CONTROLLER_REGISTER_BROKER,
            Encoding::Json,
        ))
        .unwrap();
    assert_eq!(no_header.code, response_code::SYSTEM_ERROR);
    let garbage = client
        .call(
            request(
                request_code::CONTROLLER_ALTER_SYNC_STATE_SET,
                ExtFields::new()
                    .with("brokerName", "b")
                    .with("masterBrokerId", 1)
                    .with("masterEpoch", 1),
            )
            .with_body(&b"{not json"[..]),
        )
        .unwrap();
    assert_eq!(
        garbage.code,
        response_code::CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    );
    assert_eq!(field(&garbage, "newSyncStateSetEpoch"), Some("0"));
    let beat = |id: Option<i64>| {
        let mut ext = ExtFields::new()
            .with("clusterName", "c")
            .with("brokerAddr", "127.0.0.1:1")
            .with("brokerName", "b");
        if let Some(id) = id {
            ext = ext.with("brokerId", id);
        }
        request(request_code::BROKER_HEARTBEAT, ext)
    };
    let anonymous = client.call(beat(None)).unwrap();
    assert_eq!(anonymous.code, response_code::CONTROLLER_INVALID_REQUEST);
    assert_eq!(
        client.call(beat(Some(1))).unwrap().code,
        response_code::SUCCESS
    );
    assert_eq!(
        client.call(beat(Some(2))).unwrap().code,
        response_code::SUCCESS
    );
    let third = client.call(beat(Some(3))).unwrap();
    assert_eq!(third.code, response_code::SYSTEM_BUSY);
    assert!(third.remark.unwrap().contains("quiverControllerBrokersMax"));
    // An unknown set cannot elect, and the first id of a set is 1.
    let elect = client
        .call(request(
            request_code::CONTROLLER_ELECT_MASTER,
            ExtFields::new().with("brokerName", "b").with("brokerId", 1),
        ))
        .unwrap();
    assert_eq!(
        elect.code,
        response_code::CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    );
    let apply = client
        .call(request(
            request_code::CONTROLLER_APPLY_BROKER_ID,
            ExtFields::new()
                .with("clusterName", "c")
                .with("brokerName", "b")
                .with("appliedBrokerId", 5)
                .with("registerCheckCode", "127.0.0.1:1;1"),
        ))
        .unwrap();
    assert_eq!(apply.code, response_code::CONTROLLER_BROKER_ID_INVALID);
    // Malformed frames close the connection; the controller serves the next one.
    client
        .write_raw(&[0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff])
        .unwrap();
    let mut next = controller.client();
    let metadata = next
        .call(Command::request(
            request_code::CONTROLLER_GET_METADATA_INFO,
            Encoding::Json,
        ))
        .unwrap();
    assert_eq!(field(&metadata, "isLeader"), Some("true"));
}

/// Three nodes: `n0`, `n1`, `n2` on the given listeners' ports, each with its own store.
fn three_node_configs(stores: &[std::path::PathBuf], ports: &[u16]) -> Vec<ControllerConfig> {
    let peers: Vec<(String, SocketAddr)> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| (format!("n{i}"), SocketAddr::from(([127, 0, 0, 1], *port))))
        .collect();
    (0..3)
        .map(|i| ControllerConfig {
            group: "group1".into(),
            peers: peers.clone(),
            self_id: format!("n{i}"),
            ..config(&stores[i])
        })
        .collect()
}

/// Which of `nodes` (by address) says it leads, once all that answer agree on one leader.
fn leader_of(addresses: &[SocketAddr]) -> SocketAddr {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut leaders = Vec::new();
        let mut says_leader = Vec::new();
        for address in addresses {
            let Ok(mut client) = WireClient::connect(*address, Encoding::Json) else {
                continue;
            };
            let Ok(answer) = client.call(Command::request(
                request_code::CONTROLLER_GET_METADATA_INFO,
                Encoding::Json,
            )) else {
                continue;
            };
            leaders.push(field(&answer, "controllerLeaderAddress").map(str::to_string));
            if field(&answer, "isLeader") == Some("true") {
                says_leader.push(*address);
            }
        }
        let agreed = leaders.len() == addresses.len()
            && leaders.iter().all(|l| l.is_some() && *l == leaders[0]);
        if agreed && says_leader.len() == 1 {
            assert_eq!(
                leaders[0].as_deref(),
                Some(says_leader[0].to_string().as_str())
            );
            return says_leader[0];
        }
        assert!(
            Instant::now() < deadline,
            "no agreed leader within {WAIT:?}: {leaders:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn three_nodes_keep_elections_and_ids_through_the_loss_of_their_leader() {
    let stores: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let paths: Vec<std::path::PathBuf> = stores.iter().map(|d| d.path().to_path_buf()).collect();
    let listeners: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let configs = three_node_configs(&paths, &ports);
    let mut nodes: Vec<Option<Running>> = listeners
        .into_iter()
        .zip(configs.iter().cloned())
        .map(|(listener, config)| Some(Running::start_on(listener, config, false)))
        .collect();
    let addresses: Vec<SocketAddr> = nodes.iter().map(|n| n.as_ref().unwrap().address).collect();
    let leader = leader_of(&addresses);
    let leader_index = addresses.iter().position(|a| *a == leader).unwrap();

    // A broker joins through the leader and heartbeats to every node, as RocketMQ's do.
    let running_leader = nodes[leader_index].as_ref().unwrap();
    let mut broker = FakeBroker::join(running_leader);
    let mut beats: Vec<WireClient> = addresses
        .iter()
        .map(|a| WireClient::connect(*a, Encoding::Json).unwrap())
        .collect();
    let beat = |client: &mut WireClient, id: i64, address: &str| {
        let ext = ExtFields::new()
            .with("clusterName", "DefaultCluster")
            .with("brokerAddr", address)
            .with("brokerName", "broker-a")
            .with("brokerId", id)
            .with("epoch", 1)
            .with("maxOffset", 0)
            .with("heartbeatTimeoutMills", 10_000);
        let answer = client
            .call(request(request_code::BROKER_HEARTBEAT, ext))
            .unwrap();
        assert_eq!(answer.code, response_code::SUCCESS);
    };
    for client in &mut beats {
        beat(client, broker.id, &broker.address());
    }
    broker.register();
    let elect = ExtFields::new()
        .with("clusterName", "DefaultCluster")
        .with("brokerName", "broker-a")
        .with("brokerId", broker.id);
    let elected = broker
        .client
        .call(request(request_code::CONTROLLER_ELECT_MASTER, elect))
        .unwrap();
    assert_eq!(elected.code, response_code::SUCCESS, "{:?}", elected.remark);

    // A follower refuses changes and points at the leader.
    let follower = (leader_index + 1) % 3;
    let mut at_follower = WireClient::connect(addresses[follower], Encoding::Json).unwrap();
    let refused = at_follower
        .call(request(
            request_code::CONTROLLER_GET_NEXT_BROKER_ID,
            ExtFields::new()
                .with("clusterName", "DefaultCluster")
                .with("brokerName", "broker-a"),
        ))
        .unwrap();
    assert_eq!(refused.code, response_code::CONTROLLER_NOT_LEADER);

    // The leader goes; the two left elect one that has the election and the ids.
    drop(beats);
    drop(broker);
    nodes[leader_index] = None;
    let remaining: Vec<SocketAddr> = addresses.iter().copied().filter(|a| *a != leader).collect();
    let new_leader = leader_of(&remaining);
    assert_ne!(new_leader, leader);
    let mut client = WireClient::connect(new_leader, Encoding::Json).unwrap();
    let info = replica_info(&mut client);
    assert_eq!(info.code, response_code::SUCCESS, "{:?}", info.remark);
    assert_eq!(field(&info, "masterBrokerId"), Some("1"));
    assert_eq!(field(&info, "masterEpoch"), Some("1"));
    let next = client
        .call(request(
            request_code::CONTROLLER_GET_NEXT_BROKER_ID,
            ExtFields::new()
                .with("clusterName", "DefaultCluster")
                .with("brokerName", "broker-a"),
        ))
        .unwrap();
    assert_eq!(field(&next, "nextBrokerId"), Some("2"));

    // The old leader comes back on its own store and follows.
    let listener = TcpListener::bind(leader).unwrap();
    nodes[leader_index] = Some(Running::start_on(
        listener,
        configs[leader_index].clone(),
        false,
    ));
    assert_eq!(leader_of(&addresses), new_leader);
}

/// With `quiverControllerBytesMax` at its least (64 KiB), a request larger than the bound is
/// still read whole and answered, and what the connections held is let go when they close.
#[test]
fn a_request_larger_than_the_byte_bound_completes_and_the_bytes_are_let_go() {
    let store = tempfile::tempdir().unwrap();
    let config = ControllerConfig {
        bytes_max: 64 * 1024,
        ..config(store.path())
    };
    let budget = Arc::new(quiver_controller::server::InputBudget::new(
        config.bytes_max,
    ));
    let watched = budget.clone();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let controller = Arc::new(Controller::open(config, address).await.unwrap());
            quiver_controller::server::run_with(listener, controller, budget, stopped).await;
        });
    });
    // Comments only: a valid properties text of 300 KiB that changes nothing.
    let text = "# padding padding padding padding padding padding padding padding\n".repeat(4_800);
    assert!(text.len() > 300 * 1024);
    let mut client = WireClient::connect(address, Encoding::Json).unwrap();
    let answer = client
        .call(
            Command::request(request_code::UPDATE_CONTROLLER_CONFIG, Encoding::Json)
                .with_body(text.into_bytes()),
        )
        .unwrap();
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    drop(client);
    let deadline = Instant::now() + WAIT;
    while watched.held() != 0 {
        assert!(
            Instant::now() < deadline,
            "{} bytes still held",
            watched.held()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.send(true).unwrap();
    thread.join().unwrap();
}
