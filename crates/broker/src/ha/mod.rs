//! Master/slave replication with Apache RocketMQ's default HA protocol (`codec`): a master
//! streams its CommitLog to each slave from the position the slave reports (`master`); a slave
//! connects to its master, appends what it receives at the same positions through the store's
//! second write path and reports how far it has (`slave`). Each side's protocol decisions are
//! a state machine with no I/O (`master_session`, `slave_session`) under a thin async task.
//! `Replication` is the state both sides share with the rest of the broker: the slaves'
//! confirmed position and the sends of a SYNC_MASTER waiting for it, and a slave's master
//! address.
//!
//! Confirmations flow one way: a `MasterSession` returns one (clamped to what it wrote to its
//! slave), its task hands it to the connection's `SlaveConnected`, the only caller of
//! `Replication::confirmed`, and dropping that guard when the connection ends withdraws it.

pub mod autoswitch_codec;
pub mod autoswitch_master;
pub mod autoswitch_slave;
pub mod codec;
pub mod controlled;
pub mod master;
pub mod master_session;
pub mod slave;
pub mod slave_session;

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::config::{BrokerConfig, BrokerRole};
use controlled::Controlled;

/// RocketMQ's haSendHeartbeatInterval: an idle master tells the slave where it stands this
/// often, and a slave reports its log end at least this often.
pub const HEARTBEAT_INTERVAL_MS: u64 = 5_000;
/// RocketMQ's haHousekeepingInterval: a peer that sent nothing for this long is given up, by a
/// master its slave and by a slave its master. Four heartbeat intervals: a live peer sends at
/// least three times meanwhile.
pub const SLAVE_SILENCE_MS_MAX: u64 = 20_000;
/// A slave further behind than this is not in sync: a SYNC_MASTER answers SLAVE_NOT_AVAILABLE
/// at once rather than hold sends for a slave that cannot catch up within their timeout
/// (RocketMQ's haMaxGapNotInSync).
pub const SLAVE_BEHIND_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// Sends of a SYNC_MASTER waiting for a slave at once; past it a send is answered
/// SLAVE_NOT_AVAILABLE. Each connection's in-flight limit bounds them too.
pub const WAITING_SENDS_MAX: usize = 100_000;

/// What happened to a send that waited for a slave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Replicated {
    /// A slave confirmed a position at or past the send's end.
    Yes,
    /// No slave confirmed it within `slaveTimeout`.
    TimedOut,
    /// No slave is connected, or the one connected is too far behind to wait for.
    NoSlave,
}

type Waiting = Box<dyn FnOnce(Replicated) + Send>;

struct Waiter {
    end_position: u64,
    deadline: Instant,
    done: Waiting,
}

/// Where a slave's master is, as configured or as the name server said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MasterAddresses {
    /// The master's broker (remoting) address.
    pub broker: Option<String>,
    /// The master's HA address.
    pub ha: Option<String>,
}

/// What one slave connection has confirmed.
struct SessionConfirmation {
    session: u64,
    position: u64,
    /// The slave's controller id, from its AutoSwitch handshake (controller mode).
    broker_id: Option<i64>,
    /// When (wall-clock ms) the slave last held everything the master had written.
    caught_up_ms: Option<i64>,
}

/// A broker's role as runtime state: fixed at start by `brokerRole`, or, in controller mode,
/// none until the controller decides and changed by it afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Controller mode, before the controller named a master.
    Undecided,
    Is(BrokerRole),
}

impl Role {
    fn encode(self) -> u8 {
        match self {
            Role::Undecided => 0,
            Role::Is(BrokerRole::AsyncMaster) => 1,
            Role::Is(BrokerRole::SyncMaster) => 2,
            Role::Is(BrokerRole::Slave) => 3,
        }
    }

    fn decode(byte: u8) -> Role {
        match byte {
            0 => Role::Undecided,
            1 => Role::Is(BrokerRole::AsyncMaster),
            2 => Role::Is(BrokerRole::SyncMaster),
            3 => Role::Is(BrokerRole::Slave),
            _ => unreachable!("only `encode` stores a role"),
        }
    }
}

