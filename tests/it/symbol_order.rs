//! The release binary's text laid out by use (`build/symbol_order.rs`): the build script
//! asks for it only where the linker rustc links with is lld (read from rustc's own link
//! line, with the build's target, configured linker and RUSTFLAGS), and the list it hands
//! over is one lld can read. What it buys (the NVML backend's RSS) is measured in
//! `bench backend`.

// The build script's own module, included as it is.
#[path = "../../build/symbol_order.rs"]
mod build_script;

use crate::support::{have_tool, output_within, BUILD, QUICK};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_list_names_symbols_once_each_in_order() {
    let text = std::fs::read_to_string(root().join(build_script::LIST)).unwrap();
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

/// A fake rustc: `-vV` says it is 1.95.0, `--print=link-args` prints `line` and links
/// (fails with `link_error` on stderr where there is one; fails when `line` is empty);
/// every call's arguments are appended to `<dir>/<name>.args`.
fn fake_rustc(dir: &Path, name: &str, line: &str, link_error: Option<&str>) -> PathBuf {
    let path = dir.join(name);
    let args = dir.join(format!("{name}.args"));
    let print = match (line, link_error) {
        ("", _) => "echo 'error: no' >&2; exit 1".to_string(),
        (_, None) => format!("cat <<'LINE'\n{line}\nLINE\n"),
        (_, Some(e)) => format!(
            "cat <<'LINE'\n{line}\nLINE\necho 'error: linking with `cc` failed: exit status: 1' >&2\n\
             echo '  = note: {e}' >&2\nexit 1"
        ),
    };
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\n\
             if [ \"$1\" = -vV ]; then echo 'rustc 1.95.0'; echo 'release: 1.95.0'; exit 0; fi\n\
             {print}\n",
            args.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

const VARIABLES: [&str; 9] = [
    "TARGET",
    "CARGO_MANIFEST_DIR",
    "OUT_DIR",
    "RUSTC",
    "DCGM_EXPORTER_SYMBOL_ORDER",
    "RUSTC_LINKER",
    "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
];

/// Runs the build script's link step; the last rustc command line the fake rustc in `dir`
/// was asked.
fn last_link_args(dir: &Path) -> String {
    build_script::link_args().unwrap();
    let asked = std::fs::read_to_string(dir.join("rustc-lld.args")).unwrap();
    asked.lines().last().unwrap().to_string()
}

/// A release build's environment on x86_64 Linux with `rustc` and nothing configured.
fn plain_build(out: &Path, rustc: &Path) {
    for k in VARIABLES {
        std::env::remove_var(k);
    }
    std::env::set_var("TARGET", "x86_64-unknown-linux-gnu");
    std::env::set_var("CARGO_MANIFEST_DIR", root());
    std::env::set_var("OUT_DIR", out);
    std::env::set_var("RUSTC", rustc);
}

fn ordering_args() -> Vec<String> {
    let list = root().join(build_script::LIST);
    vec![
        format!("-Wl,--symbol-ordering-file={}", list.display()),
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ]
}

/// The linker as rustc's link line names it: lld itself, or a driver's last `-fuse-ld=` or
/// `--ld-path=`; the driver's default, or any other, is no lld.
#[test]
fn the_linker_is_read_from_rustcs_link_line() {
    let env = r#"LC_ALL="C" PATH="/r/bin:/usr/bin" VSLANG="1033" "#;
    let rust_lld = r#""-B/r/lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld" "-fuse-ld=lld""#;
    for (line, lld) in [
        (
            format!(r#"{env}"cc" "-m64" "a.o" {rust_lld} "-o" "p""#),
            true,
        ),
        (
            format!(r#"{env}"cc" {rust_lld} "-fuse-ld=bfd" "-o" "p""#),
            false,
        ),
        (format!(r#"{env}"cc" {rust_lld} "-fuse-ld=gold""#), false),
        (format!(r#"{env}"cc" "-fuse-ld=bfd" "-fuse-ld=lld""#), true),
        (
            format!(r#"{env}"/usr/bin/clang" "--ld-path=/opt/llvm/bin/ld.lld""#),
            true,
        ),
        (format!(r#"{env}"clang" "-fuse-ld=/usr/bin/ld.lld""#), true),
        (format!(r#"{env}"clang" "-fuse-ld=mold""#), false),
        (format!(r#"{env}"cc" "-m64" "a b.o" "-o" "p""#), false),
        (format!(r#"{env}"rust-lld" "-flavor" "gnu" "a.o""#), true),
        (r#""/usr/bin/ld.lld" "a.o""#.to_string(), true),
        (r#""x86_64-linux-gnu-gcc" "a\"b.o""#.to_string(), false),
    ] {
        let got = build_script::lld_links(&line);
        assert_eq!(got.is_ok(), lld, "{line}: {got:?}");
    }
    let e = build_script::lld_links(&format!(r#"{env}"cc" {rust_lld} "-fuse-ld=bfd""#));
    assert!(e.unwrap_err().contains("-fuse-ld=bfd"));
    let e = build_script::lld_links(&format!(r#"{env}"cc" "a.o""#));
    assert!(e.unwrap_err().contains("default linker"));
}

// The cases set the process's environment, which is what the build script reads: one
// test for all of them, alone in a child process (every other test shares this one's).
#[test]
fn ordering_is_asked_only_where_rustc_links_with_lld() {
    crate::support::alone!(ordering_is_asked_only_where_rustc_links_with_lld);
    let dir = tempfile::tempdir().unwrap();
    let set = |k: &str, v: &str| std::env::set_var(k, v);
    let lld_line = r#"LC_ALL="C" "cc" "-m64" "-B/sysroot/gcc-ld" "-fuse-ld=lld" "-o" "p""#;
    let lld = fake_rustc(dir.path(), "rustc-lld", lld_line, None);
    let refused = |what: &str, wanted: &str| {
        let e = build_script::link_args().expect_err(what);
        assert!(e.contains(wanted), "{what}: {e:?} should say {wanted:?}");
    };

    plain_build(dir.path(), &lld);
    assert_eq!(build_script::link_args().unwrap(), ordering_args());
    // A rustc whose link line is GNU ld's (a configured linker, RUSTFLAGS choosing bfd, a
    // distribution's rustc without the bundled lld): no ordering, and the reason.
    let bfd = r#""cc" "-m64" "-B/sysroot/gcc-ld" "-fuse-ld=lld" "-fuse-ld=bfd" "-o" "p""#;
    plain_build(dir.path(), &fake_rustc(dir.path(), "rustc-bfd", bfd, None));
    refused("-fuse-ld=bfd after rustc's lld", "-fuse-ld=bfd");
    let plain_cc = r#""cc" "-m64" "a.o" "-o" "p""#;
    plain_build(
        dir.path(),
        &fake_rustc(dir.path(), "rustc-cc", plain_cc, None),
    );
    refused("a rustc without its lld", "default linker");
    plain_build(
        dir.path(),
        &fake_rustc(dir.path(), "rustc-broken", "", None),
    );
    refused("a rustc that prints no link line", "no link line");
    // lld on the line, but the link with the ordering arguments fails (a linker wrapper
    // that picks GNU ld itself).
    let refusing = "/usr/bin/ld.bfd: unrecognized option --symbol-ordering-file=x";
    let wrapped = fake_rustc(dir.path(), "rustc-wrapped", lld_line, Some(refusing));
    plain_build(dir.path(), &wrapped);
    refused(
        "a link that fails with the arguments",
        "unrecognized option",
    );
    plain_build(dir.path(), &dir.path().join("no-such-rustc"));
    refused("a rustc that cannot be run", "cannot run");

    // What the build configures reaches rustc: RUSTC_LINKER (cargo's resolved linker),
    // else CARGO_TARGET_<TRIPLE>_LINKER, and the encoded RUSTFLAGS (else RUSTFLAGS).
    plain_build(dir.path(), &lld);
    set("RUSTC_LINKER", "/opt/cc-wrapper");
    set("CARGO_ENCODED_RUSTFLAGS", "-C\x1ftarget-cpu=native");
    let last = &last_link_args(dir.path());
    let list = root().join(build_script::LIST);
    for want in [
        "--print=link-args".to_string(),
        "--target=x86_64-unknown-linux-gnu".into(),
        "-Clinker=/opt/cc-wrapper -C target-cpu=native".into(),
        format!("-Clink-arg=-Wl,--symbol-ordering-file={}", list.display()),
        "-Clink-arg=-Wl,--no-warn-symbol-ordering".into(),
    ] {
        assert!(last.contains(want.as_str()), "{last}: no {want}");
    }
    plain_build(dir.path(), &lld);
    set("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER", "clang");
    set("RUSTFLAGS", "-C link-arg=-fuse-ld=lld");
    let last = &last_link_args(dir.path());
    assert!(
        last.contains("-Clinker=clang -C link-arg=-fuse-ld=lld"),
        "{last}"
    );

    plain_build(dir.path(), &lld);
    set("DCGM_EXPORTER_SYMBOL_ORDER", "0");
    refused("turned off", "DCGM_EXPORTER_SYMBOL_ORDER=0");
    plain_build(dir.path(), &lld);
    set("CARGO_MANIFEST_DIR", dir.path().to_str().unwrap());
    refused("a checkout without the list", "missing");

    real_rustc(dir.path());
}

/// The toolchain that runs these tests, asked as a build would be: where its link line is
/// lld's, the ordering arguments it gets link a program; the linker configurations that
/// choose GNU ld (whose `ld.bfd` refuses `--symbol-ordering-file`, as the link shows) get
/// none. Where the toolchain has no lld of its own, it gets none either.
fn real_rustc(dir: &Path) {
    let rustc = PathBuf::from(std::env::var("CARGO").map_or("rustc".into(), |cargo| {
        let c = Path::new(&cargo).with_file_name("rustc");
        if c.is_file() {
            c.display().to_string()
        } else {
            "rustc".into()
        }
    }));
    let sysroot = output_within(Command::new(&rustc).args(["--print", "sysroot"]), QUICK);
    let sysroot = String::from_utf8(sysroot.stdout).unwrap();
    let own_lld = Path::new(sysroot.trim())
        .join("lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld/ld.lld")
        .is_file();
    let source = dir.join("m.rs");
    std::fs::write(&source, "fn main() {}\n").unwrap();
    let link = |extra: &[String]| {
        output_within(
            Command::new(&rustc)
                .arg(&source)
                .arg("-o")
                .arg(dir.join("m"))
                .args(
                    extra
                        .iter()
                        .flat_map(|a| ["-C".to_string(), format!("link-arg={a}")]),
                ),
            BUILD,
        )
    };
    plain_build(dir, &rustc);
    match build_script::link_args() {
        Ok(args) => {
            assert!(own_lld, "ordering asked of a toolchain without its lld");
            let out = link(&args);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Err(e) => assert!(!own_lld, "{e}"),
    }
    // A configured C compiler alone keeps rustc's lld: rustc still passes it -fuse-ld=lld.
    set_var("RUSTC_LINKER", "cc");
    assert_eq!(build_script::link_args().is_ok(), own_lld);
    let gnu_ld = have_tool("ld.bfd");
    if gnu_ld {
        // A configured linker that picks GNU ld itself, behind rustc's -fuse-ld=lld: the
        // line says lld, the link with the arguments fails.
        let wrapper = dir.join("cc-bfd");
        std::fs::write(&wrapper, "#!/bin/sh\nexec cc \"$@\" -fuse-ld=bfd\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        plain_build(dir, &rustc);
        set_var("RUSTC_LINKER", wrapper.to_str().unwrap());
        let e = build_script::link_args().expect_err("a wrapper choosing GNU ld");
        assert!(e.contains("symbol-ordering-file"), "{e}");
    }
    for (k, v) in [
        ("CARGO_ENCODED_RUSTFLAGS", "-C\x1flink-arg=-fuse-ld=bfd"),
        ("RUSTFLAGS", "-C link-arg=-fuse-ld=bfd"),
        (
            "CARGO_ENCODED_RUSTFLAGS",
            "-Clink-args=-fuse-ld=bfd -Wl,-O1",
        ),
    ] {
        plain_build(dir, &rustc);
        set_var("RUSTC_LINKER", "cc");
        set_var(k, v);
        let e = build_script::link_args().expect_err(v);
        assert!(e.contains("-fuse-ld=bfd"), "{v}: {e}");
    }
    if gnu_ld {
        // What the ordering would have done there: GNU ld refuses it.
        let mut args = vec!["-fuse-ld=bfd".to_string()];
        args.extend(ordering_args());
        let out = link(&args);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("symbol-ordering-file"), "{err}");
    }
}

fn set_var(k: &str, v: &str) {
    std::env::set_var(k, v);
}

/// A real `cargo build --release` of a small crate whose build script is this one (the
/// exporter's own costs minutes on 2 cores): with rustc's lld, with `-fuse-ld=bfd` in
/// RUSTFLAGS, and with a configured linker (`.cargo/config.toml`) that picks GNU ld
/// itself, the binary links; without lld a cargo warning says why the text is not ordered.
#[test]
fn a_release_build_links_whatever_the_linker() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("src")).unwrap();
    std::fs::create_dir_all(d.join("etc")).unwrap();
    std::fs::copy(root().join(build_script::LIST), d.join(build_script::LIST)).unwrap();
    std::fs::write(
        d.join("Cargo.toml"),
        "[package]\nname = \"dcgm-exporter\"\nversion = \"0.0.0\"\nedition = \"2021\"\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        d.join("src/main.rs"),
        "fn main() { println!(\"linked\"); }\n",
    )
    .unwrap();
    std::fs::write(
        d.join("build.rs"),
        format!(
            "#[path = {:?}]\nmod symbol_order;\nfn main() {{\n    match symbol_order::link_args() {{\n        \
             Ok(args) => for a in args {{ println!(\"cargo:rustc-link-arg-bin=dcgm-exporter={{a}}\"); }},\n        \
             Err(why) => println!(\"cargo:warning=text not ordered by use: {{why}}\"),\n    }}\n}}\n",
            root().join("build/symbol_order.rs")
        ),
    )
    .unwrap();
    let wrapper = d.join("cc-bfd");
    std::fs::write(&wrapper, "#!/bin/sh\nexec cc \"$@\" -fuse-ld=bfd\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = |case: &str, rustflags: &str, config: &str| {
        std::fs::create_dir_all(d.join(".cargo")).unwrap();
        std::fs::write(d.join(".cargo/config.toml"), config).unwrap();
        let mut cmd = Command::new(&cargo);
        for k in VARIABLES {
            cmd.env_remove(k);
        }
        let out = output_within(
            cmd.args(["build", "--release", "--offline"])
                .current_dir(d)
                .env("CARGO_TARGET_DIR", d.join(format!("target-{case}")))
                .env("RUSTFLAGS", rustflags),
            BUILD,
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{case}: the link failed:\n{err}");
        err
    };
    let plain = build("lld", "", "");
    assert!(!plain.contains("not ordered"), "{plain}");
    if !have_tool("ld.bfd") {
        return;
    }
    let bfd = build("bfd", "-C link-arg=-fuse-ld=bfd", "");
    assert!(bfd.contains("not ordered by use"), "{bfd}");
    let config = format!(
        "[target.x86_64-unknown-linux-gnu]\nlinker = {:?}\n",
        wrapper.display().to_string()
    );
    let wrapped = build("wrapper", "", &config);
    assert!(wrapped.contains("not ordered by use"), "{wrapped}");
}
