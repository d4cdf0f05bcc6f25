//! The topics this broker serves: names, queue counts, permissions. Persisted as
//! `config/topics.json` in RocketMQ's shape (`topicConfigTable`, `dataVersion`).
//!
//! A change is made in memory and counted in the data version; the file is written later, in
//! batches, by whoever calls `persist_through` or `persist_if_dirty` off the runtime's workers
//! (the broker's housekeeping every 100 ms, an admin request that answers only once its change
//! is durable, shutdown). A change never waits for a disk under the table's lock: creating
//! thousands of topics at once costs a few writes, not one each.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use quiver_store::durable_file::SnapshotFile;
use quiver_store::MemoryTopics;

use quiver_wire::body::{self, DataVersion, TopicConfig, TopicConfigSerializeWrapper};
use serde::{Deserialize, Serialize};

pub const PERM_INHERIT: i32 = 1;
pub const PERM_WRITE: i32 = 2;
pub const PERM_READ: i32 = 4;

/// The template producers fall back to for topics that do not exist yet.
pub const AUTO_CREATE_TOPIC: &str = "TBW102";
/// The official benchmark's default topic. Java brokers pre-create it with 1024 queues; we use
/// 8, as the seeds' 8-queue scenarios do, so a benchmark consumer runs 8 pull loops, not 1024.
pub const BENCHMARK_TOPIC: &str = "BenchmarkTest";
pub const BENCHMARK_TOPIC_QUEUES: i32 = 8;
/// Where clients with message trace on send their trace records (`msgTraceTopicName`'s
/// default).
pub const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";
/// A cluster's replies (request-reply) go to `<cluster>_REPLY_TOPIC`.
const REPLY_TOPIC_SUFFIX: &str = "_REPLY_TOPIC";

/// The topic the Java client sends a cluster's replies to: the broker creates it at start.
pub fn reply_topic(cluster_name: &str) -> String {
    format!("{cluster_name}{REPLY_TOPIC_SUFFIX}")
}
/// Topics only the broker itself writes: a client's send to one is refused with NO_PERMISSION,
/// as RocketMQ's TopicValidator does (a message sent straight to the schedule topic would be
/// acknowledged and then have no real topic to go to).
pub const NOT_ALLOWED_SEND_TOPICS: &[&str] = &[
    "SCHEDULE_TOPIC_XXXX",
    "SCHEDULE_TOPIC_XXXX_V2",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC",
    "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC",
];
/// RocketMQ 5.5.0's system topics (TopicValidator's set): UPDATE_AND_CREATE_TOPIC refuses
/// them, so a client cannot reshape a topic the broker relies on. The cluster's and the
/// broker's own names, the cluster's reply topic, and every name starting with `rmq_sys_`,
/// count as well.
const SYSTEM_TOPICS: &[&str] = &[
    AUTO_CREATE_TOPIC,
    "SCHEDULE_TOPIC_XXXX",
    BENCHMARK_TOPIC,
    "RMQ_SYS_TRANS_HALF_TOPIC",
    TRACE_TOPIC,
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
    "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC",
    "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC",
];
const SYSTEM_TOPIC_PREFIX: &str = "rmq_sys_";

/// True for a name RocketMQ reserves (see `SYSTEM_TOPICS`) on a broker of this cluster.
pub fn is_system_topic(name: &str, cluster_name: &str, broker_name: &str) -> bool {
    SYSTEM_TOPICS.contains(&name)
        || name.starts_with(SYSTEM_TOPIC_PREFIX)
        || name == cluster_name
        || name == broker_name
        || name
            .strip_prefix(cluster_name)
            .is_some_and(|rest| rest == REPLY_TOPIC_SUFFIX)
}
pub const RETRY_PREFIX: &str = "%RETRY%";
pub const DLQ_PREFIX: &str = "%DLQ%";
const TOPIC_BYTES_MAX: usize = 127;
const SYSTEM_TOPIC_BYTES_MAX: usize = 255;

