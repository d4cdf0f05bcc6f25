//! Request handlers, one file per family, found through one table. A handler is a function of
//! the request and the broker that returns the response; send and pull answer later (after the
//! store or a long poll), so they take the responder instead.

use std::sync::Arc;

use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::HeaderError;
use quiver_wire::Command;

use crate::broker::Broker;
use crate::connection::{Connection, Responder};
use crate::topic::PERM_WRITE;

mod admin;
mod client;
mod lock;
mod offset;
mod pull;
mod query;
mod retry;
mod send;
mod stats;

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
fn broker_writable(broker: &Broker) -> Result<(), Refusal> {
    if broker.config.broker_permission & PERM_WRITE == 0 {
        let remark = format!(
            "the broker[{}] sending message is forbidden",
            broker.config.broker_name
        );
        return Err(Refusal::new(response_code::NO_PERMISSION, remark));
    }
    Ok(())
}

/// The same for a topic whose permission has no write bit.
fn topic_writable(topic: &str, perm: i32) -> Result<(), Refusal> {
    if perm & PERM_WRITE == 0 {
        let remark = format!("the topic[{topic}] sending message is forbidden");
        return Err(Refusal::new(response_code::NO_PERMISSION, remark));
    }
    Ok(())
}

pub type Handled = Result<Command, Refusal>;
type Handler = fn(&Broker, &Command, &Connection) -> Handled;

fn handler_for(code: i32) -> Option<Handler> {
    use request_code::*;
    Some(match code {
        HEART_BEAT => client::heartbeat,
        UNREGISTER_CLIENT => client::unregister,
        GET_CONSUMER_LIST_BY_GROUP => client::consumer_list,
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
        QUERY_TOPIC_CONSUME_BY_WHO => admin::topic_consumed_by,
        QUERY_MESSAGE => query::by_key,
        VIEW_MESSAGE_BY_ID => query::by_position,
        LOCK_BATCH_MQ => lock::lock_batch,
        UNLOCK_BATCH_MQ => lock::unlock_batch,
        GET_TOPIC_STATS_INFO => stats::topic_stats,
        GET_CONSUME_STATS => stats::consume_stats,
        GET_TOPIC_CONFIG => stats::topic_config,
        _ => return None,
    })
}

pub fn dispatch(broker: &Arc<Broker>, request: Command, responder: Responder) {
    match request.code {
        request_code::SEND_MESSAGE
        | request_code::SEND_MESSAGE_V2
        | request_code::SEND_BATCH_MESSAGE => send::handle(broker, request, responder),
        request_code::PULL_MESSAGE | request_code::LITE_PULL_MESSAGE => {
            pull::handle(broker, request, responder)
        }
        request_code::CONSUMER_SEND_MSG_BACK => retry::handle(broker, request, responder),
        code => {
            let response = match handler_for(code) {
                Some(handler) => handler(broker, &request, responder.connection())
                    .unwrap_or_else(|refusal| refusal.into_response(&request)),
                None => request
                    .response_to(response_code::REQUEST_CODE_NOT_SUPPORTED)
                    .with_remark(format!("request type {code} not supported")),
            };
            responder.reply(response);
        }
    }
}
