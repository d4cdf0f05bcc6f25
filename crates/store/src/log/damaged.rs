//! The damaged-range list: CommitLog byte ranges that recovery found damaged and keeps out of
//! reads.
//!
//! Recovery finds damage while it scans, but the checkpoint it writes afterwards starts the next
//! scan past it; without this file the next open would forget the ranges and serve the
//! ConsumeQueue and index entries that point into them. Text, one range per line:
//! `<start> <end>` (absolute CommitLog positions, end exclusive), sorted and disjoint. Replaced
//! atomically, like the checkpoint, before the checkpoint that skips the damage is written.

use std::io;
use std::path::Path;

use crate::durable_file;

/// A CommitLog range found damaged at recovery: never served as records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadRange {
    pub start: u64,
    pub end: u64,
}

/// The ranges in the file (none if there is no file). A line that is not two positions with
/// start below end is reported in `problems` and ignored.
pub fn load(path: &Path, problems: &mut Vec<String>) -> io::Result<Vec<BadRange>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut ranges = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let mut fields = line.split_whitespace().map(str::parse::<u64>);
        match (fields.next(), fields.next(), fields.next()) {
            (Some(Ok(start)), Some(Ok(end)), None) if start < end => {
                ranges.push(BadRange { start, end })
            }
            _ => problems.push(format!(
                "{}: line {} is not `<start> <end>`, ignored: {line:?}",
                path.display(),
                number + 1
            )),
        }
    }
    Ok(ranges)
}

/// The ranges below `end`, each clipped to it: a truncation at `end` drops the log past it.
pub fn clip(mut ranges: Vec<BadRange>, end: u64) -> Vec<BadRange> {
    ranges.retain(|r| r.start < end);
    for range in &mut ranges {
        range.end = range.end.min(end);
    }
    ranges
}

/// Sorted, overlapping and touching ranges joined, and ranges wholly below `min_position`
/// (retention deleted their segments) dropped.
pub fn normalize(mut ranges: Vec<BadRange>, min_position: u64) -> Vec<BadRange> {
    ranges.retain(|r| r.end > min_position);
    ranges.sort_by_key(|r| r.start);
    let mut joined: Vec<BadRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match joined.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => joined.push(range),
        }
    }
    joined
}

/// Replaces the file with `ranges`; removes it when there are none.
pub fn store(path: &Path, ranges: &[BadRange]) -> io::Result<()> {
    let text: String = ranges
        .iter()
        .map(|r| format!("{} {}\n", r.start, r.end))
        .collect();
    durable_file::replace_or_remove_file(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: u64, end: u64) -> BadRange {
        BadRange { start, end }
    }

    #[test]
    fn round_trips_and_reports_bad_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("damaged");
        let mut problems = Vec::new();
        assert_eq!(load(&path, &mut problems).expect("load"), vec![]);
        store(&path, &[range(10, 20), range(4096, 8192)]).expect("store");
        assert_eq!(
            load(&path, &mut problems).expect("load"),
            vec![range(10, 20), range(4096, 8192)]
        );
        assert!(problems.is_empty());
        std::fs::write(&path, "10 20\nx y\n30 30\n1 2 3\n40 50\n").expect("write");
        assert_eq!(
            load(&path, &mut problems).expect("load"),
            vec![range(10, 20), range(40, 50)]
        );
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("line 2"), "{problems:?}");
        store(&path, &[]).expect("store none");
        assert!(!path.exists());
    }

    #[test]
    fn normalize_joins_and_drops_deleted() {
        let ranges = vec![
            range(50, 60),
            range(10, 20),
            range(15, 30),
            range(30, 40),
            range(1, 5),
        ];
        assert_eq!(normalize(ranges, 8), vec![range(10, 40), range(50, 60)]);
        assert_eq!(normalize(vec![range(1, 5)], 5), vec![]);
    }
}
