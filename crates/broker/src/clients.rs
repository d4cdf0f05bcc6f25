//! Who is connected: producer and consumer groups from heartbeats, with the consumers'
//! subscriptions (a push consumer's pull carries none, so the broker filters by what the
//! group's last heartbeat said).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use quiver_wire::body::{ConsumerData, HeartbeatData};

use crate::connection::{Connection, ConnectionId};
use crate::filter::{FilterError, MessageFilter};

/// Java clients heartbeat every 30 s; Java brokers drop a client silent for 120 s.
pub const CLIENT_EXPIRY_MS: i64 = 120_000;

#[derive(Debug, Clone)]
struct Member {
    connection: Connection,
    last_seen_ms: i64,
    data: ConsumerData,
    /// Each subscription's filter, parsed when the heartbeat came (pulls use it many times).
    filters: Vec<Result<MessageFilter, FilterError>>,
}

/// A group's subscription to a topic as the broker filters by it.
#[derive(Debug, Clone)]
pub struct Subscribed {
    /// An expression that does not parse is kept as its error: the consumer's pulls are
    /// refused until a heartbeat brings one that does, as RocketMQ refuses them.
    pub filter: Result<MessageFilter, FilterError>,
    /// The version the consumer gave (Java: the time it subscribed).
    pub version: i64,
}

#[derive(Debug, Default)]
struct Tables {
    /// group -> client id -> member
    consumers: BTreeMap<String, BTreeMap<String, Member>>,
    /// group -> client id -> (connection, last seen)
    producers: BTreeMap<String, BTreeMap<String, (Connection, i64)>>,
    /// Who holds the entries above, to count them against the limits.
    ids: IdCounts,
}

/// The client ids in the tables: per (connection, id), how many group entries it holds; per
/// id, over how many connections; per connection, how many ids.
#[derive(Debug, Default)]
struct IdCounts {
    entries: HashMap<(ConnectionId, String), usize>,
    connections_of_id: HashMap<String, usize>,
    ids_of_connection: HashMap<ConnectionId, usize>,
}

impl IdCounts {
    fn add(&mut self, connection: ConnectionId, id: &str) {
        let entries = self
            .entries
            .entry((connection, id.to_string()))
            .or_insert(0);
        if *entries == 0 {
            *self.connections_of_id.entry(id.to_string()).or_insert(0) += 1;
            *self.ids_of_connection.entry(connection).or_insert(0) += 1;
        }
        *entries += 1;
    }

    fn remove(&mut self, connection: ConnectionId, id: &str) {
        let key = (connection, id.to_string());
        let Some(entries) = self.entries.get_mut(&key) else {
            return;
        };
        *entries -= 1;
        if *entries > 0 {
            return;
        }
        self.entries.remove(&key);
        for count in [
            self.connections_of_id.get_mut(id),
            self.ids_of_connection.get_mut(&connection),
        ]
        .into_iter()
        .flatten()
        {
            *count -= 1;
        }
        self.connections_of_id.retain(|_, count| *count > 0);
        self.ids_of_connection.retain(|_, count| *count > 0);
    }

    /// Whether `id` may register over `connection` under `limits`.
    fn admits(
        &self,
        connection: ConnectionId,
        id: &str,
        limits: ClientLimits,
    ) -> Result<(), TooManyIds> {
        if self.entries.contains_key(&(connection, id.to_string())) {
            return Ok(());
        }
        let held = self.connections_of_id.len();
        if !self.connections_of_id.contains_key(id) && held >= limits.ids_max {
            return Err(TooManyIds::InAll {
                held,
                max: limits.ids_max,
            });
        }
        let held = self
            .ids_of_connection
            .get(&connection)
            .copied()
            .unwrap_or(0);
        if held >= limits.ids_per_connection_max {
            return Err(TooManyIds::OnConnection {
                held,
                max: limits.ids_per_connection_max,
            });
        }
        Ok(())
    }
}

