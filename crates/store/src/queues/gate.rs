//! The gate between what a replicated store has written and what its readers see: RocketMQ's
//! controller mode dispatches to the ConsumeQueue only up to the confirm offset, the CommitLog
//! position every replica of the SyncStateSet holds, so that no consumer reads (and commits an
//! offset past) a message that a failover could cut from the log.
//!
//! A store that never closes the gate publishes as before. Once closed (`Store::hold_unconfirmed`),
//! each queue's appended entries stay hidden (`ConsumeQueue::visible_bounds`) until the
//! confirmed position passes the end of the group that wrote them (`Store::confirm`); the
//! group's readers are told of the arrival then, not when it was written.
//!
//! What is held is bounded: per queue, the steps still to show (the offset to show up to and
//! the position that must be confirmed first), at most `STEPS_PER_QUEUE_MAX`; past that the
//! newest step absorbs the next, which only shows the older entries later, with the newer.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::consume_queue::ConsumeQueue;

/// Steps held per queue before the newest absorbs the next.
pub const STEPS_PER_QUEUE_MAX: usize = 64;

/// A queue whose entries are shown: tell its parked readers.
pub struct Shown {
    pub queue: Arc<ConsumeQueue>,
    pub offset: u64,
}

#[derive(Default)]
pub struct Gate {
    /// Whether the gate is in use: when not, the appender publishes without taking the lock.
    closed: AtomicBool,
    state: Mutex<State>,
}

struct State {
    /// Every record ending at or below this may be shown.
    confirmed: u64,
    /// Queues with entries held back, by the address of their `ConsumeQueue` (kept alive by
    /// the entry itself).
    held: HashMap<usize, Held>,
}

impl Default for State {
    fn default() -> State {
        State {
            confirmed: u64::MAX,
            held: HashMap::new(),
        }
    }
}

struct Held {
    queue: Arc<ConsumeQueue>,
    /// (offset to show up to, position that must be confirmed first), both increasing.
    steps: VecDeque<(u64, u64)>,
}

impl Gate {
    fn state(&self) -> MutexGuard<'_, State> {
        // Each method leaves the state whole before it can panic.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// From now on entries are shown only once confirmed; nothing is confirmed yet.
    pub fn close(&self) {
        let mut state = self.state();
        state.confirmed = 0;
        self.closed.store(true, Ordering::Release);
    }

    /// The appender's, before it publishes `queue` up to `offset` for a group whose records
    /// end at `end_position`: shows the entries now when that is confirmed and nothing of the
    /// queue is held (true: tell its readers), else holds them. A queue held for the first
    /// time shows what it had published before (`published`), no more.
    pub fn publishing(
        &self,
        queue: &Arc<ConsumeQueue>,
        published: u64,
        offset: u64,
        end_position: u64,
    ) -> bool {
        let mut state = self.state();
        let key = Arc::as_ptr(queue) as usize;
        if end_position <= state.confirmed && !state.held.contains_key(&key) {
            queue.set_visible(offset);
            return true;
        }
        if queue.visible_offset() > published {
            queue.set_visible(published);
        }
        let held = state.held.entry(key).or_insert_with(|| Held {
            queue: Arc::clone(queue),
            steps: VecDeque::new(),
        });
        if held.steps.len() >= STEPS_PER_QUEUE_MAX {
            let newest = held.steps.back_mut().expect("a full queue of steps");
            *newest = (offset, end_position);
        } else {
            held.steps.push_back((offset, end_position));
        }
        false
    }

    /// Every record ending at or below `position` is confirmed (`u64::MAX`: everything, as
    /// for a master whose SyncStateSet is itself alone): shows what that lets through and
    /// returns it. A lower position than before holds later groups back again; what is shown
    /// stays shown.
    pub fn confirm(&self, position: u64) -> Vec<Shown> {
        let mut state = self.state();
        state.confirmed = position;
        let mut shown = Vec::new();
        state.held.retain(|_, held| {
            let mut last = None;
            while let Some(&(offset, end)) = held.steps.front() {
                if end > position {
                    break;
                }
                last = Some(offset);
                held.steps.pop_front();
            }
            if let Some(offset) = last {
                held.queue.set_visible(offset);
                shown.push(Shown {
                    queue: Arc::clone(&held.queue),
                    offset,
                });
            }
            !held.steps.is_empty()
        });
        shown
    }

    /// The log was cut at `position`: steps past it are dropped (their entries are gone, and
    /// each queue's visible offset was lowered with its max).
    pub fn truncated(&self, position: u64) {
        let mut state = self.state();
        state.held.retain(|_, held| {
            held.steps.retain(|&(_, end)| end <= position);
            !held.steps.is_empty()
        });
        state.confirmed = state.confirmed.min(position);
    }

    /// Steps held in all, for tests and the bound.
    pub fn held_steps(&self) -> usize {
        self.state()
            .held
            .values()
            .map(|held| held.steps.len())
            .sum()
    }
}
