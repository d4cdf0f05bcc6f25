//! The broker's side of controller mode (RocketMQ 5's automatic failover): it finds the
//! controller leader (GET_METADATA_INFO), gets an id (GET_NEXT_BROKER_ID, APPLY_BROKER_ID, kept
//! in `brokerIdentity`), registers (REGISTER_BROKER), asks for an election when the set has no
//! master (ELECT_MASTER), heartbeats every controller, asks for its set's state every
//! `syncBrokerMetadataPeriod` (GET_REPLICA_INFO), and acts on a role change the controller
//! pushes (NOTIFY_BROKER_ROLE_CHANGED, through `Controlled::push`). A role change acts only
//! for a higher master epoch: it stops the old role's tasks and starts the new one's
//! (`role.rs`); a new master records its epoch in the epoch file and registers with the name
//! servers at once as id 0. A master keeps its SyncStateSet with ALTER_SYNC_STATE_SET.
//!
//! The identity files are in `identity.rs`, the heartbeats (and the lease they extend) in
//! `heartbeat.rs`.
//!
//! Every answer is from the network: a missing field or a bad body is an error that is
//! logged and retried, never a panic; frames are bounded by the codec.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use quiver_wire::body::{self, ElectMasterResponseBody, SyncStateSet};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{
    AlterSyncStateSetRequestHeader, ApplyBrokerIdRequestHeader, ElectMasterRequestHeader,
    GetNextBrokerIdRequestHeader, GetReplicaInfoRequestHeader, MasterInfoHeader,
    RegisterBrokerToControllerRequestHeader,
};
use quiver_wire::{Command, Encoding};
use tokio::sync::watch;

mod heartbeat;
mod identity;

use heartbeat::heartbeats;
use identity::{blocking, read_identity, remove_identity, write_identity, Identity};
pub use identity::{IDENTITY_FILE, IDENTITY_TEMP_FILE};

use crate::clock::now_ms;
use crate::config::BrokerRole;
use crate::ha::controlled::{wanted_sync_set, Controlled, RoleChange, SyncSet};
use crate::outbound::Link;
use crate::role::{Following, RoleSlot, RoleTasks};
use crate::state::Broker;

/// RocketMQ's timeout for every call to a controller.
const CALL_TIMEOUT_MS: u64 = 3_000;
/// Between attempts at the start-up steps (RocketMQ retries its whole start-up every 5 s).
const RETRY_MS: u64 = 1_000;

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("{0}")]
    Call(#[from] crate::outbound::CallError),
    #[error("no controller of {addrs:?} names a leader")]
    NoLeader { addrs: Vec<String> },
    #[error("{request} refused: code {code}, {remark}")]
    Refused {
        request: &'static str,
        code: i32,
        remark: String,
    },
    #[error("{request}'s answer: {problem}")]
    BadAnswer {
        request: &'static str,
        problem: String,
    },
    #[error("{path}: {problem}")]
    Identity { path: String, problem: String },
}

/// The broker's calls to its controllers: one link per controller, and the leader's.
struct Controllers {
    links: Vec<Link>,
    leader: Option<usize>,
}

impl Controllers {
    fn new(addrs: &[String]) -> Controllers {
        Controllers {
            links: addrs.iter().cloned().map(Link::new).collect(),
            leader: None,
        }
    }

    async fn call_at(
        &mut self,
        index: usize,
        request: Command,
    ) -> Result<Command, ControllerError> {
        let timeout = Duration::from_millis(CALL_TIMEOUT_MS);
        Ok(self.links[index].call(request, timeout).await?)
    }