/// The most client ids the table keeps (`quiverClientIdsMax`) and registers over one
/// connection (`quiverClientIdsPerConnectionMax`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    pub ids_max: usize,
    pub ids_per_connection_max: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            ids_max: usize::MAX,
            ids_per_connection_max: usize::MAX,
        }
    }
}

/// A heartbeat of a new client id refused for a limit: `held` ids, the most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooManyIds {
    InAll { held: usize, max: usize },
    OnConnection { held: usize, max: usize },
}

#[derive(Default)]
pub struct ClientTable {
    tables: Mutex<Tables>,
    limits: ClientLimits,
}

/// Membership of these consumer groups changed; their members should rebalance.
pub type ChangedGroups = Vec<String>;

impl ClientTable {
    pub fn new(limits: ClientLimits) -> ClientTable {
        ClientTable {
            tables: Mutex::default(),
            limits,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().expect("client table lock poisoned")
    }

    /// Whether a heartbeat of `client_id` over `connection` would be taken now.
    pub fn admits(&self, connection: ConnectionId, client_id: &str) -> Result<(), TooManyIds> {
        self.lock().ids.admits(connection, client_id, self.limits)
    }

    /// Records a heartbeat. Returns the consumer groups whose membership changed, or, for a
    /// client id new to the connection past a limit, why it was refused (nothing is recorded).
    pub fn heartbeat(
        &self,
        connection: &Connection,
        data: HeartbeatData,
        now_ms: i64,
    ) -> Result<ChangedGroups, TooManyIds> {
        let mut guard = self.lock();
        let tables = &mut *guard;
        let id = data.client_id.as_str();
        let has_groups = !(data.producer_data_set.is_empty() && data.consumer_data_set.is_empty());
        if has_groups {
            tables.ids.admits(connection.id, id, self.limits)?;
        }
        for producer in &data.producer_data_set {
            let old = tables
                .producers
                .entry(producer.group_name.clone())
                .or_default()
                .insert(data.client_id.clone(), (connection.clone(), now_ms));
            if let Some((old, _)) = old {
                tables.ids.remove(old.id, id);
            }
            tables.ids.add(connection.id, id);
        }
        let mut changed = Vec::new();
        for consumer in data.consumer_data_set {
            let group = tables
                .consumers
                .entry(consumer.group_name.clone())
                .or_default();
            let is_new = match group.get(&data.client_id) {
                Some(member) => member.connection.id != connection.id,
                None => true,
            };
            if is_new {
                changed.push(consumer.group_name.clone());
            }
            let filters = consumer
                .subscription_data_set
                .iter()
                .map(|s| {
                    let expression_type = Some(s.expression_type.as_str());
                    MessageFilter::parse(expression_type, &s.sub_string)
                })
                .collect();
            let member = Member {
                connection: connection.clone(),
                last_seen_ms: now_ms,
                data: consumer,
                filters,
            };
            if let Some(old) = group.insert(data.client_id.clone(), member) {
                tables.ids.remove(old.connection.id, id);
            }
            tables.ids.add(connection.id, id);
        }
        Ok(changed)
    }

    /// Removes a client that asked to leave, but only as registered over `connection`: as in
    /// RocketMQ, one connection cannot unregister another's consumer (its queues would be
    /// handed to others while it still pulls them).
    pub fn unregister(
        &self,
        connection: ConnectionId,
        client_id: &str,
        producer_group: Option<&str>,
        consumer_group: Option<&str>,
    ) -> ChangedGroups {
        let mut guard = self.lock();
        let tables = &mut *guard;
        if let Some(group) = producer_group {
            if let Some(members) = tables.producers.get_mut(group) {
                if members
                    .get(client_id)
                    .is_some_and(|(member, _)| member.id == connection)
                {
                    members.remove(client_id);
                    tables.ids.remove(connection, client_id);
                }
            }
        }
        let mut changed = Vec::new();
        if let Some(group) = consumer_group {
            if let Some(members) = tables.consumers.get_mut(group) {
                if members
                    .get(client_id)
                    .is_some_and(|member| member.connection.id == connection)
                {
                    members.remove(client_id);
                    tables.ids.remove(connection, client_id);
                    changed.push(group.to_string());
                }
            }
        }
        tables.producers.retain(|_, members| !members.is_empty());
        tables.consumers.retain(|_, members| !members.is_empty());
        changed
    }

    /// Drops every client of a closed connection.
    pub fn connection_closed(&self, connection: ConnectionId) -> ChangedGroups {
        self.remove_where(|member_connection, _| member_connection == connection)
    }

    /// Drops clients silent for longer than CLIENT_EXPIRY_MS.
    pub fn expire(&self, now_ms: i64) -> ChangedGroups {
        self.remove_where(|_, last_seen_ms| now_ms - last_seen_ms > CLIENT_EXPIRY_MS)
    }

    fn remove_where(&self, gone: impl Fn(ConnectionId, i64) -> bool) -> ChangedGroups {
        let mut guard = self.lock();
        let tables = &mut *guard;
        let mut removed = Vec::new();
        for members in tables.producers.values_mut() {
            members.retain(|id, (connection, last_seen)| {
                let keep = !gone(connection.id, *last_seen);
                if !keep {
                    removed.push((connection.id, id.clone()));
                }
                keep
            });
        }
        tables.producers.retain(|_, members| !members.is_empty());
        let mut changed = Vec::new();
        for (group, members) in tables.consumers.iter_mut() {
            let before = members.len();
            members.retain(|id, member| {
                let keep = !gone(member.connection.id, member.last_seen_ms);
                if !keep {
                    removed.push((member.connection.id, id.clone()));
                }
                keep
            });
            if members.len() != before {
                changed.push(group.clone());
            }
        }
        tables.consumers.retain(|_, members| !members.is_empty());
        for (connection, id) in removed {
            tables.ids.remove(connection, &id);
        }
        changed
    }

    /// How many client ids the table holds.
    pub fn ids(&self) -> usize {
        self.lock().ids.connections_of_id.len()
    }

    /// Client ids of a consumer group, sorted, so every member computes the same allocation.
    pub fn consumer_ids(&self, group: &str) -> Vec<String> {
        self.lock()
            .consumers
            .get(group)
            .map(|members| members.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn consumer_connections(&self, group: &str) -> Vec<Connection> {
        let tables = self.lock();
        let Some(members) = tables.consumers.get(group) else {
            return Vec::new();
        };
        members
            .values()
            .map(|member| member.connection.clone())
            .collect()
    }

    /// The producers of `group` with their client ids: where a transaction's state is asked.
    pub fn producers(&self, group: &str) -> Vec<(String, Connection)> {
        let tables = self.lock();
        let Some(members) = tables.producers.get(group) else {
            return Vec::new();
        };
        members
            .iter()
            .map(|(client_id, (connection, _))| (client_id.clone(), connection.clone()))
            .collect()
    }

    /// The consumers of `group` with their client ids.
    pub fn consumers(&self, group: &str) -> Vec<(String, Connection)> {
        let tables = self.lock();
        let Some(members) = tables.consumers.get(group) else {
            return Vec::new();
        };
        members
            .iter()
            .map(|(client_id, member)| (client_id.clone(), member.connection.clone()))
            .collect()
    }

    /// The connection of the client with this id, from its producers' heartbeats, or its
    /// consumers' when it has no producer: where a reply to its request is pushed.
    pub fn connection_of(&self, client_id: &str) -> Option<Connection> {
        let tables = self.lock();
        let producer = tables
            .producers
            .values()
            .find_map(|members| members.get(client_id).map(|(connection, _)| connection));
        let consumer = || {
            tables
                .consumers
                .values()
                .find_map(|members| members.get(client_id).map(|member| &member.connection))
        };
        producer.or_else(consumer).cloned()
    }

    /// The group's newest subscription to `topic` (the highest version among its members'
    /// heartbeats) and its filter.
    pub fn subscription(&self, group: &str, topic: &str) -> Option<Subscribed> {
        let tables = self.lock();
        let members = tables.consumers.get(group)?;
        members
            .values()
            .filter_map(|member| {
                let data = &member.data.subscription_data_set;
                let index = data.iter().position(|s| s.topic == topic)?;
                Some((data[index].sub_version, member.filters.get(index)?))
            })
            .max_by_key(|(version, _)| *version)
            .map(|(version, filter)| Subscribed {
                filter: filter.clone(),
                version,
            })
    }

    /// Whether the group's consumers consume by broadcast (each gets every message).
    pub fn is_broadcasting(&self, group: &str) -> bool {
        self.lock().consumers.get(group).is_some_and(|members| {
            members
                .values()
                .any(|member| member.data.message_model == "BROADCASTING")
        })
    }

    /// The group's members as their last heartbeats describe them, for
    /// GET_CONSUMER_CONNECTION_LIST: (client id, connection, what the client said).
    pub fn consumer_members(&self, group: &str) -> Vec<(String, Connection, ConsumerData)> {
        let tables = self.lock();
        let Some(members) = tables.consumers.get(group) else {
            return Vec::new();
        };
        members
            .iter()
            .map(|(id, member)| (id.clone(), member.connection.clone(), member.data.clone()))
            .collect()
    }

    /// Consumer groups with a member connected.
    pub fn consumer_groups(&self) -> Vec<String> {
        self.lock().consumers.keys().cloned().collect()
    }

    /// Consumer groups subscribed to `topic`.
    pub fn groups_subscribed_to(&self, topic: &str) -> Vec<String> {
        let tables = self.lock();
        tables
            .consumers
            .iter()
            .filter(|(_, members)| {
                members.values().any(|m| {
                    m.data
                        .subscription_data_set
                        .iter()
                        .any(|s| s.topic == topic)
                })
            })
            .map(|(group, _)| group.clone())
            .collect()
    }

    pub fn counts(&self) -> (usize, usize) {
        let tables = self.lock();
        let producers = tables.producers.values().map(BTreeMap::len).sum();
        let consumers = tables.consumers.values().map(BTreeMap::len).sum();
        (producers, consumers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::TagFilter;
    use quiver_wire::body::SubscriptionData;

    fn consumer(group: &str, topic: &str, expression: &str, version: i64) -> ConsumerData {
        ConsumerData {
            group_name: group.into(),
            subscription_data_set: vec![SubscriptionData {
                topic: topic.into(),
                sub_string: expression.into(),
                sub_version: version,
                ..SubscriptionData::default()
            }],
            ..ConsumerData::default()
        }
    }

    fn heartbeat(client: &str, consumers: Vec<ConsumerData>) -> HeartbeatData {
        HeartbeatData {
            client_id: client.into(),
            consumer_data_set: consumers,
            ..HeartbeatData::default()
        }
    }

    #[test]
    fn membership_changes_are_reported_once_and_on_close() {
        let table = ClientTable::default();
        let (a, _ra) = Connection::new(1, "127.0.0.1:1".parse().unwrap());
        let (b, _rb) = Connection::new(2, "127.0.0.1:2".parse().unwrap());
        assert_eq!(
            table
                .heartbeat(&a, heartbeat("c1", vec![consumer("g", "T", "*", 1)]), 0)
                .expect("taken"),
            vec!["g"]
        );
        assert!(table
            .heartbeat(&a, heartbeat("c1", vec![consumer("g", "T", "*", 1)]), 5)
            .expect("taken")
            .is_empty());
        assert_eq!(
            table
                .heartbeat(&b, heartbeat("c2", vec![consumer("g", "T", "TagA", 2)]), 5)
                .expect("taken"),
            vec!["g"]
        );
        assert_eq!(
            table.consumer_ids("g"),
            vec!["c1".to_string(), "c2".to_string()]
        );
        let subscribed = table.subscription("g", "T").expect("subscribed");
        assert_eq!(subscribed.version, 2);
        assert!(matches!(
            subscribed.filter,
            Ok(MessageFilter::Tags(tags)) if tags == TagFilter::parse("TagA")
        ));
        assert_eq!(table.connection_closed(1), vec!["g"]);
        assert_eq!(table.consumer_ids("g"), vec!["c2".to_string()]);
        assert_eq!(table.expire(5 + CLIENT_EXPIRY_MS + 1), vec!["g"]);
        assert!(table.consumer_ids("g").is_empty());
    }

    #[test]
    fn a_client_is_found_by_its_id_through_either_kind_of_group() {
        let table = ClientTable::default();
        let (a, _ra) = Connection::new(1, "127.0.0.1:1".parse().unwrap());
        let (b, _rb) = Connection::new(2, "127.0.0.1:2".parse().unwrap());
        let producer = HeartbeatData {
            client_id: "p1".into(),
            producer_data_set: vec![quiver_wire::body::ProducerData {
                group_name: "pg".into(),
            }],
            ..HeartbeatData::default()
        };
        table.heartbeat(&a, producer, 0).expect("taken");
        table
            .heartbeat(&b, heartbeat("c1", vec![consumer("g", "T", "*", 1)]), 0)
            .expect("taken");
        assert_eq!(table.connection_of("p1").map(|c| c.id), Some(1));
        assert_eq!(table.connection_of("c1").map(|c| c.id), Some(2));
        assert!(table.connection_of("nobody").is_none());
        table.connection_closed(1);
        assert!(table.connection_of("p1").is_none());
    }

    #[test]
    fn only_the_clients_own_connection_unregisters_it() {
        let table = ClientTable::default();
        let (a, _ra) = Connection::new(1, "127.0.0.1:1".parse().unwrap());
        table
            .heartbeat(&a, heartbeat("c1", vec![consumer("g", "T", "*", 1)]), 0)
            .expect("taken");
        assert!(table.unregister(2, "c1", None, Some("g")).is_empty());
        assert_eq!(table.consumer_ids("g"), vec!["c1".to_string()]);
        assert_eq!(table.unregister(1, "c1", None, Some("g")), vec!["g"]);
        assert!(table.consumer_ids("g").is_empty());
    }

    #[test]
    fn client_ids_are_limited_per_connection_and_in_all_and_freed_when_they_go() {
        let table = ClientTable::new(ClientLimits {
            ids_max: 3,
            ids_per_connection_max: 2,
        });
        let (a, _ra) = Connection::new(1, "127.0.0.1:1".parse().unwrap());
        let (b, _rb) = Connection::new(2, "127.0.0.1:2".parse().unwrap());
        let beat = |connection: &Connection, id: &str| {
            table.heartbeat(
                connection,
                heartbeat(id, vec![consumer("g", "T", "*", 1)]),
                0,
            )
        };
        beat(&a, "a1").expect("first");
        beat(&a, "a2").expect("second");
        assert_eq!(
            beat(&a, "a3"),
            Err(TooManyIds::OnConnection { held: 2, max: 2 })
        );
        beat(&a, "a1").expect("a known id is always taken again");
        beat(&b, "b1").expect("another connection");
        assert_eq!(beat(&b, "b2"), Err(TooManyIds::InAll { held: 3, max: 3 }));
        assert_eq!(table.ids(), 3);
        // A client that moves to another connection is one id still.
        beat(&b, "a2").expect("moved");
        assert_eq!(table.ids(), 3);
        assert_eq!(table.unregister(2, "b1", None, Some("g")), vec!["g"]);
        beat(&b, "b2").expect("room again after an unregister");
        table.connection_closed(2);
        assert_eq!(table.ids(), 1, "a1 stays");
        beat(&a, "a3").expect("room again after a close");
        assert!(table
            .expire(CLIENT_EXPIRY_MS + 1)
            .contains(&"g".to_string()));
        assert_eq!(table.ids(), 0);
    }
}
