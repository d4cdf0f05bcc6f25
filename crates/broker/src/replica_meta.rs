//! The slave side of metadata replication: what a slave takes from its master's answers to
//! GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET,
//! GET_ALL_SUBSCRIPTIONGROUP_CONFIG and GET_TIMER_CHECK_POINT (RocketMQ's SlaveSynchronize). The
//! `apply_*` functions are plain changes to the state with no I/O but the tables' own
//! persistence; `copy_from_master` asks a master (Quiver or RocketMQ) for them and applies
//! them. Messages are not copied here: that is the CommitLog's replication.
//!
//! The timer progress says which timer messages the master has delivered, and a delivery is a
//! message in the master's CommitLog: the slave takes the progress only once its own log holds
//! everything the master had written when it answered (`MasterTimerProgress`), or a failover
//! could skip a message whose delivered copy never reached the slave.
//!
//! The answers are peer input: names that are not valid topic or group names, negative queue
//! ids, levels and offsets are skipped, and a frame is at most `FRAME_BYTES_MAX`.

use std::collections::BTreeMap;
use std::time::Duration;

use quiver_wire::body::{
    self, ConsumerOffsetSerializeWrapper, DelayOffsetSerializeWrapper, KvTable,
    SubscriptionGroupWrapper, TopicConfigAndMappingSerializeWrapper,
};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::UpdateConsumerOffsetRequestHeader;
use quiver_wire::{Command, Encoding, TimerCheckpoint};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::offsets::{KeptCommit, OffsetsMerged};
use crate::outbound::Link;
use crate::state::Replicating;
use crate::topic::{is_system_topic, validate_group_name, validate_topic_name};
use crate::topic::{TopicError, TopicsReplaced};

/// A master's four answers, parsed.
#[derive(Debug, Clone, Default)]
pub struct MasterMeta {
    pub topics: TopicConfigAndMappingSerializeWrapper,
    pub offsets: ConsumerOffsetSerializeWrapper,
    pub delay_offsets: DelayOffsetSerializeWrapper,
    pub subscription_groups: SubscriptionGroupWrapper,
}

/// What one copy changed on the slave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyReport {
    pub topics: TopicsReplaced,
    pub offsets: OffsetsMerged,
    /// Offset entries skipped as malformed (bad "topic@group" key, negative queue or offset).
    pub offsets_skipped: usize,
    pub delay_offsets_changed: bool,
    /// Groups the master listed (invalid names skipped), and whether the slave's table changed.
    pub subscription_groups: usize,
    pub subscription_groups_changed: bool,
    /// The master's timer progress, to take once this slave's log reaches the master's end;
    /// None when the master runs no timer wheel.
    pub timer: Option<MasterTimerProgress>,
}

/// A master's timer progress and its CommitLog's end right after it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MasterTimerProgress {
    pub progress: crate::timer::Progress,
    pub master_position: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("{addr} is this broker's own address: a broker does not copy from itself")]
    OwnAddress { addr: String },
    #[error("asking {addr} for {request} failed: {message}")]
    Unreachable {
        addr: String,
        request: &'static str,
        message: String,
    },
    #[error("{addr} refused {request} with code {code}: {remark}")]
    Refused {
        addr: String,
        request: &'static str,
        code: i32,
        remark: String,
    },
    #[error("{addr} answered {request} with a body that does not parse: {message}")]
    BadBody {
        addr: String,
        request: &'static str,
        message: String,
    },
    #[error("cannot apply the master's topics: {0}")]
    Topics(#[from] TopicError),
}

/// Asks the master at `master_addr` for its topics, consumer offsets, delay offsets and
/// subscription groups over one connection, then applies them (`apply`). `timeout` bounds the
/// whole exchange. All four answers are read before anything is applied, so a master that
/// fails midway leaves the slave as the previous copy left it.
///
/// Applying may persist the topic table (a file write and fsync on the calling task) when the
/// master's topics changed; offsets and delay offsets are persisted by their periodic writers.
pub async fn copy_from_master(
    broker: Replicating<'_>,
    master_addr: &str,
    timeout: Duration,
) -> Result<CopyReport, CopyError> {
    if master_addr == broker.store_host.to_string() {
        return Err(CopyError::OwnAddress {
            addr: master_addr.to_string(),
        });
    }
    let deadline = Instant::now() + timeout;
    let mut link = Link::new(master_addr.to_string());
    let meta = MasterMeta {
        topics: ask(&mut link, request_code::GET_ALL_TOPIC_CONFIG, deadline).await?,
        offsets: ask(&mut link, request_code::GET_ALL_CONSUMER_OFFSET, deadline).await?,
        delay_offsets: ask(&mut link, request_code::GET_ALL_DELAY_OFFSET, deadline).await?,
        subscription_groups: ask(
            &mut link,
            request_code::GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
            deadline,
        )
        .await?,
    };
    // The rest of the copy does not depend on it: a master whose answer does not parse still
    // has its topics and offsets copied (and the slave, promoted, delivers again).
    let timer = match ask_timer_progress(&mut link, deadline).await {
        Ok(timer) => timer,
        Err(error) => {
            tracing::debug!(%error, "no timer progress from the master");
            None
        }
    };
    let mut report = apply(broker, meta)?;
    report.timer = timer;
    tell_master(&mut link, &report.offsets.kept_newer, deadline).await?;
    broker.offsets.master_took(&report.offsets.kept_newer);
    Ok(report)
}