    /// GET_METADATA_INFO to each controller until one names the leader. A leader address
    /// outside `controllerAddr` is added (a controller may know the leader by another name).
    async fn find_leader(&mut self) -> Result<usize, ControllerError> {
        for index in 0..self.links.len() {
            let request =
                Command::request(request_code::CONTROLLER_GET_METADATA_INFO, Encoding::Json);
            let Ok(answer) = self.call_at(index, request).await else {
                continue;
            };
            let leader = answer
                .ext
                .as_ref()
                .and_then(|ext| ext.get("controllerLeaderAddress"))
                .filter(|addr| !addr.is_empty())
                .map(String::from);
            let Some(leader) = leader.filter(|_| answer.code == response_code::SUCCESS) else {
                continue;
            };
            let found = self.links.iter().position(|link| link.addr == leader);
            let found = found.unwrap_or_else(|| {
                self.links.push(Link::new(leader));
                self.links.len() - 1
            });
            self.leader = Some(found);
            return Ok(found);
        }
        Err(ControllerError::NoLeader {
            addrs: self.links.iter().map(|link| link.addr.clone()).collect(),
        })
    }

    /// A call to the leader, found first if unknown; NOT_LEADER forgets it.
    async fn call(&mut self, request: Command) -> Result<Command, ControllerError> {
        let leader = match self.leader {
            Some(leader) => leader,
            None => self.find_leader().await?,
        };
        let answer = self.call_at(leader, request).await;
        let lost = match &answer {
            Err(_) => true,
            Ok(answer) => answer.code == response_code::CONTROLLER_NOT_LEADER,
        };
        if lost {
            self.leader = None;
        }
        answer
    }
}

fn refused(request: &'static str, answer: &Command) -> ControllerError {
    ControllerError::Refused {
        request,
        code: answer.code,
        remark: answer.remark.clone().unwrap_or_default(),
    }
}

fn bad(request: &'static str, problem: impl ToString) -> ControllerError {
    ControllerError::BadAnswer {
        request,
        problem: problem.to_string(),
    }
}

/// The master an answer names (REGISTER, ELECT, GET_REPLICA_INFO) with the set, if it names
/// one.
fn named_master(
    request: &'static str,
    answer: &Command,
    set: BTreeSet<i64>,
    set_epoch: Option<i32>,
) -> Result<Option<RoleChange>, ControllerError> {
    let ext = answer.ext.clone().unwrap_or_default();
    let header = MasterInfoHeader::from_ext(&ext).map_err(|e| bad(request, e))?;
    let (Some(id), Some(address), Some(epoch)) = (
        header.master_broker_id,
        header.master_address.filter(|addr| !addr.is_empty()),
        header.master_epoch,
    ) else {
        return Ok(None);
    };
    if id < 1 || epoch < 1 {
        return Err(bad(request, format!("master id {id}, epoch {epoch}")));
    }
    Ok(Some(RoleChange {
        master_broker_id: id,
        master_address: address,
        master_epoch: epoch,
        sync_state_set_epoch: header.sync_state_set_epoch.or(set_epoch).unwrap_or(0),
        sync_state_set: set,
    }))
}

/// The controller client's state: the broker, its role's tasks and its links.
struct Client {
    owner: Arc<Broker>,
    role: RoleSlot,
    controllers: Controllers,
}

enum Event {
    Pushed,
    Sync,
    Check,
}

/// Runs the broker's side of controller mode until `stop`.
pub async fn run(owner: Arc<Broker>, role: RoleSlot, mut stop: watch::Receiver<bool>) {
    let config = owner.lifecycle().config.controller.clone();
    let mut client = Client {
        controllers: Controllers::new(&config.addrs),
        owner: owner.clone(),
        role,
    };
    let first = loop {
        match client.start_up().await {
            Ok(first) => break first,
            Err(error) => tracing::warn!(%error, "controller mode start-up failed; retrying"),
        }
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            _ = tokio::time::sleep(Duration::from_millis(RETRY_MS)) => {}
        }
    };
    tokio::spawn(heartbeats(owner.clone(), stop.clone()));
    if let Err(error) = client.settle(first).await {
        tracing::warn!(%error, "no master yet; asking again every period");
    }
    let mut sync =
        tokio::time::interval(Duration::from_millis(config.sync_broker_metadata_period_ms));
    let mut check =
        tokio::time::interval(Duration::from_millis(config.check_sync_state_set_period_ms));
    sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let controlled = controlled(&owner);
    loop {
        let replication = owner.replicating().replication;
        let event = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            _ = controlled.pushed_signal.notified() => Event::Pushed,
            _ = sync.tick() => Event::Sync,
            _ = check.tick() => Event::Check,
            _ = replication.slaves_changed.notified() => Event::Check,
        };
        let result = match event {
            Event::Pushed => match controlled.take_pushed() {
                Some(change) => client.change_role(change).await,
                None => Ok(()),
            },
            Event::Sync => client.sync_replica_info().await,
            Event::Check => client.check_sync_state_set().await,
        };
        if let Err(error) = result {
            tracing::warn!(%error, "controller request failed; retrying next period");
        }
        client.nudge_registration();
    }
}

