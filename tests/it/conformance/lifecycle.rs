//! Lifecycle conformance: the exporter through a process's life on dcgm-sim and on the real
//! DCGM 4.6 kit, embedded and remote. After each event (SIGHUP, the counters file rewritten
//! in place and replaced by a rename, GPU 1 unbound and bound again, SIGSTOP/SIGCONT, and in
//! remote mode GPU 1 lost and found again, the host engine killed with -9 and started
//! again, and GPU 1 split into a MIG instance) every DCGM series that should be there must be
//! on the page on each scrape of 6 intervals. The exporter serves a
//! sample only while it is fresh (at most an interval and a second old), so a series present
//! on every scrape was sampled anew each interval: the check is "present and advancing".
//! The observations of the two backends are then compared (`super::check_lines`). One field
//! is also aggregated between collections (`--aggregate`), so its windows live through the
//! same events.
//!
//! A lost GPU is made through DCGM's NVML-injection API (`c_api::lose_real`: the injected
//! NVML stops listing it, DCGM marks it Lost; the simulator's `gpu_lost`), which needs a
//! connection to the engine holding the GPUs: remote mode only, the embedded engine lives
//! inside the exporter. So is the re-partition (`c_api::partition_real`: a GPU instance added
//! to DCGM's MIG hierarchy with `dcgmCreateFakeEntities`; the injected NVML cannot change MIG,
//! and NVIDIA's own MIG re-configuration tests run on live GPUs only; the simulator's `mig`).
//! Its instance is a fake one in DCGM, whose framebuffer fields read blank, so the check is
//! that the other GPUs' series stay and GPU 1's come back from its instance.

use super::c_api::{lose_real, partition_real, unbind_real};
use super::Lines;
use crate::support::nvml_yaml::{uuid, Gpu};
use crate::support::real_dcgm::{kit, Kit, RealHostEngine, Scratch};
use crate::support::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The engine behind an exporter in remote mode, to kill and start again.
enum Engine {
    None,
    Sim(HostEngine, PathBuf),
    Real(RealHostEngine),
}

/// One backend in one mode: the exporter, how to unbind and bind GPU 1, how to lose and
/// find it (remote mode), its engine.
struct Run {
    exporter: Exporter,
    engine: Engine,
    csv: PathBuf,
    unbind: Box<dyn Fn(bool)>,
    lose: Box<dyn Fn(bool)>,
    partition: Box<dyn Fn()>,
    _dir: Scratch,
}

type Events = (Box<dyn Fn(bool)>, Box<dyn Fn(bool)>, Box<dyn Fn()>);

impl Run {
    /// `events`: how to unbind, lose and partition GPU 1.
    fn new(exporter: Exporter, engine: Engine, csv: PathBuf, events: Events, _dir: Scratch) -> Run {
        let (unbind, lose, partition) = events;
        Run {
            exporter,
            engine,
            csv,
            unbind,
            lose,
            partition,
            _dir,
        }
    }
}

const INTERVAL_MS: u64 = 1000;

/// Sampled every 100 ms between collections (issue 47): its four `_interval_` series are
/// on the page only for a window that holds samples, so "present on every scrape" is also
/// "DCGM watches it at the fast period again and hands back every sample since the last
/// read" after each event that rebuilds, re-watches or reconnects.
const AGGREGATED: &str = "DCGM_FI_DEV_POWER_USAGE";

