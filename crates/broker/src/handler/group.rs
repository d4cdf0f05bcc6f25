//! The subscription-group table's admin requests: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
//! (`mqadmin updateSubGroup`), DELETE_SUBSCRIPTIONGROUP (`deleteSubGroup`) and
//! GET_SUBSCRIPTIONGROUP_CONFIG (`getConsumerConfig`). The table itself is `groups.rs`; a
//! slave's copy of it is GET_ALL_SUBSCRIPTIONGROUP_CONFIG in `replica.rs`.

use quiver_wire::body::{self, SubscriptionGroupConfig};
use quiver_wire::code::response_code;
use quiver_wire::header::{
    ext_or_err, DeleteSubscriptionGroupRequestHeader, GetSubscriptionGroupConfigRequestHeader,
};
use quiver_wire::Command;

use super::{answer, Call, Handled, Refusal};
use crate::config::SUBSCRIPTION_GROUPS_MAX_KEY;
use crate::groups::Refused;

pub fn update(call: &Call, request: &Command) -> Handled {
    let config: SubscriptionGroupConfig = body::from_json(&request.body).map_err(|e| {
        let remark = format!("bad subscription group body: {e}");
        Refusal::new(response_code::INVALID_PARAMETER, remark)
    })?;
    if config.retry_queue_nums < 0 || config.retry_max_times < -1 {
        let remark = format!(
            "retryQueueNums {} and retryMaxTimes {} must not be negative",
            config.retry_queue_nums, config.retry_max_times
        );
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    let name = config.group_name.clone();
    call.broker
        .membership()
        .groups
        .update(config, call.now_ms)
        .map_err(|refused| match refused {
            Refused::InvalidName(remark) => Refusal::new(response_code::INVALID_PARAMETER, remark),
            Refused::Full { held, max } => {
                let remark = format!(
                    "subscription group {name} cannot be created: the broker holds {held} \
                     groups, its most: {SUBSCRIPTION_GROUPS_MAX_KEY}={max}"
                );
                Refusal::new(response_code::SYSTEM_ERROR, remark)
            }
        })?;
    tracing::info!(group = %name, peer = %call.connection.peer, "subscription group created or updated");
    answer(request.response_to(response_code::SUCCESS))
}

pub fn delete(call: &Call, request: &Command) -> Handled {
    let header = DeleteSubscriptionGroupRequestHeader::from_ext(ext_or_err(request)?)?;
    let broker = call.broker.membership();
    let existed = broker.groups.delete(&header.group_name, call.now_ms);
    if header.clean_offset {
        broker.offsets.remove_group(&header.group_name);
    }
    tracing::info!(
        group = %header.group_name,
        existed,
        clean_offset = header.clean_offset,
        "subscription group deleted"
    );
    answer(request.response_to(response_code::SUCCESS))
}

/// As RocketMQ, asking for a group creates it when autoCreateSubscriptionGroup is on, so a
/// deleted group reads back with the default settings.
pub fn get(call: &Call, request: &Command) -> Handled {
    let header = GetSubscriptionGroupConfigRequestHeader::from_ext(ext_or_err(request)?)?;
    let Some(config) = call
        .broker
        .membership()
        .groups
        .find(&header.group, call.now_ms)
    else {
        return Err(Refusal::new(
            response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
            "No group in this broker",
        ));
    };
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(body::to_json(&config)),
    )
}
