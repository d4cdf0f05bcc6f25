//! The subscription-group table and what it governs (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
//! DELETE_SUBSCRIPTIONGROUP, GET_SUBSCRIPTIONGROUP_CONFIG, autoCreateSubscriptionGroup,
//! consumeEnable, consumeBroadcastEnable, retryMaxTimes); the admin requests about clients
//! (GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST, GET_CONSUMER_RUNNING_INFO);
//! offset resets (INVOKE_BROKER_TO_RESET_OFFSET); and the traffic figures admin tools read.

mod harness;

use harness::{field, messages, options, pull_request, Harness};
use quiver_broker::handler::Reply;
use quiver_wire::body::{
    self, ConsumerConnection, ConsumerData, HeartbeatData, KvTable, ProducerConnection,
    ProducerData, SubscriptionData, SubscriptionGroupConfig,
};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{ResetOffsetRequestHeader, UpdateConsumerOffsetRequestHeader};
use quiver_wire::stats::{ResetOffsetBody, TopicStatsTable};
use quiver_wire::{Command, Encoding, ExtFields};

fn consumer_heartbeat(client_id: &str, group: &str, model: &str) -> Command {
    let data = HeartbeatData {
        client_id: client_id.into(),
        consumer_data_set: vec![ConsumerData {
            consume_from_where: "CONSUME_FROM_FIRST_OFFSET".into(),
            consume_type: "CONSUME_PASSIVELY".into(),
            group_name: group.into(),
            message_model: model.into(),
            subscription_data_set: vec![SubscriptionData {
                expression_type: "TAG".into(),
                sub_string: "*".into(),
                topic: "Orders".into(),
                sub_version: 1,
                ..SubscriptionData::default()
            }],
            unit_mode: false,
        }],
        ..HeartbeatData::default()
    };
    Command::request(request_code::HEART_BEAT, Encoding::Json).with_body(body::to_json(&data))
}

fn update_group(config: &SubscriptionGroupConfig) -> Command {
    Command::request(
        request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        Encoding::Json,
    )
    .with_ext(ExtFields::new())
    .with_body(body::to_json(config))
}

fn get_group(group: &str) -> Command {
    Command::request(request_code::GET_SUBSCRIPTIONGROUP_CONFIG, Encoding::Json)
        .with_ext(ExtFields::new().with("group", group))
}

fn commit(topic: &str, group: &str, queue_id: i32, offset: i64) -> Command {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
    };
    Command::request(request_code::UPDATE_CONSUMER_OFFSET, Encoding::Json).with_ext(header.to_ext())
}

async fn orders(h: &Harness, messages: usize) {
    assert_eq!(
        h.create_topic("Orders", 1).await.code,
        response_code::SUCCESS
    );
    for i in 0..messages {
        let sent = h
            .send("Orders", format!("m{i}").as_bytes(), &options())
            .await;
        assert_eq!(sent.code, response_code::SUCCESS, "{:?}", sent.remark);
    }
}

#[tokio::test]
async fn groups_are_created_read_changed_and_deleted_with_their_offsets() {
    let h = Harness::new();
    orders(&h, 1).await;
    let mut config = SubscriptionGroupConfig::named("billing");
    config.retry_max_times = 3;
    config.consume_broadcast_enable = false;
    assert_eq!(
        h.call(update_group(&config)).await.code,
        response_code::SUCCESS
    );
    let read = h.call(get_group("billing")).await;
    assert_eq!(read.code, response_code::SUCCESS);
    let read: SubscriptionGroupConfig = body::from_json(&read.body).unwrap();
    assert_eq!(read, config);

    let mut bad = SubscriptionGroupConfig::named("no spaces");
    let refused = h.call(update_group(&bad)).await;
    assert_eq!(refused.code, response_code::INVALID_PARAMETER);
    bad.group_name = String::new();
    assert_eq!(
        h.call(update_group(&bad)).await.code,
        response_code::INVALID_PARAMETER
    );

    assert_eq!(
        h.call(commit("Orders", "billing", 0, 1)).await.code,
        response_code::SUCCESS
    );
    let delete = Command::request(request_code::DELETE_SUBSCRIPTIONGROUP, Encoding::Json).with_ext(
        ExtFields::new()
            .with("groupName", "billing")
            .with("cleanOffset", true),
    );
    assert_eq!(h.call(delete).await.code, response_code::SUCCESS);
    assert_eq!(
        h.broker.membership().offsets.get("Orders", "billing", 0),
        None
    );
    // Asking for it again creates it afresh, with RocketMQ's defaults (autoCreateSubscriptionGroup).
    let again: SubscriptionGroupConfig =
        body::from_json(&h.call(get_group("billing")).await.body).unwrap();
    assert_eq!(again, SubscriptionGroupConfig::named("billing"));
    let strict = Harness::with_config("autoCreateSubscriptionGroup=false\n");
    let gone = strict.call(get_group("billing")).await;
    assert_eq!(gone.code, response_code::SUBSCRIPTION_GROUP_NOT_EXIST);
}

