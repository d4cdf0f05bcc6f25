//! SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325): a consumer's reply to a request
//! (`producer.request`). The reply is checked and built as a send is, stored when
//! `storeReplyMessageEnable` says so, and pushed to the requesting client, named by the reply's
//! REPLY_TO_CLIENT property, with PUSH_REPLY_MESSAGE_TO_CLIENT (326). As in RocketMQ, the
//! replier is answered SYSTEM_ERROR when the requester is not connected here (its send then
//! retries), and SUCCESS when the push went out even if storing failed. A stored reply is
//! answered once it is stored and pushed, without waiting for the requester to acknowledge the
//! push (RocketMQ waits up to 10 s): an append's answer is made where the store completes it,
//! outside any task, so the acknowledgement is awaited on a task of its own and a refusal is
//! logged. Without storing, the answer waits for the acknowledgement, as in RocketMQ.

use std::net::SocketAddr;
use std::time::Duration;

use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{ReplyMessageHeader, SendMessageResponseHeader};
use quiver_wire::message::{find_property, property};
use quiver_wire::{Command, Encoding};

use super::send::{prepare, write, MSG_REGION, TRACE_SWITCH};
use super::{Call, Handled, Refusal, Reply};
use crate::connection::{AskError, Connection};
use crate::stored;

/// How long the broker waits for the requester to take a pushed reply: RocketMQ's wait for a
/// client's answer to a broker request (Broker2Client.callClient).
const PUSH_ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

pub fn reply(call: &Call, request: &Command) -> Handled {
    let prepared = prepare(call, request)?;
    let queue_id = prepared.queue_id;
    let header = prepared.header.clone();
    let target = requester(call, &header.properties);
    let push = push_request(call, request, header);
    if !call.broker.sending().config.store_reply_message_enable {
        let response = request.response_to(response_code::SUCCESS);
        return Ok(Reply::wait(async move {
            let pushed = match target {
                Ok(connection) => push_and_wait(&connection, push).await,
                Err(remark) => Err(remark),
            };
            answer_unstored(response, pushed, queue_id)
        }));
    }
    // The push goes out once the store has answered, so a requester that reads the reply
    // topic finds the reply there.
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        Refusal::new(
            response_code::SYSTEM_ERROR,
            "replies are pushed from the broker's runtime",
        )
    })?;
    Ok(write(
        call.broker,
        request,
        prepared,
        move |stored_answer| {
            let connection = match target {
                Ok(connection) => connection,
                Err(remark) => return refused(stored_answer, remark),
            };
            runtime.spawn(async move {
                if let Err(remark) = push_and_wait(&connection, push).await {
                    tracing::warn!(peer = %connection.peer, %remark, "a reply was not taken");
                }
            });
            delivered(stored_answer, queue_id)
        },
    ))
}

/// The connection of the client the reply goes to, or why there is none (the replier's remark).
fn requester(call: &Call, properties: &str) -> Result<Connection, String> {
    let Some(client_id) = find_property(properties, property::REPLY_TO_CLIENT) else {
        return Err(format!(
            "reply message properties[{}] is null",
            property::REPLY_TO_CLIENT
        ));
    };
    call.broker
        .sending()
        .clients
        .connection_of(client_id)
        .ok_or_else(|| format!("push reply message fail, channel of <{client_id}> not found."))
}

/// PUSH_REPLY_MESSAGE_TO_CLIENT for the reply `request` carries: its send header as sent, with
/// the broker's region, trace switch and the push time added to its properties (as RocketMQ
/// adds them), and its body as sent (compressed or not: the header's sysFlag tells the client).
fn push_request(
    call: &Call,
    request: &Command,
    mut send: quiver_wire::header::SendMessageHeader,
) -> Command {
    let push_time = call.now_ms.to_string();
    for (name, value) in [
        (property::MSG_REGION, MSG_REGION),
        (property::TRACE_SWITCH, TRACE_SWITCH),
        (property::PUSH_REPLY_TIME, push_time.as_str()),
    ] {
        send.properties = stored::with_property(&send.properties, name, value);
    }
    let header = ReplyMessageHeader {
        send,
        born_host: host_port(call.connection.peer),
        store_host: host_port(call.broker.sending().store_host),
        store_timestamp: call.now_ms,
    };
    Command::request(request_code::PUSH_REPLY_MESSAGE_TO_CLIENT, Encoding::Json)
        .with_ext(header.to_ext())
        .with_body(request.body.clone())
}

