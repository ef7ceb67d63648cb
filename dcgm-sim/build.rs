//! Gives the cdylib the SONAME of the real library and puts `libdcgm.so.4` / `libdcgm.so`
//! symlinks to it in the profile directory, so that `LD_LIBRARY_PATH=target/<profile>`
//! makes an unmodified client's `dlopen("libdcgm.so.4")` (go-dcgm, DCGM's Python bindings,
//! dcgm-sys) load the simulator.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libdcgm.so.4");
    if let Err(e) = make_links() {
        // Not fatal: the library itself still builds and can be loaded by its own name.
        println!("cargo:warning=dcgm-sim: cannot create the libdcgm.so.4 symlinks: {e}");
    }
}

fn make_links() -> Result<(), String> {
    let out_dir = std::env::var("OUT_DIR").map_err(|e| format!("OUT_DIR: {e}"))?;
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    let profile_dir = Path::new(&out_dir)
        .ancestors()
        .nth(3)
        .ok_or_else(|| format!("OUT_DIR {out_dir} is not inside a cargo target directory"))?;
    for name in ["libdcgm.so.4", "libdcgm.so"] {
        let link = profile_dir.join(name);
        if std::fs::symlink_metadata(&link).is_ok() {
            std::fs::remove_file(&link).map_err(|e| format!("{}: {e}", link.display()))?;
        }
        // Into deps/: `cargo test` rebuilds the cdylib there without refreshing the copy
        // that `cargo build` puts in the profile directory, so only deps/ always holds the
        // latest build. Relative, so the target directory can be moved or mounted elsewhere.
        std::os::unix::fs::symlink("deps/libdcgm_sim.so", &link)
            .map_err(|e| format!("{}: {e}", link.display()))?;
    }
    Ok(())
}
