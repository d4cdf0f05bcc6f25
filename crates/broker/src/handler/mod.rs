//! Request handlers, one file per family, found through one table. Every handler has one
//! shape: `fn(&Call, &Command) -> Result<Reply, Refusal>`. The `Call` carries what a handler
//! may touch (the broker's state and the connection the request came on) and the time; the
//! `Reply` is the answer now, or work whose completion answers later: records for the store
//! (a send) or a wait (a parked pull). The connection layer carries the work out and writes
//! the answer; no handler writes to a socket.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use quiver_store::{AppendError, AppendOutcome, Record};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::HeaderError;
use quiver_wire::Command;

use crate::config::{SUBSCRIPTION_GROUPS_MAX_KEY, TOPICS_MAX_KEY};
use crate::connection::{Answer, Connection};
use crate::groups::Missing;
use crate::state::{Broker, Sending};
use crate::topic::{TopicError, PERM_WRITE};

mod admin;
mod assignment;
mod client;
mod controller;
mod group;
mod lock;
mod offset;
mod pop;
mod pop_watch;
mod pull;
mod query;
mod replica;
mod reply;
mod retry;
mod send;
mod stats;
mod transaction;

pub(crate) use pop::batch_ack_offsets;

/// What a handler may touch, and the time the request is handled at.
pub struct Call<'a> {
    pub broker: &'a Arc<Broker>,
    pub connection: &'a Connection,
    pub now_ms: i64,
}

/// Turns the store's outcome for a `Reply::Append` into the answer.
pub type AnswerAppend = Box<dyn FnOnce(Result<AppendOutcome, AppendError>) -> Command + Send>;

/// What a handler returns.
pub enum Reply {
    /// The answer, now.
    Now(Command),
    /// The answer, now, with records of its body left in the store's files (a pull's).
    FromFiles(Answer),
    /// Records to write with the rest of the connection's read (one group); the answer comes
    /// once they are durable under the flush mode.
    Append {
        records: Vec<Record>,
        answer: AnswerAppend,
    },
    /// The answer comes when this completes: a pull parked until a message lands on its queue
    /// or its suspend time runs out.
    Wait(Pin<Box<dyn Future<Output = Answer> + Send>>),
}

impl Reply {
    /// `Reply::Wait` for an answer whose body is all in memory.
    pub fn wait(answer: impl Future<Output = Command> + Send + 'static) -> Reply {
        Reply::Wait(Box::pin(async move { Answer::from(answer.await) }))
    }
}

/// Why a request was refused: a response code and the remark that explains it.
#[derive(Debug)]
pub struct Refusal {
    pub code: i32,
    pub remark: String,
}

impl Refusal {
    pub fn new(code: i32, remark: impl Into<String>) -> Refusal {
        Refusal {
            code,
            remark: remark.into(),
        }
    }

    pub fn into_response(self, request: &Command) -> Command {
        request.response_to(self.code).with_remark(self.remark)
    }
}

impl From<HeaderError> for Refusal {
    fn from(error: HeaderError) -> Refusal {
        Refusal::new(response_code::SYSTEM_ERROR, error.to_string())
    }
}

/// Sends and consumers' send-backs alike: a broker closed to writes (being drained) refuses
/// them with NO_PERMISSION, and Java clients then go to a broker that takes them.
fn broker_writable(broker: Sending<'_>, now_ms: i64) -> Result<(), Refusal> {
    if let Some(controlled) = &broker.replication.controlled {
        controller_mode_writable(broker.replication, controlled, now_ms)?;
    }
    if broker.replication.is_slave() {
        // RocketMQ's answer for a put on a slave; clients then send to a master.
        return Err(Refusal::new(
            response_code::SERVICE_NOT_AVAILABLE,
            "service not available now: the broker is a slave, which takes no sends",
        ));
    }
    if broker.live.broker_permission() & PERM_WRITE == 0 {
        let remark = format!(
            "the broker[{}] sending message is forbidden",
            broker.config.broker_name
        );
        return Err(Refusal::new(response_code::NO_PERMISSION, remark));
    }
    Ok(())
}

