//! The controller's state replicated over its nodes with Raft (openraft): the log of event
//! batches and the vote, kept in one file replaced whole and fsynced on every change; the state
//! machine (`Replicas`) applied from committed batches and kept in a file of its own after each
//! apply, which is also what a snapshot carries; and the transport, RocketMQ remoting frames on
//! the nodes' own addresses carrying openraft's requests as JSON (Quiver's own request codes).
//!
//! Both files go through the store's `durable_file`: a crash leaves the old content or the new.
//! The log stays small: a snapshot is taken every `SNAPSHOT_EVERY` entries and the log purged
//! behind it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::Cursor;
use std::net::SocketAddr;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use quiver_store::durable_file;
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{decode_frame, encode_frame, Command, Encoding};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::replicas::{Event, Replicas};

openraft::declare_raft_types!(
    /// The controller's Raft: entries carry batches of events; applying one answers nothing
    /// but that it was applied.
    pub TypeConfig:
        D = Events,
        R = (),
);

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig>;

/// The events one request made, applied together.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Events(pub Vec<Event>);

impl std::fmt::Display for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} events", self.0.len())
    }
}

/// Entries applied between snapshots; the log keeps `LOG_KEPT_BEHIND_SNAPSHOT` of them behind
/// the last one, for a follower a little behind.
const SNAPSHOT_EVERY: u64 = 200;
const LOG_KEPT_BEHIND_SNAPSHOT: u64 = 50;
/// Files under `controllerStorePath`.
const LOG_FILE: &str = "raft-log.json";
const STATE_FILE: &str = "raft-state.json";

/// openraft's settings for the controller: heartbeats every 100 ms, a leader presumed gone
/// after 1 to 2 s without them; brokers' own timeouts are 10 s.
pub fn config(group: &str) -> Arc<openraft::Config> {
    let config = openraft::Config {
        cluster_name: group.to_string(),
        heartbeat_interval: 100,
        election_timeout_min: 1_000,
        election_timeout_max: 2_000,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY),
        max_in_snapshot_log_to_keep: LOG_KEPT_BEHIND_SNAPSHOT,
        ..openraft::Config::default()
    };
    Arc::new(
        config
            .validate()
            .expect("the controller's Raft settings are valid"),
    )
}

/// Runs a file write and its fsyncs without holding up the runtime worker's other tasks.
fn off_the_worker<T>(write: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(write)
        }
        _ => write(),
    }
}

// ---- the log ----

/// What the log file holds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct LogFile {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
}

/// The Raft log and vote: in memory, and in a file replaced whole on every change before the
/// change is reported done.
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<LogFile>>,
    path: PathBuf,
}

