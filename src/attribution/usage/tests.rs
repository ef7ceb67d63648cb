//! The accountant over many collections: the sum rule, resets, lost samples, the clamp, the
//! idle window, the cap, exclusive and shared holding.

use super::families::{ALLOCATED_IDLE, ENERGY, IDLE_ENERGY, UTIL_SHARE};
use super::*;
use crate::attribution::nvml::UtilSample;
use crate::attribution::IdType;
use crate::model::naming::PromType;
use std::time::Duration;

const WINDOW: Duration = Duration::from_secs(60);

fn settings(max: usize) -> Settings {
    Settings {
        idle_window: WINDOW,
        max_consumers_per_gpu: max,
    }
}

/// One device's readings: (gpu index, energy mJ, utilisation %); GPU `n` has UUID `GPU-n`.
type Dev = (u32, Option<f64>, Option<f64>);

fn page_of(devs: &[Dev]) -> Page {
    let mut p = Page::default();
    for (g, e, u) in devs {
        let (gs, uuid) = (g.to_string(), format!("GPU-{g}"));
        let l = [
            ("gpu", gs.as_str()),
            ("UUID", uuid.as_str()),
            ("Hostname", "n"),
        ];
        if let Some(e) = e {
            let name = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";
            p.add(name, "h", PromType::Counter, &l, *e);
        }
        if let Some(u) = u {
            p.add("DCGM_FI_DEV_GPU_UTIL", "h", PromType::Gauge, &l, *u);
        }
    }
    p.set_field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156);
    p.set_field("DCGM_FI_DEV_GPU_UTIL", 203);
    p
}

fn key(g: u32) -> EntityKey {
    (format!("GPU-{g}"), None)
}

fn pod(name: &str, replica: bool) -> Consumer {
    Consumer {
        labels: vec![
            ("pod".into(), name.into()),
            ("namespace".into(), "ns".into()),
            ("container".into(), "c".into()),
        ],
        owner: Some(Owner::Pod(format!("uid-{name}"))),
        replica,
        source: super::KUBELET,
    }
}

/// A process whose samples over the interval are `samples` (memory in MiB).
fn proc(pid: u32, samples: &[u32], mib: u64) -> Process {
    Process {
        pid,
        gpu_instance: None,
        sm_util: samples.last().copied(),
        samples: samples
            .iter()
            .enumerate()
            .map(|(i, s)| UtilSample {
                timestamp_us: i as u64,
                sm_util: *s,
            })
            .collect(),
        memory_bytes: Some(mib << 20),
    }
}

/// One collection's world: who holds what, which processes run, whose they are.
#[derive(Default)]
struct World {
    consumers: HashMap<EntityKey, Vec<Consumer>>,
    processes: HashMap<String, Vec<Process>>,
    owners: HashMap<u32, Owner>,
    failed: std::collections::BTreeSet<&'static str>,
    unknown: HashMap<EntityKey, Vec<super::ledger::ConsumerId>>,
}

impl World {
    /// Pod `name` on GPU `g` (a replica when `shared`), running `procs` as its own.
    fn pod(mut self, g: u32, name: &str, shared: bool, procs: Vec<Process>) -> World {
        self.consumers
            .entry(key(g))
            .or_default()
            .push(pod(name, shared));
        for p in procs {
            self.owners.insert(p.pid, Owner::Pod(format!("uid-{name}")));
            self.processes
                .entry(format!("GPU-{g}"))
                .or_default()
                .push(p);
        }
        self
    }
}

/// A collection: readings, then the usage families on a fresh page (by family, the
/// series' pod label or "" -> value).
fn collect(
    a: &mut Accountant,
    devs: &[Dev],
    w: &World,
    now: Instant,
) -> (BTreeMap<String, u64>, Values) {
    let page = page_of(devs);
    let readings = a.read(&page, IdType::Uid);
    let inputs = Inputs {
        consumers: &w.consumers,
        processes: &w.processes,
        owners: &w.owners,
        failed: &w.failed,
        unknown: &w.unknown,
    };
    let dropped = a.account(readings, &inputs, now);
    let mut out = Page::default();
    a.add_to(&mut out, now);
    (dropped, values(&out))
}

