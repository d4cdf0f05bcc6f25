#![no_main]

//! Feeds arbitrary bytes to the frame decoder as a connection would, and every decoded body to
//! the stored-message and batch decoders. None of them may panic or reserve past one frame.

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use quiver_wire::{decode_batch, decode_frame, StoredMessage, FRAME_BYTES_MAX};

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(cmd)) = decode_frame(&mut buf) {
        let _ = StoredMessage::decode_all(&cmd.body);
        let _ = decode_batch(&cmd.body);
    }
    assert!(buf.capacity() <= FRAME_BYTES_MAX.max(data.len()));

    // Bodies reach these decoders only inside frames above; call them directly too so the
    // fuzzer can explore them without first building a valid frame.
    let _ = StoredMessage::decode_all(data);
    let _ = decode_batch(data);
});
