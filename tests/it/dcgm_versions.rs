//! The version tier: every DCGM 4 a host runs (4.4.2, 4.5.3 and 4.6.0), embedded and
//! remote, and the skew between the library and the host engine in both directions.
//!
//! With the kits (`tests/dcgm-kits/` for 4.4.2 and 4.5.3, `../shared/dcgm-real/` for 4.6.0;
//! `tests/support/real_dcgm.rs`): the exporter embedded on each kit's library, and remote
//! against each kit's `nv-hostengine` with each kit's library. Every pair either serves the
//! default counters, values fresh on every scrape through SIGHUP, a counters rewrite, a GPU
//! lost and found again and the engine killed and started again (remote), with what its
//! older side lacks left out and named in one line at start, or, where DCGM itself refuses
//! the pair (a 4.6 library and an older engine), stops the start naming both releases.
//!
//! Without the kits the same paths run on dcgm-sim answering as an older release
//! (`[node] dcgm_version` in the profile): the fast tier.

use crate::support::nvml_yaml::{uuid, Gpu};
use crate::support::real_dcgm::{kit_of, Kit, RealHostEngine, Scratch};
use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const RELEASES: [&str; 3] = ["4.4.2", "4.5.3", "4.6.0"];
const INTERVAL_MS: u64 = 500;

/// Rows whose fields came with DCGM 4.5.0 (1507) and 4.6.0 (175), beside two every DCGM 4
/// has, and the health action (whose recovery-action source is a 4.5.0 field).
const NEW_FIELDS_CSV: &str = "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n\
DCGM_FI_DEV_POWER_USAGE, gauge, power\n\
DCGM_FI_DEV_MEMORY_UNREPAIRABLE, gauge, a 4.5.0 field\n\
DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY, gauge, a 4.6.0 field\n\
DCGM_EXP_GPU_HEALTH_ACTION, gauge, what the GPU needs\n";

fn dcgm_version(page: &[Sample]) -> Option<String> {
    series(page, "dcgm_exporter_build_info")
        .first()
        .and_then(|s| s.label("dcgm_version").map(str::to_string))
}

/// The lines of the exporter's log that name what a pair of releases leaves out.
fn left_out_lines(e: &Exporter) -> Vec<String> {
    e.stderr()
        .lines()
        .filter(|l| l.contains(": left out, as DCGM "))
        .map(str::to_string)
        .collect()
}

/// After an event: `want` back within 30 s, then on at least 3 of 4 scrapes an interval
/// apart every series of `want` is there (a sample is served only while it is at most an
/// interval and a second old, so DCGM sampled each anew) while the successful collections
/// count up (by two at least). Panics naming `what` otherwise.
fn steady(e: &Exporter, want: &Series, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut now = dcgm_series(&e.scrape());
    while &now != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        now = dcgm_series(&e.scrape());
    }
    assert_eq!(&now, want, "{what}: not back in 30 s\n{}", e.stderr());
    let mut complete = 0;
    let first = successes(&e.scrape());
    let mut last = first;
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(INTERVAL_MS + 100));
        let page = e.scrape();
        if dcgm_series(&page).is_superset(want) {
            complete += 1;
        }
        last = successes(&page);
    }
    // About five collections in the window; a loaded machine may stretch one.
    assert!(
        last >= first + 2.0,
        "{what}: {first} then {last} collections\n{}",
        e.stderr()
    );
    assert!(
        complete >= 3,
        "{what}: series missing on {} of 4 scrapes",
        4 - complete
    );
}

// ---------------------------------------------------------------------------------------
// The fast tier: dcgm-sim answering as an older release.

/// `etc/sim/<base>` answering as DCGM `release`, written into `dir`.
fn sim_profile(dir: &Path, base: &str, release: &str) -> PathBuf {
    let text = std::fs::read_to_string(repo(&format!("etc/sim/{base}"))).expect("profile");
    let p = dir.join(format!("{release}-{base}"));
    let patched = text.replacen(
        "[node]\n",
        &format!("[node]\ndcgm_version = \"{release}\"\n"),
        1,
    );
    assert_ne!(patched, text, "{base} has no [node] table");
    std::fs::write(&p, patched).expect("write profile");
    p
}

fn csv(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("counters.csv");
    std::fs::write(&p, text).expect("write CSV");
    p
}

