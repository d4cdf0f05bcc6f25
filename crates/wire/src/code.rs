//! Request and response codes, with the numbers of Java's `RequestCode` / `ResponseCode`.

/// Request codes.
pub mod request_code {
    pub const SEND_MESSAGE: i32 = 10;
    pub const PULL_MESSAGE: i32 = 11;
    pub const QUERY_MESSAGE: i32 = 12;
    pub const QUERY_CONSUMER_OFFSET: i32 = 14;
    pub const UPDATE_CONSUMER_OFFSET: i32 = 15;
    pub const UPDATE_AND_CREATE_TOPIC: i32 = 17;
    pub const GET_ALL_TOPIC_CONFIG: i32 = 21;
    pub const UPDATE_BROKER_CONFIG: i32 = 25;
    pub const GET_BROKER_CONFIG: i32 = 26;
    pub const GET_BROKER_RUNTIME_INFO: i32 = 28;
    pub const SEARCH_OFFSET_BY_TIMESTAMP: i32 = 29;
    pub const GET_MAX_OFFSET: i32 = 30;
    pub const GET_MIN_OFFSET: i32 = 31;
    pub const GET_EARLIEST_MSG_STORETIME: i32 = 32;
    pub const VIEW_MESSAGE_BY_ID: i32 = 33;
    pub const HEART_BEAT: i32 = 34;
    pub const UNREGISTER_CLIENT: i32 = 35;
    pub const CONSUMER_SEND_MSG_BACK: i32 = 36;
    pub const END_TRANSACTION: i32 = 37;
    pub const GET_CONSUMER_LIST_BY_GROUP: i32 = 38;
    pub const CHECK_TRANSACTION_STATE: i32 = 39;
    pub const NOTIFY_CONSUMER_IDS_CHANGED: i32 = 40;
    pub const LOCK_BATCH_MQ: i32 = 41;
    pub const UNLOCK_BATCH_MQ: i32 = 42;
    pub const GET_ALL_CONSUMER_OFFSET: i32 = 43;
    pub const GET_ALL_DELAY_OFFSET: i32 = 45;
    pub const CHECK_CLIENT_CONFIG: i32 = 46;
    pub const GET_TIMER_CHECK_POINT: i32 = 60;
    pub const PUT_KV_CONFIG: i32 = 100;
    pub const GET_KV_CONFIG: i32 = 101;
    pub const DELETE_KV_CONFIG: i32 = 102;
    pub const REGISTER_BROKER: i32 = 103;
    pub const UNREGISTER_BROKER: i32 = 104;
    pub const GET_ROUTEINFO_BY_TOPIC: i32 = 105;
    pub const GET_BROKER_CLUSTER_INFO: i32 = 106;
    pub const UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: i32 = 200;
    pub const GET_ALL_SUBSCRIPTIONGROUP_CONFIG: i32 = 201;
    pub const GET_TOPIC_STATS_INFO: i32 = 202;
    pub const GET_CONSUMER_CONNECTION_LIST: i32 = 203;
    pub const GET_PRODUCER_CONNECTION_LIST: i32 = 204;
    pub const WIPE_WRITE_PERM_OF_BROKER: i32 = 205;
    pub const GET_ALL_TOPIC_LIST_FROM_NAMESERVER: i32 = 206;
    pub const DELETE_SUBSCRIPTIONGROUP: i32 = 207;
    pub const GET_CONSUME_STATS: i32 = 208;
    pub const DELETE_TOPIC_IN_BROKER: i32 = 215;
    pub const DELETE_TOPIC_IN_NAMESRV: i32 = 216;
    pub const RESET_CONSUMER_CLIENT_OFFSET: i32 = 220;
    pub const GET_CONSUMER_STATUS_FROM_CLIENT: i32 = 221;
    pub const INVOKE_BROKER_TO_RESET_OFFSET: i32 = 222;
    pub const GET_TOPICS_BY_CLUSTER: i32 = 224;
    pub const QUERY_TOPIC_CONSUME_BY_WHO: i32 = 300;
    pub const GET_SYSTEM_TOPIC_LIST_FROM_NS: i32 = 304;
    pub const GET_CONSUMER_RUNNING_INFO: i32 = 307;
    pub const CONSUME_MESSAGE_DIRECTLY: i32 = 309;
    pub const SEND_MESSAGE_V2: i32 = 310;
    pub const SEND_BATCH_MESSAGE: i32 = 320;
    pub const QUERY_DATA_VERSION: i32 = 322;
    pub const SEND_REPLY_MESSAGE: i32 = 324;
    pub const SEND_REPLY_MESSAGE_V2: i32 = 325;
    pub const ADD_WRITE_PERM_OF_BROKER: i32 = 327;
    pub const PUSH_REPLY_MESSAGE_TO_CLIENT: i32 = 326;
    pub const GET_TOPIC_CONFIG: i32 = 351;
    pub const GET_SUBSCRIPTIONGROUP_CONFIG: i32 = 352;
    pub const LITE_PULL_MESSAGE: i32 = 361;
    pub const QUERY_ASSIGNMENT: i32 = 400;
    pub const SET_MESSAGE_REQUEST_MODE: i32 = 401;
    pub const GET_ALL_MESSAGE_REQUEST_MODE: i32 = 402;
    pub const BROKER_HEARTBEAT: i32 = 904;
    // Controller mode (RocketMQ 5's automatic failover): brokers and admin tools to the
    // controller, but GET_BROKER_EPOCH_CACHE (admin to broker) and NOTIFY_BROKER_ROLE_CHANGED
    // (controller to broker).
    pub const CONTROLLER_ALTER_SYNC_STATE_SET: i32 = 1001;
    pub const CONTROLLER_ELECT_MASTER: i32 = 1002;
    pub const CONTROLLER_REGISTER_BROKER: i32 = 1003;
    pub const CONTROLLER_GET_REPLICA_INFO: i32 = 1004;
    pub const CONTROLLER_GET_METADATA_INFO: i32 = 1005;
    pub const CONTROLLER_GET_SYNC_STATE_DATA: i32 = 1006;
    pub const GET_BROKER_EPOCH_CACHE: i32 = 1007;
    pub const NOTIFY_BROKER_ROLE_CHANGED: i32 = 1008;
    pub const UPDATE_CONTROLLER_CONFIG: i32 = 1009;
    pub const GET_CONTROLLER_CONFIG: i32 = 1010;
    pub const CLEAN_BROKER_DATA: i32 = 1011;
    pub const CONTROLLER_GET_NEXT_BROKER_ID: i32 = 1012;
    pub const CONTROLLER_APPLY_BROKER_ID: i32 = 1013;
    // Quiver's own, between the nodes of its controller: openraft's requests as JSON bodies.
    pub const QUIVER_RAFT_APPEND_ENTRIES: i32 = 9901;
    pub const QUIVER_RAFT_VOTE: i32 = 9902;
    pub const QUIVER_RAFT_INSTALL_SNAPSHOT: i32 = 9903;
    pub const POP_MESSAGE: i32 = 200050;
    pub const ACK_MESSAGE: i32 = 200051;
    pub const PEEK_MESSAGE: i32 = 200052;
    pub const CHANGE_MESSAGE_INVISIBLETIME: i32 = 200053;
    pub const NOTIFICATION: i32 = 200054;
    pub const POLLING_INFO: i32 = 200055;
    pub const POP_ROLLBACK: i32 = 200056;
    pub const BATCH_ACK_MESSAGE: i32 = 200151;

