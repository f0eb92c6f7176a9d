//! The `chat_template` fuzz target: see `switchyard::fuzzing::control::chat_template`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::fuzzing::control::chat_template(data));
