use super::*;
use crate::liveness::Heartbeat;

const NOW: i64 = 1_000_000;

fn proposal(master: i64, master_epoch: i32, members: &[i64], set_epoch: i32) -> Proposal {
    Proposal {
        master,
        master_epoch,
        members: members.iter().copied().collect(),
        set_epoch,
    }
}

fn beat(liveness: &mut Liveness, id: i64, epoch: i32, max_offset: i64, priority: i32) {
    liveness
        .heartbeat(
            Heartbeat {
                cluster: "c".into(),
                name: "b".into(),
                id,
                address: format!("127.0.0.1:{}", 30_000 + id),
                epoch,
                max_offset,
                confirm_offset: 0,
                timeout_ms: 10_000,
                priority,
            },
            7,
            NOW,
            100,
        )
        .unwrap();
}

/// A set with replicas 1..=n registered.
fn registered(n: i64) -> Replicas {
    let mut replicas = Replicas::default();
    for id in 1..=n {
        let event = replicas
            .apply_broker_id("c", "b", id, &format!("127.0.0.1:{};1", 30_000 + id), 100)
            .unwrap()
            .expect("a new id");
        replicas.apply(&event);
    }
    replicas
}

fn elect_and_apply(replicas: &mut Replicas, by: ElectionBy, liveness: &Liveness) -> Elected {
    let elected = replicas.elect("b", by, false, liveness, NOW).unwrap();
    match &elected {
        Elected::New { event, .. } | Elected::Nobody(Some(event)) => replicas.apply(event),
        _ => {}
    }
    elected
}

#[test]
fn ids_are_handed_out_once_and_taken_again_only_with_their_code() {
    let mut replicas = Replicas::default();
    assert_eq!(replicas.next_broker_id("b"), 1);
    let refused = replicas.apply_broker_id("c", "b", 2, "a:1;5", 100);
    assert_eq!(
        refused.unwrap_err().code,
        response_code::CONTROLLER_BROKER_ID_INVALID
    );
    let first = replicas.apply_broker_id("c", "b", 1, "a:1;5", 100).unwrap();
    replicas.apply(&first.unwrap());
    assert_eq!(replicas.next_broker_id("b"), 2);
    assert_eq!(
        replicas.apply_broker_id("c", "b", 1, "a:1;5", 100),
        Ok(None)
    );
    let taken = replicas.apply_broker_id("c", "b", 1, "a:2;6", 100);
    assert_eq!(
        taken.unwrap_err().code,
        response_code::CONTROLLER_BROKER_ID_INVALID
    );
    let full = replicas.apply_broker_id("c", "b", 2, "a:2;6", 1);
    assert!(full
        .unwrap_err()
        .remark
        .contains("quiverControllerBrokersMax"));
    assert_eq!(replicas.set("b").unwrap().brokers[&1].address, "a:1");
}

#[test]
fn the_first_election_takes_the_asking_broker_and_later_ones_the_furthest_live_replica() {
    let mut replicas = registered(3);
    let mut liveness = Liveness::default();
    for id in 1..=3 {
        beat(&mut liveness, id, -1, 0, i32::MAX);
    }
    let first = elect_and_apply(&mut replicas, ElectionBy::Broker(2), &liveness);
    assert!(matches!(first, Elected::New { master: 2, .. }));
    let set = replicas.set("b").unwrap();
    assert_eq!(
        (set.master, set.master_epoch, set.sync_state_set_epoch),
        (Some(2), 1, 1)
    );
    // Asked again with the master alive: it stays.
    let again = elect_and_apply(&mut replicas, ElectionBy::Broker(1), &liveness);
    assert_eq!(again, Elected::Unchanged);
    // The master grows its set to everyone, then dies.
    let event = replicas
        .alter_sync_state_set("b", &proposal(2, 1, &[1, 2, 3], 1), &liveness, NOW)
        .unwrap();
    replicas.apply(&event);
    let mut liveness = Liveness::default();
    beat(&mut liveness, 1, 1, 500, i32::MAX);
    beat(&mut liveness, 3, 1, 900, i32::MAX);
    let after = elect_and_apply(&mut replicas, ElectionBy::Controller, &liveness);
    assert!(
        matches!(
            after,
            Elected::New {
                master: 3,
                unclean: None,
                ..
            }
        ),
        "{after:?}"
    );
    let set = replicas.set("b").unwrap();
    assert_eq!(set.master_epoch, 2);
    assert_eq!(set.sync_state_set, BTreeSet::from([3]));
    assert_eq!(set.sync_state_set_epoch, 3);
}

