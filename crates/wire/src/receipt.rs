//! The pop receipt handle: the `extraInfo` of ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME and
//! the message property `POP_CK`, as RocketMQ's `ExtraInfoUtil` writes it. The Java client
//! builds it from a POP_MESSAGE answer; a broker builds it itself for a message it hands out
//! from a pop retry topic. Seven or eight fields, each separated by one space:
//!
//! ```text
//! ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName queueId [msgQueueOffset]
//! 0             1795293277021 60000   0         0         broker-a   2       1
//! ```
//!
//! The handle comes back from a peer, so `parse` bounds its length before looking at it and
//! never allocates more than that length.

use std::fmt;

/// The fields other than the broker name take at most 110 bytes: four i64s of at most 20
/// characters (`-9223372036854775808`), two i32s of 11, the one-character flag and seven
/// spaces. 512 leaves the broker name 402, three times the 127 RocketMQ allows.
pub const RECEIPT_HANDLE_BYTES_MAX: usize = 512;

/// Without `msgQueueOffset` (`ExtraInfoUtil.buildExtraInfo` of seven arguments) and with it.
const FIELDS_MIN: usize = 7;
const FIELDS_MAX: usize = 8;
/// RocketMQ's proxy (and Quiver's gRPC port) hand gRPC clients the handle with the message's
/// CommitLog position after it, and the proxy passes that whole text on as `extraInfo`:
/// RocketMQ reads the fields it knows and ignores the ninth, and so does `parse`.
const FIELDS_WITH_POSITION: usize = 9;

/// The handle's field names as RocketMQ spells them, by position, for errors.
const FIELD_NAMES: [&str; FIELDS_MAX] = [
    "ckQueueOffset",
    "popTime",
    "invisibleTime",
    "reviveQid",
    "retryFlag",
    "brokerName",
    "queueId",
    "msgQueueOffset",
];

/// Which topic the handle's message was read from (`ExtraInfoUtil.getRetry`): the consumed
/// topic, or one of the two spellings of the group's pop retry topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RetryFlag {
    /// "0": the consumed topic itself.
    Normal,
    /// "1": `%RETRY%<group>_<topic>` (`KeyBuilder.buildPopRetryTopicV1`).
    Retry,
    /// "2": `%RETRY%<group>+<topic>` (`KeyBuilder.buildPopRetryTopicV2`).
    RetryV2,
}

impl RetryFlag {
    pub fn as_str(self) -> &'static str {
        match self {
            RetryFlag::Normal => "0",
            RetryFlag::Retry => "1",
            RetryFlag::RetryV2 => "2",
        }
    }

    /// The flag as it travels in a handle, an offset info or a BATCH_ACK_MESSAGE entry's `r`.
    pub fn parse(text: &str) -> Result<RetryFlag, ReceiptError> {
        match text {
            "0" => Ok(RetryFlag::Normal),
            "1" => Ok(RetryFlag::Retry),
            "2" => Ok(RetryFlag::RetryV2),
            other => Err(ReceiptError::UnknownRetryFlag {
                value: other.to_owned(),
            }),
        }
    }

    /// The topic a message with this flag was read from, for a group consuming `topic`
    /// (`ExtraInfoUtil.getRealTopic`): acks and invisible-time changes go to that topic's queue.
    pub fn real_topic(self, group: &str, topic: &str) -> String {
        match self {
            RetryFlag::Normal => topic.to_owned(),
            RetryFlag::Retry => pop_retry_topic(group, topic),
            RetryFlag::RetryV2 => format!("%RETRY%{group}+{topic}"),
        }
    }
}

