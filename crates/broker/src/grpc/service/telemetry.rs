//! The telemetry stream: the client's settings in, the broker's settings and commands out; and
//! the heartbeat the client's settings make.

use std::sync::Arc;

use quiver_proto::v2::{self as pb, ClientType};
use quiver_wire::body::{
    ConsumerData, HeartbeatData, ProducerData, SubscriptionData, SubscriptionGroupConfig,
};
use quiver_wire::java_string_hash;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::Status;

use super::super::convert::{self, ok};
use super::super::session::Session;
use super::{group_config, Messaging};

/// Commands the broker may have waiting for a client that reads its telemetry stream slowly;
/// past it the next is dropped (a transaction check is asked again later).
const TELEMETRY_QUEUED_MAX: usize = 64;
/// What the broker tells consumers of their receives.
const RECEIVE_BATCH_SIZE: i32 = 32;
const LONG_POLLING_TIMEOUT_MS: i64 = 20_000;
/// What it tells producers of their retries: RocketMQ's proxy defaults.
const PRODUCER_ATTEMPTS: i32 = 3;
const PRODUCER_BACKOFF_INITIAL_MS: i64 = 10;
const PRODUCER_BACKOFF_MAX_MS: i64 = 1_000;
const REQUEST_TIMEOUT_MS: i64 = 3_000;

/// Opens the client's telemetry stream: its settings are answered with the broker's, and the
/// stream stays open for the broker's commands until the client closes it.
pub fn open(
    messaging: &Messaging,
    session: Arc<Session>,
    mut inbound: tonic::Streaming<pb::TelemetryCommand>,
) -> ReceiverStream<Result<pb::TelemetryCommand, Status>> {
    let (sender, receiver) = mpsc::channel(TELEMETRY_QUEUED_MAX);
    session.set_telemetry(sender.clone());
    let delay_levels_ms = messaging.broker.serving().config.delay_levels_ms.clone();
    let max_body_size = messaging.broker.serving().config.max_message_bytes;
    tokio::spawn(async move {
        while let Some(Ok(command)) = inbound.next().await {
            let Some(pb::telemetry_command::Command::Settings(settings)) = command.command else {
                // Answers to the broker's commands (thread stacks, verifications): none is
                // asked for yet.
                continue;
            };
            let group = subscription_group(&settings);
            let group_config = match &group {
                Some(group) => Some(group_config(&session, group).await),
                None => None,
            };
            let answer = Answers {
                delay_levels_ms: &delay_levels_ms,
                max_body_size,
            }
            .settings(settings, group_config.as_ref());
            // Kept as the broker answered them: what it told the client (FIFO, say) is what
            // its receives follow.
            session.set_settings(answer.clone());
            let reply = pb::TelemetryCommand {
                status: ok(),
                command: Some(pb::telemetry_command::Command::Settings(answer)),
            };
            if sender.send(Ok(reply)).await.is_err() {
                break;
            }
        }
        session.telemetry_ended(&sender);
    });
    ReceiverStream::new(receiver)
}

fn subscription_group(settings: &pb::Settings) -> Option<String> {
    match &settings.pub_sub {
        Some(pb::settings::PubSub::Subscription(subscription)) => {
            subscription.group.as_ref().map(|g| g.name.clone())
        }
        _ => None,
    }
}

/// What the broker answers a client's settings with.
struct Answers<'a> {
    delay_levels_ms: &'a [u64],
    max_body_size: usize,
}

