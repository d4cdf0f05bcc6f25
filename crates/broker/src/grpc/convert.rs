//! Between gRPC's messages and statuses and the remoting requests, answers and stored messages
//! the handlers work with: what a proxy's converters do.

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;

use quiver_proto::v2::{self as pb, Code};
use quiver_proto::{Duration, Timestamp};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::message::{property, sys_flag, StoredMessage};
use quiver_wire::{encode_properties, Command, Encoding, SendMessageHeader};

/// The status of a call that went through.
pub fn ok() -> Option<pb::Status> {
    status(Code::Ok, "OK")
}

pub fn status(code: Code, message: impl Into<String>) -> Option<pb::Status> {
    Some(pb::Status {
        code: code as i32,
        message: message.into(),
    })
}

/// A remoting answer's code as the gRPC code the proxy gives for it.
pub fn code_of(response_code: i32) -> Code {
    use response_code::*;
    match response_code {
        SUCCESS => Code::Ok,
        FLUSH_DISK_TIMEOUT => Code::MasterPersistenceTimeout,
        FLUSH_SLAVE_TIMEOUT => Code::SlavePersistenceTimeout,
        SLAVE_NOT_AVAILABLE => Code::HaNotAvailable,
        TOPIC_NOT_EXIST => Code::TopicNotFound,
        SUBSCRIPTION_GROUP_NOT_EXIST => Code::ConsumerGroupNotFound,
        NO_PERMISSION => Code::Forbidden,
        MESSAGE_ILLEGAL => Code::MessageBodyTooLarge,
        INVALID_PARAMETER => Code::BadRequest,
        SYSTEM_BUSY | POLLING_FULL => Code::TooManyRequests,
        PULL_NOT_FOUND | POLLING_TIMEOUT | NO_MESSAGE => Code::MessageNotFound,
        SUBSCRIPTION_PARSE_FAILED => Code::IllegalFilterExpression,
        REQUEST_CODE_NOT_SUPPORTED => Code::NotImplemented,
        _ => Code::InternalServerError,
    }
}

/// A remoting answer as a gRPC status: its code, and its remark as the message.
pub fn status_of(response: &Command) -> Option<pb::Status> {
    let code = code_of(response.code);
    let message = match (&response.remark, code) {
        (_, Code::Ok) => "OK".to_string(),
        (Some(remark), _) => remark.clone(),
        (None, _) => format!("the broker answered code {}", response.code),
    };
    status(code, message)
}

/// A request of `code` with `ext`, as a proxy's remoting client sends it.
pub fn request(code: i32, ext: quiver_wire::ExtFields) -> Command {
    Command::request(code, Encoding::Json).with_ext(ext)
}

/// Why a message a client sent cannot be stored.
pub struct Unsendable {
    pub code: Code,
    pub message: String,
}

/// What a send of a gRPC message sets beside the message itself.
pub struct SendTarget<'a> {
    pub producer_group: &'a str,
    /// -1: the broker picks a queue.
    pub queue_id: i32,
    pub born_ms: i64,
    pub body_bytes_max: usize,
}

/// The SEND_MESSAGE_V2 request a remoting producer would make for `message`.
pub fn send_request(message: &pb::Message, target: &SendTarget) -> Result<Command, Unsendable> {
    let topic = message
        .topic
        .as_ref()
        .map(|t| t.name.clone())
        .unwrap_or_default();
    let system = message.system_properties.clone().unwrap_or_default();
    let body = body_of(message, &system, target.body_bytes_max)?;
    let transaction = system.message_type == pb::MessageType::Transaction as i32;
    let header = SendMessageHeader {
        producer_group: target.producer_group.to_string(),
        topic,
        default_topic: "TBW102".to_string(),
        default_topic_queue_nums: 4,
        queue_id: target.queue_id,
        sys_flag: if transaction {
            sys_flag::TRANSACTION_PREPARED
        } else {
            0
        },
        born_timestamp: system
            .born_timestamp
            .as_ref()
            .map_or(target.born_ms, millis_of),
        flag: 0,
        properties: properties_of(message, &system, target.producer_group)?,
        reconsume_times: 0,
        unit_mode: false,
        max_reconsume_times: None,
        batch: false,
    };
    Ok(
        Command::request(request_code::SEND_MESSAGE_V2, Encoding::Json)
            .with_ext(header.to_v2())
            .with_body(body),
    )
}

