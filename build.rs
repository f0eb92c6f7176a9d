//! Generates the KServe v2 / Triton protobuf messages (`proto/`) with prost. The .proto files
//! are parsed by protox (pure Rust), so a build needs no system `protoc`.

fn main() {
    println!("cargo:rerun-if-changed=proto/grpc_service.proto");
    println!("cargo:rerun-if-changed=proto/model_config.proto");
    let fds = protox::compile(["grpc_service.proto"], ["proto"]).expect("parse proto/grpc_service.proto");
    prost_build::Config::new().compile_fds(fds).expect("generate the KServe messages");
}
