//! Gives the cdylib the SONAME libdcgm.so.4 and puts `libdcgm.so.4` and `libdcgm.so`
//! symlinks next to it, so `LD_LIBRARY_PATH=target/<profile>` makes a plain
//! `dlopen("libdcgm.so.4")` (go-dcgm, DCGM's Python bindings, dcgm-sys) find the simulator.

use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libdcgm.so.4");
    println!("cargo:rerun-if-changed=build.rs");
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else { return };
    // OUT_DIR is target/<profile>/build/dcgm-sim-<hash>/out.
    let Some(profile_dir) = out.ancestors().nth(3) else { return };
    for name in ["libdcgm.so.4", "libdcgm.so"] {
        let link = profile_dir.join(name);
        let _ = std::fs::remove_file(&link);
        if let Err(e) = std::os::unix::fs::symlink("libdcgm_sim.so", &link) {
            println!("cargo:warning=cannot create {}: {e}", link.display());
        }
    }
}
