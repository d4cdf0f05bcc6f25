//! The broker's background work, as owners that step and one scheduler that drives them.
//!
//! Delayed delivery (`delay.rs`), pop revive (`pop_revive.rs`), the transaction check
//! (`transaction_check.rs`) and the timer wheel (`timer_wheel.rs`) each own their progress and
//! expose `Owner::step`: given the time, it looks at the state and returns the work to do
//! (records to append, requests to send, a snapshot to write) without doing any of it, as
//! raft-rs's `Ready` does. The scheduler (`run`) is the one place that reads the clock for them: on a thread of
//! its own, so that their appends (which wait for fsyncs with sync flush) and snapshot writes
//! never hold a runtime worker, it steps each owner when its period comes round, carries out
//! what the step returned in order, and tells the owner what became of each append
//! (`Owner::stored`) so that its progress moves only past what the store holds.

pub mod delay;
pub mod pop_revive;
pub mod timer_wheel;
pub mod transaction_check;

use std::io;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_store::{Append, AppendError, AppendOutcome, Record};
use quiver_wire::Command;

use crate::clock::now_ms;
use crate::connection::Connection;
use crate::state::{Background, Broker};

/// Records to store in one append, and the owner's name for them (`Owner::stored` gets it back).
pub struct Batch {
    pub records: Vec<Record>,
    pub token: u64,
}

/// What one step asks for, carried out in this order: appends, then requests, then the
/// snapshot.
#[derive(Default)]
pub struct Ready {
    /// Each batch is one append, made in order; the next is made only if `Owner::stored` says
    /// to go on.
    pub appends: Vec<Batch>,
    /// Oneway requests to clients (a transaction check asking a producer).
    pub requests: Vec<(Connection, Command)>,
    /// The owner's snapshot is due now, besides its period: `Owner::persist` runs after the
    /// appends.
    pub persist: bool,
    /// The step stopped at a batch limit with more to do: step again at once.
    pub more: bool,
}

impl Ready {
    pub fn append(&mut self, records: Vec<Record>, token: u64) {
        if !records.is_empty() {
            self.appends.push(Batch { records, token });
        }
    }
}

