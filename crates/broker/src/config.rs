//! Broker configuration: RocketMQ's `broker.conf` properties format (`key=value`, `#` comments),
//! so an operator's existing file starts as it is. Unknown keys are collected for one warning;
//! a bad value is an error naming the key, the line and what is allowed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use quiver_store::{FlushMode, StoreConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerRole {
    AsyncMaster,
    SyncMaster,
    Slave,
}

#[derive(Debug, Clone)]
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
    pub role: BrokerRole,
    /// `haListenPort`: where a master serves its slaves; None means `listenPort + 1`.
    pub ha_listen_port: Option<u16>,
    /// `haMasterAddress`: a slave's master HA address; None means the one the name server
    /// gives at registration.
    pub ha_master_addr: Option<String>,
    /// `slaveTimeout`: how long a SYNC_MASTER send waits for a slave's confirmation before it
    /// is answered FLUSH_SLAVE_TIMEOUT.
    pub slave_timeout_ms: u64,
    /// RocketMQ 5's `totalReplicas`, `inSyncReplicas`, `minInSyncReplicas`: accepted and
    /// checked, but SYNC_MASTER waits for one slave whatever they say (see the README).
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
    pub transaction: crate::transaction::CheckConfig,
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
            role: BrokerRole::AsyncMaster,
            ha_listen_port: None,
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
            delay_levels_ms: crate::delay::DEFAULT_LEVELS_MS.to_vec(),
            timer_wheel_enable: true,
            timer_max_delay_sec: crate::timer::MAX_DELAY_SEC_DEFAULT,
            pop_in_flight_max_per_queue: crate::pop::IN_FLIGHT_MAX_PER_QUEUE,
            pop_in_flight_max_per_group: crate::pop::IN_FLIGHT_MAX_PER_GROUP,
            non_persistent_topics: Vec::new(),
            non_persistent_queue_bytes: 16 * 1024 * 1024,
            non_persistent_bytes_max: 256 * 1024 * 1024,
            enable_property_filter: false,
            transaction: crate::transaction::CheckConfig::default(),
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

