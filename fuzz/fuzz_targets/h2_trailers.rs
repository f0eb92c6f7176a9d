//! The `h2_trailers` fuzz target: see `switchyard::fuzzing::edge::h2_trailers`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::fuzzing::edge::h2_trailers(data));
