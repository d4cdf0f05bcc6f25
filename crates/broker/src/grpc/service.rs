//! The MessagingService: each call turned into the remoting requests a proxy would send, run on
//! the calling client's session, and the answers turned back.

use std::pin::Pin;
use std::sync::Arc;

use quiver_proto::v2::messaging_service_server::MessagingService;
use quiver_proto::v2::{self as pb, Code};
use quiver_wire::body::{self, SubscriptionGroupConfig, TopicConfig};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::header::{CheckTransactionStateRequestHeader, EndTransactionRequestHeader};
use quiver_wire::message::{property, StoredMessage};
use quiver_wire::{Command, ExtFields};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::convert::{self, ok, status, status_of};
use super::session::{HalfMessage, Refused, Session, Sessions};
use crate::state::Broker;

mod consume;
mod telemetry;

type Answer<T> = Result<Response<T>, Status>;
type Streamed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

pub struct Messaging {
    broker: Arc<Broker>,
    sessions: Arc<Sessions>,
}

impl Messaging {
    pub fn new(broker: Arc<Broker>, sessions: Arc<Sessions>) -> Messaging {
        Messaging { broker, sessions }
    }

    /// The caller's session, by its `x-mq-client-id`, with its language and version noted.
    fn session<T>(&self, request: &Request<T>) -> Result<Arc<Session>, Status> {
        let metadata = request.metadata();
        let text = |key: &str| metadata.get(key).and_then(|v| v.to_str().ok());
        let client_id = text("x-mq-client-id")
            .filter(|id| !id.is_empty())
            .ok_or_else(|| Status::invalid_argument("x-mq-client-id is required"))?;
        if client_id.len() > 512 {
            return Err(Status::invalid_argument(
                "x-mq-client-id is longer than 512 bytes",
            ));
        }
        let peer = request
            .remote_addr()
            .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        let session = self.sessions.of(client_id, peer).ok_or_else(|| {
            let max = self.broker.serving().config.grpc_clients_max;
            Status::resource_exhausted(format!(
                "the broker serves {max} gRPC clients already ({})",
                crate::config::GRPC_CLIENTS_MAX_KEY
            ))
        })?;
        let language = convert::language_of(text("x-mq-language").unwrap_or("JAVA"));
        session.identify(language, client_version(text("x-mq-client-version")));
        Ok(session)
    }
}

/// The remoting version number of a client version like `5.0.7`: RocketMQ's `MQVersion`
/// ordinal for 5.x (V5_0_0 is 413), or 0.
fn client_version(text: Option<&str>) -> i32 {
    const V5_0_0: i32 = 413;
    let Some(text) = text else { return 0 };
    let mut parts = text.split('.').map(|p| p.parse::<i32>().unwrap_or(0));
    let (major, minor, patch) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    if major == 5 {
        V5_0_0 + minor * 10 + patch
    } else {
        0
    }
}

/// A call that could not be handled, as the status its answer carries.
fn refused_status(refused: Refused) -> Option<pb::Status> {
    match refused {
        Refused::Busy(message) => status(Code::TooManyRequests, message),
        Refused::Ended => status(Code::InternalServerError, "the client's session ended"),
    }
}

fn name_of(resource: &Option<pb::Resource>) -> String {
    resource
        .as_ref()
        .map(|r| r.name.clone())
        .unwrap_or_default()
}

/// The accept types of a topic's `message.type` attribute; a topic without one takes every type.
fn accepted_types(config: &TopicConfig) -> Vec<i32> {
    let attribute = config
        .attributes
        .iter()
        .find(|(key, _)| key.trim_start_matches('+') == "message.type")
        .map(|(_, value)| value.to_ascii_uppercase());
    let one = match attribute.as_deref() {
        Some("NORMAL") => Some(pb::MessageType::Normal),
        Some("FIFO") => Some(pb::MessageType::Fifo),
        Some("DELAY") => Some(pb::MessageType::Delay),
        Some("TRANSACTION") => Some(pb::MessageType::Transaction),
        _ => None,
    };
    match one {
        Some(kind) => vec![kind as i32],
        None => [
            pb::MessageType::Normal,
            pb::MessageType::Fifo,
            pb::MessageType::Delay,
            pb::MessageType::Transaction,
        ]
        .map(|kind| kind as i32)
        .to_vec(),
    }
}

