//! The broker's identity, its network, replication and the messages it takes. Keys of `KEYS`, in the order GET_BROKER_CONFIG prints them (see `keys.rs`).

use super::*;

pub(in crate::config) static BROKER: &[Key] = &[
    Key {
        name: "brokerClusterName",
        aliases: &[],
        group: Group::Identity,
        default: "DefaultCluster",
        follows: None,
        doc: "The cluster the broker registers in.",
        live: None,
        read: |reading, field| field.name().map(|name| reading.config.cluster_name = name),
        print: |printing| printing.config.cluster_name.clone(),
    },
    Key {
        name: "brokerName",
        aliases: &[],
        group: Group::Identity,
        default: "broker-a",
        follows: None,
        doc: "The broker's name; a master and its slaves share it.",
        live: None,
        read: |reading, field| field.name().map(|name| reading.config.broker_name = name),
        print: |printing| printing.config.broker_name.clone(),
    },
    Key {
        name: "brokerId",
        aliases: &[],
        group: Group::Identity,
        default: "0",
        follows: None,
        doc: "0 for a master, above 0 for a slave; in controller mode the controller gives the \
              id and this is ignored (RocketMQ's examples say -1, accepted only then).",
        live: None,
        read: |reading, field| {
            field
                .number(-1, 1_000_000)
                .map(|id| reading.config.broker_id = id)
        },
        print: |printing| printing.config.broker_id.to_string(),
    },
    Key {
        name: "namesrvAddr",
        aliases: &[],
        group: Group::Identity,
        default: "",
        follows: None,
        doc: "The name servers to register with, `;`-separated (`host:port;host:port`).",
        live: None,
        read: |reading, field| {
            let addresses = field.value.split(';').map(str::trim);
            let addresses = addresses.filter(|address| !address.is_empty());
            reading.config.namesrv_addrs = addresses.map(String::from).collect();
            Ok(())
        },
        print: |printing| printing.config.namesrv_addrs.join(";"),
    },
    Key {
        name: "brokerIP1",
        aliases: &[],
        group: Group::Network,
        default: "127.0.0.1",
        follows: None,
        doc: "The address put in routes and message ids: clients must be able to reach it.",
        live: None,
        read: |reading, field| field.ip().map(|ip| reading.config.broker_ip = ip),
        print: |printing| printing.config.broker_ip.to_string(),
    },
    Key {
        name: "bindAddress",
        aliases: &[],
        group: Group::Network,
        default: "127.0.0.1",
        follows: Some("`brokerIP1`"),
        doc: "Where the broker listens (`0.0.0.0`: every interface); by default only on \
              `brokerIP1`, so nothing listens beyond it by accident.",
        live: None,
        read: |reading, field| field.ip().map(|ip| reading.config.bind_ip = Some(ip)),
        print: |printing| printing.config.bind_addr().ip().to_string(),
    },
    Key {
        name: "listenPort",
        aliases: &[],
        group: Group::Network,
        default: "10911",
        follows: None,
        doc: "The broker's port; `0` picks a free one, and GET_BROKER_CONFIG then answers the \
              port bound.",
        live: None,
        read: |reading, field| {
            field
                .number(0, 65_535)
                .map(|port| reading.config.listen_port = port)
        },
        print: |printing| printing.listen_port.to_string(),
    },
    Key {
        name: "brokerRole",
        aliases: &[],
        group: Group::Replication,
        default: "ASYNC_MASTER",
        follows: None,
        doc: "`ASYNC_MASTER` streams to its slaves without waiting for them; `SYNC_MASTER` \
              answers a send SEND_OK only once a slave has confirmed it (as RocketMQ 4 does: \
              FLUSH_SLAVE_TIMEOUT when none confirms within `slaveTimeout`, SLAVE_NOT_AVAILABLE \
              at once when none is connected or the one connected is more than 256 MiB \
              behind; the message is stored either way); a `SLAVE` follows its master, refuses \
              sends with SERVICE_NOT_AVAILABLE and serves pulls, queries and admin reads.",
        live: None,
        read: |reading, field| field.one_of(&ROLES).map(|role| reading.config.role = role),
        print: |printing| text_of(&ROLES, &printing.config.role),
    },
    Key {
        name: "haListenPort",
        aliases: &[],
        group: Group::Replication,
        default: "10912",
        follows: Some("`listenPort` + 1"),
        doc: "A master's HA port for its slaves; `0` picks a free one, as does `listenPort=0`; \
              the name server hands the real one to slaves.",
        live: None,
        read: |reading, field| {
            let port = field.number(0, 65_535)?;
            reading.config.ha_listen_port = Some(port);
            Ok(())
        },
        print: |printing| {
            let after_listen_port = printing.listen_port.wrapping_add(1);
            let port = printing.config.ha_listen_port.unwrap_or(after_listen_port);
            port.to_string()
        },
    },
    Key {
        name: "haMasterAddress",
        aliases: &[],
        group: Group::Replication,
        default: "",
        follows: None,
        doc: "A slave's master HA address (`host:port`); without it the slave uses the one its \
              name server gives at registration.",
        live: None,
        read: |reading, field| {
            let address = Some(field.value.trim().to_string());
            reading.config.ha_master_addr = address.filter(|address| !address.is_empty());
            Ok(())
        },
        print: |printing| printing.config.ha_master_addr.clone().unwrap_or_default(),
    },
    Key {
        name: "slaveTimeout",
        aliases: &[],
        group: Group::Replication,
        default: "3000",
        follows: None,
        doc: "How long a SYNC_MASTER send waits for a slave's confirmation (ms) before it is \
              answered FLUSH_SLAVE_TIMEOUT.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 3_600_000)
                .map(|timeout_ms| reading.config.slave_timeout_ms = timeout_ms)
        },
        print: |printing| printing.config.slave_timeout_ms.to_string(),
    },
    Key {
        name: "totalReplicas",
        aliases: &[],
        group: Group::Replication,
        default: "1",
        follows: None,
        doc: "RocketMQ 5's count of replicas: accepted and checked; SYNC_MASTER waits for one \
              slave whatever it says.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 16)
                .map(|replicas| reading.config.total_replicas = replicas)
        },
        print: |printing| printing.config.total_replicas.to_string(),
    },
    Key {
        name: "slaveReadEnable",
        aliases: &[],
        group: Group::Replication,
        default: "false",
        follows: None,
        doc: "With it, a pull further behind the log's end than `accessMessageInMemoryMaxRatio` \
              is answered with `suggestWhichBrokerId=1`, and the Java client pulls from the \
              slave next, as with RocketMQ; without it, always the master.",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.slave_read_enable = enable)
        },
        print: |printing| printing.config.slave_read_enable.to_string(),
    },
    Key {
        name: "accessMessageInMemoryMaxRatio",
        aliases: &[],
        group: Group::Replication,
        default: "40",
        follows: None,
        doc: "How far behind the log's end a pull may be, in percent of the machine's memory, \
              before `slaveReadEnable` sends it to a slave.",
        live: None,
        read: |reading, field| {
            field
                .number(0, 100)
                .map(|percent| reading.config.in_memory_percent_max = percent)
        },
        print: |printing| printing.config.in_memory_percent_max.to_string(),
    },
    Key {
        name: "enableControllerMode",
        aliases: &[],
        group: Group::Replication,
        default: "false",
        follows: None,
        doc: "RocketMQ 5's controller mode: the controllers at `controllerAddr` give the broker \
              its id and its role (master or slave) and fail the broker set over; `brokerRole` \
              and `brokerId` are then ignored. See docs/controller.md.",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|on| reading.config.controller.enabled = on)
        },
        print: |printing| printing.config.controller.enabled.to_string(),
    },
    Key {
        name: "controllerAddr",
        aliases: &[],
        group: Group::Replication,
        default: "",
        follows: None,
        doc: "The controllers, `;`-separated (`host:port;host:port`): the peer addresses of \
              `controllerDLegerPeers`.",
        live: None,
        read: |reading, field| {
            let addresses = field.value.split(';').map(str::trim);
            let addresses = addresses.filter(|address| !address.is_empty());
            reading.config.controller.addrs = addresses.map(String::from).collect();
            Ok(())
        },
        print: |printing| printing.config.controller.addrs.join(";"),
    },
    Key {
        name: "syncBrokerMetadataPeriod",
        aliases: &[],
        group: Group::Replication,
        default: "5000",
        follows: None,
        doc: "In controller mode, how often (ms) the broker asks the controller for its set's \
              master, epoch and SyncStateSet.",
        live: None,
        read: |reading, field| {
            field
                .number(100, 3_600_000)
                .map(|ms| reading.config.controller.sync_broker_metadata_period_ms = ms)
        },
        print: |printing| {
            printing
                .config
                .controller
                .sync_broker_metadata_period_ms
                .to_string()
        },
    },
    Key {
        name: "checkSyncStateSetPeriod",
        aliases: &[],
        group: Group::Replication,
        default: "5000",
        follows: None,
        doc: "In controller mode, how often (ms) a master looks for slaves to add to or drop \
              from its SyncStateSet (a slave's connection that ends is looked at at once).",
        live: None,
        read: |reading, field| {
            field
                .number(100, 3_600_000)
                .map(|ms| reading.config.controller.check_sync_state_set_period_ms = ms)
        },
        print: |printing| {
            printing
                .config
                .controller
                .check_sync_state_set_period_ms
                .to_string()
        },
    },
    Key {
        name: "controllerHeartBeatTimeoutMills",
        aliases: &[],
        group: Group::Replication,
        default: "10000",
        follows: None,
        doc: "In controller mode, how long (ms) the controller waits for the broker's \
              heartbeat before it counts the broker dead; a master that got no answer from any \
              controller for this long stops acknowledging sends (Quiver's lease; RocketMQ has \
              none).",
        live: None,
        read: |reading, field| {
            field
                .number(1_000, 3_600_000)
                .map(|ms| reading.config.controller.heartbeat_timeout_ms = ms)
        },
        print: |printing| printing.config.controller.heartbeat_timeout_ms.to_string(),
    },
    Key {
        name: "brokerElectionPriority",
        aliases: &[],
        group: Group::Replication,
        default: "2147483647",
        follows: None,
        doc: "In controller mode, the broker's rank among replicas equally far: lower is \
              elected first.",
        live: None,
        read: |reading, field| {
            field
                .number(i32::MIN, i32::MAX)
                .map(|priority| reading.config.controller.election_priority = priority)
        },
        print: |printing| printing.config.controller.election_priority.to_string(),
    },
    Key {
        name: "brokerHeartbeatInterval",
        aliases: &[],
        group: Group::Replication,
        default: "1000",
        follows: None,
        doc: "In controller mode, how often (ms) the broker sends its heartbeat (its epoch and \
              log end) to every controller.",
        live: None,
        read: |reading, field| {
            field
                .number(100, 60_000)
                .map(|ms| reading.config.controller.heartbeat_interval_ms = ms)
        },
        print: |printing| printing.config.controller.heartbeat_interval_ms.to_string(),
    },
    Key {
        name: "allAckInSyncStateSet",
        aliases: &[],
        group: Group::Replication,
        default: "false",
        follows: None,
        doc: "In controller mode, a master answers a send SEND_OK only once every member of \
              its SyncStateSet has it (FLUSH_SLAVE_TIMEOUT after `slaveTimeout`); without it \
              `inSyncReplicas` members.",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|on| reading.config.controller.all_ack_in_sync_state_set = on)
        },
        print: |printing| {
            printing
                .config
                .controller
                .all_ack_in_sync_state_set
                .to_string()
        },
    },
    Key {
        name: "haMaxTimeSlaveNotCatchup",
        aliases: &[],
        group: Group::Replication,
        default: "15000",
        follows: None,
        doc: "In controller mode, a slave that has not caught up with its master for this long \
              (ms) is dropped from the SyncStateSet.",
        live: None,
        read: |reading, field| {
            field
                .number(1_000, 3_600_000)
                .map(|ms| reading.config.controller.slave_not_caught_up_ms_max = ms)
        },
        print: |printing| {
            printing
                .config
                .controller
                .slave_not_caught_up_ms_max
                .to_string()
        },
    },
    Key {
        name: "inSyncReplicas",
        aliases: &[],
        group: Group::Replication,
        default: "1",
        follows: None,
        doc: "RocketMQ 5's replicas a send waits for: in controller mode without \
              `allAckInSyncStateSet`, the master and this many less one SyncStateSet members; \
              otherwise accepted and checked, and SYNC_MASTER waits for one slave whatever it \
              says.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 16)
                .map(|replicas| reading.config.in_sync_replicas = replicas)
        },
        print: |printing| printing.config.in_sync_replicas.to_string(),
    },
    Key {
        name: "minInSyncReplicas",
        aliases: &[],
        group: Group::Replication,
        default: "1",
        follows: None,
        doc: "RocketMQ 5's fewest replicas a send may wait for: in controller mode a master \
              whose SyncStateSet is smaller refuses sends (SYSTEM_ERROR, `in-sync replicas not \
              enough`); otherwise accepted and checked, and SYNC_MASTER waits for one slave \
              whatever it says.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 16)
                .map(|replicas| reading.config.min_in_sync_replicas = replicas)
        },
        print: |printing| printing.config.min_in_sync_replicas.to_string(),
    },
    Key {
        name: "brokerPermission",
        aliases: &[],
        group: Group::Messages,
        default: "6",
        follows: None,
        doc: "What clients may do on the broker's topics: 2 = write, 4 = read (6: both).",
        live: Some(LiveKey::BrokerPermission),
        read: |reading, field| {
            field
                .number(0, 15)
                .map(|permission| reading.config.broker_permission = permission)
        },
        print: |printing| printing.config.broker_permission.to_string(),
    },
    Key {
        name: "defaultTopicQueueNums",
        aliases: &[],
        group: Group::Messages,
        default: "8",
        follows: None,
        doc: "The queues of `TBW102` (set again at each start), so the most an auto-created \
              topic gets; also the queues of topics `nonPersistentTopics` creates.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 1024)
                .map(|queues| reading.config.default_topic_queue_nums = queues)
        },
        print: |printing| printing.config.default_topic_queue_nums.to_string(),
    },
    Key {
        name: "autoCreateTopicEnable",
        aliases: &[],
        group: Group::Messages,
        default: "true",
        follows: None,
        doc: "Topics are created on first send from `TBW102`; a new topic gets the producer's \
              queue count (4 by default) up to `defaultTopicQueueNums`.",
        live: Some(LiveKey::AutoCreateTopic),
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.auto_create_topic = enable)
        },
        print: |printing| printing.config.auto_create_topic.to_string(),
    },
    Key {
        name: "traceTopicEnable",
        aliases: &[],
        group: Group::Messages,
        default: "false",
        follows: None,
        doc: "With it, the message-trace topic is created at start (1 queue, read and write) \
              and cannot be reshaped by `updateTopic`; without it, a client's first trace \
              record creates the topic from `TBW102` like any other (auto-create on), as \
              RocketMQ does.",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.trace_topic_enable = enable)
        },
        print: |printing| printing.config.trace_topic_enable.to_string(),
    },
    Key {
        name: "msgTraceTopicName",
        aliases: &[],
        group: Group::Messages,
        default: "RMQ_SYS_TRACE_TOPIC",
        follows: None,
        doc: "The message-trace topic.",
        live: None,
        read: |reading, field| {
            field
                .topic(field.value, "a topic name")
                .map(|topic| reading.config.msg_trace_topic_name = topic)
        },
        print: |printing| printing.config.msg_trace_topic_name.clone(),
    },
    Key {
        name: "storeReplyMessageEnable",
        aliases: &[],
        group: Group::Messages,
        default: "true",
        follows: None,
        doc: "Replies to `producer.request` are stored in `<brokerClusterName>_REPLY_TOPIC` \
              (created at start, 1 queue) as well as pushed to the requesting client; with \
              `false` only pushed.",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.store_reply_message_enable = enable)
        },
        print: |printing| printing.config.store_reply_message_enable.to_string(),
    },
    Key {
        name: "autoCreateSubscriptionGroup",
        aliases: &[],
        group: Group::Messages,
        default: "true",
        follows: None,
        doc: "Consumer groups are created on first use (heartbeat, pull, pop, offset commit); \
              with `false`, only groups made with `mqadmin updateSubGroup` consume, others get \
              SUBSCRIPTION_GROUP_NOT_EXIST.",
        live: Some(LiveKey::AutoCreateSubscriptionGroup),
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.auto_create_subscription_group = enable)
        },
        print: |printing| printing.config.auto_create_subscription_group.to_string(),
    },
    Key {
        name: "useServerSideResetOffset",
        aliases: &[],
        group: Group::Messages,
        default: "true",
        follows: None,
        doc: "How `mqadmin resetOffsetByTime` works: the broker changes the offsets and moves \
              consumers at their next pull, and pop groups' cursors at once (RocketMQ 5); with \
              `false` it tells running consumers to move (RocketMQ 4).",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.use_server_side_reset_offset = enable)
        },
        print: |printing| printing.config.use_server_side_reset_offset.to_string(),
    },
    Key {
        name: "maxMessageSize",
        aliases: &[],
        group: Group::Messages,
        default: "4194304",
        follows: None,
        doc: "The largest body a send may carry (bytes; 4 MiB); bigger ones get MESSAGE_ILLEGAL.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 1024 * 1024 * 1024)
                .map(|bytes| reading.config.max_message_bytes = bytes)
        },
        print: |printing| printing.config.max_message_bytes.to_string(),
    },
    Key {
        name: "maxTransferBytesOnMessageInMemory",
        aliases: &[],
        group: Group::Limits,
        default: "262144",
        follows: None,
        doc: "The most one pull, pop or peek answer carries (bytes; 256 KiB): as many whole \
              messages as fit, and always at least one, whatever its size.",
        live: None,
        read: |reading, field| {
            field
                .number(1024, 16 * 1024 * 1024)
                .map(|bytes| reading.config.transfer_bytes_max = bytes)
        },
        print: |printing| printing.config.transfer_bytes_max.to_string(),
    },
    Key {
        name: "maxTransferCountOnMessageInMemory",
        aliases: &[],
        group: Group::Limits,
        default: "32",
        follows: None,
        doc: "The most messages one pull answer carries, whatever the client asks for.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 65_536)
                .map(|count| reading.config.transfer_count_max = count)
        },
        print: |printing| printing.config.transfer_count_max.to_string(),
    },
    Key {
        name: "transferMsgByHeap",
        aliases: &[],
        group: Group::Limits,
        default: "false",
        follows: None,
        doc: "With it, pull answers copy every message out of the page cache, as RocketMQ \
              does by default. Without it, runs of messages of 16 KiB or more on average go \
              from the CommitLog's page cache to the socket with `sendfile`, uncopied; their \
              headers are still checked against the ConsumeQueue. Pulls with SQL92 filters \
              always copy.",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|by_heap| reading.config.transfer_by_heap = by_heap)
        },
        print: |printing| printing.config.transfer_by_heap.to_string(),
    },
    Key {
        name: "quiverConnectionBytesMax",
        aliases: &[],
        group: Group::Limits,
        default: "16777216",
        follows: None,
        doc: "The bytes of requests and answers one connection may hold (16 MiB): past it the \
              broker reads nothing more from it until its answers are written.",
        live: None,
        read: |reading, field| {
            field
                .number(64 * 1024, 1 << 40)
                .map(|bytes| reading.config.connection_bytes_max = bytes)
        },
        print: |printing| printing.config.connection_bytes_max.to_string(),
    },
    Key {
        name: "quiverBrokerBytesMax",
        aliases: &[],
        group: Group::Limits,
        default: "268435456",
        follows: None,
        doc: "The bytes of requests and answers all connections together may hold (256 MiB): \
              past it the broker reads from no connection until answers are written.",
        live: None,
        read: |reading, field| {
            field
                .number(1024 * 1024, 1 << 40)
                .map(|bytes| reading.config.broker_bytes_max = bytes)
        },
        print: |printing| printing.config.broker_bytes_max.to_string(),
    },
    Key {
        name: crate::config::TOPICS_MAX_KEY,
        aliases: &[],
        group: Group::Limits,
        default: "10000",
        follows: None,
        doc: "The most topics the broker keeps (retry and dead-letter topics count); past it a \
              send to a new topic is answered TOPIC_NOT_EXIST and UPDATE_AND_CREATE_TOPIC of a \
              new one SYSTEM_ERROR, each naming this key.",
        live: None,
        read: |reading, field| {
            field
                .number(16, 500_000)
                .map(|topics| reading.config.topics_max = topics)
        },
        print: |printing| printing.config.topics_max.to_string(),
    },
    Key {
        name: crate::config::SUBSCRIPTION_GROUPS_MAX_KEY,
        aliases: &[],
        group: Group::Limits,
        default: "10000",
        follows: None,
        doc: "The most subscription groups the broker keeps; past it a new group is not \
              created, and its consumers are answered SUBSCRIPTION_GROUP_NOT_EXIST (an admin's \
              UPDATE_AND_CREATE_SUBSCRIPTIONGROUP SYSTEM_ERROR) naming this key.",
        live: None,
        read: |reading, field| {
            field
                .number(16, 1_000_000)
                .map(|groups| reading.config.subscription_groups_max = groups)
        },
        print: |printing| printing.config.subscription_groups_max.to_string(),
    },
    Key {
        name: crate::config::CLIENT_IDS_MAX_KEY,
        aliases: &[],
        group: Group::Limits,
        default: "20000",
        follows: None,
        doc: "The most client ids the broker keeps heartbeats of; a heartbeat of a new one \
              past it is answered SYSTEM_ERROR naming this key.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 1_000_000)
                .map(|ids| reading.config.client_ids_max = ids)
        },
        print: |printing| printing.config.client_ids_max.to_string(),
    },
    Key {
        name: crate::config::CLIENT_IDS_PER_CONNECTION_MAX_KEY,
        aliases: &[],
        group: Group::Limits,
        default: "1000",
        follows: None,
        doc: "The most client ids one connection may register (a client process has one, a \
              RocketMQ proxy one per client it serves); past it a heartbeat of a new one is \
              answered SYSTEM_ERROR naming this key.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 1_000_000)
                .map(|ids| reading.config.client_ids_per_connection_max = ids)
        },
        print: |printing| printing.config.client_ids_per_connection_max.to_string(),
    },
];
