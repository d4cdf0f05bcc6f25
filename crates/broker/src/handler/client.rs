//! Client membership: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP,
//! CHECK_CLIENT_CONFIG (whether the broker can serve a consumer's subscription); and what admin
//! tools ask about clients: GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST,
//! GET_CONSUMER_RUNNING_INFO (passed on to the consumer).

use std::time::Duration;

use quiver_wire::body::{
    self, CheckClientRequestBody, ClientConnection, ConsumerConnection, ConsumerIdList,
    HeartbeatData, ProducerConnection,
};
use quiver_wire::code::response_code;
use quiver_wire::header::{
    ext_or_err, GetConsumerConnectionListRequestHeader, GetConsumerListByGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader, GetProducerConnectionListRequestHeader,
    UnregisterClientRequestHeader,
};
use quiver_wire::{Command, ExtFields, LanguageCode};

use super::{answer, group_refusal, topic_refusal, Call, Handled, Refusal, Reply};
use crate::clients::TooManyIds;
use crate::config::{CLIENT_IDS_MAX_KEY, CLIENT_IDS_PER_CONNECTION_MAX_KEY};
use crate::connection::{AskError, Connection};
use crate::filter::MessageFilter;
use crate::groups::Missing;
use crate::state::Membership;
use crate::topic::{topic_config, validate_group_name, RETRY_PREFIX};

/// Registers the client's groups and subscriptions, creates each clustering consumer group's
/// retry topic (the consumer looks up its route next), and tells a group's members when its
/// membership changed.
pub fn heartbeat(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.membership();
    let connection = call.connection;
    let mut data: HeartbeatData = body::from_json(&request.body).map_err(|e| {
        Refusal::new(
            response_code::SYSTEM_ERROR,
            format!("bad heartbeat body: {e}"),
        )
    })?;
    let names = data.consumer_data_set.iter().map(|c| &c.group_name);
    for name in names.chain(data.producer_data_set.iter().map(|p| &p.group_name)) {
        validate_group_name(name)
            .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
    }
    // Before anything is created for it: a new client id past the limits changes nothing.
    broker
        .clients
        .admits(connection.id, &data.client_id)
        .map_err(|too_many| client_ids_refusal(&data.client_id, too_many))?;
    keep_known_groups(broker, &mut data, call.now_ms)?;
    create_retry_topics(broker, &data)?;
    connection.identify(request.language, request.version);
    let client_id = data.client_id.clone();
    let changed = broker
        .clients
        .heartbeat(connection, data, call.now_ms)
        .map_err(|too_many| client_ids_refusal(&client_id, too_many))?;
    for group in changed {
        broker.notify_consumers_changed(&group);
    }
    let ext = ExtFields::new()
        .with("IS_SUPPORT_HEART_BEAT_V2", false)
        .with("IS_SUB_CHANGE", true);
    answer(request.response_to(response_code::SUCCESS).with_ext(ext))
}

/// A group the subscription group table lacks and may not create (autoCreateSubscriptionGroup
/// off) is not registered, as RocketMQ skips it: its pulls are then refused by name. One it may
/// not create because the table is full refuses the heartbeat, with the limit named.
fn keep_known_groups(
    broker: Membership<'_>,
    data: &mut HeartbeatData,
    now_ms: i64,
) -> Result<(), Refusal> {
    let mut kept = Vec::with_capacity(data.consumer_data_set.len());
    for consumer in std::mem::take(&mut data.consumer_data_set) {
        match broker.groups.lookup(&consumer.group_name, now_ms, |_| ()) {
            Ok(()) => kept.push(consumer),
            Err(missing @ Missing::Full { .. }) => {
                return Err(group_refusal(&consumer.group_name, missing))
            }
            Err(Missing::NotFound) => {
                tracing::warn!(group = %consumer.group_name, "heartbeat of a consumer group that does not exist");
            }
        }
    }
    data.consumer_data_set = kept;
    Ok(())
}

/// Each clustering consumer group's retry topic, which the consumer looks up next.
fn create_retry_topics(broker: Membership<'_>, data: &HeartbeatData) -> Result<(), Refusal> {
    let mut topics_created = false;
    for consumer in &data.consumer_data_set {
        if consumer.message_model == "BROADCASTING" {
            continue;
        }
        let retry_topic = format!("{RETRY_PREFIX}{}", consumer.group_name);
        let retry_queues = broker
            .groups
            .get(&consumer.group_name)
            .map_or(1, |group| group.retry_queue_nums.clamp(1, 1024));
        match broker
            .topics
            .create_if_absent(topic_config(&retry_topic, retry_queues, 6))
        {
            Ok(created) => topics_created |= created,
            Err(error) => return Err(topic_refusal(error, response_code::SYSTEM_ERROR)),
        }
    }
    if topics_created {
        broker.topics_changed();
    }
    Ok(())
}

/// A heartbeat of a new client id past a limit, answered with the limit named.
fn client_ids_refusal(client_id: &str, too_many: TooManyIds) -> Refusal {
    let remark = match too_many {
        TooManyIds::InAll { held, max } => format!(
            "client {client_id} not registered: the broker keeps {held} client ids, its most: \
             {CLIENT_IDS_MAX_KEY}={max}"
        ),
        TooManyIds::OnConnection { held, max } => format!(
            "client {client_id} not registered: {held} client ids registered over this \
             connection, its most: {CLIENT_IDS_PER_CONNECTION_MAX_KEY}={max}"
        ),
    };
    Refusal::new(response_code::SYSTEM_ERROR, remark)
}

