//! Message properties: `name 0x01 value 0x02` pairs, parsed with Java's rules
//! (`MessageDecoder.string2messageProperties`). The separators are spelled here only; other
//! code reads and edits properties through these functions.

use std::ops::Range;

/// Message property names (`MessageConst`).
pub mod property {
    pub const KEYS: &str = "KEYS";
    pub const TAGS: &str = "TAGS";
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    pub const WAIT: &str = "WAIT";
    pub const DELAY: &str = "DELAY";
    pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
    pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
    pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
    /// When a timer message falls due (ms), written by the broker.
    pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
    pub const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
    pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
    /// The older (ONS / 4.x commercial) spelling of a delivery time (ms).
    pub const START_DELIVER_TIME: &str = "__STARTDELIVERTIME";
    pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    pub const REAL_QID: &str = "REAL_QID";
    pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
    pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
    pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
    pub const CLUSTER: &str = "CLUSTER";
    pub const POP_CK: &str = "POP_CK";
    pub const POP_CK_OFFSET: &str = "POP_CK_OFFSET";
    pub const FIRST_POP_TIME: &str = "1ST_POP_TIME";
    pub const TRAN_MSG: &str = "TRAN_MSG";
    pub const PRODUCER_GROUP: &str = "PGROUP";
    pub const TRANSACTION_ID: &str = "__transactionId__";
    /// Seconds a producer asks the broker to wait before checking a half message.
    pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
    pub const MIN_OFFSET: &str = "MIN_OFFSET";
    pub const MAX_OFFSET: &str = "MAX_OFFSET";
    pub const MSG_REGION: &str = "MSG_REGION";
    pub const TRACE_SWITCH: &str = "TRACE_ON";
    pub const CONSUME_START_TIME: &str = "CONSUME_START_TIME";
    pub const INSTANCE_ID: &str = "INSTANCE_ID";
    pub const SHARDING_KEY: &str = "__SHARDINGKEY";
    pub const DLQ_ORIGIN_TOPIC: &str = "DLQ_ORIGIN_TOPIC";
    pub const DLQ_ORIGIN_MESSAGE_ID: &str = "DLQ_ORIGIN_MESSAGE_ID";
    /// The client id of the requester a reply goes to (request-reply).
    pub const REPLY_TO_CLIENT: &str = "REPLY_TO_CLIENT";
    /// Matches a reply to its request in the requester.
    pub const CORRELATION_ID: &str = "CORRELATION_ID";
    /// When the broker pushed a reply to its requester (ms), written by the broker.
    pub const PUSH_REPLY_TIME: &str = "PUSH_REPLY_TIME";
}

/// Ends a property's name.
pub const NAME_VALUE_SEPARATOR: u8 = 0x01;
/// Ends a property's value.
pub const PROPERTY_SEPARATOR: u8 = 0x02;

/// The byte ranges of each pair's name and value. Both separators are single ASCII bytes, so
/// the scan looks for bytes: every send reads its properties several times, and `str::split`
/// by `char` pays a comparison call per match. Being ASCII, the separators also never fall
/// inside a UTF-8 character, so the ranges slice a `str` at character boundaries.
fn pair_ranges(raw: &[u8]) -> impl Iterator<Item = (Range<usize>, Range<usize>)> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || loop {
        if start >= raw.len() {
            return None;
        }
        let end =
            memchr::memchr(PROPERTY_SEPARATOR, &raw[start..]).map_or(raw.len(), |at| start + at);
        let segment = start..end;
        start = end + 1;
        // Split at the first name/value separator; later ones belong to the value.
        let Some(middle) = memchr::memchr(NAME_VALUE_SEPARATOR, &raw[segment.clone()])
            .map(|at| segment.start + at)
        else {
            continue;
        };
        let (name, value) = (segment.start..middle, middle + 1..segment.end);
        // Java drops a pair with an empty name or value.
        if !name.is_empty() && !value.is_empty() {
            return Some((name, value));
        }
    })
}

/// The pairs of a property string in order, duplicates kept.
pub(crate) fn property_pairs(raw: &str) -> impl Iterator<Item = (&str, &str)> {
    pair_ranges(raw.as_bytes()).map(move |(name, value)| (&raw[name], &raw[value]))
}

/// The pairs of stored property bytes, which a record read from disk does not promise to be
/// UTF-8.
pub(crate) fn property_byte_pairs(raw: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    pair_ranges(raw).map(move |(name, value)| (&raw[name], &raw[value]))
}

