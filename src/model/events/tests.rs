use super::*;
use crate::model::node::{Gpu, Instance, Topology};
use dcgm_sys::{Entity, EntityGroup, HealthIncident, HealthResponse};

fn kinds(r: &Recorder) -> Vec<(Kind, String)> {
    r.query(&Filter::default())
        .events
        .iter()
        .map(|e| (e.kind, e.entity.clone()))
        .collect()
}

fn gpu(id: u32) -> Gpu {
    Gpu {
        id,
        uuid: format!("GPU-{id}"),
        pci_bus_id: String::new(),
        model: String::new(),
    }
}

#[test]
fn the_oldest_events_make_room_and_are_counted() {
    let r = Recorder::new(Bounds {
        max_events: 3,
        max_bytes: 1 << 20,
    });
    for i in 0..5 {
        r.engine_up(&format!("e{i}"));
    }
    let found = r.query(&Filter::default());
    let seqs: Vec<u64> = found.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [3, 4, 5]);
    assert_eq!((r.recorded(), r.dropped(), found.kept), (5, 2, 3));
    // By bytes: each event is about the same size, so a bound of two and a half keeps two.
    let one = found.events[0].size();
    r.set_bounds(Bounds {
        max_events: 100,
        max_bytes: one * 5 / 2,
    });
    assert_eq!(r.query(&Filter::default()).events.len(), 2);
    assert_eq!(r.dropped(), 3);
    r.engine_up("e9");
    let found = r.query(&Filter::default());
    assert!(
        found.bytes <= one * 5 / 2,
        "{} > {}",
        found.bytes,
        one * 5 / 2
    );
    assert_eq!(found.events.last().unwrap().entity, "engine:e9");
    // A count of 0: no history at all.
    r.set_bounds(Bounds {
        max_events: 0,
        max_bytes: 1 << 20,
    });
    r.engine_up("e10");
    assert!(r.query(&Filter::default()).events.is_empty());
}

#[test]
fn long_texts_are_cut_so_an_event_stays_small() {
    let r = Recorder::new(Bounds::default());
    r.web_config_refused("invalid", &"é".repeat(5000));
    let e = &r.query(&Filter::default()).events[0];
    assert!(e.message.len() <= MAX_TEXT + 3, "{}", e.message.len());
    assert!(e.size() < MIN_MAX_BYTES);
}

#[test]
fn filters_by_time_type_entity_and_limit() {
    let r = Recorder::new(Bounds::default());
    r.dcgm_xid(Entity::gpu(0), 79, 1_000, "GPU has fallen off the bus");
    r.dcgm_xid(Entity::gpu(1), 13, 3_000, "Graphics Engine Exception");
    r.nvml_xid(0, (Some(1), None), 31, "MMU Error");
    r.engine_down("embedded", "gone");
    let all = r.query(&Filter::default()).events;
    // In time order: the DCGM timestamps are long ago, ours now.
    assert_eq!(all[0].time_us, 1_000);
    assert_eq!(all[0].source, TimeSource::Dcgm);
    assert_eq!(all[0].detail("xid"), Some(&Detail::Int(79)));
    let q = |f: Filter| -> Vec<String> {
        r.query(&f)
            .events
            .iter()
            .map(|e| e.entity.clone())
            .collect()
    };
    let gpu0 = Filter {
        entities: vec!["gpu:0".into()],
        ..Filter::default()
    };
    assert_eq!(q(gpu0), ["gpu:0", "gpu:0/gi:1"]);
    let since = Filter {
        since_us: Some(2_000),
        kinds: vec![Kind::Xid],
        ..Filter::default()
    };
    assert_eq!(q(since), ["gpu:1", "gpu:0/gi:1"]);
    let last = Filter {
        limit: Some(1),
        ..Filter::default()
    };
    assert_eq!(q(last), ["engine:embedded"]);
    assert!(!within("gpu:10", "gpu:1"));
    assert!(within("gpu:1/link:2", "gpu:1"));
}

#[test]
fn an_xid_read_again_is_not_a_new_event() {
    let r = Recorder::new(Bounds::default());
    r.dcgm_xid(Entity::gpu(0), 79, 1_000, "x");
    r.dcgm_xid(Entity::gpu(0), 79, 1_000, "x");
    r.dcgm_xid(Entity::gpu(0), 43, 900, "x");
    r.dcgm_xid(Entity::gpu(0), 43, 1_001, "x");
    assert_eq!(r.recorded(), 2);
}

#[test]
fn gpus_lost_found_unbound_and_bound() {
    let r = Recorder::new(Bounds::default());
    let t = Topology {
        gpus: vec![gpu(0), gpu(1)],
        lost_gpus: vec![2],
        ..Topology::default()
    };
    // At start: only what is wrong.
    r.topology(&t);
    assert_eq!(kinds(&r), [(Kind::GpuLost, "gpu:2".to_string())]);
    // Each collection: a change is one event, a state seen again none.
    r.gpus(&[0, 1, 2], &[0, 1, 2], &[1, 2]);
    r.gpus(&[0, 1, 2], &[0, 1, 2], &[1, 2]);
    r.gpus(&[0, 1, 2], &[1, 2], &[2]);
    // A rebuild agrees with what the collections saw: nothing new; then GPU 0 is back.
    r.topology(&Topology {
        gpus: vec![gpu(1)],
        lost_gpus: vec![2],
        ..Topology::default()
    });
    r.topology(&Topology {
        gpus: vec![gpu(0), gpu(1), gpu(2)],
        ..Topology::default()
    });
    let got: Vec<(Kind, String)> = kinds(&r);
    let want = [
        (Kind::GpuLost, "gpu:2"),
        (Kind::GpuLost, "gpu:1"),
        (Kind::GpuUnbound, "gpu:0"),
        (Kind::GpuFound, "gpu:1"),
        (Kind::GpuBound, "gpu:0"),
        (Kind::GpuFound, "gpu:2"),
    ];
    let want: Vec<(Kind, String)> = want.iter().map(|(k, e)| (*k, e.to_string())).collect();
    assert_eq!(got, want);
    let e = &r.query(&Filter::default()).events[4];
    assert_eq!(e.detail("uuid"), Some(&Detail::Str("GPU-0".into())));
}

