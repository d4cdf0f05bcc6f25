//! RocketMQ's stored-message record: the CommitLog format, which a pull, pop, view or query
//! answer also carries as it is. The store writes and recovers these bytes and the wire sends
//! them, so the format has one owner here and both depend on it.
//!
//! Layout (big-endian; positions for IPv4 hosts, pinned by the `*_AT` constants):
//!
//! ```text
//!  0 TOTALSIZE i32        4 MAGICCODE i32       8 BODYCRC i32      12 QUEUEID i32
//! 16 FLAG i32            20 QUEUEOFFSET i64    28 PHYSICALOFFSET i64
//! 36 SYSFLAG i32         40 BORNTIMESTAMP i64  48 BORNHOST ip(4|16) + port i32
//! 56 STORETIMESTAMP i64  64 STOREHOST ip(4|16) + port i32
//! 72 RECONSUMETIMES i32  76 PREPARED TRANSACTION OFFSET i64
//! 84 BODY i32 len + bytes, TOPIC i8 (v1) / i16 (v2) len + bytes, PROPERTIES i16 len + bytes
//! ```
//!
//! Two readers of one format: `StoredMessage` owns its fields (clients, tools, the broker
//! editing a message to store it again) and `RecordView` borrows them (the store, which parses
//! every record it recovers or serves and must not allocate for it). A property test holds
//! them to the same answers.
//!
//! This crate does no I/O and needs no runtime; the caller passes in the time where one is
//! needed.

mod builder;
mod hash;
mod id;
mod layout;
mod message;
mod properties;
mod view;

pub use builder::RecordBuilder;

/// RocketMQ 5's timer queue (`rmq_sys_wheel_timer`): timer messages wait there until due.
pub const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";
pub use hash::{body_crc, index_key_hash, java_string_hash, tags_code};
pub use id::{decode_offset_msg_id, new_uniq_id, offset_msg_id, MsgIdError};
pub use layout::{
    blank_marker, host_bytes, is_record_magic, patch_offsets, read_i32, read_i64,
    store_timestamp_from_prefix, sys_flag, BLANK_BYTES, BODY_CRC_AT, BORN_HOST_AT,
    BORN_TIMESTAMP_AT, FLAG_AT, HOST_V4_BYTES, HOST_V6_BYTES, MAGIC_AT, MAGIC_BLANK, MAGIC_V1,
    MAGIC_V2, PHYSICAL_OFFSET_AT, QUEUE_ID_AT, QUEUE_OFFSET_AT, RECORD_BYTES_MIN,
    SHORT_STRING_BYTES_MAX, STORE_TIMESTAMP_PREFIX_BYTES, SYS_FLAG_AT, TOPIC_BYTES_MAX_V1,
    TOTAL_SIZE_AT,
};
pub use message::{MessageError, StoredMessage};
pub use properties::{
    decode_properties, encode_properties, find_property, property, push_property, with_property,
    without_property, SendProperties, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR,
};
pub use view::{RecordError, RecordView};