#[test]
fn equal_logs_go_to_the_lower_priority_then_the_lower_id() {
    let mut replicas = registered(3);
    let mut liveness = Liveness::default();
    beat(&mut liveness, 1, -1, 0, 5);
    elect_and_apply(&mut replicas, ElectionBy::Broker(1), &liveness);
    let grow = replicas
        .alter_sync_state_set("b", &proposal(1, 1, &[1], 0), &liveness, NOW)
        .unwrap_err();
    assert_eq!(
        grow.code,
        response_code::CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    );
    beat(&mut liveness, 2, 1, 100, 9);
    beat(&mut liveness, 3, 1, 100, 4);
    let event = replicas
        .alter_sync_state_set("b", &proposal(1, 1, &[1, 2, 3], 1), &liveness, NOW)
        .unwrap();
    replicas.apply(&event);
    let mut liveness = Liveness::default();
    beat(&mut liveness, 2, 1, 100, 9);
    beat(&mut liveness, 3, 1, 100, 4);
    let elected = elect_and_apply(&mut replicas, ElectionBy::Controller, &liveness);
    assert!(matches!(elected, Elected::New { master: 3, .. }));
}

#[test]
fn a_replica_outside_the_sync_state_set_is_elected_only_when_unclean_and_says_what_it_loses() {
    let mut replicas = registered(2);
    let mut liveness = Liveness::default();
    beat(&mut liveness, 1, -1, 0, i32::MAX);
    elect_and_apply(&mut replicas, ElectionBy::Broker(1), &liveness);
    // Replica 2 never joined the set; the master dies.
    let mut liveness = Liveness::default();
    beat(&mut liveness, 2, 0, 700, i32::MAX);
    let clean = elect_and_apply(&mut replicas, ElectionBy::Controller, &liveness);
    assert_eq!(
        clean,
        Elected::Nobody(Some(Event::ElectMaster {
            name: "b".into(),
            master: None
        }))
    );
    let set = replicas.set("b").unwrap();
    assert_eq!((set.master, set.master_epoch), (None, 2));
    let by_admin = replicas
        .elect("b", ElectionBy::Admin(2), false, &liveness, NOW)
        .unwrap();
    assert_eq!(
        by_admin,
        Elected::Nobody(None),
        "an admin's failed election changes nothing"
    );
    let unclean = replicas
        .elect("b", ElectionBy::Admin(2), true, &liveness, NOW)
        .unwrap();
    match unclean {
        Elected::New {
            master: 2,
            unclean: Some(loss),
            ..
        } => {
            assert!(loss.contains("not in the SyncStateSet"), "{loss}");
        }
        other => panic!("expected an unclean election, got {other:?}"),
    }
}

#[test]
fn a_sync_state_set_change_is_fenced_by_both_epochs_and_needs_live_replicas() {
    let mut replicas = registered(3);
    let mut liveness = Liveness::default();
    beat(&mut liveness, 1, -1, 0, i32::MAX);
    beat(&mut liveness, 2, -1, 0, i32::MAX);
    elect_and_apply(&mut replicas, ElectionBy::Broker(1), &liveness);
    let grow = |m: i64, me: i32, members: &[i64], se: i32| {
        replicas
            .alter_sync_state_set("b", &proposal(m, me, members, se), &liveness, NOW)
            .map_err(|r| r.code)
    };
    assert_eq!(
        grow(2, 1, &[1, 2], 1),
        Err(response_code::CONTROLLER_INVALID_MASTER)
    );
    assert_eq!(
        grow(1, 0, &[1, 2], 1),
        Err(response_code::CONTROLLER_FENCED_MASTER_EPOCH)
    );
    assert_eq!(
        grow(1, 1, &[1, 2], 0),
        Err(response_code::CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH)
    );
    assert_eq!(
        grow(1, 1, &[1, 9], 1),
        Err(response_code::CONTROLLER_INVALID_REPLICAS)
    );
    assert_eq!(
        grow(1, 1, &[1, 3], 1),
        Err(response_code::CONTROLLER_BROKER_NOT_ALIVE)
    );
    assert_eq!(
        grow(1, 1, &[2], 1),
        Err(response_code::CONTROLLER_ALTER_SYNC_STATE_SET_FAILED)
    );
    assert!(grow(1, 1, &[1, 2], 1).is_ok());
}

#[test]
fn cleaning_refuses_living_brokers_unless_asked_and_removes_what_it_names() {
    let mut replicas = registered(2);
    let mut liveness = Liveness::default();
    beat(&mut liveness, 2, -1, 0, i32::MAX);
    let living = replicas
        .clean("b", Some("2"), false, &liveness, NOW)
        .unwrap_err();
    assert_eq!(
        living.code,
        response_code::CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    );
    let bad = replicas
        .clean("b", Some("x"), true, &liveness, NOW)
        .unwrap_err();
    assert_eq!(
        bad.code,
        response_code::CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    );
    let one = replicas
        .clean("b", Some("1"), false, &liveness, NOW)
        .unwrap();
    replicas.apply(&one);
    assert_eq!(
        replicas
            .set("b")
            .unwrap()
            .brokers
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [2]
    );
    let all = replicas.clean("b", None, true, &liveness, NOW).unwrap();
    replicas.apply(&all);
    assert!(replicas.set("b").is_none());
    // Ids are never handed out twice, but a set cleaned whole starts over.
    assert_eq!(replicas.next_broker_id("b"), 1);
}