impl fmt::Display for RetryFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// RocketMQ's pop retry topic of a group and topic, as the V1 flag names it: the one a broker
/// revives unacknowledged messages into.
pub fn pop_retry_topic(group: &str, topic: &str) -> String {
    format!("%RETRY%{group}_{topic}")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptHandle {
    /// `ckQueueOffset`: the offset of the first message this pop took from the queue, which
    /// RocketMQ's checkpoint counts from.
    pub start_offset: i64,
    /// `popTime`: the broker's clock when it handed the message out.
    pub pop_time_ms: i64,
    /// `invisibleTime`: how long after `pop_time_ms` the message stays invisible.
    pub invisible_ms: i64,
    /// `reviveQid`: the queue of RocketMQ's revive topic holding the checkpoint.
    pub revive_queue_id: i32,
    pub retry: RetryFlag,
    /// `brokerName`: never contains a space, or the fields after it would shift.
    pub broker_name: String,
    /// `queueId`: the queue of the topic `retry` names.
    pub queue_id: i32,
    /// `msgQueueOffset`: the message's own offset in that queue. Clients always write it;
    /// `ExtraInfoUtil` can leave it out, and then the request's `offset` says it.
    pub queue_offset: Option<i64>,
}

impl ReceiptHandle {
    /// The handle as it travels. Panics on a broker name with a space or one too long to parse
    /// back: the broker's own name is checked when its configuration is read, so either would
    /// be a bug.
    pub fn encode(&self) -> String {
        assert!(
            !self.broker_name.contains(' '),
            "broker name {:?} in a receipt handle",
            self.broker_name
        );
        let encoded = self.to_string();
        assert!(encoded.len() <= RECEIPT_HANDLE_BYTES_MAX, "{encoded:?}");
        encoded
    }

    /// Reads a handle a peer sent. Refuses one longer than `RECEIPT_HANDLE_BYTES_MAX` before
    /// splitting it, and any field count but seven or eight.
    pub fn parse(text: &str) -> Result<ReceiptHandle, ReceiptError> {
        if text.len() > RECEIPT_HANDLE_BYTES_MAX {
            return Err(ReceiptError::TooLong {
                handle_bytes: text.len(),
                limit_bytes: RECEIPT_HANDLE_BYTES_MAX,
            });
        }
        let mut fields = [""; FIELDS_MAX];
        let mut count = 0;
        for field in text.split(' ') {
            if let Some(slot) = fields.get_mut(count) {
                *slot = field;
            }
            count += 1;
        }
        if !(FIELDS_MIN..=FIELDS_WITH_POSITION).contains(&count) {
            return Err(ReceiptError::FieldCount { fields: count });
        }
        if count == FIELDS_WITH_POSITION {
            let position = text.rsplit(' ').next().unwrap_or_default();
            position
                .parse::<i64>()
                .map_err(|_| ReceiptError::NotANumber {
                    field: "commitLogOffset",
                    value: position.to_owned(),
                })?;
        }
        let queue_offset = if count >= FIELDS_MAX {
            Some(number(&fields, 7)?)
        } else {
            None
        };
        Ok(ReceiptHandle {
            start_offset: number(&fields, 0)?,
            pop_time_ms: number(&fields, 1)?,
            invisible_ms: number(&fields, 2)?,
            revive_queue_id: number(&fields, 3)?,
            retry: RetryFlag::parse(fields[4])?,
            broker_name: fields[5].to_owned(),
            queue_id: number(&fields, 6)?,
            queue_offset,
        })
    }
}

impl fmt::Display for ReceiptHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {} {}",
            self.start_offset,
            self.pop_time_ms,
            self.invisible_ms,
            self.revive_queue_id,
            self.retry,
            self.broker_name,
            self.queue_id
        )?;
        match self.queue_offset {
            Some(offset) => write!(f, " {offset}"),
            None => Ok(()),
        }
    }
}

