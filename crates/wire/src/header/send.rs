//! SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and their response.

use super::{ExtValue, HeaderError};
use crate::ext::ExtFields;

/// The send request header. Code 10 uses the Java field names; 310/320 carry the same data
/// under the one-letter keys `a`..`m` of `SendMessageRequestHeaderV2`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendMessageHeader {
    pub producer_group: String,
    pub topic: String,
    pub default_topic: String,
    pub default_topic_queue_nums: i32,
    pub queue_id: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub flag: i32,
    /// Encoded properties; "" when absent.
    pub properties: String,
    /// 0 when absent.
    pub reconsume_times: i32,
    /// false when absent (5.x clients may leave it out).
    pub unit_mode: bool,
    pub max_reconsume_times: Option<i32>,
    /// false when absent; callers also treat code 320 as a batch.
    pub batch: bool,
}

/// Key names in field order: (V1 long name, V2 short name).
const KEYS: [(&str, &str); 13] = [
    ("producerGroup", "a"),
    ("topic", "b"),
    ("defaultTopic", "c"),
    ("defaultTopicQueueNums", "d"),
    ("queueId", "e"),
    ("sysFlag", "f"),
    ("bornTimestamp", "g"),
    ("flag", "h"),
    ("properties", "i"),
    ("reconsumeTimes", "j"),
    ("unitMode", "k"),
    ("maxReconsumeTimes", "l"),
    ("batch", "m"),
];

impl SendMessageHeader {
    pub fn from_v1(ext: &ExtFields) -> Result<Self, HeaderError> {
        Self::read(ext, false)
    }

    pub fn from_v2(ext: &ExtFields) -> Result<Self, HeaderError> {
        Self::read(ext, true)
    }

    /// Picks the key set by what is present: V2 requests have `b` (topic) and no `topic`.
    pub fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        if ext.get("topic").is_none() && ext.get("b").is_some() {
            Self::from_v2(ext)
        } else {
            Self::from_v1(ext)
        }
    }

    pub fn to_v1(&self) -> ExtFields {
        self.write(|(long, _)| long)
    }

    pub fn to_v2(&self) -> ExtFields {
        self.write(|(_, short)| short)
    }

    /// `short`: the one-letter keys of V2 (310/320), else the Java field names (10).
    fn read(ext: &ExtFields, short: bool) -> Result<Self, HeaderError> {
        let key = |index: usize| {
            let (long, letter) = KEYS[index];
            if short {
                letter
            } else {
                long
            }
        };
        // One pass over the entries instead of one search per field: every send reads this.
        let mut raw: [Option<&str>; KEYS.len()] = [None; KEYS.len()];
        for (name, value) in ext.iter() {
            let index = if short {
                match name.as_bytes() {
                    [letter @ b'a'..=b'm'] => Some(usize::from(letter - b'a')),
                    _ => None,
                }
            } else {
                KEYS.iter().position(|(long, _)| *long == name)
            };
            if let Some(index) = index {
                raw[index] = Some(value);
            }
        }
        let field = |index: usize| (key(index), raw[index]);
        Ok(SendMessageHeader {
            producer_group: required(field(0))?,
            topic: required(field(1))?,
            default_topic: required(field(2))?,
            default_topic_queue_nums: required(field(3))?,
            queue_id: required(field(4))?,
            sys_flag: required(field(5))?,
            born_timestamp: required(field(6))?,
            flag: required(field(7))?,
            properties: optional(field(8))?.unwrap_or_default(),
            reconsume_times: optional(field(9))?.unwrap_or(0),
            unit_mode: optional(field(10))?.unwrap_or(false),
            max_reconsume_times: optional(field(11))?,
            batch: optional(field(12))?.unwrap_or(false),
        })
    }

    fn write(&self, pick: fn((&'static str, &'static str)) -> &'static str) -> ExtFields {
        let key = |index: usize| pick(KEYS[index]);
        let mut ext = ExtFields::new();
        ext.put(key(0), &self.producer_group);
        ext.put(key(1), &self.topic);
        ext.put(key(2), &self.default_topic);
        ext.put(key(3), &self.default_topic_queue_nums);
        ext.put(key(4), &self.queue_id);
        ext.put(key(5), &self.sys_flag);
        ext.put(key(6), &self.born_timestamp);
        ext.put(key(7), &self.flag);
        // An empty string cannot travel in binary headers anyway, so leave it out like null.
        if !self.properties.is_empty() {
            ext.put(key(8), &self.properties);
        }
        ext.put(key(9), &self.reconsume_times);
        ext.put(key(10), &self.unit_mode);
        ext.put_opt(key(11), &self.max_reconsume_times);
        ext.put(key(12), &self.batch);
        ext
    }
}

