//! `lowcard`: what `--low-cardinality` saves, in one run. For the page without and with the
//! flag (same profile, same counters): bytes per scrape, series, labels per series and the
//! distinct label values on the page; then what a real Prometheus (`/usr/bin/prometheus`,
//! started on a temporary directory, scraping only this exporter every `--scrape-ms`) holds
//! after `--scrapes` scrapes: its own `prometheus_tsdb_head_series`,
//! `prometheus_tsdb_head_chunks`, `process_resident_memory_bytes` and
//! `go_memstats_heap_inuse_bytes`, read from its /metrics (it does not scrape itself, so
//! they count the exporter's series only).
//!
//! `cargo run --release -p bench -- lowcard [--build release|debug]
//! [--profile etc/sim/large-bench.toml] [--collectors bench/bench-counters.csv]
//! [--scrape-ms 250] [--scrapes 120] [--prometheus /usr/bin/prometheus]`

use crate::{arg, exporter, free_port, get, self_metric, Killed};
use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Page {
    bytes: usize,
    series: usize,
    labels_per_series: f64,
    distinct_values: usize,
}

/// The DCGM series of a text page (the exporter's own metrics left out).
fn page_figures(text: &str) -> Page {
    let mut series = 0;
    let mut labels = 0;
    let mut values = HashSet::new();
    for l in text
        .lines()
        .filter(|l| l.starts_with("DCGM_"))
        .filter_map(|l| l.split_once('{'))
    {
        series += 1;
        let body = l.1.rsplit_once('}').map_or("", |(b, _)| b);
        // Label values of our pages hold no `",` (model names, UUIDs, bus ids, versions).
        for pair in body.split("\",").filter(|p| !p.is_empty()) {
            labels += 1;
            values.insert(pair.trim_end_matches('"').to_string());
        }
    }
    Page {
        bytes: text.len(),
        series,
        labels_per_series: labels as f64 / series.max(1) as f64,
        distinct_values: values.len(),
    }
}

fn wait_for(what: &str, secs: u64, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let t = Instant::now();
    while !ready() {
        if t.elapsed() > Duration::from_secs(secs) {
            return Err(format!("{what}: not within {secs} s"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// A duration as Prometheus prints it in labels (`model.Duration`): the largest units that
/// divide it exactly, `250ms`, `1s`, `1m30s`.
fn prom_duration(ms: u64) -> String {
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = ms;
    for (unit, n) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
        if rest >= n {
            out.push_str(&format!("{}{unit}", rest / n));
            rest %= n;
        }
    }
    out
}

struct Head {
    series: f64,
    chunks: f64,
    rss: f64,
    heap_inuse: f64,
}

/// Starts Prometheus scraping `target`, waits for `scrapes` scrapes, reads its own figures.
fn prometheus_after(target: &str, scrapes: u64, scrape_ms: u64) -> Result<Head, String> {
    let dir = std::env::temp_dir().join(format!("bench-lowcard-{}-{target}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: {scrape_ms}ms\n  scrape_timeout: {scrape_ms}ms\n\
             scrape_configs:\n  - job_name: dcgm\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let port = free_port()?;
    let bin = arg("--prometheus", "/usr/bin/prometheus");
    let child = Command::new(&bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{bin}: {e}"))?;
    let _child = Killed(child);
    let url = format!("http://127.0.0.1:{port}/metrics");
    // Every scrape of the target is one sample of this summary's count.
    let key = format!(
        "prometheus_target_interval_length_seconds_count{{interval=\"{}\"}}",
        prom_duration(scrape_ms)
    );
    wait_for("Prometheus scrapes", 60 + scrapes * scrape_ms / 250, || {
        get(&url).is_ok_and(|p| self_metric(&p, &key) >= scrapes as f64)
    })?;
    let p = get(&url)?;
    let head = Head {
        series: self_metric(&p, "prometheus_tsdb_head_series "),
        chunks: self_metric(&p, "prometheus_tsdb_head_chunks "),
        rss: self_metric(&p, "process_resident_memory_bytes "),
        heap_inuse: self_metric(&p, "go_memstats_heap_inuse_bytes "),
    };
    drop(_child);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(head)
}

fn one(dir: &Path, profile: &Path, csv: &Path, low: bool) -> Result<(Page, Head), String> {
    let port = free_port()?;
    let mut cmd = exporter(dir, profile, csv, port, 1000);
    cmd.arg("--dcgm-library").arg(dir.join("libdcgm.so.4"));
    if low {
        cmd.arg("--low-cardinality");
    }
    let _exporter = Killed(cmd.spawn().map_err(|e| format!("dcgm-exporter: {e}"))?);
    let url = format!("http://127.0.0.1:{port}/metrics");
    wait_for("first page", 120, || {
        get(&url).is_ok_and(|p| p.contains("DCGM_FI_") && (!low || p.contains("_INFO{")))
    })?;
    let page = page_figures(&get(&url)?);
    let scrape_ms: u64 = crate::number("--scrape-ms", "250")?;
    let scrapes: u64 = crate::number("--scrapes", "120")?;
    let head = prometheus_after(&format!("127.0.0.1:{port}"), scrapes, scrape_ms)?;
    Ok((page, head))
}

pub fn run(root: &Path, dir: &Path) -> Result<(), String> {
    let profile = root.join(arg("--profile", "etc/sim/large-bench.toml"));
    let csv = root.join(arg("--collectors", "bench/bench-counters.csv"));
    println!(
        "profile {}, counters {}, {} scrapes every {} ms",
        profile.display(),
        csv.display(),
        arg("--scrapes", "120"),
        arg("--scrape-ms", "250")
    );
    println!(
        "| output | bytes/scrape | series | labels/series | distinct label values | head series | head chunks | Prometheus RSS MiB | heap in use MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for low in [false, true] {
        let (p, h) = one(dir, &profile, &csv, low)?;
        println!(
            "| {} | {} | {} | {:.1} | {} | {} | {} | {:.1} | {:.1} |",
            if low { "--low-cardinality" } else { "default" },
            p.bytes,
            p.series,
            p.labels_per_series,
            p.distinct_values,
            h.series,
            h.chunks,
            h.rss / 1048576.0,
            h.heap_inuse / 1048576.0
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::prom_duration;

    #[test]
    fn durations_are_printed_as_prometheus_labels_them() {
        assert_eq!(prom_duration(250), "250ms");
        assert_eq!(prom_duration(1000), "1s");
        assert_eq!(prom_duration(90_000), "1m30s");
        assert_eq!(prom_duration(1500), "1s500ms");
        assert_eq!(prom_duration(3_600_000), "1h");
    }
}