/// `ip:port` without brackets, as Java's `getHostAddress() + ":" + port` writes it.
fn host_port(address: SocketAddr) -> String {
    format!("{}:{}", address.ip(), address.port())
}

/// Pushes the reply and waits for the requester's answer.
async fn push_and_wait(connection: &Connection, push: Command) -> Result<(), String> {
    match connection.ask(push, PUSH_ANSWER_TIMEOUT).await {
        Ok(answer) if answer.code == response_code::SUCCESS => Ok(()),
        Ok(answer) => Err(format!(
            "push reply message to client failed: {}",
            answer.remark.unwrap_or_default()
        )),
        Err(AskError::NotSent) => Err("push reply message fail, the client's connection is \
             closed or not reading"
            .to_string()),
        Err(AskError::NoAnswer) => Err(format!(
            "push reply message fail, no answer from the client within {} ms",
            PUSH_ANSWER_TIMEOUT.as_millis()
        )),
    }
}

/// The replier's answer when the reply could not be pushed: stored or not, SYSTEM_ERROR.
fn refused(mut answer: Command, remark: String) -> Command {
    answer.code = response_code::SYSTEM_ERROR;
    answer.with_remark(remark)
}

/// The replier's answer once the reply was pushed: SUCCESS, with the stored message's id and
/// offset, or RocketMQ's placeholders when it was not stored.
fn delivered(answer: Command, queue_id: i32) -> Command {
    let stored = matches!(
        answer.code,
        response_code::SUCCESS
            | response_code::FLUSH_DISK_TIMEOUT
            | response_code::FLUSH_SLAVE_TIMEOUT
            | response_code::SLAVE_NOT_AVAILABLE
    );
    let mut answer = if stored {
        answer
    } else {
        unstored_header(answer, queue_id)
    };
    answer.code = response_code::SUCCESS;
    answer.remark = None;
    answer
}

fn answer_unstored(response: Command, pushed: Result<(), String>, queue_id: i32) -> Command {
    match pushed {
        Ok(()) => unstored_header(response, queue_id),
        Err(remark) => refused(response, remark),
    }
}

/// RocketMQ answers an unstored reply with message id "0" and offset 0: the client parses the
/// header whatever it holds.
fn unstored_header(answer: Command, queue_id: i32) -> Command {
    let header = SendMessageResponseHeader {
        msg_id: "0".into(),
        queue_id,
        queue_offset: 0,
        transaction_id: None,
    };
    answer.with_ext(header.to_ext())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_written_as_java_writes_them() {
        assert_eq!(
            host_port("127.0.0.1:10911".parse().unwrap()),
            "127.0.0.1:10911"
        );
        assert_eq!(host_port("[::1]:10911".parse().unwrap()), "::1:10911");
    }

    #[test]
    fn a_pushed_reply_is_a_success_whatever_the_store_said() {
        let request = Command::request(request_code::SEND_REPLY_MESSAGE_V2, Encoding::Json);
        let mut busy = request.response_to(response_code::SYSTEM_BUSY);
        busy.remark = Some("busy".into());
        let answer = delivered(busy, 3);
        assert_eq!(answer.code, response_code::SUCCESS);
        assert_eq!(answer.remark, None);
        let ext = answer.ext.expect("a send answer's header");
        assert_eq!(ext.get("msgId"), Some("0"));
        assert_eq!(ext.get("queueId"), Some("3"));
    }
}
