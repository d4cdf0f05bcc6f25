//! Which messages of a topic a subscription wants. A TAG subscription is judged by the tag code
//! in each ConsumeQueue entry, before any record is read. A SQL92 subscription (`sql/`) needs
//! the message's properties, which only the CommitLog record holds, so it is judged after the
//! read (`read_matching`); TAG subscriptions never parse a property.

pub mod sql;

use std::collections::HashSet;
use std::sync::Arc;

use quiver_record::RecordView;
use quiver_store::{QueueRead, ReadStatus};
use quiver_wire::message::tags_code;

pub use sql::{ParseError, Selector};

/// RocketMQ's expression types, spelled as it compares them (case-sensitive).
pub const TAG: &str = "TAG";
pub const SQL92: &str = "SQL92";

/// Queue entries one SQL92-filtered read looks at most: RocketMQ's per-pull filter scan
/// (16,000 bytes of ConsumeQueue, 800 entries), so a selective expression moves a consumer
/// as far per pull as it does there.
pub const SQL_SCAN_ENTRIES_MAX: u64 = 800;
/// Records asked of the queue per step of a SQL92-filtered read, when fewer are wanted: one
/// step per wanted message would cost a queue read per record on a selective expression.
const SQL_STEP_RECORDS_MIN: u32 = 32;

/// Which messages a TAG subscription wants, by tag hash as stored in the ConsumeQueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagFilter {
    All,
    Codes(HashSet<i64>),
}

impl TagFilter {
    /// Parses a TAG expression: `*` (or empty) for all, otherwise `TagA || TagB`.
    pub fn parse(expression: &str) -> TagFilter {
        let expression = expression.trim();
        if expression.is_empty() || expression == "*" {
            return TagFilter::All;
        }
        let codes = expression
            .split("||")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(tags_code)
            .collect();
        TagFilter::Codes(codes)
    }

    pub fn accepts(&self, code: i64) -> bool {
        match self {
            TagFilter::All => true,
            TagFilter::Codes(codes) => codes.contains(&code),
        }
    }
}

/// A subscription's filter, parsed once (at the heartbeat, or from the request).
#[derive(Debug, Clone)]
pub enum MessageFilter {
    Tags(TagFilter),
    Sql(Arc<Selector>),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("expression type {0:?} is not supported; use TAG or SQL92")]
    UnknownType(String),
    #[error(transparent)]
    Sql(#[from] ParseError),
}

impl MessageFilter {
    /// No type, an empty one or `TAG` is a tag expression, as RocketMQ's `isTagType`.
    pub fn parse(expression_type: Option<&str>, expression: &str) -> Result<Self, FilterError> {
        match expression_type.unwrap_or("") {
            "" | TAG => Ok(MessageFilter::Tags(TagFilter::parse(expression))),
            SQL92 => Ok(MessageFilter::Sql(Arc::new(Selector::parse(expression)?))),
            other => Err(FilterError::UnknownType(other.to_string())),
        }
    }

    /// Whether `expression_type` names a tag expression (no type, empty, or `TAG`).
    pub fn is_tag_type(expression_type: Option<&str>) -> bool {
        matches!(expression_type.unwrap_or(""), "" | TAG)
    }

    pub fn is_sql(&self) -> bool {
        matches!(self, MessageFilter::Sql(_))
    }

    /// The ConsumeQueue test: a SQL92 filter takes every entry and judges the record.
    pub fn accepts_code(&self, code: i64) -> bool {
        match self {
            MessageFilter::Tags(tags) => tags.accepts(code),
            MessageFilter::Sql(_) => true,
        }
    }

    /// The record test: a TAG filter passed it at the ConsumeQueue. A record whose layout does
    /// not parse is not selected.
    pub fn accepts_record(&self, record: &[u8]) -> bool {
        let MessageFilter::Sql(selector) = self else {
            return true;
        };
        let Ok(view) = RecordView::parse(record) else {
            return false;
        };
        selector.matches(&|name| view.property(name).map(String::from_utf8_lossy))
    }
}

