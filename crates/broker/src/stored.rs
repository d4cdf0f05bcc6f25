//! Stored records as the broker builds them, for sends, consumers' send-backs (retry and
//! dead-letter topics) and delayed messages that fell due: a message turned into a store
//! record with its tag code and index keys, property edits, and a wait for the store from
//! async code.

use quiver_store::Record;
use quiver_wire::message::{find_property, property, tags_code, StoredMessage};
pub use quiver_wire::message::{with_property, without_property};

/// The tag code RocketMQ stores in the ConsumeQueue: the hash of TAGS, or 0.
pub fn tags_code_of(properties: &str) -> i64 {
    find_property(properties, property::TAGS)
        .map(tags_code)
        .unwrap_or(0)
}

/// The index keys of a message: the words of KEYS and its UNIQ_KEY.
pub fn index_keys(properties: &str) -> Vec<String> {
    keys_of(
        find_property(properties, property::KEYS),
        find_property(properties, property::UNIQ_KEY),
    )
}

/// The index keys for a KEYS value and a UNIQ_KEY.
pub fn keys_of(keys: Option<&str>, uniq_key: Option<&str>) -> Vec<String> {
    let words = keys.into_iter().flat_map(|k| k.split(' '));
    words
        .filter(|w| !w.is_empty())
        .chain(uniq_key)
        .map(String::from)
        .collect()
}

/// A store record for `message`, indexed by its keys and filtered by its tag.
pub fn record_of(message: &StoredMessage) -> Result<Record, String> {
    record_with_tags_code(message, tags_code_of(&message.properties))
}

pub fn record_with_tags_code(message: &StoredMessage, tags_code: i64) -> Result<Record, String> {
    record_with(message, tags_code, index_keys(&message.properties))
}

/// A store record for `message` with its tag code and index keys already worked out.
pub fn record_with(
    message: &StoredMessage,
    tags_code: i64,
    keys: Vec<String>,
) -> Result<Record, String> {
    let queue_id = u32::try_from(message.queue_id)
        .map_err(|_| format!("queue id {} is negative", message.queue_id))?;
    let mut bytes = Vec::with_capacity(message.encoded_len());
    message.encode(&mut bytes).map_err(|e| e.to_string())?;
    Ok(Record {
        topic: message.topic.clone(),
        queue_id,
        tags_code,
        keys,
        store_timestamp_ms: message.store_timestamp,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_are_set_replaced_and_removed() {
        let raw = "TAGS\u{1}a\u{2}DELAY\u{1}3\u{2}";
        let set = with_property(raw, "DELAY", "4");
        assert_eq!(find_property(&set, "DELAY"), Some("4"));
        assert_eq!(find_property(&set, "TAGS"), Some("a"));
        let removed = without_property(&set, "DELAY");
        assert_eq!(removed, "TAGS\u{1}a\u{2}");
        assert_eq!(without_property(raw, "NOPE"), raw);
        assert_eq!(
            index_keys("KEYS\u{1}k1 k2\u{2}UNIQ_KEY\u{1}U\u{2}"),
            vec!["k1", "k2", "U"]
        );
    }
}
