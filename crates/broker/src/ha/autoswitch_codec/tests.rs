use super::*;
use proptest::prelude::*;

fn handshake() -> SlaveHandshake {
    SlaveHandshake {
        sync_from_last_file: true,
        async_learner: false,
        broker_id: 3,
    }
}

fn answer(epochs: usize) -> HandshakeAnswer {
    HandshakeAnswer {
        master_max_offset: 1 << 33,
        last_epoch: epochs as i32,
        epochs: (0..epochs)
            .map(|i| EpochEntry {
                epoch: i as i32 + 1,
                start_offset: i as u64 * 1000,
            })
            .collect(),
    }
}

fn frame(body: &[u8]) -> TransferFrame {
    TransferFrame {
        header: TransferHeader {
            offset: 4096,
            epoch: 7,
            epoch_start_offset: 1024,
            confirm_offset: 2048,
        },
        body: body.to_vec(),
    }
}

fn encode_frame(frame: &TransferFrame) -> Vec<u8> {
    let mut out = encode_transfer_header(&frame.header, frame.body.len()).to_vec();
    out.extend_from_slice(&frame.body);
    out
}

fn slave_messages(bytes: &[u8]) -> Result<Vec<SlaveMessage>, AutoSwitchError> {
    let mut out = Vec::new();
    SlaveMessageReader::default().feed(bytes, &mut out)?;
    Ok(out)
}

fn master_messages(bytes: &[u8]) -> Result<Vec<MasterMessage>, AutoSwitchError> {
    let mut out = Vec::new();
    MasterMessageReader::default().feed(bytes, &mut out)?;
    Ok(out)
}

#[test]
fn slave_messages_have_rocketmqs_layout() {
    assert_eq!(
        encode_slave_handshake(&handshake()),
        [0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]
    );
    assert_eq!(
        encode_slave_report(0x0102),
        [0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 2]
    );
}

#[test]
fn master_messages_have_rocketmqs_layout() {
    let bytes = encode_handshake_answer(&answer(1));
    assert_eq!(
        bytes,
        [
            0, 0, 0, 1, 0, 0, 0, 12, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, //
            0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0
        ]
    );
    let header = encode_transfer_header(&frame(b"").header, 5);
    assert_eq!(&header[..8], &[0, 0, 0, 2, 0, 0, 0, 5]);
    assert_eq!(&header[8..16], &4096i64.to_be_bytes());
    assert_eq!(&header[16..20], &7i32.to_be_bytes());
    assert_eq!(&header[20..28], &1024i64.to_be_bytes());
    assert_eq!(&header[28..36], &2048i64.to_be_bytes());
}

/// Every message, however the reads cut the stream, comes out whole and in order.
#[test]
fn each_message_survives_a_split_at_every_byte() {
    let slave: Vec<u8> = [
        encode_slave_handshake(&handshake()).to_vec(),
        encode_slave_report(77).to_vec(),
    ]
    .concat();
    let expected_slave = vec![
        SlaveMessage::Handshake(handshake()),
        SlaveMessage::Report { offset: 77 },
    ];
    let master: Vec<u8> = [
        encode_handshake_answer(&answer(3)),
        encode_handshake_answer(&answer(0)),
        encode_frame(&frame(b"records")),
        encode_frame(&frame(b"")),
    ]
    .concat();
    let expected_master = vec![
        MasterMessage::HandshakeAnswer(answer(3)),
        MasterMessage::HandshakeAnswer(answer(0)),
        MasterMessage::Transfer(frame(b"records")),
        MasterMessage::Transfer(frame(b"")),
    ];
    for cut in 0..=slave.len() {
        let mut reader = SlaveMessageReader::default();
        let mut out = Vec::new();
        reader.feed(&slave[..cut], &mut out).expect("first part");
        reader.feed(&slave[cut..], &mut out).expect("second part");
        assert_eq!(out, expected_slave, "cut at {cut}");
    }
    for cut in 0..=master.len() {
        let mut reader = MasterMessageReader::default();
        let mut out = Vec::new();
        reader.feed(&master[..cut], &mut out).expect("first part");
        reader.feed(&master[cut..], &mut out).expect("second part");
        assert_eq!(out, expected_master, "cut at {cut}");
    }
    let mut reader = MasterMessageReader::default();
    let mut out = Vec::new();
    for byte in &master {
        reader
            .feed(std::slice::from_ref(byte), &mut out)
            .expect("a byte");
    }
    assert_eq!(out, expected_master, "one byte at a time");
}