/// Reads up to `max_messages` records (`max_bytes` in all, at least one) from `offset` that
/// `filter` selects, through `read(offset, max_messages, max_bytes)`, a queue read that has
/// already applied `accepts_code`. A TAG filter reads once, as it always did. A SQL92 filter
/// keeps the selected records of each read and reads on until it has enough, reaches the
/// queue's end, or has looked at `SQL_SCAN_ENTRIES_MAX` entries; the answer's next offset is
/// past every record it refused, so the consumer moves past them, and NoMatchedMessage when
/// none was selected (RocketMQ's PULL_RETRY_IMMEDIATELY).
pub fn read_matching<E>(
    filter: &MessageFilter,
    offset: u64,
    max_messages: u32,
    max_bytes: u32,
    mut read: impl FnMut(u64, u32, u32) -> Result<QueueRead, E>,
) -> Result<QueueRead, E> {
    if !filter.is_sql() {
        return read(offset, max_messages, max_bytes);
    }
    let max_messages = max_messages.max(1);
    let first = read(offset, max_messages.max(SQL_STEP_RECORDS_MIN), max_bytes)?;
    if first.status != ReadStatus::Found {
        return Ok(first);
    }
    let mut kept = QueueRead::empty(
        ReadStatus::NoMatchedMessage,
        offset,
        first.min_offset,
        first.max_offset,
    );
    let mut chunk = Some(first);
    while let Some(read_now) = chunk.take() {
        kept.min_offset = read_now.min_offset;
        kept.max_offset = read_now.max_offset;
        match read_now.status {
            ReadStatus::Found | ReadStatus::NoMatchedMessage => {}
            // The queue's end (or a bound that moved): what was kept stands.
            _ => break,
        }
        kept.next_offset = read_now.next_offset;
        if let Some(stop_at) =
            keep_selected(filter, &read_now.bytes, &mut kept, max_messages, max_bytes)
        {
            kept.next_offset = stop_at;
            break;
        }
        if read_now.damage.is_some() {
            kept.damage = read_now.damage;
            break;
        }
        let scanned = kept.next_offset.saturating_sub(offset);
        let room = max_bytes.saturating_sub(kept.bytes.len() as u32);
        let wanted = max_messages - kept.message_count;
        if wanted == 0
            || room == 0
            || scanned >= SQL_SCAN_ENTRIES_MAX
            || kept.next_offset >= kept.max_offset
        {
            break;
        }
        let step = u64::from(wanted.max(SQL_STEP_RECORDS_MIN)).min(SQL_SCAN_ENTRIES_MAX - scanned);
        chunk = Some(read(kept.next_offset, step as u32, room)?);
    }
    if kept.message_count > 0 {
        kept.status = ReadStatus::Found;
    }
    Ok(kept)
}

