//! PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361).

use super::ext_header;

/// PullSysFlag bits.
pub mod pull_sys_flag {
    /// Store `commitOffset` as the group's committed offset.
    pub const COMMIT_OFFSET: i32 = 1;
    /// Long-poll when nothing is available.
    pub const SUSPEND: i32 = 2;
    /// The request carries its own `subscription`.
    pub const SUBSCRIPTION: i32 = 4;
    pub const CLASS_FILTER: i32 = 8;
    pub const LITE_PULL: i32 = 16;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullMessageRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub max_msg_nums: i32,
    pub sys_flag: i32,
    pub commit_offset: i64,
    pub suspend_timeout_millis: i64,
    pub subscription: Option<String>,
    pub sub_version: i64,
    pub expression_type: Option<String>,
    pub max_msg_bytes: Option<i32>,
}

ext_header!(PullMessageRequestHeader {
    consumer_group: req "consumerGroup",
    topic: req "topic",
    queue_id: req "queueId",
    queue_offset: req "queueOffset",
    max_msg_nums: req "maxMsgNums",
    sys_flag: req "sysFlag",
    commit_offset: req "commitOffset",
    suspend_timeout_millis: req "suspendTimeoutMillis",
    subscription: opt "subscription",
    sub_version: req "subVersion",
    expression_type: opt "expressionType",
    max_msg_bytes: opt "maxMsgBytes",
});

/// Required on every pull response code: the client unboxes all four into primitive longs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullMessageResponseHeader {
    pub suggest_which_broker_id: i64,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
}

ext_header!(PullMessageResponseHeader {
    suggest_which_broker_id: req "suggestWhichBrokerId",
    next_begin_offset: req "nextBeginOffset",
    min_offset: req "minOffset",
    max_offset: req "maxOffset",
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::ExtFields;
    use crate::header::HeaderError;

    #[test]
    fn lite_pull_request_from_capture_parses() {
        // Ext of a LITE_PULL_MESSAGE captured from a 5.5.0 DefaultLitePullConsumer.
        let ext: ExtFields = [
            ("queueId", "3"),
            ("commitOffset", "0"),
            ("subscription", "*"),
            ("suspendTimeoutMillis", "20000"),
            ("bname", "broker-a"),
            ("sysFlag", "22"),
            ("expressionType", "TAG"),
            ("ReqT", "0"),
            ("topic", "wire_json"),
            ("consumerGroup", "wire_lite_group"),
            ("maxMsgNums", "10"),
            ("queueOffset", "0"),
            ("subVersion", "1795293275127"),
        ]
        .into_iter()
        .collect();
        let header = PullMessageRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.queue_id, 3);
        assert_eq!(header.suspend_timeout_millis, 20000);
        assert_eq!(
            header.sys_flag,
            pull_sys_flag::SUSPEND | pull_sys_flag::SUBSCRIPTION | pull_sys_flag::LITE_PULL
        );
        assert_eq!(header.subscription.as_deref(), Some("*"));
        assert_eq!(header.max_msg_bytes, None);
        assert_eq!(
            PullMessageRequestHeader::from_ext(&header.to_ext()),
            Ok(header)
        );
    }

    #[test]
    fn bad_offset_is_invalid() {
        let ext = PullMessageResponseHeader {
            suggest_which_broker_id: 0,
            next_begin_offset: 1,
            min_offset: 0,
            max_offset: 2,
        }
        .to_ext()
        .with("minOffset", "zero");
        assert_eq!(
            PullMessageResponseHeader::from_ext(&ext),
            Err(HeaderError::Invalid {
                field: "minOffset",
                value: "zero".into()
            })
        );
    }
}
