//! RocketMQ 5's gRPC protocol from the client side: a producer and a simple consumer over
//! `apache.rocketmq.v2.MessagingService`, as the gRPC clients use it (a telemetry stream that
//! carries the client's settings, then sends, receives and acks). Against a Quiver broker's
//! gRPC port or a RocketMQ proxy alike; plaintext HTTP/2.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quiver_proto::v2::messaging_service_client::MessagingServiceClient;
use quiver_proto::v2::{self as pb, Code};
use quiver_wire::message::StoredMessage;
use tokio::sync::mpsc;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

use crate::clock::Clock;
use crate::message::{uniq_str, Message, SendResult, SendStatus, UniqIds};
use crate::ClientError;

/// What the client says it is in its calls' metadata.
const LANGUAGE: &str = "RUST";
/// How long the server has to answer the client's settings on the telemetry stream.
const SETTINGS_WAIT: Duration = Duration::from_secs(10);

static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

/// One gRPC connection with the client id its calls carry.
#[derive(Clone)]
struct Session {
    stub: MessagingServiceClient<Channel>,
    endpoint: String,
    client_id: String,
    /// Each call's deadline, sent as `grpc-timeout` (RocketMQ's proxy reads its receives' long
    /// poll from it).
    timeout: Duration,
    /// The telemetry stream's sender, kept open while the client lives.
    _telemetry: Arc<mpsc::Sender<pb::TelemetryCommand>>,
}

impl Session {
    /// Connects to `endpoint` (`host:port`) and sends `settings` on a telemetry stream, waiting
    /// for the server's answer as the gRPC clients do.
    async fn open(
        endpoint: &str,
        settings: pb::Settings,
        timeout: Duration,
    ) -> Result<Session, ClientError> {
        let connect_error = |message: String| ClientError::Connect {
            addr: endpoint.to_string(),
            message,
        };
        let channel = Endpoint::from_shared(format!("http://{endpoint}"))
            .map_err(|e| connect_error(e.to_string()))?
            .connect_timeout(Duration::from_secs(3))
            .timeout(timeout)
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| connect_error(e.to_string()))?;
        let client_id = format!(
            "quiver-bench@{}@{}",
            std::process::id(),
            NEXT_CLIENT.fetch_add(1, Ordering::Relaxed)
        );
        let mut stub = MessagingServiceClient::new(channel);
        let (sender, commands) = mpsc::channel(16);
        sender
            .send(pb::TelemetryCommand {
                status: None,
                command: Some(pb::telemetry_command::Command::Settings(settings)),
            })
            .await
            .map_err(|_| connect_error("the telemetry stream closed".into()))?;
        let mut request =
            tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(commands));
        sign(&mut request, &client_id);
        let mut answers = stub
            .telemetry(request)
            .await
            .map_err(|status| connect_error(format!("telemetry: {status}")))?
            .into_inner();
        let first = tokio::time::timeout(SETTINGS_WAIT, answers.message())
            .await
            .map_err(|_| connect_error("the server did not answer the client's settings".into()))?
            .map_err(|status| connect_error(format!("telemetry: {status}")))?;
        if first.is_none() {
            return Err(connect_error(
                "the telemetry stream ended before the settings were answered".into(),
            ));
        }
        // The rest of the stream (the server's commands) is read and dropped.
        tokio::spawn(async move { while let Ok(Some(_)) = answers.message().await {} });
        Ok(Session {
            stub,
            endpoint: endpoint.to_string(),
            client_id,
            timeout,
            _telemetry: Arc::new(sender),
        })
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        sign(&mut request, &self.client_id);
        request.set_timeout(self.timeout);
        request
    }

    fn refused(&self, code: i32, request_code: i32, remark: String) -> ClientError {
        ClientError::Refused {
            addr: self.endpoint.clone(),
            request_code,
            code,
            remark,
        }
    }

    fn failed(&self, status: tonic::Status) -> ClientError {
        ClientError::BadResponse {
            addr: self.endpoint.clone(),
            reason: status.to_string(),
        }
    }
}

/// The metadata every call carries.
fn sign<T>(request: &mut tonic::Request<T>, client_id: &str) {
    let metadata = request.metadata_mut();
    if let Ok(id) = MetadataValue::try_from(client_id) {
        metadata.insert("x-mq-client-id", id);
    }
    metadata.insert("x-mq-language", MetadataValue::from_static(LANGUAGE));
    metadata.insert("x-mq-protocol", MetadataValue::from_static("v2"));
    metadata.insert("x-mq-client-version", MetadataValue::from_static("5.0.0"));
}

fn resource(name: &str) -> Option<pb::Resource> {
    Some(pb::Resource {
        resource_namespace: String::new(),
        name: name.to_string(),
    })
}

fn endpoints(endpoint: &str) -> Option<pb::Endpoints> {
    let (host, port) = endpoint.rsplit_once(':')?;
    let scheme = match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => pb::AddressScheme::IPv4,
        Ok(std::net::IpAddr::V6(_)) => pb::AddressScheme::IPv6,
        Err(_) => pb::AddressScheme::DomainName,
    };
    Some(pb::Endpoints {
        scheme: scheme as i32,
        addresses: vec![pb::Address {
            host: host.to_string(),
            port: port.parse().ok()?,
        }],
    })
}

