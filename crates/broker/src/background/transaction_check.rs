//! The check: every `transactionCheckInterval` a round looks at the halves not yet decided,
//! writes the op record of one whose committed copy a crash left without it, asks a producer
//! of the group about one past its time (CHECK_TRANSACTION_STATE), and moves one checked
//! `transactionCheckMax` times to `TRANS_CHECK_MAX_TIME_TOPIC`.

use std::collections::BTreeMap;

use quiver_store::Record;
use quiver_wire::code::request_code;
use quiver_wire::header::CheckTransactionStateRequestHeader;
use quiver_wire::message::{property, sys_flag, StoredMessage};
use quiver_wire::{Command, Encoding};

use super::{run_step, Owner, Ready};
use crate::config::CheckConfig;
use crate::connection::Connection;
use crate::state::Background;
use crate::stored;
use crate::topic::{topic_config, PERM_READ, PERM_WRITE};
use crate::transaction::{op_record, read_from, real_queue, CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC};
use quiver_store::{AppendError, AppendOutcome};

/// How often the progress is put in the offset table (which is persisted every 5 s).
const PROGRESS_INTERVAL_MS: u64 = 1_000;
/// Undecided halves one check round reads at most; the rest wait for the next round.
const HALVES_PER_ROUND_MAX: usize = 10_000;
/// Committed copies looked at per half when searching for one.
const COPIES_SEARCHED_MAX: usize = 32;

/// The transaction check as a background owner (`schedule.rs`): a round every
/// `transactionCheckInterval` (the first one interval after start: a round at once would find
/// little), and the progress put in the offset table every second.
#[derive(Default)]
pub struct TransactionCheck {
    next_round_ms: Option<i64>,
    /// Decisions being written, by half offset.
    deciding: BTreeMap<u64, Decision>,
    report: CheckReport,
}

/// Why a decision is written for a half the check found due.
#[derive(Debug, Clone, Copy)]
enum Decision {
    /// Its committed copy is in its topic: a crash lost its op record.
    FoundCommitted,
    /// Checked `transactionCheckMax` times: moved to TRANS_CHECK_MAX_TIME_TOPIC.
    Discarded,
}

impl TransactionCheck {
    /// An owner whose first round is due at `now_ms`.
    fn round_due(now_ms: i64) -> TransactionCheck {
        TransactionCheck {
            next_round_ms: Some(now_ms),
            ..TransactionCheck::default()
        }
    }

    /// One round at `now_ms`: every undecided half older than its immunity is checked with its
    /// producer, found committed, or moved aside.
    fn round(&mut self, broker: Background<'_>, now_ms: i64, ready: &mut Ready) {
        let transactions = broker.transactions;
        let end = broker.store.bounds(HALF_TOPIC, 0).max_offset;
        let (mut offset, _) = transactions.progress();
        let mut looked_at = 0;
        'scan: while offset < end && looked_at < HALVES_PER_ROUND_MAX {
            let Some((halves, next)) = read_from(broker.store, HALF_TOPIC, offset) else {
                break;
            };
            for half in halves {
                let half_offset = half.queue_offset as u64;
                if transactions.is_settled(half_offset) {
                    continue;
                }
                looked_at += 1;
                match due(&half, &broker.config.transaction, now_ms) {
                    Due::Later => continue,
                    // Halves are stored in born order, give or take the producers' clocks: the
                    // ones after a young one are young too.
                    Due::NotYet => break 'scan,
                    Due::Now => {}
                }
                self.resolve(broker, half, now_ms, ready);
            }
            offset = next;
        }
    }

    /// Decides or checks one half that is due.
    fn resolve(
        &mut self,
        broker: Background<'_>,
        half: StoredMessage,
        now_ms: i64,
        ready: &mut Ready,
    ) {
        let half_offset = half.queue_offset as u64;
        if has_committed_copy(broker, &half) {
            tracing::warn!(
                half_offset,
                "half message committed before a crash lost its op record; recording the decision"
            );
            self.decide(
                broker,
                &half,
                Vec::new(),
                Decision::FoundCommitted,
                now_ms,
                ready,
            );
            return;
        }
        let check_max = broker.config.transaction.check_max;
        if broker.transactions.checks_sent(half_offset) >= check_max {
            match discarded_record(broker, &half) {
                Ok(record) => {
                    tracing::warn!(
                        half_offset,
                        uniq_key = half.property(property::UNIQ_KEY).unwrap_or_default(),
                        "half message checked {check_max} times without a decision: moved to {CHECK_MAX_TOPIC}",
                    );
                    self.decide(
                        broker,
                        &half,
                        vec![record],
                        Decision::Discarded,
                        now_ms,
                        ready,
                    );
                }
                Err(error) => {
                    tracing::error!(half_offset, %error, "cannot move a half message aside")
                }
            }
            return;
        }
        broker.transactions.count_check(half_offset);
        match check_request(broker, &half) {
            Some(request) => {
                self.report.checked += 1;
                ready.requests.push(request);
            }
            None => self.report.no_producer += 1,
        }
    }

    /// Asks for `records` and then the op record for `half` as one append, if nothing else
    /// decides it first (`Transactions::claim`).
    fn decide(
        &mut self,
        broker: Background<'_>,
        half: &StoredMessage,
        mut records: Vec<Record>,
        decision: Decision,
        now_ms: i64,
        ready: &mut Ready,
    ) {
        let half_offset = half.queue_offset as u64;
        let op_end = broker.store.bounds(OP_TOPIC, 0).max_offset;
        if !broker.transactions.claim(half_offset, op_end) {
            return;
        }
        let uniq_key = broker.new_uniq_id(now_ms);
        match op_record(broker.store_host, uniq_key, half_offset, now_ms) {
            Ok(record) => records.push(record),
            Err(error) => {
                broker.transactions.abandoned(half_offset);
                tracing::error!(half_offset, %error, "cannot build a transaction op record");
                return;
            }
        }
        self.deciding.insert(half_offset, decision);
        ready.append(records, half_offset);
    }
}

