//! Client bookkeeping and admin requests served by the broker.

use super::ext_header;

/// UPDATE_AND_CREATE_TOPIC (17).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateTopicRequestHeader {
    pub topic: String,
    pub default_topic: String,
    pub read_queue_nums: i32,
    pub write_queue_nums: i32,
    pub perm: i32,
    /// "SINGLE_TAG" when absent.
    pub topic_filter_type: String,
    pub topic_sys_flag: i32,
    pub order: bool,
    /// RocketMQ 5's attribute changes, `+key=value,+key2=value2,-key3`.
    pub attributes: Option<String>,
}

ext_header!(CreateTopicRequestHeader {
    topic: req "topic",
    default_topic: req "defaultTopic",
    read_queue_nums: req "readQueueNums",
    write_queue_nums: req "writeQueueNums",
    perm: req "perm",
    topic_filter_type: def "topicFilterType" = String::from("SINGLE_TAG"),
    topic_sys_flag: def "topicSysFlag" = 0,
    order: def "order" = false,
    attributes: opt "attributes",
});

/// DELETE_TOPIC_IN_BROKER (215).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteTopicRequestHeader {
    pub topic: String,
}

ext_header!(DeleteTopicRequestHeader { topic: req "topic" });

/// QUERY_MESSAGE (12): lookup by key, or by UNIQ_KEY when `_UNIQUE_KEY_QUERY` is true.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryMessageRequestHeader {
    pub topic: String,
    pub key: String,
    pub max_num: i32,
    pub begin_timestamp: i64,
    pub end_timestamp: i64,
    pub unique_key_query: bool,
}

ext_header!(QueryMessageRequestHeader {
    topic: req "topic",
    key: req "key",
    max_num: req "maxNum",
    begin_timestamp: req "beginTimestamp",
    end_timestamp: req "endTimestamp",
    unique_key_query: def "_UNIQUE_KEY_QUERY" = false,
});

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryMessageResponseHeader {
    pub index_last_update_timestamp: i64,
    pub index_last_update_phyoffset: i64,
}

ext_header!(QueryMessageResponseHeader {
    index_last_update_timestamp: req "indexLastUpdateTimestamp",
    index_last_update_phyoffset: req "indexLastUpdatePhyoffset",
});

/// VIEW_MESSAGE_BY_ID (33). `offset` is the commit-log position decoded from the msg id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewMessageRequestHeader {
    pub topic: Option<String>,
    pub offset: i64,
}

ext_header!(ViewMessageRequestHeader {
    topic: opt "topic",
    offset: req "offset",
});

/// UNREGISTER_CLIENT (35). Note the Java spelling `clientID`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnregisterClientRequestHeader {
    pub client_id: String,
    pub producer_group: Option<String>,
    pub consumer_group: Option<String>,
}

ext_header!(UnregisterClientRequestHeader {
    client_id: req "clientID",
    producer_group: opt "producerGroup",
    consumer_group: opt "consumerGroup",
});

/// GET_CONSUMER_LIST_BY_GROUP (38).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetConsumerListByGroupRequestHeader {
    pub consumer_group: String,
}

ext_header!(GetConsumerListByGroupRequestHeader {
    consumer_group: req "consumerGroup",
});

/// NOTIFY_CONSUMER_IDS_CHANGED (40), sent by the broker to clients, oneway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifyConsumerIdsChangedHeader {
    pub consumer_group: String,
}

ext_header!(NotifyConsumerIdsChangedHeader {
    consumer_group: req "consumerGroup",
});

/// QUERY_TOPIC_CONSUME_BY_WHO (300).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryTopicConsumeByWhoHeader {
    pub topic: String,
}

ext_header!(QueryTopicConsumeByWhoHeader { topic: req "topic" });

/// DELETE_SUBSCRIPTIONGROUP (207).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteSubscriptionGroupRequestHeader {
    pub group_name: String,
    /// Also forget the group's committed offsets.
    pub clean_offset: bool,
}

ext_header!(DeleteSubscriptionGroupRequestHeader {
    group_name: req "groupName",
    clean_offset: def "cleanOffset" = false,
});

/// GET_SUBSCRIPTIONGROUP_CONFIG (352).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetSubscriptionGroupConfigRequestHeader {
    pub group: String,
}

ext_header!(GetSubscriptionGroupConfigRequestHeader { group: req "group" });

/// GET_CONSUMER_CONNECTION_LIST (203).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetConsumerConnectionListRequestHeader {
    pub consumer_group: String,
}

ext_header!(GetConsumerConnectionListRequestHeader { consumer_group: req "consumerGroup" });

/// GET_PRODUCER_CONNECTION_LIST (204).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetProducerConnectionListRequestHeader {
    pub producer_group: String,
}

ext_header!(GetProducerConnectionListRequestHeader { producer_group: req "producerGroup" });

/// INVOKE_BROKER_TO_RESET_OFFSET (222), and RESET_CONSUMER_CLIENT_OFFSET (220) as the broker
/// sends it on to consumers. A negative `timestamp` means each queue's max offset; `queue_id`
/// -1 means every queue, else `offset` (when set and not -1) is the target of that one queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResetOffsetRequestHeader {
    pub topic: String,
    pub group: String,
    pub timestamp: i64,
    pub is_force: bool,
    pub queue_id: i32,
    pub offset: Option<i64>,
}

ext_header!(ResetOffsetRequestHeader {
    topic: req "topic",
    group: req "group",
    timestamp: req "timestamp",
    is_force: def "isForce" = false,
    queue_id: def "queueId" = -1,
    offset: opt "offset",
});

/// GET_CONSUMER_RUNNING_INFO (307): forwarded by the broker to the named client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetConsumerRunningInfoRequestHeader {
    pub consumer_group: String,
    pub client_id: String,
}

ext_header!(GetConsumerRunningInfoRequestHeader {
    consumer_group: req "consumerGroup",
    client_id: req "clientId",
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::ExtFields;

    #[test]
    fn create_topic_defaults_apply() {
        let ext = ExtFields::new()
            .with("topic", "t")
            .with("defaultTopic", "TBW102")
            .with("readQueueNums", 8)
            .with("writeQueueNums", 8)
            .with("perm", 6);
        let header = CreateTopicRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.topic_filter_type, "SINGLE_TAG");
        assert_eq!(header.topic_sys_flag, 0);
        assert!(!header.order);
        assert_eq!(
            CreateTopicRequestHeader::from_ext(&header.to_ext()),
            Ok(header)
        );
    }

    #[test]
    fn unregister_client_uses_java_key() {
        let header = UnregisterClientRequestHeader {
            client_id: "127.0.0.1@1".into(),
            producer_group: Some("pg".into()),
            consumer_group: None,
        };
        let ext = header.to_ext();
        assert_eq!(ext.get("clientID"), Some("127.0.0.1@1"));
        assert_eq!(ext.len(), 2);
        assert_eq!(UnregisterClientRequestHeader::from_ext(&ext), Ok(header));
    }

    #[test]
    fn unique_key_query_flag_reads() {
        let header = QueryMessageRequestHeader {
            topic: "t".into(),
            key: "k".into(),
            max_num: 32,
            begin_timestamp: 0,
            end_timestamp: i64::MAX,
            unique_key_query: true,
        };
        let ext = header.to_ext();
        assert_eq!(ext.get("_UNIQUE_KEY_QUERY"), Some("true"));
        assert_eq!(QueryMessageRequestHeader::from_ext(&ext), Ok(header));
    }
}
