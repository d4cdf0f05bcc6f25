//! Controller mode (RocketMQ 5's automatic failover): what brokers and admin tools ask a
//! controller, and what it answers in header fields. Bodies are in `controller_body`.

use super::ext_header;

/// BROKER_HEARTBEAT (904) as a controller-mode broker sends it to every controller: who it is
/// and how far its log goes, which elections compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerHeartbeatRequestHeader {
    pub cluster_name: String,
    pub broker_addr: String,
    pub broker_name: String,
    /// The id the controller gave the broker (1 and up); a name server's heartbeat lacks it.
    pub broker_id: Option<i64>,
    /// The broker's last epoch; -1 when it has none.
    pub epoch: Option<i32>,
    pub max_offset: Option<i64>,
    pub confirm_offset: Option<i64>,
    pub heartbeat_timeout_millis: Option<i64>,
    /// Lower is preferred (`brokerElectionPriority`).
    pub election_priority: Option<i32>,
}

ext_header!(BrokerHeartbeatRequestHeader {
    cluster_name: req "clusterName",
    broker_addr: req "brokerAddr",
    broker_name: req "brokerName",
    broker_id: opt "brokerId",
    epoch: opt "epoch",
    max_offset: opt "maxOffset",
    confirm_offset: opt "confirmOffset",
    heartbeat_timeout_millis: opt "heartbeatTimeoutMills",
    election_priority: opt "electionPriority",
});

/// CONTROLLER_ALTER_SYNC_STATE_SET (1001), a master's; the new set is the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterSyncStateSetRequestHeader {
    pub broker_name: String,
    pub master_broker_id: i64,
    pub master_epoch: i32,
    pub invoke_time: i64,
}

ext_header!(AlterSyncStateSetRequestHeader {
    broker_name: req "brokerName",
    master_broker_id: req "masterBrokerId",
    master_epoch: req "masterEpoch",
    invoke_time: def "invokeTime" = 0,
});

/// CONTROLLER_ELECT_MASTER (1002): from a broker (its own id), an admin tool (the id to
/// promote, `designateElect`) or the controller itself (no id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectMasterRequestHeader {
    pub cluster_name: String,
    pub broker_name: String,
    pub broker_id: i64,
    pub designate_elect: bool,
    pub invoke_time: i64,
}

ext_header!(ElectMasterRequestHeader {
    cluster_name: def "clusterName" = String::new(),
    broker_name: req "brokerName",
    broker_id: def "brokerId" = -1,
    designate_elect: def "designateElect" = false,
    invoke_time: def "invokeTime" = 0,
});

/// CONTROLLER_REGISTER_BROKER (1003).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterBrokerToControllerRequestHeader {
    pub cluster_name: String,
    pub broker_name: String,
    pub broker_id: i64,
    pub broker_address: String,
    pub invoke_time: i64,
}

ext_header!(RegisterBrokerToControllerRequestHeader {
    cluster_name: req "clusterName",
    broker_name: req "brokerName",
    broker_id: req "brokerId",
    broker_address: req "brokerAddress",
    invoke_time: def "invokeTime" = 0,
});

/// CONTROLLER_GET_REPLICA_INFO (1004).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetReplicaInfoRequestHeader {
    pub broker_name: String,
}

ext_header!(GetReplicaInfoRequestHeader { broker_name: req "brokerName" });

/// CLEAN_BROKER_DATA (1011): `mqadmin cleanBrokerMetadata`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CleanControllerBrokerDataRequestHeader {
    pub cluster_name: Option<String>,
    pub broker_name: String,
    /// `1;2;3`; none means the whole broker set.
    pub broker_controller_ids_to_clean: Option<String>,
    pub is_clean_living_broker: bool,
    pub invoke_time: i64,
}

