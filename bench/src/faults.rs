//! `bench -- faults`: the long version of `tests/it/faults.rs`. The exporter, in remote mode
//! against `dcgm-sim-hostengine`, is scraped every 100 ms while the engine is killed and
//! restarted N times and stopped/resumed with SIGSTOP/SIGCONT, then soaks with RSS sampled.
//! Prints figures; asserts nothing.

use crate::{get, Killed};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Options {
    pub cycles: u32,
    pub stops: u32,
    pub soak: Duration,
    pub interval_ms: u64,
    pub profile: PathBuf,
    /// The repository root (for the counters CSV).
    pub root: PathBuf,
}

/// A simulated host engine of `bin` on `port`, once it has printed its listening line.
pub(crate) fn start_engine(bin: &Path, port: u16, profile: &Path) -> Result<Killed, String> {
    let mut child = Command::new(bin.join("dcgm-sim-hostengine"))
        .args(["-n", "-p", &port.to_string()])
        .env("DCGM_SIM_PROFILE", profile)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start dcgm-sim-hostengine: {e}"))?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(out).lines();
    match lines.next() {
        Some(Ok(l)) if l.contains("listening") => {}
        other => return Err(format!("host engine did not start: {other:?}")),
    }
    std::thread::spawn(move || for _ in lines {});
    Ok(Killed(child))
}

fn dcgm_series(body: &str) -> usize {
    body.lines().filter(|l| l.starts_with("DCGM_")).count()
}

fn connected(body: &str) -> bool {
    body.lines().any(|l| l == "dcgm_exporter_dcgm_connected 1")
}

/// Polls the page until `pred` holds; the time it took, or `None` after `limit`.
fn until(url: &str, limit: Duration, pred: impl Fn(&str) -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if get(url).is_ok_and(|b| pred(&b)) {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status();
}

fn vm_rss_kib(pid: u32) -> Option<u64> {
    crate::scale::status_kib(pid, "VmRSS:").ok()
}

fn ms(d: &[Duration], q: f64) -> f64 {
    if d.is_empty() {
        return f64::NAN;
    }
    let mut v: Vec<f64> = d.iter().map(|x| x.as_secs_f64() * 1e3).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * q) as usize]
}

