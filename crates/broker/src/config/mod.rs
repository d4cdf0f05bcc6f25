//! Broker configuration: RocketMQ's `broker.conf` properties format (`key=value`, `#` comments),
//! so an operator's existing file starts as it is. Unknown keys are collected for one warning;
//! a bad value is an error naming the key, the line and what is allowed.
//!
//! `BrokerConfig` and what follows from it live here. Each key is written once, in the table
//! in `keys.rs` (name, default, reading, printing, documentation); `properties.rs` reads
//! `broker.conf` lines and prints the configuration in effect through it, `field.rs` holds the
//! value readers the keys share, and `document.rs` renders `docs/configuration.md` from it.

pub mod delay_levels;
#[cfg(test)]
mod document;
mod field;
mod keys;
mod properties;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use quiver_store::{FlushMode, StoreConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerRole {
    AsyncMaster,
    SyncMaster,
    Slave,
}

/// `grpcServerPort` left unset: the port `rocketmq-proxy` serves gRPC clients on.
pub const GRPC_PORT_DEFAULT: u16 = 8081;
/// RocketMQ's default `timerMaxDelaySec`: 3 days.
pub const TIMER_MAX_DELAY_SEC_DEFAULT: u64 = 3 * 24 * 3_600;
/// Messages handed out and not acknowledged, per queue of a group (`popInflightMaxPerQueue`):
/// past it the queue is skipped by pops (POLLING_FULL when nothing else is found) until acks
/// or revives free room.
pub const POP_IN_FLIGHT_MAX_PER_QUEUE: usize = 20_000;
/// The same for all queues of one group (`popInflightMaxPerGroup`).
pub const POP_IN_FLIGHT_MAX_PER_GROUP: usize = 200_000;

/// The limits on what clients make the broker keep, by the names of their keys, which the
/// refusals quote. Each bounds a table that lives in memory whole and, for topics and groups,
/// is written whole to a file at each batch of changes.
pub const TOPICS_MAX_KEY: &str = "quiverTopicsMax";
pub const SUBSCRIPTION_GROUPS_MAX_KEY: &str = "quiverSubscriptionGroupsMax";
pub const CLIENT_IDS_MAX_KEY: &str = "quiverClientIdsMax";
pub const GRPC_CLIENTS_MAX_KEY: &str = "quiverGrpcClientsMax";
pub const CLIENT_IDS_PER_CONNECTION_MAX_KEY: &str = "quiverClientIdsPerConnectionMax";

/// Why 10,000 topics: a topic in use holds a ConsumeQueue per queue (4 when a send creates
/// it), each with an open file and up to two pages of entries not yet written, about 10 KiB;
/// 10,000 such topics are some 400 MiB at worst, within the broker's 1 GiB. The table, its
/// file and a registration are a few MiB.
pub const TOPICS_MAX_DEFAULT: usize = 10_000;
/// Why 10,000 groups: a group's settings are a few hundred bytes, and each consumer group's
/// retry topic counts among the topics.
pub const SUBSCRIPTION_GROUPS_MAX_DEFAULT: usize = 10_000;
/// A Java client process registers one client id per connection; a RocketMQ proxy registers
/// its clients' ids over a few connections. What is kept per registration is its heartbeat's
/// groups and subscriptions, a few KiB: 20,000 ids are tens of MiB.
pub const CLIENT_IDS_MAX_DEFAULT: usize = 20_000;
pub const CLIENT_IDS_PER_CONNECTION_MAX_DEFAULT: usize = 1_000;

/// RocketMQ's BrokerConfig defaults.
pub const TRANSACTION_TIMEOUT_MS_DEFAULT: u64 = 6_000;
pub const TRANSACTION_CHECK_INTERVAL_MS_DEFAULT: u64 = 30_000;
pub const TRANSACTION_CHECK_MAX_DEFAULT: u32 = 15;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckConfig {
    /// `transactionTimeOut`: a half younger than this (by born time) is not checked.
    pub timeout_ms: u64,
    /// `transactionCheckInterval`: time between check rounds.
    pub interval_ms: u64,
    /// `transactionCheckMax`: checks per half before it is moved aside.
    pub check_max: u32,
}

impl Default for CheckConfig {
    fn default() -> Self {
        CheckConfig {
            timeout_ms: TRANSACTION_TIMEOUT_MS_DEFAULT,
            interval_ms: TRANSACTION_CHECK_INTERVAL_MS_DEFAULT,
            check_max: TRANSACTION_CHECK_MAX_DEFAULT,
        }
    }
}

/// The keys `mqadmin updateBrokerConfig` may change while the broker runs (`keys.rs` marks
/// them); the others are read only at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveKey {
    BrokerPermission,
    AutoCreateTopic,
    AutoCreateSubscriptionGroup,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    pub cluster_name: String,
    pub broker_name: String,
    pub broker_id: i64,
    pub namesrv_addrs: Vec<String>,
    /// The address put in routes and message ids; clients must be able to reach it.
    pub broker_ip: IpAddr,
    /// Where the listener binds; defaults to `broker_ip`, so nothing listens beyond it by accident.
    pub bind_ip: Option<IpAddr>,
    pub listen_port: u16,
    pub default_topic_queue_nums: i32,
    pub auto_create_topic: bool,
    /// `traceTopicEnable`: the message-trace topic (`msgTraceTopicName`) is created at start.
    pub trace_topic_enable: bool,
    pub msg_trace_topic_name: String,
    /// `storeReplyMessageEnable`: replies (request-reply) are stored as well as pushed.
    pub store_reply_message_enable: bool,
    pub auto_create_subscription_group: bool,
    /// RocketMQ 5's offset reset: the broker changes the offsets and moves consumers on their
    /// next pull (true), or tells running consumers to move as RocketMQ 4 did (false).
    pub use_server_side_reset_offset: bool,
    pub broker_permission: i32,
    pub max_message_bytes: usize,
    /// `quiverTopicsMax`, `quiverSubscriptionGroupsMax`: past these a topic or group is not
    /// created (by a send, a consumer or an admin); the ones there stay.
    pub topics_max: usize,
    pub subscription_groups_max: usize,
    /// `quiverClientIdsMax`, `quiverClientIdsPerConnectionMax`: client ids the broker keeps
    /// heartbeats of, in all and over one connection; a heartbeat of a new id past them is
    /// refused.
    pub client_ids_max: usize,
    /// `quiverGrpcClientsMax`: gRPC clients served at once.
    pub grpc_clients_max: usize,
    pub client_ids_per_connection_max: usize,
    /// `compressedRegister`: registrations carry the topics zipped in RocketMQ's compressed
    /// layout. Registrations whose JSON would be large are compressed whatever it says.
    pub compressed_register: bool,
    pub role: BrokerRole,
    /// `haListenPort`: where a master serves its slaves; None means `listenPort + 1`.
    pub ha_listen_port: Option<u16>,
    /// `grpcServerPort`: where gRPC clients connect; None means 8081, or a free port when
    /// `listenPort` is 0.
    pub grpc_port: Option<u16>,
    /// `tls.server.certPath` and `tls.server.keyPath`: the gRPC port's certificate and key;
    /// None makes a self-signed one.
    pub tls_cert_path: Option<PathBuf>,
    pub tls_key_path: Option<PathBuf>,
    /// `haMasterAddress`: a slave's master HA address; None means the one the name server
    /// gives at registration.
    pub ha_master_addr: Option<String>,
    /// `slaveTimeout`: how long a SYNC_MASTER send waits for a slave's confirmation before it
    /// is answered FLUSH_SLAVE_TIMEOUT.
    pub slave_timeout_ms: u64,
    /// RocketMQ 5's `totalReplicas`, `inSyncReplicas`, `minInSyncReplicas`: accepted and
    /// checked, but SYNC_MASTER waits for one slave whatever they say (see docs/replication.md).
    pub total_replicas: u32,
    /// `slaveReadEnable`: pulls far behind the log's end are sent to a slave.
    pub slave_read_enable: bool,
    /// `accessMessageInMemoryMaxRatio`: how far behind (in percent of the machine's memory)
    /// a pull may be before `slaveReadEnable` sends it to a slave.
    pub in_memory_percent_max: u32,
    pub in_sync_replicas: u32,
    pub min_in_sync_replicas: u32,
    pub flush: FlushMode,
    pub store_root: PathBuf,
    pub store_commitlog: Option<PathBuf>,
    pub store_consume_queue: Option<PathBuf>,
    pub store_index: Option<PathBuf>,
    pub store_checkpoint: Option<PathBuf>,
    pub store_abort: Option<PathBuf>,
    pub commitlog_segment_bytes: u64,
    pub consume_queue_entries_per_file: u64,
    pub index_slots: u32,
    pub index_entries_max: u32,
    pub register_period_ms: u64,
    /// Hours of the local day (`04;16`) at which expired segments are deleted.
    pub delete_when: String,
    pub file_reserved_hours: u64,
    pub disk_max_used_ratio_percent: u32,
    pub connections_max: usize,
    pub requests_in_flight_per_connection_max: usize,
    /// `maxTransferBytesOnMessageInMemory`, `maxTransferCountOnMessageInMemory`: the most one
    /// pull, pop or peek answer carries (always at least one message).
    pub transfer_bytes_max: u32,
    pub transfer_count_max: u32,
    /// `transferMsgByHeap`: pull answers copy every record, instead of sending large ones
    /// from the page cache.
    pub transfer_by_heap: bool,
    /// `quiverConnectionBytesMax`, `quiverBrokerBytesMax`: the byte budgets (`budget.rs`).
    pub connection_bytes_max: usize,
    pub broker_bytes_max: usize,
    /// `messageDelayLevel`: level n (1-based) waits `delay_levels_ms[n - 1]`.
    pub delay_levels_ms: Vec<u64>,
    /// `timerWheelEnable`: RocketMQ 5 timer messages are delivered at their time; without it
    /// they are refused.
    pub timer_wheel_enable: bool,
    /// `timerMaxDelaySec`: how far ahead a timer message may be due.
    pub timer_max_delay_sec: u64,
    /// `popInflightMaxPerQueue`, `popInflightMaxPerGroup`: popped and unacknowledged messages
    /// a group may hold per queue and in all.
    pub pop_in_flight_max_per_queue: usize,
    pub pop_in_flight_max_per_group: usize,
    /// `nonPersistentTopics`: topics made non-persistent at start (created when missing).
    pub non_persistent_topics: Vec<String>,
    /// `nonPersistentQueueBytes`: a non-persistent queue's ring holds at most this much.
    pub non_persistent_queue_bytes: u64,
    /// `nonPersistentBytesMax`: all rings together; each queue gets at most its share.
    pub non_persistent_bytes_max: u64,
    /// `enablePropertyFilter`: SQL92 subscriptions are served; without it pulls and
    /// CHECK_CLIENT_CONFIG refuse them, as RocketMQ does (its default is off too).
    pub enable_property_filter: bool,
    /// `transactionTimeOut`, `transactionCheckInterval`, `transactionCheckMax`: a half message
    /// unresolved this long (ms) is checked with its producer, every interval (ms), at most
    /// this many times; see `transaction/`.
    pub transaction: CheckConfig,
    /// RocketMQ 5's controller mode: a controller gives the broker its id and its role.
    pub controller: ControllerModeConfig,
}