fn exporter_args(csv: &Path) -> Vec<String> {
    [
        "-c",
        &INTERVAL_MS.to_string(),
        "-f",
        csv.to_str().expect("utf-8 path"),
        "--enable-gpu-bind-unbind-watch",
        "--gpu-bind-unbind-poll-interval=200ms",
        "--aggregate",
        AGGREGATED,
        "--aggregate-period",
        "100ms",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn scratch(name: &str) -> (Scratch, PathBuf) {
    let dir = Scratch::new(name);
    let csv = dir.0.join("counters.csv");
    std::fs::write(&csv, super::CSV).unwrap();
    (dir, csv)
}

fn sim(remote: bool) -> Run {
    let (dir, csv) = scratch(if remote { "life-sim-r" } else { "life-sim-e" });
    let ctl = dir.0.join("control");
    std::fs::write(&ctl, "").unwrap();
    let args = exporter_args(&csv);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (exporter, engine) = if remote {
        let port = free_port();
        let he = HostEngine::start_with(port, Some("real-kit.toml"), Some(&ctl));
        let e = exporter()
            .args(&["-r", &format!("127.0.0.1:{port}")])
            .args(&args)
            .start();
        (e, Engine::Sim(he, ctl.clone()))
    } else {
        let e = exporter()
            .profile("real-kit.toml")
            .control(&ctl)
            .args(&args)
            .start();
        (e, Engine::None)
    };
    let ctl2 = ctl.clone();
    let ctl3 = ctl.clone();
    let partition = Box::new(move || control(&ctl3, "mig 1 1g.10gb:1"));
    let unbind = Box::new(move |bound: bool| {
        control(&ctl, if bound { "gpu_bind 1" } else { "gpu_unbind 1" })
    });
    let lose = Box::new(move |lost: bool| {
        control(
            &ctl2,
            if lost {
                "gpu_lost 1"
            } else {
                "gpu_recovered 1"
            },
        )
    });
    Run::new(exporter, engine, csv, (unbind, lose, partition), dir)
}

fn real(kit: &'static Kit, remote: bool) -> Run {
    let (dir, csv) = scratch(if remote { "life-real-r" } else { "life-real-e" });
    let yaml = dir.yaml(&vec![Gpu::default(); 4]);
    // GPU 1's own UUID: the system-event file is the machine's (c_api::real).
    let own = format!(
        "GPU-{:08x}-3d2b-4e51-9a0c-7b1e2d3c4f01",
        std::process::id() ^ (u32::from(free_port()) << 16) ^ 0x5a5a
    );
    let text = std::fs::read_to_string(&yaml).unwrap();
    std::fs::write(&yaml, text.replace(&uuid(1), &own)).unwrap();
    let args = exporter_args(&csv);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let port = free_port();
    let (exporter, engine) = if remote {
        let he = RealHostEngine::start(kit, &yaml, &dir.0, port);
        (kit.remote(port).args(&args).start(), Engine::Real(he))
    } else {
        (kit.embedded(&yaml).args(&args).start(), Engine::None)
    };
    let lost_uuid = own.clone();
    let yaml2 = yaml.clone();
    let lose = Box::new(move |lost: bool| lose_real(kit, &yaml, port, &lost_uuid, lost));
    let partition = Box::new(move || partition_real(kit, &yaml2, port, 1));
    let unbind = Box::new(move |bound: bool| {
        let list = if bound { "bind" } else { "unbind" };
        let tmp = format!(
            "/run/nvml-injection/sys-event.yaml.tmp{}",
            std::process::id()
        );
        if bound {
            std::fs::write(&tmp, format!("{list}:\n  - {own}\n")).unwrap();
            std::fs::rename(&tmp, "/run/nvml-injection/sys-event.yaml").unwrap();
        } else {
            unbind_real(&own);
        }
    });
    Run::new(exporter, engine, csv, (unbind, lose, partition), dir)
}

/// Applies one event.
fn apply(run: &mut Run, event: &str) {
    let e = &run.exporter;
    let text = std::fs::read_to_string(&run.csv).unwrap();
    match event {
        "SIGHUP" => signal(e.child.id(), "HUP"),
        "counters rewritten in place" => {
            std::fs::write(&run.csv, format!("{text}# rewritten in place\n")).unwrap()
        }
        "counters replaced by a rename" => {
            let tmp = run.csv.with_extension("new");
            std::fs::write(&tmp, format!("{text}# replaced\n")).unwrap();
            std::fs::rename(&tmp, &run.csv).unwrap();
        }
        "GPU 1 unbound" => (run.unbind)(false),
        "GPU 1 bound again" => (run.unbind)(true),
        "GPU 1 lost" => (run.lose)(true),
        "GPU 1 found again" => (run.lose)(false),
        "GPU 1 split into a MIG instance" => (run.partition)(),
        "SIGSTOP, 3 s, SIGCONT" => {
            signal(e.child.id(), "STOP");
            std::thread::sleep(Duration::from_secs(3));
            signal(e.child.id(), "CONT");
        }
        "host engine killed (-9) and started again" => match &mut run.engine {
            Engine::Sim(he, ctl) => {
                let port = he.port;
                he.kill();
                *he = HostEngine::start_with(port, Some("real-kit.toml"), Some(ctl));
            }
            Engine::Real(he) => he.restart(kit().expect("the kit")),
            Engine::None => unreachable!("remote only"),
        },
        other => unreachable!("{other}"),
    }
}

/// What the page shows after an event, as `view` sees it: whether `want` came back within
/// 30 s, then on how many of 6 scrapes one interval apart every series of it was there,
/// whether the aggregated field's windows held samples taken every 100 ms, and /health.
fn observe_after(e: &Exporter, want: &Series, view: fn(&[Sample]) -> Series) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut now = view(&e.scrape());
    while &now != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        now = view(&e.scrape());
    }
    if &now != want {
        let missing: Vec<_> = want.difference(&now).take(4).collect();
        let extra: Vec<_> = now.difference(want).take(4).collect();
        return format!(
            "not back in 30 s: {} of {} missing (e.g. {missing:?}), {} extra (e.g. {extra:?})",
            want.difference(&now).count(),
            want.len(),
            now.difference(want).count()
        );
    }
    let mut complete = 0;
    // GPU 0's aggregated samples over the 6 scrapes: some 60 at 100 ms, 6 if the field were
    // watched at the interval again.
    let samples = format!("{AGGREGATED}_interval_samples");
    let mut sampled = 0.0;
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(INTERVAL_MS));
        let page = e.scrape();
        if view(&page).is_superset(want) {
            complete += 1;
        }
        sampled += page
            .iter()
            .filter(|s| s.name == samples && s.label("gpu") == Some("0"))
            .map(|s| s.value)
            .sum::<f64>();
    }
    // A loaded machine may let one sample age past the limit now and then.
    let steady = if complete >= 5 { "steady" } else { "gaps" };
    let windows = if sampled >= 30.0 {
        "100 ms windows".to_string()
    } else {
        format!("thin windows ({sampled} samples of GPU 0 in 6 scrapes)")
    };
    format!("back, {steady}, {windows}, /health {}", e.get("/health").0)
}