fn controlled(owner: &Broker) -> &Controlled {
    owner
        .replicating()
        .replication
        .controlled
        .as_ref()
        .expect("controller mode")
}

impl Client {
    /// Leader, id, registration; the master the registration names (None: elect one).
    async fn start_up(&mut self) -> Result<Option<RoleChange>, ControllerError> {
        let owner = self.owner.clone();
        self.controllers.find_leader().await?;
        let id = self.broker_id().await?;
        controlled(&owner).set_own_id(id);
        let config = owner.lifecycle().config;
        let header = RegisterBrokerToControllerRequestHeader {
            cluster_name: config.cluster_name.clone(),
            broker_name: config.broker_name.clone(),
            broker_id: id,
            broker_address: owner.replicating().store_host.to_string(),
            invoke_time: now_ms(),
        };
        let request = Command::request(request_code::CONTROLLER_REGISTER_BROKER, Encoding::Json)
            .with_ext(header.to_ext());
        let answer = self.controllers.call(request).await?;
        if answer.code != response_code::SUCCESS {
            return Err(refused("REGISTER_BROKER", &answer));
        }
        let set: SyncStateSet = body::from_json(&answer.body).unwrap_or_default();
        tracing::info!(broker_id = id, "registered with the controller");
        named_master(
            "REGISTER_BROKER",
            &answer,
            set.sync_state_set,
            Some(set.sync_state_set_epoch),
        )
    }

    /// The id from `brokerIdentity`, or a new one from the controller, recorded through
    /// `brokerIdentity-temp` so that a crash between asking and keeping it asks again for the
    /// same id with the same check code.
    async fn broker_id(&mut self) -> Result<i64, ControllerError> {
        let owner = self.owner.clone();
        let config = owner.lifecycle().config.clone();
        let root = config.store_root.clone();
        let (identity, temp) = blocking(move || {
            let identity = read_identity(&root.join(IDENTITY_FILE), false)?;
            let temp = read_identity(&root.join(IDENTITY_TEMP_FILE), true)?;
            Ok((identity, temp))
        })
        .await?;
        let same_set = |identity: &Identity| {
            identity.cluster == config.cluster_name && identity.broker_name == config.broker_name
        };
        if let Some(identity) = identity {
            if !same_set(&identity) {
                return Err(ControllerError::Identity {
                    path: IDENTITY_FILE.into(),
                    problem: format!(
                        "it is {}#{}, the configuration says {}#{}",
                        identity.cluster,
                        identity.broker_name,
                        config.cluster_name,
                        config.broker_name
                    ),
                });
            }
            return Ok(identity.broker_id);
        }
        let temp = match temp.filter(same_set) {
            Some(temp) => temp,
            None => {
                let next = self
                    .next_broker_id(&config.cluster_name, &config.broker_name)
                    .await?;
                let check_code = format!("{};{}", owner.replicating().store_host, now_ms());
                let temp = Identity {
                    cluster: config.cluster_name.clone(),
                    broker_name: config.broker_name.clone(),
                    broker_id: next,
                    check_code: Some(check_code),
                };
                write_identity(config.store_root.join(IDENTITY_TEMP_FILE), temp.encode()).await?;
                temp
            }
        };
        let header = ApplyBrokerIdRequestHeader {
            cluster_name: temp.cluster.clone(),
            broker_name: temp.broker_name.clone(),
            applied_broker_id: temp.broker_id,
            register_check_code: temp.check_code.clone().unwrap_or_default(),
        };
        let request = Command::request(request_code::CONTROLLER_APPLY_BROKER_ID, Encoding::Json)
            .with_ext(header.to_ext());
        let answer = self.controllers.call(request).await?;
        let temp_path = config.store_root.join(IDENTITY_TEMP_FILE);
        if answer.code != response_code::SUCCESS {
            // Another broker took the id: ask for the next one next time.
            blocking(move || remove_identity(&temp_path)).await?;
            return Err(refused("APPLY_BROKER_ID", &answer));
        }
        let identity = Identity {
            check_code: None,
            ..temp
        };
        write_identity(config.store_root.join(IDENTITY_FILE), identity.encode()).await?;
        blocking(move || remove_identity(&temp_path)).await?;
        Ok(identity.broker_id)
    }

