//! Generates the kubelet PodResources client and server (the server serves the test suite's
//! fake kubelet) from `proto/podresources.proto`. protox parses the file in pure Rust, so a
//! clean clone builds without protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/podresources.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
