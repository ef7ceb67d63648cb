//! MIG placement against NVMLs that answer differently, re-partitions and a hung library.

use super::*;
use crate::attribution::nvml::MigWalk;
use crate::attribution::{Attribution, DeviceLabelSource, DeviceLabels, IdType, Options};
use crate::model::naming::PromType;
use crate::model::Page;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

const GPU: &str = "GPU-5fa7c6a1-3d2b-4e51-9a0c-7b1e2d3c4f00";

fn mig_uuid(n: usize) -> String {
    format!("MIG-11111111-2222-3333-4444-5555555555{n:02x}")
}

fn device(n: usize, gi: u32) -> MigDevice {
    MigDevice {
        uuid: mig_uuid(n),
        location: MigLocation {
            parent_uuid: GPU.into(),
            gpu_instance: gi,
        },
    }
}

/// How the fake answers the direct calls.
#[derive(Clone, Copy, PartialEq)]
enum Direct {
    /// As a driver: the device by UUID and its parent.
    Works,
    /// As DCGM's injection library: the handle comes back NULL.
    NullHandle,
}

/// A closed gate blocks every call until it is opened (a hung driver).
type Gate = Arc<(Mutex<bool>, Condvar)>;

#[derive(Clone)]
struct Fake {
    devices: Arc<Mutex<Vec<MigDevice>>>,
    direct: Direct,
    gate: Gate,
    calls: Arc<AtomicUsize>,
}

