//! Fault suite: the host engine killed, restarted, stopped and resumed under scrapes; a GPU
//! lost at start or mid-run; the library gone in embedded mode; GPU bind/unbind events still
//! seen after a reconnect in either mode. The promises checked: no
//! panic, no DCGM series older than 2 x interval + 1 s, every outage recovered, healthy GPUs
//! exported throughout. The long version (100 cycles, a soak with RSS) is `bench -- faults`.

use crate::support::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn dcgm_series(p: &[Sample]) -> usize {
    p.iter().filter(|s| s.name.starts_with("DCGM_")).count()
}

fn gauge(p: &[Sample], name: &str) -> f64 {
    series(p, name)
        .first()
        .unwrap_or_else(|| panic!("no {name} on the page"))
        .value
}

fn failed_collections(p: &[Sample]) -> f64 {
    p.iter()
        .find(|s| s.name == "dcgm_exporter_collections_total" && s.label("result") == Some("error"))
        .map_or(0.0, |s| s.value)
}

fn temps_by_gpu(p: &[Sample]) -> Vec<String> {
    let mut g: Vec<String> = series(p, "DCGM_FI_DEV_GPU_TEMP")
        .iter()
        .filter_map(|s| s.label("gpu").map(str::to_string))
        .collect();
    g.sort();
    g
}

/// A profile under etc/sim/ with extra TOML appended, written to a temp dir.
fn profile_with(dir: &tempfile::TempDir, base: &str, extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(repo(&format!("etc/sim/{base}"))).expect("read profile");
    let p = dir.path().join(base);
    std::fs::write(&p, format!("{text}\n{extra}\n")).expect("write profile");
    p
}

/// Scrapes every 100 ms in the background and checks every page against the outage
/// windows the test declares: a page fetched entirely inside a window in which the engine
/// could not have produced a sample for longer than the served-age bound must hold no DCGM
/// series.
struct Scraper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(usize, Vec<String>)>>,
    /// When the engine stopped producing samples; `None` while it runs.
    down_since: Arc<Mutex<Option<Instant>>>,
}