    /// The Java name of a request code, for logs and error remarks.
    pub fn name(code: i32) -> Option<&'static str> {
        NAMES
            .iter()
            .find(|(known, _)| *known == code)
            .map(|(_, name)| *name)
    }

    const NAMES: &[(i32, &str)] = &[
        (SEND_MESSAGE, "SEND_MESSAGE"),
        (PULL_MESSAGE, "PULL_MESSAGE"),
        (QUERY_MESSAGE, "QUERY_MESSAGE"),
        (QUERY_CONSUMER_OFFSET, "QUERY_CONSUMER_OFFSET"),
        (UPDATE_CONSUMER_OFFSET, "UPDATE_CONSUMER_OFFSET"),
        (UPDATE_AND_CREATE_TOPIC, "UPDATE_AND_CREATE_TOPIC"),
        (GET_ALL_TOPIC_CONFIG, "GET_ALL_TOPIC_CONFIG"),
        (UPDATE_BROKER_CONFIG, "UPDATE_BROKER_CONFIG"),
        (GET_BROKER_CONFIG, "GET_BROKER_CONFIG"),
        (GET_BROKER_RUNTIME_INFO, "GET_BROKER_RUNTIME_INFO"),
        (SEARCH_OFFSET_BY_TIMESTAMP, "SEARCH_OFFSET_BY_TIMESTAMP"),
        (GET_MAX_OFFSET, "GET_MAX_OFFSET"),
        (GET_MIN_OFFSET, "GET_MIN_OFFSET"),
        (GET_EARLIEST_MSG_STORETIME, "GET_EARLIEST_MSG_STORETIME"),
        (VIEW_MESSAGE_BY_ID, "VIEW_MESSAGE_BY_ID"),
        (HEART_BEAT, "HEART_BEAT"),
        (UNREGISTER_CLIENT, "UNREGISTER_CLIENT"),
        (CONSUMER_SEND_MSG_BACK, "CONSUMER_SEND_MSG_BACK"),
        (END_TRANSACTION, "END_TRANSACTION"),
        (GET_CONSUMER_LIST_BY_GROUP, "GET_CONSUMER_LIST_BY_GROUP"),
        (CHECK_TRANSACTION_STATE, "CHECK_TRANSACTION_STATE"),
        (NOTIFY_CONSUMER_IDS_CHANGED, "NOTIFY_CONSUMER_IDS_CHANGED"),
        (LOCK_BATCH_MQ, "LOCK_BATCH_MQ"),
        (UNLOCK_BATCH_MQ, "UNLOCK_BATCH_MQ"),
        (GET_ALL_CONSUMER_OFFSET, "GET_ALL_CONSUMER_OFFSET"),
        (GET_ALL_DELAY_OFFSET, "GET_ALL_DELAY_OFFSET"),
        (CHECK_CLIENT_CONFIG, "CHECK_CLIENT_CONFIG"),
        (GET_TIMER_CHECK_POINT, "GET_TIMER_CHECK_POINT"),
        (PUT_KV_CONFIG, "PUT_KV_CONFIG"),
        (GET_KV_CONFIG, "GET_KV_CONFIG"),
        (DELETE_KV_CONFIG, "DELETE_KV_CONFIG"),
        (REGISTER_BROKER, "REGISTER_BROKER"),
        (UNREGISTER_BROKER, "UNREGISTER_BROKER"),
        (GET_ROUTEINFO_BY_TOPIC, "GET_ROUTEINFO_BY_TOPIC"),
        (GET_BROKER_CLUSTER_INFO, "GET_BROKER_CLUSTER_INFO"),
        (
            UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
        ),
        (
            GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
            "GET_ALL_SUBSCRIPTIONGROUP_CONFIG",
        ),
        (GET_TOPIC_STATS_INFO, "GET_TOPIC_STATS_INFO"),
        (GET_CONSUMER_CONNECTION_LIST, "GET_CONSUMER_CONNECTION_LIST"),
        (GET_PRODUCER_CONNECTION_LIST, "GET_PRODUCER_CONNECTION_LIST"),
        (
            GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
            "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
        ),
        (DELETE_SUBSCRIPTIONGROUP, "DELETE_SUBSCRIPTIONGROUP"),
        (GET_CONSUME_STATS, "GET_CONSUME_STATS"),
        (DELETE_TOPIC_IN_BROKER, "DELETE_TOPIC_IN_BROKER"),
        (DELETE_TOPIC_IN_NAMESRV, "DELETE_TOPIC_IN_NAMESRV"),
        (RESET_CONSUMER_CLIENT_OFFSET, "RESET_CONSUMER_CLIENT_OFFSET"),
        (
            GET_CONSUMER_STATUS_FROM_CLIENT,
            "GET_CONSUMER_STATUS_FROM_CLIENT",
        ),
        (
            INVOKE_BROKER_TO_RESET_OFFSET,
            "INVOKE_BROKER_TO_RESET_OFFSET",
        ),
        (GET_TOPICS_BY_CLUSTER, "GET_TOPICS_BY_CLUSTER"),
        (QUERY_TOPIC_CONSUME_BY_WHO, "QUERY_TOPIC_CONSUME_BY_WHO"),
        (
            GET_SYSTEM_TOPIC_LIST_FROM_NS,
            "GET_SYSTEM_TOPIC_LIST_FROM_NS",
        ),
        (GET_CONSUMER_RUNNING_INFO, "GET_CONSUMER_RUNNING_INFO"),
        (CONSUME_MESSAGE_DIRECTLY, "CONSUME_MESSAGE_DIRECTLY"),
        (SEND_MESSAGE_V2, "SEND_MESSAGE_V2"),
        (SEND_BATCH_MESSAGE, "SEND_BATCH_MESSAGE"),
        (QUERY_DATA_VERSION, "QUERY_DATA_VERSION"),
        (SEND_REPLY_MESSAGE, "SEND_REPLY_MESSAGE"),
        (SEND_REPLY_MESSAGE_V2, "SEND_REPLY_MESSAGE_V2"),
        (PUSH_REPLY_MESSAGE_TO_CLIENT, "PUSH_REPLY_MESSAGE_TO_CLIENT"),
        (GET_TOPIC_CONFIG, "GET_TOPIC_CONFIG"),
        (GET_SUBSCRIPTIONGROUP_CONFIG, "GET_SUBSCRIPTIONGROUP_CONFIG"),
        (LITE_PULL_MESSAGE, "LITE_PULL_MESSAGE"),
        (QUERY_ASSIGNMENT, "QUERY_ASSIGNMENT"),
        (SET_MESSAGE_REQUEST_MODE, "SET_MESSAGE_REQUEST_MODE"),
        (GET_ALL_MESSAGE_REQUEST_MODE, "GET_ALL_MESSAGE_REQUEST_MODE"),
        (BROKER_HEARTBEAT, "BROKER_HEARTBEAT"),
        (
            CONTROLLER_ALTER_SYNC_STATE_SET,
            "CONTROLLER_ALTER_SYNC_STATE_SET",
        ),
        (CONTROLLER_ELECT_MASTER, "CONTROLLER_ELECT_MASTER"),
        (CONTROLLER_REGISTER_BROKER, "CONTROLLER_REGISTER_BROKER"),
        (CONTROLLER_GET_REPLICA_INFO, "CONTROLLER_GET_REPLICA_INFO"),
        (CONTROLLER_GET_METADATA_INFO, "CONTROLLER_GET_METADATA_INFO"),
        (
            CONTROLLER_GET_SYNC_STATE_DATA,
            "CONTROLLER_GET_SYNC_STATE_DATA",
        ),
        (GET_BROKER_EPOCH_CACHE, "GET_BROKER_EPOCH_CACHE"),
        (NOTIFY_BROKER_ROLE_CHANGED, "NOTIFY_BROKER_ROLE_CHANGED"),
        (UPDATE_CONTROLLER_CONFIG, "UPDATE_CONTROLLER_CONFIG"),
        (GET_CONTROLLER_CONFIG, "GET_CONTROLLER_CONFIG"),
        (CLEAN_BROKER_DATA, "CLEAN_BROKER_DATA"),
        (
            CONTROLLER_GET_NEXT_BROKER_ID,
            "CONTROLLER_GET_NEXT_BROKER_ID",
        ),
        (CONTROLLER_APPLY_BROKER_ID, "CONTROLLER_APPLY_BROKER_ID"),
        (POP_MESSAGE, "POP_MESSAGE"),
        (ACK_MESSAGE, "ACK_MESSAGE"),
        (PEEK_MESSAGE, "PEEK_MESSAGE"),
        (CHANGE_MESSAGE_INVISIBLETIME, "CHANGE_MESSAGE_INVISIBLETIME"),
        (NOTIFICATION, "NOTIFICATION"),
        (POLLING_INFO, "POLLING_INFO"),
        (POP_ROLLBACK, "POP_ROLLBACK"),
        (BATCH_ACK_MESSAGE, "BATCH_ACK_MESSAGE"),
    ];
}