    async fn next_broker_id(&mut self, cluster: &str, name: &str) -> Result<i64, ControllerError> {
        let header = GetNextBrokerIdRequestHeader {
            cluster_name: cluster.to_string(),
            broker_name: name.to_string(),
        };
        let request = Command::request(request_code::CONTROLLER_GET_NEXT_BROKER_ID, Encoding::Json)
            .with_ext(header.to_ext());
        let answer = self.controllers.call(request).await?;
        if answer.code != response_code::SUCCESS {
            return Err(refused("GET_NEXT_BROKER_ID", &answer));
        }
        let next = answer
            .ext
            .as_ref()
            .and_then(|ext| ext.get("nextBrokerId"))
            .and_then(|id| id.parse::<i64>().ok())
            .filter(|id| *id >= 1);
        next.ok_or_else(|| bad("GET_NEXT_BROKER_ID", "no nextBrokerId of 1 or more"))
    }

    /// After registration: the master named, or an election when none is.
    async fn settle(&mut self, named: Option<RoleChange>) -> Result<(), ControllerError> {
        match named {
            Some(change) => self.change_role(change).await,
            None => self.elect().await,
        }
    }

    /// ELECT_MASTER for this broker (the controller picks the master, this one first if the
    /// set never had one).
    async fn elect(&mut self) -> Result<(), ControllerError> {
        let owner = self.owner.clone();
        let config = owner.lifecycle().config;
        let header = ElectMasterRequestHeader {
            cluster_name: config.cluster_name.clone(),
            broker_name: config.broker_name.clone(),
            broker_id: controlled(&owner).own_id(),
            designate_elect: false,
            invoke_time: now_ms(),
        };
        let request = Command::request(request_code::CONTROLLER_ELECT_MASTER, Encoding::Json)
            .with_ext(header.to_ext());
        let answer = self.controllers.call(request).await?;
        let elected = answer.code == response_code::SUCCESS
            || answer.code == response_code::CONTROLLER_MASTER_STILL_EXIST;
        if !elected {
            return Err(refused("ELECT_MASTER", &answer));
        }
        let set: ElectMasterResponseBody = body::from_json(&answer.body).unwrap_or_default();
        match named_master("ELECT_MASTER", &answer, set.sync_state_set, None)? {
            Some(change) => self.change_role(change).await,
            None => Err(bad("ELECT_MASTER", "no master in a successful answer")),
        }
    }