impl Owner for TransactionCheck {
    fn name(&self) -> &'static str {
        "transaction check"
    }

    fn period_ms(&self) -> u64 {
        PROGRESS_INTERVAL_MS
    }

    fn step(&mut self, broker: Background<'_>, now_ms: i64) -> Ready {
        let mut ready = Ready::default();
        broker
            .transactions
            .commit_progress(broker.store, broker.offsets);
        let interval_ms = broker.config.transaction.interval_ms as i64;
        let next_round_ms = *self
            .next_round_ms
            .get_or_insert(now_ms.saturating_add(interval_ms));
        if now_ms >= next_round_ms {
            self.next_round_ms = Some(now_ms.saturating_add(interval_ms));
            if self.report != CheckReport::default() {
                tracing::info!(report = ?self.report, "transaction check round");
            }
            self.report = CheckReport::default();
            self.round(broker, now_ms, &mut ready);
        }
        ready
    }

    fn stored(
        &mut self,
        broker: Background<'_>,
        token: u64,
        outcome: Result<AppendOutcome, AppendError>,
    ) -> bool {
        let half_offset = token;
        let Some(decision) = self.deciding.remove(&half_offset) else {
            return true;
        };
        let transactions = broker.transactions;
        match outcome {
            Ok(outcome) => {
                let op_offset = outcome.entries.last().map_or(0, |e| e.queue_offset);
                let op_end = broker.store.bounds(OP_TOPIC, 0).max_offset;
                transactions.decided(half_offset, op_offset, op_end);
                match decision {
                    Decision::FoundCommitted => self.report.found_committed += 1,
                    Decision::Discarded => self.report.discarded += 1,
                }
            }
            Err(error) => {
                transactions.abandoned(half_offset);
                tracing::warn!(half_offset, %error, "writing a transaction decision failed; next round tries again");
            }
        }
        true
    }

    fn persist(&mut self, broker: Background<'_>) -> std::io::Result<()> {
        // The progress lives in the consumer offsets, which the offset snapshot writes.
        broker
            .transactions
            .commit_progress(broker.store, broker.offsets);
        Ok(())
    }
}

/// What one check round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// CHECK_TRANSACTION_STATE requests sent.
    pub checked: usize,
    /// Halves due a check whose producer group has no connection (counted as checked).
    pub no_producer: usize,
    /// Halves found committed before a crash lost their op record; decided now.
    pub found_committed: usize,
    /// Halves moved to TRANS_CHECK_MAX_TIME_TOPIC after `transactionCheckMax` checks.
    pub discarded: usize,
}

/// One check round at `now_ms`, carried out on this thread (tests, and an operator's "check
/// now"): what it did.
pub fn check_round(broker: Background<'_>, now_ms: i64) -> CheckReport {
    let mut check = TransactionCheck::round_due(now_ms);
    run_step(&mut check, broker, now_ms);
    broker
        .transactions
        .commit_progress(broker.store, broker.offsets);
    check.report
}

enum Due {
    Now,
    /// Too young, and so are the halves after it.
    NotYet,
    /// Its producer asked for a longer wait (CHECK_IMMUNITY_TIME_IN_SECONDS): skip it only.
    Later,
}

