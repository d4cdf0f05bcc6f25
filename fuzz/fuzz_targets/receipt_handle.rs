#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quiver_wire::fuzzing::receipt_handle(data));