#[test]
fn malformed_slave_messages_are_errors() {
    let mut bad_flag = encode_slave_handshake(&handshake());
    bad_flag[5] = 2;
    let mut negative = encode_slave_report(1);
    negative[4] = 0x80;
    let cases: Vec<(Vec<u8>, AutoSwitchError)> = vec![
        (vec![0, 0, 0, 0], AutoSwitchError::UnknownState { state: 0 }),
        (
            vec![0, 0, 0, 3, 9],
            AutoSwitchError::UnknownState { state: 3 },
        ),
        (
            vec![0xff, 0xff, 0xff, 0xff],
            AutoSwitchError::UnknownState { state: -1 },
        ),
        (
            bad_flag.to_vec(),
            AutoSwitchError::BadFlag {
                field: "isSyncFromLastFile",
                value: 2,
            },
        ),
        (
            negative.to_vec(),
            AutoSwitchError::NegativeOffset {
                field: "a report's offset",
                value: i64::from_be_bytes(negative[4..].try_into().expect("8")),
            },
        ),
    ];
    for (bytes, expected) in cases {
        assert_eq!(slave_messages(&bytes), Err(expected));
    }
}

#[test]
fn malformed_master_messages_are_errors() {
    let header = |state: i32, size: i32, offset: i64, epoch_start: i64| {
        let mut bytes = encode_transfer_header(
            &TransferHeader {
                offset,
                epoch: 1,
                epoch_start_offset: epoch_start,
                confirm_offset: 0,
            },
            0,
        );
        bytes[0..4].copy_from_slice(&state.to_be_bytes());
        bytes[4..8].copy_from_slice(&size.to_be_bytes());
        bytes.to_vec()
    };
    let answer_limit = HANDSHAKE_EPOCHS_MAX * EPOCH_ENTRY_BYTES;
    let mut unordered = encode_handshake_answer(&answer(2));
    unordered[32..36].copy_from_slice(&1i32.to_be_bytes());
    let mut negative_start = encode_handshake_answer(&answer(1));
    negative_start[24..32].copy_from_slice(&(-5i64).to_be_bytes());
    let mut negative_max = encode_handshake_answer(&answer(0));
    negative_max[8..16].copy_from_slice(&(-1i64).to_be_bytes());
    let cases: Vec<(Vec<u8>, AutoSwitchError)> = vec![
        (
            vec![0, 0, 0, 4, 0],
            AutoSwitchError::UnknownState { state: 4 },
        ),
        (
            header(2, -1, 0, 0),
            AutoSwitchError::NegativeBodySize { size: -1 },
        ),
        (
            header(1, -12, 0, 0),
            AutoSwitchError::NegativeBodySize { size: -12 },
        ),
        (
            header(2, TRANSFER_BODY_BYTES_MAX as i32 + 1, 0, 0),
            AutoSwitchError::BodyTooLarge {
                size: TRANSFER_BODY_BYTES_MAX + 1,
                limit: TRANSFER_BODY_BYTES_MAX,
            },
        ),
        (
            header(2, i32::MAX, 0, 0),
            AutoSwitchError::BodyTooLarge {
                size: i32::MAX as usize,
                limit: TRANSFER_BODY_BYTES_MAX,
            },
        ),
        (
            header(1, answer_limit as i32 + 12, 0, 0)[..20].to_vec(),
            AutoSwitchError::BodyTooLarge {
                size: answer_limit + 12,
                limit: answer_limit,
            },
        ),
        (
            header(1, 13, 0, 0)[..20].to_vec(),
            AutoSwitchError::EpochsNotWhole { size: 13 },
        ),
        (
            header(2, 1, -1, 0),
            AutoSwitchError::NegativeOffset {
                field: "a transfer frame's offset",
                value: -1,
            },
        ),
        (
            header(2, 1, 10, 11),
            AutoSwitchError::EpochStartsAfterFrame {
                offset: 10,
                epoch_start_offset: 11,
            },
        ),
        (
            unordered,
            AutoSwitchError::EpochsOutOfOrder {
                epoch: 1,
                start_offset: 1000,
            },
        ),
        (
            negative_start,
            AutoSwitchError::EpochsOutOfOrder {
                epoch: 1,
                start_offset: -5,
            },
        ),
        (
            negative_max,
            AutoSwitchError::NegativeOffset {
                field: "the master's max offset",
                value: -1,
            },
        ),
    ];
    for (bytes, expected) in cases {
        assert_eq!(master_messages(&bytes), Err(expected));
    }
}

