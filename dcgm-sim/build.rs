//! Gives the cdylib the SONAME of the real library and puts `libdcgm.so.4` / `libdcgm.so`
//! symlinks to it in the profile directory, so that `LD_LIBRARY_PATH=target/<profile>`
//! makes an unmodified client's `dlopen("libdcgm.so.4")` (go-dcgm, DCGM's Python bindings,
//! dcgm-sys) load the simulator.

#![forbid(unsafe_code)]

include!("build_links.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build_links.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libdcgm.so.4");
    if let Err(e) = make_links("libdcgm_sim.so", &["libdcgm.so.4", "libdcgm.so"]) {
        // Not fatal: the library itself still builds and can be loaded by its own name.
        println!("cargo:warning=dcgm-sim: cannot create the libdcgm.so.4 symlinks: {e}");
    }
}
