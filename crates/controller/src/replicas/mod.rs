//! The controller's replicated state, RocketMQ's broker sets: for each broker name, the
//! replicas that registered (controller-assigned ids, addresses), its master, the master's
//! epoch and the SyncStateSet (the replicas that hold everything the master acknowledged) with
//! its own epoch.
//!
//! The state changes only by applying `Event`s, in order, and applying is deterministic: every
//! node that applies the same events holds the same state. Requests are decided (the
//! functions of `Replicas` that return events) on the node that leads, from the state it has
//! applied; their events are made durable and applied before they are answered.

use std::collections::{BTreeMap, BTreeSet};

use quiver_wire::code::response_code;
use serde::{Deserialize, Serialize};

use crate::liveness::Liveness;

/// The first id a broker set hands out (RocketMQ's `FIRST_BROKER_CONTROLLER_ID`).
pub const FIRST_BROKER_ID: i64 = 1;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replicas {
    sets: BTreeMap<String, BrokerSet>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerSet {
    pub cluster: String,
    pub name: String,
    /// The id the next new broker is offered; ids are never handed out twice.
    pub next_broker_id: i64,
    pub brokers: BTreeMap<i64, Replica>,
    pub master: Option<i64>,
    /// Raised by every election, one that finds no master included: a broker acts on a role
    /// change only for a higher epoch than it has seen.
    pub master_epoch: i32,
    pub sync_state_set: BTreeSet<i64>,
    pub sync_state_set_epoch: i32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    pub address: String,
    /// What the broker sent when it took its id (`address;millis`): the same code takes the
    /// same id again, after a restart that lost the broker's answer.
    pub check_code: String,
}

/// A change to the state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    ApplyBrokerId {
        cluster: String,
        name: String,
        id: i64,
        address: String,
        check_code: String,
    },
    UpdateBrokerAddress {
        name: String,
        id: i64,
        address: String,
    },
    AlterSyncStateSet {
        name: String,
        set: BTreeSet<i64>,
    },
    /// `master: None` is an election that found nobody: the master is cleared and the epoch
    /// still rises, so that the old master, once back, is told it no longer is one.
    ElectMaster {
        name: String,
        master: Option<i64>,
    },
    /// `ids: None` removes the whole set.
    CleanBrokerData {
        name: String,
        ids: Option<BTreeSet<i64>>,
    },
}

/// A request the state refuses, with RocketMQ's code and a remark that says why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: i32,
    pub remark: String,
}

impl Refusal {
    fn new(code: i32, remark: impl Into<String>) -> Refusal {
        Refusal {
            code,
            remark: remark.into(),
        }
    }
}

/// The master of a set as answers carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MasterInfo {
    pub master: Option<(i64, String)>,
    pub master_epoch: i32,
    pub sync_state_set: BTreeSet<i64>,
    pub sync_state_set_epoch: i32,
}

/// A master's proposal of a new SyncStateSet: who it is, at which master epoch, and the set
/// epoch it last saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proposal {
    pub master: i64,
    pub master_epoch: i32,
    pub members: BTreeSet<i64>,
    pub set_epoch: i32,
}

/// What an election decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Elected {
    /// A new master (the event raises both epochs).
    New {
        event: Event,
        master: i64,
        /// Why it is a master that may lack acknowledged messages, when it was taken from
        /// outside the SyncStateSet (`enableElectUncleanMaster`).
        unclean: Option<String>,
    },
    /// The master there is stays (CONTROLLER_MASTER_STILL_EXIST).
    Unchanged,
    /// Nobody can be master; a controller's own election records that (its event clears the
    /// master), a broker's or an admin's changes nothing.
    Nobody(Option<Event>),
}

/// Who asked for an election.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionBy {
    /// A broker, for its own set, with its id: only the first election takes it as asked.
    Broker(i64),
    /// An admin naming the replica to promote (`mqadmin electMaster`).
    Admin(i64),
    /// The controller, for a set whose master is gone.
    Controller,
}

impl Replicas {
    pub fn set(&self, name: &str) -> Option<&BrokerSet> {
        self.sets.get(name)
    }

    pub fn sets(&self) -> impl Iterator<Item = &BrokerSet> {
        self.sets.values()
    }