/// (family, gpu, pod or "") -> value.
type Values = BTreeMap<(String, String, String), f64>;

fn values(p: &Page) -> Values {
    let mut out = BTreeMap::new();
    for f in p.families() {
        for s in f.series() {
            let get = |n: &str| {
                s.labels()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v.to_string())
                    .unwrap_or_default()
            };
            out.insert((f.name().to_string(), get("gpu"), get("pod")), s.value());
        }
    }
    out
}

fn get(v: &Values, family: &str, gpu: u32, pod: &str) -> Option<f64> {
    v.get(&(family.to_string(), gpu.to_string(), pod.to_string()))
        .copied()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6 * (1.0 + a.abs().max(b.abs()))
}

/// The joules a device's series went up by between two pages: its consumers' (one new
/// since `before` counts from 0) plus its idle energy.
fn booked(before: &Values, after: &Values, gpu: u32) -> f64 {
    after
        .iter()
        .filter(|((f, g, _), _)| (f == ENERGY || f == IDLE_ENERGY) && *g == gpu.to_string())
        .map(|(k, v)| v - before.get(k).copied().unwrap_or(0.0))
        .sum()
}

#[test]
fn energy_adds_up_over_many_intervals_with_pods_coming_and_going() {
    let mut a = Accountant::new(settings(64));
    let t0 = Instant::now();
    let mut energy = 5_000_000.0; // mJ
    let mut prev_energy: Option<f64> = None;
    let mut before = Values::new();
    let mut total_booked = 0.0;
    let mut total_delta = 0.0;
    for i in 0..200u32 {
        // Pods come and go: a is always there, b every other 7 intervals, c from 50 to 120.
        let mut w = World::default().pod(0, "a", true, vec![proc(100, &[i % 90, 30], 10)]);
        if (i / 7) % 2 == 0 {
            w = w.pod(0, "b", true, vec![proc(200, &[55, 65, 60], 20)]);
        }
        if (50..120).contains(&i) {
            w = w.pod(0, "c", true, vec![proc(300, &[70], 0), proc(301, &[40], 0)]);
        }
        // The driver reloads once (the counter starts again near 0); one sample is lost.
        energy = if i == 80 {
            1234.0
        } else {
            energy + 150_000.0 + f64::from(i % 13) * 1000.0
        };
        let e = (i != 140).then_some(energy);
        let util = f64::from(40 + i % 60);
        let now = t0 + Duration::from_secs(u64::from(i) * 30);
        let (_, after) = collect(&mut a, &[(0, e, Some(util))], &w, now);
        let delta = match (prev_energy, e) {
            (Some(p), Some(n)) if n < p => n / 1000.0,
            (Some(p), Some(n)) => (n - p) / 1000.0,
            _ => 0.0,
        };
        if e.is_some() {
            prev_energy = e;
        }
        let got = booked(&before, &after, 0);
        if i == 140 {
            assert!(close(got, 0.0), "a lost sample attributes nothing: {got}");
        } else {
            assert!(
                close(got, delta),
                "interval {i}: booked {got} J, the GPU used {delta} J"
            );
        }
        // The shares of one interval never exceed the GPU's utilisation.
        let shares: f64 = after
            .iter()
            .filter(|((f, _, _), _)| f == UTIL_SHARE)
            .map(|(_, v)| v)
            .sum();
        assert!(shares <= util + 1e-9, "interval {i}: {shares}");
        total_booked += got;
        total_delta += delta;
        before = after;
    }
    assert!(close(total_booked, total_delta));
    // A pod that left has no series (state only for those that exist now).
    assert_eq!(get(&before, ENERGY, 0, "c"), None);
    assert!(a.books[&key(0)].consumers.len() <= 3);
}

