#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quiver_broker::fuzzing::ha_autoswitch_stream(data));