impl Scraper {
    fn start(url: String, max_age: Duration) -> Scraper {
        let stop = Arc::new(AtomicBool::new(false));
        let down_since: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
        let (s, d) = (stop.clone(), down_since.clone());
        let thread = std::thread::spawn(move || {
            let mut pages = 0;
            let mut stale = Vec::new();
            while !s.load(Ordering::SeqCst) {
                let before = *d.lock().unwrap();
                let t = Instant::now();
                let got = http_get(&url);
                let after = *d.lock().unwrap();
                if let Ok((200, body)) = got {
                    pages += 1;
                    let page = parse(&body);
                    // Down for the whole request, and long enough that any sample is too old.
                    if let (Some(b), Some(a)) = (before, after) {
                        if a == b && t.duration_since(b) > max_age && dcgm_series(&page) > 0 {
                            stale.push(format!(
                                "{} DCGM series served {:.2}s after the engine went down",
                                dcgm_series(&page),
                                t.duration_since(b).as_secs_f64()
                            ));
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (pages, stale)
        });
        Scraper {
            stop,
            thread: Some(thread),
            down_since,
        }
    }

    fn engine_down(&self, since: Option<Instant>) {
        *self.down_since.lock().unwrap() = since;
    }

    fn finish(mut self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().expect("scraper thread")
    }
}

/// Polls until the page satisfies `pred` or `secs` pass; returns the page and the wait.
fn wait_for(e: &Exporter, secs: u64, what: &str, pred: impl Fn(&[Sample]) -> bool) -> Duration {
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(secs);
    loop {
        if let Ok(body) = e.try_get("/metrics") {
            if pred(&parse(&body)) {
                return t0.elapsed();
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {secs}s; exporter stderr:\n{}",
            e.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_no_panic(e: &Exporter) {
    let err = e.stderr();
    assert!(!err.contains("panicked"), "the exporter panicked:\n{err}");
}

#[test]
fn host_engine_killed_and_restarted_20_times_under_scrapes() {
    const INTERVAL_MS: u64 = 100;
    let port = free_port();
    let mut engine = HostEngine::start(port, Some("one-gpu.toml"));
    let e = exporter()
        .args(&[
            "-r",
            &format!("127.0.0.1:{port}"),
            "-c",
            &INTERVAL_MS.to_string(),
        ])
        .start();
    // 2 x interval + 1 s.
    let max_age = Duration::from_millis(2 * INTERVAL_MS + 1000);
    let scraper = Scraper::start(e.url("/metrics"), max_age);
    for cycle in 0..20 {
        engine.kill();
        scraper.engine_down(Some(Instant::now()));
        wait_for(&e, 10, "outage noticed", |p| {
            gauge(p, "dcgm_exporter_dcgm_connected") == 0.0 && dcgm_series(p) == 0
        });
        if cycle % 4 == 0 {
            // Down past the served-age bound, so that the scraper's check has pages to judge.
            std::thread::sleep(max_age + Duration::from_millis(300));
        }
        engine = HostEngine::start(port, Some("one-gpu.toml"));
        scraper.engine_down(None);
        wait_for(&e, 20, &format!("recovery after restart {cycle}"), |p| {
            series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 1
        });
    }
    let (pages, stale) = scraper.finish();
    assert!(stale.is_empty(), "stale samples served: {stale:#?}");
    assert!(pages >= 20, "only {pages} scrapes answered");
    let page = e.scrape();
    assert!(gauge(&page, "dcgm_exporter_reconnects_total") >= 20.0);
    assert!(failed_collections(&page) >= 20.0);
    assert_eq!(e.get("/ready").0, 200);
    assert_no_panic(&e);
}

#[test]
fn a_stopped_host_engine_withdraws_the_gpu_series_and_they_return_on_sigcont() {
    const INTERVAL_MS: u64 = 300;
    let port = free_port();
    let engine = HostEngine::start(port, Some("one-gpu.toml"));
    let e = exporter()
        .args(&[
            "-r",
            &format!("127.0.0.1:{port}"),
            "-c",
            &INTERVAL_MS.to_string(),
        ])
        .start();
    let max_age = Duration::from_millis(2 * INTERVAL_MS + 1000);
    let scraper = Scraper::start(e.url("/metrics"), max_age);

    signal(engine.child.id(), "STOP");
    let stopped = Instant::now();
    scraper.engine_down(Some(stopped));
    wait_for(&e, 10, "GPU series withdrawn while stopped", |p| {
        dcgm_series(p) == 0 && gauge(p, "dcgm_exporter_dcgm_connected") == 0.0
    });
    let page = e.scrape();
    assert!(failed_collections(&page) >= 1.0);
    // Self metrics stay.
    assert!(!series(&page, "dcgm_exporter_collections_total").is_empty());
    let (code, body) = e.get("/ready");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("no answer from DCGM"), "{body}");
    // Stay stopped well past the served-age bound: nothing may come back meanwhile.
    while stopped.elapsed() < max_age + Duration::from_millis(500) {
        assert_eq!(dcgm_series(&e.scrape()), 0);
        std::thread::sleep(Duration::from_millis(100));
    }

    signal(engine.child.id(), "CONT");
    scraper.engine_down(None);
    wait_for(&e, 10, "recovery after SIGCONT", |p| {
        series(p, "DCGM_FI_DEV_GPU_TEMP").len() == 1
            && gauge(p, "dcgm_exporter_dcgm_connected") == 1.0
    });
    assert_eq!(e.get("/ready").0, 200);
    let (_, stale) = scraper.finish();
    assert!(stale.is_empty(), "stale samples served: {stale:#?}");
    assert_no_panic(&e);
}

#[test]
fn a_gpu_falling_off_the_bus_takes_only_its_own_series() {
    let (_dir, ctl) = temp_file("control", "");
    let mut e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .control(&ctl)
        .args(&["-c", "200"])
        .start();
    assert_eq!(temps_by_gpu(&e.scrape()).len(), 8);
    control(&ctl, "gpu_lost 3");
    wait_for(&e, 10, "GPU 3's series gone", |p| {
        !temps_by_gpu(p).contains(&"3".to_string())
    });
    let page = e.scrape();
    assert_eq!(temps_by_gpu(&page), ["0", "1", "2", "4", "5", "6", "7"]);
    let left: Vec<_> = page
        .iter()
        .filter(|s| s.name.starts_with("DCGM_FI_DEV_") && s.label("gpu") == Some("3"))
        .collect();
    assert!(left.is_empty(), "{left:#?}");
    assert_eq!(e.get("/ready").0, 200);

    // Back on the bus: its watches were never removed.
    control(&ctl, "gpu_recovered 3");
    wait_for(&e, 10, "GPU 3 back", |p| temps_by_gpu(p).len() == 8);

    // Lost again, then a reload: the rediscovery leaves it out and keeps the others.
    control(&ctl, "gpu_lost 3");
    wait_for(&e, 10, "GPU 3 lost again", |p| temps_by_gpu(p).len() == 7);
    let reloads_before = e.stderr().matches("reloaded").count();
    signal(e.child.id(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while e.stderr().matches("reloaded").count() == reloads_before {
        assert!(Instant::now() < deadline, "no reload: {}", e.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        e.stderr().contains("GPU 3 is lost"),
        "no warning: {}",
        e.stderr()
    );
    wait_for(&e, 10, "collections after the reload", |p| {
        temps_by_gpu(p) == ["0", "1", "2", "4", "5", "6", "7"]
    });
    assert_eq!(e.get("/ready").0, 200);
    assert_no_panic(&e);
    assert!(e.signal_and_wait("TERM").success());
}

fn lost_at_start(attributes: &str) {
    let (dir, ctl) = temp_file("control", "");
    let profile = profile_with(
        &dir,
        "a100-mixed-mig.toml",
        "[[gpu]]\nid = 1\nlost = true\n",
    );
    let text = std::fs::read_to_string(&profile).unwrap();
    let text = text.replacen(
        "[node]\n",
        &format!("[node]\nlost_gpu_attributes = \"{attributes}\"\n"),
        1,
    );
    std::fs::write(&profile, text).unwrap();
    let e = exporter()
        .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
        .control(&ctl)
        .args(&["-c", "200"])
        .start();
    let page = e.scrape();
    // GPU 1 (a MIG GPU) is gone with its instances; the other seven stay.
    let gpus: std::collections::BTreeSet<&str> = page
        .iter()
        .filter(|s| s.name.starts_with("DCGM_FI_DEV_"))
        .filter_map(|s| s.label("gpu"))
        .collect();
    assert_eq!(
        gpus.into_iter().collect::<Vec<_>>(),
        ["0", "2", "3", "4", "5", "6", "7"]
    );
    assert!(page.iter().all(|s| s.label("gpu") != Some("1")));
    assert!(
        e.stderr().contains("GPU 1 is lost"),
        "no warning: {}",
        e.stderr()
    );
    assert_eq!(e.get("/ready").0, 200);

    // A MIG change on a healthy GPU rebuilds the watches without the lost one.
    let before = series(&page, "DCGM_FI_DEV_FB_USED")
        .iter()
        .filter(|s| s.label("gpu") == Some("3"))
        .count();
    control(&ctl, "mig 3 7g.80gb");
    wait_for(&e, 10, "MIG change on GPU 3 applied", |p| {
        let on3 = series(p, "DCGM_FI_DEV_FB_USED")
            .iter()
            .filter(|s| s.label("gpu") == Some("3"))
            .count();
        on3 != before && on3 > 0
    });
    let page = e.scrape();
    assert!(page.iter().all(|s| s.label("gpu") != Some("1")));
    assert_eq!(e.get("/ready").0, 200);
    assert_no_panic(&e);
}

#[test]
fn a_gpu_lost_at_start_reported_as_gpu_is_lost_leaves_the_others_exported() {
    lost_at_start("error");
}

#[test]
fn a_gpu_lost_at_start_reported_with_blank_attributes_leaves_the_others_exported() {
    lost_at_start("blank");
}

#[test]
fn a_selected_gpu_lost_at_start_is_skipped_not_a_selector_error() {
    let dir = tempfile::tempdir().unwrap();
    let profile = profile_with(
        &dir,
        "h100-8gpu-nvswitch.toml",
        "[[gpu]]\nid = 2\nlost = true\n",
    );
    let e = exporter()
        .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
        .args(&["-d", "g:1,2"])
        .start();
    assert_eq!(temps_by_gpu(&e.scrape()), ["1"]);
    assert!(e.stderr().contains("GPU 2 is lost"), "{}", e.stderr());
    // A GPU that does not exist at all is still an error.
    let (code, stderr) = exporter()
        .env("DCGM_SIM_PROFILE", profile.to_str().unwrap())
        .args(&["-d", "g:1,9"])
        .run_to_exit();
    assert_ne!(code, 0);
    assert!(stderr.contains("GPU 9 does not exist"), "{stderr}");
}

#[test]
fn a_rebuild_that_fails_after_a_mig_change_withdraws_the_page() {
    let (_dir, ctl, e) = controlled("a100-mixed-mig.toml");
    // Selects GPU instance 0 (on GPU 0) by id; it goes when GPU 0 leaves MIG mode.
    let e = e.args(&["-d", "i:0", "-c", "200"]).start();
    assert!(dcgm_series(&e.scrape()) > 0);
    control(&ctl, "mig 0 none");
    wait_for(&e, 10, "the page withdrawn", |p| dcgm_series(p) == 0);
    let (code, body) = e.get("/ready");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("the last collection failed") && body.contains("does not exist"),
        "{body}"
    );
    // Still connected: only the watches are rebuilt, on every tick until it works again.
    let page = e.scrape();
    assert_eq!(gauge(&page, "dcgm_exporter_dcgm_connected"), 1.0);
    let failures = failed_collections(&page);
    wait_for(&e, 10, "retries", |p| failed_collections(p) > failures);
    control(&ctl, "mig 0 1g.10gb,1g.10gb");
    wait_for(&e, 10, "recovered", |p| dcgm_series(p) > 0);
    assert_eq!(e.get("/ready").0, 200);
    assert_no_panic(&e);
}

#[test]
fn the_library_vanishing_in_embedded_mode_is_a_clear_error_not_a_crash() {
    let (_dir, ctl, b) = controlled("one-gpu.toml");
    let e = b.args(&["-c", "200"]).start();
    control(&ctl, "library_gone");
    wait_for(&e, 10, "series withdrawn", |p| {
        dcgm_series(p) == 0 && gauge(p, "dcgm_exporter_dcgm_connected") == 0.0
    });
    // It keeps trying (and failing) without crashing.
    let failures = failed_collections(&e.scrape());
    wait_for(&e, 10, "further attempts", |p| {
        failed_collections(p) > failures
    });
    let (code, body) = e.get("/ready");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("not connected"), "{body}");
    assert!(
        e.stderr().to_lowercase().contains("initialized")
            || e.stderr().to_lowercase().contains("uninitialized"),
        "no clear error in the log: {}",
        e.stderr()
    );
    assert_no_panic(&e);
    let alive = std::path::Path::new(&format!("/proc/{}", e.child.id())).exists();
    assert!(alive);
}

fn gpus_with_temp(p: &[Sample]) -> usize {
    series(p, "DCGM_FI_DEV_GPU_TEMP").len()
}

/// After a reconnect, a GPU unbound on the engine now in use still rebuilds the watches
/// (the bind/unbind watch polls through the collector's worker, so it follows the new
/// session), and once it works again /health has no line about it.
fn unbind_after_reconnect_rebuilds(e: &Exporter, ctl: &std::path::Path) {
    control(ctl, "gpu_unbind 3");
    wait_for(e, 20, "GPU 3 gone after the unbind event", |p| {
        gpus_with_temp(p) == 7 && !temps_by_gpu(p).contains(&"3".to_string())
    });
    e.wait_for_log(5, "reinitialization completed");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = e.get("/ready");
        if code == 200 && !body.contains("bind/unbind") {
            break;
        }
        assert!(Instant::now() < deadline, "/health: {code} {body}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_no_panic(e);
}

#[test]
fn bind_unbind_events_are_seen_after_an_embedded_engine_is_started_again() {
    let (_dir, ctl) = temp_file("control", "");
    let e = exporter()
        .control(&ctl)
        .args(&[
            "-c",
            "200",
            "--enable-gpu-bind-unbind-watch",
            "--gpu-bind-unbind-poll-interval=100ms",
        ])
        .start();
    wait_for(&e, 10, "8 GPUs", |p| gpus_with_temp(p) == 8);
    // The embedded engine's library is lost: the session is dead for good.
    control(&ctl, "library_gone");
    wait_for(&e, 10, "outage noticed", |p| {
        gauge(p, "dcgm_exporter_dcgm_connected") == 0.0 && dcgm_series(p) == 0
    });
    // An embedded engine started now works: the exporter reconnects.
    control(&ctl, "library_restored");
    wait_for(&e, 20, "reconnected", |p| {
        gauge(p, "dcgm_exporter_dcgm_connected") == 1.0 && gpus_with_temp(p) == 8
    });
    unbind_after_reconnect_rebuilds(&e, &ctl);
}

#[test]
fn bind_unbind_events_are_seen_after_the_remote_host_engine_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut engine = HostEngine::start(port, None);
    let e = exporter()
        .args(&[
            "-r",
            &format!("127.0.0.1:{port}"),
            "-c",
            "200",
            "--enable-gpu-bind-unbind-watch",
            "--gpu-bind-unbind-poll-interval=100ms",
        ])
        .start();
    wait_for(&e, 10, "8 GPUs", |p| gpus_with_temp(p) == 8);
    engine.kill();
    wait_for(&e, 10, "outage noticed", |p| {
        gauge(p, "dcgm_exporter_dcgm_connected") == 0.0 && dcgm_series(p) == 0
    });
    let ctl = write_in(dir.path(), "control", "");
    let _engine = HostEngine::start_with(port, None, Some(&ctl));
    wait_for(&e, 20, "reconnected", |p| {
        gauge(p, "dcgm_exporter_dcgm_connected") == 1.0 && gpus_with_temp(p) == 8
    });
    unbind_after_reconnect_rebuilds(&e, &ctl);
}

/// `DCGM_FI_PROF_GR_ENGINE_ACTIVE` of one GPU, if on the page.
fn gr_active(p: &[Sample], gpu: &str) -> Option<f64> {
    series(p, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        .into_iter()
        .find(|s| s.label("gpu") == Some(gpu))
        .map(|s| s.value)
}

/// `dcgm_exporter_profiling_rearms_total{gpu, action}` (0 when absent).
fn rearms(p: &[Sample], gpu: &str, action: &str) -> f64 {
    series(p, "dcgm_exporter_profiling_rearms_total")
        .into_iter()
        .find(|s| s.label("gpu") == Some(gpu) && s.label("action") == Some(action))
        .map_or(0.0, |s| s.value)
}

fn prof_stuck_gauge(p: &[Sample], gpu: &str) -> Option<f64> {
    series(p, "dcgm_exporter_profiling_stuck")
        .into_iter()
        .find(|s| s.label("gpu") == Some(gpu))
        .map(|s| s.value)
}

/// A busy GPU 0 (DCGM_FI_DEV_GPU_UTIL 100) whose profiling is healthy at first.
fn busy_gpu_exporter(ctl: &std::path::Path, extra: &[&str]) -> Exporter {
    std::fs::write(ctl, "set 0 203 100\n").unwrap();
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .control(ctl)
        .args(&["-c", "200"])
        .args(extra)
        .start();
    wait_for(&e, 10, "GPU 0 busy with its profiling read", |p| {
        gr_active(p, "0").is_some_and(|v| v > 0.0)
            && series(p, "DCGM_FI_DEV_GPU_UTIL")
                .iter()
                .any(|s| s.label("gpu") == Some("0") && s.value == 100.0)
    });
    e
}

/// NVIDIA/DCGM#303: after an XID 31 a GPU's profiling fields read 0 while
/// DCGM_FI_DEV_GPU_UTIL says it is busy, until DCGM's watch is re-armed. After
/// `--profiling-rearm-after` (3) stuck collections the exporter re-arms that GPU's profiling
/// watches: healed within a bounded number of intervals, shown by
/// `dcgm_exporter_profiling_rearms_total{action="rearm"}`, `dcgm_exporter_profiling_stuck`
/// and one log line per action; the other GPUs are never touched.
#[test]
fn stuck_profiling_on_a_busy_gpu_is_re_armed_and_heals() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("control");
    let e = busy_gpu_exporter(&ctl, &[]);
    assert_eq!(prof_stuck_gauge(&e.scrape(), "0"), Some(0.0));
    control(&ctl, "xid 0 31");
    control(&ctl, "prof_stuck 0");
    let t0 = Instant::now();
    wait_for(&e, 10, "GPU 0's profiling stuck at 0", |p| {
        gr_active(p, "0") == Some(0.0)
    });
    wait_for(&e, 10, "GPU 0's profiling re-armed and read again", |p| {
        gr_active(p, "0").is_some_and(|v| v > 0.0) && rearms(p, "0", "rearm") >= 1.0
    });
    // 3 stuck collections, the re-arm, the next sample: 200 ms each, with room for a
    // slow machine, and well under what an operator would notice.
    let healed = t0.elapsed();
    assert!(healed < Duration::from_secs(5), "healed after {healed:?}");
    let p = e.scrape();
    assert_eq!(rearms(&p, "0", "rearm"), 1.0, "{}", dump(&p));
    assert_eq!(rearms(&p, "0", "restart_engine"), 0.0);
    assert_eq!(prof_stuck_gauge(&p, "0"), Some(0.0));
    for gpu in ["1", "2", "7"] {
        assert_eq!(rearms(&p, gpu, "rearm"), 0.0, "GPU {gpu}");
        assert!(gr_active(&p, gpu).is_some_and(|v| v > 0.0), "GPU {gpu}");
    }
    let log = e.stderr();
    let lines = lines_with(&log, "profiling of GPU 0");
    assert_eq!(lines.len(), 2, "one line per action:\n{log}");
    assert!(
        lines[0].contains("re-arming its profiling watches"),
        "{log}"
    );
    assert!(lines[0].contains("DCGM_FI_DEV_GPU_UTIL is 100 %"), "{log}");
    assert!(lines[1].contains("reads again after 1 re-arm"), "{log}");
    assert_no_panic(&e);
}

/// A GPU whose profiling reads fail (-37, as DCGM#303's GetSamples) and that no re-arm heals:
/// after three re-arms (waits of N, 2N, 4N collections) the embedded host engine is
/// restarted, once, and the new engine's profiling reads again.
#[test]
fn profiling_that_re_arms_do_not_heal_restarts_the_embedded_engine_once() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("control");
    let e = busy_gpu_exporter(&ctl, &["--profiling-rearm-after", "2"]);
    control(&ctl, "xid 0 31");
    control(&ctl, "prof_stuck 0 -37 restart");
    wait_for(&e, 10, "GPU 0's profiling failing", |p| {
        gr_active(p, "0").is_none() && gr_active(p, "1").is_some()
    });
    wait_for(
        &e,
        30,
        "the engine restarted and GPU 0's profiling back",
        |p| rearms(p, "0", "restart_engine") == 1.0 && gr_active(p, "0").is_some_and(|v| v > 0.0),
    );
    let p = e.scrape();
    assert_eq!(rearms(&p, "0", "rearm"), 3.0, "{}", dump(&p));
    assert_eq!(prof_stuck_gauge(&p, "0"), Some(0.0));
    let log = e.stderr();
    assert_eq!(
        log.matches("restarting the embedded DCGM host engine")
            .count(),
        1,
        "{log}"
    );
    assert!(
        log.contains("started the embedded DCGM host engine"),
        "{log}"
    );
    // The new engine serves every GPU; nothing more is restarted.
    std::thread::sleep(Duration::from_secs(2));
    let p = e.scrape();
    assert_eq!(rearms(&p, "0", "restart_engine"), 1.0);
    assert_eq!(temps_by_gpu(&p).len(), 8);
    assert_no_panic(&e);
}

/// Sub-interval aggregation (issue 47) on DCGM: a 300 ms power spike between two
/// collections shows in `DCGM_FI_DEV_POWER_USAGE_interval_max` of its GPU (and of that GPU's
/// MIG instances), never in the gauge read at a collection nor on another GPU; each window
/// holds the ~20 samples DCGM took every 100 ms over a 2 s interval, read back in full
/// (`dcgmGetValuesSince_v2`). The fields are watched every 100 ms, and every other series
/// is the one an exporter without `--aggregate` serves.
#[test]
fn a_spike_between_two_collections_shows_in_the_max_series_only() {
    use crate::support::spikes::{check_spike, pages_through_spike};
    let dir = tempfile::tempdir().unwrap();
    let (ctl, log) = (dir.path().join("control"), dir.path().join("watches"));
    std::fs::write(&ctl, "").unwrap();
    let fields = "DCGM_FI_DEV_POWER_USAGE,DCGM_FI_DEV_GPU_TEMP,DCGM_FI_DEV_SM_CLOCK";
    let e = exporter()
        .profile("a100-mixed-mig.toml")
        .args(&["-c", "2000", "--aggregate", fields])
        .args(&["--aggregate-period", "100ms"])
        .control(&ctl)
        .env("DCGM_SIM_WATCH_LOG", log.to_str().unwrap())
        .start();
    let plain = exporter()
        .profile("a100-mixed-mig.toml")
        .args(&["-c", "2000"])
        .start();
    let pages = pages_through_spike(&e, &ctl, "spike 0 155 950 300 700", "0", 950.0, 30);
    check_spike(&pages[1..], "0", 950.0, 20.0, 10.0);
    let last = pages.last().unwrap();
    for row in ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK"] {
        let n = series(last, &format!("{row}_interval_samples")).len();
        assert_eq!(n, series(last, row).len(), "{row}: one window per series");
    }
    let watches = std::fs::read_to_string(&log).unwrap();
    assert!(
        watches
            .lines()
            .any(|l| l.starts_with("freq_us=100000 ") && l.ends_with("fields=100,150,155")),
        "{watches}"
    );
    // The drop-in series are unchanged beside the aggregates.
    let keys = |p: &[Sample]| -> std::collections::BTreeSet<String> {
        p.iter()
            .filter(|s| s.name.starts_with("DCGM_") && !s.name.contains("_interval_"))
            .map(|s| format!("{} {:?}", s.name, s.labels))
            .collect()
    };
    assert_eq!(keys(last), keys(&plain.scrape()));
    assert!(!plain.get("/metrics").1.contains("_interval_"));
    assert_no_panic(&e);
}

/// The event history (issue 47): an XID, a GPU falling off the bus, the host engine killed
/// and back, and a reload are events in that order, each on its entity and at its time (the
/// XID at DCGM's timestamp); `dcgm-exporter events --since 10m` against the running exporter
/// lists them in the same order, as a table and as JSON.
#[test]
fn the_event_history_lists_an_xid_a_lost_gpu_an_engine_restart_and_a_reload_in_order() {
    use crate::support::events::{events, events_command, has, position, wait_for_events};
    let dir = tempfile::tempdir().unwrap();
    let (ctl, ctl2) = (dir.path().join("control"), dir.path().join("control2"));
    std::fs::write(&ctl, "").unwrap();
    std::fs::write(&ctl2, "").unwrap();
    let port = free_port();
    let mut engine = HostEngine::start_with(port, None, Some(&ctl));
    let mut e = exporter()
        .args(&["-r", &format!("127.0.0.1:{port}"), "-c", "200"])
        .start();
    let t0 = std::time::SystemTime::now();
    control(&ctl, "xid 0 43");
    wait_for_events(&e, 10, "type=xid", |ev| has(ev, "xid", "gpu:0"));
    control(&ctl, "gpu_lost 1");
    wait_for_events(&e, 10, "", |ev| has(ev, "gpu_lost", "gpu:1"));
    engine.kill();
    let at = format!("engine:127.0.0.1:{port}");
    wait_for_events(&e, 10, "", |ev| has(ev, "engine_down", &at));
    // A new engine, without the old one's faults: GPU 1 is back with it.
    let _engine = HostEngine::start_with(port, None, Some(&ctl2));
    wait_for_events(&e, 20, "", |ev| {
        has(ev, "engine_up", &at) && has(ev, "gpu_found", "gpu:1")
    });
    signal(e.child.id(), "HUP");
    let all = wait_for_events(&e, 10, "since=10m", |ev| has(ev, "reload", "exporter"));
    // The engine's session at start comes first; then the happenings, in order.
    assert_eq!(position(&all, "engine_up", &at), Some(0), "{all:#?}");
    let mut order = vec![0];
    for (k, en) in [
        ("xid", "gpu:0"),
        ("gpu_lost", "gpu:1"),
        ("engine_down", at.as_str()),
        ("engine_up", at.as_str()),
        ("gpu_found", "gpu:1"),
        ("reload", "exporter"),
    ] {
        let from = order.last().unwrap() + 1;
        let at = position(&all[from..], k, en).unwrap_or_else(|| panic!("{k} {en}: {all:#?}"));
        order.push(from + at);
    }
    // Served in time order, each after the test began; the XID at DCGM's own time.
    let times: Vec<&str> = all.iter().map(|v| v["time"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:#?}");
    let t0_us = t0
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    let began = dcgm_exporter::model::events::rfc3339_us(t0_us);
    let xid = &all[order[1]];
    assert_eq!(xid["time_source"], "dcgm", "{xid}");
    assert_eq!(xid["details"]["xid"], 43, "{xid}");
    assert_eq!(xid["details"]["gpu"], 0, "{xid}");
    assert!(
        xid["time"].as_str().unwrap() >= began.as_str(),
        "{xid} {began}"
    );
    assert!(xid["time"].as_str() <= xid["recorded"].as_str(), "{xid}");
    assert_eq!(all[order[6]]["details"]["outcome"], "ok");
    assert_eq!(all[order[6]]["details"]["trigger"], "sighup", "{all:#?}");
    assert_eq!(all[order[2]]["severity"], "error");
    // Filters: one entity (and what lies within it), one type.
    let gpu1 = events(&e, "entity=gpu:1");
    assert!(gpu1.iter().all(|v| v["entity"] == "gpu:1"), "{gpu1:#?}");
    assert!(has(&gpu1, "gpu_lost", "gpu:1"));
    // The subcommand lists them in the same order.
    let addr = format!("127.0.0.1:{}", e.port);
    let (code, table, err) = events_command(&["--since", "10m", "-a", &addr]);
    assert_eq!(code, 0, "{err}");
    let line = |kind: &str, entity: &str| {
        table
            .lines()
            .position(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.get(1) == Some(&kind) && cols.get(2) == Some(&entity)
            })
            .unwrap_or_else(|| panic!("{kind} {entity} not listed:\n{table}"))
    };
    let lines = [
        line("xid", "gpu:0"),
        line("gpu_lost", "gpu:1"),
        line("engine_down", &at),
    ];
    assert!(lines.windows(2).all(|w| w[0] < w[1]), "{table}");
    // The engine's return: the engine_up line after its loss.
    let back = table
        .lines()
        .enumerate()
        .skip(lines[2])
        .any(|(_, l)| l.split_whitespace().nth(1) == Some("engine_up"));
    assert!(back, "{table}");
    assert!(table.starts_with("TIME"), "{table}");
    let (code, json, err) =
        events_command(&["--since", "10m", "-a", &addr, "--json", "--type", "xid"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["events"][0]["seq"], xid["seq"], "{json}");
    // An exporter that is not there: a clear error, exit 1.
    let (code, _, err) = events_command(&["-a", &format!("127.0.0.1:{}", free_port())]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot connect"), "{err}");
    assert_no_panic(&e);
    assert!(e.signal_and_wait("TERM").success());
}

/// The history keeps `--events-max-count` events: the oldest make room, and
/// `dcgm_exporter_events_dropped_total` counts them.
#[test]
fn the_event_history_drops_its_oldest_events_and_counts_them() {
    use crate::support::events::{events, wait_for_events};
    let (_dir, ctl, b) = controlled("h100-8gpu-nvswitch.toml");
    let e = b.args(&["-c", "200", "--events-max-count", "3"]).start();
    for gpu in 0..6 {
        control(&ctl, &format!("xid {gpu} 13"));
        let entity = format!("gpu:{gpu}");
        wait_for_events(&e, 10, "type=xid", |ev| {
            ev.iter().any(|v| v["entity"] == entity.as_str())
        });
    }
    let kept = events(&e, "");
    assert_eq!(kept.len(), 3, "{kept:#?}");
    assert_eq!(kept.last().unwrap()["entity"], "gpu:5");
    let p = e.scrape();
    let recorded = gauge(&p, "dcgm_exporter_events_recorded_total");
    let dropped = gauge(&p, "dcgm_exporter_events_dropped_total");
    assert!(dropped >= 3.0, "{dropped}");
    assert_eq!(recorded, dropped + 3.0);
    assert_no_panic(&e);
}

/// When the page was last collected (the exporter's own gauge).
fn last_collection(p: &[Sample]) -> f64 {
    p.iter()
        .find(|s| s.name == "dcgm_exporter_last_successful_collection_timestamp_seconds")
        .map_or(0.0, |s| s.value)
}

/// A 950 W spike on GPU 0 that a collection reads in, then a SIGHUP mid-interval: the
/// first two windows of the collector the reload builds never show the spike, and the
/// first holds less than a whole interval of samples (`-c 4000` at 100 ms: 40).
fn spike_then_reload(e: &Exporter, ctl: &std::path::Path) {
    let (max, samples) = (
        "DCGM_FI_DEV_POWER_USAGE_interval_max",
        "DCGM_FI_DEV_POWER_USAGE_interval_samples",
    );
    let first = e.scrape_until(30, |p| !series(p, samples).is_empty());
    // Read in by the next collection, the spike is over 300 ms later; the reload comes after.
    control(ctl, "spike 0 155 950 300");
    let t = last_collection(&first);
    let spiked = e.scrape_until(10, |p| last_collection(p) > t);
    std::thread::sleep(Duration::from_millis(800));
    let reloads = e.stderr().matches("reloaded").count();
    signal(e.child.id(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while e.stderr().matches("reloaded").count() == reloads {
        assert!(Instant::now() < deadline, "no reload: {}", e.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut t = last_collection(&spiked);
    for n in 0..2 {
        let p = e.scrape_until(15, |p| last_collection(p) > t);
        t = last_collection(&p);
        for s in series(&p, max) {
            assert_ne!(
                s.value, 950.0,
                "the old collector's spike after the reload: {s:?}"
            );
        }
        if n == 0 {
            for s in series(&p, samples) {
                assert!(s.value < 38.0, "{s:?}");
            }
        }
    }
}

/// Sub-interval aggregation across a reload (issue 47): the collector a SIGHUP builds
/// mid-interval starts its windows when it is built, so a spike the collector it replaced
/// saw, before the rebuild, reaches no window of the new one, and the new collector's first
/// window holds less than a whole interval of samples.
#[test]
fn a_reload_mid_interval_starts_the_windows_afresh() {
    let (_dir, ctl) = temp_file("control", "");
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["-c", "4000", "--aggregate", "DCGM_FI_DEV_POWER_USAGE"])
        .args(&["--aggregate-period", "100ms"])
        .control(&ctl)
        .start();
    spike_then_reload(&e, &ctl);
    assert_no_panic(&e);
}

/// A simulated remote host engine on the 8-GPU node whose clock runs `offset_ms` ahead of
/// this machine's (negative: behind), as an engine on another machine may.
fn engine_with_clock(dir: &std::path::Path, offset_ms: i64, ctl: &std::path::Path) -> HostEngine {
    let base = std::fs::read_to_string(repo("etc/sim/h100-8gpu-nvswitch.toml")).unwrap();
    let p = base.replacen(
        "[node]\n",
        &format!("[node]\nclock_offset_ms = {offset_ms}\n"),
        1,
    );
    assert_ne!(p, base, "the profile has a [node] table");
    let path = dir.join("clock.toml");
    std::fs::write(&path, p).unwrap();
    HostEngine::start_with(free_port(), Some(path.to_str().unwrap()), Some(ctl))
}

fn remote_aggregating(engine: &HostEngine, interval_ms: &str) -> Exporter {
    exporter()
        .args(&[
            "-r",
            &format!("127.0.0.1:{}", engine.port),
            "-c",
            interval_ms,
        ])
        .args(&[
            "--aggregate",
            "DCGM_FI_DEV_POWER_USAGE",
            "--aggregate-period",
            "100ms",
        ])
        .start()
}

/// The windows' positions are on DCGM's clock: with a remote engine 10 s ahead of this
/// machine, the collector a reload builds still counts none of the samples its
/// predecessor saw (the spike before the reload).
#[test]
fn a_remote_engine_ahead_of_this_clock_never_counts_a_replaced_collectors_samples() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("control");
    std::fs::write(&ctl, "").unwrap();
    let engine = engine_with_clock(dir.path(), 10_000, &ctl);
    let e = remote_aggregating(&engine, "4000");
    spike_then_reload(&e, &ctl);
    assert_no_panic(&e);
}

/// With a remote engine 10 s behind this machine, windows still come with the second
/// collection after start (the first has no samples since the build), not once the
/// engine's clock has caught up with the exporter's start.
#[test]
fn a_remote_engine_behind_this_clock_has_windows_from_the_second_collection() {
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("control");
    std::fs::write(&ctl, "").unwrap();
    let engine = engine_with_clock(dir.path(), -10_000, &ctl);
    let e = remote_aggregating(&engine, "1000");
    let samples = "DCGM_FI_DEV_POWER_USAGE_interval_samples";
    let mut t = last_collection(&e.scrape());
    let mut pages = Vec::new();
    for _ in 0..3 {
        let p = e.scrape_until(10, |p| last_collection(p) > t);
        t = last_collection(&p);
        let found = series(&p, samples).len();
        pages.push(found);
        if found > 0 {
            assert_eq!(found, 8, "{}", dump(&p));
            assert!(
                series(&p, samples).iter().all(|s| s.value >= 5.0),
                "{}",
                dump(&p)
            );
            assert_no_panic(&e);
            return;
        }
    }
    panic!(
        "no window in 3 collections (windows per page: {pages:?}): {}",
        e.stderr()
    );
}

/// Sub-interval aggregation and a GPU lost mid-interval (issue 47): its window holds the
/// samples taken before the loss and nothing after (DCGM stores blanks for a lost GPU, and
/// a blank never counts), then it has no window at all, while the other GPUs' go on.
#[test]
fn a_gpu_lost_mid_interval_keeps_only_its_samples_before_the_loss() {
    let (_dir, ctl) = temp_file("control", "");
    let e = exporter()
        .profile("h100-8gpu-nvswitch.toml")
        .args(&["-c", "2000", "--aggregate", "DCGM_FI_DEV_POWER_USAGE"])
        .args(&["--aggregate-period", "100ms"])
        .control(&ctl)
        .start();
    let samples = "DCGM_FI_DEV_POWER_USAGE_interval_samples";
    let of = |p: &[Sample], gpu: &str| {
        series(p, samples)
            .into_iter()
            .find(|s| s.label("gpu") == Some(gpu))
            .map(|s| s.value)
    };
    e.scrape_until(30, |p| of(p, "3").is_some_and(|n| n >= 15.0));
    control(&ctl, "gpu_lost 3");
    let check = |p: &[Sample]| {
        for s in series(p, "DCGM_FI_DEV_POWER_USAGE_interval_max") {
            assert!(s.value < 1e6, "a blank counted: {s:?}");
        }
        assert!(of(p, "3").is_none_or(|n| n <= 30.0), "{:?}", of(p, "3"));
    };
    let (page, _) = watch_until(&e, 20, check, |p| {
        of(p, "3").is_none() && of(p, "2").is_some()
    });
    assert_eq!(series(&page, samples).len(), 7, "{}", dump(&page));
    assert!(of(&page, "2").is_some_and(|n| n >= 10.0));
    assert_no_panic(&e);
}

/// An XID is an event whatever the counters: the GPU operator's profiling list
/// (etc/dcp-metrics-included.csv) has no `DCGM_EXP_XID_ERRORS_*` or health row, and its
/// XIDs still reach the history at DCGM's time, without adding a series to the page.
#[test]
fn an_xid_is_an_event_with_counters_that_have_no_xid_window() {
    use crate::support::events::wait_for_events;
    let (_dir, ctl, b) = controlled("h100-8gpu-nvswitch.toml");
    let dcp = repo("etc/dcp-metrics-included.csv");
    let e = b.args(&["-c", "200", "-f", dcp.to_str().unwrap()]).start();
    let before = e.scrape();
    control(&ctl, "xid 2 79");
    let xids = wait_for_events(&e, 10, "type=xid", |ev| {
        ev.iter().any(|v| v["entity"] == "gpu:2")
    });
    let xid = &xids[0];
    assert_eq!(xid["details"]["xid"], 79, "{xid}");
    assert_eq!(xid["time_source"], "dcgm", "{xid}");
    assert_eq!(xids.len(), 1, "{xids:#?}");
    // No series of an XID window, before or after.
    for p in [before, e.scrape()] {
        assert!(p.iter().all(|s| !s.name.starts_with("DCGM_EXP_XID")));
    }
    assert_no_panic(&e);
}

/// Where the event history and a reload cross: counters without an XID window (XIDs watched
/// for the history alone) reloaded into counters with one. The window's new watch reads
/// back the XID recorded before the reload, and it is still one event; an XID after the
/// reload is one event too, and counted in the new window.
#[test]
fn an_xid_before_a_reload_that_adds_an_xid_window_stays_one_event() {
    use crate::support::events::{has, wait_for_events};
    let (dir, ctl, b) = controlled("h100-8gpu-nvswitch.toml");
    let csv = dir.path().join("counters.csv");
    let dcp = std::fs::read_to_string(repo("etc/dcp-metrics-included.csv")).unwrap();
    std::fs::write(&csv, &dcp).unwrap();
    let e = b.args(&["-c", "200", "-f", csv.to_str().unwrap()]).start();
    control(&ctl, "xid 2 79");
    wait_for_events(&e, 10, "type=xid", |ev| has(ev, "xid", "gpu:2"));
    let window = "DCGM_EXP_XID_ERRORS_COUNT, gauge, XID errors seen in the last window by XID.\n";
    std::fs::write(&csv, format!("{dcp}{window}")).unwrap();
    signal(e.child.id(), "HUP");
    wait_for_events(&e, 10, "type=reload", |ev| {
        ev.iter().any(|v| v["details"]["outcome"] == "ok")
    });
    e.scrape_until(10, |p| !series(p, "DCGM_EXP_XID_ERRORS_COUNT").is_empty());
    control(&ctl, "xid 3 13");
    wait_for_events(&e, 10, "type=xid", |ev| has(ev, "xid", "gpu:3"));
    let counted = |p: &[Sample], gpu: &str, xid: &str| {
        series(p, "DCGM_EXP_XID_ERRORS_COUNT")
            .iter()
            .find(|s| s.label("gpu") == Some(gpu) && s.label("xid") == Some(xid))
            .map(|s| s.value)
    };
    let page = e.scrape_until(10, |p| counted(p, "3", "13").is_some());
    assert_eq!(counted(&page, "3", "13"), Some(1.0));
    assert_eq!(
        counted(&page, "2", "79"),
        Some(1.0),
        "the window reaches back before the reload"
    );
    // Three more collections read the same samples again: still one event each.
    std::thread::sleep(Duration::from_millis(600));
    let xids = crate::support::events::events(&e, "type=xid");
    let seen: Vec<(&str, i64)> = xids
        .iter()
        .map(|v| {
            (
                v["entity"].as_str().unwrap_or(""),
                v["details"]["xid"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(seen, [("gpu:2", 79), ("gpu:3", 13)], "{xids:#?}");
    assert_no_panic(&e);
}