/// One failed kubelet `List` (a kubelet restart) names no pod: the pods are not taken for
/// gone. Their counters go on (never back to 0), the allocated-but-idle one keeps counting
/// from when it was first seen, and the interval's energy waits for known shares instead of
/// being booked as idle. After `MAX_UNKNOWN` failed collections in a row they are gone.
#[test]
fn a_failed_source_keeps_its_consumers_for_a_bounded_grace() {
    let mut a = Accountant::new(settings(64));
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let gpu = |e: f64| [(0, Some(e), Some(50.0))];
    let held = World::default()
        .pod(0, "a", true, vec![proc(1, &[50], 10)])
        .pod(0, "idle", true, vec![proc(2, &[0], 0)]);
    let mut failing = World::default();
    failing.failed.insert(super::KUBELET);
    failing.processes = held.processes.clone();
    collect(&mut a, &gpu(0.0), &held, at(0));
    let (_, v) = collect(&mut a, &gpu(100_000.0), &held, at(700));
    assert!(close(get(&v, ENERGY, 0, "a").unwrap(), 50.0), "{v:?}");
    assert_eq!(get(&v, ALLOCATED_IDLE, 0, "idle"), Some(1.0));
    // The kubelet fails: 100 J more, nobody named.
    let (_, v) = collect(&mut a, &gpu(200_000.0), &failing, at(730));
    assert!(
        close(get(&v, ENERGY, 0, "a").unwrap(), 50.0),
        "not reset: {v:?}"
    );
    assert_eq!(get(&v, ALLOCATED_IDLE, 0, "idle"), Some(1.0), "{v:?}");
    assert!(
        close(get(&v, IDLE_ENERGY, 0, "").unwrap(), 50.0),
        "not booked idle: {v:?}"
    );
    // It answers again: the waiting 100 J and the next 100 J are split by known shares.
    let (_, v) = collect(&mut a, &gpu(300_000.0), &held, at(760));
    assert!(close(get(&v, ENERGY, 0, "a").unwrap(), 150.0), "{v:?}");
    assert!(close(get(&v, IDLE_ENERGY, 0, "").unwrap(), 150.0), "{v:?}");
    assert_eq!(get(&v, ALLOCATED_IDLE, 0, "idle"), Some(1.0));
    // A source that keeps failing: the grace ends, then they are gone.
    let mut e = 300_000.0;
    for i in 0..ledger::MAX_UNKNOWN {
        e += 100_000.0;
        let (_, v) = collect(&mut a, &gpu(e), &failing, at(790 + 30 * i as u64));
        assert!(get(&v, ENERGY, 0, "a").is_some(), "collection {i}: {v:?}");
    }
    e += 100_000.0;
    let (_, v) = collect(&mut a, &gpu(e), &failing, at(2000));
    assert_eq!(get(&v, ENERGY, 0, "a"), None, "{v:?}");
    // A source that did not fail: its consumers missing now are gone at once.
    let mut a = Accountant::new(settings(64));
    collect(&mut a, &gpu(0.0), &held, at(0));
    let mut other = World::default();
    other.failed.insert(super::HPC);
    let (_, v) = collect(&mut a, &gpu(100_000.0), &other, at(30));
    assert_eq!(get(&v, ENERGY, 0, "a"), None, "{v:?}");
}

