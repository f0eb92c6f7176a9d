//! The `kv_events` fuzz target: see `switchyard::fuzzing::planes::kv_events`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::fuzzing::planes::kv_events(data));
