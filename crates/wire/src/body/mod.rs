//! JSON bodies, with Java's property names.
//!
//! Java writes these with fastjson, which emits non-standard JSON such as unquoted integer map
//! keys (`{0:"127.0.0.1:10911"}`) and leaves null fields out. `from_json` therefore quotes bare
//! integer keys first, and every struct takes defaults for missing keys, ignores unknown keys
//! and accepts `null` where a collection or string is expected. Our own output is standard JSON
//! with quoted keys, which Java clients also read.
//!
//! Fields are declared in the alphabetical order of their JSON keys, because fastjson sorts keys
//! and matching its output byte for byte makes captures easy to compare.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Deserializer, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("bad JSON body: {0}")]
    Json(String),
}

/// Parses a body leniently (see the module comment).
pub fn from_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, BodyError> {
    let text = quote_integer_keys(bytes);
    serde_json::from_slice(&text).map_err(|err| BodyError::Json(err.to_string()))
}

/// Serializes a body as standard JSON.
///
/// Panics only if `T`'s Serialize impl fails or uses non-string map keys, which no body type
/// here does; that would be a bug in the type, not bad input.
pub fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("body types serialize to JSON without error")
}

/// Rewrites `{0:"a",-1:"b"}` as `{"0":"a","-1":"b"}`, touching nothing inside strings.
/// A bare integer counts as a key when it follows `{` or `,` and is followed by `:`.
pub(crate) fn quote_integer_keys(input: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let mut out: Option<Vec<u8>> = None;
    let mut in_string = false;
    let mut escaped = false;
    // Index just past the last `{` or `,` seen outside a string (skipping whitespace), where a
    // key may start.
    let mut key_start: Option<usize> = None;
    let mut copied_up_to = 0;
    let mut index = 0;
    while index < input.len() {
        let byte = input[index];
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            index += 1;
            continue;
        }
        match byte {
            b'"' => {
                in_string = true;
                key_start = None;
            }
            b'{' | b',' => key_start = Some(index + 1),
            b' ' | b'\t' | b'\r' | b'\n' => {}
            b'-' | b'0'..=b'9' if key_start.is_some() => {
                let digits_start = index;
                let mut end = index + 1;
                while end < input.len() && input[end].is_ascii_digit() {
                    end += 1;
                }
                let mut after = end;
                while after < input.len() && input[after].is_ascii_whitespace() {
                    after += 1;
                }
                let is_key = input.get(after) == Some(&b':')
                    && input[digits_start..end].iter().any(u8::is_ascii_digit);
                if is_key {
                    let buffer = out.get_or_insert_with(|| Vec::with_capacity(input.len() + 16));
                    buffer.extend_from_slice(&input[copied_up_to..digits_start]);
                    buffer.push(b'"');
                    buffer.extend_from_slice(&input[digits_start..end]);
                    buffer.push(b'"');
                    copied_up_to = end;
                }
                key_start = None;
                index = end;
                continue;
            }
            _ => key_start = None,
        }
        index += 1;
    }
    match out {
        Some(mut buffer) => {
            buffer.extend_from_slice(&input[copied_up_to..]);
            std::borrow::Cow::Owned(buffer)
        }
        None => std::borrow::Cow::Borrowed(input),
    }
}

/// Treats `null` as the type's default, as Java's parser does for absent values.
fn null_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Applies the lenient attributes every body struct shares.
macro_rules! body_struct {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$field_meta:meta])* pub $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default, rename_all = "camelCase")]
        pub struct $name {
            $($(#[$field_meta])* #[serde(deserialize_with = "null_default")] pub $field: $ty,)*
        }
    };
}

body_struct! {
    /// GET_ROUTEINFO_BY_TOPIC response.
    pub struct TopicRouteData {
        pub broker_datas: Vec<BrokerData>,
        /// Always emitted as `{}`; Java dereferences it unconditionally.
        pub filter_server_table: BTreeMap<String, Vec<String>>,
        /// Left out: when present the producer ignores `queue_datas`.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub order_topic_conf: Option<String>,
        pub queue_datas: Vec<QueueData>,
    }
}