/// A failing part of a source (an HPC file that could not be read) keeps the consumers it
/// named, and only those: the others missing now are gone at once.
#[test]
fn unknown_consumers_are_kept_and_only_they() {
    let mut a = Accountant::new(settings(64));
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let gpu = |e: f64| [(0, Some(e), Some(50.0))];
    let held = World::default()
        .pod(0, "a", true, vec![proc(1, &[30], 10)])
        .pod(0, "b", true, vec![proc(2, &[20], 10)]);
    collect(&mut a, &gpu(0.0), &held, at(0));
    collect(&mut a, &gpu(100_000.0), &held, at(30));
    // Neither is named; only a's presence is unknown.
    let w = World {
        processes: held.processes.clone(),
        unknown: HashMap::from([(key(0), vec![held.consumers[&key(0)][0].labels.clone()])]),
        ..World::default()
    };
    let (_, v) = collect(&mut a, &gpu(200_000.0), &w, at(60));
    assert!(get(&v, ENERGY, 0, "a").is_some(), "{v:?}");
    assert_eq!(get(&v, ENERGY, 0, "b"), None, "{v:?}");
    // Its share unknown: the interval waits rather than going to idle.
    let idle = get(&v, IDLE_ENERGY, 0, "").unwrap();
    let (_, v2) = collect(&mut a, &gpu(300_000.0), &w, at(90));
    assert!(close(get(&v2, IDLE_ENERGY, 0, "").unwrap(), idle), "{v2:?}");
}

#[test]
fn a_counter_reset_counts_from_zero() {
    assert_eq!(ledger::delta_j(Some(9_000.0), Some(12_000.0)), Some(3.0));
    // Driver reload: the counter restarted and reads 2 J now.
    assert_eq!(ledger::delta_j(Some(9_000_000.0), Some(2_000.0)), Some(2.0));
    assert_eq!(ledger::delta_j(None, Some(2_000.0)), None);
    assert_eq!(ledger::delta_j(Some(2_000.0), None), None);
    let mut a = Accountant::new(settings(64));
    let t = Instant::now();
    let w = World::default().pod(0, "a", false, vec![]);
    collect(&mut a, &[(0, Some(9_000_000.0), Some(50.0))], &w, t);
    let (_, v) = collect(&mut a, &[(0, Some(2_000.0), Some(50.0))], &w, t);
    assert_eq!(get(&v, ENERGY, 0, "a"), Some(2.0));
}

#[test]
fn a_lost_sample_is_covered_by_the_next_delta_with_the_gap_shares() {
    let mut a = Accountant::new(settings(64));
    let t = Instant::now();
    let gpu = |e: Option<f64>| [(0, e, Some(100.0))];
    let w1 = World::default()
        .pod(0, "a", true, vec![proc(1, &[80], 0)])
        .pod(0, "b", true, vec![proc(2, &[0], 0)]);
    let w2 = World::default()
        .pod(0, "a", true, vec![proc(1, &[0], 0)])
        .pod(0, "b", true, vec![proc(2, &[40], 0)]);
    collect(&mut a, &gpu(Some(0.0)), &w1, t);
    // Lost: nothing booked, its shares (a 80 %) wait.
    let (_, v) = collect(&mut a, &gpu(None), &w1, t);
    assert_eq!(get(&v, ENERGY, 0, "a"), Some(0.0));
    assert_eq!(get(&v, UTIL_SHARE, 0, "a"), Some(80.0));
    // 100 J over the two intervals: a 80 % then 0 %, b 0 % then 40 %.
    let (_, v) = collect(&mut a, &gpu(Some(100_000.0)), &w2, t);
    assert!(close(get(&v, ENERGY, 0, "a").unwrap(), 40.0), "{v:?}");
    assert!(close(get(&v, ENERGY, 0, "b").unwrap(), 20.0), "{v:?}");
    assert!(close(get(&v, IDLE_ENERGY, 0, "").unwrap(), 40.0), "{v:?}");
    // A device that never reported energy has no energy series, and keeps nothing pending.
    let mut a = Accountant::new(settings(64));
    for _ in 0..(ledger::MAX_PENDING + 5) {
        let (_, v) = collect(&mut a, &gpu(None), &w1, t);
        assert_eq!(get(&v, ENERGY, 0, "a"), None);
        assert_eq!(get(&v, UTIL_SHARE, 0, "a"), Some(80.0));
    }
    assert_eq!(a.books[&key(0)].waiting(), (0, 0.0));
}

