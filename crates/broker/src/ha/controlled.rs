//! What a broker in controller mode holds of the controller's decisions: its own id, the
//! master epoch it acts under, its SyncStateSet while it is master, the lease its heartbeats
//! keep, the epoch file, and the role change the controller asked for last. The controller
//! client (`controller_mode.rs`) writes it; the send path, the HA sessions and the handlers
//! read it. It does no I/O but the epoch file's, which its callers run off the runtime.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};
use std::sync::Mutex;

use quiver_store::{EpochFile, EpochFileError};
use tokio::sync::Notify;

use crate::config::BrokerConfig;

/// A master and its set as the controller announced them (an answer to REGISTER, ELECT or
/// GET_REPLICA_INFO, or a NOTIFY_BROKER_ROLE_CHANGED).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleChange {
    pub master_broker_id: i64,
    pub master_address: String,
    pub master_epoch: i32,
    pub sync_state_set_epoch: i32,
    pub sync_state_set: BTreeSet<i64>,
}

/// A master's SyncStateSet and its epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncSet {
    pub members: BTreeSet<i64>,
    pub epoch: i32,
}

pub struct Controlled {
    /// The id the controller gave this broker; 0 until it has one.
    own_id: AtomicI64,
    /// The master epoch this broker acts under (0: none yet). A role change acts only for a
    /// higher one.
    master_epoch: AtomicI32,
    /// Sends are refused while set: at start, before the controller said which role this
    /// broker has, and during a role change.
    fenced: AtomicBool,
    /// Until when (wall-clock ms) a master may acknowledge sends: a controller answered a
    /// heartbeat `controllerHeartBeatTimeoutMills` before.
    lease_until_ms: AtomicI64,
    pub sync_set: Mutex<SyncSet>,
    /// The master's broker address this slave follows, as the controller named it; the name
    /// server's word on the master's HA address counts only for it.
    master_address: Mutex<Option<String>>,
    /// The epoch file: appended on becoming master and when a master's stream enters a new
    /// epoch, cut with the log. Written off the runtime (it fsyncs).
    pub epochs: Mutex<EpochFile>,
    /// The last role change the controller pushed, for the controller client to act on.
    pushed: Mutex<Option<RoleChange>>,
    pub pushed_signal: Notify,
    pub all_ack: bool,
    pub in_sync_replicas: u32,
    pub min_in_sync_replicas: u32,
}

/// A send refused before it is written, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendRefused {
    /// No role yet, or a role change under way.
    Fenced,
    /// A master whose lease ran out: no controller has answered its heartbeats.
    LeaseExpired,
    /// The SyncStateSet is smaller than `minInSyncReplicas`.
    InSyncReplicasNotEnough,
}

impl Controlled {
    pub fn new(config: &BrokerConfig, epochs: EpochFile) -> Controlled {
        Controlled {
            own_id: AtomicI64::new(0),
            master_epoch: AtomicI32::new(0),
            fenced: AtomicBool::new(true),
            lease_until_ms: AtomicI64::new(0),
            sync_set: Mutex::new(SyncSet::default()),
            master_address: Mutex::new(None),
            epochs: Mutex::new(epochs),
            pushed: Mutex::new(None),
            pushed_signal: Notify::new(),
            all_ack: config.controller.all_ack_in_sync_state_set,
            in_sync_replicas: config.in_sync_replicas,
            min_in_sync_replicas: config.min_in_sync_replicas,
        }
    }

    pub fn own_id(&self) -> i64 {
        self.own_id.load(Ordering::Acquire)
    }

    pub fn set_own_id(&self, id: i64) {
        self.own_id.store(id, Ordering::Release);
    }

    pub fn master_epoch(&self) -> i32 {
        self.master_epoch.load(Ordering::Acquire)
    }

    pub fn set_master_epoch(&self, epoch: i32) {
        self.master_epoch.store(epoch, Ordering::Release);
    }

    pub fn fence(&self, fenced: bool) {
        self.fenced.store(fenced, Ordering::Release);
    }

    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// A controller answered a heartbeat at `now_ms`: sends may be acknowledged until
    /// `now_ms + timeout_ms`.
    pub fn extend_lease(&self, now_ms: i64, timeout_ms: u64) {
        let until = now_ms.saturating_add(timeout_ms as i64);
        self.lease_until_ms.fetch_max(until, Ordering::AcqRel);
    }

