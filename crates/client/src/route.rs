//! A topic's route as the client uses it: master addresses and the sorted queues it may write
//! to and read from.

use std::collections::BTreeMap;

use quiver_wire::body::{MessageQueue, TopicRouteData};

/// `PermName` bits.
pub const PERM_WRITE: i32 = 2;
pub const PERM_READ: i32 = 4;
/// Broker id of a master in `brokerAddrs`.
const MASTER_ID: i64 = 0;
/// The topic whose route stands in for a topic the brokers will create on first send.
pub const AUTO_CREATE_TOPIC: &str = "TBW102";
/// Queues a producer asks the broker to create from `TBW102` (Java's `defaultTopicQueueNums`).
pub const DEFAULT_TOPIC_QUEUE_NUMS: i32 = 4;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicRoute {
    /// Broker name to master address; brokers without a master are left out.
    pub masters: BTreeMap<String, String>,
    /// Sorted (broker name, queue id).
    pub write_queues: Vec<MessageQueue>,
    pub read_queues: Vec<MessageQueue>,
    /// True when this is `TBW102`'s route standing in for a topic that does not exist yet.
    pub from_auto_create: bool,
}

impl TopicRoute {
    /// The route of `topic` from a GET_ROUTEINFO_BY_TOPIC answer.
    pub fn from_data(topic: &str, data: &TopicRouteData) -> TopicRoute {
        Self::build(topic, data, None)
    }

    /// `TBW102`'s route used for `topic`, with at most `queue_nums` queues per broker, as the
    /// Java producer does until the brokers have created the topic.
    pub fn from_auto_create(topic: &str, data: &TopicRouteData, queue_nums: i32) -> TopicRoute {
        let mut route = Self::build(topic, data, Some(queue_nums));
        route.from_auto_create = true;
        route
    }

    fn build(topic: &str, data: &TopicRouteData, cap: Option<i32>) -> TopicRoute {
        let masters: BTreeMap<String, String> = data
            .broker_datas
            .iter()
            .filter_map(|broker| {
                let addr = broker.broker_addrs.get(&MASTER_ID)?;
                Some((broker.broker_name.clone(), addr.clone()))
            })
            .collect();
        let mut route = TopicRoute {
            masters,
            ..TopicRoute::default()
        };
        for queue_data in &data.queue_datas {
            if !route.masters.contains_key(&queue_data.broker_name) {
                continue;
            }
            let capped = |count: i32| cap.map_or(count, |cap| count.min(cap)).max(0);
            let queues = |count: i32| {
                (0..capped(count)).map(|queue_id| MessageQueue {
                    topic: topic.to_owned(),
                    broker_name: queue_data.broker_name.clone(),
                    queue_id,
                })
            };
            if queue_data.perm & PERM_WRITE != 0 {
                route
                    .write_queues
                    .extend(queues(queue_data.write_queue_nums));
            }
            if queue_data.perm & PERM_READ != 0 {
                route.read_queues.extend(queues(queue_data.read_queue_nums));
            }
        }
        route.write_queues.sort();
        route.write_queues.dedup();
        route.read_queues.sort();
        route.read_queues.dedup();
        route
    }

    pub fn master(&self, broker_name: &str) -> Option<&str> {
        self.masters.get(broker_name).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_wire::body::{BrokerData, QueueData};

    fn data() -> TopicRouteData {
        let broker = |name: &str, addrs: &[(i64, &str)]| BrokerData {
            broker_name: name.into(),
            cluster: "c".into(),
            broker_addrs: addrs.iter().map(|(id, a)| (*id, a.to_string())).collect(),
            enable_acting_master: false,
        };
        let queues = |name: &str, read, write, perm| QueueData {
            broker_name: name.into(),
            read_queue_nums: read,
            write_queue_nums: write,
            perm,
            topic_sys_flag: 0,
        };
        TopicRouteData {
            broker_datas: vec![
                broker("b", &[(0, "127.0.0.1:2")]),
                broker("a", &[(0, "127.0.0.1:1"), (1, "127.0.0.1:9")]),
                broker("slave-only", &[(1, "127.0.0.1:3")]),
            ],
            queue_datas: vec![
                queues("b", 2, 3, 6),
                queues("a", 8, 8, 7),
                queues("slave-only", 4, 4, 6),
            ],
            ..TopicRouteData::default()
        }
    }

    #[test]
    fn queues_are_sorted_and_need_a_master() {
        let route = TopicRoute::from_data("T", &data());
        assert_eq!(route.master("a"), Some("127.0.0.1:1"));
        assert_eq!(route.master("slave-only"), None);
        assert_eq!(route.write_queues.len(), 11);
        assert_eq!(route.read_queues.len(), 10);
        assert_eq!(route.read_queues[0].broker_name, "a");
        assert_eq!(route.read_queues[8].broker_name, "b");
        assert!(route.write_queues.iter().all(|q| q.topic == "T"));
        assert!(!route.from_auto_create);
    }

    #[test]
    fn permissions_decide_direction() {
        let mut data = data();
        data.queue_datas[0].perm = PERM_READ;
        data.queue_datas[1].perm = PERM_WRITE;
        let route = TopicRoute::from_data("T", &data);
        assert!(route.write_queues.iter().all(|q| q.broker_name == "a"));
        assert!(route.read_queues.iter().all(|q| q.broker_name == "b"));
    }

    #[test]
    fn auto_create_route_caps_queue_counts() {
        let route = TopicRoute::from_auto_create("New", &data(), DEFAULT_TOPIC_QUEUE_NUMS);
        assert!(route.from_auto_create);
        assert_eq!(route.write_queues.len(), 4 + 3);
        assert!(route.write_queues.iter().all(|q| q.topic == "New"));
    }
}