#[test]
fn shares_are_clamped_to_the_gpu_utilisation() {
    let mut a = Accountant::new(settings(64));
    let t = Instant::now();
    // 60 + 50 = 110 % of samples on a GPU DCGM saw 88 % busy.
    let mut w = World::default()
        .pod(0, "a", true, vec![proc(1, &[20, 100], 0), proc(3, &[0], 0)])
        .pod(0, "b", true, vec![proc(2, &[50], 0)])
        // Another pod's process on the same GPU, not holding it here: not counted.
        .pod(1, "z", false, vec![]);
    w.processes
        .get_mut("GPU-0")
        .unwrap()
        .push(proc(9, &[90], 100));
    collect(&mut a, &[(0, Some(0.0), Some(88.0))], &w, t);
    let (_, v) = collect(&mut a, &[(0, Some(10_000.0), Some(88.0))], &w, t);
    assert!(close(get(&v, UTIL_SHARE, 0, "a").unwrap(), 48.0), "{v:?}");
    assert!(close(get(&v, UTIL_SHARE, 0, "b").unwrap(), 40.0), "{v:?}");
    assert!(close(get(&v, ENERGY, 0, "a").unwrap(), 4.8));
    assert!(close(get(&v, ENERGY, 0, "b").unwrap(), 4.0));
    assert!(close(get(&v, IDLE_ENERGY, 0, "").unwrap(), 1.2));
    // Without a utilisation value the shares are kept within 100 %.
    let (_, v) = collect(&mut a, &[(0, Some(20_000.0), None)], &w, t);
    assert!(close(
        get(&v, UTIL_SHARE, 0, "a").unwrap(),
        60.0 * 100.0 / 110.0
    ));
    let mut raw = [30.0, 20.0];
    share::clamp(&mut raw, 80.0);
    assert_eq!(raw, [30.0, 20.0], "within the GPU's value: unchanged");
}

#[test]
fn exclusive_holders_get_the_whole_device_and_replicas_their_part() {
    let mut a = Accountant::new(settings(64));
    let t = Instant::now();
    // GPU 0 held whole by a pod whose processes are unknown; GPU 1 one replica of it used.
    let w = World::default().pod(0, "whole", false, vec![]).pod(
        1,
        "replica",
        true,
        vec![proc(7, &[25], 0)],
    );
    let devs = |e: f64| [(0, Some(e), Some(70.0)), (1, Some(e), Some(70.0))];
    collect(&mut a, &devs(1_000_000.0), &w, t);
    let (_, v) = collect(&mut a, &devs(1_200_000.0), &w, t);
    assert_eq!(get(&v, ENERGY, 0, "whole"), Some(200.0));
    assert_eq!(get(&v, IDLE_ENERGY, 0, ""), Some(0.0));
    assert_eq!(get(&v, UTIL_SHARE, 0, "whole"), Some(70.0));
    assert!(close(get(&v, ENERGY, 1, "replica").unwrap(), 50.0));
    assert!(close(get(&v, IDLE_ENERGY, 1, "").unwrap(), 150.0));
    assert_eq!(get(&v, UTIL_SHARE, 1, "replica"), Some(25.0));
    // A replica holder whose owner is unknown gets no series: its use cannot be told.
    let mut w = World::default().pod(1, "replica", true, vec![proc(7, &[25], 0)]);
    w.consumers.get_mut(&key(1)).unwrap()[0].owner = None;
    let (_, v) = collect(&mut a, &devs(1_400_000.0), &w, t);
    assert_eq!(get(&v, UTIL_SHARE, 1, "replica"), None);
    assert!(close(get(&v, IDLE_ENERGY, 1, "").unwrap(), 350.0));
    // A device no consumer holds keeps its idle counter: all of it is idle.
    assert_eq!(get(&v, IDLE_ENERGY, 0, ""), Some(200.0));
}