    pub fn lease_holds(&self, now_ms: i64) -> bool {
        self.lease_until_ms.load(Ordering::Acquire) >= now_ms
    }

    /// Why a master refuses a send at `now_ms`, if it does.
    pub fn refuses_send(&self, now_ms: i64) -> Option<SendRefused> {
        if self.is_fenced() {
            return Some(SendRefused::Fenced);
        }
        if !self.lease_holds(now_ms) {
            return Some(SendRefused::LeaseExpired);
        }
        let members = self
            .sync_set
            .lock()
            .expect("sync set lock poisoned")
            .members
            .len();
        if (members as u32) < self.min_in_sync_replicas {
            return Some(SendRefused::InSyncReplicasNotEnough);
        }
        None
    }

    pub fn master_address(&self) -> Option<String> {
        self.master_address
            .lock()
            .expect("master address lock poisoned")
            .clone()
    }

    pub fn set_master_address(&self, address: Option<String>) {
        *self
            .master_address
            .lock()
            .expect("master address lock poisoned") = address;
    }

    /// The controller pushed a role change (NOTIFY_BROKER_ROLE_CHANGED): kept if its epoch is
    /// the highest seen, for the controller client to act on.
    pub fn push(&self, change: RoleChange) {
        let mut pushed = self.pushed.lock().expect("pushed lock poisoned");
        if pushed
            .as_ref()
            .is_some_and(|old| old.master_epoch >= change.master_epoch)
        {
            return;
        }
        *pushed = Some(change);
        drop(pushed);
        self.pushed_signal.notify_one();
    }

    pub fn take_pushed(&self) -> Option<RoleChange> {
        self.pushed.lock().expect("pushed lock poisoned").take()
    }

    /// The last epoch of the epoch file, -1 with none (as heartbeats carry it).
    pub fn last_epoch(&self) -> i32 {
        let epochs = self.epochs.lock().expect("epochs lock poisoned");
        epochs.last().map_or(-1, |entry| entry.epoch)
    }

    /// The SyncStateSet as the controller last confirmed it.
    pub fn sync_set(&self) -> SyncSet {
        self.sync_set
            .lock()
            .expect("sync set lock poisoned")
            .clone()
    }

    /// Installs a set the controller confirmed, if newer than the one held.
    pub fn install_sync_set(&self, set: SyncSet) -> bool {
        let mut held = self.sync_set.lock().expect("sync set lock poisoned");
        if set.epoch < held.epoch {
            return false;
        }
        *held = set;
        true
    }

    /// Appends `epoch` starting at `log_end` to the epoch file, dropping entries of that epoch
    /// or later first (a master of an epoch begins it). Blocking: it fsyncs.
    pub fn begin_epoch(&self, epoch: i32, log_end: u64) -> Result<(), EpochFileError> {
        let mut epochs = self.epochs.lock().expect("epochs lock poisoned");
        epochs.truncate_from_epoch(epoch)?;
        epochs.truncate_from(log_end.saturating_add(1))?;
        epochs.append(epoch, log_end)
    }

    /// The acknowledgement position a send waits for, from each slave's confirmation (id and
    /// position): every other member of the set with `allAckInSyncStateSet`, else the
    /// `inSyncReplicas - 1` furthest members. `u64::MAX` when no slave needs to confirm.
    pub fn needed_position(&self, own_id: i64, confirmations: &[(i64, u64)]) -> u64 {
        let set = self.sync_set.lock().expect("sync set lock poisoned");
        needed_position(
            &set.members,
            own_id,
            confirmations,
            self.all_ack,
            self.in_sync_replicas,
        )
    }
}

