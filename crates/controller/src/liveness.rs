//! Which brokers are alive, as each controller node sees it from their heartbeats
//! (BROKER_HEARTBEAT, 904): kept by every node for itself, not replicated, as RocketMQ keeps
//! it. A broker is alive until its own timeout passes without a heartbeat, or until the
//! connection its last heartbeat came on closes. Elections compare what the heartbeats said of
//! each broker's log: its epoch and end offset never go down while its entry lives, as a
//! reordered heartbeat must not make a replica look behind.

use std::collections::BTreeMap;

/// What one heartbeat says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    pub cluster: String,
    pub name: String,
    pub id: i64,
    pub address: String,
    pub epoch: i32,
    pub max_offset: i64,
    pub confirm_offset: i64,
    pub timeout_ms: i64,
    pub priority: i32,
}

/// A broker's entry: its last heartbeat, when it came, and on which connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reported {
    pub cluster: String,
    pub address: String,
    pub epoch: i32,
    pub max_offset: i64,
    pub confirm_offset: i64,
    pub timeout_ms: i64,
    pub priority: i32,
    pub last_ms: i64,
    pub connection: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Liveness {
    brokers: BTreeMap<(String, i64), Reported>,
}

/// A heartbeat from a broker the table has no room for (`quiverControllerBrokersMax`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the controller tracks quiverControllerBrokersMax ({0}) brokers; a heartbeat from another is ignored")]
pub struct Full(pub usize);

impl Liveness {
    /// Records a heartbeat that came on `connection` at `now_ms`. A broker new to the table is
    /// refused once it holds `brokers_max`.
    pub fn heartbeat(
        &mut self,
        beat: Heartbeat,
        connection: u64,
        now_ms: i64,
        brokers_max: usize,
    ) -> Result<(), Full> {
        let key = (beat.name, beat.id);
        let tracked = self.brokers.len();
        match self.brokers.get_mut(&key) {
            Some(entry) => {
                let ahead = (beat.epoch, beat.max_offset) > (entry.epoch, entry.max_offset);
                if ahead {
                    entry.epoch = beat.epoch;
                    entry.max_offset = beat.max_offset;
                    entry.confirm_offset = beat.confirm_offset;
                }
                entry.address = beat.address;
                entry.timeout_ms = beat.timeout_ms;
                entry.priority = beat.priority;
                entry.last_ms = now_ms;
                entry.connection = connection;
            }
            None if tracked >= brokers_max => return Err(Full(brokers_max)),
            None => {
                self.brokers.insert(
                    key,
                    Reported {
                        cluster: beat.cluster,
                        address: beat.address,
                        epoch: beat.epoch,
                        max_offset: beat.max_offset,
                        confirm_offset: beat.confirm_offset,
                        timeout_ms: beat.timeout_ms,
                        priority: beat.priority,
                        last_ms: now_ms,
                        connection,
                    },
                );
            }
        }
        Ok(())
    }

    pub fn is_alive(&self, name: &str, id: i64, now_ms: i64) -> bool {
        self.reported(name, id)
            .is_some_and(|entry| entry.last_ms.saturating_add(entry.timeout_ms) >= now_ms)
    }

    pub fn reported(&self, name: &str, id: i64) -> Option<&Reported> {
        self.brokers.get(&(name.to_string(), id))
    }

    /// How an election orders candidates, best first: the furthest log (epoch, then end
    /// offset), then the lowest priority, then the lowest id. A replica that never sent a
    /// heartbeat comes last.
    pub fn election_rank(
        &self,
        name: &str,
        id: i64,
    ) -> (bool, std::cmp::Reverse<(i32, i64)>, i32, i64) {
        match self.reported(name, id) {
            Some(entry) => (
                false,
                std::cmp::Reverse((entry.epoch, entry.max_offset)),
                entry.priority,
                id,
            ),
            None => (true, std::cmp::Reverse((i32::MIN, i64::MIN)), i32::MAX, id),
        }
    }

    /// Removes the brokers whose timeout passed; returns them (name, id).
    pub fn expire(&mut self, now_ms: i64) -> Vec<(String, i64)> {
        let gone: Vec<(String, i64)> = self
            .brokers
            .iter()
            .filter(|(_, entry)| entry.last_ms.saturating_add(entry.timeout_ms) < now_ms)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &gone {
            self.brokers.remove(key);
        }
        gone
    }

    /// Removes the brokers whose last heartbeat came on `connection`, which closed.
    pub fn connection_closed(&mut self, connection: u64) -> Vec<(String, i64)> {
        let gone: Vec<(String, i64)> = self
            .brokers
            .iter()
            .filter(|(_, entry)| entry.connection == connection)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &gone {
            self.brokers.remove(key);
        }
        gone
    }

    /// The live brokers of a set with their addresses.
    pub fn alive_in(&self, name: &str, now_ms: i64) -> Vec<(i64, String)> {
        self.brokers
            .range((name.to_string(), i64::MIN)..=(name.to_string(), i64::MAX))
            .filter(|(_, entry)| entry.last_ms.saturating_add(entry.timeout_ms) >= now_ms)
            .map(|((_, id), entry)| (*id, entry.address.clone()))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.brokers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.brokers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(id: i64, epoch: i32, max_offset: i64) -> Heartbeat {
        Heartbeat {
            cluster: "c".into(),
            name: "b".into(),
            id,
            address: "a:1".into(),
            epoch,
            max_offset,
            confirm_offset: 0,
            timeout_ms: 1_000,
            priority: 1,
        }
    }

    #[test]
    fn a_broker_lives_for_its_timeout_and_its_log_never_looks_shorter() {
        let mut liveness = Liveness::default();
        liveness.heartbeat(beat(1, 2, 500), 9, 0, 10).unwrap();
        liveness.heartbeat(beat(1, 2, 100), 9, 10, 10).unwrap();
        assert_eq!(liveness.reported("b", 1).unwrap().max_offset, 500);
        liveness.heartbeat(beat(1, 3, 50), 9, 20, 10).unwrap();
        assert_eq!(liveness.reported("b", 1).unwrap().epoch, 3);
        assert!(liveness.is_alive("b", 1, 1_020));
        assert!(!liveness.is_alive("b", 1, 1_021));
        assert_eq!(liveness.expire(1_021), vec![("b".to_string(), 1)]);
        assert!(liveness.is_empty());
    }

    #[test]
    fn a_closed_connection_takes_its_brokers_and_the_table_is_bounded() {
        let mut liveness = Liveness::default();
        liveness.heartbeat(beat(1, 0, 0), 7, 0, 2).unwrap();
        liveness.heartbeat(beat(2, 0, 0), 8, 0, 2).unwrap();
        assert_eq!(liveness.heartbeat(beat(3, 0, 0), 8, 0, 2), Err(Full(2)));
        liveness.heartbeat(beat(2, 0, 0), 8, 5, 2).unwrap();
        assert_eq!(liveness.connection_closed(8), vec![("b".to_string(), 2)]);
        assert_eq!(liveness.alive_in("b", 10), vec![(1, "a:1".to_string())]);
    }
}