/// The keys of controller mode (RocketMQ 5's automatic failover, `controller_mode.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerModeConfig {
    /// `enableControllerMode`: the role and the id come from a controller, not from
    /// `brokerRole` and `brokerId`.
    pub enabled: bool,
    /// `controllerAddr`: every controller node, `;`-separated.
    pub addrs: Vec<String>,
    /// `syncBrokerMetadataPeriod`: how often the broker asks the controller for its set's
    /// master and SyncStateSet.
    pub sync_broker_metadata_period_ms: u64,
    /// `checkSyncStateSetPeriod`: how often a master looks at which slaves are caught up.
    pub check_sync_state_set_period_ms: u64,
    /// `controllerHeartBeatTimeoutMills`: a broker silent this long is dead to the
    /// controller; a master that heard nothing from the controller this long stops
    /// acknowledging sends.
    pub heartbeat_timeout_ms: u64,
    /// `brokerElectionPriority`: lower is preferred in an election.
    pub election_priority: i32,
    /// `brokerHeartbeatInterval`.
    pub heartbeat_interval_ms: u64,
    /// `allAckInSyncStateSet`: a send is acknowledged once every member of the SyncStateSet
    /// has it.
    pub all_ack_in_sync_state_set: bool,
    /// `haMaxTimeSlaveNotCatchup`: a slave not caught up for this long leaves the
    /// SyncStateSet.
    pub slave_not_caught_up_ms_max: u64,
}