body_struct! {
    pub struct QueueData {
        pub broker_name: String,
        pub perm: i32,
        pub read_queue_nums: i32,
        pub topic_sys_flag: i32,
        pub write_queue_nums: i32,
    }
}

body_struct! {
    pub struct BrokerData {
        /// Broker id (0 = master) to "ip:port". Written with quoted keys.
        pub broker_addrs: BTreeMap<i64, String>,
        pub broker_name: String,
        pub cluster: String,
        pub enable_acting_master: bool,
    }
}

body_struct! {
    /// GET_BROKER_CLUSTER_INFO response.
    pub struct ClusterInfo {
        pub broker_addr_table: BTreeMap<String, BrokerData>,
        pub cluster_addr_table: BTreeMap<String, BTreeSet<String>>,
    }
}

body_struct! {
    /// GET_ALL_TOPIC_LIST_FROM_NAMESERVER response (and similar topic lists).
    pub struct TopicList {
        pub topic_list: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub broker_addr: Option<String>,
    }
}

body_struct! {
    /// HEART_BEAT request.
    pub struct HeartbeatData {
        #[serde(rename = "clientID")]
        pub client_id: String,
        pub consumer_data_set: Vec<ConsumerData>,
        pub heartbeat_fingerprint: i32,
        pub producer_data_set: Vec<ProducerData>,
        pub without_sub: bool,
    }
}

body_struct! {
    pub struct ProducerData {
        pub group_name: String,
    }
}

body_struct! {
    pub struct ConsumerData {
        pub consume_from_where: String,
        /// "CONSUME_PASSIVELY" (push), "CONSUME_ACTIVELY" (lite pull) or "CONSUME_POP".
        pub consume_type: String,
        pub group_name: String,
        /// "CLUSTERING" or "BROADCASTING".
        pub message_model: String,
        pub subscription_data_set: Vec<SubscriptionData>,
        pub unit_mode: bool,
    }
}

body_struct! {
    /// One client connection in GET_CONSUMER_CONNECTION_LIST / GET_PRODUCER_CONNECTION_LIST.
    pub struct ClientConnection {
        pub client_addr: String,
        pub client_id: String,
        /// LanguageCode's name, "JAVA".
        pub language: String,
        pub version: i32,
    }
}

body_struct! {
    /// GET_CONSUMER_CONNECTION_LIST response: the group's clients and what they consume.
    pub struct ConsumerConnection {
        pub connection_set: Vec<ClientConnection>,
        pub consume_from_where: String,
        pub consume_type: String,
        pub message_model: String,
        pub subscription_table: BTreeMap<String, SubscriptionData>,
    }
}

body_struct! {
    /// GET_PRODUCER_CONNECTION_LIST response.
    pub struct ProducerConnection {
        pub connection_set: Vec<ClientConnection>,
    }
}

body_struct! {
    /// CHECK_CLIENT_CONFIG request: a consumer asks whether the broker can serve its
    /// subscription (Java's push consumer does so at start for a SQL92 one).
    pub struct CheckClientRequestBody {
        pub client_id: String,
        pub group: String,
        pub subscription_data: SubscriptionData,
    }
}

body_struct! {
    pub struct SubscriptionData {
        pub class_filter_mode: bool,
        /// Java hash of each tag.
        pub code_set: Vec<i32>,
        /// "TAG" or "SQL92".
        pub expression_type: String,
        /// "*" or "tagA || tagB".
        pub sub_string: String,
        pub sub_version: i64,
        pub tags_set: Vec<String>,
        pub topic: String,
    }
}

body_struct! {
    /// REGISTER_BROKER request.
    pub struct RegisterBrokerBody {
        pub filter_server_list: Vec<String>,
        pub topic_config_serialize_wrapper: TopicConfigSerializeWrapper,
    }
}

body_struct! {
    pub struct TopicConfigSerializeWrapper {
        pub data_version: DataVersion,
        pub topic_config_table: BTreeMap<String, TopicConfig>,
    }
}