#[test]
fn allocated_idle_after_the_window_without_use() {
    let mut a = Accountant::new(settings(64));
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let idle_of = |v: &Values, p: &str| get(v, ALLOCATED_IDLE, 0, p);
    let world = |a_busy: bool, b_mem: u64| {
        World::default()
            .pod(
                0,
                "a",
                true,
                vec![proc(1, &[if a_busy { 5 } else { 0 }], 0)],
            )
            .pod(0, "b", true, vec![proc(2, &[0], b_mem)])
            .pod(1, "whole", false, vec![])
    };
    let devs = |u1: f64| [(0, Some(0.0), Some(50.0)), (1, Some(0.0), Some(u1))];
    let (_, v) = collect(&mut a, &devs(0.0), &world(false, 0), at(0));
    assert_eq!(idle_of(&v, "a"), Some(0.0));
    // Just before the window: not yet.
    let (_, v) = collect(&mut a, &devs(0.0), &world(false, 0), at(59));
    assert_eq!(idle_of(&v, "a"), Some(0.0));
    let (_, v) = collect(&mut a, &devs(0.0), &world(false, 0), at(60));
    assert_eq!(idle_of(&v, "a"), Some(1.0));
    assert_eq!(idle_of(&v, "b"), Some(1.0));
    assert_eq!(get(&v, ALLOCATED_IDLE, 1, "whole"), Some(1.0));
    // Utilisation (a), memory in use (b), the whole GPU busy: active again.
    let (_, v) = collect(&mut a, &devs(3.0), &world(true, 64), at(61));
    assert_eq!(idle_of(&v, "a"), Some(0.0));
    assert_eq!(idle_of(&v, "b"), Some(0.0));
    assert_eq!(get(&v, ALLOCATED_IDLE, 1, "whole"), Some(0.0));
    // Idle again a window after the last activity.
    let (_, v) = collect(&mut a, &devs(0.0), &world(false, 0), at(120));
    assert_eq!(idle_of(&v, "a"), Some(0.0));
    let (_, v) = collect(&mut a, &devs(0.0), &world(false, 0), at(121));
    assert_eq!(idle_of(&v, "a"), Some(1.0));
    // A pod that left and comes back starts its window again.
    collect(&mut a, &devs(0.0), &World::default(), at(122));
    let (_, v) = collect(&mut a, &devs(0.0), &world(false, 0), at(123));
    assert_eq!(idle_of(&v, "a"), Some(0.0));
}

#[test]
fn the_cap_keeps_the_first_consumers_and_counts_the_rest() {
    let mut a = Accountant::new(settings(2));
    let t = Instant::now();
    // Seen first, but its processes cannot be told: no series, and no place taken.
    let mut w = World::default().pod(0, "unknown", true, vec![]);
    w.consumers.get_mut(&key(0)).unwrap()[0].owner = None;
    for (i, p) in ["p1", "p2", "p3", "p4"].iter().enumerate() {
        w = w.pod(0, p, true, vec![proc(i as u32 + 1, &[10], 0)]);
    }
    w = w.pod(1, "q", false, vec![]);
    let devs = [(0, Some(0.0), Some(90.0)), (1, Some(0.0), Some(10.0))];
    let (dropped, v) = collect(&mut a, &devs, &w, t);
    assert_eq!(dropped, BTreeMap::from([("0".into(), 2), ("1".into(), 0)]));
    let shown = |v: &Values| -> Vec<String> {
        v.keys()
            .filter(|(f, g, _)| f == UTIL_SHARE && g == "0")
            .map(|(_, _, p)| p.clone())
            .collect()
    };
    assert_eq!(shown(&v), ["p1", "p2"]);
    // Counted once, not on every collection.
    let (dropped, _) = collect(&mut a, &devs, &w, t);
    assert_eq!(dropped, BTreeMap::from([("0".into(), 0), ("1".into(), 0)]));
    // p1 leaves: p3, seen next, gets its series; p4 stays counted.
    w.consumers
        .get_mut(&key(0))
        .unwrap()
        .retain(|c| c.labels[0].1 != "p1");
    let (dropped, v) = collect(&mut a, &devs, &w, t);
    assert_eq!(shown(&v), ["p2", "p3"]);
    assert_eq!(dropped[&"0".to_string()], 0);
    // p1 comes back: seen last now, it is the one left off.
    w = w.pod(0, "p1", true, vec![]);
    let (dropped, v) = collect(&mut a, &devs, &w, t);
    assert_eq!(shown(&v), ["p2", "p3"]);
    assert_eq!(dropped[&"0".to_string()], 1);
}

