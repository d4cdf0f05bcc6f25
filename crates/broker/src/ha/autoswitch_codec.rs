//! RocketMQ 5's AutoSwitch HA protocol (controller mode), as bytes (no I/O): what a slave and
//! its master say on the HA port (`store/ha/autoswitch/AutoSwitchHAClient` and
//! `AutoSwitchHAConnection` in apache/rocketmq). Every message starts with the sender's
//! connection state as an int: 1 (HANDSHAKE) or 2 (TRANSFER); no other state is sent. All
//! integers are big-endian.
//!
//! Slave to master, fixed sizes:
//!
//! | message   | bytes | layout |
//! |-----------|-------|--------|
//! | handshake | 16    | state 1 (i32), isSyncFromLastFile (i16, 0/1), isAsyncLearner (i16, 0/1), brokerId (i64) |
//! | report    | 12    | state 2 (i32), the slave's CommitLog end (i64) |
//!
//! Master to slave, a header then `bodySize` bytes:
//!
//! | message          | header | layout |
//! |------------------|--------|--------|
//! | handshake answer | 20     | state 1 (i32), bodySize (i32), master's max offset (i64), last epoch (i32); body: per epoch, epoch (i32) and start offset (i64), epochs ascending |
//! | transfer frame   | 36     | state 2 (i32), bodySize (i32), offset of the first body byte (i64), epoch (i32), that epoch's start offset (i64), confirm offset (i64); body: CommitLog bytes (0 bytes: a heartbeat) |
//!
//! The readers treat every byte as hostile: a size is checked against its bound before any byte
//! of the body is kept, and the body grows only by the bytes that arrive. After an error a
//! reader is not fed again: the connection is closed.

use quiver_store::EpochEntry;

pub const STATE_HANDSHAKE: i32 = 1;
pub const STATE_TRANSFER: i32 = 2;

pub const SLAVE_HANDSHAKE_BYTES: usize = 16;
pub const SLAVE_REPORT_BYTES: usize = 12;
pub const HANDSHAKE_ANSWER_HEADER_BYTES: usize = 20;
pub const EPOCH_ENTRY_BYTES: usize = 12;
pub const TRANSFER_HEADER_BYTES: usize = 36;
/// The most epochs a handshake answer may carry: the epoch file's own bound
/// (`quiver_store::epoch::EPOCH_ENTRIES_MAX`), 1.2 MB of body. RocketMQ's master has room for
/// 1,000 only; one epoch is one election, so a real answer holds a handful.
pub const HANDSHAKE_EPOCHS_MAX: usize = quiver_store::epoch::EPOCH_ENTRIES_MAX;
/// The largest transfer body read. RocketMQ's master sends at most haTransferBatchSize
/// (32 KiB) a frame, and never more than whole records of one epoch; an operator may raise the
/// batch size. 16 MiB is four of the largest records a broker stores (4 MiB + 64 KiB with the
/// default maxMessageSize) with room to spare, and one connection can hold no more than that.
pub const TRANSFER_BODY_BYTES_MAX: usize = 16 * 1024 * 1024;

const _: () = assert!(SLAVE_HANDSHAKE_BYTES == 4 + 2 + 2 + 8);
const _: () = assert!(SLAVE_REPORT_BYTES == 4 + 8);
const _: () = assert!(HANDSHAKE_ANSWER_HEADER_BYTES == 4 + 4 + 8 + 4);
const _: () = assert!(EPOCH_ENTRY_BYTES == 4 + 8);
const _: () = assert!(TRANSFER_HEADER_BYTES == 4 + 4 + 8 + 4 + 8 + 8);
const _: () = assert!(HANDSHAKE_EPOCHS_MAX * EPOCH_ENTRY_BYTES <= i32::MAX as usize);
const _: () = assert!(TRANSFER_BODY_BYTES_MAX <= i32::MAX as usize);

/// A slave's first message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlaveHandshake {
    /// An empty slave starts at the master's last segment rather than its first.
    pub sync_from_last_file: bool,
    /// A learner is never added to the SyncStateSet.
    pub async_learner: bool,
    /// The slave's id from the controller.
    pub broker_id: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlaveMessage {
    Handshake(SlaveHandshake),
    /// How far the slave's CommitLog reaches.
    Report {
        offset: u64,
    },
}