pub struct Replication {
    role: AtomicU8,
    /// Controller mode's state (None without it).
    pub controlled: Option<Controlled>,
    /// Wakes the tasks of a role when the role changes.
    pub role_changed: Notify,
    /// Wakes a controller-mode master's SyncStateSet check when a slave connection ends.
    pub slaves_changed: Notify,
    slave_timeout: Duration,
    /// The highest position a slave connected now has confirmed: the maximum over `sessions`,
    /// kept here for the send path to read with no lock.
    confirmed: AtomicU64,
    /// Each live slave connection's confirmation (16 connections at most). A connection that
    /// ends takes its own out: what a slave said on a closed connection says nothing of what
    /// the next connection's slave holds.
    sessions: Mutex<Vec<SessionConfirmation>>,
    next_session: AtomicU64,
    slaves: AtomicUsize,
    waiting: Mutex<Vec<Waiter>>,
    /// Wakes each slave connection's writer when the CommitLog grew.
    log_grew: Notify,
    /// A slave's master, and a signal when it changes.
    master: Mutex<MasterAddresses>,
    master_changed: Notify,
    /// Set while a slave refuses its master (its log does not continue this one): the slave
    /// then copies nothing from it either, topics and offsets included.
    master_refused: std::sync::atomic::AtomicBool,
    /// Controller mode: told each new acknowledgement position (the store's gate, so that
    /// readers see only what the SyncStateSet holds); set once at start.
    confirm_listener: OnceLock<ConfirmListener>,
}

/// Called with the position every send at or below is acknowledged (`u64::MAX`: no replica
/// needs to confirm), under the lock that orders the settlements.
pub type ConfirmListener = Arc<dyn Fn(u64) + Send + Sync>;

impl Replication {
    /// `epochs` is the epoch file, opened in controller mode only.
    pub fn new(config: &BrokerConfig, epochs: Option<quiver_store::EpochFile>) -> Replication {
        let controlled = epochs.map(|epochs| Controlled::new(config, epochs));
        let role = match controlled {
            Some(_) => Role::Undecided,
            None => Role::Is(config.role),
        };
        Replication {
            role: AtomicU8::new(role.encode()),
            controlled,
            role_changed: Notify::new(),
            slaves_changed: Notify::new(),
            slave_timeout: Duration::from_millis(config.slave_timeout_ms),
            confirmed: AtomicU64::new(0),
            sessions: Mutex::new(Vec::new()),
            next_session: AtomicU64::new(0),
            slaves: AtomicUsize::new(0),
            waiting: Mutex::new(Vec::new()),
            log_grew: Notify::new(),
            master: Mutex::new(MasterAddresses {
                broker: None,
                ha: config.ha_master_addr.clone(),
            }),
            master_changed: Notify::new(),
            master_refused: std::sync::atomic::AtomicBool::new(false),
            confirm_listener: OnceLock::new(),
        }
    }

    /// Sets the listener told of each new acknowledgement position; a second call is ignored.
    pub fn set_confirm_listener(&self, listener: ConfirmListener) {
        let _ = self.confirm_listener.set(listener);
    }

    /// Whether this slave refuses its current master (see `refuse_master`).
    pub fn master_refused(&self) -> bool {
        self.master_refused.load(Ordering::Acquire)
    }

    /// Marks the master refused or followed.
    pub fn refuse_master(&self, refused: bool) {
        self.master_refused.store(refused, Ordering::Release);
    }

    pub fn role(&self) -> Role {
        Role::decode(self.role.load(Ordering::Acquire))
    }

    /// Changes the role (controller mode): the tasks of each role see it through
    /// `role_changed`.
    pub fn set_role(&self, role: BrokerRole) {
        self.role.store(Role::Is(role).encode(), Ordering::Release);
        self.role_changed.notify_waiters();
    }

    pub fn is_slave(&self) -> bool {
        self.role() == Role::Is(BrokerRole::Slave)
    }

    pub fn is_master(&self) -> bool {
        matches!(
            self.role(),
            Role::Is(BrokerRole::AsyncMaster | BrokerRole::SyncMaster)
        )
    }

    /// Whether a stored send is acknowledged only once a slave has it (SYNC_MASTER).
    pub fn waits_for_slave(&self) -> bool {
        self.role() == Role::Is(BrokerRole::SyncMaster)
    }

