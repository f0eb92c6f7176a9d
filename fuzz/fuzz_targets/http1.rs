//! The `http1` fuzz target: see `switchyard::fuzzing::edge::http1`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::fuzzing::edge::http1(data));