/// The master's answer to a handshake: its log end and its epochs, for the slave to find
/// where their logs agree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandshakeAnswer {
    pub master_max_offset: u64,
    /// -1 when the master has no epoch.
    pub last_epoch: i32,
    pub epochs: Vec<EpochEntry>,
}

/// A transfer frame's header fields after the state and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferHeader {
    /// The CommitLog position of the body's first byte; in a heartbeat the next position the
    /// master will send, -1 before it has chosen one.
    pub offset: i64,
    pub epoch: i32,
    pub epoch_start_offset: i64,
    pub confirm_offset: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferFrame {
    pub header: TransferHeader,
    /// Empty for a heartbeat.
    pub body: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MasterMessage {
    HandshakeAnswer(HandshakeAnswer),
    Transfer(TransferFrame),
}

/// Why a peer's bytes are not this protocol; the connection is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AutoSwitchError {
    #[error("unknown connection state {state} at the start of a message")]
    UnknownState { state: i32 },
    #[error("{field} is {value}, neither 0 nor 1")]
    BadFlag { field: &'static str, value: i16 },
    #[error("{field} is negative ({value})")]
    NegativeOffset { field: &'static str, value: i64 },
    #[error("a body size of {size} bytes is negative")]
    NegativeBodySize { size: i32 },
    #[error("a body of {size} bytes is larger than the {limit} bytes accepted")]
    BodyTooLarge { size: usize, limit: usize },
    #[error("a handshake answer's body of {size} bytes is not a whole number of 12-byte epochs")]
    EpochsNotWhole { size: usize },
    #[error("epoch {epoch} from {start_offset} does not follow the epoch before it")]
    EpochsOutOfOrder { epoch: i32, start_offset: i64 },
    #[error("a transfer frame at {offset} says its epoch starts later, at {epoch_start_offset}")]
    EpochStartsAfterFrame {
        offset: i64,
        epoch_start_offset: i64,
    },
}

pub fn encode_slave_handshake(handshake: &SlaveHandshake) -> [u8; SLAVE_HANDSHAKE_BYTES] {
    let mut out = [0u8; SLAVE_HANDSHAKE_BYTES];
    out[0..4].copy_from_slice(&STATE_HANDSHAKE.to_be_bytes());
    out[4..6].copy_from_slice(&i16::from(handshake.sync_from_last_file).to_be_bytes());
    out[6..8].copy_from_slice(&i16::from(handshake.async_learner).to_be_bytes());
    out[8..16].copy_from_slice(&handshake.broker_id.to_be_bytes());
    out
}

pub fn encode_slave_report(offset: u64) -> [u8; SLAVE_REPORT_BYTES] {
    assert!(offset <= i64::MAX as u64, "CommitLog positions fit an i64");
    let mut out = [0u8; SLAVE_REPORT_BYTES];
    out[0..4].copy_from_slice(&STATE_TRANSFER.to_be_bytes());
    out[4..12].copy_from_slice(&offset.to_be_bytes());
    out
}

/// The whole answer. The master's epoch file holds at most `HANDSHAKE_EPOCHS_MAX` entries.
pub fn encode_handshake_answer(answer: &HandshakeAnswer) -> Vec<u8> {
    assert!(
        answer.epochs.len() <= HANDSHAKE_EPOCHS_MAX,
        "the epoch file is bounded"
    );
    assert!(answer.master_max_offset <= i64::MAX as u64);
    let body_bytes = answer.epochs.len() * EPOCH_ENTRY_BYTES;
    let mut out = Vec::with_capacity(HANDSHAKE_ANSWER_HEADER_BYTES + body_bytes);
    out.extend_from_slice(&STATE_HANDSHAKE.to_be_bytes());
    out.extend_from_slice(&(body_bytes as i32).to_be_bytes());
    out.extend_from_slice(&answer.master_max_offset.to_be_bytes());
    out.extend_from_slice(&answer.last_epoch.to_be_bytes());
    for entry in &answer.epochs {
        out.extend_from_slice(&entry.epoch.to_be_bytes());
        out.extend_from_slice(&entry.start_offset.to_be_bytes());
    }
    out
}

/// A transfer frame's header for a body of `body_bytes` (the body follows it on the wire).
pub fn encode_transfer_header(
    header: &TransferHeader,
    body_bytes: usize,
) -> [u8; TRANSFER_HEADER_BYTES] {
    assert!(
        body_bytes <= TRANSFER_BODY_BYTES_MAX,
        "a frame's body is bounded"
    );
    let mut out = [0u8; TRANSFER_HEADER_BYTES];
    out[0..4].copy_from_slice(&STATE_TRANSFER.to_be_bytes());
    out[4..8].copy_from_slice(&(body_bytes as i32).to_be_bytes());
    out[8..16].copy_from_slice(&header.offset.to_be_bytes());
    out[16..20].copy_from_slice(&header.epoch.to_be_bytes());
    out[20..28].copy_from_slice(&header.epoch_start_offset.to_be_bytes());
    out[28..36].copy_from_slice(&header.confirm_offset.to_be_bytes());
    out
}

fn i16_at(bytes: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([bytes[at], bytes[at + 1]])
}

fn i32_at(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn i64_at(bytes: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn flag(field: &'static str, value: i16) -> Result<bool, AutoSwitchError> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(AutoSwitchError::BadFlag { field, value }),
    }
}

fn offset(field: &'static str, value: i64) -> Result<u64, AutoSwitchError> {
    u64::try_from(value).map_err(|_| AutoSwitchError::NegativeOffset { field, value })
}

/// A message's size from its leading state: the slave's messages have fixed sizes.
fn slave_message_bytes(state: i32) -> Result<usize, AutoSwitchError> {
    match state {
        STATE_HANDSHAKE => Ok(SLAVE_HANDSHAKE_BYTES),
        STATE_TRANSFER => Ok(SLAVE_REPORT_BYTES),
        state => Err(AutoSwitchError::UnknownState { state }),
    }
}

fn decode_slave_message(bytes: &[u8]) -> Result<SlaveMessage, AutoSwitchError> {
    match i32_at(bytes, 0) {
        STATE_HANDSHAKE => Ok(SlaveMessage::Handshake(SlaveHandshake {
            sync_from_last_file: flag("isSyncFromLastFile", i16_at(bytes, 4))?,
            async_learner: flag("isAsyncLearner", i16_at(bytes, 6))?,
            broker_id: i64_at(bytes, 8),
        })),
        _ => Ok(SlaveMessage::Report {
            offset: offset("a report's offset", i64_at(bytes, 4))?,
        }),
    }
}

/// The master's reader of its slave's messages: bytes in, whole messages out.
#[derive(Default)]
pub struct SlaveMessageReader {
    partial: [u8; SLAVE_HANDSHAKE_BYTES],
    filled: usize,
}

impl SlaveMessageReader {
    /// Feeds received bytes; the whole messages among them (with what earlier calls left)
    /// go to `out`, in order.
    pub fn feed(
        &mut self,
        mut bytes: &[u8],
        out: &mut Vec<SlaveMessage>,
    ) -> Result<(), AutoSwitchError> {
        while !bytes.is_empty() {
            // The state decides the size; until it is whole, read only it.
            let wanted = if self.filled < 4 {
                4
            } else {
                slave_message_bytes(i32_at(&self.partial, 0))?
            };
            let take = (wanted - self.filled).min(bytes.len());
            self.partial[self.filled..self.filled + take].copy_from_slice(&bytes[..take]);
            self.filled += take;
            bytes = &bytes[take..];
            if self.filled == 4 {
                slave_message_bytes(i32_at(&self.partial, 0))?;
            } else if self.filled == wanted {
                out.push(decode_slave_message(&self.partial[..wanted])?);
                self.filled = 0;
            }
        }
        Ok(())
    }
}

/// The size of the header a master's message starts with, from its state.
fn master_header_bytes(state: i32) -> Result<usize, AutoSwitchError> {
    match state {
        STATE_HANDSHAKE => Ok(HANDSHAKE_ANSWER_HEADER_BYTES),
        STATE_TRANSFER => Ok(TRANSFER_HEADER_BYTES),
        state => Err(AutoSwitchError::UnknownState { state }),
    }
}

/// Checks a complete header; returns its body's size.
fn check_master_header(header: &[u8]) -> Result<usize, AutoSwitchError> {
    let size = i32_at(header, 4);
    let size = usize::try_from(size).map_err(|_| AutoSwitchError::NegativeBodySize { size })?;
    if i32_at(header, 0) == STATE_HANDSHAKE {
        let limit = HANDSHAKE_EPOCHS_MAX * EPOCH_ENTRY_BYTES;
        if size > limit {
            return Err(AutoSwitchError::BodyTooLarge { size, limit });
        }
        if size % EPOCH_ENTRY_BYTES != 0 {
            return Err(AutoSwitchError::EpochsNotWhole { size });
        }
        offset("the master's max offset", i64_at(header, 8))?;
        return Ok(size);
    }
    if size > TRANSFER_BODY_BYTES_MAX {
        return Err(AutoSwitchError::BodyTooLarge {
            size,
            limit: TRANSFER_BODY_BYTES_MAX,
        });
    }
    let frame_offset = i64_at(header, 8);
    let epoch_start_offset = i64_at(header, 20);
    // A heartbeat may come before the master has chosen where to start (-1); bytes never do.
    if size > 0 {
        offset("a transfer frame's offset", frame_offset)?;
        offset("a transfer frame's epoch start", epoch_start_offset)?;
        if epoch_start_offset > frame_offset {
            return Err(AutoSwitchError::EpochStartsAfterFrame {
                offset: frame_offset,
                epoch_start_offset,
            });
        }
    }
    Ok(size)
}

fn decode_master_message(header: &[u8], body: Vec<u8>) -> Result<MasterMessage, AutoSwitchError> {
    if i32_at(header, 0) == STATE_TRANSFER {
        return Ok(MasterMessage::Transfer(TransferFrame {
            header: TransferHeader {
                offset: i64_at(header, 8),
                epoch: i32_at(header, 16),
                epoch_start_offset: i64_at(header, 20),
                confirm_offset: i64_at(header, 28),
            },
            body,
        }));
    }
    let mut epochs: Vec<EpochEntry> = Vec::with_capacity(body.len() / EPOCH_ENTRY_BYTES);
    for raw in body.chunks_exact(EPOCH_ENTRY_BYTES) {
        let epoch = i32_at(raw, 0);
        let start = i64_at(raw, 4);
        let out_of_order = AutoSwitchError::EpochsOutOfOrder {
            epoch,
            start_offset: start,
        };
        let start_offset = u64::try_from(start).map_err(|_| out_of_order.clone())?;
        if epochs
            .last()
            .is_some_and(|last| epoch <= last.epoch || start_offset < last.start_offset)
        {
            return Err(out_of_order);
        }
        epochs.push(EpochEntry {
            epoch,
            start_offset,
        });
    }
    Ok(MasterMessage::HandshakeAnswer(HandshakeAnswer {
        master_max_offset: i64_at(header, 8) as u64,
        last_epoch: i32_at(header, 16),
        epochs,
    }))
}

/// The slave's reader of its master's messages: bytes in, whole messages out.
pub struct MasterMessageReader {
    header: [u8; TRANSFER_HEADER_BYTES],
    header_filled: usize,
    /// The body's size once the header is whole and checked.
    body_bytes: Option<usize>,
    /// Grows by what arrives, never reserved ahead from the size a peer claims.
    body: Vec<u8>,
}

impl Default for MasterMessageReader {
    fn default() -> MasterMessageReader {
        MasterMessageReader {
            header: [0; TRANSFER_HEADER_BYTES],
            header_filled: 0,
            body_bytes: None,
            body: Vec::new(),
        }
    }
}

impl MasterMessageReader {
    /// Feeds received bytes; the whole messages among them (with what earlier calls left)
    /// go to `out`, in order.
    pub fn feed(
        &mut self,
        mut bytes: &[u8],
        out: &mut Vec<MasterMessage>,
    ) -> Result<(), AutoSwitchError> {
        loop {
            let Some(body_bytes) = self.body_bytes else {
                let wanted = if self.header_filled < 4 {
                    4
                } else {
                    master_header_bytes(i32_at(&self.header, 0))?
                };
                if self.header_filled == wanted {
                    self.body_bytes = Some(check_master_header(&self.header[..wanted])?);
                    continue;
                }
                if bytes.is_empty() {
                    return Ok(());
                }
                let take = (wanted - self.header_filled).min(bytes.len());
                self.header[self.header_filled..self.header_filled + take]
                    .copy_from_slice(&bytes[..take]);
                self.header_filled += take;
                bytes = &bytes[take..];
                continue;
            };
            if self.body.len() == body_bytes {
                let body = std::mem::take(&mut self.body);
                let message = decode_master_message(&self.header, body)?;
                out.push(message);
                self.header_filled = 0;
                self.body_bytes = None;
                continue;
            }
            if bytes.is_empty() {
                return Ok(());
            }
            let take = (body_bytes - self.body.len()).min(bytes.len());
            self.body.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
    }
}

#[cfg(test)]
mod tests;