    /// Runs `done` once a slave has confirmed `end_position`, or when that cannot happen in
    /// time; `written_position` is the master's log end, to judge how far behind a slave is.
    pub fn after_replicated(&self, end_position: u64, written_position: u64, done: Waiting) {
        let confirmed = self.confirmed.load(Ordering::Acquire);
        if confirmed >= end_position {
            return done(Replicated::Yes);
        }
        let behind = written_position.saturating_sub(confirmed);
        // In controller mode a send waits for the SyncStateSet's members, connected or not:
        // the master drops one that left from the set, which answers the send.
        let no_slave = self.slaves.load(Ordering::Acquire) == 0 || behind > SLAVE_BEHIND_BYTES_MAX;
        if no_slave && self.controlled.is_none() {
            return done(Replicated::NoSlave);
        }
        let mut waiting = self.waiting.lock().expect("waiting lock poisoned");
        if waiting.len() >= WAITING_SENDS_MAX {
            drop(waiting);
            return done(Replicated::NoSlave);
        }
        waiting.push(Waiter {
            end_position,
            deadline: Instant::now() + self.slave_timeout,
            done,
        });
        drop(waiting);
        // A confirmation that landed between the check above and the push would not have
        // seen this waiter.
        if self.confirmed.load(Ordering::Acquire) >= end_position {
            self.complete(
                |waiter| waiter.end_position <= end_position,
                Replicated::Yes,
            );
        }
    }

    /// The slave on connection `session` confirmed it has everything below `position`: one
    /// confirmation completes every send waiting at or below it, as one fsync does for a group.
    /// Reached only through `SlaveConnected::confirmed`.
    fn confirmed(&self, session: u64, position: u64) {
        let before = {
            let mut sessions = self.sessions.lock().expect("sessions lock poisoned");
            let Some(entry) = sessions.iter_mut().find(|entry| entry.session == session) else {
                panic!("a confirmation from slave connection {session}, which is not connected");
            };
            entry.position = entry.position.max(position);
            if self.controlled.is_some() {
                let (before, now) = self.settle(&sessions);
                drop(sessions);
                if now > before {
                    self.complete(|waiter| waiter.end_position <= now, Replicated::Yes);
                }
                return;
            }
            // Under the lock, so that a withdrawal and a confirmation leave the maximum of
            // what is left, whichever stores last.
            self.confirmed.fetch_max(position, Ordering::AcqRel)
        };
        if position > before {
            self.complete(|waiter| waiter.end_position <= position, Replicated::Yes);
        }
    }

    /// Controller mode: the position every send at or below is acknowledged, from the
    /// SyncStateSet and each member's confirmation, stored for the send path. Called under
    /// the sessions lock, so that settlements store in the order they are computed. Returns
    /// the position before and the one now.
    fn settle(&self, sessions: &[SessionConfirmation]) -> (u64, u64) {
        let controlled = self.controlled.as_ref().expect("controller mode");
        let confirmations: Vec<(i64, u64)> = sessions
            .iter()
            .filter_map(|entry| Some((entry.broker_id?, entry.position)))
            .collect();
        let now = controlled.needed_position(controlled.own_id(), &confirmations);
        let before = self.confirmed.swap(now, Ordering::AcqRel);
        if now != before {
            if let Some(listener) = self.confirm_listener.get() {
                listener(now);
            }
        }
        (before, now)
    }

    /// Controller mode: the SyncStateSet changed; sends it no longer waits for are answered.
    pub fn sync_set_changed(&self) {
        let sessions = self.sessions.lock().expect("sessions lock poisoned");
        let (before, now) = self.settle(&sessions);
        drop(sessions);
        if now > before {
            self.complete(|waiter| waiter.end_position <= now, Replicated::Yes);
        }
    }

    /// Controller mode: each connected slave's id and the last time it was caught up.
    pub fn slaves_caught_up(&self) -> Vec<(i64, Option<i64>)> {
        let sessions = self.sessions.lock().expect("sessions lock poisoned");
        sessions
            .iter()
            .filter_map(|entry| Some((entry.broker_id?, entry.caught_up_ms)))
            .collect()
    }