/// Queue counts, permission and persistence of a topic: all a send or pull needs, cheap to
/// copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicShape {
    pub read_queues: i32,
    pub write_queues: i32,
    pub perm: i32,
    /// Non-persistent (`persistence=memory`): its queues are rings the store keeps in memory.
    pub memory: bool,
}

/// The topic attribute that makes a topic non-persistent (`mqadmin updateTopic -a
/// +persistence=memory`), and its values: its queues are then rings in memory, kept by the
/// store, never written to the CommitLog.
pub const PERSISTENCE_ATTRIBUTE: &str = "persistence";
pub const PERSISTENCE_MEMORY: &str = "memory";
/// The default: stored in the CommitLog.
pub const PERSISTENCE_DISK: &str = "disk";

/// Whether a topic's attributes make it non-persistent.
pub fn is_memory_topic(config: &TopicConfig) -> bool {
    config
        .attributes
        .get(PERSISTENCE_ATTRIBUTE)
        .is_some_and(|value| value == PERSISTENCE_MEMORY)
}

#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("topic name {name:?} is invalid: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("the specified group[{name}] is invalid: {reason}")]
    InvalidGroupName { name: String, reason: &'static str },
    #[error("topic {name} cannot be created: the broker holds {held} topics, its most")]
    TooMany {
        name: String,
        held: usize,
        max: usize,
    },
    #[error("could not persist topics to {path}: {message}")]
    Persist { path: String, message: String },
    #[error("cannot read topics: {0}")]
    Load(String),
}

/// Checks a topic name as RocketMQ does: `[%|a-zA-Z0-9_-]`, at most 127 bytes (255 for retry
/// and dead-letter topics, whose names embed a group).
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    let invalid = |reason| {
        Err(TopicError::InvalidName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return invalid("it is empty");
    }
    let limit = if name.starts_with(RETRY_PREFIX) || name.starts_with(DLQ_PREFIX) {
        SYSTEM_TOPIC_BYTES_MAX
    } else {
        TOPIC_BYTES_MAX
    };
    if name.len() > limit {
        return invalid("it is longer than 127 characters");
    }
    if !name.bytes().all(is_name_byte) {
        return invalid("only letters, digits and %|_- are allowed");
    }
    Ok(())
}

/// RocketMQ's character set for topic and group names, `[%|a-zA-Z0-9_-]`.
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-')
}

/// RocketMQ's limit on group names (Validators.CHARACTER_MAX_LENGTH).
const GROUP_BYTES_MAX: usize = 255;

