//! The `kserve_grpc` fuzz target: see `switchyard::fuzzing::edge::kserve_grpc`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchyard::fuzzing::edge::kserve_grpc(data));