/// Runs every event on one backend; the observations by event.
fn life(mut run: Run, remote: bool) -> Lines {
    let mut out = Lines::new();
    let all = dcgm_series(&run.exporter.scrape_until(30, |p| {
        p.iter().any(|s| {
            s.name == "dcgm_exporter_collections_total"
                && s.label("result") == Some("success")
                && s.value >= 2.0
        })
    }));
    out.insert(
        "life: series at start".into(),
        format!("{} on GPUs {:?}", all.len(), gpus_of(&all)),
    );
    let without_1: Series = all
        .iter()
        .filter(|s| s.1.as_deref() != Some("1"))
        .cloned()
        .collect();
    let mut events = vec![
        "SIGHUP",
        "counters rewritten in place",
        "counters replaced by a rename",
        "GPU 1 unbound",
        "GPU 1 bound again",
        "SIGSTOP, 3 s, SIGCONT",
    ];
    if remote {
        events.extend(["GPU 1 lost", "GPU 1 found again"]);
        events.push("host engine killed (-9) and started again");
        // Last: a restarted engine (the simulator's replays its control file) would not
        // agree on the layout after it.
        events.push("GPU 1 split into a MIG instance");
    }
    let mut on_instance = without_1.clone();
    on_instance.insert(instance_marker());
    for event in events {
        apply(&mut run, event);
        let (want, view): (&Series, fn(&[Sample]) -> Series) = match event {
            "GPU 1 unbound" | "GPU 1 lost" => (&without_1, dcgm_series),
            "GPU 1 split into a MIG instance" => (&on_instance, instance_view),
            _ => (&all, dcgm_series),
        };
        let seen = observe_after(&run.exporter, want, view);
        out.insert(format!("life: after {event}"), seen);
    }
    assert!(
        !run.exporter.stderr().contains("panicked"),
        "{}",
        run.exporter.stderr()
    );
    out
}

/// Stands for "GPU 1's series are served from its GPU instance".
fn instance_marker() -> (String, Option<String>) {
    ("series of GPU 1's GPU instance".into(), Some("1".into()))
}

/// The page after GPU 1 was split: the other GPUs' DCGM series, and the marker while some
/// series of GPU 1 carries its instance (`GPU_I_ID`). A fake instance of the real DCGM and
/// a simulated one serve different fields (framebuffer fields read blank on the fake).
fn instance_view(page: &[Sample]) -> Series {
    let mut s: Series = dcgm_series(page)
        .into_iter()
        .filter(|(_, gpu)| gpu.as_deref() != Some("1"))
        .collect();
    if page.iter().any(|x| {
        x.name.starts_with("DCGM_FI_")
            && x.label("gpu") == Some("1")
            && x.label("GPU_I_ID").is_some()
    }) {
        s.insert(instance_marker());
    }
    s
}

fn gpus_of(s: &Series) -> Vec<&str> {
    let mut g: Vec<&str> = s.iter().filter_map(|x| x.1.as_deref()).collect();
    g.sort();
    g.dedup();
    g
}

/// Every event's expected answer on its own (what the simulator must show without the kit).
pub fn check_alone(mode: &str, o: &Lines) {
    for (k, v) in o {
        if k.starts_with("life: after") {
            assert!(
                v.starts_with("back, steady, 100 ms windows, /health 200"),
                "{mode}: {k}: {v}"
            );
        }
    }
}

pub fn sim_life(remote: bool) -> Lines {
    life(sim(remote), remote)
}

pub fn real_life(remote: bool) -> Option<Lines> {
    let kit = kit()?;
    // One test at a time writes the machine's system-event file.
    let _lock = super::c_api::event_file_lock();
    Some(life(real(kit, remote), remote))
}
