//! Gives the cdylib the SONAME of NVIDIA's library and puts `libnvidia-ml.so.1` /
//! `libnvidia-ml.so` symlinks to it in the profile directory, so that
//! `LD_LIBRARY_PATH=target/<profile>` makes an unmodified NVML client (nvml-wrapper,
//! NVIDIA's Python bindings, go-nvml) load the simulator.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg-cdylib=-Wl,-soname,libnvidia-ml.so.1");
    if let Err(e) = make_links() {
        // Not fatal: the library itself still builds and can be loaded by its own name.
        println!("cargo:warning=nvml-sim: cannot create the libnvidia-ml.so.1 symlinks: {e}");
    }
}

fn make_links() -> Result<(), String> {
    let out_dir = std::env::var("OUT_DIR").map_err(|e| format!("OUT_DIR: {e}"))?;
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    let profile_dir = Path::new(&out_dir)
        .ancestors()
        .nth(3)
        .ok_or_else(|| format!("OUT_DIR {out_dir} is not inside a cargo target directory"))?;
    for name in ["libnvidia-ml.so.1", "libnvidia-ml.so"] {
        let link = profile_dir.join(name);
        if std::fs::symlink_metadata(&link).is_ok() {
            std::fs::remove_file(&link).map_err(|e| format!("{}: {e}", link.display()))?;
        }
        // Into deps/, where both `cargo build` and `cargo test` put the latest cdylib
        // (see dcgm-sim/build.rs); relative, so the target directory can move.
        std::os::unix::fs::symlink("deps/libnvml_sim.so", &link)
            .map_err(|e| format!("{}: {e}", link.display()))?;
    }
    Ok(())
}