#[test]
fn mig_instances_and_identity_labels() {
    let mut page = Page::default();
    let l = [
        ("gpu", "3"),
        ("UUID", "GPU-3"),
        ("device", "nvidia3"),
        ("GPU_I_PROFILE", "3g.40gb"),
        ("GPU_I_ID", "2"),
        ("Hostname", "n"),
    ];
    page.add(
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
        "h",
        PromType::Counter,
        &l,
        7.5,
    );
    page.add("DCGM_FI_DEV_GPU_UTIL_RATIO", "h", PromType::Gauge, &l, 0.25);
    page.add(
        "DCGM_FI_DEV_GPU_TEMP",
        "h",
        PromType::Gauge,
        &[("gpu", "4")],
        1.0,
    );
    page.add(
        "DCGM_FI_DEV_GPU_UTIL",
        "h",
        PromType::Gauge,
        &[("nvlink", "1")],
        1.0,
    );
    // Two GPUs without UUIDs are two devices.
    for g in ["5", "6"] {
        page.add(
            "DCGM_FI_DEV_GPU_UTIL",
            "h",
            PromType::Gauge,
            &[("gpu", g), ("UUID", "")],
            1.0,
        );
    }
    // By field: 4.9.0's joules and ratio, whatever the names; an untagged family is none.
    page.set_field("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", 1611);
    page.set_field("DCGM_FI_DEV_GPU_UTIL_RATIO", 1613);
    page.set_field("DCGM_FI_DEV_GPU_UTIL", 203);
    page.add(
        "DCGM_FI_DEV_POWER_USAGE",
        "h",
        PromType::Gauge,
        &[("gpu", "7"), ("UUID", "GPU-7")],
        1.0,
    );
    page.add(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "h",
        PromType::Counter,
        &[("gpu", "8")],
        1.0,
    );
    let r = readings::read(&page, IdType::Uid);
    assert_eq!(r.len(), 3, "{r:?}");
    assert_eq!(r[1].key, ("gpu5".to_string(), None));
    assert_eq!(r[2].key, ("gpu6".to_string(), None));
    assert_eq!(r[0].key, ("GPU-3".to_string(), Some(2)));
    assert_eq!(r[0].pod_key, "3-2");
    assert_eq!(r[0].energy_mj, Some(7500.0));
    assert_eq!(r[0].util, Some(25.0));
    assert_eq!(r[0].labels.len(), l.len());
    // Processes on other instances of the GPU are not this instance's.
    let mut p = proc(1, &[50], 0);
    p.gpu_instance = Some(2);
    let mut q = proc(2, &[50], 0);
    q.gpu_instance = Some(1);
    let procs = [p, q];
    let on: Vec<u32> = share::on_entity(&procs, Some(2)).map(|p| p.pid).collect();
    assert_eq!(on, [1]);
    assert_eq!(share::on_entity(&procs, None).count(), 2);
}

