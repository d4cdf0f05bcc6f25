//! One function per request code the controller serves; each decides from the state, commits
//! what it changes, and returns the answer (and, for an election, the role changes to tell the
//! set's live brokers). Nothing here touches a socket.

use quiver_wire::body::{
    self, BrokerMemberGroup, BrokerReplicasInfo, ElectMasterResponseBody, ReplicaIdentity,
    ReplicasInfo, SyncStateSet,
};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{
    ext_or_err, AlterSyncStateSetRequestHeader, ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader, CleanControllerBrokerDataRequestHeader, ElectMasterRequestHeader,
    GetNextBrokerIdRequestHeader, GetReplicaInfoRequestHeader, HeaderError, MasterInfoHeader,
    NotifyBrokerRoleChangedRequestHeader, RegisterBrokerToControllerRequestHeader,
};
use quiver_wire::{Command, Encoding, ExtFields};

use crate::liveness::Heartbeat;
use crate::node::Controller;
use crate::replicas::{Elected, ElectionBy, MasterInfo, Proposal, Refusal};

/// What a handler sees besides the request.
pub struct Call<'a> {
    pub controller: &'a Controller,
    /// The connection the request came on: a broker's heartbeats are tied to it.
    pub connection: u64,
    pub now_ms: i64,
}

/// An answer, and requests to send to brokers because of it.
pub struct Handled {
    pub response: Command,
    /// (broker address, NOTIFY_BROKER_ROLE_CHANGED) for each live broker of a set that has a
    /// new master.
    pub notify: Vec<(String, Command)>,
}

impl From<Command> for Handled {
    fn from(response: Command) -> Handled {
        Handled {
            response,
            notify: Vec::new(),
        }
    }
}

/// Answers one request. Unknown codes get REQUEST_CODE_NOT_SUPPORTED; missing or bad header
/// fields SYSTEM_ERROR naming the field.
pub async fn handle(call: &Call<'_>, request: &Command) -> Handled {
    let handled = match request.code {
        request_code::BROKER_HEARTBEAT => heartbeat(call, request),
        request_code::CONTROLLER_ALTER_SYNC_STATE_SET => alter_sync_state_set(call, request).await,
        request_code::CONTROLLER_ELECT_MASTER => elect_master(call, request).await,
        request_code::CONTROLLER_REGISTER_BROKER => register_broker(call, request).await,
        request_code::CONTROLLER_GET_REPLICA_INFO => replica_info(call, request),
        request_code::CONTROLLER_GET_METADATA_INFO => metadata(call, request),
        request_code::CONTROLLER_GET_SYNC_STATE_DATA => sync_state_data(call, request),
        request_code::UPDATE_CONTROLLER_CONFIG => update_config(call, request),
        request_code::GET_CONTROLLER_CONFIG => get_config(call, request),
        request_code::CLEAN_BROKER_DATA => clean_broker_data(call, request).await,
        request_code::CONTROLLER_GET_NEXT_BROKER_ID => next_broker_id(call, request),
        request_code::CONTROLLER_APPLY_BROKER_ID => apply_broker_id(call, request).await,
        _ => {
            return request
                .response_to(response_code::REQUEST_CODE_NOT_SUPPORTED)
                .with_remark(format!(" request type {} not supported", request.code))
                .into()
        }
    };
    match handled {
        Ok(handled) => handled,
        Err(error) => request
            .response_to(response_code::SYSTEM_ERROR)
            .with_remark(error.to_string())
            .into(),
    }
}

fn refused(request: &Command, refusal: Refusal) -> Handled {
    request
        .response_to(refusal.code)
        .with_remark(refusal.remark)
        .into()
}