/// A simulated 4.4.2 (library and embedded engine) lacks fields 6, 1507, 1523 and 175: the
/// rows and features that need them are left out, named in one line with the release;
/// everything else is served, the exporter does not exit for the bind/unbind flag.
#[test]
fn sim_4_4_2_embedded_leaves_out_what_it_lacks_in_one_line() {
    let dir = Scratch::new("versions-sim-e");
    let profile = sim_profile(&dir.0, "real-kit.toml", "4.4.2");
    let e = exporter()
        .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
        .args(&["-f", csv(&dir.0, NEW_FIELDS_CSV).to_str().unwrap()])
        .args(&[
            "-c",
            &INTERVAL_MS.to_string(),
            "--enable-gpu-bind-unbind-watch",
        ])
        .start();
    let page = e.scrape_until(10, |p| successes(p) >= 2.0);
    assert_eq!(dcgm_version(&page).as_deref(), Some("4.4.2"));
    assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 4);
    assert_eq!(series(&page, "DCGM_EXP_GPU_HEALTH_ACTION").len(), 4);
    assert!(series(&page, "DCGM_FI_DEV_MEMORY_UNREPAIRABLE").is_empty());
    let lines = left_out_lines(&e);
    assert_eq!(lines.len(), 1, "{}", e.stderr());
    for needle in [
        "DCGM 4.4.2: left out, as DCGM 4.4.2 has no such field",
        "DCGM_FI_DEV_MEMORY_UNREPAIRABLE (field 1507, DCGM 4.5.0 and later)",
        "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY (field 175, DCGM 4.6.0 and later)",
        "--enable-gpu-bind-unbind-watch (field 6, DCGM 4.5.0 and later)",
        "recovery action in DCGM_EXP_GPU_HEALTH_ACTION",
    ] {
        assert!(lines[0].contains(needle), "{needle}: {}", lines[0]);
    }
    assert!(!e.stderr().contains("level=error"), "{}", e.stderr());
    // A reload finds the same release: nothing said again.
    signal(e.child.id(), "HUP");
    steady(&e, &dcgm_series(&page), "after SIGHUP");
    assert_eq!(left_out_lines(&e).len(), 1, "{}", e.stderr());
}

/// A 4.6 library and a host engine of 4.5.3: DCGM refuses to read values across them; the
/// start stops with both releases named (exit 1), not a retry loop of collection errors.
#[test]
fn sim_a_4_6_library_and_an_older_engine_stop_the_start_naming_both() {
    let dir = Scratch::new("versions-sim-skew");
    let port = free_port();
    let _engine = HostEngine::start(
        port,
        Some(
            sim_profile(&dir.0, "real-kit.toml", "4.5.3")
                .to_str()
                .unwrap(),
        ),
    );
    let (code, err) = exporter()
        .args(&["-r", &format!("127.0.0.1:{port}")])
        .run_to_exit();
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("DCGM refuses this pair of releases: library 4.6.0 and host engine 4.5.3"),
        "{err}"
    );
}

/// The other direction: a library older than the engine works, knowing less. A 4.4.2
/// library against a 4.6.0 engine serves everything but what 4.4.2 lacks (named once), the
/// health action included; a 4.5.3 library against a 4.4.2 engine likewise.
#[test]
fn sim_an_older_library_serves_a_newer_engine_minus_what_it_lacks() {
    let dir = Scratch::new("versions-sim-old-lib");
    for (library, engine, common) in [("4.4.2", "4.6.0", "4.4.2"), ("4.5.3", "4.4.2", "4.4.2")] {
        let port = free_port();
        let engine_profile = sim_profile(&dir.0, "real-kit.toml", engine);
        let _engine = HostEngine::start(port, Some(engine_profile.to_str().unwrap()));
        let e = exporter()
            .env(
                "DCGM_SIM_PROFILE",
                sim_profile(&dir.0, "real-kit.toml", library)
                    .to_str()
                    .unwrap(),
            )
            .args(&["-r", &format!("127.0.0.1:{port}")])
            .args(&["-f", csv(&dir.0, NEW_FIELDS_CSV).to_str().unwrap()])
            .args(&["-c", &INTERVAL_MS.to_string()])
            .start();
        let page = e.scrape_until(10, |p| successes(p) >= 3.0);
        let pair = format!("library {library}, engine {engine}");
        assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 4, "{pair}");
        assert_eq!(
            series(&page, "DCGM_EXP_GPU_HEALTH_ACTION").len(),
            4,
            "{pair}"
        );
        let lines = left_out_lines(&e);
        assert_eq!(lines.len(), 1, "{pair}: {}", e.stderr());
        assert!(
            lines[0].contains(&format!(
                "DCGM library {library}, host engine {engine}: left out, as DCGM {common}"
            )),
            "{pair}: {}",
            lines[0]
        );
        // Nothing refused tick after tick (the recovery action is not read through 4.4.2).
        assert!(
            !e.stderr().contains("UnknownField"),
            "{pair}: {}",
            e.stderr()
        );
        assert!(
            !e.stderr().contains("collection failed"),
            "{pair}: {}",
            e.stderr()
        );
    }
}