impl Fake {
    fn new(direct: Direct, devices: Vec<MigDevice>) -> Fake {
        Fake {
            devices: Arc::new(Mutex::new(devices)),
            direct,
            gate: Arc::new((Mutex::new(true), Condvar::new())),
            calls: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn pass(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let (lock, cv) = &*self.gate;
        let open = lock.lock().unwrap();
        let _open = cv.wait_while(open, |open| !*open).unwrap();
    }

    fn set_gate(&self, open: bool) {
        let (lock, cv) = &*self.gate;
        *lock.lock().unwrap() = open;
        cv.notify_all();
    }

    fn repartition(&self, devices: Vec<MigDevice>) {
        *self.devices.lock().unwrap() = devices;
    }
}

impl NvmlView for Fake {
    fn mig_location(&self, mig_uuid: &str) -> Result<MigLocation, String> {
        self.pass();
        match self.direct {
            Direct::NullHandle => Err(format!(
                "nvmlDeviceGetHandleByUUID({mig_uuid}) answered success with a NULL handle"
            )),
            Direct::Works => self
                .devices
                .lock()
                .unwrap()
                .iter()
                .find(|d| d.uuid == mig_uuid)
                .map(|d| d.location.clone())
                .ok_or_else(|| format!("NVML has no device {mig_uuid}: Not found")),
        }
    }

    fn mig_devices(&self) -> MigWalk {
        self.pass();
        MigWalk {
            devices: self.devices.lock().unwrap().clone(),
            problems: Vec::new(),
        }
    }

    fn processes(&self, _gpu_uuid: &str) -> Result<Vec<Process>, String> {
        self.pass();
        Ok(Vec::new())
    }
}

fn wanted(uuids: &[String]) -> BTreeSet<String> {
    uuids.iter().cloned().collect()
}

const WAIT: Duration = Duration::from_secs(5);

#[test]
fn the_walk_places_what_the_direct_calls_answer_with_null_handles() {
    let fake = Fake::new(Direct::NullHandle, vec![device(0, 2), device(1, 9)]);
    let (placed, failed) = locate(&fake, &[mig_uuid(1), mig_uuid(7)]);
    assert!(placed.contains(&device(1, 9)), "{placed:?}");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0, mig_uuid(7));
    // Both what the direct call said and what the walk saw.
    assert!(failed[0].1.contains("NULL handle"), "{}", failed[0].1);
    assert!(failed[0].1.contains("2 MIG device(s)"), "{}", failed[0].1);
}

#[test]
fn direct_answers_need_no_walk() {
    let fake = Fake::new(Direct::Works, vec![device(0, 2), device(1, 9)]);
    let (placed, failed) = locate(&fake, &[mig_uuid(0)]);
    assert_eq!((placed, failed), (vec![device(0, 2)], Vec::new()));
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
}

#[test]
fn the_cache_shrinks_across_a_re_partition() {
    // Seven 1g instances, then one 7g instance in their place.
    let seven: Vec<MigDevice> = (0..7).map(|n| device(n, 7 + n as u32)).collect();
    let fake = Fake::new(Direct::NullHandle, seven.clone());
    let (mut p, err) = Placer::new(Ok(Box::new(fake.clone())));
    assert!(err.is_none());
    let layout = |n: usize| -> Layout {
        (0..n)
            .map(|i| (GPU.to_string(), i.to_string(), "1g.10gb".to_string()))
            .collect()
    };
    p.observe(layout(7));
    let r = p.refresh(&wanted(&[mig_uuid(3)]), Vec::new(), WAIT);
    assert!(r.unplaced.is_empty(), "{:?}", r.unplaced);
    assert_eq!(p.lookup(&mig_uuid(3)).map(|l| l.gpu_instance), Some(10));
    // The walk's whole table is remembered.
    assert_eq!(p.cached(), 7);

    fake.repartition(vec![device(0x20, 0)]);
    p.observe(layout(1));
    assert_eq!(p.cached(), 0, "a layout change forgets every placement");
    assert_eq!(p.lookup(&mig_uuid(3)), None);
    let r = p.refresh(&wanted(&[mig_uuid(0x20)]), Vec::new(), WAIT);
    assert!(r.unplaced.is_empty(), "{:?}", r.unplaced);
    assert_eq!(p.cached(), 1);
    assert_eq!(
        p.lookup(&format!("{}::2", mig_uuid(0x20)))
            .map(|l| l.gpu_instance),
        Some(0)
    );

    // The same layout again is no change.
    p.observe(layout(1));
    assert_eq!(p.cached(), 1);
    // The collection's own MIG-change signal empties it too.
    p.layout_changed();
    assert_eq!(p.cached(), 0);
}

#[test]
fn the_cache_is_bounded() {
    let many: Vec<MigDevice> = (0..MAX_CACHED + 10)
        .map(|n| MigDevice {
            uuid: format!("MIG-{n:08}"),
            location: MigLocation {
                parent_uuid: GPU.into(),
                gpu_instance: n as u32,
            },
        })
        .collect();
    let fake = Fake::new(Direct::NullHandle, many);
    let (mut p, _) = Placer::new(Ok(Box::new(fake)));
    p.refresh(&wanted(&["MIG-00000001".to_string()]), Vec::new(), WAIT);
    assert!(p.cached() <= MAX_CACHED, "{}", p.cached());
}

/// Runs `f` on a thread and gives its result, or fails the test if it never returns (the
/// bound is far above the wait under test: it only catches a call that hangs).
fn returns<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the lookup hung with NVML")
}