fn millis(timestamp: &Option<prost_types::Timestamp>) -> i64 {
    timestamp
        .as_ref()
        .map_or(0, |t| t.seconds * 1_000 + i64::from(t.nanos) / 1_000_000)
}

fn duration(millis: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: (millis / 1_000) as i64,
        nanos: ((millis % 1_000) * 1_000_000) as i32,
    }
}

fn timestamp_now() -> prost_types::Timestamp {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    prost_types::Timestamp {
        seconds: now.as_secs() as i64,
        nanos: now.subsec_nanos() as i32,
    }
}

/// A gRPC producer of one topic.
#[derive(Clone)]
pub struct GrpcProducer {
    session: Session,
    ids: Arc<UniqIds>,
}

impl GrpcProducer {
    /// Connects and says it publishes to `topic`; each send waits up to `timeout`.
    pub async fn start(
        endpoint: &str,
        topic: &str,
        timeout: Duration,
    ) -> Result<GrpcProducer, ClientError> {
        let settings = pb::Settings {
            client_type: Some(pb::ClientType::Producer as i32),
            access_point: endpoints(endpoint),
            request_timeout: Some(duration(timeout.as_millis() as u64)),
            pub_sub: Some(pb::settings::PubSub::Publishing(pb::Publishing {
                topics: vec![resource(topic).unwrap_or_default()],
                max_body_size: 0,
                validate_message_type: false,
            })),
            user_agent: Some(pb::Ua {
                language: pb::Language::Rust as i32,
                version: env!("CARGO_PKG_VERSION").to_string(),
                platform: std::env::consts::OS.to_string(),
                hostname: String::new(),
            }),
            ..pb::Settings::default()
        };
        let session = Session::open(endpoint, settings, timeout).await?;
        let random = NEXT_CLIENT.fetch_add(1, Ordering::Relaxed) as u32 ^ std::process::id();
        let started = crate::clock::SystemClock.now_ms();
        Ok(GrpcProducer {
            session,
            ids: Arc::new(UniqIds::new(std::net::Ipv4Addr::LOCALHOST, random, started)),
        })
    }

    /// Sends one message, as a normal (or, with a group property, FIFO) message.
    pub async fn send(&self, message: &Message) -> Result<SendResult, ClientError> {
        let id = self.ids.next(crate::clock::SystemClock.now_ms());
        let message_id = uniq_str(&id).to_string();
        let system = pb::SystemProperties {
            tag: message.tags.clone(),
            keys: message.keys.clone(),
            message_id: message_id.clone(),
            body_encoding: pb::Encoding::Identity as i32,
            message_type: pb::MessageType::Normal as i32,
            born_timestamp: Some(timestamp_now()),
            born_host: "127.0.0.1".to_string(),
            ..pb::SystemProperties::default()
        };
        let request = pb::SendMessageRequest {
            messages: vec![pb::Message {
                topic: resource(&message.topic),
                user_properties: message.properties.iter().cloned().collect(),
                system_properties: Some(system),
                body: message.body.to_vec(),
            }],
        };
        let mut stub = self.session.stub.clone();
        let answer = stub
            .send_message(self.session.request(request))
            .await
            .map_err(|status| self.session.failed(status))?
            .into_inner();
        let status = answer.status.unwrap_or_default();
        let sent = match Code::try_from(status.code).unwrap_or(Code::Unspecified) {
            Code::Ok => SendStatus::Ok,
            Code::MasterPersistenceTimeout => SendStatus::FlushDiskTimeout,
            Code::SlavePersistenceTimeout => SendStatus::FlushSlaveTimeout,
            Code::HaNotAvailable => SendStatus::SlaveNotAvailable,
            _ => return Err(self.session.refused(status.code, 0, status.message)),
        };
        let entry = answer.entries.into_iter().next().unwrap_or_default();
        Ok(SendResult {
            status: sent,
            msg_id: entry.message_id,
            uniq_id: message_id,
            queue: crate::MessageQueue::default(),
            queue_offset: entry.offset,
        })
    }
}

/// A received message: as stored (what the figures need) and its receipt handle.
pub struct Received {
    pub message: StoredMessage,
    pub receipt_handle: String,
    pub message_id: String,
}

/// A gRPC SimpleConsumer of one topic in one group.
#[derive(Clone)]
pub struct GrpcSimpleConsumer {
    session: Session,
    group: String,
    topic: String,
    expression: String,
    broker: Option<pb::Broker>,
}