/// A piece of background state that steps with the time.
pub trait Owner: Send {
    fn name(&self) -> &'static str;
    /// How often it steps.
    fn period_ms(&self) -> u64;
    /// How often the scheduler writes its snapshot (`persist`): what a crash may make it do
    /// again.
    fn persist_period_ms(&self) -> u64 {
        PERSIST_PERIOD_MS
    }
    /// The work due at `now_ms`. Reads (the store's queues, the owner's own tables) happen here;
    /// nothing is written.
    fn step(&mut self, broker: Background<'_>, now_ms: i64) -> Ready;
    /// What became of the append of the batch named `token`. Returns whether to go on with the
    /// step's next batch.
    fn stored(
        &mut self,
        broker: Background<'_>,
        token: u64,
        outcome: Result<AppendOutcome, AppendError>,
    ) -> bool;
    /// Writes the owner's snapshot (blocking; the scheduler's own thread runs it).
    fn persist(&mut self, broker: Background<'_>) -> io::Result<()>;
}

/// Carries out one step of `owner` at `now_ms` on this thread, waiting for each append.
/// Returns whether the owner has more to do at once (never after a failed append).
pub fn run_step(owner: &mut dyn Owner, broker: Background<'_>, now_ms: i64) -> bool {
    let Ready {
        appends,
        requests,
        persist,
        more,
    } = owner.step(broker, now_ms);
    let mut failed = false;
    for Batch { records, token } in appends {
        let outcome = append_and_wait(broker, records);
        if let Err(error) = &outcome {
            failed = true;
            tracing::warn!(owner = owner.name(), %error, "a background append failed; the next step tries again");
        }
        if !owner.stored(broker, token, outcome) {
            break;
        }
    }
    for (connection, request) in requests {
        if !connection.send_oneway(request) {
            tracing::debug!(owner = owner.name(), peer = %connection.peer, "a request to a client was not sent: its connection is busy or closed");
        }
    }
    if persist {
        persist_logged(owner, broker);
    }
    // After a failed append the next try waits for the owner's period, not a moment.
    more && !failed
}

fn persist_logged(owner: &mut dyn Owner, broker: Background<'_>) {
    if let Err(error) = owner.persist(broker) {
        tracing::error!(owner = owner.name(), %error, "could not write a background owner's state");
    }
}

/// Appends `records` and waits for the store's answer (with sync flush, for the fsync, which
/// this thread may run itself).
fn append_and_wait(
    broker: Background<'_>,
    records: Vec<Record>,
) -> Result<AppendOutcome, AppendError> {
    let (done, answer) = mpsc::sync_channel(1);
    let done = Box::new(move |result| {
        let _ = done.send(result);
    });
    drop(broker.store.append(vec![Append { records, done }]));
    answer.recv().unwrap_or(Err(AppendError::Closed))
}

/// How often an owner's snapshot is written unless it says otherwise: after a crash, delayed,
/// revived and timer messages of the last second at most are delivered again, never lost.
const PERSIST_PERIOD_MS: u64 = 1_000;

/// The most one step may run again at once before the scheduler turns to the others: an owner
/// with a large backlog (a broker that was down while many messages fell due) does not starve
/// the rest.
const STEPS_IN_A_ROW_MAX: u32 = 64;

/// Steps every owner at its period until `stop` is dropped or sent to, then persists each one
/// last time. Runs on the calling thread.
pub fn run(broker: Arc<Broker>, mut owners: Vec<Box<dyn Owner>>, stop: mpsc::Receiver<()>) {
    let start = Instant::now();
    let mut due: Vec<Duration> = vec![Duration::ZERO; owners.len()];
    let mut persist_due: Vec<Duration> = owners
        .iter()
        .map(|owner| Duration::from_millis(owner.persist_period_ms()))
        .collect();
    loop {
        let next = due.iter().min().copied().unwrap_or(Duration::from_secs(1));
        match stop.recv_timeout(next.saturating_sub(start.elapsed())) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let elapsed = start.elapsed();
        for ((owner, due), persist_due) in owners.iter_mut().zip(&mut due).zip(&mut persist_due) {
            if *due > elapsed {
                continue;
            }
            let mut steps = 0;
            while run_step(owner.as_mut(), broker.background(), now_ms())
                && steps < STEPS_IN_A_ROW_MAX
            {
                steps += 1;
            }
            let stepped = start.elapsed();
            if stepped >= *persist_due {
                persist_logged(owner.as_mut(), broker.background());
                *persist_due = stepped + Duration::from_millis(owner.persist_period_ms());
            }
            // From now, not from when it was due: a slow step delays the next rather than
            // bunching them up (tokio's MissedTickBehavior::Delay).
            *due = start.elapsed() + Duration::from_millis(owner.period_ms());
        }
    }
    for owner in &mut owners {
        persist_logged(owner.as_mut(), broker.background());
    }
}

/// The scheduler on a thread of its own; dropping the returned sender stops it, and joining the
/// handle waits for its last snapshots.
pub fn spawn(
    broker: Arc<Broker>,
    owners: Vec<Box<dyn Owner>>,
) -> io::Result<(mpsc::Sender<()>, std::thread::JoinHandle<()>)> {
    let (stop, stopped) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("quiver-background".into())
        .spawn(move || run(broker, owners, stopped))?;
    Ok((stop, handle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Steps taken, batches reported (token and whether the append succeeded), snapshots.
    #[derive(Default)]
    struct Seen {
        steps: u32,
        told: Vec<(u64, bool)>,
        persisted: u32,
    }

    /// An owner that asks for `batches` appends a step (empty ones, which the store refuses)
    /// and stops after the batch `stop_after`.
    struct Recorder {
        batches: u64,
        stop_after: Option<u64>,
        persist_each_step: bool,
        persist_period_ms: u64,
        seen: Arc<Mutex<Seen>>,
    }

    impl Owner for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn period_ms(&self) -> u64 {
            10
        }
        fn persist_period_ms(&self) -> u64 {
            self.persist_period_ms
        }
        fn step(&mut self, _: Background<'_>, _: i64) -> Ready {
            self.seen.lock().unwrap().steps += 1;
            let mut ready = Ready {
                persist: self.persist_each_step,
                ..Ready::default()
            };
            for token in 0..self.batches {
                ready.appends.push(Batch {
                    records: Vec::new(),
                    token,
                });
            }
            ready
        }
        fn stored(
            &mut self,
            _: Background<'_>,
            token: u64,
            outcome: Result<AppendOutcome, AppendError>,
        ) -> bool {
            self.seen
                .lock()
                .unwrap()
                .told
                .push((token, outcome.is_ok()));
            self.stop_after != Some(token)
        }
        fn persist(&mut self, _: Background<'_>) -> io::Result<()> {
            self.seen.lock().unwrap().persisted += 1;
            Ok(())
        }
    }

    fn recorder(batches: u64, stop_after: Option<u64>, persist_each_step: bool) -> Recorder {
        Recorder {
            batches,
            stop_after,
            persist_each_step,
            // Far past any test's run: snapshots come only when a test asks for them.
            persist_period_ms: 3_600_000,
            seen: Arc::default(),
        }
    }

    #[test]
    fn an_empty_batch_is_not_asked_for() {
        let mut ready = Ready::default();
        ready.append(Vec::new(), 7);
        assert!(ready.appends.is_empty());
    }

    #[test]
    fn batches_are_reported_in_order_and_a_stop_leaves_the_rest_unmade() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = crate::state::test_broker(dir.path());
        let mut owner = recorder(4, Some(1), true);
        assert!(!run_step(&mut owner, broker.background(), 0));
        let seen = owner.seen.lock().unwrap();
        assert_eq!(
            seen.told,
            [(0, false), (1, false)],
            "the store's refusal of an empty batch is reported, and nothing after the stop"
        );
        assert_eq!(seen.persisted, 1);
    }

    #[test]
    fn the_scheduler_steps_each_owner_at_its_period_until_stopped_then_persists_it_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = Arc::new(crate::state::test_broker(dir.path()));
        let owner = recorder(0, None, false);
        let seen = owner.seen.clone();
        let (stop, thread) = spawn(broker, vec![Box::new(owner)]).expect("spawn");
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.lock().unwrap().steps < 3 {
            assert!(Instant::now() < deadline, "the owner was not stepped");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(seen.lock().unwrap().persisted, 0);
        drop(stop);
        thread.join().expect("the scheduler stops");
        assert_eq!(seen.lock().unwrap().persisted, 1, "one last snapshot");
    }

    #[test]
    fn the_scheduler_writes_each_owners_snapshot_at_its_persist_period() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = Arc::new(crate::state::test_broker(dir.path()));
        let mut owner = recorder(0, None, false);
        owner.persist_period_ms = 20;
        let seen = owner.seen.clone();
        let (stop, thread) = spawn(broker, vec![Box::new(owner)]).expect("spawn");
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.lock().unwrap().persisted < 2 {
            assert!(Instant::now() < deadline, "no periodic snapshot");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(stop);
        thread.join().expect("the scheduler stops");
    }
}