/// The topic's config, or the status that says why there is none.
async fn topic_config(session: &Session, topic: &str) -> Result<TopicConfig, pb::Status> {
    let ext = ExtFields::new().with("topic", topic);
    let answer = session
        .call(convert::request(request_code::GET_TOPIC_CONFIG, ext))
        .await
        .map_err(|refused| refused_status(refused).unwrap_or_default())?;
    if answer.code == response_code::TOPIC_NOT_EXIST {
        let message = format!("topic {topic} does not exist");
        return Err(status(Code::TopicNotFound, message).unwrap_or_default());
    }
    if answer.code != response_code::SUCCESS {
        return Err(status_of(&answer).unwrap_or_default());
    }
    body::from_json(&answer.body).map_err(|error| {
        status(Code::InternalServerError, format!("topic config: {error}")).unwrap_or_default()
    })
}

/// The group's config, or RocketMQ's defaults when the broker has none yet.
pub(super) async fn group_config(session: &Session, group: &str) -> SubscriptionGroupConfig {
    let ext = ExtFields::new().with("group", group);
    let request = convert::request(request_code::GET_SUBSCRIPTIONGROUP_CONFIG, ext);
    match session.call(request).await {
        Ok(answer) if answer.code == response_code::SUCCESS => {
            body::from_json(&answer.body).unwrap_or_default()
        }
        _ => SubscriptionGroupConfig::default(),
    }
}

impl Messaging {
    fn broker_of(&self, endpoints: Option<pb::Endpoints>) -> pb::Broker {
        pb::Broker {
            name: self.broker.serving().config.broker_name.clone(),
            id: 0,
            endpoints,
        }
    }

    async fn send_one(&self, session: &Session, message: &pb::Message) -> pb::SendResultEntry {
        let failed = |status: Option<pb::Status>| pb::SendResultEntry {
            status,
            ..Default::default()
        };
        let topic = message
            .topic
            .as_ref()
            .map(|t| t.name.as_str())
            .unwrap_or("");
        let config = self.broker.serving().config;
        let target = convert::SendTarget {
            producer_group: topic,
            queue_id: -1,
            born_ms: crate::clock::now_ms(),
            body_bytes_max: config.max_message_bytes,
        };
        let request = match convert::send_request(message, &target) {
            Ok(request) => request,
            Err(unsendable) => return failed(status(unsendable.code, unsendable.message)),
        };
        let answer = match session.call(request).await {
            Ok(answer) => answer,
            Err(refused) => return failed(refused_status(refused)),
        };
        if answer.code != response_code::SUCCESS {
            return failed(status_of(&answer));
        }
        let system = message.system_properties.clone().unwrap_or_default();
        let field = |key: &str| answer.ext_get(key).map(str::to_string).unwrap_or_default();
        let offset_id = field("msgId");
        let queue_offset = field("queueOffset").parse::<i64>().unwrap_or(0);
        let mut transaction_id = String::new();
        if system.message_type == pb::MessageType::Transaction as i32 {
            // The broker's transaction id for a half message is its UNIQ_KEY, the client's id.
            transaction_id = system.message_id.clone();
            let commit_log_offset = quiver_wire::decode_offset_msg_id(&offset_id)
                .map(|(_, offset)| offset)
                .unwrap_or(0);
            let half = HalfMessage {
                producer_group: topic.to_string(),
                topic: topic.to_string(),
                queue_offset,
                commit_log_offset,
                message_id: system.message_id.clone(),
            };
            session.remember_half(transaction_id.clone(), half);
        }
        pb::SendResultEntry {
            status: ok(),
            message_id: system.message_id,
            transaction_id,
            offset: queue_offset,
            recall_handle: String::new(),
        }
    }
}