fn required<T: ExtValue>((field, raw): (&'static str, Option<&str>)) -> Result<T, HeaderError> {
    T::parse_ext(field, raw.ok_or(HeaderError::Missing(field))?)
}

fn optional<T: ExtValue>(
    (field, raw): (&'static str, Option<&str>),
) -> Result<Option<T>, HeaderError> {
    raw.map(|raw| T::parse_ext(field, raw)).transpose()
}

/// ReplyMessageRequestHeader, of PUSH_REPLY_MESSAGE_TO_CLIENT (326): the reply's send header
/// as the replier sent it, and where and when the broker took it. The Java client refuses the
/// push when any of the three broker fields is missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyMessageHeader {
    pub send: SendMessageHeader,
    /// The replier's address, `ip:port`.
    pub born_host: String,
    /// The broker's address, `ip:port`.
    pub store_host: String,
    pub store_timestamp: i64,
}

impl ReplyMessageHeader {
    pub fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(ReplyMessageHeader {
            send: SendMessageHeader::from_v1(ext)?,
            born_host: ext.required("bornHost")?,
            store_host: ext.required("storeHost")?,
            store_timestamp: ext.required("storeTimestamp")?,
        })
    }

    /// The Java field names, with the send header's as in SEND_MESSAGE (10).
    pub fn to_ext(&self) -> ExtFields {
        let mut ext = self.send.to_v1();
        ext.put("bornHost", &self.born_host);
        ext.put("storeHost", &self.store_host);
        ext.put("storeTimestamp", &self.store_timestamp);
        ext
    }
}

/// SendMessageResponseHeader. The Java client reads these unconditionally, so every "sent"
/// response code must carry them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendMessageResponseHeader {
    /// Offset msg id, or the comma-joined ids of a batch.
    pub msg_id: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub transaction_id: Option<String>,
}

impl SendMessageResponseHeader {
    pub fn from_ext(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(SendMessageResponseHeader {
            msg_id: ext.required("msgId")?,
            queue_id: ext.required("queueId")?,
            queue_offset: ext.required("queueOffset")?,
            transaction_id: ext.optional("transactionId")?,
        })
    }

    /// Also writes `MSG_REGION` and `TRACE_ON`, which Java brokers always send.
    pub fn to_ext(&self) -> ExtFields {
        let mut ext = ExtFields::new();
        ext.put("msgId", &self.msg_id);
        ext.put("queueId", &self.queue_id);
        ext.put("queueOffset", &self.queue_offset);
        ext.put_opt("transactionId", &self.transaction_id);
        ext.insert("MSG_REGION", "DefaultRegion");
        ext.insert("TRACE_ON", "true");
        ext
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SendMessageHeader {
        SendMessageHeader {
            producer_group: "pg".into(),
            topic: "T".into(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: 4,
            queue_id: 3,
            sys_flag: 0,
            born_timestamp: 1_795_293_274_693,
            flag: 0,
            properties: "TAGS\u{1}a\u{2}".into(),
            reconsume_times: 0,
            unit_mode: false,
            max_reconsume_times: Some(16),
            batch: true,
        }
    }

    #[test]
    fn both_key_sets_round_trip() {
        let header = sample();
        assert_eq!(
            SendMessageHeader::from_v1(&header.to_v1()),
            Ok(header.clone())
        );
        assert_eq!(
            SendMessageHeader::from_v2(&header.to_v2()),
            Ok(header.clone())
        );
        assert_eq!(
            SendMessageHeader::from_ext(&header.to_v2()),
            Ok(header.clone())
        );
        assert_eq!(SendMessageHeader::from_ext(&header.to_v1()), Ok(header));
    }

    #[test]
    fn optional_send_fields_default() {
        let mut ext = sample().to_v2();
        for key in ["i", "j", "k", "l", "m"] {
            ext.remove(key);
        }
        let header = SendMessageHeader::from_v2(&ext).unwrap();
        assert_eq!(header.properties, "");
        assert_eq!(header.reconsume_times, 0);
        assert!(!header.unit_mode && !header.batch);
        assert_eq!(header.max_reconsume_times, None);
    }

    #[test]
    fn missing_topic_is_named() {
        let mut ext = sample().to_v2();
        ext.remove("b");
        assert_eq!(
            SendMessageHeader::from_v2(&ext),
            Err(HeaderError::Missing("b"))
        );
    }

    #[test]
    fn a_reply_push_header_round_trips_with_the_java_names() {
        let header = ReplyMessageHeader {
            send: sample(),
            born_host: "127.0.0.1:50000".into(),
            store_host: "127.0.0.1:10911".into(),
            store_timestamp: 1_795_293_274_700,
        };
        let ext = header.to_ext();
        assert_eq!(ext.get("producerGroup"), Some("pg"));
        assert_eq!(ext.get("bornHost"), Some("127.0.0.1:50000"));
        assert_eq!(ReplyMessageHeader::from_ext(&ext), Ok(header));
    }

    #[test]
    fn response_carries_region_and_trace() {
        let header = SendMessageResponseHeader {
            msg_id: "ID".into(),
            queue_id: 1,
            queue_offset: 7,
            transaction_id: None,
        };
        let ext = header.to_ext();
        assert_eq!(ext.get("MSG_REGION"), Some("DefaultRegion"));
        assert_eq!(ext.get("TRACE_ON"), Some("true"));
        assert_eq!(SendMessageResponseHeader::from_ext(&ext), Ok(header));
    }
}
