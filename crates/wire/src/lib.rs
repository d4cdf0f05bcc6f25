//! Codec for Apache RocketMQ's "remoting" protocol: frames and their two header encodings, typed
//! request/response headers, the batch-send body, the JSON bodies and the pop receipt handle. The
//! stored-message record those bodies carry is `quiver-record`'s, re-exported as `message`.
//!
//! This crate does no I/O and owns no runtime: callers hand it bytes and get values back (or a
//! "need more bytes" answer), so the same code serves the broker, the name server and test clients.

pub mod batch;
mod binary_header;
pub mod bit_set;
pub mod body;
pub mod code;
pub mod command;
mod ext;
pub mod frame;
mod frame_error;
#[doc(hidden)]
pub mod fuzzing;
pub mod header;
mod json_header;
pub mod message;
pub mod properties;
pub mod receipt;
pub mod register_body;
pub mod stats;
pub mod timer_checkpoint;

pub use batch::{decode_batch, encode_batch, BatchEntry};
pub use body::*;
pub use code::{request_code, response_code, untruncate_pop_code};
pub use command::{Command, Encoding, LanguageCode, FLAG_ONEWAY, FLAG_RESPONSE, SERVER_VERSION};
pub use ext::{ExtFields, ExtText};
pub use frame::{
    decode_frame, encode_frame, encode_frame_head, encode_frame_head_for, FRAME_BYTES_MAX,
};
pub use frame_error::FrameError;
pub use header::*;
pub use message::{
    body_crc, decode_offset_msg_id, decode_properties, encode_properties, find_property,
    java_string_hash, new_uniq_id, offset_msg_id, property, sys_flag, tags_code, MessageError,
    StoredMessage, MAGIC_BLANK, MAGIC_V1, MAGIC_V2, PHYSICAL_OFFSET_POSITION,
    QUEUE_OFFSET_POSITION,
};
pub use receipt::{ReceiptError, ReceiptHandle, RetryFlag, RECEIPT_HANDLE_BYTES_MAX};
pub use stats::{ConsumeStats, OffsetWrapper, TopicOffset, TopicStatsTable};
pub use timer_checkpoint::TimerCheckpoint;
