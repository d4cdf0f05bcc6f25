//! Message lookup for admin tools: QUERY_MESSAGE (by key or UNIQ_KEY through the index) and
//! VIEW_MESSAGE_BY_ID (by CommitLog position, decoded from an offset message id).

use quiver_wire::code::response_code;
use quiver_wire::header::{
    ext_or_err, QueryMessageRequestHeader, QueryMessageResponseHeader, ViewMessageRequestHeader,
};
use quiver_wire::Command;

use super::{answer, Call, Handled, Refusal};
use crate::state::Administering;

/// Java's default cap on messages returned by one query.
const QUERY_MESSAGES_MAX: i32 = 64;

pub fn by_key(call: &Call, request: &Command) -> Handled {
    let header = QueryMessageRequestHeader::from_ext(ext_or_err(request)?)?;
    let now_ms = call.now_ms;
    // A lookup reads index entries one by one along a hash chain: on a blocking thread, so a
    // long chain (keys that collide) holds no runtime worker that answers sends.
    super::off_the_workers(call, request, move |broker, request| {
        look_up(
            broker.administering(),
            &header,
            now_ms,
            request.response_to(response_code::SUCCESS),
        )
    })
}

fn look_up(
    broker: Administering<'_>,
    header: &QueryMessageRequestHeader,
    now_ms: i64,
    response: Command,
) -> Result<Command, Refusal> {
    let max = header.max_num.clamp(1, QUERY_MESSAGES_MAX) as usize;
    let end_ms = if header.end_timestamp <= 0 {
        i64::MAX
    } else {
        header.end_timestamp
    };
    let records = broker
        .store
        .query_by_key(
            &header.topic,
            &header.key,
            max,
            header.begin_timestamp,
            end_ms,
        )
        .map_err(|e| Refusal::new(response_code::SYSTEM_ERROR, e.to_string()))?;
    if records.is_empty() {
        let remark = format!(
            "can not find message by key {} in topic {}",
            header.key, header.topic
        );
        return Err(Refusal::new(response_code::QUERY_NOT_FOUND, remark));
    }
    let stats = broker.store.stats();
    let response_header = QueryMessageResponseHeader {
        index_last_update_timestamp: now_ms,
        index_last_update_phyoffset: stats.written_position as i64,
    };
    let body: Vec<u8> = records.concat();
    Ok(response.with_ext(response_header.to_ext()).with_body(body))
}

pub fn by_position(call: &Call, request: &Command) -> Handled {
    let broker = call.broker.administering();
    let header = ViewMessageRequestHeader::from_ext(ext_or_err(request)?)?;
    let position = u64::try_from(header.offset).map_err(|_| {
        Refusal::new(
            response_code::SYSTEM_ERROR,
            format!("offset {} is negative", header.offset),
        )
    })?;
    let record = broker.store.read_record(position).map_err(|e| {
        Refusal::new(
            response_code::SYSTEM_ERROR,
            format!("can not find message by the offset {position}: {e}"),
        )
    })?;
    answer(
        request
            .response_to(response_code::SUCCESS)
            .with_body(record),
    )
}
