//! Every `broker.conf` key Quiver acts on, written once: its RocketMQ name, the default it
//! prints, how a value is read into `BrokerConfig`, how it is printed back, and a line of
//! documentation. `properties.rs` reads and prints broker.conf through `KEYS` alone, and
//! `docs/configuration.md` is rendered from it: `document.rs` holds the renderer and the test
//! that compares it with the file; after changing a key, regenerate the file with
//! `QUIVER_WRITE_DOCS=1 cargo test -p quiver-broker --lib config::document`.
//!
//! `KEYS` is in the order GET_BROKER_CONFIG prints (`mqadmin getBrokerConfig`); the document
//! orders them by `Group`.

use quiver_store::{FlushMode, StoreConfig};

use super::field::Field;
use super::{BrokerConfig, BrokerRole, ConfigError, LiveKey};

// `group`, `default`, `follows` and `doc` are read by the document and the tests, which only
// tests build.
#[cfg_attr(not(test), allow(dead_code))]
pub(super) struct Key {
    /// RocketMQ's name, as broker.conf spells it and GET_BROKER_CONFIG prints it.
    pub(super) name: &'static str,
    /// Other spellings read as this key: RocketMQ 4 wrote `maped` for `mapped`.
    pub(super) aliases: &'static [&'static str],
    pub(super) group: Group,
    /// What a default configuration prints, bound to its default `listenPort`; a test holds
    /// it to `print`.
    pub(super) default: &'static str,
    /// For a key that, left unset, follows another: what it follows, for the document. Its
    /// printed value is the one in effect, so reading the printed line back sets the key.
    pub(super) follows: Option<&'static str>,
    pub(super) doc: &'static str,
    /// A key `mqadmin updateBrokerConfig` changes while the broker runs; the others are read
    /// only at start.
    pub(super) live: Option<LiveKey>,
    pub(super) read: fn(&mut Reading<'_>, &Field<'_>) -> Result<(), ConfigError>,
    pub(super) print: fn(&Printing<'_>) -> String,
}

/// The names of the keys that change while the broker runs.
pub(super) fn live_names() -> impl Iterator<Item = &'static str> {
    KEYS.iter()
        .filter(|key| key.live.is_some())
        .map(|key| key.name)
}

/// The key spelled `name`, under its own name or an alias.
pub(super) fn find(name: &str) -> Option<&'static Key> {
    KEYS.iter()
        .find(|key| key.name == name || key.aliases.contains(&name))
}

/// A broker.conf being applied. RocketMQ spreads the flush over four keys whose meaning
/// depends on `flushDiskType` (an interval means nothing to SYNC_FLUSH), so they are gathered
/// in `flush` and made one `FlushMode` by `finish`, whatever order the file gives them in.
pub(super) struct Reading<'a> {
    pub(super) config: &'a mut BrokerConfig,
    pub(super) flush: FlushKeys,
}

impl<'a> Reading<'a> {
    pub(super) fn of(config: &'a mut BrokerConfig) -> Self {
        let flush = FlushKeys::of(config.flush);
        Reading { config, flush }
    }

    /// The file is read: the flush keys become the configuration's flush mode.
    pub(super) fn finish(self) {
        self.config.flush = self.flush.mode();
    }
}

/// A configuration as it is printed: with the port bound (which differs from `listenPort=0`),
/// the store paths in effect (defaults included) and the four flush keys.
pub(super) struct Printing<'a> {
    pub(super) config: &'a BrokerConfig,
    pub(super) listen_port: u16,
    pub(super) store: StoreConfig,
    pub(super) flush: FlushKeys,
}

impl<'a> Printing<'a> {
    pub(super) fn of(config: &'a BrokerConfig, listen_port: u16) -> Self {
        Printing {
            config,
            listen_port,
            store: config.store_config(),
            flush: FlushKeys::of(config.flush),
        }
    }

    fn path(path: &std::path::Path) -> String {
        path.display().to_string()
    }
}

/// RocketMQ's defaults for the keys of the flush mode not in effect: printed so that a
/// printed file says what switching the mode alone would give, and reads back the same.
const FLUSH_INTERVAL_MS_DEFAULT: u64 = 500;
const FLUSH_LEAST_PAGES_DEFAULT: u32 = 4;
const SYNC_FLUSH_TIMEOUT_MS_DEFAULT: u64 = 5_000;

/// The values of `flushDiskType`, `flushIntervalCommitLog`, `flushCommitLogLeastPages` and
/// `syncFlushTimeout`, whichever mode is in effect.
#[derive(Debug, Clone, Copy)]
pub(super) struct FlushKeys {
    sync: bool,
    interval_ms: u64,
    least_pages: u32,
    sync_timeout_ms: u64,
}