/// Field `index` as an integer, as Java's `Long.valueOf` / `Integer.valueOf` read it.
fn number<T: std::str::FromStr>(
    fields: &[&str; FIELDS_MAX],
    index: usize,
) -> Result<T, ReceiptError> {
    fields[index].parse().map_err(|_| ReceiptError::NotANumber {
        field: FIELD_NAMES[index],
        value: fields[index].to_owned(),
    })
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReceiptError {
    #[error("a receipt handle is at most {limit_bytes} bytes, not {handle_bytes}")]
    TooLong {
        handle_bytes: usize,
        limit_bytes: usize,
    },
    #[error("a receipt handle has 7 to 9 space-separated fields, not {fields}")]
    FieldCount { fields: usize },
    #[error("{field} {value:?} in a receipt handle is not a number")]
    NotANumber { field: &'static str, value: String },
    #[error("unknown retry flag {value:?}: RocketMQ writes 0, 1 or 2")]
    UnknownRetryFlag { value: String },
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// ACK_MESSAGE `extraInfo`s an Apache RocketMQ 5.5.0 Java client sent
    /// (`wire-captures/04-java-client-json.jsonl`, seq 129 to 148).
    const CAPTURED: [&str; 7] = [
        "0 1795293277021 60000 0 0 broker-a 2 0",
        "0 1795293277021 60000 0 0 broker-a 1 0",
        "0 1795293277021 60000 0 0 broker-a 2 2",
        "0 1795293277021 60000 0 0 broker-a 2 1",
        "0 1795293277021 60000 0 0 broker-a 3 0",
        "0 1795293279147 60000 2 0 broker-a 0 0",
        "1 1795293279147 60000 2 0 broker-a 1 1",
    ];

    #[test]
    fn captured_handles_parse_into_their_fields_and_encode_back_byte_for_byte() {
        for text in CAPTURED {
            let handle = ReceiptHandle::parse(text).expect(text);
            assert_eq!(handle.encode(), text);
        }
        assert_eq!(
            ReceiptHandle::parse(CAPTURED[6]),
            Ok(ReceiptHandle {
                start_offset: 1,
                pop_time_ms: 1_795_293_279_147,
                invisible_ms: 60_000,
                revive_queue_id: 2,
                retry: RetryFlag::Normal,
                broker_name: "broker-a".into(),
                queue_id: 1,
                queue_offset: Some(1),
            })
        );
    }

    #[test]
    fn a_handle_without_the_message_offset_is_read_as_extra_info_util_writes_it() {
        let handle = ReceiptHandle::parse("5 1000 30000 0 1 broker-b 3").unwrap();
        assert_eq!(handle.retry, RetryFlag::Retry);
        assert_eq!(handle.queue_offset, None);
        assert_eq!(handle.encode(), "5 1000 30000 0 1 broker-b 3");
    }

    /// What RocketMQ's proxy passes on as `extraInfo`: the gRPC client's handle, the pop handle
    /// with the message's CommitLog position after it.
    #[test]
    fn a_handle_with_the_commit_log_position_after_it_reads_as_the_pop_handle() {
        let handle = ReceiptHandle::parse("0 1795848191643 30000 0 0 broker-a 2 0 13240").unwrap();
        assert_eq!(handle.queue_id, 2);
        assert_eq!(handle.queue_offset, Some(0));
        assert_eq!(handle.encode(), "0 1795848191643 30000 0 0 broker-a 2 0");
    }

    #[test]
    fn malformed_handles_name_what_is_wrong() {
        assert_eq!(
            ReceiptHandle::parse("0 1 2 0 0"),
            Err(ReceiptError::FieldCount { fields: 5 })
        );
        assert_eq!(
            ReceiptHandle::parse("0 1 2 0 0 b 1 2 3 4"),
            Err(ReceiptError::FieldCount { fields: 10 })
        );
        assert_eq!(
            ReceiptHandle::parse("0 1 2 0 0 b 1 2 here"),
            Err(ReceiptError::NotANumber {
                field: "commitLogOffset",
                value: "here".into()
            })
        );
        assert_eq!(
            ReceiptHandle::parse("0 soon 2 0 0 b 1 2"),
            Err(ReceiptError::NotANumber {
                field: "popTime",
                value: "soon".into()
            })
        );
        assert_eq!(
            ReceiptHandle::parse("0 1 2 0 0 b 1 "),
            Err(ReceiptError::NotANumber {
                field: "msgQueueOffset",
                value: String::new()
            })
        );
        assert_eq!(
            ReceiptHandle::parse("0 1 2 0 3 b 1 2"),
            Err(ReceiptError::UnknownRetryFlag { value: "3".into() })
        );
        let long = format!("0 1 2 0 0 {} 1 2", "b".repeat(RECEIPT_HANDLE_BYTES_MAX));
        assert_eq!(
            ReceiptHandle::parse(&long),
            Err(ReceiptError::TooLong {
                handle_bytes: long.len(),
                limit_bytes: RECEIPT_HANDLE_BYTES_MAX
            })
        );
    }

    #[test]
    fn the_retry_flag_names_the_topic_the_message_was_read_from() {
        assert_eq!(RetryFlag::Normal.real_topic("g", "T"), "T");
        assert_eq!(RetryFlag::Retry.real_topic("g", "T"), "%RETRY%g_T");
        assert_eq!(RetryFlag::RetryV2.real_topic("g", "T"), "%RETRY%g+T");
    }

    #[test]
    fn the_longest_handle_with_a_name_rocketmq_allows_fits_the_limit() {
        let handle = ReceiptHandle {
            start_offset: i64::MIN,
            pop_time_ms: i64::MIN,
            invisible_ms: i64::MIN,
            revive_queue_id: i32::MIN,
            retry: RetryFlag::RetryV2,
            broker_name: "b".repeat(127),
            queue_id: i32::MIN,
            queue_offset: Some(i64::MIN),
        };
        assert_eq!(handle.encode().len(), 110 + 127);
    }

    fn any_handle() -> impl Strategy<Value = ReceiptHandle> {
        let flag = prop_oneof![
            Just(RetryFlag::Normal),
            Just(RetryFlag::Retry),
            Just(RetryFlag::RetryV2)
        ];
        (
            (any::<i64>(), any::<i64>(), any::<i64>(), any::<i32>()),
            flag,
            "[^ ]{0,100}",
            any::<i32>(),
            proptest::option::of(any::<i64>()),
        )
            .prop_map(
                |(
                    (start_offset, pop_time_ms, invisible_ms, revive_queue_id),
                    retry,
                    broker_name,
                    queue_id,
                    queue_offset,
                )| ReceiptHandle {
                    start_offset,
                    pop_time_ms,
                    invisible_ms,
                    revive_queue_id,
                    retry,
                    broker_name,
                    queue_id,
                    queue_offset,
                },
            )
    }

    proptest! {
        #[test]
        fn any_handle_encoded_parses_back_the_same(handle in any_handle()) {
            prop_assert_eq!(ReceiptHandle::parse(&handle.encode()), Ok(handle));
        }

        #[test]
        fn parsing_any_text_never_panics(text in ".{0,600}") {
            let _ = ReceiptHandle::parse(&text);
        }

        #[test]
        fn parsing_handle_shaped_text_never_panics(
            fields in proptest::collection::vec("-?[0-9]{0,21}|[^ ]{0,8}", 0..12),
        ) {
            let _ = ReceiptHandle::parse(&fields.join(" "));
        }
    }
}