fn heartbeat(call: &Call<'_>, request: &Command) -> Result<Handled, HeaderError> {
    let header = BrokerHeartbeatRequestHeader::from_ext(ext_or_err(request)?)?;
    let Some(id) = header.broker_id else {
        return Ok(refused(
            request,
            Refusal {
                code: response_code::CONTROLLER_INVALID_REQUEST,
                remark: "Heart beat with empty brokerId".into(),
            },
        ));
    };
    let beat = Heartbeat {
        cluster: header.cluster_name,
        name: header.broker_name,
        id,
        address: header.broker_addr,
        epoch: header.epoch.unwrap_or(-1),
        max_offset: header.max_offset.unwrap_or(-1),
        confirm_offset: header.confirm_offset.unwrap_or(-1),
        timeout_ms: header
            .heartbeat_timeout_millis
            .unwrap_or(10_000)
            .clamp(1_000, 600_000),
        priority: header.election_priority.unwrap_or(i32::MAX),
    };
    let brokers_max = call.controller.config().brokers_max;
    let known =
        call.controller
            .liveness()
            .heartbeat(beat, call.connection, call.now_ms, brokers_max);
    if let Err(full) = known {
        tracing::warn!(%full, "broker heartbeat ignored");
        return Ok(refused(
            request,
            Refusal {
                code: response_code::SYSTEM_BUSY,
                remark: full.to_string(),
            },
        ));
    }
    // Whether this node leads: a master extends its lease only with the leader's answers, as
    // only the leader elects (Quiver's own field; RocketMQ's brokers ignore it).
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_ext(ExtFields::new().with("isLeader", call.controller.is_leader()))
        .with_remark("Heart beat success")
        .into())
}

async fn alter_sync_state_set(call: &Call<'_>, request: &Command) -> Result<Handled, HeaderError> {
    let header = AlterSyncStateSetRequestHeader::from_ext(ext_or_err(request)?)?;
    let failed_epoch = ExtFields::new().with("newSyncStateSetEpoch", 0);
    let proposed: SyncStateSet = match body::from_json(&request.body) {
        Ok(set) => set,
        Err(error) => {
            return Ok(request
                .response_to(response_code::CONTROLLER_ALTER_SYNC_STATE_SET_FAILED)
                .with_ext(failed_epoch)
                .with_remark(error.to_string())
                .into())
        }
    };
    let proposal = Proposal {
        master: header.master_broker_id,
        master_epoch: header.master_epoch,
        members: proposed.sync_state_set,
        set_epoch: proposed.sync_state_set_epoch,
    };
    let controller = call.controller;
    let changed = controller
        .change(|state, liveness| {
            let event = state.alter_sync_state_set(
                &header.broker_name,
                &proposal,
                liveness,
                call.now_ms,
            )?;
            Ok((vec![event], ()))
        })
        .await;
    if let Err(refusal) = changed {
        let mut handled = refused(request, refusal);
        handled.response = handled.response.with_ext(failed_epoch);
        return Ok(handled);
    }
    let answer = controller.read(|state| {
        state.set(&header.broker_name).map(|set| SyncStateSet {
            sync_state_set: set.sync_state_set.clone(),
            sync_state_set_epoch: set.sync_state_set_epoch,
        })
    });
    let answer = answer.unwrap_or_default();
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_ext(ExtFields::new().with("newSyncStateSetEpoch", answer.sync_state_set_epoch))
        .with_body(body::to_json(&answer))
        .into())
}

async fn elect_master(call: &Call<'_>, request: &Command) -> Result<Handled, HeaderError> {
    let header = ElectMasterRequestHeader::from_ext(ext_or_err(request)?)?;
    let by = match (header.designate_elect, header.broker_id) {
        (true, id) => ElectionBy::Admin(id),
        (false, id) if id > 0 => ElectionBy::Broker(id),
        (false, _) => ElectionBy::Controller,
    };
    let Election {
        code,
        remark,
        info,
        members,
        notify,
    } = elect(call.controller, &header.broker_name, by, call.now_ms).await;
    let mut response = request
        .response_to(code)
        .with_ext(master_header(&info).to_ext());
    if let Some(remark) = remark {
        response = response.with_remark(remark);
    }
    if code == response_code::SUCCESS || code == response_code::CONTROLLER_MASTER_STILL_EXIST {
        let body = ElectMasterResponseBody {
            broker_member_group: members,
            sync_state_set: info.sync_state_set.clone(),
        };
        response = response.with_body(body::to_json(&body));
    }
    Ok(Handled { response, notify })
}

/// How an election went: the answer's code and remark, the set's master as it stands after,
/// its members (when a master was elected) and the role changes to send.
pub struct Election {
    pub code: i32,
    pub remark: Option<String>,
    pub info: MasterInfo,
    pub members: Option<BrokerMemberGroup>,
    pub notify: Vec<(String, Command)>,
}

