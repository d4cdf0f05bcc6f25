//! Registration with the name servers: the broker's topics and addresses every
//! `registerNameServerPeriod`, and at once when a topic changes; unregistration at shutdown.

use std::sync::Arc;
use std::time::Duration;

use quiver_wire::body::{self, RegisterBrokerBody};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{RegisterBrokerRequestHeader, UnregisterBrokerRequestHeader};
use quiver_wire::message::body_crc;
use quiver_wire::register_body;
use quiver_wire::{Command, Encoding};
use tokio::sync::watch;

use crate::outbound::Link;
use crate::state::{Broker, Registering};

const NAMESRV_CALL_TIMEOUT_MS: u64 = 3_000;

/// Registers until `stop`; `registered` turns true once a name server has accepted it.
pub async fn run(
    owner: Arc<Broker>,
    mut stop: watch::Receiver<bool>,
    registered: watch::Sender<bool>,
) {
    let broker = owner.registering();
    if broker.config.namesrv_addrs.is_empty() {
        tracing::warn!(
            "no namesrvAddr configured: clients cannot find this broker through a name server"
        );
        return;
    }
    let mut links = namesrv_links(broker);
    let mut failing = vec![true; links.len()];
    let mut period = tokio::time::interval(Duration::from_millis(broker.config.register_period_ms));
    // When the next registration for a topic change may start (see `CHANGE_SPACING_MIN`).
    let mut changes_from = tokio::time::Instant::now();
    loop {
        let changed = async {
            broker.topics_changed_since().await;
            tokio::time::sleep_until(changes_from).await;
        };
        tokio::select! {
            _ = stop.changed() => return,
            _ = period.tick() => {}
            _ = changed => {}
        }
        let started = tokio::time::Instant::now();
        register_everywhere(&owner, &mut links, &mut failing).await;
        let spacing = CHANGE_SPACING_MIN.max(started.elapsed() * CHANGE_SPACING_FACTOR);
        changes_from = started + spacing;
        if failing.iter().any(|failed| !failed) {
            registered.send_replace(true);
        }
    }
}

/// Registrations for topic changes start at least this far apart, and at least
/// `CHANGE_SPACING_FACTOR` times as far as the last registration took: each carries every
/// topic, so a client creating topics one after another (up to `quiverTopicsMax`) made the
/// broker and its name servers spend their CPU on back-to-back registrations of thousands of
/// topics, and other clients' sends waited. The changes made meanwhile go in the next one.
const CHANGE_SPACING_MIN: Duration = Duration::from_millis(100);
const CHANGE_SPACING_FACTOR: u32 = 4;

/// A registration whose JSON body is larger than this goes compressed whatever
/// `compressedRegister` says: 1 MiB of JSON is some 5,000 topics, and the JSON of 100,000
/// topics would pass the 16 MiB frame limit, and the broker would drop out of its name
/// servers. Java name servers read the compressed layout too.
const REGISTER_JSON_BYTES_MAX: usize = 1024 * 1024;

/// The registration, its body as JSON or compressed (`register_body`). Blocking: the body of
/// many topics takes tens of milliseconds to build.
fn registration_request(broker: Registering<'_>) -> Option<Command> {
    let broker_id = registered_id(broker)?;
    let mut topics = broker.topics.snapshot();
    if let Some(controlled) = &broker.replication.controlled {
        // The name server keeps the registration of the higher master epoch when two
        // addresses claim a broker set's id 0 (RocketMQ's stateVersion).
        topics.data_version.state_version = i64::from(controlled.master_epoch());
    }
    let registration = RegisterBrokerBody {
        topic_config_serialize_wrapper: topics,
        filter_server_list: Vec::new(),
    };
    let mut compressed = broker.config.compressed_register;
    let mut body = Vec::new();
    if !compressed {
        body = body::to_json(&registration);
        compressed = body.len() > REGISTER_JSON_BYTES_MAX;
    }
    if compressed {
        body = register_body::encode_compressed(&registration);
    }
    let header = RegisterBrokerRequestHeader {
        broker_name: broker.config.broker_name.clone(),
        broker_addr: broker.store_host.to_string(),
        cluster_name: broker.config.cluster_name.clone(),
        ha_server_addr: broker.ha_host.to_string(),
        broker_id,
        heartbeat_timeout_millis: None,
        compressed,
        // Of the bytes sent, compressed or not, as RocketMQ's broker computes it.
        body_crc32: body_crc(&body),
    };
    let request = Command::request(request_code::REGISTER_BROKER, Encoding::Json)
        .with_ext(header.to_ext())
        .with_body(body);
    Some(request)
}