/// Whether a half is due a check, by RocketMQ's rule: its age since born is past
/// `transactionTimeOut`, or past the immunity time it carries when that is longer. A born time
/// ahead of the broker's clock counts as due, as in RocketMQ.
fn due(half: &StoredMessage, config: &CheckConfig, now_ms: i64) -> Due {
    let age_ms = now_ms - half.born_timestamp;
    let timeout_ms = config.timeout_ms as i64;
    match half.property(property::CHECK_IMMUNITY_TIME_IN_SECONDS) {
        Some(seconds) => {
            let immunity_ms = seconds
                .trim()
                .parse::<i64>()
                .ok()
                .map_or(timeout_ms, |s| s.saturating_mul(1_000).max(timeout_ms));
            if (0..=immunity_ms).contains(&age_ms) {
                Due::Later
            } else {
                Due::Now
            }
        }
        None if (0..=timeout_ms).contains(&age_ms) => Due::NotYet,
        None => Due::Now,
    }
}

/// Whether the real topic holds a committed copy of `half`: same UNIQ_KEY, commit bits, and
/// the half's position as prepared-transaction offset.
fn has_committed_copy(broker: Background<'_>, half: &StoredMessage) -> bool {
    let (Some(uniq), Ok((topic, _))) = (half.property(property::UNIQ_KEY), real_queue(half)) else {
        return false;
    };
    let found = match broker
        .store
        .query_by_key(&topic, &uniq, COPIES_SEARCHED_MAX, 0, i64::MAX)
    {
        Ok(found) => found,
        Err(error) => {
            tracing::warn!(%topic, %error, "cannot search for a committed copy of a half message");
            return false;
        }
    };
    found.iter().any(|bytes| {
        StoredMessage::decode(bytes, false).is_ok_and(|(copy, _)| {
            copy.topic == topic
                && copy.prepared_transaction_offset == half.physical_offset
                && copy.sys_flag & sys_flag::TRANSACTION_MASK == sys_flag::TRANSACTION_COMMIT
        })
    })
}

/// The copy of a half checked too often, for TRANS_CHECK_MAX_TIME_TOPIC (created on first use
/// with one queue, as RocketMQ creates it).
fn discarded_record(broker: Background<'_>, half: &StoredMessage) -> Result<Record, String> {
    match broker
        .topics
        .create_if_absent(topic_config(CHECK_MAX_TOPIC, 1, PERM_READ | PERM_WRITE))
    {
        Ok(true) => broker.topics_changed(),
        Ok(false) => {}
        Err(error) => return Err(error.to_string()),
    }
    let mut message = half.clone();
    message.topic = CHECK_MAX_TOPIC.to_string();
    message.queue_id = 0;
    stored::record_of(&message)
}

/// CHECK_TRANSACTION_STATE for `half`, to one connection of its producer group, as RocketMQ's
/// `sendCheckMessage`: the header names the half, the body is the message with its real topic
/// and queue. None when no producer of the group is connected.
fn check_request(broker: Background<'_>, half: &StoredMessage) -> Option<(Connection, Command)> {
    let group = half.property(property::PRODUCER_GROUP)?;
    let producers: Vec<_> = broker
        .clients
        .producers(&group)
        .into_iter()
        .filter(|(_, connection)| !connection.is_closed())
        .collect();
    if producers.is_empty() {
        tracing::warn!(%group, "no producer of the group is connected to check a transaction");
        return None;
    }
    let (_, connection) = &producers[half.queue_offset as usize % producers.len()];
    let (topic, queue_id) = real_queue(half).ok()?;
    let uniq = half.property(property::UNIQ_KEY);
    let header = CheckTransactionStateRequestHeader {
        topic: HALF_TOPIC.to_string(),
        tran_state_table_offset: half.queue_offset,
        commit_log_offset: half.physical_offset,
        msg_id: uniq.clone(),
        transaction_id: uniq,
        offset_msg_id: half.offset_msg_id(),
        broker_name: broker.config.broker_name.clone(),
    };
    let mut message = half.clone();
    message.topic = topic;
    message.queue_id = queue_id;
    let mut body = Vec::with_capacity(message.encoded_len());
    if let Err(error) = message.encode(&mut body) {
        tracing::error!(%error, "cannot encode a half message for its check");
        return None;
    }
    let request = Command::request(request_code::CHECK_TRANSACTION_STATE, Encoding::Json)
        .with_ext(header.to_ext())
        .with_body(body);
    Some((connection.clone(), request))
}
