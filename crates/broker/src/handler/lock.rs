//! LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42) for orderly consumers.

use quiver_wire::body::{self, LockBatchRequestBody, LockBatchResponseBody};
use quiver_wire::code::response_code;
use quiver_wire::Command;

use super::{answer, Call, Handled, Refusal};

/// Queues per request at most; a consumer asks for the queues of its topics on one broker.
const QUEUES_PER_REQUEST_MAX: usize = 65_536;

fn parse(request: &Command) -> Result<LockBatchRequestBody, Refusal> {
    let parsed: LockBatchRequestBody = body::from_json(&request.body)
        .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, format!("bad lock body: {e}")))?;
    if parsed.mq_set.len() > QUEUES_PER_REQUEST_MAX {
        let remark = format!(
            "{} queues in one request; at most {QUEUES_PER_REQUEST_MAX}",
            parsed.mq_set.len()
        );
        return Err(Refusal::new(response_code::INVALID_PARAMETER, remark));
    }
    Ok(parsed)
}

pub fn lock_batch(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.membership();
    let parsed = parse(request)?;
    let granted = broker.locks.lock(
        &parsed.consumer_group,
        &parsed.client_id,
        &parsed.mq_set,
        call.now_ms,
    );
    let body = body::to_json(&LockBatchResponseBody {
        lock_ok_mq_set: granted,
    });
    answer(request.response_to(response_code::SUCCESS).with_body(body))
}

pub fn unlock_batch(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.membership();
    let parsed = parse(request)?;
    broker
        .locks
        .unlock(&parsed.consumer_group, &parsed.client_id, &parsed.mq_set);
    answer(request.response_to(response_code::SUCCESS))
}