body_struct! {
    pub struct TopicConfig {
        pub attributes: BTreeMap<String, String>,
        pub order: bool,
        pub perm: i32,
        pub read_queue_nums: i32,
        /// "SINGLE_TAG" or "MULTI_TAG".
        pub topic_filter_type: String,
        pub topic_name: String,
        pub topic_sys_flag: i32,
        pub write_queue_nums: i32,
    }
}

body_struct! {
    pub struct DataVersion {
        pub counter: i64,
        pub state_version: i64,
        pub timestamp: i64,
    }
}

body_struct! {
    /// KVTable, e.g. GET_BROKER_RUNTIME_INFO response.
    pub struct KvTable {
        pub table: BTreeMap<String, String>,
    }
}

body_struct! {
    /// GET_CONSUMER_LIST_BY_GROUP response.
    pub struct ConsumerIdList {
        pub consumer_id_list: Vec<String>,
    }
}

body_struct! {
    /// QUERY_TOPIC_CONSUME_BY_WHO response.
    pub struct GroupList {
        pub group_list: BTreeSet<String>,
    }
}

/// Field order gives Java's `compareTo` order: topic, broker name, queue id.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MessageQueue {
    #[serde(deserialize_with = "null_default")]
    pub topic: String,
    #[serde(deserialize_with = "null_default")]
    pub broker_name: String,
    pub queue_id: i32,
}

body_struct! {
    /// SET_MESSAGE_REQUEST_MODE request (`mqadmin setConsumeMode`), and each entry of the
    /// GET_ALL_MESSAGE_REQUEST_MODE answer.
    pub struct SetMessageRequestModeRequestBody {
        pub topic: String,
        pub consumer_group: String,
        /// "PULL" or "POP".
        pub mode: String,
        pub pop_share_queue_num: i32,
    }
}

body_struct! {
    /// GET_ALL_MESSAGE_REQUEST_MODE response: topic -> group -> mode.
    pub struct MessageRequestModeSerializeWrapper {
        pub message_request_mode_map: BTreeMap<String, BTreeMap<String, SetMessageRequestModeRequestBody>>,
    }
}

body_struct! {
    /// QUERY_ASSIGNMENT request.
    pub struct QueryAssignmentRequestBody {
        pub topic: String,
        pub consumer_group: String,
        pub client_id: String,
        pub strategy_name: String,
        pub message_model: String,
    }
}

body_struct! {
    /// One queue of a QUERY_ASSIGNMENT answer, with how to consume it ("PULL" or "POP").
    pub struct MessageQueueAssignment {
        pub message_queue: MessageQueue,
        pub mode: String,
    }
}

body_struct! {
    /// QUERY_ASSIGNMENT response.
    pub struct QueryAssignmentResponseBody {
        pub message_queue_assignments: Vec<MessageQueueAssignment>,
    }
}

body_struct! {
    /// One entry of BATCH_ACK_MESSAGE's body; the short names are what the Java client writes.
    pub struct BatchAck {
        #[serde(rename = "c", alias = "consumerGroup")]
        pub consumer_group: String,
        #[serde(rename = "t", alias = "topic")]
        pub topic: String,
        #[serde(rename = "r", alias = "retry")]
        pub retry: String,
        #[serde(rename = "so", alias = "startOffset")]
        pub start_offset: i64,
        #[serde(rename = "q", alias = "queueId")]
        pub queue_id: i32,
        #[serde(rename = "rq", alias = "reviveQueueId")]
        pub revive_queue_id: i32,
        #[serde(rename = "pt", alias = "popTime")]
        pub pop_time: i64,
        #[serde(rename = "it", alias = "invisibleTime")]
        pub invisible_time: i64,
        /// A Java BitSet's little-endian bytes, base64: bit i acks offset `start_offset + i`.
        #[serde(rename = "b", alias = "bitSet")]
        pub bit_set: String,
    }
}