/// Splits a properties line as java.util.Properties does: the key ends at the first `=`, `:`
/// or blank; then blanks and one `=` or `:` are skipped (`key=value`, `key: value` and
/// `key value` all mean the same). None for a line that is only a key.
fn split_property(line: &str) -> Option<(&str, &str)> {
    let end = line.find(['=', ':', ' ', '\t', '\u{c}'])?;
    let (key, rest) = line.split_at(end);
    let rest = rest.trim_start_matches([' ', '\t', '\u{c}']);
    let rest = rest
        .strip_prefix(['=', ':'])
        .unwrap_or(rest)
        .trim_start_matches([' ', '\t', '\u{c}']);
    Some((key, rest.trim_end()))
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
        store
    }

    /// The configuration in effect, as RocketMQ's keys and values, in the order of a broker.conf
    /// (what GET_BROKER_CONFIG answers and `mqadmin getBrokerConfig` prints). `listen_port` is
    /// the port actually bound, which differs from `listenPort=0`. Applying these lines to a
    /// default configuration gives this one back.
    pub fn properties(&self, listen_port: u16) -> Vec<(&'static str, String)> {
        let store = self.store_config();
        let (flush_type, interval_ms, least_pages, sync_timeout_ms) = match self.flush {
            FlushMode::Sync { timeout_ms } => ("SYNC_FLUSH", 500, 4, timeout_ms),
            FlushMode::Async {
                interval_ms,
                least_pages,
            } => ("ASYNC_FLUSH", interval_ms, least_pages, 5_000),
        };
        let role = match self.role {
            BrokerRole::AsyncMaster => "ASYNC_MASTER",
            BrokerRole::SyncMaster => "SYNC_MASTER",
            BrokerRole::Slave => "SLAVE",
        };
        let path = |path: &std::path::Path| path.display().to_string();
        vec![
            ("brokerClusterName", self.cluster_name.clone()),
            ("brokerName", self.broker_name.clone()),
            ("brokerId", self.broker_id.to_string()),
            ("namesrvAddr", self.namesrv_addrs.join(";")),
            ("brokerIP1", self.broker_ip.to_string()),
            ("bindAddress", self.bind_addr().ip().to_string()),
            ("listenPort", listen_port.to_string()),
            ("brokerRole", role.to_string()),
            (
                "haListenPort",
                self.ha_listen_port
                    .unwrap_or(listen_port.wrapping_add(1))
                    .to_string(),
            ),
            (
                "haMasterAddress",
                self.ha_master_addr.clone().unwrap_or_default(),
            ),
            ("slaveTimeout", self.slave_timeout_ms.to_string()),
            ("totalReplicas", self.total_replicas.to_string()),
            ("slaveReadEnable", self.slave_read_enable.to_string()),
            (
                "accessMessageInMemoryMaxRatio",
                self.in_memory_percent_max.to_string(),
            ),
            ("inSyncReplicas", self.in_sync_replicas.to_string()),
            ("minInSyncReplicas", self.min_in_sync_replicas.to_string()),
            ("brokerPermission", self.broker_permission.to_string()),
            (
                "defaultTopicQueueNums",
                self.default_topic_queue_nums.to_string(),
            ),
            ("autoCreateTopicEnable", self.auto_create_topic.to_string()),
            ("traceTopicEnable", self.trace_topic_enable.to_string()),
            ("msgTraceTopicName", self.msg_trace_topic_name.clone()),
            (
                "storeReplyMessageEnable",
                self.store_reply_message_enable.to_string(),
            ),
            (
                "autoCreateSubscriptionGroup",
                self.auto_create_subscription_group.to_string(),
            ),
            (
                "useServerSideResetOffset",
                self.use_server_side_reset_offset.to_string(),
            ),
            ("maxMessageSize", self.max_message_bytes.to_string()),
            ("flushDiskType", flush_type.to_string()),
            ("flushIntervalCommitLog", interval_ms.to_string()),
            ("flushCommitLogLeastPages", least_pages.to_string()),
            ("syncFlushTimeout", sync_timeout_ms.to_string()),
            ("storePathRootDir", path(&self.store_root)),
            ("storePathCommitLog", path(&store.commitlog_dir)),
            ("storePathConsumeQueue", path(&store.consume_queue_dir)),
            ("storePathIndex", path(&store.index_dir)),
            ("storeCheckpoint", path(&store.checkpoint_path)),
            ("abortFile", path(&store.abort_path)),
            (
                "mappedFileSizeCommitLog",
                self.commitlog_segment_bytes.to_string(),
            ),
            (
                "mappedFileSizeConsumeQueue",
                (self.consume_queue_entries_per_file * 20).to_string(),
            ),
            ("maxHashSlotNum", self.index_slots.to_string()),
            ("maxIndexNum", self.index_entries_max.to_string()),
            (
                "registerNameServerPeriod",
                self.register_period_ms.to_string(),
            ),
            ("deleteWhen", self.delete_when.clone()),
            ("fileReservedTime", self.file_reserved_hours.to_string()),
            (
                "diskMaxUsedSpaceRatio",
                self.disk_max_used_ratio_percent.to_string(),
            ),
            (
                "messageDelayLevel",
                crate::delay::format_levels(&self.delay_levels_ms),
            ),
            ("timerWheelEnable", self.timer_wheel_enable.to_string()),
            ("timerMaxDelaySec", self.timer_max_delay_sec.to_string()),
            (
                "popInflightMaxPerQueue",
                self.pop_in_flight_max_per_queue.to_string(),
            ),
            (
                "popInflightMaxPerGroup",
                self.pop_in_flight_max_per_group.to_string(),
            ),
            ("nonPersistentTopics", self.non_persistent_topics.join(",")),
            (
                "transactionTimeOut",
                self.transaction.timeout_ms.to_string(),
            ),
            (
                "transactionCheckInterval",
                self.transaction.interval_ms.to_string(),
            ),
            (
                "transactionCheckMax",
                self.transaction.check_max.to_string(),
            ),
            (
                "nonPersistentQueueBytes",
                self.non_persistent_queue_bytes.to_string(),
            ),
            (
                "nonPersistentBytesMax",
                self.non_persistent_bytes_max.to_string(),
            ),
            (
                "enablePropertyFilter",
                self.enable_property_filter.to_string(),
            ),
        ]
    }

    /// Applies a properties file on top of `self`. Returns the keys it did not act on.
    pub fn apply_properties(&mut self, text: &str) -> Result<Vec<UnknownKey>, ConfigError> {
        let mut unknown = Vec::new();
        let mut flush_interval_ms = match self.flush {
            FlushMode::Async { interval_ms, .. } => interval_ms,
            FlushMode::Sync { .. } => 500,
        };
        let mut least_pages = match self.flush {
            FlushMode::Async { least_pages, .. } => least_pages,
            FlushMode::Sync { .. } => 4,
        };
        let mut sync_timeout_ms = match self.flush {
            FlushMode::Sync { timeout_ms } => timeout_ms,
            FlushMode::Async { .. } => 5_000,
        };
        let mut sync_flush = matches!(self.flush, FlushMode::Sync { .. });
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
                continue;
            }
            let Some((key, value)) = split_property(trimmed) else {
                return Err(ConfigError {
                    line,
                    key: trimmed.to_string(),
                    value: String::new(),
                    allowed: "a line of the form key=value".into(),
                });
            };
            let field = Field { line, key, value };
            match key {
                "brokerClusterName" => self.cluster_name = field.name()?,
                "brokerName" => self.broker_name = field.name()?,
                "brokerId" => self.broker_id = field.number(0, 1_000_000)?,
                "namesrvAddr" => {
                    self.namesrv_addrs = value
                        .split(';')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                }
                "brokerIP1" => self.broker_ip = field.ip()?,
                "bindAddress" => self.bind_ip = Some(field.ip()?),
                "listenPort" => self.listen_port = field.number(0, 65_535)?,
                "defaultTopicQueueNums" => self.default_topic_queue_nums = field.number(1, 1024)?,
                "autoCreateTopicEnable" => self.auto_create_topic = field.boolean()?,
                "traceTopicEnable" => self.trace_topic_enable = field.boolean()?,
                "msgTraceTopicName" => {
                    crate::topic::validate_topic_name(value)
                        .map_err(|error| field.invalid(&format!("a topic name ({error})")))?;
                    self.msg_trace_topic_name = value.to_string();
                }
                "storeReplyMessageEnable" => self.store_reply_message_enable = field.boolean()?,
                "autoCreateSubscriptionGroup" => {
                    self.auto_create_subscription_group = field.boolean()?
                }
                "useServerSideResetOffset" => {
                    self.use_server_side_reset_offset = field.boolean()?
                }
                "brokerPermission" => self.broker_permission = field.number(0, 15)?,
                "maxMessageSize" => self.max_message_bytes = field.number(1, 1024 * 1024 * 1024)?,
                "brokerRole" => {
                    self.role = match value {
                        "ASYNC_MASTER" => BrokerRole::AsyncMaster,
                        "SYNC_MASTER" => BrokerRole::SyncMaster,
                        "SLAVE" => BrokerRole::Slave,
                        _ => return Err(field.invalid("one of ASYNC_MASTER, SYNC_MASTER, SLAVE")),
                    }
                }
                "flushDiskType" => {
                    sync_flush = match value {
                        "ASYNC_FLUSH" => false,
                        "SYNC_FLUSH" => true,
                        _ => return Err(field.invalid("one of ASYNC_FLUSH, SYNC_FLUSH")),
                    }
                }
                "haListenPort" => self.ha_listen_port = Some(field.number(0, 65_535)?),
                "haMasterAddress" => {
                    self.ha_master_addr = Some(value.trim().to_string()).filter(|a| !a.is_empty())
                }
                "slaveTimeout" => self.slave_timeout_ms = field.number(1, 3_600_000)?,
                "totalReplicas" => self.total_replicas = field.number(1, 16)?,
                "slaveReadEnable" => self.slave_read_enable = field.boolean()?,
                "accessMessageInMemoryMaxRatio" => {
                    self.in_memory_percent_max = field.number(0, 100)?
                }
                "inSyncReplicas" => self.in_sync_replicas = field.number(1, 16)?,
                "minInSyncReplicas" => self.min_in_sync_replicas = field.number(1, 16)?,
                "flushIntervalCommitLog" => flush_interval_ms = field.number(1, 3_600_000)?,
                "flushCommitLogLeastPages" => least_pages = field.number(0, 1_000_000)?,
                "syncFlushTimeout" => sync_timeout_ms = field.number(1, 3_600_000)?,
                "storePathRootDir" => self.store_root = field.path()?,
                "storePathCommitLog" => self.store_commitlog = Some(field.path()?),
                "storePathConsumeQueue" => self.store_consume_queue = Some(field.path()?),
                "storePathIndex" => self.store_index = Some(field.path()?),
                "storeCheckpoint" => self.store_checkpoint = Some(field.path()?),
                "abortFile" => self.store_abort = Some(field.path()?),
                "mapedFileSizeCommitLog" | "mappedFileSizeCommitLog" => {
                    // Offsets within a segment are i32 on the wire and in the ConsumeQueue.
                    self.commitlog_segment_bytes = field.number(4096, i32::MAX as u64)?
                }
                "mapedFileSizeConsumeQueue" | "mappedFileSizeConsumeQueue" => {
                    // A byte size in RocketMQ, rounded up to whole 20-byte entries; the most
                    // is 1 GiB of entries rounded up, so that every size printed reads back.
                    let bytes: u64 =
                        field.number(20, (1024 * 1024 * 1024_u64).div_ceil(20) * 20)?;
                    self.consume_queue_entries_per_file = bytes.div_ceil(20);
                }
                "maxHashSlotNum" => self.index_slots = field.number(1, 100_000_000)?,
                "maxIndexNum" => self.index_entries_max = field.number(1, 400_000_000)?,
                "registerNameServerPeriod" => {
                    self.register_period_ms = field.number(1_000, 60_000)?
                }
                "deleteWhen" => self.delete_when = field.delete_when()?,
                "fileReservedTime" => self.file_reserved_hours = field.number(0, 1_000_000)?,
                "diskMaxUsedSpaceRatio" => {
                    self.disk_max_used_ratio_percent = field.number(10, 95)?
                }
                "messageDelayLevel" => {
                    self.delay_levels_ms = crate::delay::parse_levels(value)
                        .map_err(|allowed| field.invalid(allowed))?
                }
                "timerWheelEnable" => self.timer_wheel_enable = field.boolean()?,
                "timerMaxDelaySec" => {
                    self.timer_max_delay_sec = field.number(1, 10 * 365 * 86_400)?
                }
                "popInflightMaxPerQueue" => {
                    self.pop_in_flight_max_per_queue = field.number(1, 10_000_000)?
                }
                "transactionTimeOut" => {
                    self.transaction.timeout_ms = field.number(0, 30 * 86_400_000)?
                }
                "transactionCheckInterval" => {
                    self.transaction.interval_ms = field.number(100, 86_400_000)?
                }
                "transactionCheckMax" => self.transaction.check_max = field.number(0, 10_000)?,
                "popInflightMaxPerGroup" => {
                    self.pop_in_flight_max_per_group = field.number(1, 100_000_000)?
                }
                "nonPersistentTopics" => {
                    let mut topics = Vec::new();
                    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                        crate::topic::validate_topic_name(name).map_err(|error| {
                            field.invalid(&format!(
                                "a comma-separated list of topic names ({error})"
                            ))
                        })?;
                        topics.push(name.to_string());
                    }
                    self.non_persistent_topics = topics;
                }
                "nonPersistentQueueBytes" => {
                    self.non_persistent_queue_bytes = field.number(64 * 1024, 1 << 40)?
                }
                "nonPersistentBytesMax" => {
                    self.non_persistent_bytes_max = field.number(64 * 1024, 1 << 40)?
                }
                "enablePropertyFilter" => self.enable_property_filter = field.boolean()?,
                _ => unknown.push(UnknownKey {
                    line,
                    key: key.to_string(),
                }),
            }
        }
        self.flush = if sync_flush {
            FlushMode::Sync {
                timeout_ms: sync_timeout_ms,
            }
        } else {
            FlushMode::Async {
                interval_ms: flush_interval_ms,
                least_pages,
            }
        };
        Ok(unknown)
    }
}