    /// GET_REPLICA_INFO: a higher epoch changes the role; at the same epoch a master takes a
    /// newer SyncStateSet; a set without a master asks for an election.
    async fn sync_replica_info(&mut self) -> Result<(), ControllerError> {
        let owner = self.owner.clone();
        let header = GetReplicaInfoRequestHeader {
            broker_name: owner.lifecycle().config.broker_name.clone(),
        };
        let request = Command::request(request_code::CONTROLLER_GET_REPLICA_INFO, Encoding::Json)
            .with_ext(header.to_ext());
        let answer = self.controllers.call(request).await?;
        if answer.code == response_code::CONTROLLER_BROKER_METADATA_NOT_EXIST {
            let named = self.start_up().await?;
            return self.settle(named).await;
        }
        if answer.code != response_code::SUCCESS {
            return Err(refused("GET_REPLICA_INFO", &answer));
        }
        let set: SyncStateSet = body::from_json(&answer.body).unwrap_or_default();
        let set_epoch = set.sync_state_set_epoch;
        let Some(change) = named_master(
            "GET_REPLICA_INFO",
            &answer,
            set.sync_state_set,
            Some(set_epoch),
        )?
        else {
            return self.elect().await;
        };
        let controlled = controlled(&owner);
        if change.master_epoch == controlled.master_epoch()
            && change.master_broker_id == controlled.own_id()
        {
            let installed = controlled.install_sync_set(SyncSet {
                members: change.sync_state_set,
                epoch: change.sync_state_set_epoch,
            });
            if installed {
                owner.replicating().replication.sync_set_changed();
            }
            return Ok(());
        }
        self.change_role(change).await
    }

    /// Acts on `change` if its epoch is higher than the one this broker acts under.
    async fn change_role(&mut self, change: RoleChange) -> Result<(), ControllerError> {
        let owner = self.owner.clone();
        let controlled = controlled(&owner);
        if change.master_epoch <= controlled.master_epoch() {
            return Ok(());
        }
        let master = change.master_broker_id == controlled.own_id();
        tracing::info!(
            master_id = change.master_broker_id,
            master = %change.master_address,
            epoch = change.master_epoch,
            role = if master { "master" } else { "slave" },
            "the controller changed this broker's role"
        );
        controlled.fence(true);
        let old = self.role.lock().await.take();
        if let Some(old) = old {
            old.stop().await;
        }
        let result = if master {
            self.become_master(&change).await
        } else {
            self.become_slave(&change).await;
            Ok(())
        };
        owner.replicating().topics_changed();
        result
    }

    async fn become_master(&mut self, change: &RoleChange) -> Result<(), ControllerError> {
        let owner = self.owner.clone();
        let epoch = change.master_epoch;
        let writer = owner.clone();
        blocking(move || {
            let broker = writer.replicating();
            let log_end = broker.store.stats().written_position;
            controlled(&writer)
                .begin_epoch(epoch, log_end)
                .map_err(|e| ControllerError::Identity {
                    path: "epochFileCheckpoint".into(),
                    problem: e.to_string(),
                })
        })
        .await?;
        let controlled = controlled(&owner);
        let replication = owner.replicating().replication;
        controlled.set_master_epoch(epoch);
        controlled.set_master_address(None);
        controlled.install_sync_set(SyncSet {
            members: change.sync_state_set.clone(),
            epoch: change.sync_state_set_epoch,
        });
        // A lease starts with the answer that made this broker master.
        let timeout_ms = owner.lifecycle().config.controller.heartbeat_timeout_ms;
        controlled.extend_lease(now_ms(), timeout_ms);
        replication.set_role(BrokerRole::SyncMaster);
        replication.sync_set_changed();
        // The gate follows this role's acknowledgements from here, whatever it was told as a
        // slave (settling tells it only of a change, and this may be the position it had).
        owner
            .replicating()
            .store
            .confirm(replication.confirmed_position());
        let tasks = RoleTasks::master(&owner, None).map_err(|e| ControllerError::Identity {
            path: "background thread".into(),
            problem: e.to_string(),
        })?;
        *self.role.lock().await = Some(tasks);
        controlled.fence(false);
        Ok(())
    }

