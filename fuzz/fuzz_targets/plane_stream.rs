//! The `plane_stream` fuzz target: see `switchyard::fuzzing::planes::plane_stream`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::fuzzing::planes::plane_stream(data));