impl Default for ControllerModeConfig {
    fn default() -> Self {
        ControllerModeConfig {
            enabled: false,
            addrs: Vec::new(),
            sync_broker_metadata_period_ms: 5_000,
            check_sync_state_set_period_ms: 5_000,
            heartbeat_timeout_ms: 10_000,
            election_priority: i32::MAX,
            heartbeat_interval_ms: 1_000,
            all_ack_in_sync_state_set: false,
            slave_not_caught_up_ms_max: 15_000,
        }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            cluster_name: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            broker_id: 0,
            namesrv_addrs: Vec::new(),
            broker_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            bind_ip: None,
            listen_port: 10911,
            default_topic_queue_nums: 8,
            auto_create_topic: true,
            trace_topic_enable: false,
            msg_trace_topic_name: crate::topic::TRACE_TOPIC.into(),
            store_reply_message_enable: true,
            auto_create_subscription_group: true,
            use_server_side_reset_offset: true,
            broker_permission: 6,
            max_message_bytes: 4 * 1024 * 1024,
            topics_max: TOPICS_MAX_DEFAULT,
            subscription_groups_max: SUBSCRIPTION_GROUPS_MAX_DEFAULT,
            client_ids_max: CLIENT_IDS_MAX_DEFAULT,
            grpc_clients_max: 10_000,
            client_ids_per_connection_max: CLIENT_IDS_PER_CONNECTION_MAX_DEFAULT,
            compressed_register: false,
            role: BrokerRole::AsyncMaster,
            ha_listen_port: None,
            grpc_port: None,
            tls_cert_path: None,
            tls_key_path: None,
            ha_master_addr: None,
            slave_timeout_ms: 3_000,
            total_replicas: 1,
            slave_read_enable: false,
            in_memory_percent_max: 40,
            in_sync_replicas: 1,
            min_in_sync_replicas: 1,
            flush: FlushMode::Async {
                interval_ms: 500,
                least_pages: 4,
            },
            store_root: PathBuf::from("store"),
            store_commitlog: None,
            store_consume_queue: None,
            store_index: None,
            store_checkpoint: None,
            store_abort: None,
            commitlog_segment_bytes: 1024 * 1024 * 1024,
            consume_queue_entries_per_file: 300_000,
            index_slots: 5_000_000,
            index_entries_max: 20_000_000,
            register_period_ms: 30_000,
            delete_when: "04".into(),
            file_reserved_hours: 72,
            disk_max_used_ratio_percent: 75,
            connections_max: 10_000,
            requests_in_flight_per_connection_max: 4_096,
            transfer_bytes_max: 256 * 1024,
            transfer_count_max: 32,
            transfer_by_heap: false,
            connection_bytes_max: 16 * 1024 * 1024,
            broker_bytes_max: 256 * 1024 * 1024,
            delay_levels_ms: delay_levels::DEFAULT_LEVELS_MS.to_vec(),
            timer_wheel_enable: true,
            timer_max_delay_sec: TIMER_MAX_DELAY_SEC_DEFAULT,
            pop_in_flight_max_per_queue: POP_IN_FLIGHT_MAX_PER_QUEUE,
            pop_in_flight_max_per_group: POP_IN_FLIGHT_MAX_PER_GROUP,
            non_persistent_topics: Vec::new(),
            non_persistent_queue_bytes: 16 * 1024 * 1024,
            non_persistent_bytes_max: 256 * 1024 * 1024,
            enable_property_filter: false,
            transaction: CheckConfig::default(),
            controller: ControllerModeConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {key}={value:?} is not valid: {allowed}")]
pub struct ConfigError {
    pub line: usize,
    pub key: String,
    pub value: String,
    pub allowed: String,
}

/// A key the broker does not act on, with the line it was on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    pub line: usize,
    pub key: String,
}

/// Disk use past which retention deletes sealed segments whether expired or not
/// (RocketMQ's diskSpaceCleanForciblyRatio, 0.85).
pub const DISK_CLEAN_FORCIBLY_PERCENT: u32 = 85;
const HOUR_MS: u64 = 3_600_000;

/// What a retention round may delete now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionRound {
    /// Segments older than fileReservedTime.
    Expired,
    /// Every sealed segment, oldest first: the disk is nearly full.
    AtOnce,
}