body_struct! {
    /// BATCH_ACK_MESSAGE request.
    pub struct BatchAckMessageRequestBody {
        pub broker_name: String,
        pub acks: Vec<BatchAck>,
    }
}

body_struct! {
    /// LOCK_BATCH_MQ / UNLOCK_BATCH_MQ request.
    pub struct LockBatchRequestBody {
        pub client_id: String,
        pub consumer_group: String,
        pub mq_set: Vec<MessageQueue>,
        pub only_this_broker: bool,
    }
}

body_struct! {
    /// LOCK_BATCH_MQ response.
    pub struct LockBatchResponseBody {
        #[serde(rename = "lockOKMQSet")]
        pub lock_ok_mq_set: Vec<MessageQueue>,
    }
}

body_struct! {
    /// GET_ALL_TOPIC_CONFIG response: what a slave copies of its master's topics. RocketMQ
    /// answers with the topics and static-topic queue mappings; Quiver has no static topics, so
    /// the two mapping tables are empty, as on a RocketMQ broker that has none.
    pub struct TopicConfigAndMappingSerializeWrapper {
        pub data_version: DataVersion,
        pub mapping_data_version: DataVersion,
        pub topic_config_table: BTreeMap<String, TopicConfig>,
        /// Topic -> TopicQueueMappingDetail, kept as JSON: read past, never used.
        pub topic_queue_mapping_detail_map: BTreeMap<String, serde_json::Value>,
        /// Topic -> TopicQueueMappingInfo, likewise.
        pub topic_queue_mapping_info_map: BTreeMap<String, serde_json::Value>,
    }
}

body_struct! {
    /// GET_ALL_CONSUMER_OFFSET response: RocketMQ's `consumerOffset.json` as the master holds
    /// it (fastjson writes the queue ids as bare integer keys, `{0:12}`).
    pub struct ConsumerOffsetSerializeWrapper {
        pub data_version: DataVersion,
        /// Group -> the topics it has offsets on: fastjson serializes this derived getter of
        /// RocketMQ's offset manager too; readers ignore it.
        pub group_topic_map: BTreeMap<String, BTreeSet<String>>,
        /// "topic@group" -> queue id -> next offset to consume.
        pub offset_table: BTreeMap<String, BTreeMap<i32, i64>>,
    }
}

body_struct! {
    /// GET_ALL_DELAY_OFFSET response: RocketMQ's `delayOffset.json`, which a RocketMQ slave
    /// writes to its own file as it is and then loads.
    pub struct DelayOffsetSerializeWrapper {
        /// Absent from files written before RocketMQ 5 (RocketMQ reads it as optional).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub data_version: Option<DataVersion>,
        /// Delay level (1-based) -> next offset to deliver in that level's schedule queue.
        pub offset_table: BTreeMap<i32, i64>,
    }
}

body_struct! {
    /// GET_ALL_SUBSCRIPTIONGROUP_CONFIG response.
    pub struct SubscriptionGroupWrapper {
        pub data_version: DataVersion,
        /// Group -> topic -> forbidden permission bits.
        pub forbidden_table: BTreeMap<String, BTreeMap<String, i32>>,
        pub subscription_group_table: BTreeMap<String, SubscriptionGroupConfig>,
    }
}

/// A consumer group's settings. Missing keys take RocketMQ's defaults (`Default` below), not
/// Rust's, since fastjson leaves a Java field at its initial value when the key is absent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SubscriptionGroupConfig {
    #[serde(deserialize_with = "null_default")]
    pub attributes: BTreeMap<String, String>,
    pub broker_id: i64,
    pub consume_broadcast_enable: bool,
    pub consume_enable: bool,
    pub consume_from_min_enable: bool,
    pub consume_message_orderly: bool,
    pub consume_timeout_minute: i32,
    #[serde(deserialize_with = "null_default")]
    pub group_name: String,
    #[serde(deserialize_with = "null_default")]
    pub group_retry_policy: GroupRetryPolicy,
    pub group_sys_flag: i32,
    pub notify_consumer_ids_changed_enable: bool,
    pub retry_max_times: i32,
    pub retry_queue_nums: i32,
    /// Null unless set (RocketMQ 5 proxies fill it); fastjson leaves nulls out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription_data_set: Option<Vec<serde_json::Value>>,
    pub which_broker_when_consume_slowly: i64,
}