/// Runs an election for the set `name` and commits it. Also what the controller runs itself
/// when a master is gone.
pub async fn elect(controller: &Controller, name: &str, by: ElectionBy, now_ms: i64) -> Election {
    let (unclean, notify_enabled) = {
        let config = controller.config();
        (
            config.elect_unclean_master,
            config.notify_broker_role_changed,
        )
    };
    let decided = controller
        .change(|state, liveness| {
            let elected = state.elect(name, by, unclean, liveness, now_ms)?;
            let events = match &elected {
                Elected::New { event, .. } | Elected::Nobody(Some(event)) => vec![event.clone()],
                _ => Vec::new(),
            };
            Ok((events, elected))
        })
        .await;
    let outcome = |code: i32, remark: String| Election {
        code,
        remark: Some(remark),
        info: controller.read(|state| {
            state
                .set(name)
                .map(|set| set.master_info())
                .unwrap_or_default()
        }),
        members: None,
        notify: Vec::new(),
    };
    let elected = match decided {
        Ok(elected) => elected,
        Err(refusal) => return outcome(refusal.code, refusal.remark),
    };
    let (master, loss) = match elected {
        Elected::Unchanged => {
            let remark = format!("the master of {name} is still alive");
            return outcome(response_code::CONTROLLER_MASTER_STILL_EXIST, remark);
        }
        Elected::Nobody(event) => {
            let code = match &event {
                Some(_) => response_code::CONTROLLER_MASTER_NOT_AVAILABLE,
                None => response_code::CONTROLLER_ELECT_MASTER_FAILED,
            };
            tracing::warn!(
                broker_set = name,
                ?by,
                "election found no replica to be master"
            );
            let remark =
                format!("no replica of {name} can be master: none in its SyncStateSet is alive");
            return outcome(code, remark);
        }
        Elected::New {
            master, unclean, ..
        } => (master, unclean),
    };
    if let Some(loss) = &loss {
        tracing::warn!(broker_set = name, master, "unclean election: {loss}");
    }
    let (info, members) = controller.read(|state| {
        let set = state.set(name).expect("an elected set exists");
        let members = BrokerMemberGroup {
            broker_addrs: set
                .brokers
                .iter()
                .map(|(id, replica)| (*id, replica.address.clone()))
                .collect(),
            broker_name: set.name.clone(),
            cluster: set.cluster.clone(),
        };
        (set.master_info(), members)
    });
    tracing::info!(
        broker_set = name,
        master,
        master_epoch = info.master_epoch,
        ?by,
        "master elected"
    );
    let notify = if notify_enabled {
        role_changes(&info, &controller.liveness().alive_in(name, now_ms))
    } else {
        Vec::new()
    };
    Election {
        code: response_code::SUCCESS,
        remark: loss,
        info,
        members: Some(members),
        notify,
    }
}

/// NOTIFY_BROKER_ROLE_CHANGED for each live broker of a set with a new master.
fn role_changes(info: &MasterInfo, alive: &[(i64, String)]) -> Vec<(String, Command)> {
    let header = NotifyBrokerRoleChangedRequestHeader {
        master_address: info.master.as_ref().map(|(_, address)| address.clone()),
        master_epoch: Some(info.master_epoch),
        sync_state_set_epoch: Some(info.sync_state_set_epoch),
        master_broker_id: info.master.as_ref().map(|(id, _)| *id),
    };
    let body = body::to_json(&SyncStateSet {
        sync_state_set: info.sync_state_set.clone(),
        sync_state_set_epoch: info.sync_state_set_epoch,
    });
    alive
        .iter()
        .map(|(_, address)| {
            let notify = Command::request(request_code::NOTIFY_BROKER_ROLE_CHANGED, Encoding::Json)
                .with_ext(header.to_ext())
                .with_body(body.clone())
                .oneway();
            (address.clone(), notify)
        })
        .collect()
}

fn master_header(info: &MasterInfo) -> MasterInfoHeader {
    MasterInfoHeader {
        master_broker_id: info.master.as_ref().map(|(id, _)| *id),
        master_address: info.master.as_ref().map(|(_, address)| address.clone()),
        master_epoch: Some(info.master_epoch),
        sync_state_set_epoch: Some(info.sync_state_set_epoch),
    }
}

fn sync_state_set_body(info: &MasterInfo) -> Vec<u8> {
    body::to_json(&SyncStateSet {
        sync_state_set: info.sync_state_set.clone(),
        sync_state_set_epoch: info.sync_state_set_epoch,
    })
}

