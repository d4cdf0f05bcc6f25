//! One controller node: its Raft member (log, state machine, transport), the liveness it sees
//! itself, and its settings. Requests that change the state are decided one at a time on the
//! leader from the state it has applied; their events are committed by a majority of the nodes
//! and applied before the request is answered, so an answer never names an epoch a failover of
//! the controller could forget. Other nodes refuse them with CONTROLLER_NOT_LEADER, and brokers
//! ask any node where the leader is.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};

use openraft::error::{ClientWriteError, RaftError};
use openraft::BasicNode;
use quiver_wire::code::response_code;

use crate::config::ControllerConfig;
use crate::liveness::Liveness;
use crate::raft::{self, Events, LogStore, Network, NodeId, Raft, StateMachine};
use crate::replicas::{Event, Refusal, Replicas};

pub struct Controller {
    config: Mutex<ControllerConfig>,
    state: StateMachine,
    liveness: Mutex<Liveness>,
    raft: Raft,
    id: NodeId,
    /// Where this node serves RocketMQ's requests (its peer address, as bound).
    address: SocketAddr,
    /// Held from deciding a change to its commit: the next decision sees the last one applied.
    deciding: tokio::sync::Mutex<()>,
}

/// The remark of CONTROLLER_NOT_LEADER, as RocketMQ words it.
pub const NOT_LEADER: &str = "The controller is not in leader state";

impl Controller {
    /// Opens this node's log and state under the store path and joins the Raft group of the
    /// configured peers (forming it, on first start, with all of them as voters).
    pub async fn open(config: ControllerConfig, address: SocketAddr) -> Result<Controller, String> {
        std::fs::create_dir_all(&config.store_path).map_err(|error| {
            format!(
                "cannot create controllerStorePath {}: {error}",
                config.store_path.display()
            )
        })?;
        let id = config
            .peers
            .iter()
            .position(|(id, _)| id == &config.self_id)
            .ok_or_else(|| {
                format!(
                    "controllerDLegerSelfId {} is not among controllerDLegerPeers",
                    config.self_id
                )
            })? as NodeId;
        let log = LogStore::open(&config.store_path)?;
        let state = StateMachine::open(&config.store_path)?;
        let raft = Raft::new(id, raft::config(&config.group), Network, log, state.clone())
            .await
            .map_err(|error| format!("the controller's Raft did not start: {error}"))?;
        let members: BTreeMap<NodeId, BasicNode> = config
            .peers
            .iter()
            .enumerate()
            .map(|(index, (_, addr))| {
                (
                    index as NodeId,
                    BasicNode {
                        addr: addr.to_string(),
                    },
                )
            })
            .collect();
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|error| format!("the controller's Raft stopped: {error}"))?;
        if !initialized {
            // Every node forms the group with the same members; a node that finds it formed
            // already is told so, which is fine.
            if let Err(error) = raft.initialize(members).await {
                tracing::debug!(%error, "Raft group formed already");
            }
        }
        tracing::info!(
            path = %config.store_path.display(),
            node = id,
            peers = config.peers.len(),
            broker_sets = state.applied().replicas.sets().count(),
            "controller node open"
        );
        Ok(Controller {
            config: Mutex::new(config),
            state,
            liveness: Mutex::new(Liveness::default()),
            raft,
            id,
            address,
            deciding: tokio::sync::Mutex::new(()),
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    pub fn config(&self) -> MutexGuard<'_, ControllerConfig> {
        self.config.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn liveness(&self) -> MutexGuard<'_, Liveness> {
        self.liveness.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the applied state.
    pub fn read<T>(&self, read: impl FnOnce(&Replicas) -> T) -> T {
        read(&self.state.applied().replicas)
    }

    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.id)
    }

    /// The leader's peer id and address, when this node knows one.
    pub fn leader(&self) -> Option<(String, String)> {
        let leader = self.raft.metrics().borrow().current_leader?;
        let config = self.config();
        config
            .peers
            .get(leader as usize)
            .map(|(id, addr)| (id.clone(), addr.to_string()))
    }

    /// Refuses on a node that does not lead.
    pub fn must_lead(&self) -> Result<(), Refusal> {
        if self.is_leader() {
            Ok(())
        } else {
            Err(Refusal {
                code: response_code::CONTROLLER_NOT_LEADER,
                remark: NOT_LEADER.to_string(),
            })
        }
    }

    /// Decides a change from the applied state and the liveness this node sees, commits its
    /// events through Raft, and returns what `decide` returned once they are applied. One
    /// change at a time; refused on a node that does not lead.
    pub async fn change<T>(
        &self,
        decide: impl FnOnce(&Replicas, &Liveness) -> Result<(Vec<Event>, T), Refusal>,
    ) -> Result<T, Refusal> {
        let _turn = self.deciding.lock().await;
        self.must_lead()?;
        let (events, decided) = {
            let applied = self.state.applied();
            let liveness = self.liveness();
            decide(&applied.replicas, &liveness)?
        };
        if events.is_empty() {
            return Ok(decided);
        }
        match self.raft.client_write(Events(events)).await {
            Ok(_) => Ok(decided),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => Err(Refusal {
                code: response_code::CONTROLLER_NOT_LEADER,
                remark: NOT_LEADER.to_string(),
            }),
            Err(error) => Err(Refusal {
                code: response_code::SYSTEM_ERROR,
                remark: format!("the controller could not commit the change: {error}"),
            }),
        }
    }

    /// Stops this node's Raft member.
    pub async fn shutdown(&self) {
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "the controller's Raft did not stop cleanly");
        }
    }
}