/// A library before 4.6 answers VER_MISMATCH to the 4.6 NvLink status (v5): the links are
/// read through v4, so the same NvLink entities are watched as with 4.6.0.
#[test]
fn sim_an_older_library_reads_the_nvlink_status_it_knows() {
    let dir = Scratch::new("versions-sim-links");
    let links_csv = csv(
        &dir.0,
        "DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL, counter, link down events\n",
    );
    let mut watched = Vec::new();
    for release in ["4.6.0", "4.5.3"] {
        let profile = sim_profile(&dir.0, "h100-8gpu-nvswitch.toml", release);
        let e = exporter()
            .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
            .args(&["-f", links_csv.to_str().unwrap()])
            .start();
        e.scrape_until(10, |p| successes(p) >= 1.0);
        // "watching N NvLink entities x 1 fields": N, the links DCGM says are there.
        let log = e.stderr();
        let n: usize = log
            .split(" NvLink entities x ")
            .next()
            .filter(|before| before.len() < log.len())
            .and_then(|before| before.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{release}: no NvLink watch: {log}"));
        watched.push(n);
    }
    assert!(watched[0] > 0, "{watched:?}");
    assert_eq!(watched[0], watched[1], "4.6.0 vs 4.5.3 library");
}

// ---------------------------------------------------------------------------------------
// The kit tier: NVIDIA's DCGM 4.4.2, 4.5.3 and 4.6.0.

/// Every kit, or `None` after the skip line of the first that cannot run here.
fn kits() -> Option<[&'static Kit; 3]> {
    Some([kit_of("4.4.2")?, kit_of("4.5.3")?, kit_of("4.6.0")?])
}

fn kit(release: &str) -> &'static Kit {
    kit_of(release).expect("checked by kits()")
}

/// Whether DCGM lets a `library` read values from an `engine`: not a 4.6 library with an
/// older engine (it reads values through a request older engines lack).
fn works(library: &str, engine: &str) -> bool {
    !(library == "4.6.0" && engine != "4.6.0")
}

/// What the older side of a pair lacks of the default counters and the bind/unbind flag:
/// the recovery action and field 6 before 4.5.0; nothing from 4.5.0 on.
fn expect_left_out(e: &Exporter, library: &str, engine: &str) {
    let lines = left_out_lines(e);
    let common = if library < engine { library } else { engine };
    if common == "4.4.2" {
        assert_eq!(lines.len(), 1, "{library}/{engine}: {}", e.stderr());
        for needle in [
            format!("left out, as DCGM {common} has no such field"),
            "--enable-gpu-bind-unbind-watch (field 6".into(),
            "DCGM_EXP_GPU_HEALTH_ACTION (its XIDs".into(),
        ] {
            assert!(lines[0].contains(&needle), "{needle}: {}", lines[0]);
        }
    } else {
        assert!(lines.is_empty(), "{library}/{engine}: {lines:?}");
    }
}

fn counters_copy(dir: &Path) -> PathBuf {
    let p = dir.join("default-counters.csv");
    std::fs::copy(repo("etc/default-counters.csv"), &p).expect("copy the default counters");
    p
}

