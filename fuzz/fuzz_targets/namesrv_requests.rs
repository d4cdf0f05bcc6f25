#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quiver_namesrv::fuzzing::requests(data));