/// The stored properties of a gRPC message: its user properties (none of them a name the system
/// sets), then what its system properties say in RocketMQ's names.
fn properties_of(
    message: &pb::Message,
    system: &pb::SystemProperties,
    producer_group: &str,
) -> Result<String, Unsendable> {
    let mut pairs: Vec<(&str, &str)> = message
        .user_properties
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    pairs.sort();
    if let Some((name, _)) = pairs.iter().find(|(name, _)| is_system_property(name)) {
        return Err(Unsendable {
            code: Code::IllegalMessagePropertyKey,
            message: format!("user property {name} is reserved for the system"),
        });
    }
    let mut system_pairs = vec![
        (property::UNIQ_KEY, system.message_id.clone()),
        (property::WAIT, "true".to_string()),
    ];
    if let Some(tag) = system.tag.as_ref().filter(|tag| !tag.is_empty()) {
        system_pairs.push((property::TAGS, tag.clone()));
    }
    if !system.keys.is_empty() {
        system_pairs.push((property::KEYS, system.keys.join(" ")));
    }
    if let Some(group) = system.message_group.as_ref().filter(|g| !g.is_empty()) {
        system_pairs.push((property::SHARDING_KEY, group.clone()));
    }
    if let Some(due) = &system.delivery_timestamp {
        system_pairs.push((property::TIMER_DELIVER_MS, millis_of(due).to_string()));
    }
    if system.message_type == pb::MessageType::Transaction as i32 {
        system_pairs.push((property::TRAN_MSG, "true".to_string()));
        system_pairs.push((property::PRODUCER_GROUP, producer_group.to_string()));
        if let Some(after) = &system.orphaned_transaction_recovery_duration {
            let seconds = after.seconds.max(0).to_string();
            system_pairs.push((property::CHECK_IMMUNITY_TIME_IN_SECONDS, seconds));
        }
    }
    let system_pairs = system_pairs.iter().map(|(n, v)| (*n, v.as_str()));
    Ok(encode_properties(pairs.into_iter().chain(system_pairs)))
}

/// The body as stored: a GZIP body (the clients compress large ones) is inflated, up to the
/// broker's message size.
fn body_of(
    message: &pb::Message,
    system: &pb::SystemProperties,
    bytes_max: usize,
) -> Result<Vec<u8>, Unsendable> {
    let too_large = |bytes: usize| Unsendable {
        code: Code::MessageBodyTooLarge,
        message: format!(
            "the message body is {bytes} bytes or more, past maxMessageSize={bytes_max}"
        ),
    };
    if system.body_encoding != pb::Encoding::Gzip as i32 {
        if message.body.len() > bytes_max {
            return Err(too_large(message.body.len()));
        }
        return Ok(message.body.to_vec());
    }
    let mut body = Vec::new();
    let mut inflating = flate2::read::GzDecoder::new(&message.body[..]).take(bytes_max as u64 + 1);
    inflating
        .read_to_end(&mut body)
        .map_err(|error| Unsendable {
            code: Code::MessageCorrupted,
            message: format!("the GZIP body does not inflate: {error}"),
        })?;
    if body.len() > bytes_max {
        return Err(too_large(body.len()));
    }
    Ok(body)
}

/// Properties the system sets, which a user property may not name.
fn is_system_property(name: &str) -> bool {
    matches!(
        name,
        property::UNIQ_KEY
            | property::TAGS
            | property::KEYS
            | property::WAIT
            | property::SHARDING_KEY
            | property::TIMER_DELIVER_MS
            | property::TRAN_MSG
            | property::PRODUCER_GROUP
            | property::POP_CK
            | property::DELAY
            | property::RECONSUME_TIME
            | property::MAX_RECONSUME_TIMES
            | property::REAL_TOPIC
            | property::REAL_QID
    )
}

pub fn millis_of(time: &Timestamp) -> i64 {
    time.seconds * 1_000 + i64::from(time.nanos) / 1_000_000
}

pub fn timestamp(millis: i64) -> Timestamp {
    Timestamp {
        seconds: millis.div_euclid(1_000),
        nanos: (millis.rem_euclid(1_000) * 1_000_000) as i32,
    }
}

pub fn duration(millis: i64) -> Duration {
    Duration {
        seconds: millis.div_euclid(1_000),
        nanos: (millis.rem_euclid(1_000) * 1_000_000) as i32,
    }
}

pub fn duration_millis(duration: &Duration) -> i64 {
    duration.seconds.saturating_mul(1_000) + i64::from(duration.nanos) / 1_000_000
}

/// The properties the gRPC message carries as system properties, not user ones.
const SYSTEM_PROPERTIES: [&str; 24] = [
    property::UNIQ_KEY,
    property::TAGS,
    property::KEYS,
    property::WAIT,
    property::SHARDING_KEY,
    property::TIMER_DELIVER_MS,
    property::TIMER_DELAY_MS,
    property::TIMER_DELAY_SEC,
    property::TIMER_OUT_MS,
    property::TIMER_ENQUEUE_MS,
    property::TIMER_DEQUEUE_MS,
    property::START_DELIVER_TIME,
    property::DELAY,
    property::TRAN_MSG,
    property::PRODUCER_GROUP,
    property::POP_CK,
    property::POP_CK_OFFSET,
    property::FIRST_POP_TIME,
    property::RETRY_TOPIC,
    property::REAL_TOPIC,
    property::REAL_QID,
    property::RECONSUME_TIME,
    property::MAX_RECONSUME_TIMES,
    property::CHECK_IMMUNITY_TIME_IN_SECONDS,
];