/// Response codes (`ResponseCode` and `RemotingSysResponseCode`).
pub mod response_code {
    pub const SUCCESS: i32 = 0;
    pub const SYSTEM_ERROR: i32 = 1;
    pub const SYSTEM_BUSY: i32 = 2;
    pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
    pub const TRANSACTION_FAILED: i32 = 4;
    pub const FLUSH_DISK_TIMEOUT: i32 = 10;
    pub const SLAVE_NOT_AVAILABLE: i32 = 11;
    pub const FLUSH_SLAVE_TIMEOUT: i32 = 12;
    pub const MESSAGE_ILLEGAL: i32 = 13;
    pub const SERVICE_NOT_AVAILABLE: i32 = 14;
    pub const VERSION_NOT_SUPPORTED: i32 = 15;
    pub const NO_PERMISSION: i32 = 16;
    pub const TOPIC_NOT_EXIST: i32 = 17;
    pub const TOPIC_EXIST_ALREADY: i32 = 18;
    pub const PULL_NOT_FOUND: i32 = 19;
    pub const PULL_RETRY_IMMEDIATELY: i32 = 20;
    pub const PULL_OFFSET_MOVED: i32 = 21;
    pub const QUERY_NOT_FOUND: i32 = 22;
    pub const SUBSCRIPTION_PARSE_FAILED: i32 = 23;
    pub const SUBSCRIPTION_NOT_EXIST: i32 = 24;
    pub const SUBSCRIPTION_NOT_LATEST: i32 = 25;
    pub const SUBSCRIPTION_GROUP_NOT_EXIST: i32 = 26;
    pub const FILTER_DATA_NOT_EXIST: i32 = 27;
    pub const FILTER_DATA_NOT_LATEST: i32 = 28;
    pub const INVALID_PARAMETER: i32 = 29;
    pub const TRANSACTION_SHOULD_COMMIT: i32 = 200;
    pub const TRANSACTION_SHOULD_ROLLBACK: i32 = 201;
    pub const TRANSACTION_STATE_UNKNOW: i32 = 202;
    pub const TRANSACTION_STATE_GROUP_WRONG: i32 = 203;
    pub const NO_BUYER_ID: i32 = 204;
    pub const NOT_IN_CURRENT_UNIT: i32 = 205;
    pub const CONSUMER_NOT_ONLINE: i32 = 206;
    pub const CONSUME_MSG_TIMEOUT: i32 = 207;
    pub const NO_MESSAGE: i32 = 208;
    pub const POLLING_FULL: i32 = 209;
    pub const POLLING_TIMEOUT: i32 = 210;
    pub const FLOW_CONTROL: i32 = 215;
    /// A producer's own END_TRANSACTION after its half's check immunity time.
    pub const ILLEGAL_OPERATION: i32 = 604;
    pub const GO_AWAY: i32 = 1500;
    // The controller's (RocketMQ 5's controller mode).
    pub const CONTROLLER_FENCED_MASTER_EPOCH: i32 = 2000;
    pub const CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH: i32 = 2001;
    pub const CONTROLLER_INVALID_MASTER: i32 = 2002;
    pub const CONTROLLER_INVALID_REPLICAS: i32 = 2003;
    pub const CONTROLLER_MASTER_NOT_AVAILABLE: i32 = 2004;
    pub const CONTROLLER_INVALID_REQUEST: i32 = 2005;
    pub const CONTROLLER_BROKER_NOT_ALIVE: i32 = 2006;
    pub const CONTROLLER_NOT_LEADER: i32 = 2007;
    pub const CONTROLLER_BROKER_METADATA_NOT_EXIST: i32 = 2008;
    pub const CONTROLLER_INVALID_CLEAN_BROKER_METADATA: i32 = 2009;
    pub const CONTROLLER_BROKER_NEED_TO_BE_REGISTERED: i32 = 2010;
    pub const CONTROLLER_MASTER_STILL_EXIST: i32 = 2011;
    pub const CONTROLLER_ELECT_MASTER_FAILED: i32 = 2012;
    pub const CONTROLLER_ALTER_SYNC_STATE_SET_FAILED: i32 = 2013;
    pub const CONTROLLER_BROKER_ID_INVALID: i32 = 2014;
}

