//! Transactions: END_TRANSACTION (37), which a producer sends oneway, and
//! CHECK_TRANSACTION_STATE (39), which the broker sends a producer oneway.

use super::ext_header;

/// END_TRANSACTION (37): a producer's decision on a half message, after its local transaction
/// or when the broker asked (`from_transaction_check`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndTransactionRequestHeader {
    pub producer_group: String,
    /// The half message's offset in the half topic's queue.
    pub tran_state_table_offset: i64,
    /// The half message's CommitLog position.
    pub commit_log_offset: i64,
    /// The transaction bits of a sys flag: 8 commit, 12 rollback, 0 not known yet.
    pub commit_or_rollback: i32,
    pub from_transaction_check: Option<bool>,
    pub msg_id: String,
    pub transaction_id: Option<String>,
    /// The real topic (5.x clients send it; 4.x ones do not).
    pub topic: Option<String>,
}

ext_header!(EndTransactionRequestHeader {
    producer_group: req "producerGroup",
    tran_state_table_offset: req "tranStateTableOffset",
    commit_log_offset: req "commitLogOffset",
    commit_or_rollback: req "commitOrRollback",
    from_transaction_check: opt "fromTransactionCheck",
    msg_id: req "msgId",
    transaction_id: opt "transactionId",
    topic: opt "topic",
});

/// CHECK_TRANSACTION_STATE (39): asks a producer what became of a half message; the body is
/// the message as stored, with its real topic and queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckTransactionStateRequestHeader {
    /// The half topic, as RocketMQ sends it.
    pub topic: String,
    pub tran_state_table_offset: i64,
    pub commit_log_offset: i64,
    /// The message's UNIQ_KEY.
    pub msg_id: Option<String>,
    pub transaction_id: Option<String>,
    /// The half message's offset message id (store host and position).
    pub offset_msg_id: String,
    pub broker_name: String,
}

ext_header!(CheckTransactionStateRequestHeader {
    topic: req "topic",
    tran_state_table_offset: req "tranStateTableOffset",
    commit_log_offset: req "commitLogOffset",
    msg_id: opt "msgId",
    transaction_id: opt "transactionId",
    offset_msg_id: req "offsetMsgId",
    broker_name: req "bname",
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::ExtFields;

    #[test]
    fn a_java_end_transaction_header_reads_and_writes_back() {
        // As DefaultMQProducerImpl.endTransaction fills it (4.9.7: no topic).
        let ext = ExtFields::new()
            .with("producerGroup", "pg")
            .with("tranStateTableOffset", "7")
            .with("commitLogOffset", "4096")
            .with("commitOrRollback", "8")
            .with("fromTransactionCheck", "false")
            .with("msgId", "7F00000100002A9F0000000000001000")
            .with("transactionId", "AC1100020001");
        let header = EndTransactionRequestHeader::from_ext(&ext).expect("valid");
        assert_eq!(header.commit_or_rollback, 8);
        assert_eq!(header.from_transaction_check, Some(false));
        assert_eq!(header.topic, None);
        assert_eq!(
            EndTransactionRequestHeader::from_ext(&header.to_ext()),
            Ok(header)
        );
        let missing = ExtFields::new().with("producerGroup", "pg");
        assert!(EndTransactionRequestHeader::from_ext(&missing).is_err());
    }
}
