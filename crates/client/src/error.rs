//! What can go wrong talking to name servers and brokers.

use quiver_wire::code::response_code;
use quiver_wire::FrameError;

/// Response codes after which Java's producer tries another broker.
pub const RETRY_CODES: [i32; 8] = [
    response_code::TOPIC_NOT_EXIST,
    response_code::SERVICE_NOT_AVAILABLE,
    response_code::SYSTEM_ERROR,
    response_code::SYSTEM_BUSY,
    response_code::NO_PERMISSION,
    response_code::NO_BUYER_ID,
    response_code::NOT_IN_CURRENT_UNIT,
    response_code::GO_AWAY,
];

/// Errors of a single request and of the operations built on requests.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {addr}: {message}")]
    Connect { addr: String, message: String },
    #[error("connecting to {addr} took longer than {timeout_ms} ms")]
    ConnectTimeout { addr: String, timeout_ms: u64 },
    #[error("connection to {addr} closed")]
    ConnectionClosed { addr: String },
    #[error("request {code} to {addr} got no response within {timeout_ms} ms")]
    Timeout {
        addr: String,
        code: i32,
        timeout_ms: u64,
    },
    #[error("cannot encode request {code}: {source}")]
    Encode { code: i32, source: FrameError },
    #[error("{addr} answered request {request_code} with code {code}: {remark}")]
    Refused {
        addr: String,
        request_code: i32,
        code: i32,
        remark: String,
    },
    #[error("bad response from {addr}: {reason}")]
    BadResponse { addr: String, reason: String },
    #[error("no name server configured")]
    NoNamesrv,
    #[error("no name server answered for topic {topic}: {last_error}")]
    NamesrvUnreachable { topic: String, last_error: String },
    #[error("topic {topic} does not exist")]
    TopicNotFound { topic: String },
    #[error("topic {topic} has no {what} queue on any broker with a master")]
    NoQueue { topic: String, what: &'static str },
    #[error("broker {broker_name} has no master address in the route")]
    NoBrokerAddr { broker_name: String },
    #[error("the client was shut down")]
    Shutdown,
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl ClientError {
    pub(crate) fn bad_response(addr: &str, reason: impl ToString) -> ClientError {
        ClientError::BadResponse {
            addr: addr.to_owned(),
            reason: reason.to_string(),
        }
    }

    /// Whether the producer may try the send again on another broker or queue: transport
    /// failures and the response codes Java's producer retries.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Connect { .. }
            | ClientError::ConnectTimeout { .. }
            | ClientError::ConnectionClosed { .. }
            | ClientError::Timeout { .. }
            | ClientError::NoBrokerAddr { .. } => true,
            ClientError::Refused { code, .. } => RETRY_CODES.contains(code),
            _ => false,
        }
    }
}