/// The broker's own request to a gRPC client, from its session: a transaction check goes out on
/// the client's telemetry stream; the rest (a rebalance hint) gRPC clients have no use for.
pub fn broker_request(session: &Session, request: Command) {
    if request.code != request_code::CHECK_TRANSACTION_STATE {
        return;
    }
    let Some(header) = request
        .ext
        .as_ref()
        .and_then(|ext| CheckTransactionStateRequestHeader::from_ext(ext).ok())
    else {
        return;
    };
    let Ok((stored, _)) = StoredMessage::decode(&request.body, false) else {
        return;
    };
    let topic = stored
        .property(property::REAL_TOPIC)
        .unwrap_or_else(|| stored.topic.clone());
    let transaction_id = header
        .transaction_id
        .clone()
        .or_else(|| header.msg_id.clone())
        .unwrap_or_else(|| header.offset_msg_id.clone());
    let delivery = convert::Delivery {
        topic: &topic,
        receipt_handle: None,
        invisible_ms: None,
        attempt: 1,
    };
    let message = convert::message_of(&stored, &delivery);
    session.remember_half(
        transaction_id.clone(),
        HalfMessage {
            producer_group: topic.clone(),
            topic: topic.clone(),
            queue_offset: header.tran_state_table_offset,
            commit_log_offset: header.commit_log_offset,
            message_id: header.msg_id.clone().unwrap_or_default(),
        },
    );
    let command = pb::TelemetryCommand {
        status: ok(),
        command: Some(
            pb::telemetry_command::Command::RecoverOrphanedTransactionCommand(
                pb::RecoverOrphanedTransactionCommand {
                    message: Some(message),
                    transaction_id,
                },
            ),
        ),
    };
    session.tell(command);
}

