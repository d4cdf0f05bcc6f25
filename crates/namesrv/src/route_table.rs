//! The name server's state as plain data: which brokers are alive, which topics they serve, and
//! the KV config. No I/O and no clock: callers pass `now_ms`, so expiry is testable.

use std::collections::{BTreeMap, BTreeSet};

use quiver_wire::body::{
    BrokerData, ClusterInfo, DataVersion, QueueData, TopicConfig, TopicList, TopicRouteData,
};

/// Identifies the connection a broker registered over, so a closed connection can drop it.
pub type ConnectionId = u64;

/// Java's name server expires a broker after 120 s without a registration.
pub const BROKER_EXPIRY_MS_DEFAULT: i64 = 120_000;

/// RocketMQ's PermName bits.
const PERM_READ: i32 = 4;
const PERM_WRITE: i32 = 2;

#[derive(Debug, Clone)]
struct LiveBroker {
    cluster: String,
    broker_name: String,
    last_update_ms: i64,
    expiry_ms: i64,
    connection: Option<ConnectionId>,
    /// The topic-config version of its last registration with a body.
    data_version: Option<DataVersion>,
    /// Where its slaves reach its HA port.
    ha_server_addr: String,
}

/// What a broker tells the name server when it registers.
#[derive(Debug, Clone)]
pub struct Registration {
    pub cluster: String,
    pub broker_name: String,
    pub broker_addr: String,
    pub broker_id: i64,
    pub expiry_ms: Option<i64>,
    /// Where its slaves reach its HA port (`haServerAddr`).
    pub ha_server_addr: String,
    /// The version of the broker's topic config; `None` when the registration has no body.
    pub data_version: Option<DataVersion>,
    pub topics: BTreeMap<String, TopicConfig>,
}

/// What a registration answers: to a slave, its master's addresses, so that it can follow it
/// (RocketMQ's RegisterBrokerResult); empty for a master or a slave whose master is not here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registered {
    pub master_addr: Option<String>,
    pub ha_server_addr: Option<String>,
}

#[derive(Debug, Default)]
pub struct RouteTable {
    /// broker name -> (cluster, id -> address)
    brokers: BTreeMap<String, (String, BTreeMap<i64, String>)>,
    clusters: BTreeMap<String, BTreeSet<String>>,
    /// topic -> broker name -> queue data
    topics: BTreeMap<String, BTreeMap<String, QueueData>>,
    /// broker address -> liveness
    live: BTreeMap<String, LiveBroker>,
    kv: BTreeMap<String, BTreeMap<String, String>>,
    expiry_ms_default: i64,
}

impl RouteTable {
    pub fn new(expiry_ms_default: i64) -> RouteTable {
        RouteTable {
            expiry_ms_default,
            ..RouteTable::default()
        }
    }

    /// Records a registration. Only the master (id 0) defines the topics a broker serves, as
    /// in RocketMQ: slaves share their master's topics. A registration adds and updates topics
    /// and never removes one: a Java broker that creates a topic registers with that topic
    /// alone. A broker's topics go when its last address does.
    ///
    /// As in RocketMQ, a registration whose data version equals the one recorded for the
    /// address only adds the topics this broker does not serve yet here: what an operator
    /// changed on the name server since (a wiped write permission) stays until the broker's
    /// topic config changes.
    pub fn register(
        &mut self,
        registration: Registration,
        connection: Option<ConnectionId>,
        now_ms: i64,
    ) -> Registered {
        let Registration {
            cluster,
            broker_name,
            broker_addr,
            broker_id,
            expiry_ms,
            ha_server_addr,
            data_version,
            topics,
        } = registration;
        // The same address registering under another name or cluster leaves the old one: it
        // would otherwise stay, with its topics, after this address expires.
        if let Some(previous) = self.live.get(&broker_addr) {
            if previous.broker_name != broker_name || previous.cluster != cluster {
                self.unregister(&broker_addr);
            }
        }
        if let Some(holder) =
            self.outranked_by(&broker_name, broker_id, &broker_addr, data_version.as_ref())
        {
            tracing::warn!(
                broker = %broker_name,
                broker_id,
                %broker_addr,
                %holder,
                "registration ignored: a live broker holds this id with a higher stateVersion"
            );
            return Registered::default();
        }
        let first = self
            .brokers
            .get(&broker_name)
            .is_none_or(|(_, addrs)| !addrs.values().any(|addr| *addr == broker_addr));
        let previous_version = self
            .live
            .get(&broker_addr)
            .and_then(|live| live.data_version.clone());
        let changed = first || data_version.is_none() || previous_version != data_version;
        self.place_address(&cluster, &broker_name, broker_id, &broker_addr);
        if broker_id == 0 {
            self.serve_topics(&broker_name, topics, changed);
        }
        let registered = self.master_of(&broker_name, broker_id);
        self.live.insert(
            broker_addr,
            LiveBroker {
                cluster,
                broker_name,
                last_update_ms: now_ms,
                expiry_ms: expiry_ms.unwrap_or(self.expiry_ms_default),
                connection,
                data_version: data_version.or(previous_version),
                ha_server_addr,
            },
        );
        registered
    }

