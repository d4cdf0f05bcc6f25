//! Bodies keyed by `MessageQueue`: TopicStatsTable (GET_TOPIC_STATS_INFO) and ConsumeStats
//! (GET_CONSUME_STATS).
//!
//! Java's fastjson writes a `Map<MessageQueue, V>` with the key as a bare JSON object:
//! `{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"maxOffset":1,...}}}`. That is
//! not JSON, so serde cannot write or read it; `to_java_json` writes that form by hand (Java
//! reads only this form back into a `MessageQueue` key), and `from_java_json` turns each bare
//! object key into a string before parsing.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::body::{BodyError, MessageQueue};

/// Per-queue figures of a topic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TopicOffset {
    /// Store time of the newest message, 0 for an empty queue.
    pub last_update_timestamp: i64,
    pub max_offset: i64,
    pub min_offset: i64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TopicStatsTable {
    pub offset_table: BTreeMap<MessageQueue, TopicOffset>,
    pub topic_put_tps: f64,
}

/// Per-queue progress of a consumer group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct OffsetWrapper {
    /// The queue's max offset (the next one to be written).
    pub broker_offset: i64,
    /// The group's committed offset.
    pub consumer_offset: i64,
    /// Store time of the last consumed message, 0 when nothing was consumed.
    pub last_timestamp: i64,
    pub pull_offset: i64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConsumeStats {
    pub offset_table: BTreeMap<MessageQueue, OffsetWrapper>,
    pub consume_tps: f64,
}

impl TopicStatsTable {
    pub fn to_java_json(&self) -> Vec<u8> {
        let mut out = String::from("{\"offsetTable\":");
        write_queue_map(&mut out, &self.offset_table);
        out.push_str(",\"topicPutTps\":");
        out.push_str(&json_number(self.topic_put_tps));
        out.push('}');
        out.into_bytes()
    }

    pub fn from_java_json(bytes: &[u8]) -> Result<TopicStatsTable, BodyError> {
        let (offset_table, topic_put_tps) = read_queue_map(bytes, "topicPutTps")?;
        Ok(TopicStatsTable {
            offset_table,
            topic_put_tps,
        })
    }
}

impl ConsumeStats {
    pub fn to_java_json(&self) -> Vec<u8> {
        let mut out = String::from("{\"consumeTps\":");
        out.push_str(&json_number(self.consume_tps));
        out.push_str(",\"offsetTable\":");
        write_queue_map(&mut out, &self.offset_table);
        out.push('}');
        out.into_bytes()
    }

    pub fn from_java_json(bytes: &[u8]) -> Result<ConsumeStats, BodyError> {
        let (offset_table, consume_tps) = read_queue_map(bytes, "consumeTps")?;
        Ok(ConsumeStats {
            offset_table,
            consume_tps,
        })
    }
}

/// RESET_CONSUMER_CLIENT_OFFSET's body and INVOKE_BROKER_TO_RESET_OFFSET's answer: the offset
/// each queue was reset to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResetOffsetBody {
    pub offset_table: BTreeMap<MessageQueue, i64>,
}

impl ResetOffsetBody {
    pub fn to_java_json(&self) -> Vec<u8> {
        let mut out = String::from("{\"offsetTable\":");
        write_queue_map(&mut out, &self.offset_table);
        out.push('}');
        out.into_bytes()
    }

    pub fn from_java_json(bytes: &[u8]) -> Result<ResetOffsetBody, BodyError> {
        let (offset_table, _) = read_queue_map(bytes, "")?;
        Ok(ResetOffsetBody { offset_table })
    }
}

/// A double as Java's parser accepts it; NaN and infinities (which JSON lacks) become 0.
fn json_number(value: f64) -> String {
    if value.is_finite() {
        serde_json::Number::from_f64(value)
            .map(|n| n.to_string())
            .unwrap_or_else(|| "0.0".into())
    } else {
        "0.0".into()
    }
}

fn write_queue_map<V: Serialize>(out: &mut String, map: &BTreeMap<MessageQueue, V>) {
    out.push('{');
    for (index, (queue, value)) in map.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        // Both are plain structs of strings and numbers: serializing them cannot fail.
        out.push_str(&serde_json::to_string(queue).expect("MessageQueue serializes"));
        out.push(':');
        out.push_str(&serde_json::to_string(value).expect("queue figures serialize"));
    }
    out.push('}');
}

#[derive(Deserialize)]
struct Raw<V> {
    #[serde(default = "BTreeMap::new", rename = "offsetTable")]
    offset_table: BTreeMap<String, V>,
    #[serde(flatten)]
    rest: BTreeMap<String, serde_json::Value>,
}

fn read_queue_map<V: DeserializeOwned>(
    bytes: &[u8],
    number_key: &str,
) -> Result<(BTreeMap<MessageQueue, V>, f64), BodyError> {
    let text = quote_object_keys(bytes);
    let raw: Raw<V> = serde_json::from_slice(&text).map_err(|e| BodyError::Json(e.to_string()))?;
    let mut table = BTreeMap::new();
    for (key, value) in raw.offset_table {
        let queue: MessageQueue =
            serde_json::from_str(&key).map_err(|e| BodyError::Json(e.to_string()))?;
        table.insert(queue, value);
    }
    let number = raw
        .rest
        .get(number_key)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or(0.0);
    Ok((table, number))
}

