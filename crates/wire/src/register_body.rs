//! REGISTER_BROKER's compressed body (`compressed=true` in its header, a broker with
//! `compressedRegister`): RocketMQ's own binary layout of RegisterBrokerBody, zlib-compressed
//! as a whole. A topic takes about 40 bytes here against some 200 in the JSON form, and the
//! layout compresses well, so a registration of 100,000 topics is well under a megabyte where
//! its JSON would pass the 16 MiB frame limit.
//!
//! The layout, every integer a big-endian i32 and every text UTF-8, each part prefixed by its
//! length in bytes:
//!
//! | part | content |
//! |---|---|
//! | length, data version | the DataVersion as JSON |
//! | count | how many topics follow |
//! | per topic: length, text | `name readQueueNums writeQueueNums perm filterType`, one space between, then a space and the attributes as JSON (RocketMQ 5; RocketMQ 4 wrote none) |
//! | length, filter servers | the filter server list as JSON (`[]`) |
//! | count | how many static-topic mappings follow (0 here) |
//! | per mapping: length, JSON | a TopicQueueMappingInfo, which Quiver skips |
//!
//! The text form has no `topicSysFlag` and no `order`: a name server learns them as 0 and
//! false, as RocketMQ's does. Decoding is bounded: the inflated bytes stop at a limit the
//! caller gives, so a small body that inflates without end (a zip bomb) is refused once it
//! passes the limit, and no length read from the body is allocated before it is checked
//! against what the limit leaves.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use crate::body::{self, DataVersion, RegisterBrokerBody, TopicConfig};

/// How far a compressed registration may inflate: twice the frame limit, some 800,000 topics
/// in this layout, more than a broker may hold (`quiverTopicsMax` stops at 500,000).
pub const REGISTER_BODY_INFLATED_BYTES_MAX: usize = 32 * 1024 * 1024;