fn args(csv: &Path) -> Vec<String> {
    [
        "-f",
        csv.to_str().unwrap(),
        "-c",
        &INTERVAL_MS.to_string(),
        "--enable-gpu-bind-unbind-watch",
        "--gpu-bind-unbind-poll-interval=500ms",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// SIGHUP and the counters file rewritten in place, each followed by [`steady`].
fn reloads(e: &Exporter, csv: &Path, want: &Series, pair: &str) {
    signal(e.child.id(), "HUP");
    steady(e, want, &format!("{pair}: after SIGHUP"));
    let text = std::fs::read_to_string(csv).unwrap();
    std::fs::write(csv, format!("{text}# rewritten\n")).unwrap();
    steady(
        e,
        want,
        &format!("{pair}: after the counters were rewritten"),
    );
}

/// The default counters on two GPUs of each kit's embedded engine: served through the
/// reloads, the build info naming the kit's release, what 4.4.2 lacks named once.
#[test]
fn each_release_embedded_serves_the_default_counters_through_reloads() {
    let Some(_) = kits() else { return };
    let mut reference: Option<Series> = None;
    // 4.6.0 first: its series are what every other release must serve.
    for release in ["4.6.0", "4.5.3", "4.4.2"] {
        let dir = Scratch::new(&format!("versions-e-{release}"));
        let yaml = dir.yaml(&vec![Gpu::default(); 2]);
        let csv = counters_copy(&dir.0);
        let a = args(&csv);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let e = kit(release).embedded(&yaml).args(&a).start();
        let page = e.scrape_until(20, |p| successes(p) >= 2.0);
        assert_eq!(dcgm_version(&page).as_deref(), Some(release));
        let all = dcgm_series(&page);
        let want = reference.get_or_insert_with(|| all.clone()).clone();
        assert!(want.len() >= 2 * 10, "{release}: {}", dump(&page));
        steady(&e, &want, &format!("{release} embedded: at start"));
        expect_left_out(&e, release, release);
        reloads(&e, &csv, &want, &format!("{release} embedded"));
        assert_eq!(series(&e.scrape(), "DCGM_EXP_GPU_HEALTH_ACTION").len(), 2);
        assert!(!e.stderr().contains("panicked"), "{}", e.stderr());
    }
}

/// The NvLink links of each release's embedded engine: a library before 4.6.0 refuses the
/// 4.6 status struct (v5), so the links are read through v4, and every release watches the
/// same 18 links of each of the two GPUs.
#[test]
fn each_release_embedded_watches_the_nvlinks() {
    let Some(_) = kits() else { return };
    for release in RELEASES {
        let dir = Scratch::new(&format!("versions-links-{release}"));
        let gpus = vec![
            Gpu {
                nvlinks: vec![true; 18],
                ..Gpu::default()
            };
            2
        ];
        let yaml = dir.yaml(&gpus);
        let links = csv(
            &dir.0,
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, NVLink bandwidth\n\
             DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL, counter, link down events\n",
        );
        let e = kit(release)
            .embedded(&yaml)
            .args(&["-f", links.to_str().unwrap()])
            .start();
        e.scrape_until(20, |p| successes(p) >= 1.0);
        assert!(
            e.stderr().contains(" 36 NvLink entities x "),
            "{release}: {}",
            e.stderr()
        );
    }
}

/// Every library against every engine: the pair serves what 4.6.0 serves embedded (values
/// fresh on every scrape) with the older side's gaps named once, or DCGM refuses it and the
/// start stops naming both releases.
#[test]
fn every_library_and_engine_pair_serves_or_is_refused_naming_both() {
    let Some(_) = kits() else { return };
    let dir = Scratch::new("versions-pairs");
    let yaml = dir.yaml(&vec![Gpu::default(); 2]);
    let csv = counters_copy(&dir.0);
    let engines: Vec<RealHostEngine> = RELEASES
        .iter()
        .map(|r| RealHostEngine::start(kit(r), &yaml, &dir.0, free_port()))
        .collect();
    let a = args(&csv);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let mut reference: Option<Series> = None;
    for library in ["4.6.0", "4.5.3", "4.4.2"] {
        for (engine, he) in RELEASES.iter().zip(&engines) {
            let pair = format!("library {library}, engine {engine}");
            let b = kit(library).remote(he.port).args(&a);
            if !works(library, engine) {
                let (code, err) = b.run_to_exit();
                assert_eq!(code, 1, "{pair}: {err}");
                let named = format!("library {library} and host engine {engine}");
                assert!(err.contains(&named), "{pair}: {err}");
                continue;
            }
            let e = b.start();
            let page = e.scrape_until(20, |p| successes(p) >= 2.0);
            let want = reference.get_or_insert_with(|| dcgm_series(&page)).clone();
            steady(&e, &want, &pair);
            expect_left_out(&e, library, engine);
        }
    }
}

/// `tests/c/inject_gpu.c`, compiled once: loses or finds a GPU of a real host engine
/// through DCGM's NVML-injection API (`dcgmRemoveNvmlInjectedGpu`, in 4.4.2 too).
fn inject(kit: &Kit, port: u16, what: &str, arg: &str) {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let out = std::env::temp_dir().join(format!("dcgm-versions-inject-{}", std::process::id()));
        let st = status_within(
            Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
                .args(["-std=c11", "-Wall", "-Werror", "-I"])
                .arg(repo("dcgm-sys/include"))
                .arg(repo("tests/c/inject_gpu.c"))
                .arg("-ldl")
                .arg("-o")
                .arg(&out),
            BUILD,
        );
        assert!(st.success(), "compiling tests/c/inject_gpu.c");
        out
    });
    let mut cmd = Command::new(bin);
    cmd.arg(format!("127.0.0.1:{port}")).args([what, arg]);
    hermetic(&mut cmd);
    // The engine's own library: the one that knows its requests.
    cmd.env("LD_LIBRARY_PATH", kit.lib_dir());
    succeed_within(&mut cmd, QUICK, &format!("inject_gpu {what} {arg}"));
}

