//! The `openai` fuzz target: see `switchyard::fuzzing::apis::openai`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::fuzzing::apis::openai(data));