/// Appends the records of `bytes` that `filter` selects to `kept`. When `kept` is full (by
/// count, or by bytes once it holds one), returns the queue offset of the first selected
/// record left out, where the next read starts.
fn keep_selected(
    filter: &MessageFilter,
    mut bytes: &[u8],
    kept: &mut QueueRead,
    max_messages: u32,
    max_bytes: u32,
) -> Option<u64> {
    while let Some(size) = quiver_record::read_i32(bytes, quiver_record::TOTAL_SIZE_AT)
        .and_then(|size| usize::try_from(size).ok())
        .filter(|size| *size > 0 && *size <= bytes.len())
    {
        let (record, rest) = bytes.split_at(size);
        bytes = rest;
        if !filter.accepts_record(record) {
            continue;
        }
        let full = kept.message_count >= max_messages
            || (kept.message_count > 0 && kept.bytes.len() + size > max_bytes as usize);
        if full {
            let queue_offset = quiver_record::read_i64(record, quiver_record::QUEUE_OFFSET_AT)?;
            return Some(queue_offset.max(0) as u64);
        }
        kept.bytes.extend_from_slice(record);
        kept.message_count += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_record::{encode_properties, StoredMessage};

    #[test]
    fn tag_filters_match_by_java_hash() {
        let filter = TagFilter::parse("TagA || TagB");
        assert!(filter.accepts(tags_code("TagA")));
        assert!(filter.accepts(tags_code("TagB")));
        assert!(!filter.accepts(tags_code("TagC")));
        assert!(TagFilter::parse(" * ").accepts(12345));
    }

    #[test]
    fn expression_types_are_rocketmqs_and_case_sensitive() {
        assert!(!MessageFilter::parse(None, "*").unwrap().is_sql());
        assert!(!MessageFilter::parse(Some(""), "A").unwrap().is_sql());
        assert!(MessageFilter::parse(Some("SQL92"), "TRUE")
            .unwrap()
            .is_sql());
        assert_eq!(
            MessageFilter::parse(Some("sql92"), "TRUE").unwrap_err(),
            FilterError::UnknownType("sql92".into())
        );
    }

    /// A queue of `count` records whose property `a` is its offset, read as the store reads.
    struct Queue {
        records: Vec<Vec<u8>>,
        reads: u32,
    }

    impl Queue {
        fn new(count: u64) -> Queue {
            let records = (0..count)
                .map(|offset| {
                    let value = offset.to_string();
                    let message = StoredMessage {
                        queue_id: 0,
                        flag: 0,
                        queue_offset: offset as i64,
                        physical_offset: 0,
                        sys_flag: 0,
                        born_timestamp: 0,
                        born_host: "127.0.0.1:1".parse().unwrap(),
                        store_timestamp: 0,
                        store_host: "127.0.0.1:2".parse().unwrap(),
                        reconsume_times: 0,
                        prepared_transaction_offset: 0,
                        body: bytes::Bytes::from_static(b"x"),
                        topic: "T".into(),
                        properties: encode_properties([("a", value.as_str())]),
                    };
                    let mut bytes = Vec::new();
                    message.encode(&mut bytes).unwrap();
                    bytes
                })
                .collect();
            Queue { records, reads: 0 }
        }

        fn read(&mut self, offset: u64, max_messages: u32, _max_bytes: u32) -> QueueRead {
            self.reads += 1;
            let end = (offset + u64::from(max_messages)).min(self.records.len() as u64);
            let bytes: Vec<u8> = self.records[offset as usize..end as usize].concat();
            QueueRead {
                status: if end > offset {
                    ReadStatus::Found
                } else {
                    ReadStatus::OffsetOverflowOne
                },
                bytes,
                files: Vec::new(),
                message_count: (end - offset) as u32,
                end_position: None,
                next_offset: end,
                min_offset: 0,
                max_offset: self.records.len() as u64,
                damage: None,
            }
        }
    }

    fn sql(expression: &str) -> MessageFilter {
        MessageFilter::parse(Some(SQL92), expression).unwrap()
    }

    fn read(queue: &mut Queue, filter: &MessageFilter, offset: u64, max: u32) -> QueueRead {
        read_matching::<()>(filter, offset, max, 1 << 20, |from, count, bytes| {
            Ok(queue.read(from, count, bytes))
        })
        .unwrap()
    }

    #[test]
    fn a_selective_expression_reads_on_but_no_further_than_the_scan_limit() {
        let mut queue = Queue::new(2_000);
        let found = read(&mut queue, &sql("a = 1500"), 0, 32);
        assert_eq!(found.status, ReadStatus::NoMatchedMessage);
        assert_eq!(found.next_offset, SQL_SCAN_ENTRIES_MAX);
        assert_eq!(queue.reads, 25, "800 entries, 32 at a time");
        let found = read(&mut queue, &sql("a = 1500"), 800, 32);
        assert_eq!(found.status, ReadStatus::Found);
        assert_eq!(found.message_count, 1);
        assert_eq!(found.next_offset, 1_600);
    }

    #[test]
    fn a_full_read_resumes_at_the_first_selected_record_left_out() {
        let mut queue = Queue::new(100);
        let found = read(&mut queue, &sql("a >= 10 AND a < 20"), 0, 3);
        assert_eq!(found.message_count, 3);
        assert_eq!(found.next_offset, 13);
        let rest = read(&mut queue, &sql("a >= 10 AND a < 20"), 13, 32);
        assert_eq!(rest.message_count, 7);
        assert_eq!(rest.next_offset, 100);
    }

    #[test]
    fn a_tag_filter_reads_once_as_asked() {
        let mut queue = Queue::new(100);
        let all = MessageFilter::Tags(TagFilter::All);
        let found = read(&mut queue, &all, 0, 5);
        assert_eq!((found.message_count, queue.reads), (5, 1));
    }
}