/// Splits a property string with Java's rules: pairs end in 0x02, the first 0x01 splits name
/// from value, and a pair with an empty name or value is dropped. Duplicates are kept in order.
pub fn decode_properties(raw: &str) -> Vec<(String, String)> {
    property_pairs(raw)
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// Joins pairs as `name 0x01 value 0x02`. Pairs with an empty name or value are skipped,
/// since Java drops them on parsing anyway.
pub fn encode_properties<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::new();
    for (name, value) in pairs {
        if name.is_empty() || value.is_empty() {
            continue;
        }
        push_pair(&mut out, name, value);
    }
    out
}

fn push_pair(out: &mut String, name: &str, value: &str) {
    out.push_str(name);
    out.push(char::from(NAME_VALUE_SEPARATOR));
    out.push_str(value);
    out.push(char::from(PROPERTY_SEPARATOR));
}

/// The value of `name` without allocating. The last occurrence wins, as in Java's HashMap.
pub fn find_property<'a>(raw: &'a str, name: &str) -> Option<&'a str> {
    find_property_range(raw.as_bytes(), name.as_bytes()).map(|range| &raw[range])
}

/// Where the value of `name` lies in `raw`, the last valid pair winning. Every message read or
/// stored asks for a property or two; rather than walk every pair from the start (the last
/// one wins), this walks the pairs backwards, each found with one short `memrchr` (a substring
/// searcher costs more to build than a whole property string takes to scan). A pair's name
/// runs to its first 0x01, so a pair that starts with `name` 0x01 is named `name`, as Java
/// splits it.
pub(crate) fn find_property_range(raw: &[u8], name: &[u8]) -> Option<Range<usize>> {
    if name.is_empty() || name.contains(&NAME_VALUE_SEPARATOR) || name.contains(&PROPERTY_SEPARATOR)
    {
        // No pair has such a name (an empty one is dropped; a separator would end it).
        return None;
    }
    let mut end = raw.len();
    loop {
        let start = memchr::memrchr(PROPERTY_SEPARATOR, &raw[..end]).map_or(0, |at| at + 1);
        let pair = &raw[start..end];
        let value_start = start + name.len() + 1;
        // Java drops a pair with an empty value: an earlier one may still count.
        if pair.len() > name.len() + 1
            && pair.starts_with(name)
            && pair[name.len()] == NAME_VALUE_SEPARATOR
        {
            return Some(value_start..end);
        }
        if start == 0 {
            return None;
        }
        end = start - 1;
    }
}

/// Appends `name` = `value`. A last pair left without its 0x02 is closed first, so the new
/// pair is not read as part of its value. Appending a name already present makes a duplicate,
/// which readers resolve as Java does (the last wins); `with_property` replaces instead.
pub fn push_property(properties: &mut String, name: &str, value: &str) {
    if !properties.is_empty() && !properties.ends_with(char::from(PROPERTY_SEPARATOR)) {
        properties.push(char::from(PROPERTY_SEPARATOR));
    }
    push_pair(properties, name, value);
}

/// `properties` with `name` set to `value`, replacing any earlier value.
pub fn with_property(properties: &str, name: &str, value: &str) -> String {
    let mut out = without_property(properties, name);
    push_property(&mut out, name, value);
    out
}

/// `properties` without `name`; unchanged (not re-encoded) when it is absent, so a message
/// stored again keeps its bytes.
pub fn without_property(properties: &str, name: &str) -> String {
    if find_property(properties, name).is_none() {
        return properties.to_owned();
    }
    encode_properties(property_pairs(properties).filter(|(candidate, _)| *candidate != name))
}

/// The properties a broker reads on every send, found in one pass over the string (a send
/// used to scan it once per property). The last occurrence wins, as in `find_property`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendProperties<'a> {
    pub tags: Option<&'a str>,
    pub keys: Option<&'a str>,
    pub uniq_key: Option<&'a str>,
    pub cluster: Option<&'a str>,
    pub delay: Option<&'a str>,
    pub pop_ck: bool,
    pub msg_region: Option<&'a str>,
    pub trace_switch: Option<&'a str>,
    /// TRAN_MSG: a transaction's half message when "true".
    pub transaction: Option<&'a str>,
    /// Any of the timer properties (TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS,
    /// __STARTDELIVERTIME, TIMER_OUT_MS): only then is a send's due time worth looking up, so a
    /// plain send scans its properties once instead of once per timer name.
    pub timer: bool,
}

