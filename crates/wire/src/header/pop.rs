//! RocketMQ 5 pop consumption: codes 200050 (POP_MESSAGE), 200051 (ACK_MESSAGE), 200052
//! (PEEK_MESSAGE), 200053 (CHANGE_MESSAGE_INVISIBLETIME).

use super::ext_header;

/// POP_MESSAGE (200050) and PEEK_MESSAGE (200052, which reads the same fields it needs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PopMessageRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    /// -1: any readable queue.
    pub queue_id: i32,
    pub max_msg_nums: i32,
    pub invisible_time: i64,
    pub poll_time: i64,
    pub born_time: i64,
    /// 0: a new group starts at the queue's minimum, 1: at its end.
    pub init_mode: i32,
    pub exp_type: Option<String>,
    pub exp: Option<String>,
    pub order: Option<bool>,
}

ext_header!(PopMessageRequestHeader {
    consumer_group: req "consumerGroup",
    topic: req "topic",
    queue_id: req "queueId",
    max_msg_nums: req "maxMsgNums",
    invisible_time: def "invisibleTime" = 60_000,
    poll_time: def "pollTime" = 0,
    born_time: def "bornTime" = 0,
    init_mode: def "initMode" = 0,
    exp_type: opt "expType",
    exp: opt "exp",
    order: opt "order",
});

/// ACK_MESSAGE (200051).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckMessageRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    /// The receipt handle the client built (`POP_CK`).
    pub extra_info: String,
    pub offset: i64,
}

ext_header!(AckMessageRequestHeader {
    consumer_group: req "consumerGroup",
    topic: req "topic",
    queue_id: req "queueId",
    extra_info: req "extraInfo",
    offset: req "offset",
});

/// CHANGE_MESSAGE_INVISIBLETIME (200053).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeInvisibleTimeRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub extra_info: String,
    pub offset: i64,
    pub invisible_time: i64,
}

ext_header!(ChangeInvisibleTimeRequestHeader {
    consumer_group: req "consumerGroup",
    topic: req "topic",
    queue_id: req "queueId",
    extra_info: req "extraInfo",
    offset: req "offset",
    invisible_time: req "invisibleTime",
});

/// PEEK_MESSAGE (200052).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeekMessageRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub max_msg_nums: i32,
}

ext_header!(PeekMessageRequestHeader {
    consumer_group: req "consumerGroup",
    topic: req "topic",
    queue_id: req "queueId",
    max_msg_nums: req "maxMsgNums",
});

/// NOTIFICATION (200054): is there something to pop? Long-polled up to `poll_time`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotificationRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
    pub poll_time: i64,
}

ext_header!(NotificationRequestHeader {
    consumer_group: req "consumerGroup",
    topic: req "topic",
    queue_id: req "queueId",
    poll_time: def "pollTime" = 0,
});

/// POLLING_INFO (200055): how many pops of the group wait on the topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PollingInfoRequestHeader {
    pub consumer_group: String,
    pub topic: String,
    pub queue_id: i32,
}

ext_header!(PollingInfoRequestHeader {
    consumer_group: req "consumerGroup",
    topic: req "topic",
    queue_id: req "queueId",
});