impl GrpcSimpleConsumer {
    /// Connects, says it consumes `topic` in `group` with a tag expression, and finds a broker
    /// of the topic to receive from.
    pub async fn start(
        endpoint: &str,
        group: &str,
        topic: &str,
        expression: &str,
        timeout: Duration,
    ) -> Result<GrpcSimpleConsumer, ClientError> {
        let entry = pb::SubscriptionEntry {
            topic: resource(topic),
            expression: Some(pb::FilterExpression {
                r#type: pb::FilterType::Tag as i32,
                expression: expression.to_string(),
            }),
        };
        let settings = pb::Settings {
            client_type: Some(pb::ClientType::SimpleConsumer as i32),
            access_point: endpoints(endpoint),
            request_timeout: Some(duration(timeout.as_millis() as u64)),
            pub_sub: Some(pb::settings::PubSub::Subscription(pb::Subscription {
                group: resource(group),
                subscriptions: vec![entry],
                ..pb::Subscription::default()
            })),
            ..pb::Settings::default()
        };
        let session = Session::open(endpoint, settings, timeout).await?;
        let mut stub = session.stub.clone();
        let route = stub
            .query_route(session.request(pb::QueryRouteRequest {
                topic: resource(topic),
                endpoints: endpoints(endpoint),
            }))
            .await
            .map_err(|status| session.failed(status))?
            .into_inner();
        let status = route.status.unwrap_or_default();
        if status.code != Code::Ok as i32 {
            return Err(session.refused(status.code, 0, status.message));
        }
        let broker = route
            .message_queues
            .into_iter()
            .find(|queue| queue.broker.as_ref().is_some_and(|b| b.id == 0))
            .and_then(|queue| queue.broker);
        Ok(GrpcSimpleConsumer {
            session,
            group: group.to_string(),
            topic: topic.to_string(),
            expression: expression.to_string(),
            broker,
        })
    }

    /// One receive: up to `batch` messages, invisible for `invisible`, waiting up to `wait`
    /// for the first.
    pub async fn receive(
        &self,
        batch: i32,
        invisible: Duration,
        wait: Duration,
    ) -> Result<Vec<Received>, ClientError> {
        let request = pb::ReceiveMessageRequest {
            group: resource(&self.group),
            message_queue: Some(pb::MessageQueue {
                topic: resource(&self.topic),
                id: -1,
                permission: pb::Permission::ReadWrite as i32,
                broker: self.broker.clone(),
                accept_message_types: vec![pb::MessageType::Normal as i32],
            }),
            filter_expression: Some(pb::FilterExpression {
                r#type: pb::FilterType::Tag as i32,
                expression: self.expression.clone(),
            }),
            batch_size: batch,
            invisible_duration: Some(duration(invisible.as_millis() as u64)),
            auto_renew: false,
            long_polling_timeout: Some(duration(wait.as_millis() as u64)),
            attempt_id: None,
        };
        let mut stub = self.session.stub.clone();
        let mut stream = stub
            .receive_message(self.session.request(request))
            .await
            .map_err(|status| self.session.failed(status))?
            .into_inner();
        let mut received = Vec::new();
        let mut status = pb::Status::default();
        while let Some(item) = stream
            .message()
            .await
            .map_err(|status| self.session.failed(status))?
        {
            match item.content {
                Some(pb::receive_message_response::Content::Status(s)) => status = s,
                Some(pb::receive_message_response::Content::Message(message)) => {
                    received.push(stored(message))
                }
                _ => {}
            }
        }
        match Code::try_from(status.code).unwrap_or(Code::Unspecified) {
            Code::Ok | Code::MessageNotFound => Ok(received),
            _ => Err(self.session.refused(status.code, 0, status.message)),
        }
    }

    /// Acknowledges `received` in one call.
    pub async fn ack(&self, received: &[Received]) -> Result<(), ClientError> {
        if received.is_empty() {
            return Ok(());
        }
        let request = pb::AckMessageRequest {
            group: resource(&self.group),
            topic: resource(&self.topic),
            entries: received
                .iter()
                .map(|r| pb::AckMessageEntry {
                    message_id: r.message_id.clone(),
                    receipt_handle: r.receipt_handle.clone(),
                })
                .collect(),
        };
        let mut stub = self.session.stub.clone();
        let answer = stub
            .ack_message(self.session.request(request))
            .await
            .map_err(|status| self.session.failed(status))?
            .into_inner();
        let status = answer.status.unwrap_or_default();
        if status.code != Code::Ok as i32 {
            return Err(self.session.refused(status.code, 0, status.message));
        }
        Ok(())
    }
}

/// A received gRPC message as the stored message the figures read: its times, properties,
/// queue and body.
fn stored(message: pb::Message) -> Received {
    let system = message.system_properties.unwrap_or_default();
    let properties = quiver_wire::encode_properties(
        message
            .user_properties
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str())),
    );
    let unknown: SocketAddr = SocketAddr::from(([0, 0, 0, 0], 0));
    let stored = StoredMessage {
        queue_id: system.queue_id,
        flag: 0,
        queue_offset: system.queue_offset.unwrap_or(0),
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp: millis(&system.born_timestamp),
        born_host: unknown,
        store_timestamp: millis(&system.store_timestamp),
        store_host: unknown,
        reconsume_times: system.delivery_attempt.unwrap_or(1).saturating_sub(1),
        prepared_transaction_offset: 0,
        body: message.body.into(),
        topic: message.topic.map(|t| t.name).unwrap_or_default(),
        properties,
    };
    Received {
        message: stored,
        receipt_handle: system.receipt_handle.unwrap_or_default(),
        message_id: system.message_id,
    }
}
