//! Admin requests: UPDATE_AND_CREATE_TOPIC, DELETE_TOPIC_IN_BROKER, GET_BROKER_RUNTIME_INFO,
//! GET_BROKER_CONFIG, QUERY_TOPIC_CONSUME_BY_WHO.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use quiver_wire::body::{self, GroupList, KvTable, TopicConfig};
use quiver_wire::code::response_code;
use quiver_wire::header::{
    ext_or_err, CreateTopicRequestHeader, DeleteTopicRequestHeader, QueryTopicConsumeByWhoHeader,
};
use quiver_wire::Command;

use super::{answer, off_the_workers, topic_refusal, Call, Handled, Refusal};
use crate::config::{BrokerConfig, LiveKey};
use crate::state::Administering;
use crate::topic::{
    is_system_topic, validate_topic_name, PERSISTENCE_ATTRIBUTE, PERSISTENCE_DISK,
    PERSISTENCE_MEMORY,
};

/// Queue counts above this are almost surely a typo; Java has no limit, but every queue costs a
/// ConsumeQueue directory and a pull loop per consumer.
const TOPIC_QUEUES_MAX: i32 = 1024;

pub fn create_topic(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.administering();
    let header = CreateTopicRequestHeader::from_ext(ext_or_err(request)?)?;
    validate_topic_name(&header.topic)
        .map_err(|e| Refusal::new(response_code::INVALID_PARAMETER, e.to_string()))?;
    let config = broker.config;
    if is_system_topic(&header.topic, &config.cluster_name, &config.broker_name) {
        let remark = format!("The topic[{}] is conflict with system topic.", header.topic);
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    for (name, value) in [
        ("readQueueNums", header.read_queue_nums),
        ("writeQueueNums", header.write_queue_nums),
    ] {
        if !(1..=TOPIC_QUEUES_MAX).contains(&value) {
            let remark = format!("{name} {value} is out of range 1..={TOPIC_QUEUES_MAX}");
            return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
        }
    }
    let existing = broker.topics.get(&header.topic);
    let before = existing
        .as_ref()
        .map(|topic| topic.attributes.clone())
        .unwrap_or_default();
    let attributes = change_attributes(&before, header.attributes.as_deref().unwrap_or(""))
        .map_err(|e| Refusal::new(response_code::INVALID_PARAMETER, e))?;
    let persistence = |attributes: &BTreeMap<String, String>| {
        attributes
            .get(PERSISTENCE_ATTRIBUTE)
            .cloned()
            .unwrap_or_default()
    };
    if existing.is_some() && persistence(&before) != persistence(&attributes) {
        let remark = format!(
            "the {PERSISTENCE_ATTRIBUTE} of topic {} cannot change once it exists: delete the \
             topic and create it again",
            header.topic
        );
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    let config = TopicConfig {
        topic_name: header.topic.clone(),
        read_queue_nums: header.read_queue_nums,
        write_queue_nums: header.write_queue_nums,
        perm: header.perm,
        topic_filter_type: header.topic_filter_type,
        topic_sys_flag: header.topic_sys_flag,
        order: header.order,
        attributes,
    };
    let changed = broker
        .topics
        .upsert(config)
        .map_err(|e| topic_refusal(e, response_code::SYSTEM_ERROR))?;
    if changed {
        tracing::info!(topic = %header.topic, queues = header.write_queue_nums, "topic created or updated");
        broker.topics_changed();
    }
    // The answer waits until the change is in topics.json, as RocketMQ's does; the write runs
    // off the workers, and admin creations at once share it.
    if !broker.topics.is_dirty() {
        return answer(request.response_to(response_code::SUCCESS));
    }
    let version = broker.topics.version();
    off_the_workers(call, request, move |broker, request| {
        broker
            .administering()
            .topics
            .persist_through(version)
            .map_err(|e| topic_refusal(e, response_code::SYSTEM_ERROR))?;
        Ok(request.response_to(response_code::SUCCESS))
    })
}

/// Applies RocketMQ 5's attribute changes (`+key=value` sets, `-key` removes, comma-separated;
/// AttributeParser's format) to `before`. The one attribute Quiver acts on is
/// `persistence` (`memory` or `disk`); others are kept as given, as RocketMQ keeps the ones it
/// knows.
pub fn change_attributes(
    before: &BTreeMap<String, String>,
    changes: &str,
) -> Result<BTreeMap<String, String>, String> {
    let mut attributes = before.clone();
    let mut seen = std::collections::BTreeSet::new();
    for change in changes.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let (key, value) = if let Some(set) = change.strip_prefix('+') {
            let (key, value) = set
                .split_once('=')
                .ok_or_else(|| format!("attribute change {change:?} is not +key=value"))?;
            (key, Some(value))
        } else if let Some(key) = change.strip_prefix('-') {
            (key, None)
        } else {
            return Err(format!(
                "attribute change {change:?} starts with neither + nor -"
            ));
        };
        if key.is_empty() || !seen.insert(key.to_string()) {
            return Err(format!("attribute key {key:?} is empty or given twice"));
        }
        if key == PERSISTENCE_ATTRIBUTE
            && value.is_some_and(|v| v != PERSISTENCE_MEMORY && v != PERSISTENCE_DISK)
        {
            return Err(format!(
                "{PERSISTENCE_ATTRIBUTE} is {PERSISTENCE_MEMORY} or {PERSISTENCE_DISK}, not {:?}",
                value.unwrap_or_default()
            ));
        }
        match value {
            Some(value) => attributes.insert(key.to_string(), value.to_string()),
            None => attributes.remove(key),
        };
    }
    // `disk` is the default: kept out of the table, so that a topic created with it and one
    // created without are the same topic.
    if attributes.get(PERSISTENCE_ATTRIBUTE).map(String::as_str) == Some(PERSISTENCE_DISK) {
        attributes.remove(PERSISTENCE_ATTRIBUTE);
    }
    Ok(attributes)
}

/// DELETE_TOPIC_IN_BROKER (215), as RocketMQ answers it: the topic's configuration, its
/// consumer offsets and its ConsumeQueues go. Its records stay in the CommitLog until retention
/// and are never served again, also when the topic is created anew (its offsets then start at
/// 0, as in RocketMQ). The name server keeps the route until it is told (mqadmin does both).
pub fn delete_topic(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.administering();
    let header = DeleteTopicRequestHeader::from_ext(ext_or_err(request)?)?;
    let topic = header.topic.as_str();
    if topic.trim().is_empty() {
        return Err(Refusal::new(
            response_code::INVALID_PARAMETER,
            "The specified topic is blank.",
        ));
    }
    validate_topic_name(topic)
        .map_err(|e| Refusal::new(response_code::INVALID_PARAMETER, e.to_string()))?;
    let config = broker.config;
    if is_system_topic(topic, &config.cluster_name, &config.broker_name) {
        let remark = format!("The topic[{topic}] is conflict with system topic.");
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    let topic = topic.to_string();
    off_the_workers(call, request, move |broker, request| {
        delete(broker.administering(), &topic)?;
        Ok(request.response_to(response_code::SUCCESS))
    })
}

/// Deletes a topic, on a thread that may wait for disks: no append waits on its fsyncs (see
/// `Store::delete_topic`). A name the broker does not have is answered SUCCESS, as RocketMQ
/// answers it, and leaves no trace: no file is written for it.
fn delete(broker: Administering<'_>, topic: &str) -> Result<(), Refusal> {
    let system_error = |e: &dyn std::fmt::Display| {
        tracing::error!(topic, error = %e, "deleting topic failed");
        Refusal::new(response_code::SYSTEM_ERROR, e.to_string())
    };
    // RocketMQ's order. The configuration first: from then on sends and offset commits for
    // the topic are refused (or, with autoCreateTopicEnable, create it anew), so none lands in
    // queues about to go or puts an old offset back.
    let existed = broker.topics.remove(topic).map_err(|e| system_error(&e))?;
    if existed {
        broker
            .topics
            .persist_if_dirty()
            .map_err(|e| system_error(&e))?;
    }
    // Offsets next, durably: offsets outliving the queues would make the consumers of a topic
    // created anew under this name skip its first messages.
    if broker.offsets.remove_topic(topic) {
        broker
            .offsets
            .persist_if_dirty()
            .map_err(|e| system_error(&e))?;
    }
    broker.pop.remove_topic(topic);
    let deletion = broker
        .store
        .delete_topic(topic)
        .map_err(|e| system_error(&e))?;
    tracing::info!(
        topic,
        existed,
        queues = deletion.queues,
        position = deletion.position,
        "topic deleted"
    );
    Ok(())
}

/// The figures `mqadmin clusterList` and `brokerStatus` print.
pub fn runtime_info(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.administering();
    let mut table = BTreeMap::new();
    put_traffic(broker, &mut table);
    put_storage(broker, &mut table);
    put_store_faults(broker, &mut table);
    put_process(broker, call.now_ms, &mut table);
    let body = body::to_json(&KvTable { table });
    answer(request.response_to(response_code::SUCCESS).with_body(body))
}

/// Rates and totals of messages put and got.
fn put_traffic(broker: Administering<'_>, table: &mut BTreeMap<String, String>) {
    let mut put = |key: &str, value: String| {
        table.insert(key.to_string(), value);
    };
    let put_total = broker.counters.messages_put.load(Ordering::Relaxed);
    let got_total = broker.counters.messages_got.load(Ordering::Relaxed);
    let tps = broker.counters.all_tps();
    // RocketMQ reports each as "10 s, 60 s, 600 s" rates; one sampling period stands for all
    // three here.
    let three = |rate: f64| format!("{rate:.2} {rate:.2} {rate:.2}");
    put("putTps", three(tps.put));
    put("getTransferredTps", three(tps.got));
    put("getTotalTps", three(tps.pulls));
    put("getFoundTps", three(tps.pulls_found));
    put("getMissTps", three((tps.pulls - tps.pulls_found).max(0.0)));
    put("msgPutTotalTodayNow", put_total.to_string());
    put("msgGetTotalTodayNow", got_total.to_string());
    // Daily counters reset at midnight in Java; we count since start and report that.
    for key in [
        "msgPutTotalTodayMorning",
        "msgGetTotalTodayMorning",
        "msgPutTotalYesterdayMorning",
        "msgGetTotalYesterdayMorning",
    ] {
        put(key, "0".into());
    }
}

/// The CommitLog, the slaves, the rings of non-persistent topics and the timer wheel.
fn put_storage(broker: Administering<'_>, table: &mut BTreeMap<String, String>) {
    let mut put = |key: &str, value: String| {
        table.insert(key.to_string(), value);
    };
    let stats = broker.store.stats();
    put("commitLogMinOffset", stats.min_position.to_string());
    put("commitLogMaxOffset", stats.written_position.to_string());
    put("flushedPosition", stats.flushed_position.to_string());
    // A master's slaves: how many follow it, and the highest position one has confirmed.
    put("haConnectionCount", broker.replication.slaves().to_string());
    let confirmed = broker.replication.confirmed_position();
    put("haSlaveAckOffset", confirmed.to_string());
    // Non-persistent topics: bytes in their rings, and messages dropped (evicted from a full
    // ring, and skipped by groups that fell behind it).
    let (memory_bytes, drops) = broker.store.memory_usage();
    put("nonPersistentBytes", memory_bytes.to_string());
    let evicted: u64 = drops.values().map(|d| d.evicted).sum();
    put("nonPersistentEvicted", evicted.to_string());
    let skipped: u64 = drops
        .values()
        .flat_map(|d| d.skipped_by_group.values())
        .sum();
    put("nonPersistentSkipped", skipped.to_string());
    let timer_pending = broker.counters.timer_pending.load(Ordering::Relaxed);
    put("timerPendingInMemory", timer_pending.to_string());
}

/// The store's I/O faults: whether sends are refused (RocketMQ's store "not writable"), and
/// failed writes and fsyncs by kind of file with the last of each.
fn put_store_faults(broker: Administering<'_>, table: &mut BTreeMap<String, String>) {
    let mut put = |key: String, value: String| {
        table.insert(key, value);
    };
    let faults = broker.store.io_faults();
    let unwritable = faults.unwritable.as_ref();
    put("storeUnwritable".into(), unwritable.is_some().to_string());
    put(
        "storeUnwritableReason".into(),
        unwritable.map(ToString::to_string).unwrap_or_default(),
    );
    put(
        "storeUnwritableSinceMs".into(),
        unwritable.map_or(0, |u| u.since_ms).to_string(),
    );
    put("storeIoErrors".into(), faults.total_errors().to_string());
    for kind in &faults.kinds {
        let name = kind.kind.name();
        put(format!("storeIoErrors{name}"), kind.errors.to_string());
        if let Some(last) = &kind.last {
            put(format!("storeIoLastError{name}"), last.to_string());
            put(format!("storeIoLastErrorMs{name}"), last.at_ms.to_string());
        }
    }
}

/// The version, the clients, parked pulls and how long the broker has run. RocketMQ's thread
/// pool figures are 0: requests wait in no pool here.
fn put_process(broker: Administering<'_>, now_ms: i64, table: &mut BTreeMap<String, String>) {
    let mut put = |key: &str, value: String| {
        table.insert(key.to_string(), value);
    };
    let version = format!("quiver {}", env!("CARGO_PKG_VERSION"));
    put("brokerVersionDesc", version);
    put("brokerVersion", quiver_wire::SERVER_VERSION.to_string());
    put("brokerActive", "true".into());
    for key in [
        "sendThreadPoolQueueSize",
        "sendThreadPoolQueueHeadWaitTimeMills",
        "pullThreadPoolQueueSize",
        "pullThreadPoolQueueHeadWaitTimeMills",
        "pageCacheLockTimeMills",
    ] {
        put(key, "0".into());
    }
    let (producers, consumers) = broker.clients.counts();
    put("parkedPulls", broker.waiters.parked().to_string());
    // What connections' requests and answers hold now, against `quiverBrokerBytesMax`.
    put("quiverBytesHeld", broker.budget.used().to_string());
    put("quiverBytesMax", broker.budget.max().to_string());
    // How the metadata tables fill against their limits, and how often topics.json was
    // written (changes are batched: many creations, few writes).
    put("topicCount", broker.topics.count().to_string());
    put("topicConfigWrites", broker.topics.writes().to_string());
    put("clientIdCount", broker.clients.ids().to_string());
    put("producerClients", producers.to_string());
    put("consumerClients", consumers.to_string());
    put("bootTimestamp", broker.started_ms.to_string());
    let uptime_s = (now_ms - broker.started_ms).max(0) / 1000;
    let runtime = format!(
        "[ {} days, {} hours, {} minutes, {} seconds ]",
        uptime_s / 86_400,
        uptime_s / 3_600 % 24,
        uptime_s / 60 % 60,
        uptime_s % 60
    );
    put("runtime", runtime);
}

/// The configuration in effect as `key=value` lines, the body `mqadmin getBrokerConfig` reads
/// with java.util.Properties. The `version` header is the configuration's data version: it
/// never changes while the broker runs, so it counts 0 since the start.
pub fn broker_config(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.administering();
    let text: String = broker
        .config
        .properties(broker.store_host.port())
        .into_iter()
        .map(|(key, value)| {
            let now = BrokerConfig::live_key(key).map(|live| live_value(broker, live));
            (key, now.unwrap_or(value))
        })
        .map(|(key, value)| format!("{key}={}\n", properties_escape(&value)))
        .collect();
    let version = format!(
        "{{\"counter\":0,\"stateVersion\":0,\"timestamp\":{}}}",
        broker.started_ms
    );
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_ext(quiver_wire::ExtFields::new().with("version", version))
            .with_body(text.into_bytes()),
    )
}

/// The keys `mqadmin updateBrokerConfig` can change while the broker runs.
/// A live key's value as it is now.
fn live_value(broker: Administering<'_>, key: LiveKey) -> String {
    match key {
        LiveKey::BrokerPermission => broker.live.broker_permission().to_string(),
        LiveKey::AutoCreateTopic => broker.live.auto_create_topic().to_string(),
        LiveKey::AutoCreateSubscriptionGroup => broker.groups.auto_create().to_string(),
    }
}

/// UPDATE_BROKER_CONFIG (`mqadmin updateBrokerConfig -k KEY -v VALUE`): the body is
/// `key=value` lines. The live keys (`LiveKey`, marked in the key table) take effect at once; any other key is refused
/// with the reason (it is read only at start: broker.conf is where it changes), rather than
/// accepted and silently ignored. Values are checked as broker.conf's are. As with RocketMQ
/// started from a config file, a change lasts until the broker restarts.
pub fn update_broker_config(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.administering();
    let text = std::str::from_utf8(&request.body).map_err(|_| {
        Refusal::new(
            response_code::SYSTEM_ERROR,
            "string2Properties error: the body is not UTF-8",
        )
    })?;
    // Checked on a copy, so that a bad line changes nothing.
    let mut checked = broker.config.clone();
    let unknown = checked
        .apply_properties(text)
        .map_err(|e| Refusal::new(response_code::INVALID_PARAMETER, e.to_string()))?;
    if let Some(key) = unknown.first() {
        let remark = format!("unknown broker config key {}", key.key);
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    let keys = BrokerConfig::live_keys(text).map_err(|(fixed, live)| {
        let remark = format!(
            "{fixed} is read only at start: set it in broker.conf and restart the broker \
             (keys that change at run time: {})",
            live.join(", ")
        );
        Refusal::new(response_code::INVALID_PARAMETER, remark)
    })?;
    for key in keys {
        match key {
            LiveKey::BrokerPermission => {
                let perm = checked.broker_permission;
                broker.live.broker_permission.store(perm, Ordering::Relaxed);
                // Name servers learn the broker's state at its next registration: now.
                broker.topics_changed();
            }
            LiveKey::AutoCreateTopic => broker
                .live
                .auto_create_topic
                .store(checked.auto_create_topic, Ordering::Relaxed),
            LiveKey::AutoCreateSubscriptionGroup => broker
                .groups
                .set_auto_create(checked.auto_create_subscription_group),
        }
        tracing::info!(?key, value = %live_value(broker, key), peer = %call.connection.peer, "broker config updated");
    }
    answer(request.response_to(response_code::SUCCESS))
}

/// `value` as `java.util.Properties.store` writes a value, so that `Properties.load` (which
/// reads ISO 8859-1 and treats `\\` as an escape) gives it back unchanged: a path with a
/// backslash or a non-ASCII character included.
fn properties_escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (index, c) in value.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            ' ' if index == 0 => out.push_str("\\ "),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{c}' => out.push_str("\\f"),
            '=' | ':' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
        }
    }
    out
}

pub fn topic_consumed_by(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.administering();
    let header = QueryTopicConsumeByWhoHeader::from_ext(ext_or_err(request)?)?;
    let mut group_list: std::collections::BTreeSet<String> = broker
        .offsets
        .groups_of_topic(&header.topic)
        .into_iter()
        .collect();
    group_list.extend(broker.clients.groups_subscribed_to(&header.topic));
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(body::to_json(&GroupList { group_list })),
    )
}

#[cfg(test)]
mod tests {
    use super::properties_escape;

    #[test]
    fn config_values_are_escaped_as_java_properties_store_escapes_them() {
        assert_eq!(properties_escape("/data/store"), "/data/store");
        assert_eq!(properties_escape("a;b:9876"), "a;b\\:9876");
        assert_eq!(properties_escape(r"C:\store"), r"C\:\\store");
        assert_eq!(properties_escape(" lead  inner"), r"\ lead  inner");
        assert_eq!(properties_escape("x=y#z!"), r"x\=y\#z\!");
        assert_eq!(properties_escape("tab\tnl\n"), r"tab\tnl\n");
        assert_eq!(
            properties_escape("caf\u{e9}/\u{1f600}"),
            r"caf\u00E9/\uD83D\uDE00"
        );
    }
}
