//! The stored-message record, which pull, pop, view and query bodies carry as the store holds
//! it. Its format is owned by `quiver-record`; these are the names the wire crate has always
//! offered, so its users need not know where the format lives.

pub use quiver_record::{
    body_crc, decode_offset_msg_id, decode_properties, encode_properties, find_property,
    java_string_hash, new_uniq_id, offset_msg_id, property, push_property, sys_flag, tags_code,
    with_property, without_property, MessageError, MsgIdError, SendProperties, StoredMessage,
    MAGIC_BLANK, MAGIC_V1, MAGIC_V2, NAME_VALUE_SEPARATOR,
    PHYSICAL_OFFSET_AT as PHYSICAL_OFFSET_POSITION, PROPERTY_SEPARATOR,
    QUEUE_OFFSET_AT as QUEUE_OFFSET_POSITION,
};