pub fn run(bin: &Path, o: &Options) -> Result<(), String> {
    let port = crate::free_port()?;
    let web = crate::free_port()?;
    let mut engine = start_engine(bin, port, &o.profile)?;
    let exporter = Killed(
        Command::new(bin.join("dcgm-exporter"))
            .args(["-r", &format!("127.0.0.1:{port}")])
            .args(["-a", &format!("127.0.0.1:{web}")])
            .args(["-c", &o.interval_ms.to_string()])
            .arg("-f")
            .arg(o.root.join("etc/default-counters.csv"))
            .arg("--dcgm-library")
            .arg(bin.join("libdcgm.so.4"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("start exporter: {e}"))?,
    );
    let pid = exporter.0.id();
    let url = format!("http://127.0.0.1:{web}/metrics");
    until(&url, Duration::from_secs(60), |b| dcgm_series(b) > 0)
        .ok_or("the exporter served no DCGM series within 60 s")?;
    let max_age = Duration::from_millis(2 * o.interval_ms + 1000);

    // Background scraper: a page fetched while the engine has been down longer than the
    // served-age bound must hold no DCGM series.
    let down: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = {
        let (down, stop, url) = (down.clone(), stop.clone(), url.clone());
        std::thread::spawn(move || {
            let (mut pages, mut stale, mut failed) = (0u64, 0u64, 0u64);
            while !stop.load(Ordering::SeqCst) {
                let before = *down.lock().unwrap_or_else(|p| p.into_inner());
                let t = Instant::now();
                match get(&url) {
                    Ok(body) => {
                        pages += 1;
                        let after = *down.lock().unwrap_or_else(|p| p.into_inner());
                        if let (Some(b), Some(a)) = (before, after) {
                            if a == b && t.duration_since(b) > max_age && dcgm_series(&body) > 0 {
                                stale += 1;
                            }
                        }
                    }
                    Err(_) => failed += 1,
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (pages, stale, failed)
        })
    };
    let set_down = |v: Option<Instant>| *down.lock().unwrap_or_else(|p| p.into_inner()) = v;

    let (mut noticed, mut recovered, mut lost) = (Vec::new(), Vec::new(), 0u32);
    for _ in 0..o.cycles {
        drop(engine);
        set_down(Some(Instant::now()));
        if let Some(d) = until(&url, Duration::from_secs(30), |b| {
            !connected(b) && dcgm_series(b) == 0
        }) {
            noticed.push(d);
        }
        engine = start_engine(bin, port, &o.profile)?;
        set_down(None);
        match until(&url, Duration::from_secs(60), |b| dcgm_series(b) > 0) {
            Some(d) => recovered.push(d),
            None => lost += 1,
        }
    }

    let (mut withdrawn, mut resumed, mut stuck) = (Vec::new(), Vec::new(), 0u32);
    for _ in 0..o.stops {
        signal(engine.0.id(), "STOP");
        set_down(Some(Instant::now()));
        if let Some(d) = until(&url, Duration::from_secs(30), |b| dcgm_series(b) == 0) {
            withdrawn.push(d);
        }
        std::thread::sleep(max_age);
        signal(engine.0.id(), "CONT");
        set_down(None);
        match until(&url, Duration::from_secs(60), |b| dcgm_series(b) > 0) {
            Some(d) => resumed.push(d),
            None => stuck += 1,
        }
    }

    let rss0 = vm_rss_kib(pid).unwrap_or(0);
    let (mut rss_max, mut samples) = (rss0, 0u32);
    let soak_end = Instant::now() + o.soak;
    while Instant::now() < soak_end {
        std::thread::sleep(Duration::from_secs(10).min(o.soak));
        match vm_rss_kib(pid) {
            Some(r) => {
                rss_max = rss_max.max(r);
                samples += 1;
            }
            None => return Err("the exporter died during the soak".into()),
        }
    }
    let rss1 = vm_rss_kib(pid).ok_or("the exporter died")?;
    stop.store(true, Ordering::SeqCst);
    let (pages, stale, failed) = scraper.join().map_err(|_| "scraper thread panicked")?;

    let iv = o.interval_ms as f64;
    println!(
        "fault run: collect interval {} ms, profile {}",
        o.interval_ms,
        o.profile.display()
    );
    println!("scrapes                  {pages} answered, {failed} refused or failed");
    println!("stale pages              {stale}  (DCGM series served > 2 x interval + 1 s into an outage)");
    println!(
        "kill/restart cycles      {} (recovered {}, not recovered within 60 s {lost})",
        o.cycles,
        recovered.len()
    );
    println!(
        "  outage noticed after   p50 {:.0} ms, max {:.0} ms",
        ms(&noticed, 0.5),
        ms(&noticed, 1.0)
    );
    println!(
        "  recovered after restart p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({:.2} intervals at max)",
        ms(&recovered, 0.5),
        ms(&recovered, 0.99),
        ms(&recovered, 1.0),
        ms(&recovered, 1.0) / iv
    );
    println!(
        "SIGSTOP/SIGCONT cycles   {} (resumed {}, not within 60 s {stuck})",
        o.stops,
        resumed.len()
    );
    println!(
        "  series withdrawn after STOP  p50 {:.0} ms, max {:.0} ms (bound 2 x interval + 1 s = {} ms)",
        ms(&withdrawn, 0.5),
        ms(&withdrawn, 1.0),
        max_age.as_millis()
    );
    println!(
        "  values back after CONT       p50 {:.0} ms, max {:.0} ms ({:.2} intervals at max)",
        ms(&resumed, 0.5),
        ms(&resumed, 1.0),
        ms(&resumed, 1.0) / iv
    );
    println!(
        "soak                     {} s, {samples} RSS samples: start {:.1} MiB, max {:.1} MiB, end {:.1} MiB",
        o.soak.as_secs(),
        rss0 as f64 / 1024.0,
        rss_max as f64 / 1024.0,
        rss1 as f64 / 1024.0
    );
    Ok(())
}
