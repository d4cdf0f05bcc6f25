//! Delayed and timer delivery, pop, transactions, non-persistent topics and filters. Keys of `KEYS`, in the order GET_BROKER_CONFIG prints them (see `keys.rs`).

use super::*;

pub(in crate::config) static FEATURES: &[Key] = &[
    Key {
        name: "messageDelayLevel",
        aliases: &[],
        group: Group::Delivery,
        default: "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        follows: None,
        doc: "The delay levels of DELAY sends and consumer retries: level n waits the nth \
              duration (`s`, `m`, `h`, `d`).",
        live: None,
        read: |reading, field| {
            let levels = crate::config::delay_levels::parse_levels(field.value);
            reading.config.delay_levels_ms = levels.map_err(|allowed| field.invalid(allowed))?;
            Ok(())
        },
        print: |printing| {
            crate::config::delay_levels::format_levels(&printing.config.delay_levels_ms)
        },
    },
    Key {
        name: "timerWheelEnable",
        aliases: &[],
        group: Group::Delivery,
        default: "true",
        follows: None,
        doc: "RocketMQ 5 timer messages are delivered at their time; with `false` they are \
              refused (MESSAGE_ILLEGAL), as RocketMQ does.",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.timer_wheel_enable = enable)
        },
        print: |printing| printing.config.timer_wheel_enable.to_string(),
    },
    Key {
        name: "timerMaxDelaySec",
        aliases: &[],
        group: Group::Delivery,
        default: "259200",
        follows: None,
        doc: "How far ahead a timer message may be due (s; 3 days); one further ahead is \
              refused with MESSAGE_ILLEGAL.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 10 * 365 * 86_400)
                .map(|delay_sec| reading.config.timer_max_delay_sec = delay_sec)
        },
        print: |printing| printing.config.timer_max_delay_sec.to_string(),
    },
    Key {
        name: "popInflightMaxPerQueue",
        aliases: &[],
        group: Group::Pop,
        default: "20000",
        follows: None,
        doc: "Messages a group may hold popped and unacknowledged per queue; past that, a pop \
              that finds nothing else is answered POLLING_FULL with the reason.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 10_000_000)
                .map(|messages| reading.config.pop_in_flight_max_per_queue = messages)
        },
        print: |printing| printing.config.pop_in_flight_max_per_queue.to_string(),
    },
    Key {
        name: "popInflightMaxPerGroup",
        aliases: &[],
        group: Group::Pop,
        default: "200000",
        follows: None,
        doc: "Messages a group may hold popped and unacknowledged in all its queues; past that, \
              as per queue.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 100_000_000)
                .map(|messages| reading.config.pop_in_flight_max_per_group = messages)
        },
        print: |printing| printing.config.pop_in_flight_max_per_group.to_string(),
    },
    Key {
        name: "nonPersistentTopics",
        aliases: &[],
        group: Group::NonPersistent,
        default: "",
        follows: None,
        doc: "Comma-separated topics made non-persistent at start (created with \
              `defaultTopicQueueNums` queues when missing).",
        live: None,
        read: |reading, field| {
            let names = field.value.split(',').map(str::trim);
            let topics = names
                .filter(|name| !name.is_empty())
                .map(|name| field.topic(name, "a comma-separated list of topic names"));
            reading.config.non_persistent_topics = topics.collect::<Result<_, _>>()?;
            Ok(())
        },
        print: |printing| printing.config.non_persistent_topics.join(","),
    },
    Key {
        name: "transactionTimeOut",
        aliases: &[],
        group: Group::Transactions,
        default: "6000",
        follows: None,
        doc: "A half message undecided this long (ms, from its born time; longer when it \
              carries `CHECK_IMMUNITY_TIME_IN_SECONDS`) is checked with its producer.",
        live: None,
        read: |reading, field| {
            field
                .number(0, 30 * 86_400_000)
                .map(|timeout_ms| reading.config.transaction.timeout_ms = timeout_ms)
        },
        print: |printing| printing.config.transaction.timeout_ms.to_string(),
    },
    Key {
        name: "transactionCheckInterval",
        aliases: &[],
        group: Group::Transactions,
        default: "30000",
        follows: None,
        doc: "How often undecided half messages are checked (ms).",
        live: None,
        read: |reading, field| {
            field
                .number(100, 86_400_000)
                .map(|interval_ms| reading.config.transaction.interval_ms = interval_ms)
        },
        print: |printing| printing.config.transaction.interval_ms.to_string(),
    },
    Key {
        name: "transactionCheckMax",
        aliases: &[],
        group: Group::Transactions,
        default: "15",
        follows: None,
        doc: "Checks of a half message before it moves to `TRANS_CHECK_MAX_TIME_TOPIC`; check \
              counts are kept in memory, so a restart counts anew.",
        live: None,
        read: |reading, field| {
            field
                .number(0, 10_000)
                .map(|checks| reading.config.transaction.check_max = checks)
        },
        print: |printing| printing.config.transaction.check_max.to_string(),
    },
    Key {
        name: "nonPersistentQueueBytes",
        aliases: &[],
        group: Group::NonPersistent,
        default: "16777216",
        follows: None,
        doc: "The most a non-persistent queue's ring holds (bytes; 16 MiB); a full ring drops \
              its oldest messages.",
        live: None,
        read: |reading, field| {
            field
                .number(64 * 1024, 1 << 40)
                .map(|bytes| reading.config.non_persistent_queue_bytes = bytes)
        },
        print: |printing| printing.config.non_persistent_queue_bytes.to_string(),
    },
    Key {
        name: "nonPersistentBytesMax",
        aliases: &[],
        group: Group::NonPersistent,
        default: "268435456",
        follows: None,
        doc: "The most all rings hold together (bytes; 256 MiB): each queue holds at most its \
              share, split equally over the queues that hold messages.",
        live: None,
        read: |reading, field| {
            field
                .number(64 * 1024, 1 << 40)
                .map(|bytes| reading.config.non_persistent_bytes_max = bytes)
        },
        print: |printing| printing.config.non_persistent_bytes_max.to_string(),
    },
    Key {
        name: "enablePropertyFilter",
        aliases: &[],
        group: Group::Messages,
        default: "false",
        follows: None,
        doc: "SQL92 subscriptions (`MessageSelector.bySql`) are served; with `false` their \
              pulls and CHECK_CLIENT_CONFIG get SYSTEM_ERROR, as in RocketMQ (pops are served \
              either way, as RocketMQ serves them).",
        live: None,
        read: |reading, field| {
            field
                .boolean()
                .map(|enable| reading.config.enable_property_filter = enable)
        },
        print: |printing| printing.config.enable_property_filter.to_string(),
    },
];