#[test]
fn a_hung_nvml_call_holds_no_collection_and_is_asked_once() {
    let fake = Fake::new(Direct::Works, vec![device(0, 2)]);
    fake.set_gate(false);
    let (p, _) = Placer::new(Ok(Box::new(fake.clone())));
    let p = Arc::new(Mutex::new(p));
    let ask = |p: &Arc<Mutex<Placer>>| {
        let p = p.clone();
        returns(move || {
            p.lock().unwrap().refresh(
                &wanted(&[mig_uuid(0)]),
                vec![GPU.to_string()],
                Duration::from_millis(50),
            )
        })
    };
    let r = ask(&p);
    let problem = r.problem.expect("a stuck NVML is reported");
    assert!(problem.contains("has not answered"), "{problem}");
    assert_eq!(
        r.unplaced.get(&mig_uuid(0)).map(String::as_str),
        Some("NVML has not answered yet")
    );
    assert!(r.processes.is_none());
    // Later collections queue nothing behind the stuck call.
    for _ in 0..3 {
        let r = ask(&p);
        assert!(r.problem.is_some());
        assert_eq!(r.newly_unplaced, 0, "counted once while it stays unplaced");
    }
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1);

    // The call returns: its answer serves the next collection.
    fake.set_gate(true);
    let placed = (0..100).any(|_| {
        let r = ask(&p);
        r.unplaced.is_empty() && r.problem.is_none()
    });
    assert!(placed, "the late answer was never used");
    assert_eq!(
        p.lock()
            .unwrap()
            .lookup(&mig_uuid(0))
            .map(|l| l.gpu_instance),
        Some(2)
    );
}

#[test]
fn a_panicking_nvml_leaves_the_device_unplaced_with_why() {
    struct Panics;
    impl NvmlView for Panics {
        fn mig_location(&self, _: &str) -> Result<MigLocation, String> {
            panic!("inside NVML")
        }
        fn mig_devices(&self) -> MigWalk {
            MigWalk::default()
        }
        fn processes(&self, _: &str) -> Result<Vec<Process>, String> {
            Ok(Vec::new())
        }
    }
    let (mut p, _) = Placer::new(Ok(Box::new(Panics)));
    let r = p.refresh(&wanted(&[mig_uuid(0)]), Vec::new(), WAIT);
    assert_eq!(
        r.unplaced.get(&mig_uuid(0)).map(String::as_str),
        Some("the NVML call panicked")
    );
}

/// A label source naming MIG devices by UUID, as the container-runtime source does.
struct Names(Vec<String>);

impl DeviceLabelSource for Names {
    fn name(&self) -> &'static str {
        "test"
    }
    fn device_labels(&mut self) -> Result<Vec<DeviceLabels>, String> {
        Ok(self
            .0
            .iter()
            .map(|u| DeviceLabels {
                device_uuid: u.clone(),
                labels: vec![("container".into(), "trainer".into())],
            })
            .collect())
    }
}

fn opts() -> Options {
    Options {
        kubernetes: false,
        kubelet_socket: "/nonexistent".into(),
        id_type: IdType::Uid,
        resource_names: Vec::new(),
        virtual_gpus: false,
        old_names: false,
        pod_uid: false,
        pod_labels: false,
        dra: false,
        hpc_dir: None,
        kubelet_deadline: Duration::from_secs(1),
        kubelet_wait: Duration::from_secs(1),
        nvml_wait: WAIT,
        proc_root: "/nonexistent".into(),
        usage: None,
    }
}

/// GPU 0 with MIG instances `gis` (GPU_I_ID, profile).
fn page(gis: &[(&str, &str)]) -> Page {
    let mut page = Page::default();
    for (gi, profile) in gis {
        page.add(
            "DCGM_FI_DEV_GPU_TEMP",
            "temperature",
            PromType::Gauge,
            &[
                ("gpu", "0"),
                ("UUID", GPU),
                ("device", "nvidia0"),
                ("GPU_I_PROFILE", profile),
                ("GPU_I_ID", gi),
            ],
            40.0,
        );
    }
    page
}

fn self_metric(m: &prometheus::Registry, name: &str) -> f64 {
    m.gather()
        .iter()
        .find(|f| f.name() == name)
        .map(|f| {
            let s = &f.get_metric()[0];
            if s.counter.is_some() {
                s.get_counter().value()
            } else {
                s.get_gauge().value()
            }
        })
        .unwrap_or_else(|| panic!("no {name}"))
}

fn labelled(page: Page) -> Vec<String> {
    let text = String::from_utf8(crate::output::render::encode(&page)).unwrap();
    text.lines()
        .filter(|l| l.contains("container=\"trainer\""))
        .map(str::to_string)
        .collect()
}