/// Java writes `(short) code` in binary headers, so the pop family arrives as its low 16 bits
/// (200050 -> 3442 ...). No real request uses those numbers, so we map them back and serve pop
/// to binary clients too. Every other code is returned unchanged.
pub fn untruncate_pop_code(code: i32) -> i32 {
    use request_code::*;
    const POP_CODES: [i32; 8] = [
        POP_MESSAGE,
        ACK_MESSAGE,
        PEEK_MESSAGE,
        CHANGE_MESSAGE_INVISIBLETIME,
        NOTIFICATION,
        POLLING_INFO,
        POP_ROLLBACK,
        BATCH_ACK_MESSAGE,
    ];
    POP_CODES
        .iter()
        .copied()
        .find(|full| i32::from(*full as i16) == code)
        .unwrap_or(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_pop_codes_map_back() {
        assert_eq!(untruncate_pop_code(3442), request_code::POP_MESSAGE);
        assert_eq!(untruncate_pop_code(3443), request_code::ACK_MESSAGE);
        assert_eq!(
            untruncate_pop_code(3445),
            request_code::CHANGE_MESSAGE_INVISIBLETIME
        );
        assert_eq!(untruncate_pop_code(3448), request_code::POP_ROLLBACK);
        assert_eq!(untruncate_pop_code(3543), request_code::BATCH_ACK_MESSAGE);
        assert_eq!(untruncate_pop_code(310), 310);
        assert_eq!(untruncate_pop_code(3449), 3449);
    }

    #[test]
    fn names_are_known() {
        assert_eq!(request_code::name(310), Some("SEND_MESSAGE_V2"));
        assert_eq!(request_code::name(9999), None);
    }
}