impl Default for SubscriptionGroupConfig {
    /// RocketMQ's `new SubscriptionGroupConfig()`.
    fn default() -> SubscriptionGroupConfig {
        SubscriptionGroupConfig {
            attributes: BTreeMap::new(),
            broker_id: 0,
            consume_broadcast_enable: true,
            consume_enable: true,
            consume_from_min_enable: true,
            consume_message_orderly: false,
            consume_timeout_minute: 15,
            group_name: String::new(),
            group_retry_policy: GroupRetryPolicy::default(),
            group_sys_flag: 0,
            notify_consumer_ids_changed_enable: true,
            retry_max_times: 16,
            retry_queue_nums: 1,
            subscription_data_set: None,
            which_broker_when_consume_slowly: 1,
        }
    }
}

impl SubscriptionGroupConfig {
    /// The settings RocketMQ gives a group it creates on its own (autoCreateSubscriptionGroup).
    pub fn named(group_name: &str) -> SubscriptionGroupConfig {
        SubscriptionGroupConfig {
            group_name: group_name.to_string(),
            ..SubscriptionGroupConfig::default()
        }
    }
}

/// How a group's retries are spaced. RocketMQ's default is `{"type":"CUSTOMIZED"}` with both
/// policies null (the customized default is the delay levels).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct GroupRetryPolicy {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub customized_retry_policy: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exponential_retry_policy: Option<serde_json::Value>,
    /// "CUSTOMIZED" or "EXPONENTIAL".
    #[serde(rename = "type", deserialize_with = "null_default")]
    pub policy_type: String,
}

impl Default for GroupRetryPolicy {
    fn default() -> GroupRetryPolicy {
        GroupRetryPolicy {
            customized_retry_policy: None,
            exponential_retry_policy: None,
            policy_type: "CUSTOMIZED".to_string(),
        }
    }
}

