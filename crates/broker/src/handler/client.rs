//! Client membership: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, and
//! CHECK_CLIENT_CONFIG (whether the broker can serve a consumer's subscription).

use quiver_wire::body::{self, CheckClientRequestBody, ConsumerIdList, HeartbeatData};
use quiver_wire::code::response_code;
use quiver_wire::header::{
    ext_or_err, GetConsumerListByGroupRequestHeader, UnregisterClientRequestHeader,
};
use quiver_wire::{Command, ExtFields};

use super::{answer, Call, Handled, Refusal};
use crate::filter::MessageFilter;
use crate::topic::{topic_config, validate_group_name, RETRY_PREFIX};

/// Registers the client's groups and subscriptions, creates each clustering consumer group's
/// retry topic (the consumer looks up its route next), and tells a group's members when its
/// membership changed.
pub fn heartbeat(call: &Call, request: &Command) -> Handled {
    let broker = call.broker;
    let connection = call.connection;
    let data: HeartbeatData = body::from_json(&request.body).map_err(|e| {
        Refusal::new(
            response_code::SYSTEM_ERROR,
            format!("bad heartbeat body: {e}"),
        )
    })?;
    let mut topics_created = false;
    for consumer in &data.consumer_data_set {
        validate_group_name(&consumer.group_name)
            .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
        if consumer.message_model == "BROADCASTING" {
            continue;
        }
        let retry_topic = format!("{RETRY_PREFIX}{}", consumer.group_name);
        match broker
            .topics
            .create_if_absent(topic_config(&retry_topic, 1, 6))
        {
            Ok(created) => topics_created |= created,
            Err(error) => return Err(Refusal::new(response_code::SYSTEM_ERROR, error.to_string())),
        }
    }
    if topics_created {
        broker.topics_changed();
    }
    for group in broker.clients.heartbeat(connection, data, call.now_ms) {
        broker.notify_consumers_changed(&group);
    }
    let ext = ExtFields::new()
        .with("IS_SUPPORT_HEART_BEAT_V2", false)
        .with("IS_SUB_CHANGE", true);
    answer(request.response_to(response_code::SUCCESS).with_ext(ext))
}

pub fn unregister(call: &Call, request: &Command) -> Handled {
    let broker = call.broker;
    let connection = call.connection;
    let header = UnregisterClientRequestHeader::from_ext(ext_or_err(request)?)?;
    let changed = broker.clients.unregister(
        connection.id,
        &header.client_id,
        header.producer_group.as_deref(),
        header.consumer_group.as_deref(),
    );
    for group in changed {
        broker.notify_consumers_changed(&group);
    }
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_ext(ExtFields::new()),
    )
}

pub fn consumer_list(call: &Call, request: &Command) -> Handled {
    let broker = call.broker;
    let header = GetConsumerListByGroupRequestHeader::from_ext(ext_or_err(request)?)?;
    let ids = broker.clients.consumer_ids(&header.consumer_group);
    if ids.is_empty() {
        let remark = format!("no consumer for this group, {}", header.consumer_group);
        return Err(Refusal::new(response_code::SYSTEM_ERROR, remark));
    }
    let body = body::to_json(&ConsumerIdList {
        consumer_id_list: ids,
    });
    answer(request.response_to(response_code::SUCCESS).with_body(body))
}

/// CHECK_CLIENT_CONFIG: Java's push consumer asks at start whether its SQL92 subscription can
/// be served, and fails to start if not. As RocketMQ: a TAG subscription is always fine; SQL92
/// needs `enablePropertyFilter` (SYSTEM_ERROR) and an expression that parses
/// (SUBSCRIPTION_PARSE_FAILED, the parse error as remark).
pub fn check_client_config(call: &Call, request: &Command) -> Handled {
    let body: CheckClientRequestBody = body::from_json(&request.body).map_err(|e| {
        let remark = format!("bad CHECK_CLIENT_CONFIG body: {e}");
        Refusal::new(response_code::SYSTEM_ERROR, remark)
    })?;
    let subscription = &body.subscription_data;
    let expression_type = subscription.expression_type.as_str();
    if MessageFilter::is_tag_type(Some(expression_type)) {
        return answer(request.response_to(response_code::SUCCESS));
    }
    if !call.broker.config.enable_property_filter {
        let remark = format!(
            "The broker does not support consumer to filter message by {expression_type} (enablePropertyFilter=false)"
        );
        return Err(Refusal::new(response_code::SYSTEM_ERROR, remark));
    }
    MessageFilter::parse(Some(expression_type), &subscription.sub_string)
        .map_err(|e| Refusal::new(response_code::SUBSCRIPTION_PARSE_FAILED, e.to_string()))?;
    answer(request.response_to(response_code::SUCCESS))
}