/// RocketMQ's TopicFilterType names; a Java name server refuses any other.
const FILTER_TYPES: [&str; 2] = ["SINGLE_TAG", "MULTI_TAG"];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegisterBodyError {
    #[error("the compressed registration body does not inflate: {0}")]
    Inflate(String),
    #[error("the compressed registration body inflates past {max_bytes} bytes")]
    TooLarge { max_bytes: usize },
    #[error("the compressed registration body ends inside its {part}")]
    Truncated { part: &'static str },
    #[error("the compressed registration body's {part} is invalid: {reason}")]
    Invalid { part: &'static str, reason: String },
}

/// `body` in the compressed layout (zlib, level 6: RocketMQ uses 9, which any reader takes
/// alike and which costs several times the time for a few percent).
pub fn encode_compressed(body: &RegisterBrokerBody) -> Vec<u8> {
    let wrapper = &body.topic_config_serialize_wrapper;
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    write_part(&mut encoder, &body::to_json(&wrapper.data_version));
    write_length(&mut encoder, wrapper.topic_config_table.len());
    for config in wrapper.topic_config_table.values() {
        write_part(&mut encoder, topic_text(config).as_bytes());
    }
    write_part(&mut encoder, &body::to_json(&body.filter_server_list));
    // No static-topic mappings.
    write_length(&mut encoder, 0);
    encoder.finish().expect("writing to memory cannot fail")
}

fn write_part(out: &mut impl Write, bytes: &[u8]) {
    write_length(out, bytes.len());
    out.write_all(bytes).expect("writing to memory cannot fail");
}

fn write_length(out: &mut impl Write, length: usize) {
    let length = i32::try_from(length).expect("a registration part is under 2 GiB");
    out.write_all(&length.to_be_bytes())
        .expect("writing to memory cannot fail");
}

/// A topic as RocketMQ 5's `TopicConfig.encode` writes it.
fn topic_text(config: &TopicConfig) -> String {
    let filter_type = if FILTER_TYPES.contains(&config.topic_filter_type.as_str()) {
        config.topic_filter_type.as_str()
    } else {
        FILTER_TYPES[0]
    };
    let attributes = String::from_utf8(body::to_json(&config.attributes)).expect("JSON is UTF-8");
    format!(
        "{} {} {} {} {filter_type} {attributes}",
        config.topic_name, config.read_queue_nums, config.write_queue_nums, config.perm
    )
}

/// Reads a compressed body, inflating at most `inflated_bytes_max` bytes.
pub fn decode_compressed(
    bytes: &[u8],
    inflated_bytes_max: usize,
) -> Result<RegisterBrokerBody, RegisterBodyError> {
    let mut reader = Bounded {
        inner: flate2::read::ZlibDecoder::new(bytes).take(inflated_bytes_max as u64 + 1),
        left: inflated_bytes_max,
        max: inflated_bytes_max,
    };
    let data_version: DataVersion = parse_json(&reader.part("data version")?, "data version")?;
    let count = reader.length("topic count")?;
    let mut table = BTreeMap::new();
    for _ in 0..count {
        let text = reader.part("topic")?;
        let config = parse_topic(&text)?;
        table.insert(config.topic_name.clone(), config);
    }
    // RocketMQ's reader takes a filter server list it cannot parse as none.
    let filter_server_list =
        body::from_json(&reader.part("filter server list")?).unwrap_or_default();
    let mappings = reader.length("mapping count")?;
    for _ in 0..mappings {
        reader.part("topic queue mapping")?;
    }
    let mut body = RegisterBrokerBody {
        filter_server_list,
        ..RegisterBrokerBody::default()
    };
    body.topic_config_serialize_wrapper.data_version = data_version;
    body.topic_config_serialize_wrapper.topic_config_table = table;
    Ok(body)
}

/// The inflating reader, with what is left of its limit.
struct Bounded<R> {
    inner: R,
    left: usize,
    max: usize,
}

impl<R: Read> Bounded<R> {
    fn exact(&mut self, count: usize, part: &'static str) -> Result<Vec<u8>, RegisterBodyError> {
        if count > self.left {
            return Err(RegisterBodyError::TooLarge {
                max_bytes: self.max,
            });
        }
        let mut out = vec![0; count];
        self.inner.read_exact(&mut out).map_err(|error| {
            if error.kind() == std::io::ErrorKind::UnexpectedEof {
                RegisterBodyError::Truncated { part }
            } else {
                RegisterBodyError::Inflate(error.to_string())
            }
        })?;
        self.left -= count;
        Ok(out)
    }

    /// A length or a count: a big-endian i32 that may not be negative.
    fn length(&mut self, part: &'static str) -> Result<usize, RegisterBodyError> {
        let bytes = self.exact(4, part)?;
        let value = i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        usize::try_from(value).map_err(|_| RegisterBodyError::Invalid {
            part,
            reason: format!("negative length {value}"),
        })
    }

    /// A length-prefixed part.
    fn part(&mut self, part: &'static str) -> Result<Vec<u8>, RegisterBodyError> {
        let length = self.length(part)?;
        self.exact(length, part)
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    part: &'static str,
) -> Result<T, RegisterBodyError> {
    body::from_json(bytes).map_err(|error| RegisterBodyError::Invalid {
        part,
        reason: error.to_string(),
    })
}

/// A topic's text, as RocketMQ's `TopicConfig.decode` reads it: five fields or more; a sixth
/// is the attributes' JSON.
fn parse_topic(bytes: &[u8]) -> Result<TopicConfig, RegisterBodyError> {
    let invalid = |reason: String| RegisterBodyError::Invalid {
        part: "topic",
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| invalid(e.to_string()))?;
    let fields: Vec<&str> = text.splitn(6, ' ').collect();
    if fields.len() < 5 {
        return Err(invalid(format!("{text:?} has fewer than five fields")));
    }
    let number = |field: &str| {
        field
            .parse::<i32>()
            .map_err(|e| invalid(format!("{field:?} in {text:?}: {e}")))
    };
    let attributes = match fields.get(5).map(|json| json.trim()) {
        None | Some("") => BTreeMap::new(),
        Some(json) => parse_json(json.as_bytes(), "topic attributes")?,
    };
    Ok(TopicConfig {
        topic_name: fields[0].to_string(),
        read_queue_nums: number(fields[1])?,
        write_queue_nums: number(fields[2])?,
        perm: number(fields[3])?,
        topic_filter_type: fields[4].to_string(),
        attributes,
        ..TopicConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(topics: usize) -> RegisterBrokerBody {
        let mut body = RegisterBrokerBody::default();
        let wrapper = &mut body.topic_config_serialize_wrapper;
        wrapper.data_version.counter = 42;
        wrapper.data_version.timestamp = 1_700_000_000_000;
        for index in 0..topics {
            let name = format!("Topic-{index:06}");
            let mut config = TopicConfig {
                topic_name: name.clone(),
                read_queue_nums: 8,
                write_queue_nums: 4,
                perm: 6,
                topic_filter_type: "SINGLE_TAG".into(),
                ..TopicConfig::default()
            };
            if index % 2 == 0 {
                config
                    .attributes
                    .insert("persistence".into(), "memory".into());
            }
            wrapper.topic_config_table.insert(name, config);
        }
        body
    }

    #[test]
    fn a_compressed_body_reads_back_as_it_was_written() {
        let body = body_of(1_000);
        let bytes = encode_compressed(&body);
        let read = decode_compressed(&bytes, REGISTER_BODY_INFLATED_BYTES_MAX).expect("decodes");
        assert_eq!(read, body);
    }

    #[test]
    fn a_hundred_thousand_topics_compress_far_below_a_frame() {
        let bytes = encode_compressed(&body_of(100_000));
        assert!(bytes.len() < 2 * 1024 * 1024, "{} bytes", bytes.len());
    }

    /// A body as RocketMQ 4 wrote it: no attributes, and a name server's own bytes by hand.
    #[test]
    fn a_rocketmq_4_body_without_attributes_reads() {
        let mut raw = Vec::new();
        let mut part = |bytes: &[u8]| {
            raw.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
            raw.extend_from_slice(bytes);
        };
        part(br#"{"counter":3,"timestamp":17}"#);
        let mut rest = Vec::new();
        rest.extend_from_slice(&1i32.to_be_bytes());
        let topic = b"Orders 16 16 6 SINGLE_TAG";
        rest.extend_from_slice(&(topic.len() as i32).to_be_bytes());
        rest.extend_from_slice(topic);
        rest.extend_from_slice(&2i32.to_be_bytes());
        rest.extend_from_slice(b"[]");
        rest.extend_from_slice(&0i32.to_be_bytes());
        raw.extend_from_slice(&rest);
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&raw).expect("compress");
        let bytes = encoder.finish().expect("finish");
        let read = decode_compressed(&bytes, 1 << 20).expect("decodes");
        let wrapper = read.topic_config_serialize_wrapper;
        assert_eq!(wrapper.data_version.counter, 3);
        let orders = &wrapper.topic_config_table["Orders"];
        assert_eq!((orders.read_queue_nums, orders.perm), (16, 6));
        assert!(orders.attributes.is_empty());
    }

    #[test]
    fn a_body_that_inflates_past_the_limit_is_refused() {
        // 64 MiB of zeros compress to some 64 KiB: a zip bomb in small.
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            encoder.write_all(&zeros).expect("compress");
        }
        let bomb = encoder.finish().expect("finish");
        assert!(bomb.len() < 1 << 20);
        // Zeros read as an empty data version, which is no JSON: refused at once.
        assert!(matches!(
            decode_compressed(&bomb, 1 << 20),
            Err(RegisterBodyError::Invalid { .. })
        ));
        // A huge declared length is refused before any allocation.
        let mut lying = Vec::new();
        lying.extend_from_slice(&i32::MAX.to_be_bytes());
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&lying).expect("compress");
        let lying = encoder.finish().expect("finish");
        assert_eq!(
            decode_compressed(&lying, 1 << 20),
            Err(RegisterBodyError::TooLarge { max_bytes: 1 << 20 })
        );
        // Many topics of a length that fits each but not all.
        let mut many = Vec::new();
        many.extend_from_slice(&2i32.to_be_bytes());
        many.extend_from_slice(b"{}");
        many.extend_from_slice(&i32::MAX.to_be_bytes());
        for _ in 0..100_000 {
            let topic = format!("T{} 1 1 6 SINGLE_TAG {}", "x".repeat(60), "{}");
            many.extend_from_slice(&(topic.len() as i32).to_be_bytes());
            many.extend_from_slice(topic.as_bytes());
        }
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&many).expect("compress");
        let many = encoder.finish().expect("finish");
        assert_eq!(
            decode_compressed(&many, 1 << 20),
            Err(RegisterBodyError::TooLarge { max_bytes: 1 << 20 })
        );
    }

    #[test]
    fn damaged_bodies_are_errors_not_panics() {
        let good = encode_compressed(&body_of(10));
        // Cut inside the content (the zlib trailer after it is not read, as RocketMQ's reader
        // does not read it).
        for cut in [0, 1, 5, good.len() / 2] {
            assert!(
                decode_compressed(&good[..cut], 1 << 20).is_err(),
                "cut at {cut}"
            );
        }
        assert!(matches!(
            decode_compressed(b"not zlib at all", 1 << 20),
            Err(RegisterBodyError::Inflate(_))
        ));
    }
}