/// Controller mode: a broker the controller has not made master yet, or in a role change, or a
/// master whose lease lapsed, refuses sends with SERVICE_NOT_AVAILABLE (clients then try
/// another broker); a SyncStateSet below `minInSyncReplicas` with RocketMQ's
/// IN_SYNC_REPLICAS_NOT_ENOUGH answer (SYSTEM_ERROR).
fn controller_mode_writable(
    replication: &crate::ha::Replication,
    controlled: &crate::ha::controlled::Controlled,
    now_ms: i64,
) -> Result<(), Refusal> {
    use crate::ha::controlled::SendRefused;
    if replication.role() == crate::ha::Role::Undecided {
        return Err(Refusal::new(
            response_code::SERVICE_NOT_AVAILABLE,
            "service not available now: controller mode, and the controller has not given this \
             broker a role yet",
        ));
    }
    if replication.is_slave() {
        return Ok(());
    }
    let remark =
        match controlled.refuses_send(now_ms) {
            None => return Ok(()),
            Some(SendRefused::Fenced) => {
                "service not available now: the broker is changing its role (controller mode)"
            }
            Some(SendRefused::LeaseExpired) => {
                "service not available now: this master has not reached a controller within \
             controllerHeartBeatTimeoutMills and may no longer be master"
            }
            Some(SendRefused::InSyncReplicasNotEnough) => return Err(Refusal::new(
                response_code::SYSTEM_ERROR,
                "in-sync replicas not enough: the SyncStateSet is smaller than minInSyncReplicas",
            )),
        };
    Err(Refusal::new(response_code::SERVICE_NOT_AVAILABLE, remark))
}

/// The same for a topic whose permission has no write bit.
fn topic_writable(topic: &str, perm: i32) -> Result<(), Refusal> {
    if perm & PERM_WRITE == 0 {
        let remark = format!("the topic[{topic}] sending message is forbidden");
        return Err(Refusal::new(response_code::NO_PERMISSION, remark));
    }
    Ok(())
}

pub type Handled = Result<Reply, Refusal>;
type Handler = fn(&Call, &Command) -> Handled;

fn handler_for(code: i32) -> Option<Handler> {
    use request_code::*;
    Some(match code {
        SEND_MESSAGE | SEND_MESSAGE_V2 | SEND_BATCH_MESSAGE => send::send,
        END_TRANSACTION => transaction::end_transaction,
        SEND_REPLY_MESSAGE | SEND_REPLY_MESSAGE_V2 => reply::reply,
        PULL_MESSAGE | LITE_PULL_MESSAGE => pull::pull,
        CONSUMER_SEND_MSG_BACK => retry::send_back,
        HEART_BEAT => client::heartbeat,
        UNREGISTER_CLIENT => client::unregister,
        GET_CONSUMER_LIST_BY_GROUP => client::consumer_list,
        CHECK_CLIENT_CONFIG => client::check_client_config,
        QUERY_CONSUMER_OFFSET => offset::query_consumer_offset,
        UPDATE_CONSUMER_OFFSET => offset::update_consumer_offset,
        GET_MAX_OFFSET => offset::max_offset,
        GET_MIN_OFFSET => offset::min_offset,
        SEARCH_OFFSET_BY_TIMESTAMP => offset::search_offset_by_timestamp,
        GET_EARLIEST_MSG_STORETIME => offset::earliest_store_time,
        UPDATE_AND_CREATE_TOPIC => admin::create_topic,
        DELETE_TOPIC_IN_BROKER => admin::delete_topic,
        GET_BROKER_RUNTIME_INFO => admin::runtime_info,
        GET_BROKER_CONFIG => admin::broker_config,
        UPDATE_BROKER_CONFIG => admin::update_broker_config,
        QUERY_TOPIC_CONSUME_BY_WHO => admin::topic_consumed_by,
        QUERY_MESSAGE => query::by_key,
        VIEW_MESSAGE_BY_ID => query::by_position,
        LOCK_BATCH_MQ => lock::lock_batch,
        UNLOCK_BATCH_MQ => lock::unlock_batch,
        GET_TOPIC_STATS_INFO => stats::topic_stats,
        GET_CONSUME_STATS => stats::consume_stats,
        GET_TOPIC_CONFIG => stats::topic_config,
        GET_ALL_TOPIC_CONFIG => replica::all_topic_config,
        GET_ALL_CONSUMER_OFFSET => replica::all_consumer_offset,
        GET_ALL_DELAY_OFFSET => replica::all_delay_offset,
        GET_ALL_SUBSCRIPTIONGROUP_CONFIG => replica::all_subscription_group,
        GET_TIMER_CHECK_POINT => replica::timer_check_point,
        UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => group::update,
        DELETE_SUBSCRIPTIONGROUP => group::delete,
        GET_SUBSCRIPTIONGROUP_CONFIG => group::get,
        GET_CONSUMER_CONNECTION_LIST => client::consumer_connections,
        GET_PRODUCER_CONNECTION_LIST => client::producer_connections,
        GET_CONSUMER_RUNNING_INFO => client::consumer_running_info,
        INVOKE_BROKER_TO_RESET_OFFSET => offset::reset_offset,
        SET_MESSAGE_REQUEST_MODE => assignment::set_mode,
        GET_ALL_MESSAGE_REQUEST_MODE => assignment::all_modes,
        QUERY_ASSIGNMENT => assignment::query_assignment,
        POP_MESSAGE => pop::pop,
        ACK_MESSAGE => pop::ack,
        BATCH_ACK_MESSAGE => pop::batch_ack,
        CHANGE_MESSAGE_INVISIBLETIME => pop::change_invisible_time,
        PEEK_MESSAGE => pop_watch::peek,
        NOTIFICATION => pop_watch::notification,
        POLLING_INFO => pop_watch::polling_info,
        NOTIFY_BROKER_ROLE_CHANGED => controller::notify_role_changed,
        GET_BROKER_EPOCH_CACHE => controller::epoch_cache,
        _ => return None,
    })
}