/// See `Controlled::needed_position`. A member with no connection has confirmed nothing.
pub fn needed_position(
    members: &BTreeSet<i64>,
    own_id: i64,
    confirmations: &[(i64, u64)],
    all_ack: bool,
    in_sync_replicas: u32,
) -> u64 {
    let mut positions: Vec<u64> = members
        .iter()
        .filter(|id| **id != own_id)
        .map(|id| {
            confirmations
                .iter()
                .filter(|(slave, _)| slave == id)
                .map(|(_, position)| *position)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let acks = if all_ack {
        positions.len()
    } else {
        (in_sync_replicas.saturating_sub(1) as usize).min(positions.len())
    };
    if acks == 0 {
        return u64::MAX;
    }
    // The furthest `acks` members: the lowest of them is what all of them hold.
    positions.sort_unstable_by(|a, b| b.cmp(a));
    positions[acks - 1]
}

/// The SyncStateSet a master wants: itself, and each slave (id, last time it was caught up)
/// caught up within `not_caught_up_ms_max` of `now_ms`.
pub fn wanted_sync_set(
    own_id: i64,
    slaves: &[(i64, Option<i64>)],
    now_ms: i64,
    not_caught_up_ms_max: u64,
) -> BTreeSet<i64> {
    let mut wanted: BTreeSet<i64> = slaves
        .iter()
        .filter(|(_, caught_up)| {
            caught_up.is_some_and(|at| now_ms.saturating_sub(at) <= not_caught_up_ms_max as i64)
        })
        .map(|(id, _)| *id)
        .collect();
    wanted.insert(own_id);
    wanted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[i64]) -> BTreeSet<i64> {
        ids.iter().copied().collect()
    }

    #[test]
    fn with_all_ack_a_send_waits_for_the_slowest_member() {
        let members = set(&[1, 2, 3]);
        let confirmations = [(2, 500), (3, 300), (4, 100)];
        assert_eq!(needed_position(&members, 1, &confirmations, true, 1), 300);
        // A member with no connection holds nothing: the send waits for the set to shrink.
        assert_eq!(needed_position(&members, 1, &[(2, 500)], true, 1), 0);
    }

    #[test]
    fn a_set_of_the_master_alone_needs_no_slave() {
        assert_eq!(needed_position(&set(&[1]), 1, &[(2, 9)], true, 1), u64::MAX);
        assert_eq!(needed_position(&set(&[1, 2]), 1, &[], false, 1), u64::MAX);
    }

    #[test]
    fn without_all_ack_in_sync_replicas_counts_the_furthest_members() {
        let members = set(&[1, 2, 3]);
        let confirmations = [(2, 500), (3, 300)];
        assert_eq!(needed_position(&members, 1, &confirmations, false, 2), 500);
        assert_eq!(needed_position(&members, 1, &confirmations, false, 3), 300);
    }

    #[test]
    fn the_wanted_set_keeps_slaves_caught_up_recently() {
        let slaves = [(2, Some(9_000)), (3, Some(1_000)), (4, None)];
        assert_eq!(wanted_sync_set(1, &slaves, 10_000, 5_000), set(&[1, 2]));
        assert_eq!(wanted_sync_set(1, &[], 10_000, 5_000), set(&[1]));
    }

    #[test]
    fn a_pushed_change_is_kept_only_for_a_higher_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let controlled = Controlled::new(
            &BrokerConfig::default(),
            EpochFile::open(dir.path()).unwrap(),
        );
        let change = |epoch| RoleChange {
            master_broker_id: 1,
            master_address: "127.0.0.1:1".into(),
            master_epoch: epoch,
            sync_state_set_epoch: 1,
            sync_state_set: set(&[1]),
        };
        controlled.push(change(3));
        controlled.push(change(2));
        assert_eq!(controlled.take_pushed().unwrap().master_epoch, 3);
        assert!(controlled.take_pushed().is_none());
    }

    #[test]
    fn a_new_epoch_drops_entries_it_supersedes() {
        let dir = tempfile::tempdir().unwrap();
        let controlled = Controlled::new(
            &BrokerConfig::default(),
            EpochFile::open(dir.path()).unwrap(),
        );
        controlled.begin_epoch(1, 0).unwrap();
        controlled.begin_epoch(2, 100).unwrap();
        // Elected again at epoch 2 after a restart that lost nothing: epoch 2 starts over.
        controlled.begin_epoch(2, 100).unwrap();
        controlled.begin_epoch(4, 300).unwrap();
        assert_eq!(controlled.last_epoch(), 4);
        let epochs = controlled.epochs.lock().unwrap();
        assert_eq!(epochs.entries().len(), 3);
    }
}
