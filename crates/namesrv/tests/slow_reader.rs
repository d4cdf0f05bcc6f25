//! A client that sends requests and never reads the answers must not hold a connection slot
//! (or the answers) forever.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use quiver_namesrv::{run, NamesrvConfig};
use quiver_wire::code::{request_code, response_code};
use quiver_wire::{decode_frame, encode_frame, Command, Encoding};

fn topic_list_request(opaque: i32) -> Command {
    let mut request = Command::request(
        request_code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        Encoding::Json,
    );
    request.opaque = opaque;
    request
}

#[test]
fn a_connection_whose_answers_go_unread_is_closed_and_frees_its_slot() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let config = NamesrvConfig {
        connections_max: 1,
        idle_timeout_ms: 500,
        ..NamesrvConfig::default()
    };
    runtime.spawn(run(listener, config, stopped));

    // Far more answers than the socket buffers hold, and nothing read.
    let mut requests = BytesMut::new();
    for opaque in 0..400_000 {
        encode_frame(&topic_list_request(opaque), &mut requests).unwrap();
    }
    let mut silent = TcpStream::connect(addr).unwrap();
    silent
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Fails once the server gives up on the connection, or blocks until the timeout.
    let _ = silent.write_all(&requests);

    // The one slot is free again: a new connection is served.
    let mut frame = BytesMut::new();
    encode_frame(&topic_list_request(1), &mut frame).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut client = TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        client.write_all(&frame).unwrap();
        let mut input = BytesMut::new();
        let mut buffer = [0u8; 4096];
        let answered = loop {
            match client.read(&mut buffer) {
                Ok(0) | Err(_) => break None,
                Ok(read) => {
                    input.extend_from_slice(&buffer[..read]);
                    if let Some(response) = decode_frame(&mut input).unwrap() {
                        break Some(response);
                    }
                }
            }
        };
        if let Some(response) = answered {
            assert_eq!(response.code, response_code::SUCCESS);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled connection still holds the only slot"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(silent);
}
