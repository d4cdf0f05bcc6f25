#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quiver_broker::fuzzing::sql92(data));