    /// Controller mode's fence (RocketMQ's `registerBroker`): when another live address holds
    /// `broker_id` of the set with a higher `stateVersion` (the master epoch it registered
    /// under), a registration of an older epoch is ignored, so a deposed master does not take
    /// id 0 back from its successor. Equal or higher replaces it. Returns the holder.
    fn outranked_by(
        &self,
        broker_name: &str,
        broker_id: i64,
        broker_addr: &str,
        data_version: Option<&DataVersion>,
    ) -> Option<String> {
        let holder = self.brokers.get(broker_name)?.1.get(&broker_id)?;
        if holder == broker_addr {
            return None;
        }
        let held = self.live.get(holder)?.data_version.as_ref()?.state_version;
        let new = data_version.map_or(0, |version| version.state_version);
        (held > new).then(|| holder.clone())
    }

    /// Files `broker_addr` under its cluster and its broker name, at `broker_id`.
    fn place_address(
        &mut self,
        cluster: &str,
        broker_name: &str,
        broker_id: i64,
        broker_addr: &str,
    ) {
        self.clusters
            .entry(cluster.to_owned())
            .or_default()
            .insert(broker_name.to_owned());
        let entry = self
            .brokers
            .entry(broker_name.to_owned())
            .or_insert_with(|| (cluster.to_owned(), BTreeMap::new()));
        entry.0 = cluster.to_owned();
        // An address moving to another id (a slave promoted, say) must not stay under both.
        entry
            .1
            .retain(|id, addr| *addr != broker_addr || *id == broker_id);
        entry.1.insert(broker_id, broker_addr.to_owned());
    }

    /// A master's topics: added, and updated only when its topic config `changed`.
    fn serve_topics(
        &mut self,
        broker_name: &str,
        topics: BTreeMap<String, TopicConfig>,
        changed: bool,
    ) {
        for (topic, config) in topics {
            let served = self
                .topics
                .get(&topic)
                .is_some_and(|queues| queues.contains_key(broker_name));
            if served && !changed {
                continue;
            }
            let queue_data = QueueData {
                broker_name: broker_name.to_owned(),
                read_queue_nums: config.read_queue_nums,
                write_queue_nums: config.write_queue_nums,
                perm: config.perm,
                topic_sys_flag: config.topic_sys_flag,
            };
            self.topics
                .entry(topic)
                .or_default()
                .insert(broker_name.to_owned(), queue_data);
        }
    }

    /// A slave's master: the address registered under id 0 of its broker name, and the HA
    /// address that master registered.
    fn master_of(&self, broker_name: &str, broker_id: i64) -> Registered {
        if broker_id == 0 {
            return Registered::default();
        }
        let Some(master_addr) = self
            .brokers
            .get(broker_name)
            .and_then(|(_, addrs)| addrs.get(&0))
        else {
            return Registered::default();
        };
        let ha_server_addr = self
            .live
            .get(master_addr)
            .map(|live| live.ha_server_addr.clone())
            .filter(|addr| !addr.is_empty());
        Registered {
            master_addr: Some(master_addr.clone()),
            ha_server_addr,
        }
    }

