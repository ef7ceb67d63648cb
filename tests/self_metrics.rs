//! The exporter's own metrics that say what it is and how its collections go:
//! `dcgm_exporter_build_info` (version, commit, the loaded DCGM library's version, mode) and
//! the `dcgm_exporter_collection_seconds` histogram, in embedded and remote mode.

mod support;
use support::*;

fn build_info(p: &[Sample]) -> Vec<&Sample> {
    series(p, "dcgm_exporter_build_info")
}

fn collections_observed(p: &[Sample]) -> f64 {
    series(p, "dcgm_exporter_collection_seconds_count")
        .first()
        .map_or(0.0, |s| s.value)
}

/// The DCGM version the start-up line names.
fn logged_dcgm_version(e: &Exporter) -> String {
    let log = e.stderr();
    let at = log.find("DCGM library ").expect("start-up line") + "DCGM library ".len();
    log[at..].split_whitespace().next().unwrap().to_string()
}

fn check(e: &Exporter, mode: &str) {
    let page = e.scrape_until(10, |p| collections_observed(p) >= 2.0);
    let info = build_info(&page);
    assert_eq!(info.len(), 1, "{}", dump(&page));
    assert_eq!(info[0].value, 1.0);
    assert_eq!(info[0].label("version"), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(info[0].label("mode"), Some(mode));
    let commit = info[0].label("commit").unwrap_or_default();
    assert!(!commit.is_empty(), "{}", dump(&page));
    assert_eq!(
        info[0].label("dcgm_version"),
        Some(logged_dcgm_version(e).as_str())
    );
    // Every collection lands in the histogram; its buckets are cumulative up to +Inf.
    let before = collections_observed(&page);
    let page = e.scrape_until(10, |p| collections_observed(p) >= before + 2.0);
    let inf = series(&page, "dcgm_exporter_collection_seconds_bucket")
        .into_iter()
        .find(|s| s.label("le") == Some("+Inf"))
        .map(|s| s.value);
    assert_eq!(inf, Some(collections_observed(&page)));
    assert!(prom::promtool_problems(&e.get("/metrics").1).is_empty());
}

#[test]
fn build_info_and_the_collection_histogram_in_embedded_mode() {
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["-c", "200"])
        .start();
    check(&e, "embedded");
}

#[test]
fn build_info_and_the_collection_histogram_in_remote_mode() {
    let port = free_port();
    let _engine = HostEngine::start(port, Some("one-gpu.toml"));
    let e = exporter()
        .args(&["-r", &format!("127.0.0.1:{port}"), "-c", "200"])
        .start();
    check(&e, "remote");
}