    /// Replicas registered in all sets: what `quiverControllerBrokersMax` bounds.
    pub fn replica_count(&self) -> usize {
        self.sets.values().map(|set| set.brokers.len()).sum()
    }

    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::ApplyBrokerId {
                cluster,
                name,
                id,
                address,
                check_code,
            } => {
                let set = self
                    .sets
                    .entry(name.clone())
                    .or_insert_with(|| BrokerSet::new(cluster, name));
                set.brokers.entry(*id).or_insert_with(|| Replica {
                    address: address.clone(),
                    check_code: check_code.clone(),
                });
                set.next_broker_id = set.next_broker_id.max(id.saturating_add(1));
            }
            Event::UpdateBrokerAddress { name, id, address } => {
                if let Some(replica) = self
                    .sets
                    .get_mut(name)
                    .and_then(|set| set.brokers.get_mut(id))
                {
                    replica.address.clone_from(address);
                }
            }
            Event::AlterSyncStateSet { name, set: members } => {
                if let Some(set) = self.sets.get_mut(name) {
                    set.sync_state_set.clone_from(members);
                    set.sync_state_set_epoch += 1;
                }
            }
            Event::ElectMaster { name, master } => {
                if let Some(set) = self.sets.get_mut(name) {
                    set.master_epoch += 1;
                    set.master = *master;
                    if let Some(master) = master {
                        set.sync_state_set = BTreeSet::from([*master]);
                        set.sync_state_set_epoch += 1;
                    }
                }
            }
            Event::CleanBrokerData { name, ids } => match ids {
                None => {
                    self.sets.remove(name);
                }
                Some(ids) => {
                    if let Some(set) = self.sets.get_mut(name) {
                        for id in ids {
                            set.brokers.remove(id);
                            set.sync_state_set.remove(id);
                            if set.master == Some(*id) {
                                set.master = None;
                            }
                        }
                        if set.brokers.is_empty() {
                            self.sets.remove(name);
                        }
                    }
                }
            },
        }
    }

    /// CONTROLLER_GET_NEXT_BROKER_ID: the id a new broker of the set should apply for.
    pub fn next_broker_id(&self, name: &str) -> i64 {
        self.sets
            .get(name)
            .map_or(FIRST_BROKER_ID, |set| set.next_broker_id)
    }

    /// CONTROLLER_APPLY_BROKER_ID: the event that gives the broker `id`, none when it has it
    /// already (the same check code), or the refusal. `replicas_max` bounds the replicas
    /// of all sets together.
    pub fn apply_broker_id(
        &self,
        cluster: &str,
        name: &str,
        id: i64,
        check_code: &str,
        replicas_max: usize,
    ) -> Result<Option<Event>, Refusal> {
        let address = check_code.split(';').next().unwrap_or_default();
        let event = || Event::ApplyBrokerId {
            cluster: cluster.to_string(),
            name: name.to_string(),
            id,
            address: address.to_string(),
            check_code: check_code.to_string(),
        };
        let refused = || {
            Refusal::new(
                response_code::CONTROLLER_BROKER_ID_INVALID,
                format!("Fail to apply brokerId: {id} in broker-set: {name}"),
            )
        };
        let full = || {
            Refusal::new(
                response_code::CONTROLLER_BROKER_ID_INVALID,
                format!(
                    "the controller holds quiverControllerBrokersMax ({replicas_max}) replicas; \
                     brokerId {id} of broker-set {name} is refused"
                ),
            )
        };
        match self.sets.get(name) {
            None if id == FIRST_BROKER_ID => {
                if self.replica_count() >= replicas_max {
                    return Err(full());
                }
                Ok(Some(event()))
            }
            None => Err(Refusal::new(
                response_code::CONTROLLER_BROKER_ID_INVALID,
                format!(
                    "Broker-set: {name} hasn't been registered in controller, but broker try to \
                     apply brokerId: {id}"
                ),
            )),
            Some(set) => match set.brokers.get(&id) {
                Some(replica) if replica.check_code == check_code => Ok(None),
                Some(_) => Err(refused()),
                None if id < FIRST_BROKER_ID => Err(refused()),
                None if self.replica_count() >= replicas_max => Err(full()),
                None => Ok(Some(event())),
            },
        }
    }

    /// CONTROLLER_REGISTER_BROKER: the broker's new address, if it moved, and its set's master
    /// when that master is alive.
    pub fn register(
        &self,
        name: &str,
        id: i64,
        address: &str,
        liveness: &Liveness,
        now_ms: i64,
    ) -> Result<(Option<Event>, MasterInfo), Refusal> {
        let Some(set) = self.sets.get(name) else {
            return Err(need_registration(name, id));
        };
        let Some(replica) = set.brokers.get(&id) else {
            return Err(need_registration(name, id));
        };
        let moved = (replica.address != address).then(|| Event::UpdateBrokerAddress {
            name: name.to_string(),
            id,
            address: address.to_string(),
        });
        let mut info = set.master_info();
        if let Some((master, _)) = &info.master {
            if !liveness.is_alive(name, *master, now_ms) {
                info.master = None;
            }
        }
        // The address it registers with is the one its set's answers name from now on.
        if let (Some((master, master_address)), Some(_)) = (&mut info.master, &moved) {
            if *master == id {
                *master_address = address.to_string();
            }
        }
        Ok((moved, info))
    }

    /// CONTROLLER_GET_REPLICA_INFO.
    pub fn replica_info(&self, name: &str) -> Result<MasterInfo, Refusal> {
        self.sets
            .get(name)
            .map(BrokerSet::master_info)
            .ok_or_else(|| {
                Refusal::new(
                    response_code::CONTROLLER_BROKER_METADATA_NOT_EXIST,
                    "Broker metadata is not existed",
                )
            })
    }

    /// CONTROLLER_ALTER_SYNC_STATE_SET: a master's proposal, checked as RocketMQ checks it.
    pub fn alter_sync_state_set(
        &self,
        name: &str,
        proposal: &Proposal,
        liveness: &Liveness,
        now_ms: i64,
    ) -> Result<Event, Refusal> {
        let Proposal {
            master,
            master_epoch,
            ref members,
            set_epoch,
        } = *proposal;
        let failed = |remark: String| {
            Refusal::new(
                response_code::CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                remark,
            )
        };
        let Some(set) = self.sets.get(name) else {
            return Err(failed(format!("broker-set {name} is not registered")));
        };
        if &set.sync_state_set == members {
            return Err(failed(format!(
                "the SyncStateSet of {name} is {members:?} already"
            )));
        }
        if set.master != Some(master) {
            return Err(Refusal::new(
                response_code::CONTROLLER_INVALID_MASTER,
                format!(
                    "broker {master} is not the master of {name} (the master is {:?})",
                    set.master
                ),
            ));
        }
        if set.master_epoch != master_epoch {
            return Err(Refusal::new(
                response_code::CONTROLLER_FENCED_MASTER_EPOCH,
                format!(
                    "master epoch {master_epoch} is fenced: {name} is at {}",
                    set.master_epoch
                ),
            ));
        }
        if set.sync_state_set_epoch != set_epoch {
            return Err(Refusal::new(
                response_code::CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                format!(
                    "SyncStateSet epoch {set_epoch} is fenced: {name} is at {}",
                    set.sync_state_set_epoch
                ),
            ));
        }
        for id in members {
            if !set.brokers.contains_key(id) {
                return Err(Refusal::new(
                    response_code::CONTROLLER_INVALID_REPLICAS,
                    format!("broker {id} is not a replica of {name}"),
                ));
            }
            if !liveness.is_alive(name, *id, now_ms) {
                return Err(Refusal::new(
                    response_code::CONTROLLER_BROKER_NOT_ALIVE,
                    format!("broker {id} of {name} is not alive"),
                ));
            }
        }
        if !members.contains(&master) {
            return Err(failed(format!(
                "the new SyncStateSet of {name} lacks its master {master}"
            )));
        }
        Ok(Event::AlterSyncStateSet {
            name: name.to_string(),
            set: members.clone(),
        })
    }

    /// CONTROLLER_ELECT_MASTER. The SyncStateSet's live replicas are the candidates, and with
    /// `unclean` every live replica after them. The master there is stays if it is alive (and
    /// not passed over by an admin); else an admin's choice, if alive; else the replica whose
    /// log is furthest (epoch, then end offset), then the lowest `brokerElectionPriority`,
    /// then the lowest id.
    pub fn elect(
        &self,
        name: &str,
        by: ElectionBy,
        unclean: bool,
        liveness: &Liveness,
        now_ms: i64,
    ) -> Result<Elected, Refusal> {
        let Some(set) = self.sets.get(name) else {
            let id = match by {
                ElectionBy::Broker(id) | ElectionBy::Admin(id) => id,
                ElectionBy::Controller => -1,
            };
            return Err(need_registration(name, id));
        };
        let new = |master: i64, unclean: Option<String>| Elected::New {
            event: Event::ElectMaster {
                name: name.to_string(),
                master: Some(master),
            },
            master,
            unclean,
        };
        // The first election of a set takes the broker that asks: nobody has a log to lose.
        if set.master_epoch == 0 {
            if let ElectionBy::Broker(id) | ElectionBy::Admin(id) = by {
                if !set.brokers.contains_key(&id) {
                    return Err(need_registration(name, id));
                }
                return Ok(new(id, None));
            }
        }
        let designated = match by {
            ElectionBy::Admin(id) => Some(id),
            _ => None,
        };
        let alive = |ids: &mut dyn Iterator<Item = i64>| -> Vec<i64> {
            ids.filter(|id| liveness.is_alive(name, *id, now_ms))
                .collect()
        };
        let in_sync = alive(&mut set.sync_state_set.iter().copied());
        let mut rounds = vec![(in_sync, false)];
        if unclean {
            let outside = alive(
                &mut set
                    .brokers
                    .keys()
                    .copied()
                    .filter(|id| !set.sync_state_set.contains(id)),
            );
            rounds.push((outside, true));
        }
        for (candidates, outside) in rounds {
            if candidates.is_empty() {
                continue;
            }
            if let Some(master) = set.master {
                let kept = designated.is_none_or(|d| d == master);
                if kept && candidates.contains(&master) {
                    return Ok(Elected::Unchanged);
                }
            }
            let chosen = match designated {
                Some(id) if candidates.contains(&id) => id,
                Some(_) => continue,
                None => *candidates
                    .iter()
                    .min_by_key(|id| liveness.election_rank(name, **id))
                    .expect("candidates is not empty"),
            };
            if set.master == Some(chosen) {
                return Ok(Elected::Unchanged);
            }
            let unclean = outside.then(|| unclean_loss(set, chosen, liveness));
            return Ok(new(chosen, unclean));
        }
        Ok(Elected::Nobody(matches!(by, ElectionBy::Controller).then(
            || Event::ElectMaster {
                name: name.to_string(),
                master: None,
            },
        )))
    }

    /// CLEAN_BROKER_DATA: `ids` of the set (none: the whole set), refused while any of them
    /// is alive unless `even_living`.
    pub fn clean(
        &self,
        name: &str,
        ids: Option<&str>,
        even_living: bool,
        liveness: &Liveness,
        now_ms: i64,
    ) -> Result<Event, Refusal> {
        let invalid = |remark: String| {
            Refusal::new(
                response_code::CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                remark,
            )
        };
        let Some(set) = self.sets.get(name) else {
            return Err(invalid(format!(
                "Broker {name} is not existed, clean up failure"
            )));
        };
        let ids = match ids.map(str::trim).filter(|ids| !ids.is_empty()) {
            None => None,
            Some(list) => {
                let parsed: Result<BTreeSet<i64>, _> =
                    list.split(';').map(|id| id.trim().parse::<i64>()).collect();
                Some(parsed.map_err(|_| {
                    invalid(format!("Please set the option <brokerControllerIdsToClean> according to the format, exception: {list}"))
                })?)
            }
        };
        if !even_living {
            let living = match &ids {
                None => {
                    set.master.is_some()
                        || set
                            .brokers
                            .keys()
                            .any(|id| liveness.is_alive(name, *id, now_ms))
                }
                Some(ids) => ids.iter().any(|id| liveness.is_alive(name, *id, now_ms)),
            };
            if living {
                return Err(invalid(format!(
                    "Broker {name} is still alive, clean up failure"
                )));
            }
        }
        Ok(Event::CleanBrokerData {
            name: name.to_string(),
            ids,
        })
    }
}

