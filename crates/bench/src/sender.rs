//! A producer of either protocol the bench speaks: remoting or gRPC.

use quiver_client::{ClientError, GrpcProducer, Message, Producer, SendResult};

/// A producer of either protocol.
#[derive(Clone)]
pub(crate) enum Sender {
    Remoting(Producer),
    Grpc(Box<GrpcProducer>),
}

impl Sender {
    pub(crate) async fn send(&self, message: &Message) -> Result<SendResult, ClientError> {
        match self {
            Sender::Remoting(producer) => producer.send(message).await,
            Sender::Grpc(producer) => producer.send(message).await,
        }
    }

    /// One request for `batch`; `measure` refuses batches over gRPC before any is sent.
    pub(crate) async fn send_batch(&self, batch: &[Message]) -> Result<SendResult, ClientError> {
        match self {
            Sender::Remoting(producer) => producer.send_batch(batch).await,
            Sender::Grpc(producer) => match batch {
                [message] => producer.send(message).await,
                _ => unreachable!("batches over gRPC are refused at the start"),
            },
        }
    }

    pub(crate) async fn shutdown(&self) {
        if let Sender::Remoting(producer) = self {
            producer.shutdown().await;
        }
    }
}