/// The machine's memory, read once: it does not change while the broker runs, and pulls ask.
fn physical_memory_bytes() -> u64 {
    static BYTES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        // SAFETY: sysconf only reads system configuration; a failure returns -1, handled.
        let (pages, page_bytes) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        (pages.max(0) as u64).saturating_mul(page_bytes.max(0) as u64)
    })
}

impl BrokerConfig {
    /// RocketMQ's rule: expired segments go at a `deleteWhen` hour, or at any hour once the
    /// disk is fuller than `diskMaxUsedSpaceRatio`; past `DISK_CLEAN_FORCIBLY_PERCENT` even
    /// unexpired ones go.
    pub fn retention_round(
        &self,
        local_hour: u32,
        disk_used_percent: u32,
    ) -> Option<RetentionRound> {
        if disk_used_percent > DISK_CLEAN_FORCIBLY_PERCENT {
            return Some(RetentionRound::AtOnce);
        }
        let delete_hour = self
            .delete_when
            .split(';')
            .filter_map(|h| h.trim().parse::<u32>().ok())
            .any(|h| h == local_hour);
        (delete_hour || disk_used_percent > self.disk_max_used_ratio_percent)
            .then_some(RetentionRound::Expired)
    }

    pub fn file_reserved_ms(&self) -> u64 {
        self.file_reserved_hours.saturating_mul(HOUR_MS)
    }

