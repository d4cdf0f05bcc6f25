//! Consumer offsets and queue metadata: codes 14, 15, 29, 30, 31, 32.

use super::ext_header;

/// QUERY_CONSUMER_OFFSET (14).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryConsumerOffsetRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub set_zero_if_not_found: Option<bool>,
}

ext_header!(QueryConsumerOffsetRequestHeader {
    consumer_group: req "consumerGroup",
    topic: req "topic",
    queue_id: req "queueId",
    set_zero_if_not_found: opt "setZeroIfNotFound",
});

/// UPDATE_CONSUMER_OFFSET (15), usually oneway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateConsumerOffsetRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub commit_offset: i64,
}

ext_header!(UpdateConsumerOffsetRequestHeader {
    consumer_group: req "consumerGroup",
    topic: req "topic",
    queue_id: req "queueId",
    commit_offset: req "commitOffset",
});

/// GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) and GET_EARLIEST_MSG_STORETIME (32).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicQueueHeader {
    pub topic: String,
    pub queue_id: i32,
}

ext_header!(TopicQueueHeader {
    topic: req "topic",
    queue_id: req "queueId",
});

/// SEARCH_OFFSET_BY_TIMESTAMP (29).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchOffsetRequestHeader {
    pub topic: String,
    pub queue_id: i32,
    pub timestamp: i64,
    /// "lower" (the default) or "upper".
    pub boundary_type: Option<String>,
}

ext_header!(SearchOffsetRequestHeader {
    topic: req "topic",
    queue_id: req "queueId",
    timestamp: req "timestamp",
    boundary_type: opt "boundaryType",
});

/// Response ext `offset`, shared by codes 14, 29, 30 and 31.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetResponseHeader {
    pub offset: i64,
}

ext_header!(OffsetResponseHeader { offset: req "offset" });

/// Response ext `timestamp` of GET_EARLIEST_MSG_STORETIME.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimestampResponseHeader {
    pub timestamp: i64,
}

ext_header!(TimestampResponseHeader { timestamp: req "timestamp" });

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::ExtFields;

    #[test]
    fn offset_headers_round_trip() {
        let query = QueryConsumerOffsetRequestHeader {
            consumer_group: "g".into(),
            topic: "t".into(),
            queue_id: 2,
            set_zero_if_not_found: Some(false),
        };
        assert_eq!(
            QueryConsumerOffsetRequestHeader::from_ext(&query.to_ext()),
            Ok(query)
        );
        let search = SearchOffsetRequestHeader {
            topic: "t".into(),
            queue_id: 0,
            timestamp: 5,
            boundary_type: None,
        };
        assert_eq!(search.to_ext().len(), 3);
        assert_eq!(
            SearchOffsetRequestHeader::from_ext(&search.to_ext()),
            Ok(search)
        );
        let offset = OffsetResponseHeader { offset: -1 };
        assert_eq!(offset.to_ext(), ExtFields::new().with("offset", -1));
    }
}
