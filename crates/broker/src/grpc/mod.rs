//! RocketMQ 5's gRPC clients, served by the broker itself: the `apache.rocketmq.v2`
//! MessagingService that Apache RocketMQ serves from a separate proxy process. Each call becomes
//! the remoting request a proxy would send, handled by the one handler table through a
//! connection of the client's own (`session.rs`), so both protocols share topics, groups,
//! offsets, pop state and transactions, and `mqadmin` lists gRPC clients among the connections.
//!
//! One port takes TLS and plaintext (HTTP/2 with prior knowledge), told apart by the first
//! byte, as the proxy does (`tls.rs`).

mod convert;
mod service;
mod session;
mod tls;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use quiver_proto::v2::messaging_service_server::MessagingServiceServer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::server::TlsStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::state::Broker;

/// How long a new connection may take to send its first byte and finish a TLS handshake.
const HANDSHAKE_MS: u64 = 10_000;
/// Streams one HTTP/2 connection may have open at once (calls in progress, receives parked).
const STREAMS_PER_CONNECTION_MAX: u32 = 256;
/// Connections handshaken and not yet taken by the server.
const ACCEPTED_QUEUE: usize = 64;

pub use session::Sessions;

/// Serves gRPC clients on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    let acceptor = tls::acceptor(broker.serving().config)?;
    let config = broker.serving().config;
    let message_bytes_max = config.max_message_bytes + 64 * 1024;
    let permits = Arc::new(Semaphore::new(config.connections_max));
    let sessions = Arc::new(Sessions::new(broker.clone()));
    let service = service::Messaging::new(broker.clone(), sessions.clone());
    let server = MessagingServiceServer::new(service)
        .max_decoding_message_size(message_bytes_max)
        .max_encoding_message_size(usize::MAX);
    let (accepted, incoming) = mpsc::channel(ACCEPTED_QUEUE);
    let accepting = tokio::spawn(accept(
        listener,
        acceptor,
        permits,
        accepted,
        shutdown.clone(),
    ));
    let sweeping = tokio::spawn(session::sweep(sessions.clone(), shutdown.clone()));
    let stopped = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    let served = tonic::transport::Server::builder()
        .max_concurrent_streams(STREAMS_PER_CONNECTION_MAX)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .add_service(server)
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::ReceiverStream::new(incoming),
            stopped,
        )
        .await;
    accepting.abort();
    sweeping.abort();
    sessions.end_all();
    served.map_err(|e| format!("the gRPC server failed: {e}"))
}

/// Accepts connections, tells TLS from plaintext by the first byte, and hands them to the
/// server; at most `connectionsMax` at once.
async fn accept(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    permits: Arc<Semaphore>,
    accepted: mpsc::Sender<std::io::Result<Io>>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted_now = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => return,
            result = listener.accept() => result,
        };
        let (stream, peer) = match accepted_now {
            Ok(pair) => pair,
            Err(error) => {
                tracing::warn!(%error, "gRPC accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "gRPC connection refused: connectionsMax connections open");
            continue;
        };
        let (acceptor, accepted) = (acceptor.clone(), accepted.clone());
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(
                Duration::from_millis(HANDSHAKE_MS),
                handshake(stream, peer, &acceptor),
            );
            match handshake.await {
                Ok(Ok(stream)) => {
                    let io = Io {
                        stream,
                        peer,
                        _permit: permit,
                    };
                    let _ = accepted.send(Ok(io)).await;
                }
                Ok(Err(error)) => tracing::debug!(%peer, %error, "gRPC handshake failed"),
                Err(_) => tracing::debug!(%peer, "gRPC connection sent nothing in time"),
            }
        });
    }
}

async fn handshake(
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: &tokio_rustls::TlsAcceptor,
) -> std::io::Result<Stream> {
    stream.set_nodelay(true)?;
    let mut first = [0u8; 1];
    if stream.peek(&mut first).await? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("{peer} closed before sending anything"),
        ));
    }
    if first[0] == tls::TLS_HANDSHAKE_RECORD {
        Ok(Stream::Tls(Box::new(acceptor.accept(stream).await?)))
    } else {
        Ok(Stream::Plain(stream))
    }
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A client connection as the gRPC server sees it: plaintext or TLS, with its peer and its
/// place among `connectionsMax`.
struct Io {
    stream: Stream,
    peer: SocketAddr,
    _permit: OwnedSemaphorePermit,
}

impl Connected for Io {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        let local = match &self.stream {
            Stream::Plain(stream) => stream.local_addr().ok(),
            Stream::Tls(stream) => stream.get_ref().0.local_addr().ok(),
        };
        TcpConnectInfo {
            local_addr: local,
            remote_addr: Some(self.peer),
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(stream) => stream.is_write_vectored(),
            Stream::Tls(stream) => stream.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}