impl LogStore {
    pub fn open(dir: &Path) -> Result<LogStore, String> {
        let path = dir.join(LOG_FILE);
        let file = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|error| format!("{}: {error}", path.display()))?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => LogFile::default(),
            Err(error) => return Err(format!("{}: {error}", path.display())),
        };
        Ok(LogStore {
            inner: Arc::new(Mutex::new(file)),
            path,
        })
    }

    fn file(&self) -> std::sync::MutexGuard<'_, LogFile> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the log as it is now; the lock is held throughout, so writes land in order.
    fn persist(&self, file: &LogFile) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(file).expect("the Raft log serializes");
        off_the_worker(|| durable_file::replace_file(&self.path, &bytes))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        Ok(self
            .file()
            .entries
            .range(range)
            .map(|(_, entry)| entry.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let file = self.file();
        let last = file
            .entries
            .values()
            .next_back()
            .map(|entry| entry.log_id)
            .or(file.last_purged);
        Ok(LogState {
            last_purged_log_id: file.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut file = self.file();
        file.vote = Some(*vote);
        self.persist(&file)
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.file().vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        let mut file = self.file();
        file.committed = committed;
        self.persist(&file)
            .map_err(|e| StorageIOError::write(&e).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.file().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut file = self.file();
        for entry in entries {
            file.entries.insert(entry.log_id.index, entry);
        }
        let written = self.persist(&file);
        let result = match &written {
            Ok(()) => Ok(()),
            Err(error) => Err(std::io::Error::new(error.kind(), error.to_string())),
        };
        callback.log_io_completed(result);
        written.map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut file = self.file();
        file.entries.retain(|index, _| *index < log_id.index);
        self.persist(&file)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut file = self.file();
        file.entries.retain(|index, _| *index > log_id.index);
        file.last_purged = Some(log_id);
        self.persist(&file)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}

// ---- the state machine ----

/// The applied state: what the state file and a snapshot hold.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Applied {
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
    pub replicas: Replicas,
}

/// A snapshot's metadata and bytes.
type BuiltSnapshot = (SnapshotMeta<NodeId, BasicNode>, Vec<u8>);

/// The state machine: the applied `Replicas`, shared with the node that decides requests from
/// it, and written after every apply.
#[derive(Clone)]
pub struct StateMachine {
    applied: Arc<Mutex<Applied>>,
    path: PathBuf,
    /// The last snapshot built or installed.
    snapshot: Arc<Mutex<Option<BuiltSnapshot>>>,
}

impl StateMachine {
    pub fn open(dir: &Path) -> Result<StateMachine, String> {
        let path = dir.join(STATE_FILE);
        let applied: Applied = durable_file::load(&path, |bytes| serde_json::from_slice(bytes))?;
        Ok(StateMachine {
            applied: Arc::new(Mutex::new(applied)),
            path,
            snapshot: Arc::new(Mutex::new(None)),
        })
    }

    pub fn applied(&self) -> std::sync::MutexGuard<'_, Applied> {
        self.applied.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn persist(&self, applied: &Applied) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(applied).expect("the state serializes");
        off_the_worker(|| durable_file::replace_keeping_backup(&self.path, &bytes))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let (meta, bytes) = {
            let applied = self.applied();
            let bytes = serde_json::to_vec(&*applied).expect("the state serializes");
            let id = applied.last_applied.map_or_else(
                || "0-0".to_string(),
                |id| format!("{}-{}", id.leader_id, id.index),
            );
            let meta = SnapshotMeta {
                last_log_id: applied.last_applied,
                last_membership: applied.membership.clone(),
                snapshot_id: id,
            };
            (meta, bytes)
        };
        *self.snapshot.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((meta.clone(), bytes.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let applied = self.applied();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // openraft applies one batch at a time, so the state can be copied, changed and written
        // without holding the lock through the fsync, and readers never wait on the disk.
        let mut next = self.applied().clone();
        let mut answers = Vec::new();
        for entry in entries {
            next.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(Events(events)) => {
                    for event in &events {
                        tracing::info!(?event, "controller state changed");
                        next.replicas.apply(event);
                    }
                }
                EntryPayload::Membership(membership) => {
                    next.membership = StoredMembership::new(Some(entry.log_id), membership);
                }
            }
            answers.push(());
        }
        self.persist(&next)
            .map_err(|e| StorageIOError::write_state_machine(&e))?;
        *self.applied() = next;
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let bytes = snapshot.into_inner();
        let installed: Applied = serde_json::from_slice(&bytes)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        self.persist(&installed)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        *self.applied() = installed;
        *self.snapshot.lock().unwrap_or_else(|p| p.into_inner()) = Some((meta.clone(), bytes));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let snapshot = self
            .snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Ok(snapshot.map(|(meta, bytes)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}

// ---- the transport ----

/// Reaches the other nodes at their peer addresses.
pub struct Network;

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, _target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            address: node.addr.clone(),
            connection: None,
            next_opaque: 1,
        }
    }
}

/// One other node: a connection kept between requests, opened again after a failure.
pub struct Peer {
    address: String,
    connection: Option<(TcpStream, BytesMut)>,
    next_opaque: i32,
}

/// A transport failure, as openraft's errors carry it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

impl Peer {
    /// Sends `request` with `code` and returns the node's answer, decoded.
    async fn call<Q: Serialize, A: serde::de::DeserializeOwned>(
        &mut self,
        code: i32,
        request: &Q,
        ttl: Duration,
    ) -> Result<A, TransportError> {
        let sent = tokio::time::timeout(ttl, self.exchange(code, request)).await;
        let answer = match sent {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) => {
                self.connection = None;
                return Err(error);
            }
            Err(_) => {
                self.connection = None;
                return Err(TransportError(format!(
                    "{} did not answer in {ttl:?}",
                    self.address
                )));
            }
        };
        if answer.code != response_code::SUCCESS {
            return Err(TransportError(format!(
                "{} refused: {}",
                self.address,
                answer.remark.unwrap_or_default()
            )));
        }
        serde_json::from_slice(&answer.body)
            .map_err(|error| TransportError(format!("{}: bad answer: {error}", self.address)))
    }

    async fn exchange<Q: Serialize>(
        &mut self,
        code: i32,
        request: &Q,
    ) -> Result<Command, TransportError> {
        let failed = |what: &str, error: std::io::Error| {
            TransportError(format!("{what} {}: {error}", self.address))
        };
        if self.connection.is_none() {
            let address: SocketAddr = self
                .address
                .parse()
                .map_err(|_| TransportError(format!("{} is not an ip:port", self.address)))?;
            let stream = TcpStream::connect(address)
                .await
                .map_err(|e| failed("cannot connect to", e))?;
            stream
                .set_nodelay(true)
                .map_err(|e| failed("cannot set up", e))?;
            self.connection = Some((stream, BytesMut::new()));
        }
        let opaque = self.next_opaque;
        self.next_opaque = self.next_opaque.wrapping_add(1);
        let body = serde_json::to_vec(request).expect("Raft requests serialize");
        let request = Command::request(code, Encoding::Json)
            .with_opaque(opaque)
            .with_body(body);
        let mut frame = BytesMut::new();
        encode_frame(&request, &mut frame).map_err(|e| TransportError(e.to_string()))?;
        let address = self.address.clone();
        let (stream, input) = self.connection.as_mut().expect("connected above");
        stream
            .write_all(&frame)
            .await
            .map_err(|e| TransportError(format!("cannot write to {address}: {e}")))?;
        loop {
            match decode_frame(input) {
                Ok(Some(answer)) if answer.opaque == opaque && answer.is_response() => {
                    return Ok(answer)
                }
                Ok(Some(_)) => continue,
                Ok(None) => {}
                Err(error) => return Err(TransportError(format!("{address}: {error}"))),
            }
            let read = stream
                .read_buf(input)
                .await
                .map_err(|e| TransportError(format!("cannot read from {address}: {e}")))?;
            if read == 0 {
                return Err(TransportError(format!("{address} closed the connection")));
            }
        }
    }
}

type RpcResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

/// What a node answers to a Raft request: openraft's own result, as JSON.
fn unreachable<E: std::error::Error>(
    error: TransportError,
) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
    if error.0.contains("cannot connect") {
        RPCError::Unreachable(Unreachable::new(&error))
    } else {
        RPCError::Network(NetworkError::new(&error))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        let answer: Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> = self
            .call(
                request_code::QUIVER_RAFT_APPEND_ENTRIES,
                &rpc,
                option.hard_ttl(),
            )
            .await
            .map_err(unreachable)?;
        answer.map_err(|error| RPCError::RemoteError(openraft::error::RemoteError::new(0, error)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let answer: Result<
            InstallSnapshotResponse<NodeId>,
            RaftError<NodeId, InstallSnapshotError>,
        > = self
            .call(
                request_code::QUIVER_RAFT_INSTALL_SNAPSHOT,
                &rpc,
                option.hard_ttl(),
            )
            .await
            .map_err(unreachable)?;
        answer.map_err(|error| RPCError::RemoteError(openraft::error::RemoteError::new(0, error)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>> {
        let answer: Result<VoteResponse<NodeId>, RaftError<NodeId>> = self
            .call(request_code::QUIVER_RAFT_VOTE, &rpc, option.hard_ttl())
            .await
            .map_err(unreachable)?;
        answer.map_err(|error| RPCError::RemoteError(openraft::error::RemoteError::new(0, error)))
    }
}

/// Answers a Raft request from another node: openraft's result as the JSON body.
pub async fn serve(raft: &Raft, request: &Command) -> Command {
    fn answer<T: Serialize>(request: &Command, result: &T) -> Command {
        request
            .response_to(response_code::SUCCESS)
            .with_body(serde_json::to_vec(result).expect("Raft answers serialize"))
    }
    let refused = |error: serde_json::Error| {
        request
            .response_to(response_code::SYSTEM_ERROR)
            .with_remark(format!("bad Raft request: {error}"))
    };
    match request.code {
        request_code::QUIVER_RAFT_APPEND_ENTRIES => {
            match serde_json::from_slice::<AppendEntriesRequest<TypeConfig>>(&request.body) {
                Ok(rpc) => answer(request, &raft.append_entries(rpc).await),
                Err(error) => refused(error),
            }
        }
        request_code::QUIVER_RAFT_VOTE => {
            match serde_json::from_slice::<VoteRequest<NodeId>>(&request.body) {
                Ok(rpc) => answer(request, &raft.vote(rpc).await),
                Err(error) => refused(error),
            }
        }
        request_code::QUIVER_RAFT_INSTALL_SNAPSHOT => {
            match serde_json::from_slice::<InstallSnapshotRequest<TypeConfig>>(&request.body) {
                Ok(rpc) => answer(request, &raft.install_snapshot(rpc).await),
                Err(error) => refused(error),
            }
        }
        _ => request
            .response_to(response_code::REQUEST_CODE_NOT_SUPPORTED)
            .with_remark(format!("request type {} not supported", request.code)),
    }
}

/// Whether `code` is one of the nodes' own Raft requests.
pub fn is_raft_request(code: i32) -> bool {
    matches!(
        code,
        request_code::QUIVER_RAFT_APPEND_ENTRIES
            | request_code::QUIVER_RAFT_VOTE
            | request_code::QUIVER_RAFT_INSTALL_SNAPSHOT
    )
}