#[test]
fn energy_waits_for_shares_while_nvml_gives_no_processes() {
    let mut a = Accountant::new(settings(64));
    let t = Instant::now();
    let gpu = |e: f64| [(0, Some(e), Some(100.0))];
    let w = World::default()
        .pod(0, "a", true, vec![proc(1, &[50], 0)])
        .pod(0, "b", true, vec![proc(2, &[25], 0)]);
    // NVML did not answer for GPU 0: its pods are still held, their shares unknown.
    let mut silent = World::default()
        .pod(0, "a", true, vec![])
        .pod(0, "b", true, vec![]);
    silent.processes.clear();
    collect(&mut a, &gpu(0.0), &silent, t);
    let (_, v) = collect(&mut a, &gpu(40_000.0), &silent, t);
    assert_eq!(get(&v, ENERGY, 0, "a"), Some(0.0), "waits: {v:?}");
    assert_eq!(get(&v, IDLE_ENERGY, 0, ""), Some(0.0));
    assert_eq!(get(&v, UTIL_SHARE, 0, "a"), None, "never known yet: {v:?}");
    // The next answer's shares split both intervals' energy.
    let (_, v) = collect(&mut a, &gpu(100_000.0), &w, t);
    assert!(close(get(&v, ENERGY, 0, "a").unwrap(), 50.0), "{v:?}");
    assert!(close(get(&v, ENERGY, 0, "b").unwrap(), 25.0), "{v:?}");
    assert!(close(get(&v, IDLE_ENERGY, 0, "").unwrap(), 25.0), "{v:?}");
    // A share once known stays on show while NVML is silent.
    let (_, v) = collect(&mut a, &gpu(110_000.0), &silent, t);
    assert_eq!(get(&v, UTIL_SHARE, 0, "a"), Some(50.0));
    // NVML gone for good: after MAX_UNKNOWN collections the energy (10 J, then 1 J each
    // time) is idle.
    let mut e = 110_000.0;
    let mut v = Values::new();
    for _ in 1..ledger::MAX_UNKNOWN {
        e += 1000.0;
        v = collect(&mut a, &gpu(e), &silent, t).1;
    }
    assert!(close(get(&v, ENERGY, 0, "a").unwrap(), 50.0), "{v:?}");
    let idle = 25.0 + 10.0 + (ledger::MAX_UNKNOWN - 1) as f64;
    assert!(close(get(&v, IDLE_ENERGY, 0, "").unwrap(), idle), "{v:?}");
    assert_eq!(a.books[&key(0)].waiting(), (0, 0.0));
}

/// Two host engines each with a gpu 0 without a UUID, and each with GPU instance 2 of a
/// GPU: four devices, the MIG ones keyed for pods by their parent's UUID.
#[test]
fn devices_of_several_engines_are_kept_apart() {
    let mut page = Page::default();
    page.set_field("DCGM_FI_DEV_GPU_UTIL", 203);
    for (engine, uuid) in [("a", "GPU-A"), ("b", "GPU-B")] {
        page.add(
            "DCGM_FI_DEV_GPU_UTIL",
            "h",
            PromType::Gauge,
            &[("gpu", "0"), ("UUID", ""), ("engine", engine)],
            1.0,
        );
        page.add(
            "DCGM_FI_DEV_GPU_UTIL",
            "h",
            PromType::Gauge,
            &[
                ("gpu", "1"),
                ("UUID", uuid),
                ("GPU_I_PROFILE", "1g.10gb"),
                ("GPU_I_ID", "2"),
                ("engine", engine),
            ],
            1.0,
        );
    }
    page.set_field("DCGM_FI_DEV_GPU_UTIL", 203);
    let r = readings::read(&page, IdType::Uid);
    let keys: Vec<(String, Option<u32>, String)> = r
        .iter()
        .map(|r| (r.key.0.clone(), r.key.1, r.pod_key.clone()))
        .collect();
    assert_eq!(
        keys,
        [
            ("GPU-A".to_string(), Some(2), "GPU-A/2".to_string()),
            ("GPU-B".into(), Some(2), "GPU-B/2".into()),
            ("a/gpu0".into(), None, "a/gpu0".into()),
            ("b/gpu0".into(), None, "b/gpu0".into()),
        ]
    );
}