impl FlushKeys {
    fn of(flush: FlushMode) -> Self {
        match flush {
            FlushMode::Sync { timeout_ms } => FlushKeys {
                sync: true,
                interval_ms: FLUSH_INTERVAL_MS_DEFAULT,
                least_pages: FLUSH_LEAST_PAGES_DEFAULT,
                sync_timeout_ms: timeout_ms,
            },
            FlushMode::Async {
                interval_ms,
                least_pages,
            } => FlushKeys {
                sync: false,
                interval_ms,
                least_pages,
                sync_timeout_ms: SYNC_FLUSH_TIMEOUT_MS_DEFAULT,
            },
        }
    }

    fn mode(self) -> FlushMode {
        if self.sync {
            FlushMode::Sync {
                timeout_ms: self.sync_timeout_ms,
            }
        } else {
            FlushMode::Async {
                interval_ms: self.interval_ms,
                least_pages: self.least_pages,
            }
        }
    }
}

const ROLES: [(&str, BrokerRole); 3] = [
    ("ASYNC_MASTER", BrokerRole::AsyncMaster),
    ("SYNC_MASTER", BrokerRole::SyncMaster),
    ("SLAVE", BrokerRole::Slave),
];

/// `flushDiskType`'s values: whether the flush is synchronous.
const FLUSH_TYPES: [(&str, bool); 2] = [("ASYNC_FLUSH", false), ("SYNC_FLUSH", true)];

