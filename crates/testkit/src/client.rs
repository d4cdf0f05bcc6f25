//! A blocking wire client for tests: one connection, requests matched to responses by opaque,
//! requests from the server (NOTIFY_CONSUMER_IDS_CHANGED) collected on the side.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::{Bytes, BytesMut};
use quiver_wire::code::request_code;
use quiver_wire::header::{PullMessageRequestHeader, SendMessageHeader};
use quiver_wire::message::encode_properties;
use quiver_wire::{decode_frame, encode_frame, Command, Encoding, ExtFields};

pub struct WireClient {
    stream: TcpStream,
    input: BytesMut,
    next_opaque: i32,
    pub encoding: Encoding,
    /// Requests the server sent us, in arrival order.
    pub server_requests: Vec<Command>,
}

/// What a test send carries besides topic and body.
#[derive(Debug, Clone, Default)]
pub struct SendOptions {
    pub queue_id: Option<i32>,
    pub tags: Option<String>,
    pub keys: Option<String>,
    pub properties: Vec<(String, String)>,
}

impl WireClient {
    pub fn connect(addr: SocketAddr, encoding: Encoding) -> anyhow::Result<WireClient> {
        let stream = TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(40)))?;
        Ok(WireClient {
            stream,
            input: BytesMut::new(),
            next_opaque: 1,
            encoding,
            server_requests: Vec::new(),
        })
    }

    pub fn set_read_timeout(&self, timeout: Duration) -> anyhow::Result<()> {
        self.stream.set_read_timeout(Some(timeout))?;
        Ok(())
    }

    /// Writes raw bytes (for malformed-input tests).
    pub fn write_raw(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.stream.write_all(bytes)?;
        Ok(())
    }

    /// Sends a request and waits for its response.
    pub fn call(&mut self, request: Command) -> anyhow::Result<Command> {
        let opaque = self.send_request(request)?;
        self.wait_response(opaque)
    }

    /// Sends a request without waiting; returns its opaque.
    pub fn send_request(&mut self, mut request: Command) -> anyhow::Result<i32> {
        request.opaque = self.next_opaque;
        request.encoding = self.encoding;
        self.next_opaque += 1;
        let mut frame = BytesMut::new();
        encode_frame(&request, &mut frame)?;
        self.stream.write_all(&frame)?;
        Ok(request.opaque)
    }

    pub fn wait_response(&mut self, opaque: i32) -> anyhow::Result<Command> {
        loop {
            let frame = self.read_frame()?;
            if frame.is_response() && frame.opaque == opaque {
                return Ok(frame);
            }
            if !frame.is_response() {
                self.server_requests.push(frame);
            }
        }
    }

    /// Reads the next frame of any kind.
    pub fn read_frame(&mut self) -> anyhow::Result<Command> {
        loop {
            if let Some(frame) = decode_frame(&mut self.input)? {
                return Ok(frame);
            }
            let mut chunk = [0u8; 64 * 1024];
            let read = self.stream.read(&mut chunk).context("reading a frame")?;
            if read == 0 {
                bail!("connection closed by the server");
            }
            self.input.extend_from_slice(&chunk[..read]);
        }
    }

    /// A SEND_MESSAGE_V2 (binary-friendly short names) or, with JSON encoding, SEND_MESSAGE
    /// with long names, so both header forms are exercised.
    pub fn send(
        &mut self,
        topic: &str,
        body: &[u8],
        options: &SendOptions,
    ) -> anyhow::Result<Command> {
        let request = send_request(topic, body, options, self.encoding == Encoding::Json);
        self.call(request)
    }

    pub fn pull(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: i32,
        offset: i64,
        max: i32,
        suspend_ms: i64,
    ) -> anyhow::Result<Command> {
        let header = PullMessageRequestHeader {
            queue_offset: offset,
            max_msg_nums: max,
            sys_flag: quiver_wire::header::pull_sys_flag::SUBSCRIPTION
                | if suspend_ms > 0 {
                    quiver_wire::header::pull_sys_flag::SUSPEND
                } else {
                    0
                },
            suspend_timeout_millis: suspend_ms,
            ..pull_header(topic, group, queue_id)
        };
        self.call(
            Command::request(request_code::PULL_MESSAGE, self.encoding).with_ext(header.to_ext()),
        )
    }

    pub fn create_topic(&mut self, topic: &str, queues: i32) -> anyhow::Result<Command> {
        self.call(create_topic_request(topic, queues, self.encoding))
    }
}

/// UPDATE_AND_CREATE_TOPIC for a readable and writable topic of `queues` queues, as mqadmin
/// sends it.
pub fn create_topic_request(topic: &str, queues: i32, encoding: Encoding) -> Command {
    let ext = ExtFields::new()
        .with("topic", topic)
        .with("defaultTopic", "TBW102")
        .with("readQueueNums", queues)
        .with("writeQueueNums", queues)
        .with("perm", 6)
        .with("topicFilterType", "SINGLE_TAG");
    Command::request(request_code::UPDATE_AND_CREATE_TOPIC, encoding).with_ext(ext)
}

/// A PULL_MESSAGE header for queue `queue_id` of `topic` from offset 0: up to 32 messages, a
/// `*` TAG subscription in the request, no suspend; tests change the fields they are about.
pub fn pull_header(topic: &str, group: &str, queue_id: i32) -> PullMessageRequestHeader {
    PullMessageRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        queue_offset: 0,
        max_msg_nums: 32,
        sys_flag: quiver_wire::header::pull_sys_flag::SUBSCRIPTION,
        commit_offset: 0,
        suspend_timeout_millis: 0,
        subscription: Some("*".into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        max_msg_bytes: None,
    }
}

/// Builds a send request the way the Java client does.
pub fn send_request(topic: &str, body: &[u8], options: &SendOptions, long_names: bool) -> Command {
    let mut pairs: Vec<(&str, &str)> = vec![("WAIT", "true")];
    if let Some(tags) = &options.tags {
        pairs.push(("TAGS", tags));
    }
    if let Some(keys) = &options.keys {
        pairs.push(("KEYS", keys));
    }
    for (k, v) in &options.properties {
        pairs.push((k, v));
    }
    let header = SendMessageHeader {
        producer_group: "test_producer".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: options.queue_id.unwrap_or(-1),
        sys_flag: 0,
        born_timestamp: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
        flag: 0,
        properties: encode_properties(pairs),
        reconsume_times: 0,
        unit_mode: false,
        max_reconsume_times: None,
        batch: false,
    };
    let (code, ext) = if long_names {
        (request_code::SEND_MESSAGE, header.to_v1())
    } else {
        (request_code::SEND_MESSAGE_V2, header.to_v2())
    };
    Command::request(code, Encoding::Json)
        .with_ext(ext)
        .with_body(Bytes::copy_from_slice(body))
}