async fn register_broker(call: &Call<'_>, request: &Command) -> Result<Handled, HeaderError> {
    let header = RegisterBrokerToControllerRequestHeader::from_ext(ext_or_err(request)?)?;
    let controller = call.controller;
    let registered = controller
        .change(|state, liveness| {
            let (moved, info) = state.register(
                &header.broker_name,
                header.broker_id,
                &header.broker_address,
                liveness,
                call.now_ms,
            )?;
            Ok((moved.into_iter().collect(), info))
        })
        .await;
    let info = match registered {
        Ok(info) => info,
        Err(refusal) => return Ok(refused(request, refusal)),
    };
    let mut ext = ExtFields::new()
        .with("clusterName", header.cluster_name)
        .with("brokerName", header.broker_name);
    if info.master.is_some() {
        let master = master_header(&info).to_ext();
        for (key, value) in master.iter() {
            ext.insert(key.to_string(), value.to_string());
        }
    }
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_ext(ext)
        .with_body(sync_state_set_body(&info))
        .into())
}

fn replica_info(call: &Call<'_>, request: &Command) -> Result<Handled, HeaderError> {
    let header = GetReplicaInfoRequestHeader::from_ext(ext_or_err(request)?)?;
    if let Err(refusal) = call.controller.must_lead() {
        return Ok(refused(request, refusal));
    }
    let info = match call
        .controller
        .read(|state| state.replica_info(&header.broker_name))
    {
        Ok(info) => info,
        Err(refusal) => return Ok(refused(request, refusal)),
    };
    let mut ext = master_header(&info);
    ext.sync_state_set_epoch = None;
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_ext(ext.to_ext())
        .with_body(sync_state_set_body(&info))
        .into())
}

fn metadata(call: &Call<'_>, request: &Command) -> Result<Handled, HeaderError> {
    let controller = call.controller;
    let leader = controller.leader();
    let config = controller.config();
    let mut ext = ExtFields::new()
        .with("group", config.group.clone())
        .with(
            "controllerLeaderId",
            leader
                .as_ref()
                .map(|(id, _)| id.clone())
                .unwrap_or_default(),
        )
        .with("isLeader", controller.is_leader())
        .with("peers", config.peers_text());
    if let Some((_, address)) = leader {
        ext = ext.with("controllerLeaderAddress", address);
    }
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_ext(ext)
        .into())
}

fn sync_state_data(call: &Call<'_>, request: &Command) -> Result<Handled, HeaderError> {
    let names: Vec<String> = match body::from_json(&request.body) {
        Ok(names) => names,
        Err(_) => {
            return Ok(request
                .response_to(response_code::SYSTEM_ERROR)
                .with_remark("not set any response code")
                .into())
        }
    };
    let controller = call.controller;
    if let Err(refusal) = controller.must_lead() {
        return Ok(refused(request, refusal));
    }
    let liveness = controller.liveness();
    let mut table = std::collections::BTreeMap::new();
    controller.read(|state| {
        for name in names {
            let Some(set) = state.set(&name) else {
                continue;
            };
            let identity = |id: i64, address: &str| ReplicaIdentity {
                alive: liveness.is_alive(&name, id, call.now_ms),
                broker_address: address.to_string(),
                broker_id: id,
                broker_name: name.clone(),
            };
            let (in_sync, not_in_sync): (Vec<_>, Vec<_>) = set
                .brokers
                .iter()
                .map(|(id, replica)| {
                    (
                        set.sync_state_set.contains(id),
                        identity(*id, &replica.address),
                    )
                })
                .partition(|(in_sync, _)| *in_sync);
            let info = set.master_info();
            table.insert(
                name.clone(),
                ReplicasInfo {
                    in_sync_replicas: in_sync.into_iter().map(|(_, r)| r).collect(),
                    master_address: info
                        .master
                        .as_ref()
                        .map(|(_, a)| a.clone())
                        .unwrap_or_default(),
                    master_broker_id: info.master.as_ref().map_or(-1, |(id, _)| *id),
                    master_epoch: info.master_epoch,
                    not_in_sync_replicas: not_in_sync.into_iter().map(|(_, r)| r).collect(),
                    sync_state_set_epoch: info.sync_state_set_epoch,
                },
            );
        }
    });
    let answer = BrokerReplicasInfo {
        replicas_info_table: table,
    };
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_body(body::to_json(&answer))
        .into())
}

