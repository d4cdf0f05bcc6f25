//! `broker.conf` as text, both ways: `BrokerConfig::apply_properties` reads RocketMQ's
//! `key=value` lines (as `java.util.Properties` splits them), and `BrokerConfig::properties`
//! prints the configuration in effect as the same keys, so each key's name, parsing and
//! printing sit together.

use super::*;

impl BrokerConfig {
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
