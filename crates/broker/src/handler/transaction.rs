//! END_TRANSACTION (37): a producer commits or rolls back a half message, after its local
//! transaction (oneway) or answering the broker's check. A commit writes the message to its
//! real topic and then the op record, in one append; a rollback writes the op record only; an
//! unknown state writes nothing and leaves the half to the check (`transaction.rs`).

use quiver_store::{AppendError, AppendOutcome};
use quiver_wire::code::response_code;
use quiver_wire::header::{ext_or_err, EndTransactionRequestHeader};
use quiver_wire::message::{property, sys_flag, StoredMessage};
use quiver_wire::Command;

use super::{answer, Call, Handled, Refusal, Reply};
use crate::state::Sending;
use crate::transaction::{self, HALF_TOPIC, OP_TOPIC};

pub fn end_transaction(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.sending();
    if broker.replication.is_slave() {
        return Err(Refusal::new(
            response_code::SLAVE_NOT_AVAILABLE,
            "a slave ends no transactions: send END_TRANSACTION to the master",
        ));
    }
    let header = EndTransactionRequestHeader::from_ext(ext_or_err(request)?)?;
    let commit = match header.commit_or_rollback {
        sys_flag::TRANSACTION_COMMIT => true,
        sys_flag::TRANSACTION_ROLLBACK => false,
        // Unknown (or not a decision): the check asks again later. RocketMQ answers nothing;
        // the Java client sends this oneway, so the answer is dropped anyway.
        _ => return answer(request.response_to(response_code::SUCCESS)),
    };
    let half = half_message(broker, &header)?;
    reject_late_decision(broker, &header, &half, call.now_ms)?;
    let half_offset = half.queue_offset as u64;
    let op_end = broker.store.bounds(OP_TOPIC, 0).max_offset;
    if !broker.transactions.claim(half_offset, op_end) {
        // Decided already (the producer's own decision and its answer to a check can both
        // arrive): the first decision stands and nothing is written twice.
        tracing::debug!(
            half_offset,
            commit,
            "END_TRANSACTION for a half already decided"
        );
        return answer(request.response_to(response_code::SUCCESS));
    }
    let mut records = Vec::with_capacity(2);
    if commit {
        match transaction::committed_record(&half, broker.store_host, call.now_ms) {
            Ok(record) => records.push(record),
            Err(error) => {
                broker.transactions.abandoned(half_offset);
                return Err(Refusal::new(response_code::SYSTEM_ERROR, error));
            }
        }
    }
    let uniq_key = broker.new_uniq_id(call.now_ms);
    match transaction::op_record(broker.store_host, uniq_key, half_offset, call.now_ms) {
        Ok(record) => records.push(record),
        Err(error) => {
            broker.transactions.abandoned(half_offset);
            return Err(Refusal::new(response_code::SYSTEM_ERROR, error));
        }
    }
    let owner = call.broker.clone();
    let response = request.response_to(response_code::SUCCESS);
    Ok(Reply::Append {
        records,
        answer: Box::new(move |result| {
            settle(owner.sending(), half_offset, commit, response, result)
        }),
    })
}

/// The half message the header names, checked as RocketMQ's `checkPrepareMessage` checks it.
fn half_message(
    broker: Sending<'_>,
    header: &EndTransactionRequestHeader,
) -> Result<StoredMessage, Refusal> {
    let not_found = || {
        Refusal::new(
            response_code::SYSTEM_ERROR,
            "Find prepared transaction message failed",
        )
    };
    let position = u64::try_from(header.commit_log_offset).map_err(|_| not_found())?;
    let bytes = broker
        .store
        .read_record(position)
        .map_err(|_| not_found())?;
    let (half, _) = StoredMessage::decode(&bytes, false).map_err(|_| not_found())?;
    if half.topic != HALF_TOPIC {
        let remark = format!(
            "the message at commitLogOffset {position} is not a half message (topic {})",
            half.topic
        );
        return Err(Refusal::new(response_code::SYSTEM_ERROR, remark));
    }
    if half.property(property::PRODUCER_GROUP).as_deref() != Some(header.producer_group.as_str()) {
        return Err(Refusal::new(
            response_code::SYSTEM_ERROR,
            "The producer group wrong",
        ));
    }
    if half.queue_offset != header.tran_state_table_offset {
        return Err(Refusal::new(
            response_code::SYSTEM_ERROR,
            "The transaction state table offset wrong",
        ));
    }
    Ok(half)
}

/// A producer that set CHECK_IMMUNITY_TIME_IN_SECONDS and decides on its own after that time
/// is refused with ILLEGAL_OPERATION, as in RocketMQ: by then the decision belongs to the check.
fn reject_late_decision(
    broker: Sending<'_>,
    header: &EndTransactionRequestHeader,
    half: &StoredMessage,
    now_ms: i64,
) -> Result<(), Refusal> {
    if header.from_transaction_check == Some(true) {
        return Ok(());
    }
    let Some(seconds) = half.property(property::CHECK_IMMUNITY_TIME_IN_SECONDS) else {
        return Ok(());
    };
    let timeout_ms = broker.config.transaction.timeout_ms as i64;
    let immunity_ms = seconds
        .trim()
        .parse::<i64>()
        .map_or(0, |s| s.saturating_mul(1_000))
        .max(timeout_ms);
    if now_ms - half.born_timestamp > immunity_ms {
        return Err(Refusal::new(
            response_code::ILLEGAL_OPERATION,
            "the half message is past its check immunity time: the check decides it",
        ));
    }
    Ok(())
}

/// Records the decision once the store has it (or frees the half for another decision) and
/// answers.
fn settle(
    broker: Sending<'_>,
    half_offset: u64,
    commit: bool,
    mut response: Command,
    result: Result<AppendOutcome, AppendError>,
) -> Command {
    match result {
        Ok(outcome) => {
            let op_offset = outcome.entries.last().map_or(0, |e| e.queue_offset);
            let op_end = broker.store.bounds(OP_TOPIC, 0).max_offset;
            broker.transactions.decided(half_offset, op_offset, op_end);
            if commit {
                broker
                    .counters
                    .messages_put
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            response
        }
        Err(error) => {
            broker.transactions.abandoned(half_offset);
            response.code = match error {
                AppendError::Busy { .. } => response_code::SYSTEM_BUSY,
                AppendError::DiskFull(_) | AppendError::NotWritable(_) | AppendError::Closed => {
                    response_code::SERVICE_NOT_AVAILABLE
                }
                _ => response_code::SYSTEM_ERROR,
            };
            response.with_remark(error.to_string())
        }
    }
}
