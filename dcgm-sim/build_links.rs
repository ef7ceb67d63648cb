// Shared by the simulators' build scripts (`include!`d): symlinks in the profile directory
// to a cdylib, so that `LD_LIBRARY_PATH=target/<profile>` makes an unmodified client load it
// under the real library's names.

/// Points each of `names` in `<target>/<profile>/` at `deps/<file>`.
fn make_links(file: &str, names: &[&str]) -> Result<(), String> {
    let out_dir = std::env::var("OUT_DIR").map_err(|e| format!("OUT_DIR: {e}"))?;
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    let profile_dir = std::path::Path::new(&out_dir)
        .ancestors()
        .nth(3)
        .ok_or_else(|| format!("OUT_DIR {out_dir} is not inside a cargo target directory"))?;
    for name in names {
        let link = profile_dir.join(name);
        if std::fs::symlink_metadata(&link).is_ok() {
            std::fs::remove_file(&link).map_err(|e| format!("{}: {e}", link.display()))?;
        }
        // Into deps/: `cargo test` rebuilds the cdylib there without refreshing the copy
        // that `cargo build` puts in the profile directory, so only deps/ always holds the
        // latest build. Relative, so the target directory can be moved or mounted elsewhere.
        std::os::unix::fs::symlink(format!("deps/{file}"), &link)
            .map_err(|e| format!("{}: {e}", link.display()))?;
    }
    Ok(())
}