#[tonic::async_trait]
impl MessagingService for Messaging {
    async fn query_route(
        &self,
        request: Request<pb::QueryRouteRequest>,
    ) -> Answer<pb::QueryRouteResponse> {
        let session = self.session(&request)?;
        let request = request.into_inner();
        let topic = name_of(&request.topic);
        let config = match topic_config(&session, &topic).await {
            Ok(config) => config,
            Err(status) => {
                return Ok(Response::new(pb::QueryRouteResponse {
                    status: Some(status),
                    message_queues: Vec::new(),
                }))
            }
        };
        let broker = self.broker_of(request.endpoints);
        let accepted = accepted_types(&config);
        let queues = config.read_queue_nums.max(config.write_queue_nums).max(0);
        let message_queues = (0..queues)
            .map(|id| {
                let read =
                    id < config.read_queue_nums && config.perm & crate::topic::PERM_READ != 0;
                let write =
                    id < config.write_queue_nums && config.perm & crate::topic::PERM_WRITE != 0;
                let permission = match (read, write) {
                    (true, true) => pb::Permission::ReadWrite,
                    (true, false) => pb::Permission::Read,
                    (false, true) => pb::Permission::Write,
                    (false, false) => pb::Permission::None,
                };
                pb::MessageQueue {
                    topic: request.topic.clone(),
                    id,
                    permission: permission as i32,
                    broker: Some(broker.clone()),
                    accept_message_types: accepted.clone(),
                }
            })
            .collect();
        Ok(Response::new(pb::QueryRouteResponse {
            status: ok(),
            message_queues,
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Answer<pb::HeartbeatResponse> {
        let session = self.session(&request)?;
        let request = request.into_inner();
        if session.client().settings.is_none() {
            let status = status(
                Code::UnrecognizedClientType,
                "cannot find client settings for this client: open the telemetry stream first",
            );
            return Ok(Response::new(pb::HeartbeatResponse { status }));
        }
        let data = telemetry::heartbeat_data(&session, request.group.as_ref());
        let heartbeat = Command::request(request_code::HEART_BEAT, quiver_wire::Encoding::Json)
            .with_body(body::to_json(&data));
        let status = match session.call(heartbeat).await {
            Ok(answer) => status_of(&answer),
            Err(refused) => refused_status(refused),
        };
        Ok(Response::new(pb::HeartbeatResponse { status }))
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Answer<pb::SendMessageResponse> {
        let session = self.session(&request)?;
        let request = request.into_inner();
        if request.messages.is_empty() {
            return Ok(Response::new(pb::SendMessageResponse {
                status: status(Code::BadRequest, "no message to send"),
                entries: Vec::new(),
            }));
        }
        let mut entries = Vec::with_capacity(request.messages.len());
        for message in &request.messages {
            entries.push(self.send_one(&session, message).await);
        }
        // One status for the call: the first failure's, as the proxy answers.
        let status = entries
            .iter()
            .find(|entry| {
                entry
                    .status
                    .as_ref()
                    .is_some_and(|s| s.code != Code::Ok as i32)
            })
            .map_or_else(ok, |failed| failed.status.clone());
        Ok(Response::new(pb::SendMessageResponse { status, entries }))
    }

    async fn query_assignment(
        &self,
        request: Request<pb::QueryAssignmentRequest>,
    ) -> Answer<pb::QueryAssignmentResponse> {
        let session = self.session(&request)?;
        let request = request.into_inner();
        let topic = name_of(&request.topic);
        let config = match topic_config(&session, &topic).await {
            Ok(config) => config,
            Err(status) => {
                return Ok(Response::new(pb::QueryAssignmentResponse {
                    status: Some(status),
                    assignments: Vec::new(),
                }))
            }
        };
        let fifo = group_config(&session, &name_of(&request.group))
            .await
            .consume_message_orderly;
        let readable = config.read_queue_nums > 0 && config.perm & crate::topic::PERM_READ != 0;
        if !readable {
            return Ok(Response::new(pb::QueryAssignmentResponse {
                status: status(Code::Forbidden, "no readable queue"),
                assignments: Vec::new(),
            }));
        }
        // One assignment for the broker, queue -1, from which the consumer pops from any queue;
        // one per queue for an ordered group, each consumed in order.
        let queues: Vec<i32> = if fifo {
            (0..config.read_queue_nums).collect()
        } else {
            vec![-1]
        };
        let broker = self.broker_of(request.endpoints);
        let assignments = queues
            .into_iter()
            .map(|id| pb::Assignment {
                message_queue: Some(pb::MessageQueue {
                    topic: request.topic.clone(),
                    id,
                    permission: pb::Permission::ReadWrite as i32,
                    broker: Some(broker.clone()),
                    accept_message_types: accepted_types(&config),
                }),
            })
            .collect();
        Ok(Response::new(pb::QueryAssignmentResponse {
            status: ok(),
            assignments,
        }))
    }

    type ReceiveMessageStream = Streamed<pb::ReceiveMessageResponse>;

    async fn receive_message(
        &self,
        request: Request<pb::ReceiveMessageRequest>,
    ) -> Answer<Self::ReceiveMessageStream> {
        let session = self.session(&request)?;
        let responses = consume::receive(self, &session, request.into_inner()).await;
        Ok(Response::new(Box::pin(tokio_stream::iter(
            responses.into_iter().map(Ok),
        ))))
    }

    async fn ack_message(
        &self,
        request: Request<pb::AckMessageRequest>,
    ) -> Answer<pb::AckMessageResponse> {
        let session = self.session(&request)?;
        Ok(Response::new(
            consume::ack(&session, request.into_inner()).await,
        ))
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<pb::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Answer<pb::ForwardMessageToDeadLetterQueueResponse> {
        let session = self.session(&request)?;
        let status = consume::to_dead_letter_queue(&session, request.into_inner()).await;
        Ok(Response::new(pb::ForwardMessageToDeadLetterQueueResponse {
            status,
        }))
    }

    type PullMessageStream = Streamed<pb::PullMessageResponse>;

    async fn pull_message(
        &self,
        request: Request<pb::PullMessageRequest>,
    ) -> Answer<Self::PullMessageStream> {
        let session = self.session(&request)?;
        let responses = consume::pull(&session, request.into_inner()).await;
        Ok(Response::new(Box::pin(tokio_stream::iter(
            responses.into_iter().map(Ok),
        ))))
    }

    async fn update_offset(
        &self,
        request: Request<pb::UpdateOffsetRequest>,
    ) -> Answer<pb::UpdateOffsetResponse> {
        let session = self.session(&request)?;
        let status = consume::update_offset(&session, request.into_inner()).await;
        Ok(Response::new(pb::UpdateOffsetResponse { status }))
    }

    async fn get_offset(
        &self,
        request: Request<pb::GetOffsetRequest>,
    ) -> Answer<pb::GetOffsetResponse> {
        let session = self.session(&request)?;
        let (status, offset) = consume::get_offset(&session, request.into_inner()).await;
        Ok(Response::new(pb::GetOffsetResponse { status, offset }))
    }

    async fn query_offset(
        &self,
        request: Request<pb::QueryOffsetRequest>,
    ) -> Answer<pb::QueryOffsetResponse> {
        let session = self.session(&request)?;
        let (status, offset) = consume::query_offset(&session, request.into_inner()).await;
        Ok(Response::new(pb::QueryOffsetResponse { status, offset }))
    }

    async fn end_transaction(
        &self,
        request: Request<pb::EndTransactionRequest>,
    ) -> Answer<pb::EndTransactionResponse> {
        let session = self.session(&request)?;
        let request = request.into_inner();
        let status = self.end(&session, request).await;
        Ok(Response::new(pb::EndTransactionResponse { status }))
    }

    type TelemetryStream = Streamed<pb::TelemetryCommand>;

    async fn telemetry(
        &self,
        request: Request<tonic::Streaming<pb::TelemetryCommand>>,
    ) -> Answer<Self::TelemetryStream> {
        let session = self.session(&request)?;
        let commands = telemetry::open(self, session, request.into_inner());
        Ok(Response::new(Box::pin(commands)))
    }

    async fn notify_client_termination(
        &self,
        request: Request<pb::NotifyClientTerminationRequest>,
    ) -> Answer<pb::NotifyClientTerminationResponse> {
        let session = self.session(&request)?;
        self.sessions.end(&session.client_id);
        Ok(Response::new(pb::NotifyClientTerminationResponse {
            status: ok(),
        }))
    }

    async fn change_invisible_duration(
        &self,
        request: Request<pb::ChangeInvisibleDurationRequest>,
    ) -> Answer<pb::ChangeInvisibleDurationResponse> {
        let session = self.session(&request)?;
        Ok(Response::new(
            consume::change_invisible_duration(&session, request.into_inner()).await,
        ))
    }

    async fn recall_message(
        &self,
        request: Request<pb::RecallMessageRequest>,
    ) -> Answer<pb::RecallMessageResponse> {
        let _session = self.session(&request)?;
        Ok(Response::new(pb::RecallMessageResponse {
            status: status(
                Code::Unsupported,
                "recalling a delayed message is not supported yet",
            ),
            message_id: String::new(),
        }))
    }
}

impl Messaging {
    /// END_TRANSACTION for a half message this service sent, or one the broker asked about.
    async fn end(
        &self,
        session: &Session,
        request: pb::EndTransactionRequest,
    ) -> Option<pb::Status> {
        let Some(half) = session.half(&request.transaction_id) else {
            let message = format!(
                "no half message with transaction id {}",
                request.transaction_id
            );
            return status(Code::InvalidTransactionId, message);
        };
        let commit_or_rollback = match pb::TransactionResolution::try_from(request.resolution) {
            Ok(pb::TransactionResolution::Commit) => {
                quiver_wire::message::sys_flag::TRANSACTION_COMMIT
            }
            Ok(pb::TransactionResolution::Rollback) => {
                quiver_wire::message::sys_flag::TRANSACTION_ROLLBACK
            }
            _ => {
                return status(
                    Code::BadRequest,
                    "the resolution is neither COMMIT nor ROLLBACK",
                )
            }
        };
        let header = EndTransactionRequestHeader {
            producer_group: half.producer_group,
            tran_state_table_offset: half.queue_offset,
            commit_log_offset: half.commit_log_offset,
            commit_or_rollback,
            from_transaction_check: Some(
                request.source == pb::TransactionSource::SourceServerCheck as i32,
            ),
            msg_id: if request.message_id.is_empty() {
                half.message_id
            } else {
                request.message_id
            },
            transaction_id: Some(request.transaction_id.clone()),
            topic: Some(half.topic),
        };
        let answer = session
            .call(convert::request(
                request_code::END_TRANSACTION,
                header.to_ext(),
            ))
            .await;
        match answer {
            Ok(answer) if answer.code == response_code::SUCCESS => {
                session.forget_half(&request.transaction_id);
                ok()
            }
            Ok(answer) => status_of(&answer),
            Err(refused) => refused_status(refused),
        }
    }
}