#[test]
fn a_heartbeat_before_the_master_chose_a_position_is_read() {
    let heartbeat = TransferHeader {
        offset: -1,
        epoch: -1,
        epoch_start_offset: -1,
        confirm_offset: -1,
    };
    let bytes = encode_transfer_header(&heartbeat, 0);
    assert_eq!(
        master_messages(&bytes),
        Ok(vec![MasterMessage::Transfer(TransferFrame {
            header: heartbeat,
            body: Vec::new()
        })])
    );
}

/// A claimed size reserves nothing: the body holds what arrived.
#[test]
fn a_large_claimed_body_holds_only_what_arrived() {
    let mut reader = MasterMessageReader::default();
    let mut out = Vec::new();
    let header = encode_transfer_header(&frame(b"").header, TRANSFER_BODY_BYTES_MAX);
    reader.feed(&header, &mut out).expect("header");
    reader.feed(&[1, 2, 3], &mut out).expect("a little body");
    assert!(out.is_empty());
    assert!(reader.body.capacity() < 4096, "{}", reader.body.capacity());
}

proptest! {
    /// Random bytes, cut anywhere, never panic either reader; what they read is the same
    /// whole or in pieces.
    #[test]
    fn random_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..600),
        piece in 1usize..40,
    ) {
        let whole = (slave_messages(&bytes), master_messages(&bytes));
        let mut slave = (SlaveMessageReader::default(), Vec::new());
        let mut master = (MasterMessageReader::default(), Vec::new());
        let mut slave_result = Ok(());
        let mut master_result = Ok(());
        for chunk in bytes.chunks(piece) {
            if slave_result.is_ok() {
                slave_result = slave.0.feed(chunk, &mut slave.1);
            }
            if master_result.is_ok() {
                master_result = master.0.feed(chunk, &mut master.1);
            }
        }
        prop_assert_eq!(whole.0.map_err(|e| e.to_string()), slave_result.map(|()| slave.1).map_err(|e| e.to_string()));
        prop_assert_eq!(whole.1.map_err(|e| e.to_string()), master_result.map(|()| master.1).map_err(|e| e.to_string()));
    }

    /// Valid messages with random fields round trip.
    #[test]
    fn valid_messages_round_trip(
        broker_id in any::<i64>(),
        flags in any::<(bool, bool)>(),
        report in 0u64..=i64::MAX as u64,
        epochs in prop::collection::vec((1i32..4, 0u64..1000), 0..20),
        body in prop::collection::vec(any::<u8>(), 0..300),
        confirm in any::<i64>(),
    ) {
        let handshake = SlaveHandshake { sync_from_last_file: flags.0, async_learner: flags.1, broker_id };
        let slave = [encode_slave_handshake(&handshake).to_vec(), encode_slave_report(report).to_vec()].concat();
        prop_assert_eq!(
            slave_messages(&slave),
            Ok(vec![SlaveMessage::Handshake(handshake), SlaveMessage::Report { offset: report }])
        );
        let mut epoch = 0;
        let mut start = 0;
        let epochs: Vec<EpochEntry> = epochs.iter().map(|&(step, grow)| {
            epoch += step;
            start += grow;
            EpochEntry { epoch, start_offset: start }
        }).collect();
        let answer = HandshakeAnswer { master_max_offset: start + 5, last_epoch: epoch, epochs };
        let mut transfer = frame(&body);
        transfer.header.confirm_offset = confirm;
        let master = [encode_handshake_answer(&answer), encode_frame(&transfer)].concat();
        prop_assert_eq!(
            master_messages(&master),
            Ok(vec![MasterMessage::HandshakeAnswer(answer), MasterMessage::Transfer(transfer)])
        );
    }
}