/// The text of `value` among `choices`. Every value of the field's type is among them, so a
/// missing one is a bug in the table.
fn text_of<T: PartialEq + std::fmt::Debug>(choices: &[(&'static str, T)], value: &T) -> String {
    let found = choices.iter().find(|(_, choice)| choice == value);
    let (text, _) = found.unwrap_or_else(|| panic!("{value:?} has no text in {choices:?}"));
    text.to_string()
}

/// A ConsumeQueue entry: RocketMQ sizes ConsumeQueue files in bytes, Quiver in entries.
const CONSUME_QUEUE_ENTRY_BYTES: u64 = 20;

/// The section of the configuration document a key is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Group {
    Identity,
    Network,
    Messages,
    Storage,
    Retention,
    Replication,
    Delivery,
    Pop,
    Transactions,
    NonPersistent,
}

/// Every key, in the order GET_BROKER_CONFIG prints them.
pub(super) static KEYS: &[Key] = &[
    Key {
        name: "brokerClusterName",
        aliases: &[],
        group: Group::Identity,
        default: "DefaultCluster",
        follows: None,
        doc: "The cluster the broker registers in.",
        live: None,
        read: |reading, field| field.name().map(|name| reading.config.cluster_name = name),
        print: |printing| printing.config.cluster_name.clone(),
    },
    Key {
        name: "brokerName",
        aliases: &[],
        group: Group::Identity,
        default: "broker-a",
        follows: None,
        doc: "The broker's name; a master and its slaves share it.",
        live: None,
        read: |reading, field| field.name().map(|name| reading.config.broker_name = name),
        print: |printing| printing.config.broker_name.clone(),
    },
    Key {
        name: "brokerId",
        aliases: &[],
        group: Group::Identity,
        default: "0",
        follows: None,
        doc: "0 for a master, above 0 for a slave.",
        live: None,
        read: |reading, field| {
            field
                .number(0, 1_000_000)
                .map(|id| reading.config.broker_id = id)
        },
        print: |printing| printing.config.broker_id.to_string(),
    },
    Key {
        name: "namesrvAddr",
        aliases: &[],
        group: Group::Identity,
        default: "",
        follows: None,
        doc: "The name servers to register with, `;`-separated (`host:port;host:port`).",
        live: None,
        read: |reading, field| {
            let addresses = field.value.split(';').map(str::trim);
            let addresses = addresses.filter(|address| !address.is_empty());
            reading.config.namesrv_addrs = addresses.map(String::from).collect();
            Ok(())
        },
        print: |printing| printing.config.namesrv_addrs.join(";"),
    },
    Key {
        name: "brokerIP1",
        aliases: &[],
        group: Group::Network,
        default: "127.0.0.1",
        follows: None,
        doc: "The address put in routes and message ids: clients must be able to reach it.",
        live: None,
        read: |reading, field| field.ip().map(|ip| reading.config.broker_ip = ip),
        print: |printing| printing.config.broker_ip.to_string(),
    },
    Key {
        name: "bindAddress",
        aliases: &[],
        group: Group::Network,
        default: "127.0.0.1",
        follows: Some("`brokerIP1`"),
        doc: "Where the broker listens (`0.0.0.0`: every interface); by default only on \
              `brokerIP1`, so nothing listens beyond it by accident.",
        live: None,
        read: |reading, field| field.ip().map(|ip| reading.config.bind_ip = Some(ip)),
        print: |printing| printing.config.bind_addr().ip().to_string(),
    },
    Key {
        name: "listenPort",
        aliases: &[],
        group: Group::Network,
        default: "10911",
        follows: None,
        doc: "The broker's port; `0` picks a free one, and GET_BROKER_CONFIG then answers the \
              port bound.",
        live: None,
        read: |reading, field| {
            field
                .number(0, 65_535)
                .map(|port| reading.config.listen_port = port)
        },
        print: |printing| printing.listen_port.to_string(),
    },
    Key {
        name: "brokerRole",
        aliases: &[],
        group: Group::Replication,
        default: "ASYNC_MASTER",
        follows: None,
        doc: "`ASYNC_MASTER` streams to its slaves without waiting for them; `SYNC_MASTER` \
              answers a send SEND_OK only once a slave has confirmed it (as RocketMQ 4 does: \
              FLUSH_SLAVE_TIMEOUT when none confirms within `slaveTimeout`, SLAVE_NOT_AVAILABLE \
              at once when none is connected or the one connected is more than 256 MiB \
              behind; the message is stored either way); a `SLAVE` follows its master, refuses \
              sends with SERVICE_NOT_AVAILABLE and serves pulls, queries and admin reads.",
        live: None,
        read: |reading, field| field.one_of(&ROLES).map(|role| reading.config.role = role),
        print: |printing| text_of(&ROLES, &printing.config.role),
    },
    Key {
        name: "haListenPort",
        aliases: &[],
        group: Group::Replication,
        default: "10912",
        follows: Some("`listenPort` + 1"),
        doc: "A master's HA port for its slaves; `0` picks a free one, as does `listenPort=0`; \
              the name server hands the real one to slaves.",
        live: None,
        read: |reading, field| {
            let port = field.number(0, 65_535)?;
            reading.config.ha_listen_port = Some(port);
            Ok(())
        },
        print: |printing| {
            let after_listen_port = printing.listen_port.wrapping_add(1);
            let port = printing.config.ha_listen_port.unwrap_or(after_listen_port);
            port.to_string()
        },
    },
    Key {
        name: "haMasterAddress",
        aliases: &[],
        group: Group::Replication,
        default: "",
        follows: None,
        doc: "A slave's master HA address (`host:port`); without it the slave uses the one its \
              name server gives at registration.",
        live: None,
        read: |reading, field| {
            let address = Some(field.value.trim().to_string());
            reading.config.ha_master_addr = address.filter(|address| !address.is_empty());
            Ok(())
        },
        print: |printing| printing.config.ha_master_addr.clone().unwrap_or_default(),
    },
    Key {
        name: "slaveTimeout",
        aliases: &[],
        group: Group::Replication,
        default: "3000",
        follows: None,
        doc: "How long a SYNC_MASTER send waits for a slave's confirmation (ms) before it is \
              answered FLUSH_SLAVE_TIMEOUT.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 3_600_000)
                .map(|timeout_ms| reading.config.slave_timeout_ms = timeout_ms)
        },
        print: |printing| printing.config.slave_timeout_ms.to_string(),
    },
    Key {
        name: "totalReplicas",
        aliases: &[],
        group: Group::Replication,
        default: "1",
        follows: None,
        doc: "RocketMQ 5's count of replicas: accepted and checked; SYNC_MASTER waits for one \
              slave whatever it says.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 16)
                .map(|replicas| reading.config.total_replicas = replicas)
        },
        print: |printing| printing.config.total_replicas.to_string(),
    },
    Key {
        name: "slaveReadEnable",
        aliases: &[],
        group: Group::Replication,
        default: "false",
        follows: None,
        doc: "With it, a pull further behind the log's end than `accessMessageInMemoryMaxRatio` \
              is answered with `suggestWhichBrokerId=1`, and the Java client pulls from the \
              slave next, as with RocketMQ; without it, always the master.",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.slave_read_enable = enable)
        },
        print: |printing| printing.config.slave_read_enable.to_string(),
    },
    Key {
        name: "accessMessageInMemoryMaxRatio",
        aliases: &[],
        group: Group::Replication,
        default: "40",
        follows: None,
        doc: "How far behind the log's end a pull may be, in percent of the machine's memory, \
              before `slaveReadEnable` sends it to a slave.",
        live: None,
        read: |reading, field| {
            field
                .number(0, 100)
                .map(|percent| reading.config.in_memory_percent_max = percent)
        },
        print: |printing| printing.config.in_memory_percent_max.to_string(),
    },
    Key {
        name: "inSyncReplicas",
        aliases: &[],
        group: Group::Replication,
        default: "1",
        follows: None,
        doc: "RocketMQ 5's replicas a send waits for: accepted and checked; SYNC_MASTER waits \
              for one slave whatever it says.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 16)
                .map(|replicas| reading.config.in_sync_replicas = replicas)
        },
        print: |printing| printing.config.in_sync_replicas.to_string(),
    },
    Key {
        name: "minInSyncReplicas",
        aliases: &[],
        group: Group::Replication,
        default: "1",
        follows: None,
        doc: "RocketMQ 5's fewest replicas a send may wait for: accepted and checked; \
              SYNC_MASTER waits for one slave whatever it says.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 16)
                .map(|replicas| reading.config.min_in_sync_replicas = replicas)
        },
        print: |printing| printing.config.min_in_sync_replicas.to_string(),
    },
    Key {
        name: "brokerPermission",
        aliases: &[],
        group: Group::Messages,
        default: "6",
        follows: None,
        doc: "What clients may do on the broker's topics: 2 = write, 4 = read (6: both).",
        live: Some(LiveKey::BrokerPermission),
        read: |reading, field| {
            field
                .number(0, 15)
                .map(|permission| reading.config.broker_permission = permission)
        },
        print: |printing| printing.config.broker_permission.to_string(),
    },
    Key {
        name: "defaultTopicQueueNums",
        aliases: &[],
        group: Group::Messages,
        default: "8",
        follows: None,
        doc: "The queues of `TBW102` (set again at each start), so the most an auto-created \
              topic gets; also the queues of topics `nonPersistentTopics` creates.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 1024)
                .map(|queues| reading.config.default_topic_queue_nums = queues)
        },
        print: |printing| printing.config.default_topic_queue_nums.to_string(),
    },
    Key {
        name: "autoCreateTopicEnable",
        aliases: &[],
        group: Group::Messages,
        default: "true",
        follows: None,
        doc: "Topics are created on first send from `TBW102`; a new topic gets the producer's \
              queue count (4 by default) up to `defaultTopicQueueNums`.",
        live: Some(LiveKey::AutoCreateTopic),
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.auto_create_topic = enable)
        },
        print: |printing| printing.config.auto_create_topic.to_string(),
    },
    Key {
        name: "traceTopicEnable",
        aliases: &[],
        group: Group::Messages,
        default: "false",
        follows: None,
        doc: "With it, the message-trace topic is created at start (1 queue, read and write) \
              and cannot be reshaped by `updateTopic`; without it, a client's first trace \
              record creates the topic from `TBW102` like any other (auto-create on), as \
              RocketMQ does.",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.trace_topic_enable = enable)
        },
        print: |printing| printing.config.trace_topic_enable.to_string(),
    },
    Key {
        name: "msgTraceTopicName",
        aliases: &[],
        group: Group::Messages,
        default: "RMQ_SYS_TRACE_TOPIC",
        follows: None,
        doc: "The message-trace topic.",
        live: None,
        read: |reading, field| {
            field
                .topic(field.value, "a topic name")
                .map(|topic| reading.config.msg_trace_topic_name = topic)
        },
        print: |printing| printing.config.msg_trace_topic_name.clone(),
    },
    Key {
        name: "storeReplyMessageEnable",
        aliases: &[],
        group: Group::Messages,
        default: "true",
        follows: None,
        doc: "Replies to `producer.request` are stored in `<brokerClusterName>_REPLY_TOPIC` \
              (created at start, 1 queue) as well as pushed to the requesting client; with \
              `false` only pushed.",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.store_reply_message_enable = enable)
        },
        print: |printing| printing.config.store_reply_message_enable.to_string(),
    },
    Key {
        name: "autoCreateSubscriptionGroup",
        aliases: &[],
        group: Group::Messages,
        default: "true",
        follows: None,
        doc: "Consumer groups are created on first use (heartbeat, pull, pop, offset commit); \
              with `false`, only groups made with `mqadmin updateSubGroup` consume, others get \
              SUBSCRIPTION_GROUP_NOT_EXIST.",
        live: Some(LiveKey::AutoCreateSubscriptionGroup),
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.auto_create_subscription_group = enable)
        },
        print: |printing| printing.config.auto_create_subscription_group.to_string(),
    },
    Key {
        name: "useServerSideResetOffset",
        aliases: &[],
        group: Group::Messages,
        default: "true",
        follows: None,
        doc: "How `mqadmin resetOffsetByTime` works: the broker changes the offsets and moves \
              consumers at their next pull, and pop groups' cursors at once (RocketMQ 5); with \
              `false` it tells running consumers to move (RocketMQ 4).",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.use_server_side_reset_offset = enable)
        },
        print: |printing| printing.config.use_server_side_reset_offset.to_string(),
    },
    Key {
        name: "maxMessageSize",
        aliases: &[],
        group: Group::Messages,
        default: "4194304",
        follows: None,
        doc: "The largest body a send may carry (bytes; 4 MiB); bigger ones get MESSAGE_ILLEGAL.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 1024 * 1024 * 1024)
                .map(|bytes| reading.config.max_message_bytes = bytes)
        },
        print: |printing| printing.config.max_message_bytes.to_string(),
    },
    Key {
        name: "flushDiskType",
        aliases: &[],
        group: Group::Storage,
        default: "ASYNC_FLUSH",
        follows: None,
        doc: "`ASYNC_FLUSH` answers a send once it is written and flushes in the background; \
              `SYNC_FLUSH` answers once an fsync covers it (one fsync covers every send waiting).",
        live: None,
        read: |reading, field| {
            field
                .one_of(&FLUSH_TYPES)
                .map(|sync| reading.flush.sync = sync)
        },
        print: |printing| text_of(&FLUSH_TYPES, &printing.flush.sync),
    },
    Key {
        name: "flushIntervalCommitLog",
        aliases: &[],
        group: Group::Storage,
        default: "500",
        follows: None,
        doc: "With ASYNC_FLUSH, how often the flusher wakes (ms).",
        live: None,
        read: |reading, field| {
            field
                .number(1, 3_600_000)
                .map(|interval_ms| reading.flush.interval_ms = interval_ms)
        },
        print: |printing| printing.flush.interval_ms.to_string(),
    },
    Key {
        name: "flushCommitLogLeastPages",
        aliases: &[],
        group: Group::Storage,
        default: "4",
        follows: None,
        doc: "With ASYNC_FLUSH, the fewest unflushed 4 KiB pages worth an fsync when the \
              flusher wakes; every 10 s it flushes whatever there is.",
        live: None,
        read: |reading, field| {
            field
                .number(0, 1_000_000)
                .map(|pages| reading.flush.least_pages = pages)
        },
        print: |printing| printing.flush.least_pages.to_string(),
    },
    Key {
        name: "syncFlushTimeout",
        aliases: &[],
        group: Group::Storage,
        default: "5000",
        follows: None,
        doc: "With SYNC_FLUSH, how long a send waits for its fsync (ms) before it is answered \
              FLUSH_DISK_TIMEOUT (the message is written either way).",
        live: None,
        read: |reading, field| {
            field
                .number(1, 3_600_000)
                .map(|timeout_ms| reading.flush.sync_timeout_ms = timeout_ms)
        },
        print: |printing| printing.flush.sync_timeout_ms.to_string(),
    },
    Key {
        name: "storePathRootDir",
        aliases: &[],
        group: Group::Storage,
        default: "store",
        follows: None,
        doc: "The folder of the store, and of the broker's own files under `config/`.",
        live: None,
        read: |reading, field| field.path().map(|path| reading.config.store_root = path),
        print: |printing| Printing::path(&printing.config.store_root),
    },
    Key {
        name: "storePathCommitLog",
        aliases: &[],
        group: Group::Storage,
        default: "store/commitlog",
        follows: Some("`storePathRootDir`/commitlog"),
        doc: "The CommitLog's segments.",
        live: None,
        read: |reading, field| {
            field
                .path()
                .map(|path| reading.config.store_commitlog = Some(path))
        },
        print: |printing| Printing::path(&printing.store.commitlog_dir),
    },
    Key {
        name: "storePathConsumeQueue",
        aliases: &[],
        group: Group::Storage,
        default: "store/consumequeue",
        follows: Some("`storePathRootDir`/consumequeue"),
        doc: "The ConsumeQueues, a folder per topic.",
        live: None,
        read: |reading, field| {
            field
                .path()
                .map(|path| reading.config.store_consume_queue = Some(path))
        },
        print: |printing| Printing::path(&printing.store.consume_queue_dir),
    },
    Key {
        name: "storePathIndex",
        aliases: &[],
        group: Group::Storage,
        default: "store/index",
        follows: Some("`storePathRootDir`/index"),
        doc: "The key index files.",
        live: None,
        read: |reading, field| {
            field
                .path()
                .map(|path| reading.config.store_index = Some(path))
        },
        print: |printing| Printing::path(&printing.store.index_dir),
    },
    Key {
        name: "storeCheckpoint",
        aliases: &[],
        group: Group::Storage,
        default: "store/checkpoint",
        follows: Some("`storePathRootDir`/checkpoint"),
        doc: "The checkpoint file: how far the CommitLog, ConsumeQueues and index were on disk.",
        live: None,
        read: |reading, field| {
            field
                .path()
                .map(|path| reading.config.store_checkpoint = Some(path))
        },
        print: |printing| Printing::path(&printing.store.checkpoint_path),
    },
    Key {
        name: "abortFile",
        aliases: &[],
        group: Group::Storage,
        default: "store/abort",
        follows: Some("`storePathRootDir`/abort"),
        doc: "The file present while the broker runs; found at start, it means the last run \
              did not stop cleanly.",
        live: None,
        read: |reading, field| {
            field
                .path()
                .map(|path| reading.config.store_abort = Some(path))
        },
        print: |printing| Printing::path(&printing.store.abort_path),
    },
    Key {
        name: "mappedFileSizeCommitLog",
        aliases: &["mapedFileSizeCommitLog"],
        group: Group::Storage,
        default: "1073741824",
        follows: None,
        doc: "A CommitLog segment's size (bytes; 1 GiB).",
        live: None,
        read: |reading, field| {
            // Offsets within a segment are i32 on the wire and in the ConsumeQueue.
            let bytes = field.number(4096, i32::MAX as u64)?;
            reading.config.commitlog_segment_bytes = bytes;
            Ok(())
        },
        print: |printing| printing.config.commitlog_segment_bytes.to_string(),
    },
    Key {
        name: "mappedFileSizeConsumeQueue",
        aliases: &["mapedFileSizeConsumeQueue"],
        group: Group::Storage,
        default: "6000000",
        follows: None,
        doc: "A ConsumeQueue file's size (bytes), rounded up to whole 20-byte entries.",
        live: None,
        read: |reading, field| {
            // The most is 1 GiB of entries rounded up, so that every size printed reads back.
            let most = (1024 * 1024 * 1024_u64).div_ceil(CONSUME_QUEUE_ENTRY_BYTES)
                * CONSUME_QUEUE_ENTRY_BYTES;
            let bytes: u64 = field.number(CONSUME_QUEUE_ENTRY_BYTES, most)?;
            reading.config.consume_queue_entries_per_file =
                bytes.div_ceil(CONSUME_QUEUE_ENTRY_BYTES);
            Ok(())
        },
        print: |printing| {
            let entries = printing.config.consume_queue_entries_per_file;
            (entries * CONSUME_QUEUE_ENTRY_BYTES).to_string()
        },
    },
    Key {
        name: "maxHashSlotNum",
        aliases: &[],
        group: Group::Storage,
        default: "5000000",
        follows: None,
        doc: "A key index file's hash slots.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 100_000_000)
                .map(|slots| reading.config.index_slots = slots)
        },
        print: |printing| printing.config.index_slots.to_string(),
    },
    Key {
        name: "maxIndexNum",
        aliases: &[],
        group: Group::Storage,
        default: "20000000",
        follows: None,
        doc: "A key index file's entries; a full file is followed by a new one.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 400_000_000)
                .map(|entries| reading.config.index_entries_max = entries)
        },
        print: |printing| printing.config.index_entries_max.to_string(),
    },
    Key {
        name: "registerNameServerPeriod",
        aliases: &[],
        group: Group::Identity,
        default: "30000",
        follows: None,
        doc: "How often the broker registers its topics with every name server (ms); it \
              registers at once when a topic is created.",
        live: None,
        read: |reading, field| {
            field
                .number(1_000, 60_000)
                .map(|period_ms| reading.config.register_period_ms = period_ms)
        },
        print: |printing| printing.config.register_period_ms.to_string(),
    },
    Key {
        name: "deleteWhen",
        aliases: &[],
        group: Group::Retention,
        default: "04",
        follows: None,
        doc: "Hours of the local day at which expired segments are deleted, `;`-separated \
              (`04;16`).",
        live: None,
        read: |reading, field| {
            field
                .delete_when()
                .map(|hours| reading.config.delete_when = hours)
        },
        print: |printing| printing.config.delete_when.clone(),
    },
    Key {
        name: "fileReservedTime",
        aliases: &[],
        group: Group::Retention,
        default: "72",
        follows: None,
        doc: "How long a sealed segment is kept (hours).",
        live: None,
        read: |reading, field| {
            field
                .number(0, 1_000_000)
                .map(|hours| reading.config.file_reserved_hours = hours)
        },
        print: |printing| printing.config.file_reserved_hours.to_string(),
    },
    Key {
        name: "diskMaxUsedSpaceRatio",
        aliases: &[],
        group: Group::Retention,
        default: "75",
        follows: None,
        doc: "Disk use (percent) past which expired segments go at any hour.",
        live: None,
        read: |reading, field| {
            field
                .number(10, 95)
                .map(|percent| reading.config.disk_max_used_ratio_percent = percent)
        },
        print: |printing| printing.config.disk_max_used_ratio_percent.to_string(),
    },
    Key {
        name: "messageDelayLevel",
        aliases: &[],
        group: Group::Delivery,
        default: "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        follows: None,
        doc: "The delay levels of DELAY sends and consumer retries: level n waits the nth \
              duration (`s`, `m`, `h`, `d`).",
        live: None,
        read: |reading, field| {
            let levels = super::delay_levels::parse_levels(field.value);
            reading.config.delay_levels_ms = levels.map_err(|allowed| field.invalid(allowed))?;
            Ok(())
        },
        print: |printing| super::delay_levels::format_levels(&printing.config.delay_levels_ms),
    },
    Key {
        name: "timerWheelEnable",
        aliases: &[],
        group: Group::Delivery,
        default: "true",
        follows: None,
        doc: "RocketMQ 5 timer messages are delivered at their time; with `false` they are \
              refused (MESSAGE_ILLEGAL), as RocketMQ does.",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.timer_wheel_enable = enable)
        },
        print: |printing| printing.config.timer_wheel_enable.to_string(),
    },
    Key {
        name: "timerMaxDelaySec",
        aliases: &[],
        group: Group::Delivery,
        default: "259200",
        follows: None,
        doc: "How far ahead a timer message may be due (s; 3 days); one further ahead is \
              refused with MESSAGE_ILLEGAL.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 10 * 365 * 86_400)
                .map(|delay_sec| reading.config.timer_max_delay_sec = delay_sec)
        },
        print: |printing| printing.config.timer_max_delay_sec.to_string(),
    },
    Key {
        name: "popInflightMaxPerQueue",
        aliases: &[],
        group: Group::Pop,
        default: "20000",
        follows: None,
        doc: "Messages a group may hold popped and unacknowledged per queue; past that, a pop \
              that finds nothing else is answered POLLING_FULL with the reason.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 10_000_000)
                .map(|messages| reading.config.pop_in_flight_max_per_queue = messages)
        },
        print: |printing| printing.config.pop_in_flight_max_per_queue.to_string(),
    },
    Key {
        name: "popInflightMaxPerGroup",
        aliases: &[],
        group: Group::Pop,
        default: "200000",
        follows: None,
        doc: "Messages a group may hold popped and unacknowledged in all its queues; past that, \
              as per queue.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 100_000_000)
                .map(|messages| reading.config.pop_in_flight_max_per_group = messages)
        },
        print: |printing| printing.config.pop_in_flight_max_per_group.to_string(),
    },
    Key {
        name: "nonPersistentTopics",
        aliases: &[],
        group: Group::NonPersistent,
        default: "",
        follows: None,
        doc: "Comma-separated topics made non-persistent at start (created with \
              `defaultTopicQueueNums` queues when missing).",
        live: None,
        read: |reading, field| {
            let names = field.value.split(',').map(str::trim);
            let topics = names
                .filter(|name| !name.is_empty())
                .map(|name| field.topic(name, "a comma-separated list of topic names"));
            reading.config.non_persistent_topics = topics.collect::<Result<_, _>>()?;
            Ok(())
        },
        print: |printing| printing.config.non_persistent_topics.join(","),
    },
    Key {
        name: "transactionTimeOut",
        aliases: &[],
        group: Group::Transactions,
        default: "6000",
        follows: None,
        doc: "A half message undecided this long (ms, from its born time; longer when it \
              carries `CHECK_IMMUNITY_TIME_IN_SECONDS`) is checked with its producer.",
        live: None,
        read: |reading, field| {
            field
                .number(0, 30 * 86_400_000)
                .map(|timeout_ms| reading.config.transaction.timeout_ms = timeout_ms)
        },
        print: |printing| printing.config.transaction.timeout_ms.to_string(),
    },
    Key {
        name: "transactionCheckInterval",
        aliases: &[],
        group: Group::Transactions,
        default: "30000",
        follows: None,
        doc: "How often undecided half messages are checked (ms).",
        live: None,
        read: |reading, field| {
            field
                .number(100, 86_400_000)
                .map(|interval_ms| reading.config.transaction.interval_ms = interval_ms)
        },
        print: |printing| printing.config.transaction.interval_ms.to_string(),
    },
    Key {
        name: "transactionCheckMax",
        aliases: &[],
        group: Group::Transactions,
        default: "15",
        follows: None,
        doc: "Checks of a half message before it moves to `TRANS_CHECK_MAX_TIME_TOPIC`; check \
              counts are kept in memory, so a restart counts anew.",
        live: None,
        read: |reading, field| {
            field
                .number(0, 10_000)
                .map(|checks| reading.config.transaction.check_max = checks)
        },
        print: |printing| printing.config.transaction.check_max.to_string(),
    },
    Key {
        name: "nonPersistentQueueBytes",
        aliases: &[],
        group: Group::NonPersistent,
        default: "16777216",
        follows: None,
        doc: "The most a non-persistent queue's ring holds (bytes; 16 MiB); a full ring drops \
              its oldest messages.",
        live: None,
        read: |reading, field| {
            field
                .number(64 * 1024, 1 << 40)
                .map(|bytes| reading.config.non_persistent_queue_bytes = bytes)
        },
        print: |printing| printing.config.non_persistent_queue_bytes.to_string(),
    },
    Key {
        name: "nonPersistentBytesMax",
        aliases: &[],
        group: Group::NonPersistent,
        default: "268435456",
        follows: None,
        doc: "The most all rings hold together (bytes; 256 MiB): each queue holds at most its \
              share, split equally over the queues that hold messages.",
        live: None,
        read: |reading, field| {
            field
                .number(64 * 1024, 1 << 40)
                .map(|bytes| reading.config.non_persistent_bytes_max = bytes)
        },
        print: |printing| printing.config.non_persistent_bytes_max.to_string(),
    },
    Key {
        name: "enablePropertyFilter",
        aliases: &[],
        group: Group::Messages,
        default: "false",
        follows: None,
        doc: "SQL92 subscriptions (`MessageSelector.bySql`) are served; with `false` their \
              pulls and CHECK_CLIENT_CONFIG get SYSTEM_ERROR, as in RocketMQ (pops are served \
              either way, as RocketMQ serves them).",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.enable_property_filter = enable)
        },
        print: |printing| printing.config.enable_property_filter.to_string(),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn printed(config: &BrokerConfig, key: &Key) -> String {
        (key.print)(&Printing::of(config, config.listen_port))
    }

    #[test]
    fn each_default_is_what_a_default_configuration_prints() {
        let config = BrokerConfig::default();
        for key in KEYS {
            assert_eq!(printed(&config, key), key.default, "{}", key.name);
        }
    }

    /// A key that follows another while unset is set by reading its printed value back:
    /// the configuration prints the same, but no longer follows.
    #[test]
    fn each_default_printed_and_read_back_gives_the_default_configuration() {
        let default = BrokerConfig::default();
        for key in KEYS {
            let mut config = BrokerConfig::default();
            let line = format!("{}={}\n", key.name, printed(&default, key));
            let unknown = config
                .apply_properties(&line)
                .expect("a printed value reads");
            assert!(unknown.is_empty(), "{line}");
            match key.follows {
                None => assert_eq!(config, default, "{line}"),
                Some(_) => assert_eq!(
                    config.properties(config.listen_port),
                    default.properties(default.listen_port),
                    "{line}"
                ),
            }
        }
    }

    #[test]
    fn names_and_aliases_are_each_one_key() {
        let mut seen = std::collections::HashSet::new();
        for key in KEYS {
            for name in std::iter::once(&key.name).chain(key.aliases) {
                assert!(seen.insert(*name), "{name} is spelled twice");
                assert!(std::ptr::eq(find(name).expect("found"), key), "{name}");
            }
        }
        assert!(find("sendMessageThreadPoolNums").is_none());
    }

    #[test]
    fn each_doc_is_one_sentence_on_one_line() {
        for key in KEYS {
            assert!(!key.doc.contains('\n'), "{}", key.name);
            assert!(key.doc.ends_with('.'), "{}", key.name);
        }
    }

    /// The flush keys depend on `flushDiskType`, which may come before or after them.
    #[test]
    fn flush_keys_take_effect_together_whatever_their_order() {
        let read = |base: &BrokerConfig, text: &str| {
            let mut config = base.clone();
            config.apply_properties(text).expect("valid");
            config.flush
        };
        let default = BrokerConfig::default();
        let sync_first = "flushDiskType=SYNC_FLUSH\nsyncFlushTimeout=100\nflushIntervalCommitLog=7";
        let sync_last = "syncFlushTimeout=100\nflushIntervalCommitLog=7\nflushDiskType=SYNC_FLUSH";
        for text in [sync_first, sync_last] {
            assert_eq!(read(&default, text), FlushMode::Sync { timeout_ms: 100 });
        }
        // Back to ASYNC_FLUSH: the intervals given, or RocketMQ's defaults, not the last ones.
        let mut sync = default.clone();
        sync.apply_properties(sync_first).expect("valid");
        assert_eq!(
            read(&sync, "flushDiskType=ASYNC_FLUSH"),
            FlushMode::Async {
                interval_ms: FLUSH_INTERVAL_MS_DEFAULT,
                least_pages: FLUSH_LEAST_PAGES_DEFAULT
            }
        );
        assert_eq!(
            read(
                &sync,
                "flushCommitLogLeastPages=0\nflushDiskType=ASYNC_FLUSH"
            ),
            FlushMode::Async {
                interval_ms: FLUSH_INTERVAL_MS_DEFAULT,
                least_pages: 0
            }
        );
        // An interval alone leaves a synchronous flush as it was.
        assert_eq!(read(&sync, "flushIntervalCommitLog=9"), sync.flush);
        // A bad line leaves the flush as it was, though the keys before it were read.
        let mut config = default.clone();
        let error = config.apply_properties("flushDiskType=SYNC_FLUSH\nbrokerId=x");
        assert_eq!(error.map_err(|error| error.line), Err(2));
        assert_eq!(config.flush, default.flush);
    }
}
