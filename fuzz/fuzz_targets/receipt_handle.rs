#![no_main]

//! Feeds arbitrary text to the pop receipt handle parser, as an ACK_MESSAGE's `extraInfo` or a
//! popped message's POP_CK reaches it. It may not panic, and a handle it accepts must encode back
//! to a handle that parses to the same value.

use libfuzzer_sys::fuzz_target;
use quiver_wire::ReceiptHandle;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(handle) = ReceiptHandle::parse(text) {
        assert_eq!(ReceiptHandle::parse(&handle.encode()), Ok(handle));
    }
});
