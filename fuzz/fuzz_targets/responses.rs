//! The `responses` fuzz target: see `switchyard::fuzzing::apis::responses`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::fuzzing::apis::responses(data));
