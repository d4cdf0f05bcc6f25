//! Retry, orderly locks and consumer statistics: codes 36, 202, 208, 351.

use super::ext_header;

/// CONSUMER_SEND_MSG_BACK (36): a consumer hands back a message it could not consume.
/// `offset` is the CommitLog position of the original (its PHYSICALOFFSET).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerSendMsgBackRequestHeader {
    pub offset: i64,
    pub group: String,
    /// 0 lets the broker choose (3 + reconsume times); below 0 sends straight to the DLQ.
    pub delay_level: i32,
    pub origin_msg_id: Option<String>,
    pub origin_topic: Option<String>,
    pub unit_mode: bool,
    /// Absent means the group's default (16).
    pub max_reconsume_times: Option<i32>,
}

ext_header!(ConsumerSendMsgBackRequestHeader {
    offset: req "offset",
    group: req "group",
    delay_level: req "delayLevel",
    origin_msg_id: opt "originMsgId",
    origin_topic: opt "originTopic",
    unit_mode: def "unitMode" = false,
    max_reconsume_times: opt "maxReconsumeTimes",
});

/// GET_TOPIC_STATS_INFO (202) and GET_TOPIC_CONFIG (351): a topic and nothing else the broker
/// needs (351 also carries `lo`, which is ignored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicHeader {
    pub topic: String,
}

ext_header!(TopicHeader { topic: req "topic" });

/// GET_CONSUME_STATS (208). Without `topic`, every topic the group has offsets on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetConsumeStatsRequestHeader {
    pub consumer_group: String,
    pub topic: Option<String>,
}

ext_header!(GetConsumeStatsRequestHeader {
    consumer_group: req "consumerGroup",
    topic: opt "topic",
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::ExtFields;

    #[test]
    fn send_back_reads_java_fields_and_defaults() {
        let ext = ExtFields::new()
            .with("offset", 1234)
            .with("group", "g")
            .with("delayLevel", 0)
            .with("originMsgId", "ABC")
            .with("originTopic", "T")
            .with("maxReconsumeTimes", 2)
            .with("bname", "broker-a");
        let header = ConsumerSendMsgBackRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.offset, 1234);
        assert_eq!(header.max_reconsume_times, Some(2));
        assert!(!header.unit_mode);
        assert_eq!(
            ConsumerSendMsgBackRequestHeader::from_ext(&header.to_ext()),
            Ok(header)
        );
    }
}
