//! Sync flush: who runs the fdatasync that answers a written group.
//!
//! The thread that wrote a group runs the group commit itself when no other thread is running
//! one: no wake-up stands between the write and the fsync. A thread that finds a commit under
//! way leaves its group to the one running it, which looks again when it is done. But that
//! caller is a runtime thread with other connections' work queued behind it, so it runs one
//! commit only: what was written meanwhile goes to the sync thread, which keeps committing
//! while groups keep arriving (many connections) and sleeps when they stop.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::Instant;

use crate::log::Log;
use crate::relock;
use crate::types::{AppendDone, AppendOutcome, FlushStatus};

/// Completions waiting for an fsync that reaches `end_position` (sync flush).
pub struct SyncBatch {
    pub end_position: u64,
    /// `Log::fsync_failures` before the group was written.
    pub failures_before: u64,
    pub deadline: Instant,
    pub completions: Vec<(AppendDone, AppendOutcome)>,
}

/// One group commit: fsyncs the CommitLog up to the highest position in `batches`, then
/// completes them all (as `TimedOut` past their deadline, when the fsync failed, or when any
/// CommitLog fsync failed since the batch was written: written, durability unknown). Leaves
/// `batches` empty.
fn complete_synced(log: &Log, batches: &mut Vec<SyncBatch>) {
    let target = batches.iter().map(|b| b.end_position).max().unwrap_or(0);
    let flushed = log.flush(target).is_ok();
    let failures = log.fsync_failures();
    let now = Instant::now();
    for batch in batches.drain(..) {
        let flush = if flushed && now <= batch.deadline && batch.failures_before == failures {
            FlushStatus::Ok
        } else {
            FlushStatus::TimedOut
        };
        for (done, mut outcome) in batch.completions {
            outcome.flush = flush;
            done(Ok(outcome));
        }
    }
}

thread_local! {
    /// Set while this thread runs completions, which it does holding the syncer.
    static COMPLETING: Cell<bool> = const { Cell::new(false) };
}

/// Clears `COMPLETING` however the completions end, a panic included.
struct Completing;

impl Completing {
    fn start() -> Completing {
        COMPLETING.with(|c| c.set(true));
        Completing
    }
}

impl Drop for Completing {
    fn drop(&mut self) {
        COMPLETING.with(|c| c.set(false));
    }
}

pub struct GroupCommit {
    log: Arc<Log>,
    /// Written groups waiting for an fsync.
    unsynced: Mutex<Vec<SyncBatch>>,
    /// The right to run a group commit.
    syncer: Mutex<()>,
    thread: Mutex<ThreadState>,
    wake: Condvar,
}

#[derive(Default)]
struct ThreadState {
    wanted: bool,
    stop: bool,
}

impl GroupCommit {
    pub fn new(log: Arc<Log>) -> GroupCommit {
        GroupCommit {
            log,
            unsynced: Mutex::new(Vec::new()),
            syncer: Mutex::new(()),
            thread: Mutex::new(ThreadState::default()),
            wake: Condvar::new(),
        }
    }

    pub fn unsynced(&self) -> MutexGuard<'_, Vec<SyncBatch>> {
        relock(self.unsynced.lock())
    }

    /// From a thread that just wrote: one group commit for everything written, unless one is
    /// under way; whatever is still waiting after it goes to the sync thread.
    pub fn commit_once(&self) {
        let syncer = match self.syncer.try_lock() {
            Ok(syncer) => syncer,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            // The holder looks at `unsynced` again after letting go, so it will see ours.
            Err(TryLockError::WouldBlock) => return,
        };
        self.commit_round();
        drop(syncer);
        if !self.unsynced().is_empty() {
            self.wake_thread();
        }
    }

    /// Leaves every written group to the sync thread, with an fsync up to `end_position` that
    /// nobody waits on (a replica's appends): the caller does not fsync.
    pub fn sync_later(&self, end_position: u64) {
        self.unsynced().push(SyncBatch {
            end_position,
            failures_before: self.log.fsync_failures(),
            // No completion reads it.
            deadline: Instant::now(),
            completions: Vec::new(),
        });
        self.wake_thread();
    }

    /// Asks the sync thread to commit what `unsynced` holds.
    pub fn wake_thread(&self) {
        let mut thread = relock(self.thread.lock());
        thread.wanted = true;
        self.wake.notify_one();
    }

    /// Group commits until nothing waits, taking the right to run them even if that waits.
    /// From a completion (one that dropped the last handle to the store, so that it closes)
    /// it does nothing: this thread holds that right already and looks again when done.
    pub fn commit_all(&self) {
        if COMPLETING.with(Cell::get) {
            return;
        }
        loop {
            {
                let _syncer = relock(self.syncer.lock());
                while self.commit_round() {}
            }
            if self.unsynced().is_empty() {
                return;
            }
        }
    }

    /// One fsync for every group waiting now; false if none was.
    fn commit_round(&self) -> bool {
        let mut batches = std::mem::take(&mut *self.unsynced());
        if batches.is_empty() {
            return false;
        }
        let _completing = Completing::start();
        complete_synced(&self.log, &mut batches);
        true
    }

    /// The sync thread's body: waits until asked, then commits until nothing waits.
    pub fn run_thread(&self) {
        loop {
            {
                let mut thread = relock(self.thread.lock());
                while !thread.wanted && !thread.stop {
                    thread = relock(self.wake.wait(thread));
                }
                if thread.stop {
                    return;
                }
                thread.wanted = false;
            }
            // A completion that panics (a bug, reported by the panic hook) must not leave
            // later groups without the thread that commits them.
            let _ = catch_unwind(AssertUnwindSafe(|| self.commit_all()));
        }
    }

    /// Ends `run_thread`; the caller commits what is left itself.
    pub fn stop_thread(&self) {
        relock(self.thread.lock()).stop = true;
        self.wake.notify_all();
    }
}
