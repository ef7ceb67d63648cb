//! Counters files as upstream ships them, through the real binary: upstream's 1.x CSV
//! (a metric listed twice), the Helm chart's default ConfigMap, and a broken quote.

use crate::support::*;

/// Each of `names` has a series for each GPU of the default 8-GPU profile.
fn one_series_per_gpu(page: &[Sample], names: &[&str]) {
    for name in names {
        assert_eq!(series(page, name).len(), 8, "{name}: one series per GPU");
    }
}

#[test]
fn upstreams_1x_csv_starts_with_a_warning_per_repeated_metric_and_no_duplicate_series() {
    let csv = repo("tests/fixtures/upstream-1x-compatibility.csv");
    let e = exporter()
        .args(&["-f", csv.to_str().unwrap(), "-o"])
        .start();
    let page = e.scrape();
    one_series_per_gpu(
        &page,
        &[
            "dcgm_fi_prof_pcie_tx_bytes",
            "dcgm_fi_prof_pcie_rx_bytes",
            "dcgm_gpu_temp",
        ],
    );
    let text = e.get("/metrics").1;
    assert_eq!(
        text.matches("# TYPE dcgm_fi_prof_pcie_tx_bytes counter\n")
            .count(),
        1,
        "the first row's type, once"
    );
    let stderr = e.stderr();
    let warned = lines_with(&stderr, "is listed again");
    assert_eq!(warned.len(), 2, "{stderr}");
    assert!(warned[0].contains("upstream-1x-compatibility.csv:42: dcgm_fi_prof_pcie_tx_bytes"));
    assert!(warned[1].contains("upstream-1x-compatibility.csv:43: dcgm_fi_prof_pcie_rx_bytes"));
}

#[test]
fn the_helm_charts_default_configmap_serves_its_counters() {
    let csv = repo("tests/fixtures/helm-default-configmap.csv");
    let e = exporter().args(&["-f", csv.to_str().unwrap()]).start();
    let page = e.scrape();
    one_series_per_gpu(
        &page,
        &[
            "DCGM_FI_DEV_DEC_UTIL",
            "DCGM_FI_PROF_PCIE_TX_BYTES",
            "DCGM_FI_DEV_GPU_TEMP",
        ],
    );
    // No driver-version label in the chart's set.
    assert!(series(&page, "DCGM_FI_DEV_GPU_TEMP")[0]
        .label("DCGM_FI_DRIVER_VERSION")
        .is_none());
}

#[test]
fn an_unclosed_quote_stops_the_exporter_naming_file_and_line() {
    let (_dir, csv) = temp_file(
        "c.csv",
        "DCGM_FI_DEV_SM_CLOCK, gauge, clock\nDCGM_FI_DEV_GPU_TEMP, gauge,\"temp\n",
    );
    let (code, stderr) = exporter()
        .args(&["-f", csv.to_str().unwrap()])
        .run_to_exit();
    assert_eq!(code, 1, "{stderr}");
    assert!(
        // The log line escapes the quote: msg="…missing \" in quoted field…".
        stderr.contains(&format!(
            "{}:2: malformed CSV: extraneous or missing \\\" in quoted field",
            csv.display()
        )),
        "{stderr}"
    );
}
