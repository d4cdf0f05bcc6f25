//! Compiles the .proto files with protox (no protoc needed) and generates the prost messages and
//! the MessagingService's tonic server and client from them.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/apache/rocketmq/v2/definition.proto",
        "proto/apache/rocketmq/v2/service.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
