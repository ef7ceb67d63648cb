//! Several host engines in one exporter (`-r a,b,c`, `sources.dcgm.hostEngines`): three
//! simulated `nv-hostengine`s with different nodes, their series apart by the `engine`
//! label; one killed (-9) and one stopped (SIGSTOP) while the others keep serving with
//! values advancing; the killed one returning.

use crate::support::*;
use std::time::{Duration, Instant};

const TEMP: &str = "DCGM_FI_DEV_GPU_TEMP";
const ENERGY: &str = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";

fn of<'a>(page: &'a [Sample], name: &str, engine: &str) -> Vec<&'a Sample> {
    series(page, name)
        .into_iter()
        .filter(|s| s.label("engine") == Some(engine))
        .collect()
}

fn engine_up(page: &[Sample], engine: &str) -> Option<f64> {
    of(page, "dcgm_exporter_engine_up", engine)
        .first()
        .map(|s| s.value)
}

/// Every DCGM series of the page carries an engine label naming one of `engines`.
fn all_labelled(page: &[Sample], engines: &[&str]) {
    for s in page.iter().filter(|s| s.name.starts_with("DCGM_")) {
        let e = s.label("engine");
        assert!(
            e.is_some_and(|e| engines.contains(&e)),
            "{} without a known engine label: {:?}",
            s.name,
            s.labels
        );
    }
}

/// The energy counters of `engine`'s GPUs, by UUID.
fn energy(page: &[Sample], engine: &str) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = of(page, ENERGY, engine)
        .iter()
        .map(|s| (s.label("UUID").unwrap_or_default().to_string(), s.value))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Scrapes over several intervals: every counter of `engine` has grown on each.
