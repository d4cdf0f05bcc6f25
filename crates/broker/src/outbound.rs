//! Requests the broker sends to name servers. A name server drops a broker whose registration
//! connection closes, so each name server gets one long-lived `Link`, reopened after an error.

use std::time::Duration;

use bytes::BytesMut;
use quiver_wire::{decode_frame, encode_frame, Command, FrameError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("cannot connect to {addr}: {message}")]
    Connect { addr: String, message: String },
    #[error("I/O error talking to {addr}: {message}")]
    Io { addr: String, message: String },
    #[error("{addr} sent a malformed frame: {source}")]
    Frame { addr: String, source: FrameError },
    #[error("{addr} did not answer within {timeout_ms} ms")]
    Timeout { addr: String, timeout_ms: u64 },
    #[error("{addr} closed the connection without answering")]
    Closed { addr: String },
}

pub struct Link {
    pub addr: String,
    stream: Option<TcpStream>,
    input: BytesMut,
    next_opaque: i32,
}

impl Link {
    pub fn new(addr: String) -> Link {
        Link {
            addr,
            stream: None,
            input: BytesMut::new(),
            next_opaque: 1,
        }
    }

    /// Sends `request` (with this link's next opaque) and waits for its response. Any error
    /// closes the connection, so the next call starts on a fresh one.
    pub async fn call(
        &mut self,
        request: Command,
        timeout: Duration,
    ) -> Result<Command, CallError> {
        let timeout_ms = timeout.as_millis() as u64;
        let request = request.with_opaque(self.next_opaque);
        self.next_opaque = self.next_opaque.wrapping_add(1);
        let result = match tokio::time::timeout(timeout, self.exchange(&request)).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Timeout {
                addr: self.addr.clone(),
                timeout_ms,
            }),
        };
        if result.is_err() {
            self.stream = None;
            self.input.clear();
        }
        result
    }

    async fn exchange(&mut self, request: &Command) -> Result<Command, CallError> {
        let addr = self.addr.clone();
        let io = |e: std::io::Error| CallError::Io {
            addr: addr.clone(),
            message: e.to_string(),
        };
        if self.stream.is_none() {
            let stream = TcpStream::connect(&self.addr)
                .await
                .map_err(|e| CallError::Connect {
                    addr: self.addr.clone(),
                    message: e.to_string(),
                })?;
            stream.set_nodelay(true).map_err(io)?;
            self.stream = Some(stream);
        }
        let Some(stream) = self.stream.as_mut() else {
            unreachable!("connected above");
        };
        let mut frame = BytesMut::new();
        encode_frame(request, &mut frame).map_err(|source| CallError::Frame {
            addr: addr.clone(),
            source,
        })?;
        stream.write_all(&frame).await.map_err(io)?;
        loop {
            match decode_frame(&mut self.input) {
                Ok(Some(response))
                    if response.is_response() && response.opaque == request.opaque =>
                {
                    return Ok(response)
                }
                Ok(Some(_)) => continue,
                Ok(None) => {}
                Err(source) => return Err(CallError::Frame { addr, source }),
            }
            if stream.read_buf(&mut self.input).await.map_err(io)? == 0 {
                return Err(CallError::Closed { addr });
            }
        }
    }
}
