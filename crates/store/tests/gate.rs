//! The gate of controller mode (`Store::hold_unconfirmed`, `Store::confirm`): readers see a
//! queue's entries only once the records are confirmed, are told of them then, and what is
//! held stays bounded and is cut with the log.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use quiver_store::{Appended, Record, Store};

const TOPIC: &str = "Gated";

fn open(root: &std::path::Path) -> Store {
    Store::open(small_config(root)).expect("open").0
}

fn fill(store: &Store, queue_id: u32, count: usize) -> Vec<(Record, Appended)> {
    (0..count)
        .map(|i| {
            let record = simple(TOPIC, queue_id, format!("m{i}").as_bytes());
            let outcome = append(store, vec![record.clone()]).expect("append");
            (record, outcome.entries[0])
        })
        .collect()
}

fn end_of(appended: &Appended) -> u64 {
    appended.position + u64::from(appended.size)
}

/// The arrivals the store reports: (queue id, new max offset).
fn arrivals(store: &Store) -> Arc<Mutex<Vec<(u32, u64)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    store.set_arrival_listener(Arc::new(move |_topic: &str, queue_id, max_offset| {
        sink.lock().unwrap().push((queue_id, max_offset));
    }));
    seen
}

#[test]
fn entries_are_read_and_announced_only_once_their_records_are_confirmed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let seen = arrivals(&store);
    store.hold_unconfirmed();
    let written = fill(&store, 0, 5);

    assert_eq!(store.bounds(TOPIC, 0).max_offset, 0, "nothing confirmed");
    assert!(read_queue_all(&store, TOPIC, 0).is_empty());
    assert!(
        seen.lock().unwrap().is_empty(),
        "no arrival before confirmation"
    );

    // Confirming the third record's end shows the first three, no more.
    store.confirm(end_of(&written[2].1));
    assert_eq!(store.bounds(TOPIC, 0).max_offset, 3);
    assert_eq!(
        read_queue_all(&store, TOPIC, 0),
        expected_in_queue(&written[..3], 0)
    );
    assert_eq!(*seen.lock().unwrap(), vec![(0, 3)]);

    // A position inside the fourth record shows nothing more.
    store.confirm(end_of(&written[3].1) - 1);
    assert_eq!(store.bounds(TOPIC, 0).max_offset, 3);

    store.confirm(u64::MAX);
    assert_eq!(
        read_queue_all(&store, TOPIC, 0),
        expected_in_queue(&written, 0)
    );
    assert_eq!(store.unconfirmed_steps(), 0);
    // Confirmed ahead, later appends show at once, and are announced as they are written.
    let later = fill(&store, 0, 1);
    assert_eq!(store.bounds(TOPIC, 0).max_offset, 6);
    assert_eq!(seen.lock().unwrap().last(), Some(&(0, 6)));
    assert_eq!(later[0].1.queue_offset, 5);
}

#[test]
fn a_store_whose_gate_is_open_shows_each_append_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let written = fill(&store, 1, 3);
    assert_eq!(store.bounds(TOPIC, 1).max_offset, 3);
    assert_eq!(
        read_queue_all(&store, TOPIC, 1),
        expected_in_queue(&written, 1)
    );
    assert_eq!(store.unconfirmed_steps(), 0);
}

#[test]
fn what_the_gate_holds_is_bounded_per_queue_and_all_of_it_shows_when_confirmed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.hold_unconfirmed();
    let groups = quiver_store::GATE_STEPS_PER_QUEUE_MAX * 3;
    let written = fill(&store, 0, groups);
    assert_eq!(
        store.unconfirmed_steps(),
        quiver_store::GATE_STEPS_PER_QUEUE_MAX,
        "the newest step absorbs the ones past the bound"
    );
    // Confirming an early record still shows it: the steps before the bound are kept.
    store.confirm(end_of(&written[0].1));
    assert_eq!(store.bounds(TOPIC, 0).max_offset, 1);
    store.confirm(end_of(&written[groups - 1].1));
    assert_eq!(store.bounds(TOPIC, 0).max_offset, groups as u64);
    assert_eq!(store.unconfirmed_steps(), 0);
}

#[test]
fn a_cut_log_drops_what_the_gate_held_past_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.hold_unconfirmed();
    let written = fill(&store, 2, 6);
    store.confirm(end_of(&written[1].1));
    // The slave's log is cut after its fourth record: two unconfirmed records are kept, two
    // dropped.
    let cut = end_of(&written[3].1);
    store.truncate_log(cut).expect("truncate");
    assert_eq!(store.bounds(TOPIC, 2).max_offset, 2);
    assert_eq!(store.unconfirmed_steps(), 2, "the steps of records kept");
    store.confirm(u64::MAX);
    assert_eq!(
        read_queue_all(&store, TOPIC, 2),
        expected_in_queue(&written[..4], 2)
    );
    // What is appended after the cut takes the dropped records' offsets and shows once
    // confirmed.
    let again = fill(&store, 2, 1);
    assert_eq!(again[0].1.queue_offset, 4);
    assert_eq!(store.bounds(TOPIC, 2).max_offset, 5);
}
