//! Three `quiver controller` processes as one controller: a leader agreed on by all, changes
//! only through it, and after a SIGKILL of the leader (no chance to flush anything) a new one
//! that holds every change the old one answered; the killed node comes back from its own files
//! and follows.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use common::binary;
use quiver_testkit::{wait_until, QuiverProcess, WireClient};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{Command, Encoding, ExtFields};

const WAIT: Duration = Duration::from_secs(60);

fn field<'a>(response: &'a Command, name: &str) -> Option<&'a str> {
    response.ext.as_ref().and_then(|ext| ext.get(name))
}

/// Free loopback ports for the three nodes.
fn free_ports() -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

fn start_node(dir: &Path, ports: &[u16], node: usize) -> QuiverProcess {
    let peers: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| format!("n{i}-127.0.0.1:{port}"))
        .collect();
    let home = dir.join(format!("n{node}"));
    std::fs::create_dir_all(&home).unwrap();
    let conf = home.join("controller.conf");
    std::fs::write(
        &conf,
        format!(
            "controllerDLegerGroup=group1\ncontrollerDLegerPeers={}\ncontrollerDLegerSelfId=n{node}\n\
             controllerStorePath={}\n",
            peers.join(";"),
            home.join("store").display()
        ),
    )
    .unwrap();
    QuiverProcess::start(
        &binary(),
        &["controller", "-c", conf.to_str().unwrap()],
        &home,
    )
    .expect("the controller node starts")
}

/// The leader all of `nodes` name, once they agree and it says it leads.
fn agreed_leader(nodes: &[SocketAddr]) -> SocketAddr {
    wait_until(WAIT, || {
        let mut named = Vec::new();
        let mut leading = Vec::new();
        for node in nodes {
            let mut client = WireClient::connect(*node, Encoding::Json).ok()?;
            let answer = client
                .call(Command::request(
                    request_code::CONTROLLER_GET_METADATA_INFO,
                    Encoding::Json,
                ))
                .ok()?;
            named.push(field(&answer, "controllerLeaderAddress")?.to_string());
            if field(&answer, "isLeader") == Some("true") {
                leading.push(*node);
            }
        }
        let agreed = named.iter().all(|n| *n == named[0]);
        (agreed && leading.len() == 1 && named[0] == leading[0].to_string()).then(|| leading[0])
    })
    .expect("the nodes agree on a leader")
}

fn ids(cluster: &str) -> ExtFields {
    ExtFields::new()
        .with("clusterName", cluster)
        .with("brokerName", "broker-a")
}

#[test]
fn a_controller_of_three_processes_keeps_what_it_answered_through_a_sigkill_of_its_leader() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports();
    let mut nodes: Vec<Option<QuiverProcess>> = (0..3)
        .map(|node| Some(start_node(dir.path(), &ports, node)))
        .collect();
    let addresses: Vec<SocketAddr> = nodes
        .iter()
        .map(|n| n.as_ref().unwrap().controller())
        .collect();
    let leader = agreed_leader(&addresses);
    let mut client = WireClient::connect(leader, Encoding::Json).unwrap();
    for id in 1..=3 {
        let apply = client
            .call(
                Command::request(request_code::CONTROLLER_APPLY_BROKER_ID, Encoding::Json)
                    .with_ext(
                        ids("DefaultCluster")
                            .with("appliedBrokerId", id)
                            .with("registerCheckCode", format!("127.0.0.1:3{id}911;1")),
                    ),
            )
            .unwrap();
        assert_eq!(apply.code, response_code::SUCCESS, "{:?}", apply.remark);
    }

    let killed = addresses.iter().position(|a| *a == leader).unwrap();
    nodes[killed].as_mut().unwrap().kill9().unwrap();
    let remaining: Vec<SocketAddr> = addresses.iter().copied().filter(|a| *a != leader).collect();
    let new_leader = agreed_leader(&remaining);
    let mut client = WireClient::connect(new_leader, Encoding::Json).unwrap();
    let next = client
        .call(
            Command::request(request_code::CONTROLLER_GET_NEXT_BROKER_ID, Encoding::Json)
                .with_ext(ids("DefaultCluster")),
        )
        .unwrap();
    assert_eq!(field(&next, "nextBrokerId"), Some("4"), "{:?}", next.remark);
    // The id the killed leader answered is taken: applying for it with another code fails.
    let taken = client
        .call(
            Command::request(request_code::CONTROLLER_APPLY_BROKER_ID, Encoding::Json).with_ext(
                ids("DefaultCluster")
                    .with("appliedBrokerId", 3)
                    .with("registerCheckCode", "127.0.0.1:9;2"),
            ),
        )
        .unwrap();
    assert_eq!(taken.code, response_code::CONTROLLER_BROKER_ID_INVALID);

    // The killed node restarts from its files and follows the new leader.
    nodes[killed] = Some(start_node(dir.path(), &ports, killed));
    assert_eq!(agreed_leader(&addresses), new_leader);
}
