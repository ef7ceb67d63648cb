//! Gives the cdylib the SONAME of NVIDIA's library and puts `libnvidia-ml.so.1` /
//! `libnvidia-ml.so` symlinks to it in the profile directory, so that
//! `LD_LIBRARY_PATH=target/<profile>` makes an unmodified NVML client (nvml-wrapper,
//! NVIDIA's Python bindings, go-nvml) load the simulator.

#![forbid(unsafe_code)]

include!("../build_links.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../build_links.rs");
    println!("cargo:rustc-link-arg-cdylib=-Wl,-soname,libnvidia-ml.so.1");
    if let Err(e) = make_links("libnvml_sim.so", &["libnvidia-ml.so.1", "libnvidia-ml.so"]) {
        // Not fatal: the library itself still builds and can be loaded by its own name.
        println!("cargo:warning=nvml-sim: cannot create the libnvidia-ml.so.1 symlinks: {e}");
    }
}
