//! What a slave copies from its master, answered as a master: GET_ALL_TOPIC_CONFIG,
//! GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET, GET_ALL_SUBSCRIPTIONGROUP_CONFIG and
//! GET_TIMER_CHECK_POINT. The
//! bodies have the shapes RocketMQ's slave parses (`quiver_wire::body`: the wrappers' field
//! names, checked against RocketMQ 5's serialization); the applying side is `replica_meta`.
//!
//! Each answer holds the whole table. A RocketMQ 5 slave asks for pages (`topicSeq`,
//! `maxTopicNum`), but a RocketMQ master with `enableSplitMetadata=false` also answers whole
//! tables, and the slave stops asking once the entries it has reach `totalTopicNum - 1`
//! (`totalGroupNum - 1`), which the first answer then does.

use std::collections::{BTreeMap, BTreeSet};

use quiver_wire::body::{
    self, ConsumerOffsetSerializeWrapper, DataVersion, DelayOffsetSerializeWrapper,
    TopicConfigAndMappingSerializeWrapper,
};
use quiver_wire::code::response_code;
use quiver_wire::{Command, ExtFields, TimerCheckpoint};

use super::{answer, Call, Handled};

pub fn all_topic_config(call: &Call, request: &Command) -> Handled {
    let topics = call.broker.administering().topics.snapshot();
    let total = topics.topic_config_table.len();
    let wrapper = TopicConfigAndMappingSerializeWrapper {
        data_version: topics.data_version,
        // There are no static-topic mappings, so their version never changes while the broker
        // runs. It must still be the same from one answer to the next: a RocketMQ slave whose
        // mapping version differs from this one replaces its topic table again on every copy.
        mapping_data_version: DataVersion {
            timestamp: call.broker.administering().started_ms,
            ..DataVersion::default()
        },
        topic_config_table: topics.topic_config_table,
        topic_queue_mapping_detail_map: BTreeMap::new(),
        topic_queue_mapping_info_map: BTreeMap::new(),
    };
    let ext = ExtFields::new().with("totalTopicNum", total);
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_ext(ext)
            .with_body(body::to_json(&wrapper)),
    )
}

/// The offset table as RocketMQ's `consumerOffset.json`. Quiver keeps no data version for
/// offsets; a RocketMQ slave only copies the one it is given (and fails the copy on a missing
/// one), so the answer's time stands in for it.
pub fn all_consumer_offset(call: &Call, request: &Command) -> Handled {
    let offset_table = call.broker.administering().offsets.snapshot();
    let mut group_topic_map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (topic, group) in offset_table.keys().filter_map(|key| key.split_once('@')) {
        group_topic_map
            .entry(group.to_string())
            .or_default()
            .insert(topic.to_string());
    }
    let wrapper = ConsumerOffsetSerializeWrapper {
        data_version: DataVersion {
            timestamp: call.now_ms,
            ..DataVersion::default()
        },
        group_topic_map,
        offset_table,
    };
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(body::to_json(&wrapper)),
    )
}

/// `delayOffset.json` as this broker keeps it (level -> offset, no data version, which
/// RocketMQ reads as optional); a RocketMQ slave writes the body to its own file as it is.
pub fn all_delay_offset(call: &Call, request: &Command) -> Handled {
    let wrapper = DelayOffsetSerializeWrapper {
        data_version: None,
        offset_table: call.broker.administering().delay_offsets.snapshot(),
    };
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(body::to_json(&wrapper)),
    )
}

/// The timer wheel's progress in RocketMQ's TimerCheckpoint form: the read time it has
/// delivered everything before, and the timer-queue offset it has indexed up to (Quiver has no
/// timer log: its flush position is 0). Refused as RocketMQ refuses it when no wheel runs.
pub fn timer_check_point(call: &Call, request: &Command) -> Handled {
    let progress = *call
        .broker
        .administering()
        .counters
        .timer_progress
        .lock()
        .expect("timer progress lock poisoned");
    let Some(progress) = progress else {
        return answer(
            request
                .response_to(response_code::SYSTEM_ERROR)
                .with_remark("The checkpoint is null: no timer wheel runs on this broker"),
        );
    };
    let indexed = i64::try_from(progress.indexed).unwrap_or(i64::MAX);
    let checkpoint = TimerCheckpoint {
        last_read_time_ms: progress.read_ms,
        last_timer_log_flush_pos: 0,
        last_timer_queue_offset: indexed,
        master_timer_queue_offset: indexed,
        state_version: 0,
        timestamp: call.now_ms,
        counter: 0,
    };
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(checkpoint.encode()),
    )
}

/// The subscription-group table (`groups.rs`), whole, as a RocketMQ slave copies it.
pub fn all_subscription_group(call: &Call, request: &Command) -> Handled {
    let wrapper = call.broker.administering().groups.snapshot();
    let total = wrapper.subscription_group_table.len();
    let ext = ExtFields::new().with("totalGroupNum", total);
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_ext(ext)
            .with_body(body::to_json(&wrapper)),
    )
}