/// The master's timer progress, then its CommitLog's end (GET_BROKER_RUNTIME_INFO, asked
/// after the progress arrived, so that it covers every delivery the progress counts). None
/// when the master refuses GET_TIMER_CHECK_POINT: it runs no wheel, or predates timers.
async fn ask_timer_progress(
    link: &mut Link,
    deadline: Instant,
) -> Result<Option<MasterTimerProgress>, CopyError> {
    let request = Command::request(request_code::GET_TIMER_CHECK_POINT, Encoding::Json);
    let response = match call(link, request, deadline).await {
        Ok(response) => response,
        Err(CopyError::Refused { .. }) => return Ok(None),
        Err(error) => return Err(error),
    };
    let addr = link.addr.clone();
    let bad_body = |request: &'static str, message: String| CopyError::BadBody {
        addr: addr.clone(),
        request,
        message,
    };
    let checkpoint = TimerCheckpoint::decode(&response.body)
        .map_err(|message| bad_body("GET_TIMER_CHECK_POINT", message))?;
    let runtime: KvTable = ask(link, request_code::GET_BROKER_RUNTIME_INFO, deadline).await?;
    let master_position = runtime
        .table
        .get("commitLogMaxOffset")
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| {
            bad_body(
                "GET_BROKER_RUNTIME_INFO",
                "no commitLogMaxOffset in the runtime info".to_string(),
            )
        })?;
    Ok(Some(MasterTimerProgress {
        progress: crate::timer::Progress {
            read_ms: checkpoint.last_read_time_ms.max(0),
            indexed: u64::try_from(checkpoint.master_timer_queue_offset).unwrap_or(0),
        },
        master_position,
    }))
}

/// Takes the master's timer progress into this slave's timer checkpoint once the slave's
/// CommitLog holds everything the master had written when it answered. Returns whether it was
/// taken (or was no news); `pending` is cleared then.
pub async fn take_timer_progress(
    broker: Replicating<'_>,
    pending: &mut Option<MasterTimerProgress>,
) -> std::io::Result<bool> {
    let Some(timer) = *pending else {
        return Ok(true);
    };
    if broker.store.stats().written_position < timer.master_position {
        return Ok(false);
    }
    let root = broker.config.store_root.clone();
    tokio::task::spawn_blocking(move || {
        crate::timer::record_master_progress(&root, timer.progress)
    })
    .await
    .map_err(std::io::Error::other)??;
    *pending = None;
    Ok(true)
}

/// Sends the master the offsets consumers committed on this slave past the master's own
/// (while it was down), with UPDATE_CONSUMER_OFFSET as a consumer would: a consumer that
/// starts on the returned master then resumes where the group got to on the slave. A failure
/// is retried by the next copy, which finds the same commits still newer.
async fn tell_master(
    link: &mut Link,
    kept: &[KeptCommit],
    deadline: Instant,
) -> Result<(), CopyError> {
    for commit in kept {
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: commit.group.clone(),
            topic: commit.topic.clone(),
            queue_id: commit.queue_id,
            commit_offset: commit.offset,
        };
        let request = Command::request(request_code::UPDATE_CONSUMER_OFFSET, Encoding::Json)
            .with_ext(header.to_ext());
        call(link, request, deadline).await?;
    }
    Ok(())
}

/// Sends one of the four requests and parses its answer. The request has no ext fields:
/// a RocketMQ 5 master then answers the whole table in one response (with ext fields it
/// would require `topicSeq` and may page).
async fn ask<T: DeserializeOwned>(
    link: &mut Link,
    code: i32,
    deadline: Instant,
) -> Result<T, CopyError> {
    let response = call(link, Command::request(code, Encoding::Json), deadline).await?;
    let request_name = request_code::name(code).unwrap_or("metadata request");
    body::from_json(&response.body).map_err(|error| CopyError::BadBody {
        addr: link.addr.clone(),
        request: request_name,
        message: error.to_string(),
    })
}