/// UPDATE_CONTROLLER_CONFIG: the keys a running controller takes (`enableElectUncleanMaster`,
/// `notifyBrokerRoleChanged`, `electMasterMaxRetryCount`, `quiverControllerBrokersMax`); where
/// it keeps its state, who its peers are, its scan period and its byte bound cannot change
/// while it runs.
fn update_config(call: &Call<'_>, request: &Command) -> Result<Handled, HeaderError> {
    const FIXED: [&str; 8] = [
        "configBlackList",
        "configStorePath",
        "controllerStorePath",
        "controllerDLegerPeers",
        "controllerDLegerSelfId",
        "controllerDLegerGroup",
        "scanNotActiveBrokerInterval",
        "quiverControllerBytesMax",
    ];
    let text = String::from_utf8_lossy(&request.body);
    let fixed = quiver_wire::properties::entries(&text)
        .filter_map(Result::ok)
        .any(|(_, key, _)| FIXED.contains(&key));
    if fixed {
        return Ok(request
            .response_to(response_code::NO_PERMISSION)
            .with_remark("Can not update config in black list.")
            .into());
    }
    let mut config = call.controller.config();
    let mut updated = config.clone();
    match updated.apply_properties(&text) {
        Ok(others) if others.is_empty() => {
            *config = updated;
            Ok(request.response_to(response_code::SUCCESS).into())
        }
        Ok(others) => Ok(request
            .response_to(response_code::SYSTEM_ERROR)
            .with_remark(format!("unknown controller keys: {}", others.join(", ")))
            .into()),
        Err(error) => Ok(request
            .response_to(response_code::SYSTEM_ERROR)
            .with_remark(error.to_string())
            .into()),
    }
}

fn get_config(call: &Call<'_>, request: &Command) -> Result<Handled, HeaderError> {
    let text = call.controller.config().properties();
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_body(text.into_bytes())
        .into())
}

async fn clean_broker_data(call: &Call<'_>, request: &Command) -> Result<Handled, HeaderError> {
    let header = CleanControllerBrokerDataRequestHeader::from_ext(ext_or_err(request)?)?;
    let cleaned = call
        .controller
        .change(|state, liveness| {
            let event = state.clean(
                &header.broker_name,
                header.broker_controller_ids_to_clean.as_deref(),
                header.is_clean_living_broker,
                liveness,
                call.now_ms,
            )?;
            Ok((vec![event], ()))
        })
        .await;
    match cleaned {
        Ok(()) => Ok(request.response_to(response_code::SUCCESS).into()),
        Err(refusal) => Ok(refused(request, refusal)),
    }
}

fn next_broker_id(call: &Call<'_>, request: &Command) -> Result<Handled, HeaderError> {
    let header = GetNextBrokerIdRequestHeader::from_ext(ext_or_err(request)?)?;
    if let Err(refusal) = call.controller.must_lead() {
        return Ok(refused(request, refusal));
    }
    let next = call
        .controller
        .read(|state| state.next_broker_id(&header.broker_name));
    let ext = ExtFields::new()
        .with("clusterName", header.cluster_name)
        .with("brokerName", header.broker_name)
        .with("nextBrokerId", next);
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_ext(ext)
        .into())
}

async fn apply_broker_id(call: &Call<'_>, request: &Command) -> Result<Handled, HeaderError> {
    let header = ApplyBrokerIdRequestHeader::from_ext(ext_or_err(request)?)?;
    let controller = call.controller;
    let brokers_max = controller.config().brokers_max;
    let applied = controller
        .change(|state, _| {
            let event = state.apply_broker_id(
                &header.cluster_name,
                &header.broker_name,
                header.applied_broker_id,
                &header.register_check_code,
                brokers_max,
            )?;
            Ok((event.into_iter().collect(), ()))
        })
        .await;
    if let Err(refusal) = applied {
        return Ok(refused(request, refusal));
    }
    let ext = ExtFields::new()
        .with("clusterName", header.cluster_name)
        .with("brokerName", header.broker_name);
    Ok(request
        .response_to(response_code::SUCCESS)
        .with_ext(ext)
        .into())
}
