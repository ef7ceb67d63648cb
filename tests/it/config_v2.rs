//! dcgm-exporter 4.8.4's YAML configuration version 2 end to end on the simulator: the
//! all-fields collection sets the cadence, a narrower one its own watch frequency and
//! retention (as DCGM's watch calls show), `server` and `sources` apply, and the start-up
//! rule on collections is upstream's.

use crate::support::*;

const V2: &str = "version: 2\n\
metrics:\n\
\x20 fields:\n\
\x20   - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: \"GPU temperature (in C).\"}\n\
\x20   - {name: DCGM_FI_DEV_POWER_USAGE, prometheusType: gauge, help: \"Power draw (in W).\"}\n\
sources:\n\
\x20 dcgm:\n\
\x20   watch: {maxKeepAge: 2m, maxKeepSamples: 5}\n\
server:\n\
\x20 maxConcurrentScrapes: 1\n\
collections:\n\
\x20 - name: scrape\n\
\x20   every: 700ms\n\
\x20   metrics: {include: [\"*\"]}\n\
\x20 - name: fast-power\n\
\x20   every: 100ms\n\
\x20   sources: {dcgm: {watch: {maxKeepAge: 0s, maxKeepSamples: 2}}}\n\
\x20   metrics: {include: [\"DCGM_FI_DEV_POWER_*\"]}\n";

#[test]
fn version_2_sets_cadence_retention_and_fields() {
    let (dir, cfg) = temp_file("config.yaml", V2);
    let log = dir.path().join("w.log");
    // -f and -c given by the test helper would win over the file: run without them.
    let (mut cmd, port) = config_file_command(&cfg);
    cmd.env("DCGM_SIM_WATCH_LOG", &log)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    sim_built();
    let mut child = cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let page = loop {
        if let Ok((200, body)) = http_get(&format!("http://127.0.0.1:{port}/metrics")) {
            if body.contains("DCGM_FI_DEV_POWER_USAGE{") {
                break body;
            }
        }
        assert!(child.try_wait().unwrap().is_none(), "exited early");
        assert!(std::time::Instant::now() < deadline, "no page within 30 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let samples = parse(&page);
    assert_eq!(series(&samples, "DCGM_FI_DEV_GPU_TEMP").len(), 1);
    // Only the file's fields.
    assert!(series(&samples, "DCGM_FI_DEV_SM_CLOCK").is_empty());
    let w = watch_log(&log);
    let of = |f: u16| w.iter().find(|x| x.3.contains(&f)).cloned();
    // GPU temperature: the all-fields collection's cadence, sources.dcgm.watch's retention.
    assert_eq!(of(150), Some((700_000, 120.0, 5, vec![150])), "{w:?}");
    // Power: its collection's cadence and retention.
    assert_eq!(of(155), Some((100_000, 0.0, 2, vec![155])), "{w:?}");
    let _ = child.kill();
    let _ = child.wait();
}

/// Upstream 4.8.4's chart README: "Startup fails if an override pattern matches no
/// configured fields or two overrides match the same field."
#[test]
fn collections_that_match_no_configured_field_or_overlap_stop_the_start() {
    let (dir, csv) = temp_file(
        "c.csv",
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_POWER_USAGE, gauge, p\n",
    );
    let cfg = dir.path().join("config.yaml");
    for (collections, needle) in [
        (
            "  - {name: clocks, every: 1s, metrics: {include: [DCGM_FI_DEV_SM_CLOCK]}}\n",
            "(DCGM_FI_DEV_SM_CLOCK) matches none of the configured fields",
        ),
        (
            "  - {name: a, every: 1s, metrics: {include: [\"DCGM_FI_DEV_POWER_*\"]}}\n  - {name: b, every: 2s, metrics: {include: [DCGM_FI_DEV_POWER_USAGE]}}\n",
            "DCGM_FI_DEV_POWER_USAGE is matched by watch groups",
        ),
    ] {
        std::fs::write(&cfg, format!("version: 2\ncollections:\n{collections}")).unwrap();
        let (code, err) = exporter()
            .args(&["-f", csv.to_str().unwrap(), "--config-file", cfg.to_str().unwrap()])
            .run_to_exit();
        assert_eq!(code, 1, "{collections}");
        assert!(
            err.contains(needle) && err.contains(cfg.to_str().unwrap()),
            "{collections}: {err}"
        );
    }
}

/// The same file under --emulate-version=4.8.2 stops with one line naming the file.
#[test]
fn version_2_is_refused_when_emulating_4_8_2() {
    let (_dir, cfg) = temp_file("config.yaml", V2);
    let (code, err) = exporter()
        .args(&[
            "--config-file",
            cfg.to_str().unwrap(),
            "--emulate-version",
            "4.8.2",
        ])
        .run_to_exit();
    assert_eq!(code, 1);
    assert!(
        err.contains(cfg.to_str().unwrap()) && err.contains("version 2"),
        "{err}"
    );
}

/// A collection slower than the all-fields one (`every: 5s` under `every: 1s`): its field
/// is fresh for its own 5 s (+ slack), so every scrape serves it, not one in two.
#[test]
fn a_slower_collection_is_served_on_every_scrape() {
    let (_dir, cfg) = temp_file(
        "config.yaml",
        "version: 2\n\
         metrics:\n\
         \x20 fields:\n\
         \x20   - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: t}\n\
         \x20   - {name: DCGM_FI_DEV_POWER_USAGE, prometheusType: gauge, help: p}\n\
         collections:\n\
         \x20 - {name: scrape, every: 1s, metrics: {include: [\"*\"]}}\n\
         \x20 - {name: slow-power, every: 5s, metrics: {include: [DCGM_FI_DEV_POWER_USAGE]}}\n",
    );
    let (mut cmd, port) = config_file_command(&cfg);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    sim_built();
    let mut child = cmd.spawn().unwrap();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !matches!(http_get(&url), Ok((200, b)) if b.contains("DCGM_FI_DEV_POWER_USAGE{")) {
        assert!(child.try_wait().unwrap().is_none(), "exited early");
        assert!(std::time::Instant::now() < deadline, "no power within 30 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut missing = Vec::new();
    for i in 0..12 {
        std::thread::sleep(std::time::Duration::from_millis(1000));
        let (_, body) = http_get(&url).unwrap();
        let page = parse(&body);
        assert_eq!(series(&page, "DCGM_FI_DEV_GPU_TEMP").len(), 1, "scrape {i}");
        if series(&page, "DCGM_FI_DEV_POWER_USAGE").is_empty() {
            missing.push(i);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        missing.is_empty(),
        "power missing on scrapes {missing:?} of 12"
    );
}