/// Checks a consumer group name as RocketMQ does: the topic character set `[%|a-zA-Z0-9_-]`
/// (a group also names its `%RETRY%` and `%DLQ%` topics), at most 255 bytes.
pub fn validate_group_name(name: &str) -> Result<(), TopicError> {
    let invalid = |reason| {
        Err(TopicError::InvalidGroupName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return invalid("it is blank");
    }
    if name.len() > GROUP_BYTES_MAX {
        return invalid("it is longer than 255 characters");
    }
    if !name.bytes().all(is_name_byte) {
        return invalid("it contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$");
    }
    Ok(())
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct TopicsFile {
    topic_config_table: BTreeMap<String, TopicConfig>,
    data_version: DataVersion,
}

/// What `TopicTable::replace_from_master` did, by topic name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TopicsReplaced {
    pub added: Vec<String>,
    pub updated: Vec<String>,
    pub removed: Vec<String>,
    /// Names in the master's table that are not valid topic names.
    pub skipped: Vec<String>,
}

impl TopicsReplaced {
    pub fn changed(&self) -> bool {
        !(self.added.is_empty() && self.updated.is_empty() && self.removed.is_empty())
    }
}

pub struct TopicTable {
    file: SnapshotFile,
    inner: RwLock<TopicsFile>,
    /// The store's list of topics kept in memory, kept in step with each topic's
    /// `persistence` attribute under the table's lock: the store then routes every append,
    /// read and bound of such a topic to its rings, whoever asks.
    memory_topics: Arc<MemoryTopics>,
    /// The data version's counter the file holds (see `persist_through`).
    persisted: AtomicU64,
    /// How many times the file was written, for runtime info.
    writes: AtomicU64,
    /// The most topics a create may bring the table to (`quiverTopicsMax`); start-up's own
    /// topics are made before it is set.
    topics_max: AtomicUsize,
}

pub fn topic_config(name: &str, queues: i32, perm: i32) -> TopicConfig {
    TopicConfig {
        topic_name: name.to_string(),
        read_queue_nums: queues,
        write_queue_nums: queues,
        perm,
        topic_filter_type: "SINGLE_TAG".into(),
        ..TopicConfig::default()
    }
}

impl TopicTable {
    /// Loads `path` if present and adds the system topics that are missing.
    /// TBW102, the template of topics created on first send, has `default_queues` queues
    /// (`defaultTopicQueueNums`), also when an earlier start made it with another count.
    pub fn open(
        path: PathBuf,
        auto_create_topic: bool,
        default_queues: i32,
        memory_topics: Arc<MemoryTopics>,
        now_ms: i64,
    ) -> Result<TopicTable, TopicError> {
        let snapshot = SnapshotFile::new(path);
        let mut file = snapshot
            .load(body::from_json::<TopicsFile>)
            .map_err(TopicError::Load)?;
        if file.data_version.timestamp == 0 {
            file.data_version.timestamp = now_ms;
        }
        for (name, config) in &file.topic_config_table {
            memory_topics.set(name, is_memory_topic(config));
        }
        let persisted = AtomicU64::new(version_of(&file.data_version));
        let table = TopicTable {
            file: snapshot,
            inner: RwLock::new(file),
            memory_topics,
            persisted,
            writes: AtomicU64::new(0),
            topics_max: AtomicUsize::new(usize::MAX),
        };
        if auto_create_topic {
            let template = topic_config(
                AUTO_CREATE_TOPIC,
                default_queues,
                PERM_INHERIT | PERM_READ | PERM_WRITE,
            );
            let follows = table.shape(AUTO_CREATE_TOPIC).is_some_and(|shape| {
                shape.write_queues == default_queues && shape.read_queues == default_queues
            });
            if !follows {
                table.upsert(template)?;
            }
        }
        table.create_if_absent(topic_config(
            BENCHMARK_TOPIC,
            BENCHMARK_TOPIC_QUEUES,
            PERM_READ | PERM_WRITE,
        ))?;
        Ok(table)
    }

    pub fn shape(&self, topic: &str) -> Option<TopicShape> {
        let inner = self.inner.read().expect("topic table lock poisoned");
        inner
            .topic_config_table
            .get(topic)
            .map(|config| TopicShape {
                read_queues: config.read_queue_nums,
                write_queues: config.write_queue_nums,
                perm: config.perm,
                memory: is_memory_topic(config),
            })
    }

    pub fn get(&self, topic: &str) -> Option<TopicConfig> {
        self.inner
            .read()
            .expect("topic table lock poisoned")
            .topic_config_table
            .get(topic)
            .cloned()
    }

    /// Creates the topic unless it exists. Returns true when it was created.
    pub fn create_if_absent(&self, config: TopicConfig) -> Result<bool, TopicError> {
        self.store(config, |existing, _| existing.is_none())
    }

    /// Creates or replaces a topic. Returns true when anything changed.
    pub fn upsert(&self, config: TopicConfig) -> Result<bool, TopicError> {
        self.store(config, |existing, new| existing != Some(new))
    }

    /// Inserts `config` when `should(existing, new)` says so, then persists the table.
    fn store(
        &self,
        config: TopicConfig,
        should: impl FnOnce(Option<&TopicConfig>, &TopicConfig) -> bool,
    ) -> Result<bool, TopicError> {
        validate_topic_name(&config.topic_name)?;
        {
            let mut inner = self.inner.write().expect("topic table lock poisoned");
            let existing = inner.topic_config_table.get(&config.topic_name);
            if !should(existing, &config) {
                return Ok(false);
            }
            let held = inner.topic_config_table.len();
            let max = self.topics_max.load(Ordering::Relaxed);
            if existing.is_none() && held >= max {
                return Err(TopicError::TooMany {
                    name: config.topic_name,
                    held,
                    max,
                });
            }
            self.memory_topics
                .set(&config.topic_name, is_memory_topic(&config));
            inner
                .topic_config_table
                .insert(config.topic_name.clone(), config);
            inner.data_version.counter += 1;
        }
        Ok(true)
    }

    /// Removes a topic (the file follows, see the module's comment). Returns whether it
    /// existed.
    pub fn remove(&self, topic: &str) -> Result<bool, TopicError> {
        {
            let mut inner = self.inner.write().expect("topic table lock poisoned");
            if inner.topic_config_table.remove(topic).is_none() {
                return Ok(false);
            }
            self.memory_topics.set(topic, false);
            inner.data_version.counter += 1;
        }
        Ok(true)
    }

    /// Makes the table the master's `incoming` one (on a slave): its topics are added or
    /// replaced and the others removed, except that topics `keep_own` picks stay as this
    /// broker has them (its own system topics, shaped by its own configuration). Names that
    /// are not valid topic names are skipped: the table is peer input. Bumps the data version
    /// only when something changed, so the name servers see a new version then.
    pub fn replace_from_master(
        &self,
        incoming: BTreeMap<String, TopicConfig>,
        keep_own: impl Fn(&str) -> bool,
    ) -> Result<TopicsReplaced, TopicError> {
        let mut replaced = TopicsReplaced::default();
        {
            let mut inner = self.inner.write().expect("topic table lock poisoned");
            let current = &inner.topic_config_table;
            let mut next = BTreeMap::new();
            for (name, mut config) in incoming {
                if validate_topic_name(&name).is_err() {
                    replaced.skipped.push(name);
                    continue;
                }
                if keep_own(&name) && current.contains_key(&name) {
                    continue;
                }
                config.topic_name = name.clone();
                next.insert(name, config);
            }
            for (name, config) in current {
                if keep_own(name) {
                    next.insert(name.clone(), config.clone());
                }
            }
            for (name, config) in &next {
                match current.get(name) {
                    None => replaced.added.push(name.clone()),
                    Some(old) if old != config => replaced.updated.push(name.clone()),
                    Some(_) => {}
                }
            }
            replaced.removed = current
                .keys()
                .filter(|name| !next.contains_key(*name))
                .cloned()
                .collect();
            if !replaced.changed() {
                return Ok(replaced);
            }
            for name in &replaced.removed {
                self.memory_topics.set(name, false);
            }
            for (name, config) in &next {
                self.memory_topics.set(name, is_memory_topic(config));
            }
            inner.topic_config_table = next;
            inner.data_version.counter += 1;
        }
        Ok(replaced)
    }

    pub fn snapshot(&self) -> TopicConfigSerializeWrapper {
        let inner = self.inner.read().expect("topic table lock poisoned");
        TopicConfigSerializeWrapper {
            topic_config_table: inner.topic_config_table.clone(),
            data_version: inner.data_version.clone(),
        }
    }

    pub fn names(&self) -> Vec<String> {
        self.inner
            .read()
            .expect("topic table lock poisoned")
            .topic_config_table
            .keys()
            .cloned()
            .collect()
    }

    /// Sets the most topics a create may bring the table to (`quiverTopicsMax`). Topics already
    /// there stay, however many they are.
    pub fn set_topics_max(&self, max: usize) {
        self.topics_max.store(max, Ordering::Relaxed);
    }

    /// How many topics the table holds.
    pub fn count(&self) -> usize {
        self.inner
            .read()
            .expect("topic table lock poisoned")
            .topic_config_table
            .len()
    }

    /// The table's version now: `persist_through` it to make every change so far durable.
    pub fn version(&self) -> u64 {
        version_of(
            &self
                .inner
                .read()
                .expect("topic table lock poisoned")
                .data_version,
        )
    }

    /// Whether a change is not in the file yet.
    pub fn is_dirty(&self) -> bool {
        self.persisted.load(Ordering::Acquire) < self.version()
    }

    /// How many times the file was written since the table was opened.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Writes the table unless the file already holds `version` or a later one. Blocking (two
    /// fsyncs and a rename): never on an async runtime's worker. Callers that come while a
    /// write is under way wait for it and then mostly find their change written by it, so
    /// concurrent callers share writes.
    pub fn persist_through(&self, version: u64) -> Result<(), TopicError> {
        let mut written = None;
        let result = self.file.write(|| {
            if self.persisted.load(Ordering::Acquire) >= version {
                return None;
            }
            let inner = self.inner.read().expect("topic table lock poisoned");
            written = Some(version_of(&inner.data_version));
            Some(body::to_json(&*inner))
        });
        result.map_err(|e| TopicError::Persist {
            path: self.file.path().display().to_string(),
            message: e.to_string(),
        })?;
        if let Some(version) = written {
            self.persisted.fetch_max(version, Ordering::AcqRel);
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Writes the table if it changed since the file was written. Blocking, as
    /// `persist_through`.
    pub fn persist_if_dirty(&self) -> Result<(), TopicError> {
        self.persist_through(self.version())
    }
}

/// A data version's counter as the persisted mark compares it (it only grows).
fn version_of(version: &DataVersion) -> u64 {
    version.counter.max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_follow_rocketmq_rules() {
        assert!(validate_group_name("please_rename_unique_group_name_4").is_ok());
        assert!(validate_group_name("CID|a%b-c").is_ok());
        assert!(validate_group_name(&"g".repeat(255)).is_ok());
        for bad in ["", "has space", "dots.not.allowed", "slash/group", "ü"] {
            let error = validate_group_name(bad).expect_err(bad).to_string();
            assert!(error.contains("the specified group["), "{error}");
        }
        let error = validate_group_name(&"g".repeat(256))
            .unwrap_err()
            .to_string();
        assert!(error.contains("longer than 255"), "{error}");
    }

    #[test]
    fn topic_names_follow_rocketmq_rules() {
        assert!(validate_topic_name("Order_Topic-1").is_ok());
        assert!(validate_topic_name("%RETRY%group").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("has space").is_err());
        assert!(validate_topic_name(&"x".repeat(128)).is_err());
        assert!(validate_topic_name(&format!("%RETRY%{}", "g".repeat(200))).is_ok());
    }

    /// Each thread makes its creations durable as an admin request does: writes are shared,
    /// and what one thread waited for is on disk however the writes interleaved.
    #[test]
    fn topics_created_at_once_from_many_threads_all_reach_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config/topics.json");
        let table = std::sync::Arc::new(
            TopicTable::open(path.clone(), true, 8, Arc::default(), 1).expect("open"),
        );
        let threads: Vec<_> = (0..8)
            .map(|thread| {
                let table = table.clone();
                std::thread::spawn(move || {
                    for i in 0..25 {
                        let name = format!("T{thread}-{i}-{}", "x".repeat(i * 4));
                        table
                            .create_if_absent(topic_config(&name, 4, 6))
                            .expect("create");
                        table.persist_through(table.version()).expect("persist");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        assert!(!table.is_dirty());
        assert!(table.writes() <= 200, "{} writes", table.writes());
        let reopened =
            TopicTable::open(path, true, 8, Arc::default(), 2).expect("the file is whole");
        for thread in 0..8 {
            for i in 0..25 {
                let name = format!("T{thread}-{i}-{}", "x".repeat(i * 4));
                assert!(reopened.shape(&name).is_some(), "{name} on disk");
            }
        }
    }

    #[test]
    fn topics_survive_reopen_and_system_topics_exist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config/topics.json");
        let table = TopicTable::open(path.clone(), true, 8, Arc::default(), 1).expect("open");
        assert_eq!(table.shape(AUTO_CREATE_TOPIC).map(|s| s.perm), Some(7));
        assert!(table
            .create_if_absent(topic_config("T", 16, 6))
            .expect("create"));
        assert!(!table
            .create_if_absent(topic_config("T", 4, 6))
            .expect("exists"));
        table.persist_if_dirty().expect("persist");
        drop(table);
        let table = TopicTable::open(path, true, 8, Arc::default(), 2).expect("reopen");
        assert_eq!(
            table.shape("T"),
            Some(TopicShape {
                read_queues: 16,
                write_queues: 16,
                perm: 6,
                memory: false,
            })
        );
        assert_eq!(
            table.shape(BENCHMARK_TOPIC).map(|s| s.write_queues),
            Some(BENCHMARK_TOPIC_QUEUES)
        );
        assert_eq!(
            table.shape(AUTO_CREATE_TOPIC).map(|s| s.write_queues),
            Some(8)
        );
    }

    #[test]
    fn changes_wait_in_memory_until_a_write_takes_them_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config/topics.json");
        let table = TopicTable::open(path.clone(), true, 8, Arc::default(), 1).expect("open");
        table.persist_if_dirty().expect("persist");
        let writes = table.writes();
        for i in 0..500 {
            table
                .create_if_absent(topic_config(&format!("T{i}"), 1, 6))
                .expect("create");
        }
        assert!(table.remove("T7").expect("remove"));
        assert!(table.is_dirty());
        assert_eq!(table.writes(), writes, "no change wrote the file");
        let version = table.version();
        table.persist_through(version).expect("persist");
        table
            .persist_through(version)
            .expect("again: nothing to write");
        assert_eq!(table.writes(), writes + 1);
        let reopened = TopicTable::open(path, true, 8, Arc::default(), 2).expect("reopen");
        assert!(reopened.shape("T499").is_some());
        assert!(reopened.shape("T7").is_none());
        assert!(!reopened.is_dirty());
    }

    #[test]
    fn creations_past_the_limit_are_refused_and_the_topics_there_stay() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config/topics.json");
        let table = TopicTable::open(path, true, 8, Arc::default(), 1).expect("open");
        let held = table.count();
        table.set_topics_max(held + 1);
        assert!(table
            .create_if_absent(topic_config("A", 1, 6))
            .expect("room"));
        let refused = table.create_if_absent(topic_config("B", 1, 6));
        assert!(
            matches!(refused, Err(TopicError::TooMany { held: h, max: m, .. }) if h == held + 1 && m == held + 1),
            "{refused:?}"
        );
        assert!(table.upsert(topic_config("A", 4, 6)).expect("an update"));
        assert!(table.remove("A").expect("remove"));
        assert!(table
            .create_if_absent(topic_config("B", 1, 6))
            .expect("room again"));
    }

    #[test]
    fn the_auto_create_template_follows_default_topic_queue_nums() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config/topics.json");
        let table = TopicTable::open(path.clone(), true, 8, Arc::default(), 1).expect("open");
        table.persist_if_dirty().expect("persist");
        drop(table);
        let table = TopicTable::open(path, true, 3, Arc::default(), 2).expect("reopen");
        let shape = table.shape(AUTO_CREATE_TOPIC).expect("TBW102");
        assert_eq!((shape.read_queues, shape.write_queues), (3, 3));
    }
}
