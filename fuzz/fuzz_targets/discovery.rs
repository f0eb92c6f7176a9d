//! The `discovery` fuzz target: see `switchyard::fuzzing::control::discovery`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::fuzzing::control::discovery(data));
