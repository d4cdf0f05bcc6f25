//! The gRPC port's keys (`grpc/`): where it listens, its TLS identity, how many clients it
//! serves. Keys of `KEYS`, after the others in the order GET_BROKER_CONFIG prints them (see
//! `keys.rs`).

use super::*;

pub(in crate::config) static GRPC: &[Key] = &[
    Key {
        name: "grpcServerPort",
        aliases: &[],
        group: Group::Network,
        default: "8081",
        follows: Some("8081, or a free port with `listenPort=0`"),
        doc: "Where RocketMQ 5's gRPC clients reach the broker (what `rocketmq-proxy` serves on \
              8081), TLS and plaintext on the one port; `0` picks a free one. Left unset, a \
              port already taken is reported and gRPC is not served; a port set here and taken \
              stops the start.",
        live: None,
        read: |reading, field| {
            let port = field.number(0, 65_535)?;
            reading.config.grpc_port = Some(port);
            Ok(())
        },
        print: |printing| printing.config.grpc_bind_port().to_string(),
    },
    Key {
        name: "tls.server.certPath",
        aliases: &[],
        group: Group::Network,
        default: "",
        follows: None,
        doc: "The PEM certificate chain the gRPC port presents to TLS clients; unset, the broker \
              makes a self-signed certificate for `localhost` and `brokerIP1` at each start.",
        live: None,
        read: |reading, field| {
            // Empty, as an unset one prints: unset.
            reading.config.tls_cert_path = match field.value {
                "" => None,
                _ => Some(field.path()?),
            };
            Ok(())
        },
        print: |printing| {
            printing
                .config
                .tls_cert_path
                .as_deref()
                .map(Printing::path)
                .unwrap_or_default()
        },
    },
    Key {
        name: "tls.server.keyPath",
        aliases: &[],
        group: Group::Network,
        default: "",
        follows: None,
        doc: "The PEM private key (PKCS#8, PKCS#1 or SEC1) of `tls.server.certPath`.",
        live: None,
        read: |reading, field| {
            // Empty, as an unset one prints: unset.
            reading.config.tls_key_path = match field.value {
                "" => None,
                _ => Some(field.path()?),
            };
            Ok(())
        },
        print: |printing| {
            printing
                .config
                .tls_key_path
                .as_deref()
                .map(Printing::path)
                .unwrap_or_default()
        },
    },
    Key {
        name: crate::config::GRPC_CLIENTS_MAX_KEY,
        aliases: &[],
        group: Group::Limits,
        default: "10000",
        follows: None,
        doc: "The most gRPC clients (client ids) the gRPC port serves at once, each with the \
              in-flight requests and byte budget of a connection; a call from a new one past it \
              is refused RESOURCE_EXHAUSTED naming this key. A client silent for 2 minutes with \
              no telemetry stream open is let go.",
        live: None,
        read: |reading, field| {
            field
                .number(1, 1_000_000)
                .map(|clients| reading.config.grpc_clients_max = clients)
        },
        print: |printing| printing.config.grpc_clients_max.to_string(),
    },
];