impl BrokerSet {
    fn new(cluster: &str, name: &str) -> BrokerSet {
        BrokerSet {
            cluster: cluster.to_string(),
            name: name.to_string(),
            next_broker_id: FIRST_BROKER_ID,
            brokers: BTreeMap::new(),
            master: None,
            master_epoch: 0,
            sync_state_set: BTreeSet::new(),
            sync_state_set_epoch: 0,
        }
    }

    pub fn master_info(&self) -> MasterInfo {
        MasterInfo {
            master: self.master.and_then(|id| {
                self.brokers
                    .get(&id)
                    .map(|replica| (id, replica.address.clone()))
            }),
            master_epoch: self.master_epoch,
            sync_state_set: self.sync_state_set.clone(),
            sync_state_set_epoch: self.sync_state_set_epoch,
        }
    }
}

fn need_registration(name: &str, id: i64) -> Refusal {
    Refusal::new(
        response_code::CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
        format!("Broker-set {name} or its broker {id} has not been registered in the controller"),
    )
}

/// What electing `chosen` from outside the SyncStateSet may lose: how far its log is behind
/// the furthest log any replica reported.
fn unclean_loss(set: &BrokerSet, chosen: i64, liveness: &Liveness) -> String {
    let end_of = |id: i64| liveness.reported(&set.name, id).map(|r| r.max_offset);
    let furthest = set.brokers.keys().filter_map(|id| end_of(*id)).max();
    match (end_of(chosen), furthest) {
        (Some(own), Some(furthest)) => format!(
            "broker {chosen} of {} is not in the SyncStateSet: messages acknowledged after \
             CommitLog offset {own} may be lost ({} bytes behind the furthest replica's reported end)",
            set.name,
            furthest.saturating_sub(own)
        ),
        _ => format!(
            "broker {chosen} of {} is not in the SyncStateSet: messages it never received may \
             be lost",
            set.name
        ),
    }
}

#[cfg(test)]
mod tests;
