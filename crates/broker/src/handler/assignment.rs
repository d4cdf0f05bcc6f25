//! How a group consumes a topic: SET_MESSAGE_REQUEST_MODE (401, `mqadmin setConsumeMode`),
//! GET_ALL_MESSAGE_REQUEST_MODE (402) and QUERY_ASSIGNMENT (400, server-side rebalance).

use quiver_wire::body::{
    self, MessageQueue, MessageQueueAssignment, QueryAssignmentRequestBody,
    QueryAssignmentResponseBody, SetMessageRequestModeRequestBody,
};
use quiver_wire::code::response_code;
use quiver_wire::Command;

use super::{answer, Call, Handled, Refusal};
use crate::pop::{MODE_POP, MODE_PULL};
use crate::topic::{validate_group_name, RETRY_PREFIX};

pub fn set_mode(call: &Call, request: &Command) -> Handled {
    let mode: SetMessageRequestModeRequestBody = body::from_json(&request.body)
        .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
    if mode.mode != MODE_POP && mode.mode != MODE_PULL {
        let remark = format!("mode {:?} is not POP or PULL", mode.mode);
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    validate_group_name(&mode.consumer_group)
        .map_err(|e| Refusal::new(response_code::INVALID_PARAMETER, e.to_string()))?;
    if mode.topic.starts_with(RETRY_PREFIX) {
        return Err(Refusal::new(
            response_code::INVALID_PARAMETER,
            "retry topics are consumed by pull",
        ));
    }
    tracing::info!(topic = %mode.topic, group = %mode.consumer_group, mode = %mode.mode, "message request mode set");
    call.broker.membership().pop.set_mode(mode);
    answer(request.response_to(response_code::SUCCESS))
}

pub fn all_modes(call: &Call, request: &Command) -> Handled {
    let modes = call.broker.membership().pop.modes();
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(body::to_json(&modes)),
    )
}

/// Server-side rebalance. A (topic, group) in pop mode gets queue -1 ("pop from any queue") on
/// this broker; otherwise the queues are shared out averagely among the group's live clients,
/// as the client's own AVG strategy would, for pull consumption. Retry topics are always pulled.
pub fn query_assignment(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.membership();
    let query: QueryAssignmentRequestBody = body::from_json(&request.body)
        .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
    let Some(shape) = broker.topics.shape(&query.topic) else {
        let remark = format!("topic[{}] not exist", query.topic);
        return Err(Refusal::new(response_code::TOPIC_NOT_EXIST, remark));
    };
    let queue = |queue_id: i32| MessageQueue {
        topic: query.topic.clone(),
        broker_name: broker.config.broker_name.clone(),
        queue_id,
    };
    let pop = !query.topic.starts_with(RETRY_PREFIX)
        && query.message_model != "BROADCASTING"
        && broker.pop.is_pop(&query.topic, &query.consumer_group);
    let assignments = if pop {
        vec![MessageQueueAssignment {
            message_queue: queue(-1),
            mode: MODE_POP.into(),
        }]
    } else {
        let queues: Vec<i32> = (0..shape.read_queues.max(0)).collect();
        let mut clients = broker.clients.consumer_ids(&query.consumer_group);
        clients.sort();
        let mine = if query.message_model == "BROADCASTING" {
            queues
        } else {
            match clients.iter().position(|c| *c == query.client_id) {
                Some(index) => average_share(&queues, index, clients.len()),
                None => Vec::new(),
            }
        };
        mine.into_iter()
            .map(|queue_id| MessageQueueAssignment {
                message_queue: queue(queue_id),
                mode: MODE_PULL.into(),
            })
            .collect()
    };
    let body = QueryAssignmentResponseBody {
        message_queue_assignments: assignments,
    };
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(body::to_json(&body)),
    )
}

/// RocketMQ's AllocateMessageQueueAveragely: the share of the client at `index` of `count`.
fn average_share(queues: &[i32], index: usize, count: usize) -> Vec<i32> {
    let n = queues.len();
    if count == 0 || index >= count {
        return Vec::new();
    }
    let remainder = n % count;
    let size = if n <= count {
        1
    } else if remainder > 0 && index < remainder {
        n / count + 1
    } else {
        n / count
    };
    let start = if remainder > 0 && index < remainder {
        index * size
    } else {
        index * size + remainder
    };
    let range = size.min(n.saturating_sub(start));
    queues.iter().skip(start).take(range).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_share_matches_rocketmqs() {
        let queues: Vec<i32> = (0..8).collect();
        assert_eq!(average_share(&queues, 0, 3), [0, 1, 2]);
        assert_eq!(average_share(&queues, 1, 3), [3, 4, 5]);
        assert_eq!(average_share(&queues, 2, 3), [6, 7]);
        assert_eq!(average_share(&queues[..2], 2, 3), Vec::<i32>::new());
    }
}