struct Field<'a> {
    line: usize,
    key: &'a str,
    value: &'a str,
}

impl Field<'_> {
    fn invalid(&self, allowed: &str) -> ConfigError {
        ConfigError {
            line: self.line,
            key: self.key.to_string(),
            value: self.value.to_string(),
            allowed: allowed.to_string(),
        }
    }

    fn number<T>(&self, min: T, max: T) -> Result<T, ConfigError>
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        match self.value.parse::<T>() {
            Ok(parsed) if parsed >= min && parsed <= max => Ok(parsed),
            _ => Err(self.invalid(&format!("a whole number from {min} to {max}"))),
        }
    }

    fn boolean(&self) -> Result<bool, ConfigError> {
        match self.value.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(self.invalid("true or false")),
        }
    }

    fn ip(&self) -> Result<IpAddr, ConfigError> {
        self.value
            .parse()
            .map_err(|_| self.invalid("an IPv4 or IPv6 address"))
    }

    fn path(&self) -> Result<PathBuf, ConfigError> {
        if self.value.is_empty() {
            return Err(self.invalid("a non-empty path"));
        }
        Ok(PathBuf::from(self.value))
    }

    fn name(&self) -> Result<String, ConfigError> {
        let ok = !self.value.is_empty()
            && self.value.len() <= 127
            && self
                .value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '%' || c == '|');
        if ok {
            Ok(self.value.to_string())
        } else {
            Err(self.invalid("1 to 127 characters of [A-Za-z0-9_-%|]"))
        }
    }

    fn delete_when(&self) -> Result<String, ConfigError> {
        let hours: Result<Vec<u32>, _> = self
            .value
            .split(';')
            .map(|h| h.trim().parse::<u32>())
            .collect();
        match hours {
            Ok(hours) if !hours.is_empty() && hours.iter().all(|h| *h < 24) => {
                Ok(self.value.to_string())
            }
            _ => Err(self.invalid("hours of the day 00 to 23, separated by ';'")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_set_known_keys_and_collect_unknown_ones() {
        let mut config = BrokerConfig::default();
        let text = "# comment\nbrokerName=broker-b\nlistenPort = 10921\nflushDiskType=SYNC_FLUSH\n\
                    sendMessageThreadPoolNums=128\nmapedFileSizeConsumeQueue=300000\nnamesrvAddr=a:1;b:2\n";
        let unknown = config.apply_properties(text).expect("valid");
        assert_eq!(config.broker_name, "broker-b");
        assert_eq!(config.listen_port, 10921);
        assert_eq!(config.flush, FlushMode::Sync { timeout_ms: 5_000 });
        assert_eq!(config.consume_queue_entries_per_file, 15_000);
        assert_eq!(
            config.namesrv_addrs,
            vec!["a:1".to_string(), "b:2".to_string()]
        );
        assert_eq!(
            unknown,
            vec![UnknownKey {
                line: 5,
                key: "sendMessageThreadPoolNums".into()
            }]
        );
    }

    #[test]
    fn keys_end_at_a_blank_as_in_java_properties() {
        let mut config = BrokerConfig::default();
        let text = "namesrvAddr 10.0.0.1:9876\nbrokerName\tbroker-c\nlistenPort : 10931\n";
        let unknown = config.apply_properties(text).expect("valid");
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(config.namesrv_addrs, vec!["10.0.0.1:9876".to_string()]);
        assert_eq!(config.broker_name, "broker-c");
        assert_eq!(config.listen_port, 10931);
        assert_eq!(split_property("key"), None);
        assert_eq!(split_property("key=a=b"), Some(("key", "a=b")));
        assert_eq!(split_property("key ="), Some(("key", "")));
    }

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

    #[test]
    fn a_bad_value_names_the_key_line_and_what_is_allowed() {
        let mut config = BrokerConfig::default();
        let error = config
            .apply_properties("brokerId=0\nflushDiskType=SOMETIMES\n")
            .unwrap_err();
        assert_eq!(error.line, 2);
        assert_eq!(error.key, "flushDiskType");
        assert!(
            error.to_string().contains("ASYNC_FLUSH, SYNC_FLUSH"),
            "{error}"
        );
        let error = config.apply_properties("listenPort=99999").unwrap_err();
        assert!(error.to_string().contains("0 to 65535"), "{error}");
        let error = config.apply_properties("justakey").unwrap_err();
        assert!(error.to_string().contains("key=value"), "{error}");
        // The store cannot address a segment past i32::MAX: refused here, by key and line.
        let error = config
            .apply_properties("mappedFileSizeCommitLog=4294967296")
            .unwrap_err();
        assert_eq!(error.key, "mappedFileSizeCommitLog");
        assert!(error.to_string().contains("2147483647"), "{error}");
        config
            .apply_properties("mappedFileSizeCommitLog=2147483647")
            .expect("the largest segment the store takes");
    }

    fn as_file(properties: &[(&str, String)]) -> String {
        properties
            .iter()
            .map(|(key, value)| format!("{key}={value}\n"))
            .collect()
    }

    #[test]
    fn the_printed_configuration_reads_back_as_the_same_configuration() {
        for text in [
            "",
            "brokerClusterName=C2\nbrokerName=broker-z\nbrokerId=1\nnamesrvAddr=10.0.0.1:9876;10.0.0.2:9876\n\
             brokerIP1=10.0.0.7\nbindAddress=0.0.0.0\nbrokerRole=SYNC_MASTER\nbrokerPermission=4\n\
             defaultTopicQueueNums=16\nautoCreateTopicEnable=false\nautoCreateSubscriptionGroup=false\n\
             maxMessageSize=1048576\nflushDiskType=SYNC_FLUSH\nsyncFlushTimeout=2500\n\
             storePathRootDir=/data/q\nstorePathCommitLog=/fast/commitlog\n\
             mappedFileSizeCommitLog=67108864\nmappedFileSizeConsumeQueue=6000\nmaxHashSlotNum=1000\n\
             maxIndexNum=4000\nregisterNameServerPeriod=10000\ndeleteWhen=01;13\nfileReservedTime=6\n\
             diskMaxUsedSpaceRatio=60\nmessageDelayLevel=1s 90s 2m 1h 2d\n",
            "flushDiskType=ASYNC_FLUSH\nflushIntervalCommitLog=200\nflushCommitLogLeastPages=0\n",
            "traceTopicEnable=true\nmsgTraceTopicName=Trace_1\nstoreReplyMessageEnable=false\n",
        ] {
            let mut config = BrokerConfig::default();
            config.apply_properties(text).expect("valid");
            let printed = config.properties(10911);
            let mut read_back = BrokerConfig::default();
            let unknown = read_back
                .apply_properties(&as_file(&printed))
                .expect("the printed lines are valid");
            assert!(unknown.is_empty(), "every printed key is read: {unknown:?}");
            assert_eq!(read_back.properties(10911), printed);
        }
        let mut config = BrokerConfig::default();
        config
            .apply_properties("flushDiskType=SYNC_FLUSH\nmessageDelayLevel=1s 90s 2m 1h 2d")
            .unwrap();
        let printed: std::collections::HashMap<_, _> = config.properties(0).into_iter().collect();
        assert_eq!(printed["flushDiskType"], "SYNC_FLUSH");
        assert_eq!(printed["messageDelayLevel"], "1s 90s 2m 1h 2d");
        assert_eq!(printed["mappedFileSizeCommitLog"], "1073741824");
        assert_eq!(printed["mappedFileSizeConsumeQueue"], "6000000");

        // The largest size rounds up past 1 GiB, and that rounded figure reads back too.
        let mut config = BrokerConfig::default();
        config
            .apply_properties("mappedFileSizeConsumeQueue=1073741824")
            .unwrap();
        let printed = config.properties(0);
        let mut read_back = BrokerConfig::default();
        read_back.apply_properties(&as_file(&printed)).unwrap();
        assert_eq!(read_back.properties(0), printed);
    }
}