/// One request to the master; anything but SUCCESS is an error.
async fn call(link: &mut Link, request: Command, deadline: Instant) -> Result<Command, CopyError> {
    let request_name = request_code::name(request.code).unwrap_or("metadata request");
    let addr = link.addr.clone();
    let remaining = deadline.saturating_duration_since(Instant::now());
    let response = link
        .call(request, remaining)
        .await
        .map_err(|error| CopyError::Unreachable {
            addr: addr.clone(),
            request: request_name,
            message: error.to_string(),
        })?;
    if response.code != response_code::SUCCESS {
        return Err(CopyError::Refused {
            addr,
            request: request_name,
            code: response.code,
            remark: response.remark.unwrap_or_default(),
        });
    }
    Ok(response)
}

/// Applies a master's answers: topics first, so that offsets arrive for the topics they
/// belong to.
pub fn apply(broker: Replicating<'_>, meta: MasterMeta) -> Result<CopyReport, TopicError> {
    let topics = apply_topics(broker, meta.topics)?;
    let (offsets, offsets_skipped) = apply_offsets(broker, meta.offsets);
    let delay_offsets_changed = apply_delay_offsets(broker, meta.delay_offsets);
    let (subscription_groups, subscription_groups_changed) =
        apply_subscription_groups(broker, meta.subscription_groups);
    Ok(CopyReport {
        topics,
        offsets,
        offsets_skipped,
        delay_offsets_changed,
        subscription_groups,
        subscription_groups_changed,
        timer: None,
    })
}

/// Replaces the slave's subscription groups with the master's (`mqadmin updateSubGroup` on the
/// master reaches the slave, and consumers that fail over find their group's settings there).
/// Returns how many groups were taken and whether the table changed.
pub fn apply_subscription_groups(
    broker: Replicating<'_>,
    mut master: SubscriptionGroupWrapper,
) -> (usize, bool) {
    master.subscription_group_table.retain(|name, config| {
        crate::groups::validate_group(name).is_ok() && config.group_name == *name
    });
    let count = master.subscription_group_table.len();
    let version_time = master.data_version.timestamp;
    (
        count,
        broker.groups.replace_from_master(master, version_time),
    )
}

/// Replaces the slave's topics with the master's, keeping the slave's own system topics as
/// they are (the schedule topic's queues follow this broker's delay levels, TBW102 its
/// auto-create setting). A change asks the registration task to register now, so that name
/// servers route to the slave's new topics; the offsets of removed topics go with them, as a
/// deletion on the master removed them there.
pub fn apply_topics(
    broker: Replicating<'_>,
    master: TopicConfigAndMappingSerializeWrapper,
) -> Result<TopicsReplaced, TopicError> {
    let config = broker.config;
    let own_system_topic =
        |name: &str| is_system_topic(name, &config.cluster_name, &config.broker_name);
    let replaced = broker
        .topics
        .replace_from_master(master.topic_config_table, own_system_topic)?;
    for topic in &replaced.removed {
        broker.offsets.remove_topic(topic);
    }
    if replaced.changed() {
        broker.topics_changed();
    }
    Ok(replaced)
}

/// Merges the master's consumer offsets into the slave's with the rule in
/// `ConsumerOffsets::merge_from_master`: the master's win, except offsets a consumer committed
/// higher on this slave since the master last caught up. Returns what changed and how many
/// malformed entries were skipped.
pub fn apply_offsets(
    broker: Replicating<'_>,
    master: ConsumerOffsetSerializeWrapper,
) -> (OffsetsMerged, usize) {
    let mut skipped = 0;
    let mut valid = BTreeMap::new();
    for (key, queues) in master.offset_table {
        let well_named = key.split_once('@').is_some_and(|(topic, group)| {
            validate_topic_name(topic).is_ok() && validate_group_name(group).is_ok()
        });
        if !well_named {
            skipped += queues.len().max(1);
            continue;
        }
        let before = queues.len();
        let queues: BTreeMap<i32, i64> = queues
            .into_iter()
            .filter(|(queue_id, offset)| *queue_id >= 0 && *offset >= 0)
            .collect();
        skipped += before - queues.len();
        valid.insert(key, queues);
    }
    (broker.offsets.merge_from_master(valid), skipped)
}

/// Takes the master's delay offsets (how far each level's schedule queue was delivered), so
/// that a slave that takes over delivers from there and not from the start. Levels below 1
/// and negative offsets are dropped. Returns whether anything changed.
pub fn apply_delay_offsets(broker: Replicating<'_>, master: DelayOffsetSerializeWrapper) -> bool {
    let table = master
        .offset_table
        .into_iter()
        .filter(|(level, offset)| *level >= 1 && *offset >= 0)
        .collect();
    broker.delay_offsets.replace(table)
}