ext_header!(CleanControllerBrokerDataRequestHeader {
    cluster_name: opt "clusterName",
    broker_name: req "brokerName",
    broker_controller_ids_to_clean: opt "brokerControllerIdsToClean",
    is_clean_living_broker: def "isCleanLivingBroker" = false,
    invoke_time: def "invokeTime" = 0,
});

/// CONTROLLER_GET_NEXT_BROKER_ID (1012).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetNextBrokerIdRequestHeader {
    pub cluster_name: String,
    pub broker_name: String,
}

ext_header!(GetNextBrokerIdRequestHeader {
    cluster_name: req "clusterName",
    broker_name: req "brokerName",
});

/// CONTROLLER_APPLY_BROKER_ID (1013): a broker claims an id, with a code (`address;millis`)
/// that lets the same broker claim it again after a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyBrokerIdRequestHeader {
    pub cluster_name: String,
    pub broker_name: String,
    pub applied_broker_id: i64,
    pub register_check_code: String,
}

ext_header!(ApplyBrokerIdRequestHeader {
    cluster_name: req "clusterName",
    broker_name: req "brokerName",
    applied_broker_id: req "appliedBrokerId",
    register_check_code: req "registerCheckCode",
});

/// NOTIFY_BROKER_ROLE_CHANGED (1008), the controller's to each live broker of a set after an
/// election; the new SyncStateSet is the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifyBrokerRoleChangedRequestHeader {
    pub master_address: Option<String>,
    pub master_epoch: Option<i32>,
    pub sync_state_set_epoch: Option<i32>,
    pub master_broker_id: Option<i64>,
}

ext_header!(NotifyBrokerRoleChangedRequestHeader {
    master_address: opt "masterAddress",
    master_epoch: opt "masterEpoch",
    sync_state_set_epoch: opt "syncStateSetEpoch",
    master_broker_id: opt "masterBrokerId",
});

/// The master of a broker set as the controller's answers carry it (ELECT_MASTER,
/// REGISTER_BROKER, GET_REPLICA_INFO): absent fields when the set has none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MasterInfoHeader {
    pub master_broker_id: Option<i64>,
    pub master_address: Option<String>,
    pub master_epoch: Option<i32>,
    pub sync_state_set_epoch: Option<i32>,
}

ext_header!(MasterInfoHeader {
    master_broker_id: opt "masterBrokerId",
    master_address: opt "masterAddress",
    master_epoch: opt "masterEpoch",
    sync_state_set_epoch: opt "syncStateSetEpoch",
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::ExtFields;

    #[test]
    fn a_java_brokers_heartbeat_reads_with_its_field_names() {
        let ext = ExtFields::new()
            .with("clusterName", "DefaultCluster")
            .with("brokerAddr", "127.0.0.1:30911")
            .with("brokerName", "broker-a")
            .with("brokerId", "2")
            .with("epoch", "-1")
            .with("maxOffset", "1024")
            .with("confirmOffset", "0")
            .with("heartbeatTimeoutMills", "10000")
            .with("electionPriority", "2147483647");
        let header = BrokerHeartbeatRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.broker_id, Some(2));
        assert_eq!(header.epoch, Some(-1));
        assert_eq!(header.heartbeat_timeout_millis, Some(10_000));
        assert_eq!(header.election_priority, Some(i32::MAX));
        assert_eq!(
            BrokerHeartbeatRequestHeader::from_ext(&header.to_ext()).unwrap(),
            header
        );
    }

    #[test]
    fn an_admin_election_without_a_cluster_takes_the_defaults() {
        let ext = ExtFields::new()
            .with("brokerName", "broker-a")
            .with("brokerId", "2")
            .with("designateElect", "true");
        let header = ElectMasterRequestHeader::from_ext(&ext).unwrap();
        assert_eq!(header.cluster_name, "");
        assert!(header.designate_elect);
        assert_eq!(header.invoke_time, 0);
        let none = ElectMasterRequestHeader::from_ext(&ExtFields::new().with("brokerName", "b"));
        assert_eq!(none.unwrap().broker_id, -1);
    }
}