    /// Whether `version` differs from what `broker_addr` last registered (true when unknown):
    /// QUERY_DATA_VERSION, which brokers ask before a registration they may skip.
    pub fn data_version_changed(&self, broker_addr: &str, version: &DataVersion) -> bool {
        self.live
            .get(broker_addr)
            .and_then(|live| live.data_version.as_ref())
            != Some(version)
    }

    /// Takes the write permission off every topic the broker serves, so that producers send
    /// elsewhere while consumers drain it (RocketMQ's way to take a broker out of service).
    /// Returns how many topics it touched.
    pub fn wipe_write_perm(&mut self, broker_name: &str) -> usize {
        self.set_perm(broker_name, |perm| perm & !PERM_WRITE)
    }

    /// Gives every topic the broker serves read and write permission again, as RocketMQ does
    /// (whatever the permission was before). Returns how many topics it touched.
    pub fn add_write_perm(&mut self, broker_name: &str) -> usize {
        self.set_perm(broker_name, |_| PERM_READ | PERM_WRITE)
    }

    fn set_perm(&mut self, broker_name: &str, change: impl Fn(i32) -> i32) -> usize {
        let mut touched = 0;
        for queues in self.topics.values_mut() {
            if let Some(queue_data) = queues.get_mut(broker_name) {
                queue_data.perm = change(queue_data.perm);
                touched += 1;
            }
        }
        touched
    }

    /// The topics served by at least one broker of `cluster`; none for an unknown cluster.
    pub fn topics_by_cluster(&self, cluster: &str) -> TopicList {
        let brokers = self.clusters.get(cluster);
        let topic_list = self
            .topics
            .iter()
            .filter(|(_, queues)| {
                brokers.is_some_and(|names| queues.keys().any(|name| names.contains(name)))
            })
            .map(|(topic, _)| topic.clone())
            .collect();
        TopicList {
            topic_list,
            broker_addr: None,
        }
    }

    /// RocketMQ's "system topics" as the name server knows them: every cluster name and
    /// broker name (each is also a topic a Java broker creates), with one broker's address.
    pub fn system_topic_list(&self) -> TopicList {
        let mut topic_list = Vec::new();
        for (cluster, names) in &self.clusters {
            topic_list.push(cluster.clone());
            topic_list.extend(names.iter().cloned());
        }
        let broker_addr = self
            .brokers
            .values()
            .find_map(|(_, addrs)| addrs.values().next().cloned());
        TopicList {
            topic_list,
            broker_addr,
        }
    }

    /// Removes one broker address and, when it was the last address of its broker name, the
    /// broker's topics and cluster membership too. Returns whether anything was removed.
    pub fn unregister(&mut self, broker_addr: &str) -> bool {
        let Some(live) = self.live.remove(broker_addr) else {
            return false;
        };
        let mut broker_gone = false;
        if let Some((_, addrs)) = self.brokers.get_mut(&live.broker_name) {
            addrs.retain(|_, addr| addr != broker_addr);
            broker_gone = addrs.is_empty();
        }
        if broker_gone {
            for queues in self.topics.values_mut() {
                queues.remove(&live.broker_name);
            }
            self.topics.retain(|_, queues| !queues.is_empty());
            self.brokers.remove(&live.broker_name);
            if let Some(names) = self.clusters.get_mut(&live.cluster) {
                names.remove(&live.broker_name);
                if names.is_empty() {
                    self.clusters.remove(&live.cluster);
                }
            }
        }
        true
    }

    /// Marks a registered broker as alive now; unknown addresses are ignored.
    pub fn touch(&mut self, broker_addr: &str, now_ms: i64) {
        if let Some(live) = self.live.get_mut(broker_addr) {
            live.last_update_ms = now_ms;
        }
    }