mod controller;
pub use controller::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_integer_keys_are_quoted_outside_strings() {
        let input = br#"{0:"a", -1 :"b","s":"{0:x}","n":[1,2],"o":{ 10:"c"}}"#;
        let fixed = quote_integer_keys(input);
        assert_eq!(
            std::str::from_utf8(&fixed).unwrap(),
            r#"{"0":"a", "-1" :"b","s":"{0:x}","n":[1,2],"o":{ "10":"c"}}"#
        );
        let clean = br#"{"a":[1,2,{"b":3}],"c":"\"{1:2}"}"#;
        assert!(matches!(
            quote_integer_keys(clean),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn cluster_info_with_bare_keys_parses() {
        let body = br#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}"#;
        let info: ClusterInfo = from_json(body).unwrap();
        let broker = &info.broker_addr_table["broker-a"];
        assert_eq!(broker.broker_addrs[&0], "127.0.0.1:10911");
        assert!(info.cluster_addr_table["DefaultCluster"].contains("broker-a"));
        let again = to_json(&info);
        assert!(std::str::from_utf8(&again)
            .unwrap()
            .contains(r#"{"0":"127.0.0.1:10911"}"#));
        assert_eq!(from_json::<ClusterInfo>(&again).unwrap(), info);
    }

    #[test]
    fn nulls_and_unknown_keys_are_tolerated() {
        let body = br#"{"queueDatas":null,"brokerDatas":[{"brokerName":null,"zoneName":"z"}],"topicQueueMappingByBroker":{}}"#;
        let route: TopicRouteData = from_json(body).unwrap();
        assert!(route.queue_datas.is_empty());
        assert_eq!(route.broker_datas[0].broker_name, "");
        assert!(route.filter_server_table.is_empty());
    }

    #[test]
    fn route_output_has_java_shape() {
        let route = TopicRouteData {
            order_topic_conf: None,
            queue_datas: vec![QueueData {
                broker_name: "broker-a".into(),
                read_queue_nums: 4,
                write_queue_nums: 4,
                perm: 6,
                topic_sys_flag: 0,
            }],
            broker_datas: vec![BrokerData {
                cluster: "DefaultCluster".into(),
                broker_name: "broker-a".into(),
                broker_addrs: BTreeMap::from([(0, "127.0.0.1:10911".into())]),
                enable_acting_master: false,
            }],
            filter_server_table: BTreeMap::new(),
        };
        let text = String::from_utf8(to_json(&route)).unwrap();
        assert!(!text.contains("orderTopicConf"));
        assert!(text.contains(r#""filterServerTable":{}"#));
        assert!(text.contains(r#""topicSysFlag":0"#));
        assert_eq!(from_json::<TopicRouteData>(text.as_bytes()).unwrap(), route);
    }

    #[test]
    fn java_key_spellings() {
        let heartbeat = HeartbeatData {
            client_id: "c".into(),
            ..Default::default()
        };
        assert!(String::from_utf8(to_json(&heartbeat))
            .unwrap()
            .contains(r#""clientID":"c""#));
        let lock = LockBatchResponseBody {
            lock_ok_mq_set: vec![MessageQueue::default()],
        };
        assert!(String::from_utf8(to_json(&lock))
            .unwrap()
            .starts_with(r#"{"lockOKMQSet":["#));
        let request = LockBatchRequestBody {
            client_id: "c".into(),
            ..Default::default()
        };
        assert!(String::from_utf8(to_json(&request))
            .unwrap()
            .contains(r#""clientId":"c""#));
    }

    #[test]
    fn consumer_offsets_as_fastjson_writes_them_parse() {
        // consumerOffset.json as RocketMQ's ConsumerOffsetManager.encode() writes it.
        let body = br#"{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1795293149546},"groupTopicMap":{"g":["TopicTest"]},"offsetTable":{"TopicTest@g":{0:250,1:251},"%RETRY%g@g":{0:0}}}"#;
        let offsets: ConsumerOffsetSerializeWrapper = from_json(body).unwrap();
        assert_eq!(offsets.offset_table["TopicTest@g"][&1], 251);
        assert_eq!(offsets.offset_table["%RETRY%g@g"][&0], 0);
        assert_eq!(offsets.data_version.counter, 3);
        let again = to_json(&offsets);
        assert_eq!(
            from_json::<ConsumerOffsetSerializeWrapper>(&again).unwrap(),
            offsets
        );
    }

    #[test]
    fn delay_offsets_leave_out_an_absent_data_version() {
        let delay: DelayOffsetSerializeWrapper =
            from_json(br#"{"offsetTable":{1:5,3:0}}"#).unwrap();
        assert_eq!(delay.data_version, None);
        assert_eq!(delay.offset_table, BTreeMap::from([(1, 5), (3, 0)]));
        assert_eq!(to_json(&delay), br#"{"offsetTable":{"1":5,"3":0}}"#);
    }

    #[test]
    fn a_default_subscription_group_is_written_as_rocketmq_writes_one() {
        // fastjson's output for `new SubscriptionGroupConfig()` named "g": keys sorted, nulls
        // (subscriptionDataSet, the two retry policies) left out.
        let expected = r#"{"attributes":{},"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,"consumeFromMinEnable":true,"consumeMessageOrderly":false,"consumeTimeoutMinute":15,"groupName":"g","groupRetryPolicy":{"type":"CUSTOMIZED"},"groupSysFlag":0,"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,"retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1}"#;
        let group = SubscriptionGroupConfig::named("g");
        assert_eq!(String::from_utf8(to_json(&group)).unwrap(), expected);
        // Absent keys read as RocketMQ's defaults, not as false and 0.
        let sparse: SubscriptionGroupConfig = from_json(br#"{"groupName":"g"}"#).unwrap();
        assert_eq!(sparse, group);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(from_json::<ClusterInfo>(b"{").is_err());
        assert!(from_json::<ClusterInfo>(br#""text""#).is_err());
    }
}
