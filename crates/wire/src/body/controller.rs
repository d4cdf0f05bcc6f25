//! Controller mode's bodies (RocketMQ 5's automatic failover): the SyncStateSet, an election's
//! answer, the replicas' state, a broker's epochs.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::null_default;

body_struct! {
    /// The replicas of a broker set that hold everything its master acknowledged, and the
    /// epoch of that set (CONTROLLER_ALTER_SYNC_STATE_SET, REGISTER_BROKER, GET_REPLICA_INFO,
    /// NOTIFY_BROKER_ROLE_CHANGED).
    pub struct SyncStateSet {
        pub sync_state_set: BTreeSet<i64>,
        pub sync_state_set_epoch: i32,
    }
}

body_struct! {
    /// A broker set's replicas by controller id.
    pub struct BrokerMemberGroup {
        /// Written with quoted keys.
        pub broker_addrs: BTreeMap<i64, String>,
        pub broker_name: String,
        pub cluster: String,
    }
}

body_struct! {
    /// CONTROLLER_ELECT_MASTER's answer: the set's members (on success) and its SyncStateSet.
    pub struct ElectMasterResponseBody {
        #[serde(skip_serializing_if = "Option::is_none")]
        pub broker_member_group: Option<BrokerMemberGroup>,
        pub sync_state_set: BTreeSet<i64>,
    }
}

body_struct! {
    /// One replica in CONTROLLER_GET_SYNC_STATE_DATA's answer.
    pub struct ReplicaIdentity {
        pub alive: bool,
        pub broker_address: String,
        pub broker_id: i64,
        pub broker_name: String,
    }
}

body_struct! {
    /// A broker set in CONTROLLER_GET_SYNC_STATE_DATA's answer: every registered replica is in
    /// one of the two lists.
    pub struct ReplicasInfo {
        pub in_sync_replicas: Vec<ReplicaIdentity>,
        pub master_address: String,
        pub master_broker_id: i64,
        pub master_epoch: i32,
        pub not_in_sync_replicas: Vec<ReplicaIdentity>,
        pub sync_state_set_epoch: i32,
    }
}

body_struct! {
    /// CONTROLLER_GET_SYNC_STATE_DATA's answer, by broker name.
    pub struct BrokerReplicasInfo {
        pub replicas_info_table: BTreeMap<String, ReplicasInfo>,
    }
}

body_struct! {
    /// An epoch of a replicated log: from `start_offset` to `end_offset` (`i64::MAX` for the
    /// last, open one).
    pub struct EpochEntry {
        pub end_offset: i64,
        pub epoch: i32,
        pub start_offset: i64,
    }
}

body_struct! {
    /// GET_BROKER_EPOCH_CACHE's answer: a broker's epochs and log end.
    pub struct EpochEntryCache {
        pub broker_id: i64,
        pub broker_name: String,
        pub cluster_name: String,
        pub epoch_list: Vec<EpochEntry>,
        pub max_offset: i64,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{from_json, to_json};
    use super::*;

    #[test]
    fn controller_bodies_read_as_java_writes_them() {
        let elect = br#"{"brokerMemberGroup":{"brokerAddrs":{1:"127.0.0.1:30911",2:"127.0.0.1:30921"},"brokerName":"broker-a","cluster":"DefaultCluster"},"syncStateSet":[1]}"#;
        let parsed: ElectMasterResponseBody = from_json(elect).unwrap();
        let group = parsed.broker_member_group.as_ref().unwrap();
        assert_eq!(group.broker_addrs[&2], "127.0.0.1:30921");
        assert_eq!(parsed.sync_state_set, BTreeSet::from([1]));
        let still = to_json(&ElectMasterResponseBody {
            broker_member_group: None,
            sync_state_set: BTreeSet::from([1, 2]),
        });
        assert_eq!(still, br#"{"syncStateSet":[1,2]}"#);

        let replicas = br#"{"replicasInfoTable":{"broker-a":{"inSyncReplicas":[{"alive":true,"brokerAddress":"127.0.0.1:30911","brokerId":1,"brokerName":"broker-a"}],"masterAddress":"127.0.0.1:30911","masterBrokerId":1,"masterEpoch":1,"notInSyncReplicas":[],"syncStateSetEpoch":2}}}"#;
        let parsed: BrokerReplicasInfo = from_json(replicas).unwrap();
        assert_eq!(
            parsed.replicas_info_table["broker-a"].sync_state_set_epoch,
            2
        );
        assert_eq!(to_json(&parsed), replicas.to_vec());

        let set: SyncStateSet =
            from_json(br#"{"syncStateSet":[2,1],"syncStateSetEpoch":3}"#).unwrap();
        assert_eq!(
            to_json(&set),
            br#"{"syncStateSet":[1,2],"syncStateSetEpoch":3}"#
        );
    }
}
