//! The fuzz target for what the name server reads from peers: frames as a connection delivers
//! them, each answered through the one table of handlers over one route table, as its
//! connection would be. No answer may panic, and every answer must be one the server can
//! write. `fuzz/` runs it: under cargo-fuzz (nightly, `scripts/fuzz.sh`), and for a bounded
//! time on stable in `cargo test`. Not part of the crate's API.

use std::sync::Mutex;

use bytes::BytesMut;
use quiver_wire::{decode_frame, encode_frame};

use crate::handle::{handle, Call};
use crate::route_table::RouteTable;

/// Frames from one connection, a second apart, then the broker expiry and the connection's end.
pub fn requests(data: &[u8]) {
    let table = Mutex::new(RouteTable::new(120_000));
    let mut buffer = BytesMut::from(data);
    let mut now_ms = 0i64;
    while let Ok(Some(request)) = decode_frame(&mut buffer) {
        now_ms += 1_000;
        let call = Call {
            table: &table,
            connection: 1,
            now_ms,
        };
        let response = handle(&call, &request);
        encode_frame(&response, &mut BytesMut::new()).expect("an answer the server can write");
    }
    let mut table = table.into_inner().expect("no handler panicked");
    table.expire(now_ms + 600_000);
    table.connection_closed(1);
}