#[tokio::test]
async fn the_table_survives_a_restart() {
    let h = Harness::new();
    let mut config = SubscriptionGroupConfig::named("kept");
    config.consume_enable = false;
    h.call(update_group(&config)).await;
    h.broker.membership().groups.persist_if_dirty().unwrap();
    let h = h.reopen(|_| {});
    let read: SubscriptionGroupConfig =
        body::from_json(&h.call(get_group("kept")).await.body).unwrap();
    assert!(!read.consume_enable);
}

#[tokio::test]
async fn without_auto_create_an_unknown_group_is_refused_until_it_is_created() {
    let h = Harness::with_config("autoCreateSubscriptionGroup=false\n");
    orders(&h, 2).await;
    assert_eq!(
        h.call(consumer_heartbeat("c1", "late", "CLUSTERING"))
            .await
            .code,
        response_code::SUCCESS
    );
    assert!(
        h.broker.membership().clients.consumers("late").is_empty(),
        "an unknown group's consumer is not registered"
    );
    let pull = h.pull("Orders", "late", 0, 0).await;
    assert_eq!(pull.code, response_code::SUBSCRIPTION_GROUP_NOT_EXIST);
    assert_eq!(
        h.call(commit("Orders", "late", 0, 1)).await.code,
        response_code::SUBSCRIPTION_GROUP_NOT_EXIST
    );

    h.call(update_group(&SubscriptionGroupConfig::named("late")))
        .await;
    assert_eq!(messages(&h.pull("Orders", "late", 0, 0).await).len(), 2);
    h.call(consumer_heartbeat("c1", "late", "CLUSTERING")).await;
    assert_eq!(h.broker.membership().clients.consumers("late").len(), 1);
}

#[tokio::test]
async fn a_group_with_consume_disabled_or_broadcast_forbidden_is_refused() {
    let h = Harness::new();
    orders(&h, 1).await;
    let mut closed = SubscriptionGroupConfig::named("closed");
    closed.consume_enable = false;
    h.call(update_group(&closed)).await;
    let pull = h.pull("Orders", "closed", 0, 0).await;
    assert_eq!(pull.code, response_code::NO_PERMISSION);
    assert!(pull
        .remark
        .unwrap()
        .contains("subscription group no permission"));

    let mut unicast = SubscriptionGroupConfig::named("unicast");
    unicast.consume_broadcast_enable = false;
    h.call(update_group(&unicast)).await;
    h.call(consumer_heartbeat("c1", "unicast", "BROADCASTING"))
        .await;
    let pull = h.pull("Orders", "unicast", 0, 0).await;
    assert_eq!(pull.code, response_code::NO_PERMISSION);
    assert!(pull
        .remark
        .unwrap()
        .contains("can not consume by broadcast way"));
    // The same group consuming by clustering is served.
    let (other, _) = h.second_connection();
    h.call_on(&other, consumer_heartbeat("c1", "unicast", "CLUSTERING"))
        .await;
    assert_eq!(messages(&h.pull("Orders", "unicast", 0, 0).await).len(), 1);
}

#[tokio::test]
async fn a_send_back_without_a_budget_takes_the_groups_retry_max_times() {
    let h = Harness::new();
    orders(&h, 1).await;
    let mut config = SubscriptionGroupConfig::named("picky");
    config.retry_max_times = 0;
    h.call(update_group(&config)).await;
    let pulled = messages(&h.pull("Orders", "picky", 0, 0).await);
    let position = pulled[0].physical_offset;
    let send_back = Command::request(request_code::CONSUMER_SEND_MSG_BACK, Encoding::Json)
        .with_ext(
            ExtFields::new()
                .with("offset", position)
                .with("group", "picky")
                .with("delayLevel", 0)
                .with("originTopic", "Orders"),
        );
    let answer = h.call(send_back).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    assert!(
        h.broker.membership().topics.shape("%DLQ%picky").is_some(),
        "a budget of 0 dead-letters the first send-back"
    );
}

