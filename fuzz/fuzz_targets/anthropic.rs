//! The `anthropic` fuzz target: see `switchyard::fuzzing::apis::anthropic`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::fuzzing::apis::anthropic(data));