impl Answers<'_> {
    fn settings(
        &self,
        client: pb::Settings,
        group: Option<&SubscriptionGroupConfig>,
    ) -> pb::Settings {
        let request_timeout = client
            .request_timeout
            .or(Some(convert::duration(REQUEST_TIMEOUT_MS)));
        let (backoff_policy, pub_sub) = match client.pub_sub {
            Some(pb::settings::PubSub::Subscription(subscription)) => {
                let group = group.cloned().unwrap_or_default();
                let fifo = group.consume_message_orderly;
                let backoff = self.consumer_backoff(&group, fifo);
                let subscription = pb::Subscription {
                    group: subscription.group,
                    subscriptions: subscription.subscriptions,
                    fifo: Some(fifo),
                    receive_batch_size: Some(RECEIVE_BATCH_SIZE),
                    long_polling_timeout: Some(convert::duration(LONG_POLLING_TIMEOUT_MS)),
                };
                (
                    backoff,
                    Some(pb::settings::PubSub::Subscription(subscription)),
                )
            }
            Some(pb::settings::PubSub::Publishing(publishing)) => {
                let publishing = pb::Publishing {
                    topics: publishing.topics,
                    max_body_size: i32::try_from(self.max_body_size).unwrap_or(i32::MAX),
                    validate_message_type: true,
                };
                (
                    producer_backoff(),
                    Some(pb::settings::PubSub::Publishing(publishing)),
                )
            }
            None => (producer_backoff(), None),
        };
        pb::Settings {
            client_type: client.client_type,
            access_point: client.access_point,
            backoff_policy: Some(backoff_policy),
            request_timeout,
            pub_sub,
            user_agent: client.user_agent,
            metric: Some(pb::Metric {
                on: false,
                endpoints: None,
            }),
            client_properties: client.client_properties,
        }
    }

    /// A consumer's redeliveries: the group's retry count, and the broker's delay levels (1 s,
    /// 5 s, 10 s, ... by default) for a concurrent group, as the proxy gives them; one second
    /// apart, doubling, for an ordered one, which the client retries itself.
    fn consumer_backoff(&self, group: &SubscriptionGroupConfig, fifo: bool) -> pb::RetryPolicy {
        let max_attempts = group.retry_max_times.saturating_add(1).max(1);
        let strategy = if fifo {
            pb::retry_policy::Strategy::ExponentialBackoff(pb::ExponentialBackoff {
                initial: Some(convert::duration(1_000)),
                max: Some(convert::duration(60_000)),
                multiplier: 2.0,
            })
        } else {
            let next = self
                .delay_levels_ms
                .iter()
                .map(|&ms| convert::duration(i64::try_from(ms).unwrap_or(i64::MAX)))
                .collect();
            pb::retry_policy::Strategy::CustomizedBackoff(pb::CustomizedBackoff { next })
        };
        pb::RetryPolicy {
            max_attempts,
            strategy: Some(strategy),
        }
    }
}

fn producer_backoff() -> pb::RetryPolicy {
    pb::RetryPolicy {
        max_attempts: PRODUCER_ATTEMPTS,
        strategy: Some(pb::retry_policy::Strategy::ExponentialBackoff(
            pb::ExponentialBackoff {
                initial: Some(convert::duration(PRODUCER_BACKOFF_INITIAL_MS)),
                max: Some(convert::duration(PRODUCER_BACKOFF_MAX_MS)),
                multiplier: 2.0,
            },
        )),
    }
}

/// The HEART_BEAT a remoting client would send for what this client said in its settings: a
/// producer under each topic it publishes to (the proxy's producer group is the topic), a
/// consumer group with its subscriptions.
pub fn heartbeat_data(session: &Session, group: Option<&pb::Resource>) -> HeartbeatData {
    let client = session.client();
    let settings = client.settings.clone().unwrap_or_default();
    let mut data = HeartbeatData {
        client_id: session.client_id.clone(),
        ..HeartbeatData::default()
    };
    match (client.client_type(), settings.pub_sub) {
        (ClientType::Producer, Some(pb::settings::PubSub::Publishing(publishing))) => {
            data.producer_data_set = publishing
                .topics
                .iter()
                .map(|topic| ProducerData {
                    group_name: topic.name.clone(),
                })
                .collect();
        }
        (_, Some(pb::settings::PubSub::Subscription(subscription))) => {
            let name = group
                .map(|g| g.name.clone())
                .or_else(|| subscription.group.map(|g| g.name))
                .unwrap_or_default();
            if !name.is_empty() {
                data.consumer_data_set = vec![ConsumerData {
                    consume_from_where: "CONSUME_FROM_LAST_OFFSET".into(),
                    consume_type: if client.client_type() == ClientType::PushConsumer {
                        "CONSUME_PASSIVELY"
                    } else {
                        "CONSUME_ACTIVELY"
                    }
                    .into(),
                    group_name: name,
                    message_model: "CLUSTERING".into(),
                    subscription_data_set: subscription
                        .subscriptions
                        .iter()
                        .map(subscription_data)
                        .collect(),
                    unit_mode: false,
                }];
            }
        }
        _ => {}
    }
    data
}

fn subscription_data(entry: &pb::SubscriptionEntry) -> SubscriptionData {
    let topic = entry
        .topic
        .as_ref()
        .map(|t| t.name.clone())
        .unwrap_or_default();
    let expression = entry.expression.clone().unwrap_or_default();
    let sql = expression.r#type == pb::FilterType::Sql as i32;
    let text = expression.expression.trim().to_string();
    let tags: Vec<String> = if sql || text.is_empty() || text == "*" {
        Vec::new()
    } else {
        text.split("||")
            .map(str::trim)
            .filter(|tag| !tag.is_empty())
            .map(String::from)
            .collect()
    };
    SubscriptionData {
        class_filter_mode: false,
        code_set: tags.iter().map(|tag| java_string_hash(tag)).collect(),
        expression_type: if sql { "SQL92" } else { "TAG" }.into(),
        sub_string: if text.is_empty() { "*".into() } else { text },
        sub_version: crate::clock::now_ms(),
        tags_set: tags,
        topic,
    }
}