/// The reply to `request`: its handler's, a refusal turned into its answer, or
/// REQUEST_CODE_NOT_SUPPORTED for a code no handler takes.
pub fn dispatch(call: &Call, request: &Command) -> Reply {
    let Some(handler) = handler_for(request.code) else {
        let remark = format!("request type {} not supported", request.code);
        return Reply::Now(
            request
                .response_to(response_code::REQUEST_CODE_NOT_SUPPORTED)
                .with_remark(remark),
        );
    };
    handler(call, request).unwrap_or_else(|refusal| Reply::Now(refusal.into_response(request)))
}

/// A handler's answer now.
fn answer(response: Command) -> Handled {
    Ok(Reply::Now(response))
}

/// The answer `work` gives, worked out on the runtime's blocking pool: for admin requests
/// that write files, fsync or read many queues (a topic's deletion, an offset reset, a topic's
/// creation made durable), so that no runtime worker, and no connection's sends, wait on a
/// disk for them. At most `ADMIN_WORK_MAX` run at once; the rest wait as parked tasks, not as
/// threads.
pub(super) fn off_the_workers(
    call: &Call,
    request: &Command,
    work: impl FnOnce(&Broker, &Command) -> Result<Command, Refusal> + Send + 'static,
) -> Handled {
    let broker = Arc::clone(call.broker);
    let refused = request.response_to(response_code::SYSTEM_ERROR);
    let request = request.clone();
    Ok(Reply::wait(async move {
        let _permit = broker.administering().admin_work.acquire().await;
        let owner = Arc::clone(&broker);
        let worked = tokio::task::spawn_blocking(move || {
            let answer = work(&owner, &request);
            answer.unwrap_or_else(|refusal| refusal.into_response(&request))
        });
        match worked.await {
            Ok(answer) => answer,
            Err(error) => refused.with_remark(format!("the admin task failed: {error}")),
        }
    }))
}

/// A topic the table would not create or write, as the refusal that says why: past
/// `quiverTopicsMax` with `limit_code` (what the request's family answers when a topic cannot
/// be had), a bad name with INVALID_PARAMETER, a failed write with SYSTEM_ERROR.
fn topic_refusal(error: TopicError, limit_code: i32) -> Refusal {
    let code = match &error {
        TopicError::TooMany { max, .. } => {
            let remark = format!("{error}: {TOPICS_MAX_KEY}={max}");
            return Refusal::new(limit_code, remark);
        }
        TopicError::InvalidName { .. } | TopicError::InvalidGroupName { .. } => {
            response_code::INVALID_PARAMETER
        }
        TopicError::Persist { .. } | TopicError::Load(_) => response_code::SYSTEM_ERROR,
    };
    Refusal::new(code, error.to_string())
}

/// A group a request names that is not there, as RocketMQ answers it, or, when the table is
/// full, with the limit named.
fn group_refusal(group: &str, missing: Missing) -> Refusal {
    let remark = match missing {
        Missing::NotFound => format!("Group {group} not exist!"),
        Missing::Full { held, max } => format!(
            "subscription group {group} cannot be created: the broker holds {held} groups, its \
             most: {SUBSCRIPTION_GROUPS_MAX_KEY}={max}"
        ),
    };
    Refusal::new(response_code::SUBSCRIPTION_GROUP_NOT_EXIST, remark)
}