    /// Slave connection `session` ended: the confirmed position falls to the highest of the
    /// connections left (0 with none). Sends already answered stay answered: a slave connected
    /// then had them.
    fn withdraw(&self, session: u64) {
        let mut sessions = self.sessions.lock().expect("sessions lock poisoned");
        sessions.retain(|entry| entry.session != session);
        if self.controlled.is_some() {
            self.settle(&sessions);
            return;
        }
        let highest = sessions.iter().map(|entry| entry.position).max();
        self.confirmed
            .store(highest.unwrap_or(0), Ordering::Release);
    }

    /// Answers the sends whose wait has passed `slaveTimeout`.
    pub fn expire(&self, now: Instant) {
        self.complete(|waiter| waiter.deadline <= now, Replicated::TimedOut);
    }

    /// The highest position a slave has confirmed.
    pub fn confirmed_position(&self) -> u64 {
        self.confirmed.load(Ordering::Acquire)
    }

    pub fn slaves(&self) -> usize {
        self.slaves.load(Ordering::Acquire)
    }

    fn complete(&self, which: impl Fn(&Waiter) -> bool, outcome: Replicated) {
        let done: Vec<Waiter> = {
            let mut waiting = self.waiting.lock().expect("waiting lock poisoned");
            if waiting.is_empty() {
                return;
            }
            let (done, kept) = std::mem::take(&mut *waiting).into_iter().partition(&which);
            *waiting = kept;
            done
        };
        // Outside the lock: completions write answers.
        for waiter in done {
            (waiter.done)(outcome);
        }
    }

    /// The store wrote more: slave connections waiting for bytes look again.
    pub fn log_grew(&self) {
        if self.slaves.load(Ordering::Relaxed) > 0 {
            self.log_grew.notify_waiters();
        }
    }

    /// Controller mode: a new master was named; what the name server said of the one before
    /// is forgotten.
    pub fn forget_master(&self) {
        *self.master.lock().expect("master lock poisoned") = MasterAddresses::default();
        self.master_changed.notify_waiters();
    }

    pub fn master(&self) -> MasterAddresses {
        self.master.lock().expect("master lock poisoned").clone()
    }

    /// What the name server said of this slave's master at registration. A configured
    /// `haMasterAddress` wins over the one it gives.
    pub fn learned_master(&self, broker: Option<String>, ha: Option<String>, configured: bool) {
        let mut master = self.master.lock().expect("master lock poisoned");
        let next = MasterAddresses {
            broker: broker.or_else(|| master.broker.clone()),
            ha: if configured {
                master.ha.clone()
            } else {
                ha.or_else(|| master.ha.clone())
            },
        };
        if *master != next {
            *master = next;
            drop(master);
            self.master_changed.notify_waiters();
        }
    }
}

/// A slave connection, counted and holding its confirmation for as long as it lives.
pub struct SlaveConnected<'a> {
    replication: &'a Replication,
    session: u64,
}