#[test]
fn mig_changes_and_instance_names() {
    let r = Recorder::new(Bounds::default());
    let gi = |entity: u32, nvml: u32, profile: &str| Instance {
        entity: Entity::new(EntityGroup::GpuInstance, entity),
        gpu: 0,
        gpu_instance: entity,
        nvml_instance_id: nvml,
        compute_instance: None,
        profile: profile.into(),
    };
    let ci = Instance {
        entity: Entity::new(EntityGroup::ComputeInstance, 40),
        gpu: 0,
        gpu_instance: 20,
        nvml_instance_id: 7,
        compute_instance: Some(0),
        profile: "3g.40gb".into(),
    };
    let t = |instances: Vec<Instance>| Topology {
        gpus: vec![gpu(0)],
        instances,
        ..Topology::default()
    };
    r.topology(&t(vec![gi(20, 7, "3g.40gb"), ci.clone()]));
    assert!(kinds(&r).is_empty());
    r.dcgm_xid(Entity::new(EntityGroup::ComputeInstance, 40), 13, 5, "x");
    r.topology(&t(vec![]));
    let events = r.query(&Filter::default()).events;
    assert_eq!(events[0].entity, "gpu:0/gi:7/ci:0");
    assert_eq!(events[0].detail("gpu"), Some(&Detail::Int(0)));
    assert_eq!(events[1].kind, Kind::MigChange);
    assert_eq!(
        events[1].message,
        "GPU 0's MIG layout changed: 3g.40gb(gi 7) -> none"
    );
}

#[test]
fn health_actions_and_watches_when_they_change() {
    let r = Recorder::new(Bounds::default());
    r.health_action(0, "none", "none");
    r.health_action(1, "drain", "xid");
    r.health_action(1, "drain", "xid");
    r.health_action(1, "none", "none");
    let incident = |health, code| HealthIncident {
        system: 0x1,
        health,
        code,
        message: "PCIe replays".into(),
        entity: Entity::gpu(0),
    };
    let resp = |i: Vec<HealthIncident>| HealthResponse {
        overall: 0,
        incidents: i,
    };
    r.health(&resp(vec![]));
    r.health(&resp(vec![incident(10, 3), incident(20, 4)]));
    r.health(&resp(vec![incident(20, 4)]));
    r.health(&resp(vec![]));
    let got: Vec<String> = r
        .query(&Filter::default())
        .events
        .iter()
        .map(|e| e.message.clone())
        .collect();
    assert_eq!(
        got,
        [
            "GPU 1 needs drain now (reason xid; was unknown)",
            "GPU 1 needs none now (reason none; was drain)",
            "health PCIE on gpu:0: fail: PCIe replays",
            "health PCIE on gpu:0: pass",
        ]
    );
}

#[test]
fn after_reads_in_order_and_counts_what_it_missed() {
    let r = Recorder::new(Bounds {
        max_events: 2,
        max_bytes: 1 << 20,
    });
    r.engine_up("a");
    let (got, missed) = r.after(0, 10);
    assert_eq!((got.len(), missed), (1, 0));
    for e in ["b", "c", "d"] {
        r.engine_up(e);
    }
    // b was dropped before it was read.
    let (got, missed) = r.after(1, 10);
    let seqs: Vec<u64> = got.iter().map(|e| e.seq).collect();
    assert_eq!((seqs, missed), (vec![3, 4], 1));
    assert_eq!(r.after(4, 10), (vec![], 0));
    // From the middle of the ring, at most `max`; a position past the newest finds none.
    let seqs = |(got, missed): (Vec<Arc<Event>>, u64)| {
        (got.iter().map(|e| e.seq).collect::<Vec<_>>(), missed)
    };
    assert_eq!(seqs(r.after(3, 10)), (vec![4], 0));
    assert_eq!(seqs(r.after(2, 1)), (vec![3], 0));
    assert_eq!(seqs(r.after(0, 1)), (vec![3], 2));
    assert_eq!(seqs(r.after(u64::MAX, 10)), (vec![], 0));
    let t0 = std::time::Instant::now();
    r.wait_after(4, Duration::from_millis(20), || false);
    assert!(t0.elapsed() >= Duration::from_millis(15));
    // A waiter whose stop was asked before it waited (a wake it could have missed) does
    // not wait at all.
    let t0 = std::time::Instant::now();
    r.wait_after(4, Duration::from_secs(30), || true);
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn json_shape() {
    let r = Recorder::new(Bounds::default());
    r.dcgm_xid(
        Entity::gpu(3),
        79,
        1_700_000_000_123_456,
        "GPU has fallen off the bus",
    );
    let j = r.query(&Filter::default()).events[0].to_json();
    assert_eq!(j["seq"], 1);
    assert_eq!(j["time"], "2023-11-14T22:13:20.123456Z");
    assert_eq!(j["time_source"], "dcgm");
    assert_eq!(j["type"], "xid");
    assert_eq!(j["severity"], "warning");
    assert_eq!(j["entity"], "gpu:3");
    assert_eq!(j["details"]["xid"], 79);
    assert_eq!(j["details"]["gpu"], 3);
    assert!(j.get("engine").is_none());
    assert_eq!(rfc3339_us(-1), "1969-12-31T23:59:59.999999Z");
}