/// Rewrites every object used as an object key (`{{...}:v}`) as a JSON string holding that
/// object's text, touching nothing inside strings.
fn quote_object_keys(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + 64);
    // For each open object: true while the next token would be a key.
    let mut expecting_key: Vec<bool> = Vec::new();
    let mut index = 0;
    while index < input.len() {
        let byte = input[index];
        match byte {
            b'"' => {
                let end = string_end(input, index);
                out.extend_from_slice(&input[index..end]);
                if let Some(top) = expecting_key.last_mut() {
                    *top = false;
                }
                index = end;
                continue;
            }
            b'{' if expecting_key.last() == Some(&true) => {
                let end = object_end(input, index);
                let key = String::from_utf8_lossy(&input[index..end]);
                out.extend_from_slice(
                    serde_json::to_string(&key)
                        .expect("a string serializes")
                        .as_bytes(),
                );
                if let Some(top) = expecting_key.last_mut() {
                    *top = false;
                }
                index = end;
                continue;
            }
            b'{' => expecting_key.push(true),
            b'}' => {
                expecting_key.pop();
            }
            b',' => {
                if let Some(top) = expecting_key.last_mut() {
                    *top = true;
                }
            }
            b'[' => expecting_key.push(false),
            b']' => {
                expecting_key.pop();
            }
            _ => {}
        }
        out.push(byte);
        index += 1;
    }
    out
}

/// Index just past the string that starts at `start` (a `"`), or the input's end.
fn string_end(input: &[u8], start: usize) -> usize {
    let mut index = start + 1;
    while index < input.len() {
        match input[index] {
            b'\\' => index += 2,
            b'"' => return index + 1,
            _ => index += 1,
        }
    }
    input.len()
}

/// Index just past the object that starts at `start` (a `{`), or the input's end.
fn object_end(input: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut index = start;
    while index < input.len() {
        match input[index] {
            b'"' => {
                index = string_end(input, index);
                continue;
            }
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return index + 1;
                }
            }
            _ => {}
        }
        index += 1;
    }
    input.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(id: i32) -> MessageQueue {
        MessageQueue {
            topic: "wire_json".into(),
            broker_name: "broker-a".into(),
            queue_id: id,
        }
    }

    #[test]
    fn topic_stats_captured_from_java_parse() {
        let captured = br#"{"offsetTable":{{"brokerName":"broker-a","queueId":3,"topic":"wire_json"}:{"lastUpdateTimestamp":1795293274767,"maxOffset":1,"minOffset":0},{"brokerName":"broker-a","queueId":1,"topic":"wire_json"}:{"lastUpdateTimestamp":1795293279145,"maxOffset":2,"minOffset":0}},"topicPutTps":0.175}"#;
        let stats = TopicStatsTable::from_java_json(captured).unwrap();
        assert_eq!(stats.offset_table.len(), 2);
        assert_eq!(stats.offset_table[&queue(1)].max_offset, 2);
        assert_eq!(
            stats.offset_table[&queue(3)].last_update_timestamp,
            1795293274767
        );
        assert_eq!(stats.topic_put_tps, 0.175);
    }

    #[test]
    fn reset_offsets_round_trip_with_bare_object_keys() {
        let mut body = ResetOffsetBody::default();
        body.offset_table.insert(queue(0), 7);
        body.offset_table.insert(queue(2), 0);
        let json = body.to_java_json();
        assert!(json.starts_with(b"{\"offsetTable\":{{\"topic\""));
        assert_eq!(ResetOffsetBody::from_java_json(&json).unwrap(), body);
    }

    #[test]
    fn written_maps_use_bare_object_keys_and_read_back() {
        let mut stats = ConsumeStats {
            consume_tps: 1.5,
            ..ConsumeStats::default()
        };
        stats.offset_table.insert(
            queue(0),
            OffsetWrapper {
                broker_offset: 77,
                consumer_offset: 70,
                last_timestamp: 5,
                pull_offset: 70,
            },
        );
        stats
            .offset_table
            .insert(queue(1), OffsetWrapper::default());
        let text = String::from_utf8(stats.to_java_json()).unwrap();
        assert!(
            text.starts_with(
                r#"{"consumeTps":1.5,"offsetTable":{{"topic":"wire_json","brokerName":"broker-a","queueId":0}:{"brokerOffset":77,"#
            ),
            "{text}"
        );
        assert_eq!(
            ConsumeStats::from_java_json(text.as_bytes()).unwrap(),
            stats
        );
        let empty = TopicStatsTable::default().to_java_json();
        assert_eq!(empty, br#"{"offsetTable":{},"topicPutTps":0.0}"#);
    }

    #[test]
    fn keys_inside_strings_are_left_alone() {
        let text = br#"{"a":"{x}:","offsetTable":{},"consumeTps":2}"#;
        let stats = ConsumeStats::from_java_json(text).unwrap();
        assert_eq!(stats.consume_tps, 2.0);
        assert!(ConsumeStats::from_java_json(b"{").is_err());
    }
}