/// The id the broker registers under: `brokerId`, or in controller mode 0 as master and its
/// controller id as slave; None before the controller gave a role (RocketMQ's broker is
/// "isolated" then: no name server knows it).
fn registered_id(broker: Registering<'_>) -> Option<i64> {
    let Some(controlled) = &broker.replication.controlled else {
        return Some(broker.config.broker_id);
    };
    match broker.replication.role() {
        crate::ha::Role::Undecided => None,
        _ if broker.replication.is_slave() => Some(controlled.own_id()),
        _ => Some(0),
    }
}

async fn register_everywhere(owner: &Arc<Broker>, links: &mut [Link], failing: &mut [bool]) {
    let broker = owner.registering();
    let building = Arc::clone(owner);
    let built =
        tokio::task::spawn_blocking(move || registration_request(building.registering())).await;
    let request = match built {
        Ok(Some(request)) => request,
        Ok(None) => return,
        Err(error) => {
            tracing::error!(%error, "could not build the registration");
            return;
        }
    };
    let timeout = Duration::from_millis(NAMESRV_CALL_TIMEOUT_MS);
    for (index, link) in links.iter_mut().enumerate() {
        let addr = link.addr.clone();
        let result = link.call(request.clone(), timeout).await;
        let failed = match result {
            Ok(response) if response.code == response_code::SUCCESS => {
                learn_master(broker, &response);
                false
            }
            Ok(response) => {
                tracing::warn!(namesrv = %addr, code = response.code, remark = ?response.remark, "registration refused");
                true
            }
            Err(error) => {
                if !failing[index] {
                    tracing::warn!(namesrv = %addr, %error, "registration failed; retrying every period");
                }
                true
            }
        };
        if failing[index] && !failed {
            tracing::info!(namesrv = %addr, "registered with name server");
        }
        failing[index] = failed;
    }
}

/// A slave learns its master's addresses from the answer to its registration, as RocketMQ's
/// do (`masterAddr`, `haServerAddr` in the response header).
fn learn_master(broker: Registering<'_>, response: &Command) {
    if !broker.replication.is_slave() {
        return;
    }
    let field = |name: &str| {
        response
            .ext
            .as_ref()
            .and_then(|ext| ext.get(name))
            .filter(|value| !value.is_empty())
            .map(String::from)
    };
    if let Some(controlled) = &broker.replication.controlled {
        // Only the master the controller named: the name server may still list the one
        // before it.
        if field("masterAddr") != controlled.master_address() {
            return;
        }
    }
    broker.replication.learned_master(
        field("masterAddr"),
        field("haServerAddr"),
        broker.config.ha_master_addr.is_some(),
    );
}

/// One link per configured name server.
pub fn namesrv_links(broker: Registering<'_>) -> Vec<Link> {
    broker
        .config
        .namesrv_addrs
        .iter()
        .cloned()
        .map(Link::new)
        .collect()
}

pub async fn unregister_everywhere(broker: Registering<'_>, links: &mut [Link]) {
    let Some(broker_id) = registered_id(broker) else {
        return;
    };
    let header = UnregisterBrokerRequestHeader {
        broker_name: broker.config.broker_name.clone(),
        broker_addr: broker.store_host.to_string(),
        cluster_name: broker.config.cluster_name.clone(),
        broker_id,
    };
    let request =
        Command::request(request_code::UNREGISTER_BROKER, Encoding::Json).with_ext(header.to_ext());
    for link in links {
        if let Err(error) = link
            .call(request.clone(), Duration::from_millis(1_000))
            .await
        {
            tracing::debug!(namesrv = %link.addr, %error, "unregister failed");
        }
    }
}