fn advancing(e: &Exporter, engine: &str, intervals: usize) {
    // A page may lack a late engine's series for a round: start from one that has them.
    let mut before = energy(
        &e.scrape_until(10, |p| !energy(p, engine).is_empty()),
        engine,
    );
    for _ in 0..intervals {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = energy(&e.scrape(), engine);
            if now.len() == before.len()
                && now
                    .iter()
                    .zip(&before)
                    .all(|(a, b)| a.0 == b.0 && a.1 > b.1)
            {
                before = now;
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{engine}'s values stopped advancing: {before:?} -> {now:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A simulated host engine on a free port for each of `profiles`: (the ports, the engines,
/// their addresses).
fn engines(profiles: &[&str]) -> (Vec<u16>, Vec<HostEngine>, Vec<String>) {
    let ports: Vec<u16> = profiles.iter().map(|_| free_port()).collect();
    let engines = (ports.iter().zip(profiles))
        .map(|(p, prof)| HostEngine::start(*p, Some(prof)))
        .collect();
    let addr = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    (ports, engines, addr)
}

/// SIGTERM: a clean exit, else the exporter's log.
fn terminate(e: &mut Exporter) {
    let _ = status_within(
        std::process::Command::new("kill").args(["-TERM", &e.child.id().to_string()]),
        QUICK,
    );
    // Generous: the abandoned sessions of the stopped engine may still be ending, and
    // DCGM's shutdown has a deadline of its own (a timed-out one is not a clean exit).
    let st = e.exit_within(40, "no exit after SIGTERM");
    assert!(st.success(), "{st}: {}", e.stderr());
}

#[test]
fn three_engines_apart_one_killed_one_stopped_the_killed_one_returning() {
    let profiles = [
        "h100-8gpu-nvswitch.toml",
        "units-fixed.toml",
        "one-gpu.toml",
    ];
    let (ports, mut engines, addr) = engines(&profiles);
    // Three loopback engines all name this node: each is labelled by its address instead.
    let names: Vec<&str> = addr.iter().map(String::as_str).collect();
    let mut e = exporter()
        .args(&["-r", &addr.join(","), "-c", "300"])
        .env("NODE_NAME", "gpu-node-3")
        .start();
    let page = e.scrape_until(30, |p| {
        of(p, TEMP, names[0]).len() == 8
            && of(p, TEMP, names[1]).len() == 1
            && of(p, TEMP, names[2]).len() == 1
    });
    all_labelled(&page, &names);
    assert_eq!(series(&page, TEMP).len(), 10, "{}", dump(&page));
    // Each engine's values are its own node's: units-fixed's GPU is at 45 C.
    assert_eq!(of(&page, TEMP, names[1])[0].value, 45.0);
    for s in series(&page, TEMP) {
        assert_eq!(s.label("hostname"), Some("gpu-node-3"), "{:?}", s.labels);
    }
    // The DCGM_EXP_* series are per engine too.
    for n in &names {
        assert!(
            page.iter()
                .any(|s| s.name.starts_with("DCGM_EXP_") && s.label("engine") == Some(n)),
            "no DCGM_EXP_* series of {n}:\n{}",
            dump(&page)
        );
        assert_eq!(engine_up(&page, n), Some(1.0));
    }
    let (code, body) = e.get("/ready");
    assert_eq!(code, 200, "{body}");

    // Killed: its series go, the others keep serving.
    engines[1].kill();
    e.scrape_until(20, |p| {
        of(p, TEMP, names[1]).is_empty()
            && engine_up(p, names[1]) == Some(0.0)
            && of(p, TEMP, names[0]).len() == 8
    });
    advancing(&e, names[0], 3);
    advancing(&e, names[2], 3);
    let (code, body) = e.get("/ready");
    assert_eq!(code, 200, "degraded, not failed: {body}");
    assert!(
        body.contains(names[1]),
        "/health names the engine down: {body}"
    );

    // Stopped: a call to it hangs; its series go within the collection deadline, and
    // the remaining engine keeps advancing meanwhile.
    let stopped = engines[0].child.id();
    let sig = |s: &str| signal(stopped, s);
    sig("STOP");
    e.scrape_until(20, |p| {
        of(p, TEMP, names[0]).is_empty()
            && engine_up(p, names[0]) == Some(0.0)
            && of(p, TEMP, names[2]).len() == 1
    });
    advancing(&e, names[2], 4);
    let (code, body) = e.get("/ready");
    assert_eq!(code, 200, "{body}");

    // The killed one returns on its port: its series are back, with its own values.
    engines[1] = HostEngine::start(ports[1], Some(profiles[1]));
    let page = e.scrape_until(30, |p| of(p, TEMP, names[1]).len() == 1);
    assert_eq!(of(&page, TEMP, names[1])[0].value, 45.0);
    assert_eq!(engine_up(&page, names[1]), Some(1.0));
    advancing(&e, names[2], 2);
    let reconnects = of(&page, "dcgm_exporter_engine_reconnects_total", names[1]);
    assert!(reconnects[0].value >= 1.0, "{}", dump(&page));

    sig("CONT");
    e.scrape_until(60, |p| of(p, TEMP, names[0]).len() == 8);
    advancing(&e, names[0], 2);
    terminate(&mut e);
}

/// `-k` and `--low-cardinality` with two engines that both have a gpu 0: a pod holding
/// one engine's GPU (by UUID) labels that engine's series only, and each engine's data
/// series join on exactly one `DCGM_EXP_GPU_INFO` series of the same engine, which carries
/// that engine's UUID.
#[test]
fn kubernetes_and_low_cardinality_per_engine() {
    use crate::support::kubelet::{pod, FakeKubelet};
    let ports = [free_port(), free_port()];
    let mut engines = [
        HostEngine::start(ports[0], Some("h100-8gpu-nvswitch.toml")),
        HostEngine::start(ports[1], Some("one-gpu.toml")),
    ];
    let names = [
        format!("127.0.0.1:{}", ports[0]),
        format!("127.0.0.1:{}", ports[1]),
    ];
    let kubelet = FakeKubelet::start();
    let e = exporter()
        .args(&[
            "-r",
            &names.join(","),
            "-c",
            "300",
            "-k",
            "--low-cardinality",
        ])
        .args(&[
            "--pod-resources-kubelet-socket",
            kubelet.socket().to_str().unwrap(),
        ])
        .env("NODE_NAME", "gpu-node-3")
        .start();
    let info = |p: &[Sample], engine: &str, gpu: &str| -> Vec<String> {
        series(p, "DCGM_EXP_GPU_INFO")
            .into_iter()
            .filter(|s| s.label("engine") == Some(engine) && s.label("gpu") == Some(gpu))
            .map(|s| s.label("UUID").unwrap_or_default().to_string())
            .collect()
    };
    let page = e.scrape_until(30, |p| {
        info(p, &names[0], "7").len() == 1 && info(p, &names[1], "0").len() == 1
    });
    let (uuid_a, uuid_b) = (info(&page, &names[0], "0"), info(&page, &names[1], "0"));
    assert_eq!((uuid_a.len(), uuid_b.len()), (1, 1), "{}", dump(&page));
    assert_ne!(uuid_a, uuid_b, "two engines, two GPUs 0");
    // Every data series joins on one info series of its own engine; none keeps a UUID.
    for s in series(&page, TEMP) {
        let engine = s.label("engine").expect("engine label");
        assert_eq!(s.label("UUID"), None, "{:?}", s.labels);
        assert_eq!(info(&page, engine, s.label("gpu").unwrap()).len(), 1);
    }
    kubelet.set_pods(vec![
        pod("ns", "on-a", "c", &[("nvidia.com/gpu", &[&uuid_a[0]])]),
        pod("ns", "on-b", "c", &[("nvidia.com/gpu", &[&uuid_b[0]])]),
    ]);
    let page = e.scrape_until(20, |p| {
        series(p, TEMP)
            .iter()
            .any(|s| s.label("pod") == Some("on-a"))
            && series(p, TEMP)
                .iter()
                .any(|s| s.label("pod") == Some("on-b"))
    });
    for s in series(&page, TEMP) {
        let want = match (s.label("engine"), s.label("gpu")) {
            (Some(e), Some("0")) if e == names[0] => Some("on-a"),
            (Some(e), Some("0")) if e == names[1] => Some("on-b"),
            _ => None,
        };
        assert_eq!(s.label("pod"), want, "{:?}", s.labels);
    }
    // The info series are never copied to pods.
    assert!(series(&page, "DCGM_EXP_GPU_INFO")
        .iter()
        .all(|s| s.label("pod").is_none()));

    // Every engine gone: nothing served, /health fails.
    for en in &mut engines {
        en.kill();
    }
    let page = e.scrape_until(20, |p| {
        p.iter().all(|s| !s.name.starts_with("DCGM_"))
            && names.iter().all(|n| engine_up(p, n) == Some(0.0))
    });
    assert!(series(&page, TEMP).is_empty());
    let (code, body) = e.get("/ready");
    assert_eq!(code, 503, "{body}");
    e.wait_for_log(
        5,
        &format!("host engine {} ({}) is down", names[1], names[1]),
    );
}

/// `-d g:5` where one engine's node has 8 GPUs and the other's one: the start stops with
/// the one-engine error, naming the engine that lacks GPU 5 and the flag, exit 1 (on
/// main that engine's loop retried the selector every tick and the exporter served on).
#[test]
fn a_selector_one_engine_cannot_meet_stops_the_start_naming_it() {
    let (_, _engines, addr) = engines(&["h100-8gpu-nvswitch.toml", "one-gpu.toml"]);
    let mut e = exporter()
        .args(&["-r", &addr.join(","), "-d", "g:5", "-c", "300"])
        .spawn();
    let why = "still running with a selector an engine cannot meet";
    let code = e.exit_within(30, why).code();
    let log = e.stderr();
    assert_eq!(code, Some(1), "{log}");
    let fatal = log
        .lines()
        .find(|l| l.contains("level=fatal"))
        .unwrap_or_else(|| panic!("no fatal line:\n{log}"));
    assert!(
        fatal.contains(&format!("host engine {}", addr[1])),
        "the engine lacking GPU 5 is not named: {fatal}"
    );
    assert!(
        !fatal.contains(&format!("host engine {}", addr[0])),
        "the engine with GPU 5 is blamed: {fatal}"
    );
    assert!(fatal.contains("-d"), "the flag is not named: {fatal}");
}

/// Every line an engine's loop logs names its engine (`"engine":"NAME"` in JSON,
/// `engine=NAME` in text): its session lost and opened again here. On main only the
/// combiner's down/back lines said which engine. One engine: no engine field.
#[test]
fn each_engines_lines_name_it() {
    let (ports, mut engines, addr) = engines(&["one-gpu.toml"; 2]);
    let mut e = exporter()
        .args(&["-r", &addr.join(","), "-c", "300", "--log-format", "json"])
        .start();
    e.scrape_until(30, |p| of(p, TEMP, &addr[1]).len() == 1);
    engines[1].kill();
    e.wait_for_log(20, "lost the DCGM session");
    engines[1] = HostEngine::start(ports[1], Some("one-gpu.toml"));
    let connected = format!("connected to the DCGM host engine at {}", addr[1]);
    e.wait_for_log(30, &connected);
    let log = e.stderr();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let engine_of = |needle: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l["msg"].as_str().is_some_and(|m| m.contains(needle)))
            .map(|l| l["engine"].as_str().unwrap_or("(none)").to_string())
            .collect()
    };
    assert_eq!(
        engine_of("lost the DCGM session"),
        vec![addr[1].clone()],
        "{log}"
    );
    assert_eq!(engine_of(&connected), vec![addr[1].clone()], "{log}");
    // The start's own lines name nobody: they are the process's.
    assert_eq!(
        engine_of("mode: 2 remote DCGM host engines"),
        vec!["(none)"],
        "{log}"
    );
    terminate(&mut e);

    // One engine: today's lines, in text, without the field.
    let mut one = exporter().args(&["-r", &addr[0], "-c", "300"]).start();
    one.scrape_until(30, |p| !series(p, TEMP).is_empty());
    terminate(&mut one);
    assert!(!one.stderr().contains("engine="), "{}", one.stderr());
}

/// SIGTERM with three engines, one of them stopped (SIGSTOP) at that moment, its call
/// stuck: every engine's loop stops at once, and DCGM's shutdown has what is left of the
/// exit's one deadline: the exporter exits 0 within the bound docs/troubleshooting.md
/// states (10 s from the signal, as with one engine; two seconds more for a loaded machine).
/// On main the stop's 5 s and the shutdown's 10 s added up: 15 s.
#[test]
fn sigterm_with_one_of_three_engines_stopped_exits_within_the_bound() {
    let (_, engines, addr) = engines(&["one-gpu.toml"; 3]);
    let mut e = exporter()
        .args(&["-r", &addr.join(","), "-c", "300"])
        .start();
    e.scrape_until(30, |p| addr.iter().all(|a| of(p, TEMP, a).len() == 1));
    let stopped = engines[1].child.id();
    signal(stopped, "STOP");
    // Its call is stuck now (a collection every 300 ms, each waiting on it).
    std::thread::sleep(Duration::from_millis(700));
    let t0 = Instant::now();
    signal(e.child.id(), "TERM");
    let bound = Duration::from_secs(12);
    let st = loop {
        if let Ok(Some(st)) = e.child.try_wait() {
            break st;
        }
        if t0.elapsed() > bound {
            signal(stopped, "CONT");
            panic!("no exit {bound:?} after SIGTERM:\n{}", e.stderr());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = t0.elapsed();
    signal(stopped, "CONT");
    eprintln!("exit after SIGTERM with one engine stopped: {took:?}");
    assert!(st.success(), "{st}: {}", e.stderr());
}

/// The GPUs (UUIDs) of every device-info dump in `dir`, one list per file.
fn dumped_gpus(dir: &std::path::Path) -> Vec<Vec<String>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("deviceinfo-GPU-") && n.ends_with(".json"))
        })
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .map(|v| {
            v["gpus"]
                .as_array()
                .map(|g| {
                    g.iter()
                        .filter_map(|g| g["uuid"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// Issue 43 item 10, with two engines under `--backend auto`: the start-up log says NVML's
/// failover is off (main said "NVML loaded: it serves the core GPU series while DCGM
/// cannot" though no engine had it), the debug dumps' device info lists both engines' GPUs
/// (main: the first engine's only, 8 of 9), and `dcgm_exporter_reconnects_total` is the sum
/// of the engines' reconnects (main: 0 with `engine_reconnects_total` 1).
#[test]
fn several_engines_say_no_failover_dump_every_engines_gpus_and_count_reconnects() {
    let profiles = ["h100-8gpu-nvswitch.toml", "one-gpu.toml"];
    let (ports, mut engines, addr) = engines(&profiles);
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("dumps");
    let nvml = nvml_library();
    let mut e = exporter()
        .args(&[
            "-r",
            &addr.join(","),
            "-c",
            "300",
            "--dump-enabled",
            "--dump-directory",
            dumps.to_str().unwrap(),
            "--dump-compression=false",
        ])
        .nvml_fallback(&nvml)
        .start();
    e.scrape_until(30, |p| {
        of(p, TEMP, &addr[0]).len() == 8 && of(p, TEMP, &addr[1]).len() == 1
    });
    let log = e.stderr();
    assert!(!log.contains("it serves the core GPU series"), "{log}");
    assert!(
        log.contains("NVML failover is off with several host engines"),
        "{log}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = dumped_gpus(&dumps);
        if seen.iter().any(|g| {
            let mut u = g.clone();
            u.sort();
            u.dedup();
            u.len() == 9
        }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no device-info dump with both engines' 9 GPUs: {:?}",
            seen.iter().map(Vec::len).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    engines[1].kill();
    e.scrape_until(20, |p| engine_up(p, &addr[1]) == Some(0.0));
    engines[1] = HostEngine::start(ports[1], Some(profiles[1]));
    let page = e.scrape_until(30, |p| of(p, TEMP, &addr[1]).len() == 1);
    let per_engine: f64 = series(&page, "dcgm_exporter_engine_reconnects_total")
        .iter()
        .map(|s| s.value)
        .sum();
    let total = series(&page, "dcgm_exporter_reconnects_total")
        .first()
        .map_or(-1.0, |s| s.value);
    assert!(per_engine >= 1.0, "{}", dump(&page));
    assert_eq!(total, per_engine, "{}", dump(&page));
    terminate(&mut e);
}
