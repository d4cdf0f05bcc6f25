//! Controller mode's requests to a broker: NOTIFY_BROKER_ROLE_CHANGED, the controller's push
//! of a new master (handed to the controller client, which acts only on a higher epoch), and
//! GET_BROKER_EPOCH_CACHE, an admin's read of the epoch file.

use quiver_wire::body::{self, EpochEntry, EpochEntryCache, SyncStateSet};
use quiver_wire::code::response_code;
use quiver_wire::header::{ext_or_err, NotifyBrokerRoleChangedRequestHeader};
use quiver_wire::Command;

use super::{answer, Call, Handled, Refusal};
use crate::ha::controlled::{Controlled, RoleChange};

fn controlled<'a>(call: &'a Call) -> Result<&'a Controlled, Refusal> {
    let replication = call.broker.administering().replication;
    replication.controlled.as_ref().ok_or_else(|| {
        // RocketMQ's words, trailing space included.
        Refusal::new(
            response_code::SYSTEM_ERROR,
            "this request only for controllerMode ",
        )
    })
}

pub fn notify_role_changed(call: &Call, request: &Command) -> Handled {
    let controlled = controlled(call)?;
    let header = NotifyBrokerRoleChangedRequestHeader::from_ext(ext_or_err(request)?)?;
    let set: SyncStateSet = body::from_json(&request.body)
        .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
    let (Some(id), Some(address), Some(epoch)) = (
        header.master_broker_id,
        header.master_address.filter(|address| !address.is_empty()),
        header.master_epoch,
    ) else {
        let remark = "a role change needs masterBrokerId, masterAddress and masterEpoch";
        return Err(Refusal::new(response_code::SYSTEM_ERROR, remark));
    };
    controlled.push(RoleChange {
        master_broker_id: id,
        master_address: address,
        master_epoch: epoch,
        sync_state_set_epoch: header
            .sync_state_set_epoch
            .unwrap_or(set.sync_state_set_epoch),
        sync_state_set: set.sync_state_set,
    });
    answer(request.response_to(response_code::SUCCESS))
}

pub fn epoch_cache(call: &Call, request: &Command) -> Handled {
    let controlled = controlled(call)?;
    let broker = call.broker.administering();
    let max_offset = broker.store.stats().written_position as i64;
    let epochs = controlled.epochs.lock().expect("epochs lock poisoned");
    let entries = epochs.entries();
    let epoch_list = entries
        .as_slice()
        .iter()
        .enumerate()
        .map(|(index, entry)| EpochEntry {
            epoch: entry.epoch,
            start_offset: entry.start_offset as i64,
            // RocketMQ's last entry is open-ended.
            end_offset: match index + 1 == entries.len() {
                true => i64::MAX,
                false => entries.end_offset(index, max_offset as u64) as i64,
            },
        })
        .collect();
    drop(epochs);
    let replication = broker.replication;
    let broker_id = match replication.is_master() {
        true => 0,
        false => controlled.own_id(),
    };
    let cache = EpochEntryCache {
        broker_id,
        broker_name: broker.config.broker_name.clone(),
        cluster_name: broker.config.cluster_name.clone(),
        epoch_list,
        max_offset,
    };
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(body::to_json(&cache)),
    )
}
