//! The release binary's text laid out by use (`build/symbol_order.rs`): the build script
//! asks lld for it only where lld is the linker, and the list it hands over is one lld can
//! read. What it buys (the NVML backend's RSS) is measured in `bench backend`.

#[path = "../build/symbol_order.rs"]
mod symbol_order;

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_list_names_symbols_once_each_in_order() {
    let text = std::fs::read_to_string(root().join(symbol_order::LIST)).unwrap();
    let names: Vec<&str> = text.lines().collect();
    assert!(
        names.len() > 500,
        "{} names: a list from a real run has over a thousand",
        names.len()
    );
    // Rust's mangled names, and a few C ones (main, compiler builtins) the binary carries.
    for (i, name) in names.iter().enumerate() {
        let symbol = name.starts_with(|c: char| c == '_' || c.is_ascii_alphabetic())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_$.".contains(c));
        assert!(symbol, "line {}: {name:?} is not a symbol's name", i + 1);
    }
    let rust = names
        .iter()
        .filter(|n| n.starts_with("_R") || n.starts_with("_ZN"));
    assert!(
        rust.count() * 10 > names.len() * 9,
        "mostly Rust's functions"
    );
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, names, "the list is sorted and has no repeated name");
}

/// A fake rustc that says it is `release`.
fn fake_rustc(dir: &Path, release: &str) -> PathBuf {
    let path = dir.join(format!("rustc-{release}"));
    std::fs::write(
        &path,
        format!("#!/bin/sh\necho 'rustc {release}'\necho 'release: {release}'\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

// One test: the cases share the process's environment, which is what the build script reads.
#[test]
fn ordering_is_asked_of_lld_only() {
    let dir = tempfile::tempdir().unwrap();
    let set = |k: &str, v: &str| std::env::set_var(k, v);
    let lld = |why: &str| {
        set("TARGET", "x86_64-unknown-linux-gnu");
        set("CARGO_MANIFEST_DIR", root().to_str().unwrap());
        set("RUSTC", fake_rustc(dir.path(), "1.95.0").to_str().unwrap());
        for k in [
            "DCGM_EXPORTER_SYMBOL_ORDER",
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
            "CARGO_ENCODED_RUSTFLAGS",
        ] {
            std::env::remove_var(k);
        }
        let args = symbol_order::link_args().unwrap_or_else(|e| panic!("{why}: {e}"));
        let list = root().join(symbol_order::LIST);
        assert_eq!(
            args,
            [
                format!("-Wl,--symbol-ordering-file={}", list.display()),
                "-Wl,--no-warn-symbol-ordering".to_string()
            ],
            "{why}"
        );
    };
    let refused = |what: &str, wanted: &str| {
        let e = symbol_order::link_args().expect_err(what);
        assert!(e.contains(wanted), "{what}: {e:?} should say {wanted:?}");
    };

    lld("rustc 1.95 on x86_64 Linux links with its lld");
    set("RUSTC", fake_rustc(dir.path(), "1.90.0").to_str().unwrap());
    assert!(
        symbol_order::link_args().is_ok(),
        "1.90 is the first with lld"
    );

    lld("");
    set("RUSTC", fake_rustc(dir.path(), "1.89.0").to_str().unwrap());
    refused("rustc 1.89 links with the system's ld", "rustc 1.89");
    set("RUSTC", dir.path().join("no-such-rustc").to_str().unwrap());
    refused("a rustc that cannot be asked", "unknown");

    lld("");
    set("TARGET", "aarch64-unknown-linux-gnu");
    refused("another target", "aarch64");

    lld("");
    set(
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
        "/usr/bin/cc",
    );
    refused("a configured linker", "linker");

    lld("");
    set("CARGO_ENCODED_RUSTFLAGS", "-C\x1flink-arg=-fuse-ld=bfd");
    refused("RUSTFLAGS that choose GNU ld", "RUSTFLAGS");

    lld("");
    set("DCGM_EXPORTER_SYMBOL_ORDER", "0");
    refused("turned off", "DCGM_EXPORTER_SYMBOL_ORDER=0");

    lld("");
    set("CARGO_MANIFEST_DIR", dir.path().to_str().unwrap());
    refused("a checkout without the list", "missing");
}
