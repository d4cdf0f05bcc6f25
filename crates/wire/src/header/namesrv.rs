//! Name-server requests: routes, broker registration and KV config.

use super::ext_header;

/// GET_ROUTEINFO_BY_TOPIC (105).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetRouteInfoRequestHeader {
    pub topic: String,
}

ext_header!(GetRouteInfoRequestHeader { topic: req "topic" });

/// REGISTER_BROKER (103).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterBrokerRequestHeader {
    pub broker_name: String,
    pub broker_addr: String,
    pub cluster_name: String,
    pub ha_server_addr: String,
    pub broker_id: i64,
    pub heartbeat_timeout_millis: Option<i64>,
    /// false when absent.
    pub compressed: bool,
    /// CRC32 of the body masked with 0x7FFFFFFF; 0 (also when absent) means "do not check".
    pub body_crc32: i32,
}

ext_header!(RegisterBrokerRequestHeader {
    broker_name: req "brokerName",
    broker_addr: req "brokerAddr",
    cluster_name: req "clusterName",
    ha_server_addr: req "haServerAddr",
    broker_id: req "brokerId",
    heartbeat_timeout_millis: opt "heartbeatTimeoutMillis",
    compressed: def "compressed" = false,
    body_crc32: def "bodyCrc32" = 0,
});

/// UNREGISTER_BROKER (104).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnregisterBrokerRequestHeader {
    pub broker_name: String,
    pub broker_addr: String,
    pub cluster_name: String,
    pub broker_id: i64,
}

ext_header!(UnregisterBrokerRequestHeader {
    broker_name: req "brokerName",
    broker_addr: req "brokerAddr",
    cluster_name: req "clusterName",
    broker_id: req "brokerId",
});

/// DELETE_TOPIC_IN_NAMESRV (216): the topic's routes through the cluster's brokers, or through
/// every broker when no cluster is named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteTopicFromNamesrvRequestHeader {
    pub topic: String,
    pub cluster_name: Option<String>,
}

ext_header!(DeleteTopicFromNamesrvRequestHeader {
    topic: req "topic",
    cluster_name: opt "clusterName",
});

/// PUT_KV_CONFIG (100) carries `value`; GET (101) and DELETE (102) do not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvConfigHeader {
    pub namespace: String,
    pub key: String,
    pub value: Option<String>,
}

ext_header!(KvConfigHeader {
    namespace: req "namespace",
    key: req "key",
    value: opt "value",
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::ExtFields;

    #[test]
    fn register_broker_from_capture_parses() {
        // Ext of the start-up REGISTER_BROKER sent by a 5.5.0 broker.
        let ext: ExtFields = [
            ("brokerId", "0"),
            ("bodyCrc32", "2135042989"),
            ("clusterName", "DefaultCluster"),
            ("brokerAddr", "127.0.0.1:10911"),
            ("enableActingMaster", "false"),
            ("haServerAddr", "127.0.0.1:10912"),
            ("compressed", "false"),
            ("brokerName", "broker-a"),
        ]
        .into_iter()
        .collect();
        let header = RegisterBrokerRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.body_crc32, 2135042989);
        assert_eq!(header.broker_id, 0);
        assert_eq!(header.heartbeat_timeout_millis, None);
        assert_eq!(
            RegisterBrokerRequestHeader::from_ext(&header.to_ext()),
            Ok(header)
        );
    }

    #[test]
    fn kv_value_is_optional() {
        let header = KvConfigHeader {
            namespace: "ORDER_TOPIC_CONFIG".into(),
            key: "t".into(),
            value: None,
        };
        assert_eq!(header.to_ext().len(), 2);
        assert_eq!(KvConfigHeader::from_ext(&header.to_ext()), Ok(header));
    }
}
