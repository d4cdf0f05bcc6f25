//! Deleted topics: for each, the CommitLog position at which it was deleted.
//!
//! Deleting a topic removes its ConsumeQueues, but its records stay in the CommitLog until
//! retention takes their segments, as in RocketMQ. Those records must not come back: recovery
//! re-dispatches the records written after the checkpoint, and a topic created again under the
//! same name starts its queue offsets at 0, below the old records' offsets. So the store keeps,
//! per deleted topic, the position the log had reached when it was deleted; records of the
//! topic below it belong to the deleted topic and are neither re-dispatched nor found by key.
//!
//! The deletion commits with one rename: the topic's ConsumeQueue directory becomes
//! `<topic>.deleted-<position>` (a name no topic can have, as topics have no dots). The position
//! list is written next, then the directory is removed. A crash anywhere in between leaves the
//! renamed directory, from whose name recovery finishes the deletion.
//!
//! The list is text, one deletion per line, `<position> <topic>`, replaced atomically; a
//! deletion is dropped once retention has removed every segment below its position.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use crate::durable_file;

const TRASH_MARK: &str = ".deleted-";

/// Topic name -> the position at which it was last deleted.
pub type Deletions = BTreeMap<String, u64>;

/// The name a deleted topic's ConsumeQueue directory is renamed to.
pub fn trash_name(topic: &str, position: u64) -> String {
    format!("{topic}{TRASH_MARK}{position}")
}

/// The topic and position a `trash_name` holds.
pub fn parse_trash_name(name: &str) -> Option<(&str, u64)> {
    let (topic, position) = name.rsplit_once(TRASH_MARK)?;
    if topic.is_empty() || position.is_empty() || !position.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((topic, position.parse().ok()?))
}

/// Whether the record of `topic` at `position` was written before the topic was deleted.
pub fn is_deleted(deletions: &Deletions, topic: &str, position: u64) -> bool {
    deletions.get(topic).is_some_and(|&at| position < at)
}

/// Records a deletion; a later one of the same topic replaces an earlier one.
pub fn add(deletions: &mut Deletions, topic: &str, position: u64) {
    let at = deletions.entry(topic.to_string()).or_insert(position);
    *at = (*at).max(position);
}

/// Drops deletions whose records retention has removed: every position below them is gone.
pub fn prune(deletions: &mut Deletions, min_position: u64) {
    deletions.retain(|_, &mut at| at > min_position);
}

/// The list in the file (empty if there is no file). A line that is not a position and a
/// topic is reported in `problems` and ignored.
pub fn load(path: &Path, problems: &mut Vec<String>) -> io::Result<Deletions> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Deletions::new()),
        Err(e) => return Err(e),
    };
    let mut deletions = Deletions::new();
    for (number, line) in text.lines().enumerate() {
        let mut fields = line.split_whitespace();
        match (
            fields.next().map(str::parse::<u64>),
            fields.next(),
            fields.next(),
        ) {
            (Some(Ok(position)), Some(topic), None) => add(&mut deletions, topic, position),
            _ => problems.push(format!(
                "{}: line {} is not `<position> <topic>`, ignored: {line:?}",
                path.display(),
                number + 1
            )),
        }
    }
    Ok(deletions)
}

/// Replaces the file with `deletions`; removes it when there are none.
pub fn store(path: &Path, deletions: &Deletions) -> io::Result<()> {
    let text: String = deletions
        .iter()
        .map(|(topic, position)| format!("{position} {topic}\n"))
        .collect();
    durable_file::replace_or_remove_file(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trash_names_round_trip_and_cannot_be_topics() {
        let name = trash_name("%RETRY%group-a", 4096);
        assert_eq!(parse_trash_name(&name), Some(("%RETRY%group-a", 4096)));
        assert!(!super::super::valid_topic(&name));
        assert_eq!(parse_trash_name("TopicA"), None);
        assert_eq!(parse_trash_name(".deleted-12"), None);
        assert_eq!(parse_trash_name("TopicA.deleted-"), None);
        assert_eq!(parse_trash_name("TopicA.deleted-+1"), None);
    }

    #[test]
    fn round_trips_keeps_the_latest_and_prunes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("deletedTopics");
        let mut problems = Vec::new();
        assert!(load(&path, &mut problems).expect("load").is_empty());
        let mut deletions = Deletions::new();
        add(&mut deletions, "A", 100);
        add(&mut deletions, "A", 50);
        add(&mut deletions, "B", 7);
        store(&path, &deletions).expect("store");
        let loaded = load(&path, &mut problems).expect("load");
        assert_eq!(loaded, deletions);
        assert_eq!(loaded["A"], 100);
        assert!(is_deleted(&loaded, "A", 99));
        assert!(!is_deleted(&loaded, "A", 100));
        assert!(!is_deleted(&loaded, "C", 0));
        std::fs::write(&path, "5 A\nx B\n6\n7 C D\n").expect("write");
        assert_eq!(load(&path, &mut problems).expect("load").len(), 1);
        assert_eq!(problems.len(), 3, "{problems:?}");
        prune(&mut deletions, 7);
        assert_eq!(deletions.keys().collect::<Vec<_>>(), ["A"]);
        store(&path, &Deletions::new()).expect("store none");
        assert!(!path.exists());
    }
}