/// The remote lifecycle on an engine of `engine` with each library of `libraries`: start,
/// SIGHUP, the counters rewritten, GPU 1 lost and found again, the engine killed and
/// started again; every DCGM series back and fresh after each.
fn remote_lifecycle(engine: &str, libraries: &[&str]) {
    let Some(_) = kits() else { return };
    let dir = Scratch::new(&format!("versions-life-{engine}"));
    let yaml = dir.yaml(&vec![Gpu::default(); 2]);
    let mut he = RealHostEngine::start(kit(engine), &yaml, &dir.0, free_port());
    for library in libraries {
        assert!(works(library, engine));
        let pair = format!("library {library}, engine {engine}");
        let csv = counters_copy(&dir.0);
        let a = args(&csv);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let e = kit(library).remote(he.port).args(&a).start();
        let all = dcgm_series(&e.scrape_until(20, |p| successes(p) >= 2.0));
        assert!(all.len() >= 2 * 10, "{pair}: {all:?}");
        steady(&e, &all, &format!("{pair}: at start"));
        expect_left_out(&e, library, engine);
        reloads(&e, &csv, &all, &pair);
        let without_1: Series = all
            .iter()
            .filter(|s| s.1.as_deref() != Some("1"))
            .cloned()
            .collect();
        inject(kit(engine), he.port, "remove", &uuid(1));
        steady(&e, &without_1, &format!("{pair}: GPU 1 lost"));
        inject(kit(engine), he.port, "restore", &uuid(1));
        steady(&e, &all, &format!("{pair}: GPU 1 found again"));
        he.restart(kit(engine));
        steady(
            &e,
            &all,
            &format!("{pair}: the engine killed and started again"),
        );
        assert!(!e.stderr().contains("panicked"), "{pair}: {}", e.stderr());
    }
}

#[test]
fn the_remote_lifecycle_on_a_4_4_2_engine() {
    remote_lifecycle("4.4.2", &["4.4.2", "4.5.3"]);
}

#[test]
fn the_remote_lifecycle_on_a_4_5_3_engine() {
    remote_lifecycle("4.5.3", &["4.5.3", "4.4.2"]);
}

#[test]
fn the_remote_lifecycle_on_a_4_6_0_engine() {
    remote_lifecycle("4.6.0", &["4.6.0", "4.5.3", "4.4.2"]);
}

/// An engine replaced by an older release while the exporter runs (a 4.6 library): the
/// reconnect is refused naming both releases, nothing stale is served, /ready says 503;
/// the 4.6.0 engine back, the values come back.
#[test]
fn an_engine_replaced_by_an_older_release_is_refused_until_it_is_back() {
    let Some(_) = kits() else { return };
    let dir = Scratch::new("versions-replaced");
    let yaml = dir.yaml(&vec![Gpu::default(); 2]);
    let port = free_port();
    let mut he = RealHostEngine::start(kit("4.6.0"), &yaml, &dir.0, port);
    let csv = counters_copy(&dir.0);
    let e = kit("4.6.0")
        .remote(port)
        .args(&["-f", csv.to_str().unwrap(), "-c", &INTERVAL_MS.to_string()])
        .start();
    let all = dcgm_series(&e.scrape_until(20, |p| successes(p) >= 2.0));
    he.kill();
    drop(he);
    let old = RealHostEngine::start(kit("4.5.3"), &yaml, &dir.0, port);
    e.wait_for_log(30, "library 4.6.0 and host engine 4.5.3");
    let page = e.scrape();
    assert!(
        dcgm_series(&page).is_empty(),
        "stale values: {}",
        dump(&page)
    );
    assert_eq!(e.get("/ready").0, 503);
    drop(old);
    let _back = RealHostEngine::start(kit("4.6.0"), &yaml, &dir.0, port);
    steady(&e, &all, "the 4.6.0 engine back");
}