    /// Drops brokers whose last registration is older than their expiry. Returns their addresses.
    pub fn expire(&mut self, now_ms: i64) -> Vec<String> {
        let expired: Vec<String> = self
            .live
            .iter()
            .filter(|(_, live)| now_ms - live.last_update_ms > live.expiry_ms)
            .map(|(addr, _)| addr.clone())
            .collect();
        for addr in &expired {
            self.unregister(addr);
        }
        expired
    }

    /// Drops every broker that registered over a connection that has closed, as Java does.
    pub fn connection_closed(&mut self, connection: ConnectionId) -> Vec<String> {
        let gone: Vec<String> = self
            .live
            .iter()
            .filter(|(_, live)| live.connection == Some(connection))
            .map(|(addr, _)| addr.clone())
            .collect();
        for addr in &gone {
            self.unregister(addr);
        }
        gone
    }

    pub fn route(&self, topic: &str) -> Option<TopicRouteData> {
        let queues = self.topics.get(topic)?;
        let mut broker_datas = Vec::new();
        for broker_name in queues.keys() {
            if let Some((cluster, addrs)) = self.brokers.get(broker_name) {
                broker_datas.push(BrokerData {
                    cluster: cluster.clone(),
                    broker_name: broker_name.clone(),
                    broker_addrs: addrs.clone(),
                    enable_acting_master: false,
                });
            }
        }
        Some(TopicRouteData {
            // Java copies ORDER_TOPIC_CONFIG into routes only with `orderMessageEnable`, which is
            // off by default; a non-empty value would make producers ignore `queueDatas`.
            order_topic_conf: None,
            queue_datas: queues.values().cloned().collect(),
            broker_datas,
            filter_server_table: BTreeMap::new(),
        })
    }

    pub fn cluster_info(&self) -> ClusterInfo {
        let broker_addr_table = self
            .brokers
            .iter()
            .map(|(name, (cluster, addrs))| {
                let data = BrokerData {
                    cluster: cluster.clone(),
                    broker_name: name.clone(),
                    broker_addrs: addrs.clone(),
                    enable_acting_master: false,
                };
                (name.clone(), data)
            })
            .collect();
        ClusterInfo {
            broker_addr_table,
            cluster_addr_table: self.clusters.clone(),
        }
    }

    pub fn topic_list(&self) -> TopicList {
        TopicList {
            topic_list: self.topics.keys().cloned().collect(),
            broker_addr: None,
        }
    }

    /// Removes the topic's queues on the brokers of `cluster` (on every broker when `None`),
    /// and the topic when no broker is left serving it. A cluster not known removes nothing,
    /// as in RocketMQ. Returns how many brokers' queues went.
    pub fn delete_topic(&mut self, topic: &str, cluster: Option<&str>) -> usize {
        let Some(queues) = self.topics.get_mut(topic) else {
            return 0;
        };
        let before = queues.len();
        match cluster {
            None => queues.clear(),
            Some(cluster) => {
                let Some(brokers) = self.clusters.get(cluster) else {
                    return 0;
                };
                queues.retain(|broker_name, _| !brokers.contains(broker_name));
            }
        }
        let removed = before - queues.len();
        if queues.is_empty() {
            self.topics.remove(topic);
        }
        removed
    }

    pub fn kv_put(&mut self, namespace: &str, key: &str, value: &str) {
        self.kv
            .entry(namespace.to_string())
            .or_default()
            .insert(key.to_string(), value.to_string());
    }

    pub fn kv_get(&self, namespace: &str, key: &str) -> Option<String> {
        self.kv.get(namespace)?.get(key).cloned()
    }

    pub fn kv_delete(&mut self, namespace: &str, key: &str) {
        if let Some(table) = self.kv.get_mut(namespace) {
            table.remove(key);
        }
    }

    pub fn live_broker_count(&self) -> usize {
        self.live.len()
    }
}

