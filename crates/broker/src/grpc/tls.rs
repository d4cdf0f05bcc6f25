//! The gRPC port's TLS: the configured certificate and key, or a self-signed certificate made
//! at start, offered with ALPN `h2` (gRPC clients ask for it), beside plaintext on the same port.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::BrokerConfig;

/// The first byte of a TLS connection: a handshake record. gRPC's plaintext HTTP/2 starts with
/// the preface `PRI * HTTP/2.0`.
pub const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The acceptor for the gRPC port's TLS connections.
pub fn acceptor(config: &BrokerConfig) -> Result<TlsAcceptor, String> {
    let (chain, key) = match (&config.tls_cert_path, &config.tls_key_path) {
        (Some(cert), Some(key)) => (read_chain(cert)?, read_key(key)?),
        (None, None) => self_signed(config)?,
        _ => {
            return Err(
                "tls.server.certPath and tls.server.keyPath go together: set both or neither"
                    .into(),
            )
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS protocol versions: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("the TLS certificate and key do not make a server identity: {e}"))?;
    server.alpn_protocols = vec![b"h2".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(server)))
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("tls.server.certPath {}: {e}", path.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "tls.server.certPath {}: no certificate in the file",
            path.display()
        ));
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("tls.server.keyPath {}: {e}", path.display()))
}

/// A certificate for `localhost`, 127.0.0.1 and the broker's address, signed by its own key:
/// RocketMQ's gRPC clients do not check the server's certificate unless told to.
fn self_signed(
    config: &BrokerConfig,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let own = config.broker_ip.to_string();
    if !names.contains(&own) {
        names.push(own);
    }
    let made = rcgen::generate_simple_self_signed(names)
        .map_err(|e| format!("cannot make a self-signed certificate: {e}"))?;
    let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
        .map_err(|e| format!("the self-signed certificate's key: {e}"))?;
    Ok((vec![made.cert.der().clone()], key))
}
