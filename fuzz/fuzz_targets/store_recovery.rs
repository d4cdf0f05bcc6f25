#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quiver_fuzz::store_recovery(data));