#[tokio::test]
async fn connection_lists_name_the_groups_clients() {
    let h = Harness::new();
    orders(&h, 0).await;
    let none = Command::request(request_code::GET_CONSUMER_CONNECTION_LIST, Encoding::Json)
        .with_ext(ExtFields::new().with("consumerGroup", "g"));
    assert_eq!(
        h.call(none.clone()).await.code,
        response_code::CONSUMER_NOT_ONLINE
    );
    let mut heartbeat = consumer_heartbeat("c1", "g", "CLUSTERING");
    let mut data: HeartbeatData = body::from_json(&heartbeat.body).unwrap();
    data.producer_data_set = vec![ProducerData {
        group_name: "pg".into(),
    }];
    heartbeat = heartbeat.with_body(body::to_json(&data));
    heartbeat.version = 475;
    h.call(heartbeat).await;

    let answer = h.call(none).await;
    assert_eq!(answer.code, response_code::SUCCESS);
    let consumers: ConsumerConnection = body::from_json(&answer.body).unwrap();
    assert_eq!(consumers.connection_set.len(), 1);
    assert_eq!(consumers.connection_set[0].client_id, "c1");
    assert_eq!(consumers.connection_set[0].language, "JAVA");
    assert_eq!(consumers.connection_set[0].version, 475);
    assert_eq!(consumers.message_model, "CLUSTERING");
    assert_eq!(consumers.subscription_table["Orders"].sub_string, "*");

    let producers = Command::request(request_code::GET_PRODUCER_CONNECTION_LIST, Encoding::Json)
        .with_ext(ExtFields::new().with("producerGroup", "pg"));
    let answer = h.call(producers).await;
    assert_eq!(answer.code, response_code::SUCCESS);
    let producers: ProducerConnection = body::from_json(&answer.body).unwrap();
    assert_eq!(producers.connection_set[0].client_id, "c1");
}

#[tokio::test]
async fn running_info_is_asked_of_the_consumer_and_its_answer_passed_back() {
    let mut h = Harness::new();
    orders(&h, 0).await;
    h.call(consumer_heartbeat("c1", "g", "CLUSTERING")).await;
    while h.outgoing.try_recv().is_ok() {}
    let ask = Command::request(request_code::GET_CONSUMER_RUNNING_INFO, Encoding::Json).with_ext(
        ExtFields::new()
            .with("consumerGroup", "g")
            .with("clientId", "c1")
            .with("jstackEnable", false),
    );
    let Reply::Wait(answer) = h.dispatch(&ask) else {
        panic!("the answer waits for the consumer");
    };
    let answer = tokio::spawn(answer);
    let forwarded = h
        .outgoing
        .recv()
        .await
        .expect("asked of the consumer")
        .command;
    assert_eq!(forwarded.code, request_code::GET_CONSUMER_RUNNING_INFO);
    assert_eq!(forwarded.ext.as_ref().unwrap().get("clientId"), Some("c1"));
    h.connection.answered(
        forwarded
            .response_to(response_code::SUCCESS)
            .with_body(&b"{\"properties\":{}}"[..]),
    );
    let answer = answer.await.unwrap();
    assert_eq!(answer.command.code, response_code::SUCCESS);
    assert_eq!(&answer.command.body[..], b"{\"properties\":{}}");

    let absent = Command::request(request_code::GET_CONSUMER_RUNNING_INFO, Encoding::Json)
        .with_ext(
            ExtFields::new()
                .with("consumerGroup", "g")
                .with("clientId", "nobody"),
        );
    let answer = h.call(absent).await;
    assert_eq!(answer.code, response_code::SYSTEM_ERROR);
    assert!(answer.remark.unwrap().contains("not online"));
}

fn reset(topic: &str, group: &str, timestamp: i64) -> Command {
    let header = ResetOffsetRequestHeader {
        topic: topic.into(),
        group: group.into(),
        timestamp,
        is_force: true,
        queue_id: -1,
        offset: None,
    };
    Command::request(request_code::INVOKE_BROKER_TO_RESET_OFFSET, Encoding::Json)
        .with_ext(header.to_ext())
}