impl<'a> SendProperties<'a> {
    pub fn scan(raw: &'a str) -> SendProperties<'a> {
        let mut found = SendProperties::default();
        for (name, value) in property_pairs(raw) {
            match name {
                property::TAGS => found.tags = Some(value),
                property::KEYS => found.keys = Some(value),
                property::UNIQ_KEY => found.uniq_key = Some(value),
                property::CLUSTER => found.cluster = Some(value),
                property::DELAY => found.delay = Some(value),
                property::POP_CK => found.pop_ck = true,
                property::MSG_REGION => found.msg_region = Some(value),
                property::TRACE_SWITCH => found.trace_switch = Some(value),
                property::TRAN_MSG => found.transaction = Some(value),
                property::TIMER_DELAY_SEC
                | property::TIMER_DELAY_MS
                | property::TIMER_DELIVER_MS
                | property::START_DELIVER_TIME
                | property::TIMER_OUT_MS => found.timer = true,
                _ => {}
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_follow_java_parsing() {
        let raw = "A\u{1}1\u{2}\u{1}x\u{2}B\u{1}\u{2}C\u{1}3\u{1}4\u{2}junk\u{2}A\u{1}2\u{2}";
        assert_eq!(
            decode_properties(raw),
            vec![
                ("A".into(), "1".into()),
                ("C".into(), "3\u{1}4".into()),
                ("A".into(), "2".into())
            ]
        );
        assert_eq!(find_property(raw, "A"), Some("2"));
        assert_eq!(find_property(raw, "B"), None);
        assert_eq!(
            encode_properties([("K", "v"), ("", "x"), ("E", "")]),
            "K\u{1}v\u{2}"
        );
        // An unterminated last pair still counts; bytes and text agree.
        assert_eq!(find_property("A\u{1}é", "A"), Some("é"));
        let bytes: Vec<_> = property_byte_pairs(raw.as_bytes()).collect();
        let text: Vec<_> = property_pairs(raw)
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect();
        assert_eq!(bytes, text);
    }

    proptest::proptest! {
        /// The backwards search agrees with Java's pair splitting on any string of names,
        /// values and separators, duplicates, empty pairs and junk included.
        #[test]
        fn the_backwards_search_finds_what_pair_splitting_finds(
            raw in proptest::collection::vec(
                proptest::sample::select(vec!['A', 'B', 'x', '\u{1}', '\u{2}']), 0..40
            ),
            name in proptest::sample::select(vec!["A", "B", "AB", "BA", "x", "A\u{1}", ""]),
        ) {
            let raw: String = raw.into_iter().collect();
            let expected = property_pairs(&raw)
                .filter(|(candidate, _)| *candidate == name)
                .last()
                .map(|(_, value)| value);
            proptest::prop_assert_eq!(find_property(&raw, name), expected);
        }
    }

    #[test]
    fn one_scan_finds_what_find_property_finds() {
        let raw = "TAGS\u{1}a\u{2}KEYS\u{1}k1 k2\u{2}UNIQ_KEY\u{1}U\u{2}DELAY\u{1}\u{2}\
                   TAGS\u{1}b\u{2}POP_CK\u{1}x\u{2}CLUSTER\u{1}C\u{2}DELAY\u{1}3\u{2}\
                   MSG_REGION\u{1}R\u{2}TRACE_ON\u{1}false\u{2}";
        let found = SendProperties::scan(raw);
        for (name, value) in [
            (property::TAGS, found.tags),
            (property::KEYS, found.keys),
            (property::UNIQ_KEY, found.uniq_key),
            (property::CLUSTER, found.cluster),
            (property::DELAY, found.delay),
            (property::MSG_REGION, found.msg_region),
            (property::TRACE_SWITCH, found.trace_switch),
        ] {
            assert_eq!(value, find_property(raw, name), "{name}");
        }
        assert_eq!(found.tags, Some("b"));
        assert!(found.pop_ck);
        assert_eq!(SendProperties::scan(""), SendProperties::default());
    }

    #[test]
    fn with_property_replaces_and_without_property_removes() {
        let raw = "TAGS\u{1}a\u{2}DELAY\u{1}3\u{2}";
        assert_eq!(
            with_property(raw, "DELAY", "5"),
            "TAGS\u{1}a\u{2}DELAY\u{1}5\u{2}"
        );
        assert_eq!(without_property(raw, "DELAY"), "TAGS\u{1}a\u{2}");
        // Absent: the very bytes come back, junk included.
        let junk = "junk\u{2}TAGS\u{1}a\u{2}";
        assert_eq!(without_property(junk, "DELAY"), junk);
        assert_eq!(with_property("", "K", "v"), "K\u{1}v\u{2}");
    }

    #[test]
    fn push_property_closes_an_unterminated_last_pair() {
        let mut raw = String::from("A\u{1}1");
        push_property(&mut raw, "B", "2");
        assert_eq!(raw, "A\u{1}1\u{2}B\u{1}2\u{2}");
        assert_eq!(find_property(&raw, "A"), Some("1"));
        let mut empty = String::new();
        push_property(&mut empty, "B", "2");
        assert_eq!(empty, "B\u{1}2\u{2}");
    }
}