/// The most a compressed stored body is inflated to for a gRPC consumer: remoting producers
/// compress bodies of at most `maxMessageSize` (4 MiB by default).
const INFLATED_BYTES_MAX: usize = 64 * 1024 * 1024;

/// How a message read from the store is shown to a gRPC consumer.
pub struct Delivery<'a> {
    /// The topic the consumer asked for (a retried message is stored in a retry topic).
    pub topic: &'a str,
    pub receipt_handle: Option<String>,
    pub invisible_ms: Option<i64>,
    /// The attempt this delivery is (1 for the first).
    pub attempt: i32,
}

/// A stored message as gRPC's `Message`.
pub fn message_of(stored: &StoredMessage, delivery: &Delivery) -> pb::Message {
    let properties = quiver_wire::decode_properties(&stored.properties);
    let find = |name: &str| {
        properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let user_properties: HashMap<String, String> = properties
        .iter()
        .filter(|(name, _)| !SYSTEM_PROPERTIES.contains(&name.as_str()))
        .cloned()
        .collect();
    let message_id = find(property::UNIQ_KEY).unwrap_or_else(|| stored.offset_msg_id());
    let due = find(property::TIMER_DELIVER_MS).and_then(|v| v.parse::<i64>().ok());
    let group = find(property::SHARDING_KEY);
    let message_type = if find(property::TRAN_MSG).as_deref() == Some("true") {
        pb::MessageType::Transaction
    } else if group.is_some() {
        pb::MessageType::Fifo
    } else if due.is_some() {
        pb::MessageType::Delay
    } else {
        pb::MessageType::Normal
    };
    // A body a remoting producer compressed (zlib) is inflated for the gRPC consumer, as the
    // proxy's client does, up to `INFLATED_BYTES_MAX`; one that does not inflate within it goes
    // out as stored.
    let mut body = stored.body.to_vec();
    if stored.sys_flag & sys_flag::COMPRESSED != 0 {
        let mut inflated = Vec::new();
        let mut inflating =
            flate2::read::ZlibDecoder::new(&stored.body[..]).take(INFLATED_BYTES_MAX as u64 + 1);
        if inflating.read_to_end(&mut inflated).is_ok() && inflated.len() <= INFLATED_BYTES_MAX {
            body = inflated;
        }
    }
    let system = pb::SystemProperties {
        tag: find(property::TAGS),
        keys: find(property::KEYS)
            .map(|keys| {
                keys.split(' ')
                    .filter(|k| !k.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default(),
        message_id,
        body_digest: Some(body_digest(&body)),
        body_encoding: pb::Encoding::Identity as i32,
        message_type: message_type as i32,
        born_timestamp: Some(timestamp(stored.born_timestamp)),
        born_host: host_of(stored.born_host),
        store_timestamp: Some(timestamp(stored.store_timestamp)),
        store_host: stored.store_host.to_string(),
        delivery_timestamp: due.map(timestamp),
        receipt_handle: delivery.receipt_handle.clone(),
        queue_id: stored.queue_id,
        queue_offset: Some(stored.queue_offset),
        invisible_duration: delivery.invisible_ms.map(duration),
        delivery_attempt: Some(delivery.attempt),
        message_group: group,
        trace_context: None,
        orphaned_transaction_recovery_duration: None,
        dead_letter_queue: None,
    };
    pb::Message {
        topic: Some(pb::Resource {
            resource_namespace: String::new(),
            name: delivery.topic.to_string(),
        }),
        user_properties,
        system_properties: Some(system),
        body,
    }
}

/// The body's MD5 in upper-case hex, as RocketMQ's proxy sends it: every client checks an MD5
/// digest alike, while they read a CRC32 one three ways (unpadded hex, padded hex, decimal).
fn body_digest(body: &[u8]) -> pb::Digest {
    use md5::Digest as _;
    let checksum = md5::Md5::digest(body)
        .iter()
        .map(|byte| format!("{byte:02X}"))
        .collect();
    pb::Digest {
        r#type: pb::DigestType::Md5 as i32,
        checksum,
    }
}

fn host_of(address: SocketAddr) -> String {
    address.ip().to_string()
}

/// The remoting language of a gRPC client's `x-mq-language`.
pub fn language_of(name: &str) -> quiver_wire::LanguageCode {
    if let Some(code) = quiver_wire::LanguageCode::from_name(name) {
        return code;
    }
    let remoting = match name {
        "JAVA" | "KOTLIN" => "JAVA",
        "CPP" => "CPP",
        "DOT_NET" => "DOTNET",
        "GOLANG" => "GO",
        "RUST" => "RUST",
        "PYTHON" => "PYTHON",
        "PHP" => "PHP",
        "NODE_JS" | "NODEJS" => "NODE_JS",
        "RUBY" => "RUBY",
        _ => "OTHER",
    };
    quiver_wire::LanguageCode::from_name(remoting).unwrap_or(quiver_wire::LanguageCode::OTHER)
}

/// A stored message's attempt: its reconsume times plus one.
pub fn attempt_of(stored: &StoredMessage) -> i32 {
    stored.reconsume_times.saturating_add(1)
}