pub fn unregister(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.membership();
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
    let broker = call.broker.membership();
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

/// How long a consumer gets to answer a request the broker passes on (mqadmin waits longer).
const CLIENT_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

fn client_connection(client_id: &str, connection: &Connection) -> ClientConnection {
    let (language, version) = connection
        .client_version()
        .unwrap_or((LanguageCode::JAVA, 0));
    ClientConnection {
        client_addr: connection.peer.to_string(),
        client_id: client_id.to_string(),
        language: language.name().to_string(),
        version,
    }
}

/// GET_CONSUMER_CONNECTION_LIST (`mqadmin consumerConnection`, `consumerProgress`): the group's
/// connected clients and what their heartbeats say they consume.
pub fn consumer_connections(call: &Call, request: &Command) -> Handled {
    let header = GetConsumerConnectionListRequestHeader::from_ext(ext_or_err(request)?)?;
    let members = call
        .broker
        .membership()
        .clients
        .consumer_members(&header.consumer_group);
    let Some((_, _, first)) = members.first() else {
        let remark = format!("the consumer group[{}] not online", header.consumer_group);
        return Err(Refusal::new(response_code::CONSUMER_NOT_ONLINE, remark));
    };
    let mut body = ConsumerConnection {
        consume_from_where: first.consume_from_where.clone(),
        consume_type: first.consume_type.clone(),
        message_model: first.message_model.clone(),
        ..ConsumerConnection::default()
    };
    for (client_id, connection, data) in &members {
        body.connection_set
            .push(client_connection(client_id, connection));
        for subscription in &data.subscription_data_set {
            let newer = body
                .subscription_table
                .get(&subscription.topic)
                .is_none_or(|known| known.sub_version < subscription.sub_version);
            if newer {
                body.subscription_table
                    .insert(subscription.topic.clone(), subscription.clone());
            }
        }
    }
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(body::to_json(&body)),
    )
}

/// GET_PRODUCER_CONNECTION_LIST (`mqadmin producerConnection`).
pub fn producer_connections(call: &Call, request: &Command) -> Handled {
    let header = GetProducerConnectionListRequestHeader::from_ext(ext_or_err(request)?)?;
    let producers = call
        .broker
        .membership()
        .clients
        .producers(&header.producer_group);
    if producers.is_empty() {
        let remark = format!("the producer group[{}] not exist", header.producer_group);
        return Err(Refusal::new(response_code::SYSTEM_ERROR, remark));
    }
    let body = ProducerConnection {
        connection_set: producers
            .iter()
            .map(|(client_id, connection)| client_connection(client_id, connection))
            .collect(),
    };
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(body::to_json(&body)),
    )
}

/// GET_CONSUMER_RUNNING_INFO (`mqadmin consumerStatus`, `consumerProgress -s`): passed on to
/// the named client, whose answer (its running info) goes back as it is.
pub fn consumer_running_info(call: &Call, request: &Command) -> Handled {
    let header = GetConsumerRunningInfoRequestHeader::from_ext(ext_or_err(request)?)?;
    let target = call
        .broker
        .membership()
        .clients
        .consumers(&header.consumer_group)
        .into_iter()
        .find(|(client_id, _)| *client_id == header.client_id);
    let Some((_, connection)) = target else {
        let remark = format!(
            "The Consumer <{}> <{}> not online",
            header.consumer_group, header.client_id
        );
        return Err(Refusal::new(response_code::SYSTEM_ERROR, remark));
    };
    let mut forwarded =
        Command::request(request.code, request.encoding).with_body(request.body.clone());
    if let Some(ext) = &request.ext {
        forwarded = forwarded.with_ext(ext.clone());
    }
    let response = request.response_to(response_code::SUCCESS);
    Ok(Reply::wait(async move {
        match connection.ask(forwarded, CLIENT_ANSWER_TIMEOUT).await {
            Ok(answer) => {
                let mut passed = response.with_body(answer.body);
                passed.code = answer.code;
                passed.remark = answer.remark;
                passed
            }
            Err(AskError::NoAnswer) => {
                let mut timed_out = response.with_remark(format!(
                    "consumer <{}> <{}> Timeout: no answer within {} ms",
                    header.consumer_group,
                    header.client_id,
                    CLIENT_ANSWER_TIMEOUT.as_millis()
                ));
                timed_out.code = response_code::CONSUME_MSG_TIMEOUT;
                timed_out
            }
            Err(AskError::NotSent) => {
                let mut failed = response.with_remark(format!(
                    "invoke consumer <{}> <{}> Exception: the connection is gone or not reading",
                    header.consumer_group, header.client_id
                ));
                failed.code = response_code::SYSTEM_ERROR;
                failed
            }
        }
    }))
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
    if !call.broker.membership().config.enable_property_filter {
        let remark = format!(
            "The broker does not support consumer to filter message by {expression_type} (enablePropertyFilter=false)"
        );
        return Err(Refusal::new(response_code::SYSTEM_ERROR, remark));
    }
    MessageFilter::parse(Some(expression_type), &subscription.sub_string)
        .map_err(|e| Refusal::new(response_code::SUBSCRIPTION_PARSE_FAILED, e.to_string()))?;
    answer(request.response_to(response_code::SUCCESS))
}