/// `mqadmin updateTopic -o true` stores order-topic layouts here; routes carry them.
pub const ORDER_TOPIC_NAMESPACE: &str = "ORDER_TOPIC_CONFIG";

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(name: &str, addr: &str, topics: &[(&str, i32)]) -> Registration {
        let topics = topics
            .iter()
            .map(|(topic, queues)| {
                let config = TopicConfig {
                    topic_name: topic.to_string(),
                    read_queue_nums: *queues,
                    write_queue_nums: *queues,
                    perm: 6,
                    ..TopicConfig::default()
                };
                (topic.to_string(), config)
            })
            .collect();
        Registration {
            cluster: "DefaultCluster".into(),
            broker_name: name.into(),
            broker_addr: addr.into(),
            broker_id: 0,
            expiry_ms: None,
            ha_server_addr: format!("{addr}-ha"),
            data_version: None,
            topics,
        }
    }

    fn version(counter: i64) -> DataVersion {
        DataVersion {
            counter,
            state_version: 0,
            timestamp: 1_700_000_000_000,
        }
    }

    fn versioned(mut registration: Registration, counter: i64) -> Registration {
        registration.data_version = Some(version(counter));
        registration
    }

    fn perm(table: &RouteTable, topic: &str) -> i32 {
        table.route(topic).expect("route").queue_datas[0].perm
    }

    fn at_epoch(addr: &str, state_version: i64) -> Registration {
        let mut registration = versioned(registration("a", addr, &[("T", 4)]), 1);
        if let Some(version) = registration.data_version.as_mut() {
            version.state_version = state_version;
        }
        registration
    }

    fn master_addr(table: &RouteTable) -> String {
        let route = table.route("T").expect("route");
        route.broker_datas[0].broker_addrs[&0].clone()
    }

    #[test]
    fn of_two_addresses_claiming_id_0_the_higher_state_version_holds_it() {
        let mut table = RouteTable::new(BROKER_EXPIRY_MS_DEFAULT);
        table.register(at_epoch("127.0.0.1:1", 1), None, 0);
        // The new master of epoch 2 takes id 0 from the old one while it still looks alive.
        table.register(at_epoch("127.0.0.1:2", 2), None, 1);
        assert_eq!(master_addr(&table), "127.0.0.1:2");
        // The deposed master's registration of epoch 1 is ignored.
        let answer = table.register(at_epoch("127.0.0.1:1", 1), None, 2);
        assert_eq!(answer, Registered::default());
        assert_eq!(master_addr(&table), "127.0.0.1:2");
        // An equal epoch replaces it (RocketMQ's rule: only a higher one is kept).
        table.register(at_epoch("127.0.0.1:1", 2), None, 3);
        assert_eq!(master_addr(&table), "127.0.0.1:1");
    }

    #[test]
    fn a_wiped_write_permission_lasts_until_the_broker_topic_config_changes() {
        let mut table = RouteTable::new(BROKER_EXPIRY_MS_DEFAULT);
        let topics = [("T", 4), ("U", 2)];
        table.register(
            versioned(registration("a", "127.0.0.1:1", &topics), 1),
            None,
            0,
        );
        table.register(
            versioned(registration("b", "127.0.0.1:2", &[("T", 4)]), 1),
            None,
            0,
        );
        assert_eq!(table.wipe_write_perm("a"), 2);
        assert_eq!(table.wipe_write_perm("nobody"), 0);
        assert_eq!(perm(&table, "U"), PERM_READ);
        let route = table.route("T").unwrap();
        let of = |name: &str| {
            route
                .queue_datas
                .iter()
                .find(|q| q.broker_name == name)
                .unwrap()
                .perm
        };
        assert_eq!((of("a"), of("b")), (PERM_READ, PERM_READ | PERM_WRITE));

        // The periodic registration with the same version leaves the wipe in place...
        table.register(
            versioned(registration("a", "127.0.0.1:1", &topics), 1),
            None,
            30,
        );
        assert!(!table.data_version_changed("127.0.0.1:1", &version(1)));
        assert_eq!(perm(&table, "U"), PERM_READ);
        // ...but still adds a topic this broker did not serve here.
        let more = [("T", 4), ("U", 2), ("V", 1)];
        table.register(
            versioned(registration("a", "127.0.0.1:1", &more), 1),
            None,
            40,
        );
        assert_eq!(perm(&table, "V"), PERM_READ | PERM_WRITE);

        assert_eq!(table.add_write_perm("a"), 3);
        assert_eq!(perm(&table, "U"), PERM_READ | PERM_WRITE);
        table.wipe_write_perm("a");
        // A new version (a topic created or changed on the broker) rewrites every topic.
        table.register(
            versioned(registration("a", "127.0.0.1:1", &more), 2),
            None,
            50,
        );
        assert!(table.data_version_changed("127.0.0.1:1", &version(1)));
        assert_eq!(perm(&table, "U"), PERM_READ | PERM_WRITE);
    }

    #[test]
    fn topics_and_system_topics_are_listed_by_cluster() {
        let mut table = RouteTable::new(BROKER_EXPIRY_MS_DEFAULT);
        table.register(registration("a", "127.0.0.1:1", &[("T", 4)]), None, 0);
        let mut other = registration("b", "127.0.0.1:2", &[("T", 2), ("U", 1)]);
        other.cluster = "Other".to_string();
        table.register(other, None, 0);
        assert_eq!(
            table.topics_by_cluster("DefaultCluster").topic_list,
            vec!["T"]
        );
        assert_eq!(table.topics_by_cluster("Other").topic_list, vec!["T", "U"]);
        assert!(table
            .topics_by_cluster("NoSuchCluster")
            .topic_list
            .is_empty());
        let system = table.system_topic_list();
        assert_eq!(system.topic_list, vec!["DefaultCluster", "a", "Other", "b"]);
        assert_eq!(system.broker_addr.as_deref(), Some("127.0.0.1:1"));
    }

    #[test]
    fn a_topic_is_deleted_from_one_cluster_or_from_all() {
        let mut table = RouteTable::new(BROKER_EXPIRY_MS_DEFAULT);
        table.register(registration("a", "127.0.0.1:1", &[("T", 4)]), None, 0);
        let mut other = registration("b", "127.0.0.1:2", &[("T", 2), ("U", 1)]);
        other.cluster = "Other".to_string();
        table.register(other, None, 0);
        assert_eq!(table.delete_topic("T", Some("NoSuchCluster")), 0);
        assert_eq!(table.delete_topic("T", Some("DefaultCluster")), 1);
        let route = table.route("T").expect("still served by b");
        assert_eq!(route.queue_datas.len(), 1);
        assert_eq!(route.queue_datas[0].broker_name, "b");
        assert_eq!(table.delete_topic("T", Some("Other")), 1);
        assert!(table.route("T").is_none());
        assert!(!table.topic_list().topic_list.contains(&"T".to_string()));
        assert_eq!(table.delete_topic("T", None), 0);
        assert_eq!(table.delete_topic("U", None), 1);
        assert!(table.route("U").is_none());
    }

    #[test]
    fn route_lists_every_broker_serving_a_topic() {
        let mut table = RouteTable::new(BROKER_EXPIRY_MS_DEFAULT);
        table.register(registration("a", "127.0.0.1:1", &[("T", 4)]), None, 0);
        table.register(
            registration("b", "127.0.0.1:2", &[("T", 8), ("U", 1)]),
            None,
            0,
        );
        let route = table.route("T").expect("route");
        assert_eq!(route.queue_datas.len(), 2);
        assert_eq!(route.broker_datas.len(), 2);
        assert_eq!(
            route.broker_datas[1]
                .broker_addrs
                .get(&0)
                .map(String::as_str),
            Some("127.0.0.1:2")
        );
        assert!(table.route("missing").is_none());
        assert_eq!(
            table.topic_list().topic_list,
            vec!["T".to_string(), "U".to_string()]
        );
    }

    #[test]
    fn a_registration_adds_and_updates_topics_and_keeps_the_others() {
        let mut table = RouteTable::new(BROKER_EXPIRY_MS_DEFAULT);
        table.register(
            registration("a", "127.0.0.1:1", &[("T", 4), ("old", 1)]),
            None,
            0,
        );
        // What a Java broker sends after creating one topic: that topic alone.
        table.register(registration("a", "127.0.0.1:1", &[("T", 2)]), None, 10);
        table.register(registration("a", "127.0.0.1:1", &[]), None, 20);
        assert!(table.route("old").is_some());
        assert_eq!(
            table.route("T").expect("route").queue_datas[0].write_queue_nums,
            2
        );
    }

    #[test]
    fn a_slave_keeps_the_topics_when_its_master_goes() {
        let mut table = RouteTable::new(BROKER_EXPIRY_MS_DEFAULT);
        table.register(registration("a", "127.0.0.1:1", &[("T", 4)]), None, 0);
        let slave = Registration {
            broker_id: 1,
            ..registration("a", "127.0.0.1:2", &[])
        };
        let registered = table.register(slave, None, 0);
        assert_eq!(
            registered,
            Registered {
                master_addr: Some("127.0.0.1:1".into()),
                ha_server_addr: Some("127.0.0.1:1-ha".into()),
            },
            "a slave learns its master's addresses"
        );
        assert!(table.unregister("127.0.0.1:1"));
        let route = table.route("T").expect("the slave still serves T");
        assert_eq!(
            route.broker_datas[0]
                .broker_addrs
                .get(&1)
                .map(String::as_str),
            Some("127.0.0.1:2")
        );
        assert!(table.unregister("127.0.0.1:2"));
        assert!(table.route("T").is_none());
    }

    #[test]
    fn an_address_that_changes_name_leaves_nothing_behind() {
        let mut table = RouteTable::new(BROKER_EXPIRY_MS_DEFAULT);
        table.register(registration("n1", "127.0.0.1:1", &[("T1", 1)]), None, 0);
        table.register(registration("n2", "127.0.0.1:1", &[("T2", 1)]), None, 0);
        assert!(table.route("T1").is_none());
        assert_eq!(table.cluster_info().broker_addr_table.len(), 1);
        assert_eq!(table.expire(BROKER_EXPIRY_MS_DEFAULT + 1).len(), 1);
        assert!(table.cluster_info().broker_addr_table.is_empty());
        assert!(table.cluster_info().cluster_addr_table.is_empty());
        assert!(table.topic_list().topic_list.is_empty());
    }

    #[test]
    fn brokers_expire_after_the_timeout_and_not_before() {
        let mut table = RouteTable::new(120_000);
        table.register(registration("a", "127.0.0.1:1", &[("T", 4)]), None, 1_000);
        assert!(table.expire(121_000).is_empty());
        assert_eq!(table.expire(121_001), vec!["127.0.0.1:1".to_string()]);
        assert!(table.route("T").is_none());
        assert!(table.cluster_info().broker_addr_table.is_empty());
        assert!(table.cluster_info().cluster_addr_table.is_empty());
    }

    #[test]
    fn closing_the_registration_connection_drops_the_broker() {
        let mut table = RouteTable::new(BROKER_EXPIRY_MS_DEFAULT);
        table.register(registration("a", "127.0.0.1:1", &[("T", 4)]), Some(7), 0);
        table.register(registration("b", "127.0.0.1:2", &[("T", 4)]), Some(8), 0);
        assert_eq!(table.connection_closed(7), vec!["127.0.0.1:1".to_string()]);
        let route = table.route("T").expect("route");
        assert_eq!(route.broker_datas.len(), 1);
        assert_eq!(route.broker_datas[0].broker_name, "b");
    }

    #[test]
    fn kv_config_round_trips_without_touching_routes() {
        let mut table = RouteTable::new(BROKER_EXPIRY_MS_DEFAULT);
        table.register(registration("a", "127.0.0.1:1", &[("T", 4)]), None, 0);
        table.kv_put(ORDER_TOPIC_NAMESPACE, "T", "a:4");
        assert_eq!(
            table.kv_get(ORDER_TOPIC_NAMESPACE, "T").as_deref(),
            Some("a:4")
        );
        assert_eq!(table.route("T").expect("route").order_topic_conf, None);
        table.kv_delete(ORDER_TOPIC_NAMESPACE, "T");
        assert_eq!(table.kv_get(ORDER_TOPIC_NAMESPACE, "T"), None);
    }
}