#[tokio::test]
async fn a_reset_moves_stored_offsets_and_the_next_pull_once() {
    let h = Harness::new();
    orders(&h, 5).await;
    assert_eq!(
        h.call(commit("Orders", "g", 0, 5)).await.code,
        response_code::SUCCESS
    );
    let answer = h.call(reset("Orders", "g", 0)).await;
    assert_eq!(answer.code, response_code::SUCCESS, "{:?}", answer.remark);
    let body = ResetOffsetBody::from_java_json(&answer.body).unwrap();
    assert_eq!(body.offset_table.values().copied().collect::<Vec<_>>(), [0]);
    assert_eq!(h.broker.membership().offsets.get("Orders", "g", 0), Some(0));

    // A consumer's commit from before the reset does not undo it.
    assert_eq!(
        h.call(commit("Orders", "g", 0, 5)).await.code,
        response_code::SUCCESS
    );
    assert_eq!(h.broker.membership().offsets.get("Orders", "g", 0), Some(0));

    let moved = h.call(pull_request("Orders", "g", 0, 5, 0)).await;
    assert_eq!(moved.code, response_code::PULL_OFFSET_MOVED);
    assert_eq!(field(&moved, "nextBeginOffset"), "0");
    let again = h.pull("Orders", "g", 0, 0).await;
    assert_eq!(
        messages(&again).len(),
        5,
        "the next pull reads from the reset"
    );

    // To the end (timestamp -1), and the errors RocketMQ gives.
    assert_eq!(
        h.call(reset("Orders", "g", -1)).await.code,
        response_code::SUCCESS
    );
    assert_eq!(h.broker.membership().offsets.get("Orders", "g", 0), Some(5));
    assert_eq!(
        h.call(reset("Nope", "g", 0)).await.code,
        response_code::TOPIC_NOT_EXIST
    );
    let unknown = Harness::with_config("autoCreateSubscriptionGroup=false\n");
    orders(&unknown, 0).await;
    assert_eq!(
        unknown.call(reset("Orders", "ghost", 0)).await.code,
        response_code::SUBSCRIPTION_GROUP_NOT_EXIST
    );
}

#[tokio::test]
async fn without_server_side_reset_running_consumers_are_told() {
    let mut h = Harness::with_config("useServerSideResetOffset=false\n");
    orders(&h, 3).await;
    h.call(commit("Orders", "g", 0, 3)).await;
    let offline = h.call(reset("Orders", "g", 0)).await;
    assert_eq!(offline.code, response_code::CONSUMER_NOT_ONLINE);
    h.call(consumer_heartbeat("c1", "g", "CLUSTERING")).await;
    while h.outgoing.try_recv().is_ok() {}
    let answer = h.call(reset("Orders", "g", 0)).await;
    assert_eq!(answer.code, response_code::SUCCESS);
    let told = h.outgoing.try_recv().expect("the consumer is told").command;
    assert_eq!(told.code, request_code::RESET_CONSUMER_CLIENT_OFFSET);
    assert!(told.is_oneway());
    let body = ResetOffsetBody::from_java_json(&told.body).unwrap();
    assert_eq!(body.offset_table.values().copied().collect::<Vec<_>>(), [0]);
    assert_eq!(
        h.broker.membership().offsets.get("Orders", "g", 0),
        Some(3),
        "the consumer's next commit moves the stored offset"
    );
}

#[tokio::test]
async fn put_and_get_rates_are_reported() {
    let mut h = Harness::new();
    orders(&h, 0).await;
    h.broker.sweep(h.now_ms);
    for i in 0..20 {
        h.send("Orders", format!("m{i}").as_bytes(), &options())
            .await;
    }
    assert_eq!(messages(&h.pull("Orders", "g", 0, 0).await).len(), 20);
    h.pull("Orders", "g", 0, 20).await;
    h.advance(10_000);
    h.broker.sweep(h.now_ms);

    let stats = Command::request(request_code::GET_TOPIC_STATS_INFO, Encoding::Json)
        .with_ext(ExtFields::new().with("topic", "Orders"));
    let stats = TopicStatsTable::from_java_json(&h.call(stats).await.body).unwrap();
    assert_eq!(stats.topic_put_tps, 2.0, "20 messages in 10 s");

    let info = Command::request(request_code::GET_BROKER_RUNTIME_INFO, Encoding::Json);
    let info: KvTable = body::from_json(&h.call(info).await.body).unwrap();
    assert_eq!(info.table["putTps"], "2.00 2.00 2.00");
    assert_eq!(info.table["getTransferredTps"], "2.00 2.00 2.00");
    assert_eq!(info.table["getTotalTps"], "0.20 0.20 0.20");
    assert_eq!(info.table["getFoundTps"], "0.10 0.10 0.10");
    assert_eq!(info.table["getMissTps"], "0.10 0.10 0.10");
}