    /// `accessMessageInMemoryMaxRatio` of the machine's memory, in bytes.
    pub fn in_memory_bytes_max(&self) -> u64 {
        physical_memory_bytes() / 100 * u64::from(self.in_memory_percent_max)
    }

    /// Where a master listens for slaves: `haListenPort`, else the port after `listen_port`
    /// (the one bound), as RocketMQ does; a free port when `listenPort` is 0.
    pub fn ha_bind_addr(&self, listen_port: u16) -> SocketAddr {
        // A broker on a free port (listenPort=0) takes a free HA port too: the port after
        // the one it got may well be taken.
        let port = match (self.ha_listen_port, self.listen_port) {
            (Some(port), _) => port,
            (None, 0) => 0,
            (None, _) => listen_port.wrapping_add(1),
        };
        SocketAddr::new(self.bind_addr().ip(), port)
    }

    /// The port gRPC clients are served on: `grpcServerPort`, else 8081, or a free one when
    /// `listenPort` is 0.
    pub fn grpc_bind_port(&self) -> u16 {
        match (self.grpc_port, self.listen_port) {
            (Some(port), _) => port,
            (None, 0) => 0,
            (None, _) => GRPC_PORT_DEFAULT,
        }
    }

    pub fn bind_addr(&self) -> SocketAddr {
        SocketAddr::new(self.bind_ip.unwrap_or(self.broker_ip), self.listen_port)
    }

    /// The store configuration this broker config implies.
    pub fn store_config(&self) -> StoreConfig {
        let mut store = StoreConfig::under(&self.store_root);
        let or = |path: &Option<PathBuf>, default: PathBuf| path.clone().unwrap_or(default);
        store.commitlog_dir = or(&self.store_commitlog, store.commitlog_dir);
        store.consume_queue_dir = or(&self.store_consume_queue, store.consume_queue_dir);
        store.index_dir = or(&self.store_index, store.index_dir);
        store.checkpoint_path = or(&self.store_checkpoint, store.checkpoint_path);
        store.abort_path = or(&self.store_abort, store.abort_path);
        store.segment_bytes = self.commitlog_segment_bytes;
        store.consume_queue_entries_per_file = self.consume_queue_entries_per_file;
        store.flush = self.flush;
        store.index_slots = self.index_slots;
        store.index_entries_max = self.index_entries_max;
        // The whole record carries the body plus headers, topic and properties (≤ 32 KiB).
        store.record_bytes_max = (self.max_message_bytes + 64 * 1024).min(u32::MAX as usize) as u32;
        store.memory_limits = quiver_store::MemoryLimits {
            queue_bytes: self.non_persistent_queue_bytes,
            broker_bytes: self.non_persistent_bytes_max,
        };
        store
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_runs_at_delete_hours_or_when_the_disk_fills() {
        let mut config = BrokerConfig::default();
        config
            .apply_properties("deleteWhen=04;16\nfileReservedTime=48\ndiskMaxUsedSpaceRatio=70\n")
            .expect("valid");
        assert_eq!(config.file_reserved_ms(), 48 * 3_600_000);
        assert_eq!(config.retention_round(3, 10), None);
        assert_eq!(config.retention_round(4, 10), Some(RetentionRound::Expired));
        assert_eq!(
            config.retention_round(16, 10),
            Some(RetentionRound::Expired)
        );
        assert_eq!(config.retention_round(5, 71), Some(RetentionRound::Expired));
        assert_eq!(config.retention_round(5, 86), Some(RetentionRound::AtOnce));
        assert!(config.apply_properties("deleteWhen=24").is_err());
    }
}