impl<'a> SlaveConnected<'a> {
    pub fn new(replication: &'a Replication) -> SlaveConnected<'a> {
        let session = replication.next_session.fetch_add(1, Ordering::Relaxed);
        replication
            .sessions
            .lock()
            .expect("sessions lock poisoned")
            .push(SessionConfirmation {
                session,
                position: 0,
                broker_id: None,
                caught_up_ms: None,
            });
        replication.slaves.fetch_add(1, Ordering::AcqRel);
        SlaveConnected {
            replication,
            session,
        }
    }

    /// This connection's slave holds the log below `position` (a `MasterSession`'s
    /// `Ready::confirmed`).
    pub fn confirmed(&self, position: u64) {
        self.replication.confirmed(self.session, position);
    }

    /// The slave said who it is (an AutoSwitch handshake).
    pub fn identify(&self, broker_id: i64) {
        self.update(|entry| entry.broker_id = Some(broker_id));
    }

    /// The slave held everything the master had written at `now_ms`.
    pub fn caught_up(&self, now_ms: i64) {
        self.update(|entry| entry.caught_up_ms = Some(now_ms));
    }

    fn update(&self, change: impl FnOnce(&mut SessionConfirmation)) {
        let mut sessions = self
            .replication
            .sessions
            .lock()
            .expect("sessions lock poisoned");
        if let Some(entry) = sessions
            .iter_mut()
            .find(|entry| entry.session == self.session)
        {
            change(entry);
        }
    }
}

impl Drop for SlaveConnected<'_> {
    fn drop(&mut self) {
        self.replication.withdraw(self.session);
        self.replication.slaves.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn sync_master() -> Replication {
        let config = BrokerConfig {
            role: BrokerRole::SyncMaster,
            slave_timeout_ms: 1_000,
            ..BrokerConfig::default()
        };
        Replication::new(&config, None)
    }

    fn waiter(tx: &mpsc::Sender<(u64, Replicated)>, end: u64) -> Waiting {
        let tx = tx.clone();
        Box::new(move |outcome| tx.send((end, outcome)).unwrap())
    }

    #[test]
    fn one_confirmation_completes_every_send_at_or_below_it() {
        let replication = sync_master();
        let slave = SlaveConnected::new(&replication);
        let (tx, rx) = mpsc::channel();
        for end in [100, 200, 300] {
            replication.after_replicated(end, 300, waiter(&tx, end));
        }
        assert!(rx.try_recv().is_err());
        slave.confirmed(250);
        let mut done: Vec<_> = rx.try_iter().collect();
        done.sort();
        assert_eq!(done, vec![(100, Replicated::Yes), (200, Replicated::Yes)]);
        // A stale, lower report changes nothing.
        slave.confirmed(120);
        assert!(rx.try_recv().is_err());
        slave.confirmed(300);
        assert_eq!(rx.try_recv().unwrap(), (300, Replicated::Yes));
    }

    #[test]
    fn without_a_slave_or_with_one_far_behind_a_send_does_not_wait() {
        let replication = sync_master();
        let (tx, rx) = mpsc::channel();
        replication.after_replicated(100, 100, waiter(&tx, 100));
        assert_eq!(rx.try_recv().unwrap(), (100, Replicated::NoSlave));
        let _slave = SlaveConnected::new(&replication);
        let far = SLAVE_BEHIND_BYTES_MAX + 1;
        replication.after_replicated(far, far, waiter(&tx, far));
        assert_eq!(rx.try_recv().unwrap(), (far, Replicated::NoSlave));
    }

    #[test]
    fn the_confirmed_position_is_the_highest_of_the_slaves_connected() {
        let replication = sync_master();
        let ahead = SlaveConnected::new(&replication);
        let behind = SlaveConnected::new(&replication);
        ahead.confirmed(300);
        behind.confirmed(100);
        assert_eq!(replication.confirmed_position(), 300);
        drop(behind);
        assert_eq!(replication.confirmed_position(), 300);
        assert_eq!(replication.slaves(), 1);
    }

    #[test]
    fn a_slave_connection_that_ends_withdraws_its_confirmation() {
        let replication = sync_master();
        let (tx, rx) = mpsc::channel();
        let first = SlaveConnected::new(&replication);
        let second = SlaveConnected::new(&replication);
        first.confirmed(300);
        second.confirmed(100);
        drop(first);
        assert_eq!(replication.confirmed_position(), 100);
        // A send the closed connection's slave would have covered waits for one connected.
        replication.after_replicated(200, 300, waiter(&tx, 200));
        assert!(rx.try_recv().is_err());
        second.confirmed(200);
        assert_eq!(rx.try_recv().unwrap(), (200, Replicated::Yes));
        drop(second);
        assert_eq!(replication.confirmed_position(), 0);
        // A slave reconnecting starts from nothing: its earlier word does not count.
        let again = SlaveConnected::new(&replication);
        replication.after_replicated(300, 300, waiter(&tx, 300));
        assert!(rx.try_recv().is_err());
        again.confirmed(300);
        assert_eq!(rx.try_recv().unwrap(), (300, Replicated::Yes));
    }

    #[test]
    fn a_send_not_confirmed_in_time_times_out() {
        let replication = sync_master();
        let _slave = SlaveConnected::new(&replication);
        let (tx, rx) = mpsc::channel();
        replication.after_replicated(100, 100, waiter(&tx, 100));
        replication.expire(Instant::now());
        assert!(rx.try_recv().is_err(), "not before slaveTimeout");
        replication.expire(Instant::now() + Duration::from_millis(1_001));
        assert_eq!(rx.try_recv().unwrap(), (100, Replicated::TimedOut));
    }
}