    async fn become_slave(&mut self, change: &RoleChange) {
        let owner = self.owner.clone();
        let controlled = controlled(&owner);
        let replication = owner.replicating().replication;
        controlled.set_master_epoch(change.master_epoch);
        controlled.set_master_address(Some(change.master_address.clone()));
        replication.forget_master();
        // Nothing past what is shown is confirmed until the new master says so.
        owner.replicating().store.confirm(0);
        replication.set_role(BrokerRole::Slave);
        let tasks = RoleTasks::slave(&owner, Following::AutoSwitch);
        *self.role.lock().await = Some(tasks);
        controlled.fence(false);
    }

    /// A master's SyncStateSet: itself and the slaves caught up lately; a change goes to the
    /// controller (ALTER_SYNC_STATE_SET) and is used once it confirms it.
    async fn check_sync_state_set(&mut self) -> Result<(), ControllerError> {
        let owner = self.owner.clone();
        let replication = owner.replicating().replication;
        if !replication.is_master() {
            return Ok(());
        }
        let controlled = controlled(&owner);
        let config = &owner.lifecycle().config.controller;
        let held = controlled.sync_set();
        let own_id = controlled.own_id();
        let wanted = wanted_sync_set(
            own_id,
            &replication.slaves_caught_up(),
            now_ms(),
            config.slave_not_caught_up_ms_max,
        );
        if wanted == held.members {
            return Ok(());
        }
        let header = AlterSyncStateSetRequestHeader {
            broker_name: owner.lifecycle().config.broker_name.clone(),
            master_broker_id: own_id,
            master_epoch: controlled.master_epoch(),
            invoke_time: now_ms(),
        };
        let proposed = SyncStateSet {
            sync_state_set: wanted,
            sync_state_set_epoch: held.epoch,
        };
        let request = Command::request(
            request_code::CONTROLLER_ALTER_SYNC_STATE_SET,
            Encoding::Json,
        )
        .with_ext(header.to_ext())
        .with_body(body::to_json(&proposed));
        let answer = self.controllers.call(request).await?;
        if answer.code != response_code::SUCCESS {
            return Err(refused("ALTER_SYNC_STATE_SET", &answer));
        }
        let set: SyncStateSet =
            body::from_json(&answer.body).map_err(|e| bad("ALTER_SYNC_STATE_SET", e))?;
        tracing::info!(members = ?set.sync_state_set, epoch = set.sync_state_set_epoch, "SyncStateSet changed");
        controlled.install_sync_set(SyncSet {
            members: set.sync_state_set,
            epoch: set.sync_state_set_epoch,
        });
        replication.sync_set_changed();
        Ok(())
    }

    /// A slave that does not know its master's HA address yet registers again at once: the
    /// name server's answer carries it once the master has registered.
    fn nudge_registration(&self) {
        let owner = self.owner.clone();
        let replication = owner.replicating().replication;
        if replication.is_slave() && replication.master().ha.is_none() {
            owner.replicating().topics_changed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_names_a_master_only_with_its_id_address_and_epoch() {
        let answer = Command::request(0, Encoding::Json).with_ext(
            quiver_wire::ExtFields::new()
                .with("masterBrokerId", 2)
                .with("masterAddress", "127.0.0.1:30921")
                .with("masterEpoch", 3),
        );
        let change = named_master("T", &answer, BTreeSet::from([2]), Some(4))
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                change.master_broker_id,
                change.master_epoch,
                change.sync_state_set_epoch
            ),
            (2, 3, 4)
        );
        let none = Command::request(0, Encoding::Json)
            .with_ext(quiver_wire::ExtFields::new().with("masterEpoch", 3));
        assert!(named_master("T", &none, BTreeSet::new(), None)
            .unwrap()
            .is_none());
        let hostile = Command::request(0, Encoding::Json).with_ext(
            quiver_wire::ExtFields::new()
                .with("masterBrokerId", "x")
                .with("masterAddress", "a")
                .with("masterEpoch", 1),
        );
        assert!(named_master("T", &hostile, BTreeSet::new(), None).is_err());
    }
}