#[test]
fn an_unplaced_mig_device_is_a_health_line_and_a_counter_until_placed() {
    let fake = Fake::new(Direct::NullHandle, vec![device(0, 2)]);
    let metrics = prometheus::Registry::new();
    let attribution_metrics = crate::attribution::metrics::Metrics::new();
    for c in attribution_metrics.collectors() {
        metrics.register(c).unwrap();
    }
    let mut a = Attribution::new(opts(), Some(Ok(Box::new(fake.clone()))))
        .with_source(Box::new(Names(vec![mig_uuid(1)])))
        .with_metrics(attribution_metrics);
    let layout = [("2", "3g.40gb")];
    let mut p = page(&layout);
    a.apply(&mut p);
    let notes = a.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("nvml: 1 MIG device(s) cannot be placed"),
        "{notes:?}"
    );
    assert!(notes[0].contains(&mig_uuid(1)), "{notes:?}");
    assert!(labelled(p).is_empty());
    let total = "dcgm_exporter_attribution_unplaced_devices_total";
    let now = "dcgm_exporter_attribution_unplaced_devices";
    assert_eq!(self_metric(&metrics, total), 1.0);
    assert_eq!(self_metric(&metrics, now), 1.0);
    assert_eq!(
        self_metric(&metrics, "dcgm_exporter_attribution_source_up"),
        0.0
    );
    // Still unplaced on the next collection: counted once.
    a.apply(&mut page(&layout));
    assert_eq!(self_metric(&metrics, total), 1.0);

    // Re-partitioned: the device now exists as GPU instance 5, and is placed at once.
    fake.repartition(vec![device(1, 5)]);
    let layout = [("5", "4g.40gb")];
    let mut p = page(&layout);
    a.apply(&mut p);
    assert!(a.notes().is_empty(), "{:?}", a.notes());
    assert_eq!(self_metric(&metrics, now), 0.0);
    assert_eq!(self_metric(&metrics, total), 1.0);
    let got = labelled(p);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].contains("GPU_I_ID=\"5\""), "{got:?}");
    assert_eq!(a.mig_cached(), 1);
}

#[test]
fn a_late_answer_s_samples_come_before_the_fresh_ones() {
    use crate::attribution::nvml::UtilSample;
    let proc_ = |pid: u32, ts: &[u64]| Process {
        pid,
        gpu_instance: None,
        sm_util: ts.last().map(|_| 50),
        samples: ts
            .iter()
            .map(|&t| UtilSample {
                timestamp_us: t,
                sm_util: 50,
            })
            .collect(),
        memory_bytes: None,
    };
    let late = HashMap::from([
        (
            "GPU-a".to_string(),
            Ok(vec![proc_(1, &[1, 2]), proc_(2, &[1])]),
        ),
        ("GPU-b".to_string(), Ok(vec![proc_(3, &[1])])),
        ("GPU-c".to_string(), Ok(vec![proc_(4, &[1])])),
    ]);
    let fresh = HashMap::from([
        ("GPU-a".to_string(), Ok(vec![proc_(1, &[3])])),
        ("GPU-b".to_string(), Err("NVML failed".to_string())),
    ]);
    let got = super::combine_processes(late, fresh);
    let stamps = |uuid: &str| -> Vec<(u32, Vec<u64>)> {
        got[uuid]
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| (p.pid, p.samples.iter().map(|s| s.timestamp_us).collect()))
            .collect()
    };
    // Process 2 is gone by the fresh answer; process 1 keeps every sample, in order.
    assert_eq!(stamps("GPU-a"), vec![(1, vec![1, 2, 3])]);
    // A GPU the fresh ask failed on, or did not ask about, keeps the late answer.
    assert_eq!(stamps("GPU-b"), vec![(3, vec![1])]);
    assert_eq!(stamps("GPU-c"), vec![(4, vec![1])]);
}
