//! `broker.conf` as text, both ways: `BrokerConfig::apply_properties` reads RocketMQ's
//! `key=value` lines (as `java.util.Properties` splits them), and `BrokerConfig::properties`
//! prints the configuration in effect as the same keys. Both go through `keys::all()`, where
//! each key's name, parsing and printing sit together.

use super::field::Field;
use super::keys::{self, Printing, Reading};
use super::{BrokerConfig, ConfigError, LiveKey, UnknownKey};

impl BrokerConfig {
    /// The configuration in effect, as RocketMQ's keys and values, in the order of a broker.conf
    /// (what GET_BROKER_CONFIG answers and `mqadmin getBrokerConfig` prints). `listen_port` is
    /// the port actually bound, which differs from `listenPort=0`. Applying these lines to a
    /// default configuration gives this one back.
    pub fn properties(&self, listen_port: u16) -> Vec<(&'static str, String)> {
        let printing = Printing::of(self, listen_port);
        keys::all()
            .map(|key| (key.name, (key.print)(&printing)))
            .collect()
    }

    /// Applies a properties file on top of `self`. Returns the keys it did not act on. On a
    /// bad line the keys before it are applied, except the flush keys, which take effect
    /// together once the whole file is read.
    pub fn apply_properties(&mut self, text: &str) -> Result<Vec<UnknownKey>, ConfigError> {
        let mut reading = Reading::of(self);
        let mut unknown = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
                continue;
            }
            let Some((key, value)) = quiver_wire::properties::split_line(trimmed) else {
                return Err(ConfigError {
                    line,
                    key: trimmed.to_string(),
                    value: String::new(),
                    allowed: "a line of the form key=value".into(),
                });
            };
            match keys::find(key) {
                Some(known) => (known.read)(&mut reading, &Field { line, key, value })?,
                None => unknown.push(UnknownKey {
                    line,
                    key: key.to_string(),
                }),
            }
        }
        reading.finish();
        Ok(unknown)
    }
}

impl BrokerConfig {
    /// The live key spelled `name`, if it is one.
    pub fn live_key(name: &str) -> Option<LiveKey> {
        keys::find(name).and_then(|key| key.live)
    }

    /// The keys `text` sets, as the live keys they are; Err with the name of the first key that
    /// changes only at start and the names of those that change at run time. Lines are split as
    /// `apply_properties` splits them (which checks the values).
    pub fn live_keys(text: &str) -> Result<Vec<LiveKey>, (String, Vec<&'static str>)> {
        let mut live = Vec::new();
        for raw in text.lines() {
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
                continue;
            }
            let key = quiver_wire::properties::split_line(trimmed).map_or(trimmed, |(key, _)| key);
            match keys::find(key).and_then(|known| known.live) {
                Some(found) => live.push(found),
                None => return Err((key.to_string(), keys::live_names().collect())),
            }
        }
        Ok(live)
    }
}

/// Splits a properties line as java.util.Properties does: the key ends at the first `=`, `:`
/// or blank; then blanks and one `=` or `:` are skipped (`key=value`, `key: value` and
/// `key value` all mean the same). None for a line that is only a key.
#[cfg(test)]
mod tests {
    use super::*;
    use quiver_store::FlushMode;

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
        assert_eq!(quiver_wire::properties::split_line("key"), None);
        assert_eq!(
            quiver_wire::properties::split_line("key=a=b"),
            Some(("key", "a=b"))
        );
        assert_eq!(
            quiver_wire::properties::split_line("key ="),
            Some(("key", ""))
        );
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
