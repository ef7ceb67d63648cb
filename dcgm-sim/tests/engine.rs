//! The simulated host engine driven directly through `Engine::handle`, on a clock the test
//! moves by hand: groups and field groups, sampling at the watch frequency, retention,
//! blanks and sentinels, MIG, links, health, faults, the control file, connections.

#![forbid(unsafe_code)]

use dcgm_sim::engine::{Engine, Fault, ManualClock, Profile};
use dcgm_sim::proto::*;

const T0: i64 = 1_700_000_000_000_000;
const S: i64 = 1_000_000;

const INT64_BLANK: i64 = 0x7fff_ffff_ffff_fff0;
const INT64_NOT_SUPPORTED: i64 = 0x7fff_ffff_ffff_fff2;
const FP64_BLANK: f64 = 140_737_488_355_328.0;
const FP64_NOT_SUPPORTED: f64 = 140_737_488_355_330.0;

const GPU: u32 = 1;
const SWITCH: u32 = 3;
const GPU_I: u32 = 4;
const GPU_CI: u32 = 5;
const LINK: u32 = 6;

fn profile_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../etc/sim")
        .join(name)
}

fn engine(profile: &str) -> (Engine, ManualClock) {
    let p = Profile::load(&profile_path(profile)).unwrap();
    with(p)
}

fn engine_str(toml: &str) -> (Engine, ManualClock) {
    with(Profile::parse(toml).unwrap())
}

fn with(p: Profile) -> (Engine, ManualClock) {
    let clock = ManualClock::new(T0);
    (Engine::with_clock(p, Box::new(clock.clone())), clock)
}

fn id(r: Reply) -> u64 {
    match r {
        Reply::Id(i) => i,
        other => panic!("expected an id, got {other:?}"),
    }
}

fn ids(r: Reply) -> Vec<u32> {
    match r {
        Reply::Ids(i) => i,
        other => panic!("expected ids, got {other:?}"),
    }
}

fn samples(r: Reply) -> Vec<Sample> {
    match r {
        Reply::Samples(s) => s,
        other => panic!("expected samples, got {other:?}"),
    }
}

fn int(s: &Sample) -> i64 {
    match s.value {
        Value::Int64(x) => x,
        ref other => panic!("expected an int64, got {other:?}"),
    }
}

fn dbl(s: &Sample) -> f64 {
    match s.value {
        Value::Double(x) => x,
        ref other => panic!("expected a double, got {other:?}"),
    }
}

fn text(s: &Sample) -> String {
    match &s.value {
        Value::Str(x) => x.clone(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn group(e: &mut Engine, conn: u64, entities: &[(u32, u32)]) -> u64 {
    let g = id(e.handle(
        conn,
        &Request::GroupCreate {
            group_type: 1,
            name: "g".into(),
        },
    ));
    for &(eg, eid) in entities {
        assert_eq!(
            e.handle(
                conn,
                &Request::GroupAddEntity {
                    group_id: g,
                    entity_group: eg,
                    entity_id: eid
                }
            ),
            Reply::Ok,
            "adding ({eg}, {eid})"
        );
    }
    g
}

fn field_group(e: &mut Engine, conn: u64, fields: &[u16]) -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    id(e.handle(
        conn,
        &Request::FieldGroupCreate {
            field_ids: fields.to_vec(),
            name: format!("fg{n}"),
        },
    ))
}

fn watch_group(e: &mut Engine, conn: u64, g: u64, f: u64, freq_ms: i64, keep_s: f64, keep_n: i32) {
    let r = e.handle(
        conn,
        &Request::WatchFields {
            group_id: g,
            field_group_id: f,
            update_freq_us: freq_ms * 1000,
            max_keep_age_s: keep_s,
            max_keep_samples: keep_n,
        },
    );
    assert_eq!(r, Reply::Ok);
}

/// Watches `fields` on `entities` every `freq_ms`; returns (group, field group).
fn watch(
    e: &mut Engine,
    conn: u64,
    entities: &[(u32, u32)],
    fields: &[u16],
    freq_ms: i64,
    keep_s: f64,
) -> (u64, u64) {
    let g = group(e, conn, entities);
    let f = field_group(e, conn, fields);
    watch_group(e, conn, g, f, freq_ms, keep_s, 0);
    (g, f)
}

fn latest(e: &mut Engine, entities: &[(u32, u32)], fields: &[u16]) -> Vec<Sample> {
    samples(e.handle(
        0,
        &Request::EntitiesGetLatestValues {
            entities: entities.to_vec(),
            field_ids: fields.to_vec(),
            live: false,
        },
    ))
}

fn live(e: &mut Engine, entities: &[(u32, u32)], fields: &[u16]) -> Vec<Sample> {
    samples(e.handle(
        0,
        &Request::EntitiesGetLatestValues {
            entities: entities.to_vec(),
            field_ids: fields.to_vec(),
            live: true,
        },
    ))
}

fn one(e: &mut Engine, ent: (u32, u32), field: u16) -> Sample {
    latest(e, &[ent], &[field]).remove(0)
}

fn since(e: &mut Engine, g: u64, f: u64, since_us: i64) -> (Vec<Sample>, i64) {
    match e.handle(
        0,
        &Request::GetValuesSince {
            group_id: g,
            field_group_id: f,
            since_us,
        },
    ) {
        Reply::ValuesSince {
            samples,
            next_since_us,
            ..
        } => (samples, next_since_us),
        other => panic!("expected values, got {other:?}"),
    }
}

fn hierarchy(e: &mut Engine) -> Vec<MigEntry> {
    match e.handle(0, &Request::GetGpuInstanceHierarchy) {
        Reply::MigHierarchy(rows) => rows,
        other => panic!("{other:?}"),
    }
}

fn health(e: &mut Engine, g: u64, systems: u32) -> (u32, Vec<Incident>) {
    assert_eq!(
        e.handle(
            0,
            &Request::HealthSet {
                group_id: g,
                systems
            }
        ),
        Reply::Ok
    );
    match e.handle(0, &Request::HealthCheck { group_id: g }) {
        Reply::Health { overall, incidents } => (overall, incidents),
        other => panic!("{other:?}"),
    }
}

fn link(parent: u32, index: u32, parent_id: u32) -> u32 {
    parent | index << 8 | parent_id << 24
}

// ------------------------------------------------------------------------------ profiles

#[test]
fn every_shipped_profile_parses_and_the_default_is_the_h100_node() {
    for (p, gpus) in [
        ("one-gpu.toml", 1),
        ("h100-8gpu-nvswitch.toml", 8),
        ("a100-mixed-mig.toml", 8),
        ("large-bench.toml", 8),
    ] {
        let (mut e, _) = engine(p);
        assert_eq!(
            ids(e.handle(
                0,
                &Request::GetAllDevices {
                    only_supported: false
                }
            ))
            .len(),
            gpus,
            "{p}"
        );
    }
    let mut e = Engine::new(Profile::builtin_default());
    assert_eq!(
        e.handle(
            0,
            &Request::GetAllDevices {
                only_supported: false
            }
        ),
        Reply::Ids((0..8).collect())
    );
    let Reply::LinkStatus(ls) = e.handle(0, &Request::GetNvLinkLinkStatus) else {
        panic!()
    };
    assert_eq!(ls.gpus.len(), 8);
    for (gpu, states) in &ls.gpus {
        assert_eq!(states.len(), 18);
        for (l, s) in states.iter().enumerate() {
            let want = if (*gpu, l) == (7, 17) { 2 } else { 3 };
            assert_eq!(*s, want, "GPU {gpu} link {l}");
        }
    }
    assert_eq!(ls.switches.len(), 4);
    assert!(ls.switches.iter().all(|(_, p)| p.len() == 64));
    assert_eq!(ls.switches[3].1[63], 2);
    // No [cpus]: the sysmon module is not loaded, as real DCGM answers on non-Grace nodes.
    assert_eq!(e.handle(0, &Request::GetCpuHierarchy), Reply::Error(-33));
    assert!(Profile::parse("[gpus]\ncount = 0\nmodel = \"x\"\n").is_err());
    assert!(Profile::parse("[gpus]\ncount = 1\nmodel = \"x\"\nbogus = 1\n").is_err());
    let err = Profile::load(&profile_path("no-such-profile.toml")).unwrap_err();
    assert!(err.contains("no-such-profile.toml"), "{err}");
}

#[test]
fn the_bench_node_has_grace_cpus_with_their_cores() {
    let (mut e, _) = engine("large-bench.toml");
    let Reply::CpuHierarchy(cpus) = e.handle(0, &Request::GetCpuHierarchy) else {
        panic!()
    };
    assert_eq!(cpus.len(), 2);
    assert_eq!(cpus[0].1, (0..72).collect::<Vec<_>>());
    assert_eq!(cpus[1].1, (72..144).collect::<Vec<_>>());
    let cores = ids(e.handle(
        0,
        &Request::GetEntityGroupEntities {
            entity_group: 8,
            only_supported: true,
        },
    ));
    assert_eq!(cores.len(), 144);
    let v = live(&mut e, &[(7, 1), (8, 100)], &[1110, 1141, 1100]);
    assert!((30.0..90.0).contains(&dbl(&v[0])), "CPU temperature {v:?}");
    assert_eq!(text(&v[1]), "Grace A02P");
    assert!(
        (0.0..=100.0).contains(&dbl(&v[2])),
        "CPU utilisation aggregates the cores"
    );
    assert_eq!(
        v[3].value,
        Value::Double(FP64_NOT_SUPPORTED),
        "a CPU field on a core"
    );
    assert!((0.0..=100.0).contains(&dbl(&v[5])));
}

// ------------------------------------------------------------------------------ sampling

#[test]
fn values_change_only_when_the_watch_samples() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    watch(&mut e, 0, &[(GPU, 0)], &[156, 150], 1000, 600.0);
    let a = one(&mut e, (GPU, 0), 156);
    assert_eq!((a.status, a.ts_us), (0, T0), "first sample at watch time");
    clock.advance_ms(999);
    assert_eq!(
        one(&mut e, (GPU, 0), 156),
        a,
        "no new sample before the interval"
    );
    clock.advance_ms(1);
    let b = one(&mut e, (GPU, 0), 156);
    assert_eq!(b.ts_us, T0 + S);
    assert!(int(&b) > int(&a), "energy is a counter");
    // Samples land on the watch's grid even when reads are irregular.
    clock.advance_ms(3500);
    assert_eq!(one(&mut e, (GPU, 0), 156).ts_us, T0 + 4 * S);
    assert_eq!(one(&mut e, (GPU, 0), 150).ts_us, T0 + 4 * S);
}

fn unwatch(e: &mut Engine, conn: u64, g: u64, f: u64) {
    let r = e.handle(
        conn,
        &Request::UnwatchFields {
            group_id: g,
            field_group_id: f,
        },
    );
    assert_eq!(r, Reply::Ok);
}

/// Watchers are connections: two connections on one pair share a watch at the faster
/// frequency and the longer age until one leaves. With the last one gone the watch takes no
/// more samples, and its last sample still reads OK with its old timestamp, as DCGM's cache
/// answers (PrecheckWatchInfoForSamples).
#[test]
fn connections_share_a_watch_at_the_fastest_frequency_until_they_leave() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    let g = group(&mut e, 1, &[(GPU, 0)]);
    let slow = field_group(&mut e, 1, &[150]);
    let fast = field_group(&mut e, 2, &[150]);
    watch_group(&mut e, 1, g, slow, 10_000, 600.0, 0);
    watch_group(&mut e, 2, g, fast, 1_000, 1.0, 0);
    clock.advance_ms(2500);
    assert_eq!(one(&mut e, (GPU, 0), 150).ts_us, T0 + 2 * S);
    unwatch(&mut e, 2, g, fast);
    // Back to the slow watcher's 10 s, counted from the last sample.
    clock.advance_ms(9400);
    assert_eq!(one(&mut e, (GPU, 0), 150).ts_us, T0 + 2 * S);
    clock.advance_ms(100);
    assert_eq!(one(&mut e, (GPU, 0), 150).ts_us, T0 + 12 * S);
    // The slow watcher's 600 s retention applies: nothing was trimmed.
    assert_eq!(e.history_len((GPU, 0), 150), 4);
    unwatch(&mut e, 1, g, slow);
    assert_eq!(e.watch_count(), 0);
    clock.advance_ms(30_000);
    let frozen = one(&mut e, (GPU, 0), 150);
    assert_eq!((frozen.status, frozen.ts_us), (0, T0 + 12 * S));
    assert_eq!(e.history_len((GPU, 0), 150), 4);
    // Watched again, it samples from now on, without filling the gap.
    watch_group(&mut e, 1, g, slow, 1_000, 60.0, 0);
    clock.advance_ms(1000);
    let (s, _) = since(&mut e, g, slow, T0 + 13 * S);
    assert_eq!(
        s.iter().map(|x| x.ts_us).collect::<Vec<_>>(),
        [T0 + 42 * S, T0 + 43 * S]
    );
}

/// DCGM keys a watch by (entity, field, connection), not by field group: the same pair
/// watched through a second field group from the same connection updates the one watcher
/// (frequency and age), and unwatching either field group removes it, though the other
/// field group still holds the field (issue 28: a rebuild that watches the new field groups
/// and then unwatches the old ones loses every shared field).
#[test]
fn a_watch_is_one_per_connection_whatever_the_field_groups() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    let g = group(&mut e, 0, &[(GPU, 0)]);
    let a = field_group(&mut e, 0, &[150, 155]);
    let b = field_group(&mut e, 0, &[155]);
    watch_group(&mut e, 0, g, a, 100, 60.0, 0);
    // B at 1 s replaces the 100 ms of 155's watcher; 150 keeps 100 ms.
    watch_group(&mut e, 0, g, b, 1_000, 60.0, 0);
    clock.advance_ms(2050);
    let (s, _) = since(&mut e, g, a, 0);
    let count = |f: u16| s.iter().filter(|x| x.field_id == f).count();
    assert_eq!((count(150), count(155)), (21, 3));
    unwatch(&mut e, 0, g, a);
    assert_eq!(e.watch_count(), 0, "B's 155 went with A's unwatch");
    let before = one(&mut e, (GPU, 0), 155);
    clock.advance_ms(5000);
    let after = one(&mut e, (GPU, 0), 155);
    assert_eq!((after.status, after.ts_us), (0, before.ts_us));
    // Destroying the field group and the group leaves a watch in place.
    watch_group(&mut e, 0, g, b, 1_000, 60.0, 0);
    assert_eq!(
        e.handle(0, &Request::FieldGroupDestroy { field_group_id: b }),
        Reply::Ok
    );
    assert_eq!(
        e.handle(0, &Request::GroupDestroy { group_id: g }),
        Reply::Ok
    );
    assert_eq!(e.watch_count(), 1);
    clock.advance_ms(3000);
    assert_eq!(one(&mut e, (GPU, 0), 155).ts_us, T0 + 10 * S + 50_000);
}

#[test]
fn update_all_fields_brings_every_watch_up_to_date() {
    let (mut e, clock) = engine("one-gpu.toml");
    watch(&mut e, 0, &[(GPU, 0)], &[150, 203], 1000, 60.0);
    clock.advance_ms(3000);
    assert_eq!(e.history_len((GPU, 0), 150), 0, "lazy: nothing ran yet");
    assert_eq!(
        e.handle(0, &Request::UpdateAllFields { wait: true }),
        Reply::Ok
    );
    assert_eq!(e.history_len((GPU, 0), 150), 4);
    assert_eq!(e.history_len((GPU, 0), 203), 4);
}

#[test]
fn history_is_trimmed_to_the_keep_age_and_values_since_sees_the_window() {
    let (mut e, clock) = engine("one-gpu.toml");
    let (g, f) = watch(&mut e, 0, &[(GPU, 0)], &[150], 1000, 5.0);
    clock.advance_ms(20_000);
    let (all, next) = since(&mut e, g, f, 0);
    let ts: Vec<i64> = all.iter().map(|s| s.ts_us).collect();
    assert_eq!(ts, (15..=20).map(|i| T0 + i * S).collect::<Vec<_>>());
    assert_eq!(next, T0 + 20 * S + 1);
    let (recent, _) = since(&mut e, g, f, T0 + 18 * S);
    assert_eq!(recent.len(), 3);
    assert!(recent
        .iter()
        .all(|s| s.entity_group == GPU && s.entity_id == 0 && s.field_id == 150));
    let (none, next2) = since(&mut e, g, f, next);
    assert!(none.is_empty());
    assert_eq!(next2, next, "time did not move");
    clock.advance_ms(1000);
    let (new, _) = since(&mut e, g, f, next);
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].ts_us, T0 + 21 * S);
}

#[test]
fn max_keep_samples_is_a_duration_as_in_dcgm() {
    let (mut e, clock) = engine("one-gpu.toml");
    let g = group(&mut e, 0, &[(GPU, 0)]);
    let f = field_group(&mut e, 0, &[150]);
    // 3 samples at 1 s = 3.3 s of history (DcgmUtilities.cpp GetMaxAge).
    watch_group(&mut e, 0, g, f, 1000, 0.0, 3);
    clock.advance_ms(10_000);
    let (s, _) = since(&mut e, g, f, 0);
    assert_eq!(
        s.iter().map(|x| x.ts_us).collect::<Vec<_>>(),
        (7..=10).map(|i| T0 + i * S).collect::<Vec<_>>()
    );
}

#[test]
fn a_long_idle_stretch_is_skipped_not_replayed() {
    let (mut e, clock) = engine("one-gpu.toml");
    let (g, f) = watch(&mut e, 0, &[(GPU, 0)], &[150], 1, 1.0);
    clock.advance_ms(3_600_000);
    // Only the keep age's worth of samples is generated, not the 3.6 million an hour holds.
    let (s, _) = since(&mut e, g, f, 0);
    assert!((1000..=1002).contains(&s.len()), "{} samples", s.len());
    assert_eq!(s.last().unwrap().ts_us, T0 + 3600 * S);
}

#[test]
fn two_engines_with_one_seed_agree() {
    let run = || {
        let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
        let (g, f) = watch(
            &mut e,
            0,
            &[(GPU, 0), (GPU, 5)],
            &[100, 150, 155, 203, 252, 1001],
            500,
            60.0,
        );
        for _ in 0..20 {
            clock.advance_ms(731);
            e.handle(0, &Request::UpdateAllFields { wait: true });
        }
        since(&mut e, g, f, 0).0
    };
    let (a, b) = (run(), run());
    assert!(a.len() > 100);
    assert_eq!(a, b);
}

#[test]
fn busy_node_values_are_in_range_and_consistent() {
    let (mut e, _) = engine("h100-8gpu-nvswitch.toml");
    let fields = [
        100, 101, 140, 150, 155, 156, 203, 204, 250, 251, 252, 253, 254, 112, 230, 1001, 1005, 1009,
    ];
    let ents: Vec<(u32, u32)> = (0..8).map(|g| (GPU, g)).collect();
    watch(&mut e, 0, &ents, &fields, 1000, 60.0);
    let v = latest(&mut e, &ents, &fields);
    assert_eq!(v.len(), 8 * fields.len());
    for (i, s) in v.iter().enumerate() {
        // Entity-major, then field order.
        assert_eq!(
            (s.entity_id, s.field_id),
            ((i / fields.len()) as u32, fields[i % fields.len()])
        );
        // Every field has a sample but the XID, which has none until an XID happens.
        assert_eq!(s.status, if s.field_id == 230 { -14 } else { 0 });
    }
    for gpu in v.chunks(fields.len()) {
        let get = |f: u16| &gpu[fields.iter().position(|x| *x == f).unwrap()];
        assert!((1800..=2000).contains(&int(get(100))));
        assert_eq!(int(get(101)), 2619);
        assert!((35..=80).contains(&int(get(150))));
        assert!((200.0..=700.0).contains(&dbl(get(155))));
        assert!((40..=95).contains(&int(get(203))));
        let (total, free, used, resv) =
            (int(get(250)), int(get(251)), int(get(252)), int(get(253)));
        assert_eq!(total, 81559);
        assert_eq!(used + free + resv, total);
        assert!((dbl(get(254)) - used as f64 / total as f64).abs() < 1e-9);
        assert_eq!(int(get(112)), 0, "no clock events without a fault");
        assert_eq!(get(230).status, -14, "no XID yet: no sample (NO_DATA)");
        assert!((0.0..=1.0).contains(&dbl(get(1001))));
        assert!(int(get(1009)) > 0);
    }
}

// ------------------------------------------------------------------------------ blanks

#[test]
fn unwatched_and_unknown_values_are_blanks_with_a_status() {
    let (mut e, _) = engine("h100-8gpu-nvswitch.toml");
    let v = latest(&mut e, &[(GPU, 0)], &[150, 155, 50, 75]);
    let want = [
        (b'i', Value::Int64(INT64_BLANK)),
        (b'd', Value::Double(FP64_BLANK)),
        (b's', Value::Str("<<<NULL>>>".into())),
        (b'b', Value::Blob(vec![0])),
    ];
    for (s, (ty, value)) in v.iter().zip(want) {
        assert_eq!(
            (s.status, s.ts_us, s.field_type, &s.value),
            (-16, 0, ty, &value),
            "{s:?}"
        );
    }
    let unknown_field = one(&mut e, (GPU, 0), 9999);
    assert_eq!(
        (unknown_field.status, unknown_field.value),
        (-13, Value::Int64(INT64_BLANK))
    );
    let unknown_gpu = one(&mut e, (GPU, 99), 150);
    assert_eq!((unknown_gpu.status, unknown_gpu.ts_us), (-14, 0));
    assert_eq!(live(&mut e, &[(GPU, 99)], &[150])[0].status, -14);
    for (entities, fields) in [
        (vec![], vec![150]),
        (vec![(GPU, 0)], vec![]),
        (vec![(GPU, 0); 1025], vec![150]),
        (vec![(GPU, 0)], vec![150; 129]),
    ] {
        assert_eq!(
            e.handle(
                0,
                &Request::EntitiesGetLatestValues {
                    entities,
                    field_ids: fields,
                    live: false
                }
            ),
            Reply::Error(-1)
        );
    }
    assert_eq!(latest(&mut e, &[(GPU, 0)], &[150; 128]).len(), 128);
}

#[test]
fn unsupported_fields_read_not_supported_sentinels_with_status_ok() {
    let (mut e, _) = engine("a100-mixed-mig.toml");
    // vGPU license status on a bare-metal GPU.
    watch(
        &mut e,
        0,
        &[(GPU, 4), (GPU_I, 0)],
        &[526, 150, 252, 1001, 50, 54],
        1000,
        60.0,
    );
    let gpu = latest(&mut e, &[(GPU, 4)], &[526, 150]);
    assert_eq!(
        (gpu[0].status, &gpu[0].value),
        (0, &Value::Int64(INT64_NOT_SUPPORTED))
    );
    assert!((35..=80).contains(&int(&gpu[1])));
    // Instance-level fields are the instance's own (mig_inheritance.rs pins the GPU-level
    // ones, which a MIG instance reads from its parent).
    let gi = latest(&mut e, &[(GPU_I, 0)], &[252, 1001, 50, 54]);
    assert!(
        (0..=9728).contains(&int(&gi[0])),
        "fb used within a 1g.10gb: {:?}",
        gi[0]
    );
    assert!((0.0..=1.0).contains(&dbl(&gi[1])));
    assert_eq!(text(&gi[2]), "1g.10gb");
    assert!(text(&gi[3]).starts_with("MIG-"));
}

#[test]
fn profile_generators_override_the_defaults() {
    let (mut e, clock) = engine_str(
        "[gpus]\ncount = 2\nmodel = \"NVIDIA H100 80GB HBM3\"\n\
         [[fields]]\nid = 150\ngen = { kind = \"constant\", value = 42.0 }\n\
         [[fields]]\nid = 150\ngpus = [1]\ngen = { kind = \"ramp\", start = 30.0, per_s = 1.0, max = 35.0 }\n\
         [[fields]]\nid = 155\ngen = { kind = \"error\", status = -6 }\n\
         [[fields]]\nid = 203\ngen = { kind = \"sentinel\", which = \"not_permissioned\" }\n\
         [[fields]]\nid = 50\ngpus = [0]\ngen = { kind = \"string\", value = \"Renamed\" }\n",
    );
    watch(
        &mut e,
        0,
        &[(GPU, 0), (GPU, 1)],
        &[150, 155, 203, 50],
        1000,
        60.0,
    );
    clock.advance_ms(10_000);
    let v = latest(&mut e, &[(GPU, 0), (GPU, 1)], &[150, 155, 203, 50]);
    assert_eq!(int(&v[0]), 42);
    assert_eq!((v[1].status, &v[1].value), (-6, &Value::Double(FP64_BLANK)));
    assert_eq!(v[2].value, Value::Int64(INT64_BLANK + 3));
    assert_eq!(text(&v[3]), "Renamed");
    assert_eq!(
        int(&v[4]),
        35,
        "the later, GPU-specific override wins and clamps"
    );
    assert_eq!(text(&v[7]), "NVIDIA H100 80GB HBM3");
}

#[test]
fn global_fields_read_the_same_on_every_entity() {
    let (mut e, _) = engine("large-bench.toml");
    let ents = [
        (GPU, 0),
        (GPU, 7),
        (SWITCH, 2),
        (LINK, link(1, 3, 4)),
        (7, 1),
        (8, 5),
    ];
    let v = live(&mut e, &ents, &[1, 4, 5]);
    for chunk in v.chunks(3) {
        assert_eq!(text(&chunk[0]), "560.35.03");
        assert_eq!(int(&chunk[1]), 8);
        assert_eq!(int(&chunk[2]), 12060);
    }
}

// ------------------------------------------------------------------------------ entities

#[test]
fn mig_hierarchy_has_dcgm_shape_ids_and_order() {
    let (mut e, _) = engine("a100-mixed-mig.toml");
    let rows = hierarchy(&mut e);
    let gis: Vec<&MigEntry> = rows.iter().filter(|r| r.entity.0 == GPU_I).collect();
    let cis: Vec<&MigEntry> = rows.iter().filter(|r| r.entity.0 == GPU_CI).collect();
    assert_eq!((gis.len(), cis.len()), (7 + 4 + 1 + 2, 7 + 4 + 2 + 2));
    assert!(gis
        .iter()
        .all(|r| r.nvml_compute_instance_id == u32::MAX && r.parent.0 == GPU));
    // CI rows follow their GI and point at it.
    for (i, r) in rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.entity.0 == GPU_CI)
    {
        let gi = rows[..i]
            .iter()
            .rev()
            .find(|p| p.entity.0 == GPU_I)
            .unwrap();
        assert_eq!(r.parent, gi.entity);
        assert_eq!(r.nvml_instance_id, gi.nvml_instance_id);
    }
    // GPU 0: seven 1g.10gb, entity ids 0-6, NVML instance ids 7-13, profile id 19.
    let gpu0: Vec<&&MigEntry> = gis.iter().filter(|r| r.parent == (GPU, 0)).collect();
    assert_eq!(
        gpu0.iter().map(|r| r.entity.1).collect::<Vec<_>>(),
        (0..7).collect::<Vec<_>>()
    );
    assert_eq!(
        gpu0.iter().map(|r| r.nvml_instance_id).collect::<Vec<_>>(),
        (7..14).collect::<Vec<_>>()
    );
    assert!(gpu0
        .iter()
        .all(|r| r.nvml_mig_profile_id == 19 && r.nvml_profile_slices == 1));
    // GPU 1: ordered by NVML profile, so the 1-slice instances come first.
    let gpu1: Vec<(u32, u32)> = gis
        .iter()
        .filter(|r| r.parent == (GPU, 1))
        .map(|r| (r.entity.1, r.nvml_instance_id))
        .collect();
    assert_eq!(gpu1, [(8, 7), (9, 8), (10, 3), (11, 1)]);
    let names = live(
        &mut e,
        &[(GPU_I, 8), (GPU_I, 9), (GPU_I, 10), (GPU_I, 11)],
        &[50],
    );
    assert_eq!(
        names.iter().map(text).collect::<Vec<_>>(),
        ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    );
    // GPU 2: one 7g.80gb with two 3-slice compute instances.
    let gpu2: Vec<&MigEntry> = rows
        .iter()
        .filter(|r| r.parent == (GPU, 2) || r.parent == (GPU_I, 16))
        .collect();
    assert_eq!(gpu2.len(), 3);
    assert_eq!(
        (
            gpu2[0].entity,
            gpu2[0].nvml_instance_id,
            gpu2[0].nvml_profile_slices
        ),
        ((GPU_I, 16), 0, 7)
    );
    assert_eq!(
        gpu2[1..]
            .iter()
            .map(|r| (r.entity, r.nvml_compute_instance_id, r.nvml_profile_slices))
            .collect::<Vec<_>>(),
        [((GPU_CI, 16), 0, 3), ((GPU_CI, 17), 1, 3)]
    );
    // The entity lists agree with the hierarchy.
    let gi_ids = ids(e.handle(
        0,
        &Request::GetEntityGroupEntities {
            entity_group: GPU_I,
            only_supported: false,
        },
    ));
    assert_eq!(gi_ids, gis.iter().map(|r| r.entity.1).collect::<Vec<_>>());
    let ci_ids = ids(e.handle(
        0,
        &Request::GetEntityGroupEntities {
            entity_group: GPU_CI,
            only_supported: false,
        },
    ));
    assert_eq!(ci_ids, cis.iter().map(|r| r.entity.1).collect::<Vec<_>>());
    // Rows carry the parent GPU's UUID; MIG mode shows in the attributes.
    let Reply::DeviceAttributes(a) = e.handle(0, &Request::GetDeviceAttributes { gpu_id: 1 })
    else {
        panic!()
    };
    assert!(rows
        .iter()
        .filter(|r| r.nvml_gpu_index == 1)
        .all(|r| r.gpu_uuid == a.uuid));
    assert_eq!(a.mig_mode, 1);
    let Reply::DeviceAttributes(a4) = e.handle(0, &Request::GetDeviceAttributes { gpu_id: 4 })
    else {
        panic!()
    };
    assert_eq!(a4.mig_mode, 0);
    assert_eq!(a4.name, "NVIDIA A100-SXM4-80GB");
    assert_eq!(a4.fb_total_mb, 81920);
    assert_eq!(a4.fb_used_mb + a4.fb_free_mb + 512, 81920);
}

#[test]
fn links_are_packed_dcgm_link_t_and_down_links_carry_no_traffic() {
    let (mut e, _) = engine("h100-8gpu-nvswitch.toml");
    let links = ids(e.handle(
        0,
        &Request::GetEntityGroupEntities {
            entity_group: LINK,
            only_supported: false,
        },
    ));
    assert_eq!(links.len(), 8 * 18 + 4 * 64);
    assert!(links.contains(&link(GPU, 17, 7)));
    assert!(links.contains(&link(SWITCH, 63, 3)));
    assert_eq!(link(GPU, 17, 7), 0x0700_1101);
    let v = live(
        &mut e,
        &[
            (LINK, link(GPU, 16, 7)),
            (LINK, link(GPU, 17, 7)),
            (LINK, link(SWITCH, 63, 3)),
            (LINK, link(SWITCH, 62, 3)),
        ],
        &[1532, 1508],
    );
    assert!(int(&v[0]) > 0 && int(&v[1]) == 1, "Up link: {v:?}");
    assert_eq!((int(&v[2]), int(&v[3])), (0, 0), "Down link");
    assert_eq!((int(&v[4]), int(&v[5])), (0, 0), "Down switch port");
    assert!(int(&v[6]) > 0);
    // Legacy per-link fields on the GPU entity follow the link too.
    let g = live(&mut e, &[(GPU, 7)], &[496, 495]);
    assert_eq!(int(&g[0]), 0);
    assert!(int(&g[1]) > 0);
    let missing = live(
        &mut e,
        &[(LINK, link(GPU, 18, 0)), (LINK, link(SWITCH, 0, 9))],
        &[1532],
    );
    assert!(missing.iter().all(|s| s.status == -14));
    // An A100 has 12 links: fields of links 12-17 are not supported there.
    let (mut a, _) = engine("a100-mixed-mig.toml");
    let v = live(&mut a, &[(GPU, 5)], &[448, 440, 1063, 1064]);
    assert_eq!(v[0].value, Value::Int64(INT64_NOT_SUPPORTED));
    assert!(int(&v[1]) > 0);
    assert!(int(&v[2]) > 0);
    assert_eq!(v[3].value, Value::Int64(INT64_NOT_SUPPORTED));
}

#[test]
fn entity_groups_and_supported_gpus() {
    let (mut e, _) =
        engine_str("[gpus]\ncount = 3\nmodel = \"NVIDIA H100 80GB HBM3\"\nunsupported = [1]\n");
    assert_eq!(
        ids(e.handle(
            0,
            &Request::GetAllDevices {
                only_supported: false
            }
        )),
        [0, 1, 2]
    );
    assert_eq!(
        ids(e.handle(
            0,
            &Request::GetAllDevices {
                only_supported: true
            }
        )),
        [0, 2]
    );
    assert_eq!(
        e.handle(0, &Request::GetGpuStatus { gpu_id: 1 }),
        Reply::Status(2)
    );
    assert_eq!(
        e.handle(0, &Request::GetGpuStatus { gpu_id: 0 }),
        Reply::Status(1)
    );
    assert_eq!(
        e.handle(0, &Request::GetGpuStatus { gpu_id: 3 }),
        Reply::Error(-1)
    );
    let gege = |e: &mut Engine, group: u32, only: bool| {
        e.handle(
            0,
            &Request::GetEntityGroupEntities {
                entity_group: group,
                only_supported: only,
            },
        )
    };
    assert_eq!(ids(gege(&mut e, GPU, true)), [0, 2]);
    assert_eq!(ids(gege(&mut e, GPU, false)), [0, 1, 2]);
    for empty in [2, SWITCH, GPU_I, 9] {
        assert_eq!(
            gege(&mut e, empty, false),
            Reply::Ids(vec![]),
            "group {empty}"
        );
    }
    // As real DCGM 4.6 on a node without NvSwitches or Grace CPUs: links come from the
    // NvSwitch module (NotSupported), CPUs from the sysmon module (not loaded).
    assert_eq!(gege(&mut e, LINK, false), Reply::Error(-6));
    assert_eq!(gege(&mut e, 7, false), Reply::Error(-33));
    assert_eq!(gege(&mut e, 10, false), Reply::Error(-6));
    let g = id(e.handle(
        0,
        &Request::GroupCreate {
            group_type: 1,
            name: "x".into(),
        },
    ));
    assert_eq!(
        e.handle(
            0,
            &Request::GroupAddEntity {
                group_id: g,
                entity_group: GPU,
                entity_id: 1
            }
        ),
        Reply::Error(-22)
    );
    let d = id(e.handle(
        0,
        &Request::GroupCreate {
            group_type: 0,
            name: "d".into(),
        },
    ));
    assert_eq!(
        e.handle(0, &Request::GroupGetInfo { group_id: d }),
        Reply::GroupInfo {
            name: "d".into(),
            entities: vec![(GPU, 0), (GPU, 2)]
        }
    );
    assert_eq!(
        e.handle(0, &Request::GetDeviceAttributes { gpu_id: 7 }),
        Reply::Error(-1)
    );
}

#[test]
fn p2p_status_follows_the_links() {
    let (mut e, _) = engine("h100-8gpu-nvswitch.toml");
    let Reply::P2PStatus(m) = e.handle(0, &Request::GetNvLinkP2PStatus) else {
        panic!()
    };
    assert_eq!(m.len(), 8);
    for (a, row) in &m {
        for (b, s) in row.iter().enumerate() {
            assert_eq!(*s, if *a == b as u32 { 5 } else { 0 }, "{a} -> {b}");
        }
    }
    let (mut one_gpu, _) = engine("one-gpu.toml");
    assert_eq!(
        one_gpu.handle(0, &Request::GetNvLinkP2PStatus),
        Reply::P2PStatus(vec![(0, vec![5])])
    );
    let (mut pcie, _) = engine_str(
        "[gpus]\ncount = 3\nmodel = \"NVIDIA H100 PCIe\"\np2p_overrides = [[0, 2, 3]]\n",
    );
    assert_eq!(
        pcie.handle(0, &Request::GetNvLinkP2PStatus),
        Reply::P2PStatus(vec![
            (0, vec![5, 5, 3]),
            (1, vec![5, 5, 5]),
            (2, vec![3, 5, 5])
        ])
    );
}

#[test]
fn profiling_metric_groups_or_the_error_a_node_without_dcp_gives() {
    let (mut e, _) = engine("h100-8gpu-nvswitch.toml");
    let Reply::MetricGroups(groups) =
        e.handle(0, &Request::ProfGetSupportedMetricGroups { gpu_id: 0 })
    else {
        panic!()
    };
    assert!(groups.len() <= 10 && groups.iter().all(|g| g.field_ids.len() <= 64));
    let all: Vec<u16> = groups.iter().flat_map(|g| g.field_ids.clone()).collect();
    for f in [
        1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1010, 1011, 1012, 1040, 1075,
    ] {
        assert!(all.contains(&f), "{f}");
    }
    assert_eq!(
        e.handle(0, &Request::ProfGetSupportedMetricGroups { gpu_id: 8 }),
        Reply::Error(-1)
    );
    let (mut off, _) = engine_str("[gpus]\ncount = 1\nmodel = \"Tesla T4\"\ndcp = false\n");
    assert_eq!(
        off.handle(0, &Request::ProfGetSupportedMetricGroups { gpu_id: 0 }),
        Reply::Error(-33)
    );
    assert_eq!(
        live(&mut off, &[(GPU, 0)], &[1001])[0].value,
        Value::Double(FP64_NOT_SUPPORTED)
    );
    let (mut off36, _) =
        engine_str("[gpus]\ncount = 1\nmodel = \"Tesla T4\"\ndcp = false\ndcp_error = -36\n");
    assert_eq!(
        off36.handle(0, &Request::ProfGetSupportedMetricGroups { gpu_id: 0 }),
        Reply::Error(-36)
    );
    let (mut custom, _) = engine_str(
        "[gpus]\ncount = 1\nmodel = \"x\"\nmetric_groups = [{ major = 1, fields = [1001, 1002] }]\n",
    );
    assert_eq!(
        custom.handle(0, &Request::ProfGetSupportedMetricGroups { gpu_id: 0 }),
        Reply::MetricGroups(vec![MetricGroup {
            major_id: 1,
            minor_id: 0,
            field_ids: vec![1001, 1002]
        }])
    );
}

/// What the real DCGM 4.6 answers without its (closed-source) profiling module, as the
/// open-source kit in ../shared/dcgm-real shows: the metric-group query and any watch that
/// holds a profiling field fail with MODULE_NOT_LOADED; the same watch without it works.
#[test]
fn without_the_profiling_module_a_watch_holding_a_profiling_field_is_refused_whole() {
    let (mut e, clock) = engine_str(
        "[gpus]\ncount = 2\nmodel = \"NVIDIA H100 80GB HBM3\"\nprofiling_module = false\n",
    );
    assert_eq!(
        e.handle(0, &Request::ProfGetSupportedMetricGroups { gpu_id: 0 }),
        Reply::Error(-33)
    );
    let g = group(&mut e, 0, &[(GPU, 0), (GPU, 1)]);
    let mixed = field_group(&mut e, 0, &[150, 1002]);
    let watch_req = |f| Request::WatchFields {
        group_id: g,
        field_group_id: f,
        update_freq_us: S,
        max_keep_age_s: 600.0,
        max_keep_samples: 0,
    };
    assert_eq!(e.handle(0, &watch_req(mixed)), Reply::Error(-33));
    // Nothing of the refused watch is sampled, but DCGM made (and unwatched) its pairs; an
    // unwatch of them removes them and then asks the profiling module, which cannot load:
    // MODULE_NOT_LOADED, as the real kit answers (DcgmHostEngineHandler::UnwatchFieldGroup).
    assert_eq!(latest(&mut e, &[(GPU, 0)], &[150])[0].status, -16);
    let unwatch_mixed = Request::UnwatchFields {
        group_id: g,
        field_group_id: mixed,
    };
    assert_eq!(e.handle(0, &unwatch_mixed), Reply::Error(-33));
    let plain = field_group(&mut e, 0, &[150, 155]);
    assert_eq!(e.handle(0, &watch_req(plain)), Reply::Ok);
    assert_eq!(latest(&mut e, &[(GPU, 0)], &[150])[0].status, 0);
    // The failed watch unwatches every pair of its group and field group for this
    // connection, also 150, which `plain` had watched (DcgmHostEngineHandler::
    // WatchFieldGroup, GETOUT); 155 is not in `mixed` and stays.
    clock.advance_ms(1500);
    assert_eq!(e.handle(0, &watch_req(mixed)), Reply::Error(-33));
    clock.advance_ms(3000);
    let v = latest(&mut e, &[(GPU, 0)], &[150, 155]);
    assert_eq!((v[0].status, v[0].ts_us), (0, T0 + S));
    assert_eq!((v[1].status, v[1].ts_us), (0, T0 + 4 * S));
    // Another connection's watch on the same pair is not touched.
    let other = field_group(&mut e, 5, &[150]);
    let g5 = group(&mut e, 5, &[(GPU, 1)]);
    let w5 = Request::WatchFields {
        group_id: g5,
        field_group_id: other,
        update_freq_us: S,
        max_keep_age_s: 600.0,
        max_keep_samples: 0,
    };
    assert_eq!(e.handle(5, &w5), Reply::Ok);
    assert_eq!(e.handle(0, &watch_req(mixed)), Reply::Error(-33));
    clock.advance_ms(2000);
    assert_eq!(one(&mut e, (GPU, 1), 150).ts_us, T0 + 6500 * 1000);
}

fn module_state(e: &mut Engine, id: u32) -> u32 {
    match e.handle(0, &Request::ModuleGetStatuses) {
        Reply::ModuleStatuses(list) => list.iter().find(|m| m.0 == id).unwrap().1,
        other => panic!("expected module statuses, got {other:?}"),
    }
}

const PROFILING: u32 = 8;
const NOT_LOADED: u32 = 0;
const DENYLISTED: u32 = 1;
const FAILED: u32 = 2;
const LOADED: u32 = 3;

/// Which requests load DCGM 4.6's profiling module (traced in its source, checked on the
/// real kit): the metric-group query of a GPU not sampled through GPM, and a watch or
/// unwatch of a profiling field on such a GPU; a GPM GPU's profiling never does, and reads
/// never do. Denied, it stays denied and those requests answer MODULE_NOT_LOADED, the GPM
/// GPU's rows still work.
#[test]
fn the_profiling_module_loads_only_for_gpus_without_gpm_and_never_when_denied() {
    let toml = "[gpus]\ncount = 2\nmodel = \"NVIDIA H100 80GB HBM3\"\ngpm = true\n\n[[gpu]]\nid = 1\ngpm = false\n";
    for deny in [false, true] {
        let (mut e, clock) = engine_str(toml);
        if deny {
            e.deny_modules(&[PROFILING]).unwrap();
        }
        let quiet = if deny { DENYLISTED } else { NOT_LOADED };
        assert_eq!(module_state(&mut e, PROFILING), quiet);
        assert!(matches!(
            e.handle(0, &Request::ProfGetSupportedMetricGroups { gpu_id: 0 }),
            Reply::MetricGroups(_)
        ));
        let g0 = group(&mut e, 0, &[(GPU, 0)]);
        let prof = field_group(&mut e, 0, &[150, 1001]);
        watch_group(&mut e, 0, g0, prof, 1000, 0.0, 4);
        clock.advance_ms(1500);
        assert_eq!(one(&mut e, (GPU, 0), 1001).status, 0);
        let unwatch = Request::UnwatchFields {
            group_id: g0,
            field_group_id: prof,
        };
        assert_eq!(e.handle(0, &unwatch), Reply::Ok);
        assert_eq!(
            module_state(&mut e, PROFILING),
            quiet,
            "GPM only (deny {deny})"
        );
        let groups = e.handle(0, &Request::ProfGetSupportedMetricGroups { gpu_id: 1 });
        if deny {
            assert_eq!(groups, Reply::Error(-33));
            assert_eq!(module_state(&mut e, PROFILING), DENYLISTED);
        } else {
            assert!(matches!(groups, Reply::MetricGroups(_)));
            assert_eq!(module_state(&mut e, PROFILING), LOADED);
        }
        let g1 = group(&mut e, 0, &[(GPU, 1)]);
        let w1 = Request::WatchFields {
            group_id: g1,
            field_group_id: prof,
            update_freq_us: S,
            max_keep_age_s: 0.0,
            max_keep_samples: 4,
        };
        let expect = if deny { Reply::Error(-33) } else { Reply::Ok };
        assert_eq!(e.handle(0, &w1), expect);
    }
    // Absent (the open-source build): the first request that needs it fails its load.
    let (mut e, _) = engine_str("[gpus]\ncount = 1\nmodel = \"x\"\nprofiling_module = false\n");
    assert_eq!(module_state(&mut e, PROFILING), NOT_LOADED);
    assert_eq!(
        e.handle(0, &Request::ProfGetSupportedMetricGroups { gpu_id: 0 }),
        Reply::Error(-33)
    );
    assert_eq!(module_state(&mut e, PROFILING), FAILED);
}

/// DCGM#303 as `prof_stuck`: after it the GPU's profiling fields read 0 (or fail with the
/// status given) while its other fields read on; a re-arm (unwatch, then watch) of them
/// heals it, a watch alone does not; `restart` only a new engine heals.
#[test]
fn stuck_profiling_reads_zero_until_its_watch_is_re_armed() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    let g = group(&mut e, 0, &[(GPU, 0), (GPU, 1)]);
    let fg = field_group(&mut e, 0, &[203, 1001]);
    watch_group(&mut e, 0, g, fg, 1000, 0.0, 4);
    clock.advance_ms(1500);
    let before = dbl(&one(&mut e, (GPU, 0), 1001));
    assert!(before > 0.0, "{before}");
    e.inject(Fault::ProfStuck {
        gpu: 0,
        status: 0,
        restart_only: false,
    });
    clock.advance_ms(1000);
    assert_eq!(dbl(&one(&mut e, (GPU, 0), 1001)), 0.0);
    assert!(dbl(&one(&mut e, (GPU, 1), 1001)) > 0.0);
    assert!(int(&one(&mut e, (GPU, 0), 203)) > 0);
    // Watched again without an unwatch: still stuck.
    watch_group(&mut e, 0, g, fg, 1000, 0.0, 4);
    clock.advance_ms(1000);
    assert_eq!(dbl(&one(&mut e, (GPU, 0), 1001)), 0.0);
    // A re-arm of GPU 0 alone.
    let g0 = group(&mut e, 0, &[(GPU, 0)]);
    let prof = field_group(&mut e, 0, &[1001]);
    let unwatch = Request::UnwatchFields {
        group_id: g0,
        field_group_id: prof,
    };
    assert_eq!(e.handle(0, &unwatch), Reply::Ok);
    watch_group(&mut e, 0, g0, prof, 1000, 0.0, 4);
    clock.advance_ms(1000);
    assert!(dbl(&one(&mut e, (GPU, 0), 1001)) > 0.0);
    // Failing with -37, and healed only by a new engine.
    e.inject(Fault::ProfStuck {
        gpu: 1,
        status: -37,
        restart_only: true,
    });
    clock.advance_ms(1000);
    let s = one(&mut e, (GPU, 1), 1001);
    assert_eq!(s.status, -37);
    assert_eq!(e.handle(0, &unwatch), Reply::Ok);
    let g1 = group(&mut e, 0, &[(GPU, 1)]);
    assert_eq!(
        e.handle(
            0,
            &Request::UnwatchFields {
                group_id: g1,
                field_group_id: prof
            }
        ),
        Reply::Ok
    );
    watch_group(&mut e, 0, g1, prof, 1000, 0.0, 4);
    clock.advance_ms(1000);
    assert_eq!(one(&mut e, (GPU, 1), 1001).status, -37);
}

#[test]
fn a_failing_p2p_query_answers_bad_param_and_cpus_need_the_sysmon_module() {
    let (mut e, _) = engine_str("[gpus]\ncount = 2\nmodel = \"x\"\np2p = \"error\"\n");
    assert_eq!(e.handle(0, &Request::GetNvLinkP2PStatus), Reply::Error(-1));
    for group in [7, 8] {
        assert_eq!(
            e.handle(
                0,
                &Request::GetEntityGroupEntities {
                    entity_group: group,
                    only_supported: false
                }
            ),
            Reply::Error(-33),
            "entity group {group}"
        );
    }
    let (mut grace, _) = engine("large-bench.toml");
    assert!(matches!(
        grace.handle(0, &Request::GetCpuHierarchy),
        Reply::CpuHierarchy(c) if c.len() == 2
    ));
}

/// Real DCGM 4.6's memory health check reads the GPU's row-remap failure counter
/// (tests/it/real_dcgm.rs shows it on NVIDIA's library): non-zero fails MEM for that GPU only.
#[test]
fn a_row_remap_failure_fails_memory_health_of_its_gpu() {
    let (mut e, _) = engine_str(
        "[gpus]\ncount = 2\nmodel = \"NVIDIA H100 80GB HBM3\"\n\
         [[fields]]\nid = 395\ngpus = [1]\ngen = { kind = \"constant\", value = 1 }\n",
    );
    let g = group(&mut e, 0, &[(GPU, 0), (GPU, 1)]);
    let (overall, incidents) = health(&mut e, g, 0x10);
    assert_eq!(overall, 20);
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    assert_eq!(incidents[0].entity, (GPU, 1));
    assert_eq!(incidents[0].system, 0x10);
    assert_eq!(incidents[0].code, 80, "DCGM_FR_ROW_REMAP_FAILURE");
    // Not watched: no incident.
    assert_eq!(health(&mut e, g, 0x1).0, 0);
}

// ------------------------------------------------------------------------------ groups

#[test]
fn groups_follow_the_real_error_codes() {
    let (mut e, _) = engine("h100-8gpu-nvswitch.toml");
    assert_eq!(
        e.handle(0, &Request::GroupDestroy { group_id: 99 }),
        Reply::Error(-5)
    );
    let g = group(&mut e, 0, &[]);
    assert_eq!(g, 2, "user groups start after the two internal ones");
    let add = |e: &mut Engine, group_id: u64, entity_group: u32, entity_id: u32| {
        e.handle(
            0,
            &Request::GroupAddEntity {
                group_id,
                entity_group,
                entity_id,
            },
        )
    };
    assert_eq!(add(&mut e, g, GPU, 8), Reply::Error(-1), "unknown GPU");
    assert_eq!(
        add(&mut e, g, 42, 0),
        Reply::Error(-1),
        "unknown entity group"
    );
    assert_eq!(add(&mut e, 77, GPU, 0), Reply::Error(-5), "unknown group");
    assert_eq!(add(&mut e, g, GPU, 0), Reply::Ok);
    assert_eq!(add(&mut e, g, GPU, 0), Reply::Error(-1), "duplicate");
    assert_eq!(add(&mut e, g, LINK, link(GPU, 3, 2)), Reply::Ok);
    assert_eq!(add(&mut e, g, SWITCH, 3), Reply::Ok);
    e.inject(Fault::GpuLost { gpu: 5 });
    assert_eq!(add(&mut e, g, GPU, 5), Reply::Error(-18));
    // Only the low 32 bits of a group id matter.
    assert_eq!(
        e.handle(
            0,
            &Request::GroupGetInfo {
                group_id: g | 0xdead_0000_0000
            }
        ),
        Reply::GroupInfo {
            name: "g".into(),
            entities: vec![(GPU, 0), (LINK, link(GPU, 3, 2)), (SWITCH, 3)]
        }
    );
    let all_gpus = e.handle(
        0,
        &Request::GroupGetInfo {
            group_id: 0x7fff_ffff,
        },
    );
    assert_eq!(
        all_gpus,
        Reply::GroupInfo {
            name: "DCGM_ALL_SUPPORTED_GPUS".into(),
            entities: (0..8).map(|i| (GPU, i)).collect()
        }
    );
    let Reply::GroupInfo { entities, .. } = e.handle(
        0,
        &Request::GroupGetInfo {
            group_id: 0xffff_ffff_7fff_fffe,
        },
    ) else {
        panic!()
    };
    assert_eq!(entities, (0..4).map(|i| (SWITCH, i)).collect::<Vec<_>>());
    // Group types fill themselves; a lost GPU is left out.
    for (ty, n) in [(0, 7), (1, 0), (2, 4), (3, 0), (4, 0), (5, 11)] {
        let g = id(e.handle(
            0,
            &Request::GroupCreate {
                group_type: ty,
                name: format!("t{ty}"),
            },
        ));
        let Reply::GroupInfo { entities, .. } = e.handle(0, &Request::GroupGetInfo { group_id: g })
        else {
            panic!()
        };
        assert_eq!(entities.len(), n, "group type {ty}");
    }
    assert_eq!(
        e.handle(
            0,
            &Request::GroupCreate {
                group_type: 6,
                name: "x".into()
            }
        ),
        Reply::Error(-1)
    );
    // 64 groups in all, two of them the engine's own.
    let mut made = 1 + 6;
    loop {
        match e.handle(
            0,
            &Request::GroupCreate {
                group_type: 1,
                name: "n".into(),
            },
        ) {
            Reply::Id(_) => made += 1,
            Reply::Error(code) => {
                assert_eq!(code, -24);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(made, 62);
    assert_eq!(
        e.handle(0, &Request::GroupDestroy { group_id: g }),
        Reply::Ok
    );
    assert_eq!(
        e.handle(0, &Request::GroupGetInfo { group_id: g }),
        Reply::Error(-5)
    );
    assert!(matches!(
        e.handle(
            0,
            &Request::GroupCreate {
                group_type: 1,
                name: "again".into()
            }
        ),
        Reply::Id(_)
    ));
}

#[test]
fn a_group_holds_at_most_1024_entities() {
    // Link ids are listed on a node with an NvSwitch (DCGM's NvSwitch module lists them).
    let (mut e, _) = engine_str(
        "[gpus]\ncount = 32\nmodel = \"NVIDIA H100 80GB HBM3\"\nnvlinks = 36\n\
         [switches]\ncount = 1\nports = 1\n",
    );
    let links = ids(e.handle(
        0,
        &Request::GetEntityGroupEntities {
            entity_group: LINK,
            only_supported: false,
        },
    ));
    assert_eq!(links.len(), 32 * 36 + 1);
    let g = group(&mut e, 0, &[]);
    for (i, l) in links.iter().enumerate().take(1025) {
        let r = e.handle(
            0,
            &Request::GroupAddEntity {
                group_id: g,
                entity_group: LINK,
                entity_id: *l,
            },
        );
        assert_eq!(
            r,
            if i < 1024 {
                Reply::Ok
            } else {
                Reply::Error(-24)
            },
            "entity {i}"
        );
    }
}

#[test]
fn field_groups_follow_the_real_error_codes() {
    let (mut e, _) = engine("one-gpu.toml");
    let mk = |e: &mut Engine, ids: Vec<u16>, name: &str| {
        e.handle(
            0,
            &Request::FieldGroupCreate {
                field_ids: ids,
                name: name.into(),
            },
        )
    };
    assert_eq!(mk(&mut e, vec![], "x"), Reply::Error(-1));
    assert_eq!(mk(&mut e, vec![150; 128], "x"), Reply::Error(-1));
    assert_eq!(mk(&mut e, vec![9999], "x"), Reply::Error(-1));
    assert_eq!(mk(&mut e, vec![150], ""), Reply::Error(-1));
    assert_eq!(mk(&mut e, vec![150], &"n".repeat(256)), Reply::Error(-1));
    // Ids 1-3 are the host engine's own field groups.
    assert_eq!(mk(&mut e, vec![150; 127], "x"), Reply::Id(4));
    assert_eq!(mk(&mut e, vec![150], "x"), Reply::Error(-26));
    assert_eq!(
        mk(&mut e, vec![150], "DCGM_INTERNAL_JOB"),
        Reply::Error(-26)
    );
    let Reply::FieldGroups(all) = e.handle(0, &Request::FieldGroupGetAll) else {
        panic!()
    };
    assert_eq!(
        all.iter()
            .map(|f| (f.id, f.name.as_str()))
            .collect::<Vec<_>>(),
        [
            (1, "DCGM_INTERNAL_30SEC"),
            (2, "DCGM_INTERNAL_HOURLY"),
            (3, "DCGM_INTERNAL_JOB"),
            (4, "x")
        ]
    );
    assert_eq!(
        e.handle(0, &Request::FieldGroupDestroy { field_group_id: 2 }),
        Reply::Error(-17)
    );
    assert_eq!(
        e.handle(
            0,
            &Request::FieldGroupDestroy {
                field_group_id: 999
            }
        ),
        Reply::Error(-14)
    );
    assert_eq!(
        e.handle(
            0,
            &Request::FieldGroupGetInfo {
                field_group_id: 999
            }
        ),
        Reply::Error(-14)
    );
    assert_eq!(
        e.handle(0, &Request::FieldGroupGetInfo { field_group_id: 4 }),
        Reply::FieldGroups(vec![FieldGroupEntry {
            id: 4,
            name: "x".into(),
            field_ids: vec![150; 127]
        }])
    );
    let mut n = 4;
    loop {
        match mk(&mut e, vec![150], &format!("f{n}")) {
            Reply::Id(_) => n += 1,
            Reply::Error(code) => {
                assert_eq!(code, -24);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(n, 64, "64 field groups in all");
    assert_eq!(
        e.handle(0, &Request::FieldGroupDestroy { field_group_id: 4 }),
        Reply::Ok
    );
    assert_eq!(
        e.handle(0, &Request::FieldGroupDestroy { field_group_id: 4 }),
        Reply::Error(-14)
    );
}

#[test]
fn watch_requests_check_their_arguments() {
    let (mut e, _) = engine("one-gpu.toml");
    let g = group(&mut e, 0, &[(GPU, 0)]);
    let f = field_group(&mut e, 0, &[150]);
    let w = |e: &mut Engine, group_id: u64, field_group_id: u64, freq: i64| {
        e.handle(
            0,
            &Request::WatchFields {
                group_id,
                field_group_id,
                update_freq_us: freq,
                max_keep_age_s: 60.0,
                max_keep_samples: 0,
            },
        )
    };
    assert_eq!(w(&mut e, 0, f, 1000), Reply::Error(-1));
    assert_eq!(w(&mut e, g, f, 0), Reply::Error(-1));
    assert_eq!(w(&mut e, 99, f, 1000), Reply::Error(-5));
    assert_eq!(w(&mut e, g, 99, 1000), Reply::Error(-14));
    assert_eq!(
        w(&mut e, 0x7fff_ffff, f, 1000),
        Reply::Ok,
        "the all-GPUs group"
    );
    assert_eq!(one(&mut e, (GPU, 0), 150).status, 0);
    assert_eq!(
        e.handle(
            0,
            &Request::UnwatchFields {
                group_id: 99,
                field_group_id: f
            }
        ),
        Reply::Error(-5)
    );
    assert_eq!(
        e.handle(
            0,
            &Request::UnwatchFields {
                group_id: g,
                field_group_id: 99
            }
        ),
        Reply::Error(-14)
    );
    assert_eq!(
        e.handle(
            0,
            &Request::GetValuesSince {
                group_id: 99,
                field_group_id: f,
                since_us: 0
            }
        ),
        Reply::Error(-5)
    );
    // A pair that was never watched fails the call with NOT_WATCHED after the pairs
    // before it reached the callback, and the caller's timestamp stays (DcgmApi.cpp
    // helperGetValuesSince aborts on any status but NO_DATA).
    let g2 = group(&mut e, 0, &[(GPU, 0)]);
    let f2 = field_group(&mut e, 0, &[150, 203]);
    match e.handle(
        0,
        &Request::GetValuesSince {
            group_id: g2,
            field_group_id: f2,
            since_us: 7,
        },
    ) {
        Reply::ValuesSince {
            samples,
            next_since_us,
            status,
        } => {
            assert_eq!((status, next_since_us), (-16, 7));
            assert!(samples.iter().all(|x| x.field_id == 150) && !samples.is_empty());
        }
        other => panic!("{other:?}"),
    }
    // A watched pair with nothing in the range is NO_DATA: skipped.
    let (s, next) = since(&mut e, g, f, T0 + 3600 * S);
    assert!(s.is_empty() && next > T0);
    // Unwatching a pair never watched answers NOT_WATCHED, after unwatching the others
    // (DcgmCacheManager::RemoveEntityFieldWatch; UnwatchFieldGroup keeps going).
    let unwatch_req = Request::UnwatchFields {
        group_id: g2,
        field_group_id: f2,
    };
    assert_eq!(e.handle(0, &unwatch_req), Reply::Error(-16));
    assert_eq!(e.watch_count(), 0, "150 was unwatched all the same");
    // A pair once watched is known: unwatching it again is no error.
    let f150 = field_group(&mut e, 0, &[150]);
    let again = Request::UnwatchFields {
        group_id: g2,
        field_group_id: f150,
    };
    assert_eq!(e.handle(0, &again), Reply::Ok);
}

#[test]
fn a_connection_takes_its_groups_and_watches_with_it_unless_it_persists() {
    let (mut e, clock) = engine("one-gpu.toml");
    let (g, f) = watch(&mut e, 7, &[(GPU, 0)], &[150], 1000, 60.0);
    assert_eq!(one(&mut e, (GPU, 0), 150).status, 0);
    clock.advance_ms(1500);
    e.disconnect(7);
    clock.advance_ms(5000);
    assert_eq!(
        e.handle(0, &Request::GroupGetInfo { group_id: g }),
        Reply::Error(-5)
    );
    assert_eq!(
        e.handle(0, &Request::FieldGroupGetInfo { field_group_id: f }),
        Reply::Error(-14)
    );
    // The connection's watcher went with it (DcgmCacheManager::OnConnectionRemove); the
    // samples stay, the last one read with OK at its old time.
    let last = one(&mut e, (GPU, 0), 150);
    assert_eq!((last.status, last.ts_us), (0, T0 + S));
    assert_eq!(e.watch_count(), 0);

    // A watch another connection made on the same field survives.
    let (_, _) = watch(&mut e, 8, &[(GPU, 0)], &[150], 1000, 60.0);
    let (g9, _) = watch(&mut e, 9, &[(GPU, 0)], &[150], 1000, 60.0);
    e.disconnect(9);
    clock.advance_ms(1000);
    let kept = one(&mut e, (GPU, 0), 150);
    assert_eq!((kept.status, kept.ts_us), (0, T0 + 7500 * 1000));
    assert_eq!(
        e.handle(0, &Request::GroupGetInfo { group_id: g9 }),
        Reply::Error(-5)
    );

    assert_eq!(
        e.handle(
            10,
            &Request::Login {
                persist_after_disconnect: true,
                library: None,
            }
        ),
        Reply::Ok
    );
    let (g10, _) = watch(&mut e, 10, &[(GPU, 0)], &[203], 1000, 60.0);
    e.disconnect(10);
    assert!(matches!(
        e.handle(0, &Request::GroupGetInfo { group_id: g10 }),
        Reply::GroupInfo { .. }
    ));
    assert_eq!(one(&mut e, (GPU, 0), 203).status, 0);
}

// ------------------------------------------------------------------------------ faults

#[test]
fn a_lost_gpu_can_answer_its_attributes_with_blanks() {
    let (mut e, _) = engine_str(
        "[node]\nlost_gpu_attributes = \"blank\"\n[gpus]\ncount = 2\nmodel = \"NVIDIA H100 80GB HBM3\"\n[[gpu]]\nid = 1\nlost = true\n",
    );
    let Reply::DeviceAttributes(a) = e.handle(0, &Request::GetDeviceAttributes { gpu_id: 1 })
    else {
        panic!("attributes with blanks expected");
    };
    assert_eq!(
        (a.uuid.as_str(), a.fb_total_mb),
        ("<<<NULL>>>", 0x7fff_fff0)
    );
    assert_eq!(
        e.handle(0, &Request::GetGpuStatus { gpu_id: 1 }),
        Reply::Status(4)
    );
    assert!(matches!(
        e.handle(0, &Request::GetDeviceAttributes { gpu_id: 0 }),
        Reply::DeviceAttributes(a) if a.uuid.starts_with("GPU-")
    ));
    assert!(Profile::parse("[node]\nlost_gpu_attributes = \"maybe\"\n").is_err());
}

#[test]
fn after_library_gone_every_request_answers_uninitialized() {
    let (mut e, _) = engine("one-gpu.toml");
    assert!(matches!(
        e.handle(
            0,
            &Request::GetAllDevices {
                only_supported: false
            }
        ),
        Reply::Ids(_)
    ));
    e.inject(Fault::LibraryGone);
    for req in [
        Request::GetAllDevices {
            only_supported: false,
        },
        Request::GetDeviceAttributes { gpu_id: 0 },
        Request::GetGpuInstanceHierarchy,
    ] {
        assert_eq!(e.handle(0, &req), Reply::Error(-10), "{req:?}");
    }
    // Having answered as shut down, it stays so.
    e.inject(Fault::LibraryRestored);
    assert_eq!(
        e.handle(0, &Request::GetGpuInstanceHierarchy),
        Reply::Error(-10)
    );
}

#[test]
fn an_engine_replaying_a_lost_then_restored_library_answers() {
    let (mut e, _) = engine("one-gpu.toml");
    e.inject(Fault::LibraryGone);
    e.inject(Fault::LibraryRestored);
    assert!(matches!(
        e.handle(
            0,
            &Request::GetAllDevices {
                only_supported: false
            }
        ),
        Reply::Ids(_)
    ));
}

#[test]
fn a_lost_gpu_reads_blank_stays_listed_and_fails_health() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    let (g, f) = watch(&mut e, 0, &[(GPU, 1)], &[150, 155], 1000, 60.0);
    clock.advance_ms(2000);
    e.inject(Fault::GpuLost { gpu: 1 });
    clock.advance_ms(2000);
    let (s, _) = since(&mut e, g, f, 0);
    for x in &s {
        let blank = matches!(
            x.value,
            Value::Int64(INT64_BLANK) | Value::Double(FP64_BLANK)
        );
        assert_eq!(blank, x.ts_us > T0 + 2 * S, "{x:?}");
        assert_eq!(x.status, 0, "the cache stores blanks with status OK");
    }
    assert_eq!(
        e.handle(0, &Request::GetGpuStatus { gpu_id: 1 }),
        Reply::Status(4)
    );
    assert_eq!(
        e.handle(0, &Request::GetDeviceAttributes { gpu_id: 1 }),
        Reply::Error(-18)
    );
    assert_eq!(
        ids(e.handle(
            0,
            &Request::GetAllDevices {
                only_supported: false
            }
        ))
        .len(),
        8
    );
    // The supported-only lists keep GPUs whose status is Ok (DcgmCacheManager::GetGpuIds).
    assert_eq!(
        ids(e.handle(
            0,
            &Request::GetAllDevices {
                only_supported: true
            }
        )),
        [0, 2, 3, 4, 5, 6, 7]
    );
    assert_eq!(
        ids(e.handle(
            0,
            &Request::GetEntityGroupEntities {
                entity_group: GPU,
                only_supported: true
            }
        )),
        [0, 2, 3, 4, 5, 6, 7]
    );
    let (overall, incidents) = health(&mut e, g, 0xffff_ffff);
    assert_eq!(overall, 20);
    assert_eq!(
        (incidents[0].system, incidents[0].code, incidents[0].entity),
        (1, 120, (GPU, 1))
    );
    assert!(incidents[0].msg.contains("fallen off the bus"));
    let Reply::P2PStatus(m) = e.handle(0, &Request::GetNvLinkP2PStatus) else {
        panic!()
    };
    assert!(m[1].1.iter().all(|s| *s == 5) && m[0].1[1] == 5);
    e.inject(Fault::GpuRecovered { gpu: 1 });
    clock.advance_ms(1000);
    assert_eq!(
        e.handle(0, &Request::GetGpuStatus { gpu_id: 1 }),
        Reply::Status(1)
    );
    assert!((35..=80).contains(&int(&one(&mut e, (GPU, 1), 150))));
    assert_eq!(health(&mut e, g, 0xffff_ffff), (0, vec![]));
}

#[test]
fn xids_are_events_that_raise_health_incidents_by_dcgms_table() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    let (g, f) = watch(&mut e, 0, &[(GPU, 0), (GPU, 1)], &[230], 1000, 600.0);
    assert_eq!(health(&mut e, g, 0xffff_ffff), (0, vec![]));
    clock.advance_ms(1500);
    e.inject(Fault::Xid { gpu: 0, xid: 79 });
    clock.advance_ms(3000);
    let (s, _) = since(&mut e, g, f, 0);
    let gpu0: Vec<(i64, i64)> = s
        .iter()
        .filter(|x| x.entity_id == 0)
        .map(|x| (x.ts_us, int(x)))
        .collect();
    assert_eq!(gpu0, [(T0 + 1_500_000, 79)], "the event only");
    let gpu1: Vec<i64> = s.iter().filter(|x| x.entity_id == 1).map(int).collect();
    assert!(gpu1.is_empty(), "no XID, no sample: {gpu1:?}");
    assert_eq!(
        int(&one(&mut e, (GPU, 0), 230)),
        79,
        "the field holds the last XID"
    );
    // XID 79 is "devastating": reported under system ALL whatever the mask.
    let (overall, incidents) = health(&mut e, g, 0x10);
    assert_eq!(overall, 20);
    assert_eq!(incidents.len(), 1);
    assert_eq!(
        (incidents[0].system, incidents[0].code, incidents[0].entity),
        (0xffff_ffff, 120, (GPU, 0))
    );
    // A memory XID counts only when memory is watched; unknown XIDs raise nothing.
    e.inject(Fault::Xid { gpu: 1, xid: 31 });
    e.inject(Fault::Xid { gpu: 1, xid: 13 });
    let (_, incidents) = health(&mut e, g, 0x1);
    assert!(incidents.iter().all(|i| i.entity == (GPU, 0)));
    let (overall, incidents) = health(&mut e, g, 0x10);
    let gpu1: Vec<&Incident> = incidents.iter().filter(|i| i.entity == (GPU, 1)).collect();
    assert_eq!(gpu1.len(), 1);
    assert_eq!(
        (gpu1[0].system, gpu1[0].health, gpu1[0].code),
        (0x10, 10, 101)
    );
    assert!(
        gpu1[0].msg.starts_with("Detected XID 31 for GPU 1"),
        "{}",
        gpu1[0].msg
    );
    assert_eq!(overall, 20);
    assert_eq!(
        health(&mut e, g, 0).0,
        0,
        "no systems watched, nothing checked"
    );
    // Groups without the GPU do not see its incidents.
    let other = group(&mut e, 0, &[(GPU, 2)]);
    assert_eq!(health(&mut e, other, 0xffff_ffff), (0, vec![]));
    e.inject(Fault::HealthClear { gpu: 0 });
    e.inject(Fault::HealthClear { gpu: 1 });
    assert_eq!(health(&mut e, g, 0xffff_ffff), (0, vec![]));
    assert_eq!(
        e.handle(0, &Request::HealthGet { group_id: g }),
        Reply::HealthSystems(0xffff_ffff)
    );
    assert_eq!(
        e.handle(0, &Request::HealthGet { group_id: 99 }),
        Reply::Error(-5)
    );
}

#[test]
fn a_clock_event_shows_in_exactly_the_next_sample() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    let (g, f) = watch(&mut e, 0, &[(GPU, 1)], &[112], 1000, 600.0);
    clock.advance_ms(1500);
    e.inject(Fault::ClockEvent {
        gpu: 1,
        reasons: 0x48,
    });
    clock.advance_ms(1000);
    assert_eq!(int(&one(&mut e, (GPU, 1), 112)), 0x48);
    clock.advance_ms(500);
    assert_eq!(int(&one(&mut e, (GPU, 1), 112)), 0, "one sample only");
    // An event at the very time of a sample already taken goes into the next one.
    e.inject(Fault::ClockEvent {
        gpu: 1,
        reasons: 0x8,
    });
    clock.advance_ms(2000);
    let (s, _) = since(&mut e, g, f, 0);
    let v: Vec<(i64, i64)> = s.iter().map(|x| ((x.ts_us - T0) / S, int(x))).collect();
    assert_eq!(v, [(0, 0), (1, 0), (2, 0x48), (3, 0), (4, 0x8), (5, 0)]);
}

#[test]
fn fields_can_be_made_unsupported_set_and_restored() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    watch(&mut e, 0, &[(GPU, 0), (GPU, 1)], &[150, 50], 1000, 60.0);
    e.inject(Fault::FieldNotSupported {
        gpu: Some(0),
        field: 150,
    });
    clock.advance_ms(1000);
    let v = latest(&mut e, &[(GPU, 0), (GPU, 1)], &[150]);
    assert_eq!(
        (v[0].status, &v[0].value),
        (0, &Value::Int64(INT64_NOT_SUPPORTED))
    );
    assert!((35..=80).contains(&int(&v[1])));
    e.inject(Fault::FieldNotSupported {
        gpu: None,
        field: 150,
    });
    clock.advance_ms(1000);
    assert_eq!(
        latest(&mut e, &[(GPU, 1)], &[150])[0].value,
        Value::Int64(INT64_NOT_SUPPORTED)
    );
    e.inject(Fault::FieldRestored {
        gpu: None,
        field: 150,
    });
    e.inject(Fault::FieldRestored {
        gpu: Some(0),
        field: 150,
    });
    e.inject(Fault::SetField {
        gpu: Some(1),
        field: 50,
        gen: dcgm_sim::engine::generator::Generator::String {
            value: "Broken GPU".into(),
        },
    });
    clock.advance_ms(1000);
    let v = latest(&mut e, &[(GPU, 0), (GPU, 1)], &[150, 50]);
    assert!((35..=80).contains(&int(&v[0])));
    assert_eq!(text(&v[1]), "NVIDIA H100 80GB HBM3");
    assert_eq!(text(&v[3]), "Broken GPU");
}

#[test]
fn mig_reconfiguration_replaces_instances_and_gone_ones_keep_their_last_samples() {
    let (mut e, clock) = engine("a100-mixed-mig.toml");
    // Watch every instance of GPU 1.
    let gis: Vec<(u32, u32)> = (8..12).map(|i| (GPU_I, i)).collect();
    watch(&mut e, 0, &gis, &[1001], 1000, 60.0);
    let before = e.watch_count();
    assert_eq!(before, 4);
    clock.advance_ms(1000);
    e.inject(Fault::MigReconfigure {
        gpu: 1,
        instances: vec!["3g.40gb".into(), "3g.40gb:2".into()],
    });
    let rows = hierarchy(&mut e);
    let gpu1: Vec<(u32, u32)> = rows
        .iter()
        .filter(|r| r.parent == (GPU, 1) || (r.entity.0 == GPU_CI && r.nvml_gpu_index == 1))
        .map(|r| r.entity)
        .collect();
    assert_eq!(
        gpu1,
        [
            (GPU_I, 8),
            (GPU_CI, 8),
            (GPU_I, 9),
            (GPU_CI, 9),
            (GPU_CI, 10)
        ]
    );
    // Watches on instances that vanished stay with their last samples (nothing in DCGM
    // unwatches them) and take no more.
    assert_eq!(e.watch_count(), 4);
    let gone = one(&mut e, (GPU_I, 10), 1001);
    assert_eq!((gone.status, gone.ts_us), (0, T0 + S));
    clock.advance_ms(3000);
    assert_eq!(one(&mut e, (GPU_I, 10), 1001).ts_us, T0 + S);
    assert_eq!(one(&mut e, (GPU_I, 8), 1001).ts_us, T0 + 4 * S);
    let names = live(&mut e, &[(GPU_I, 8), (GPU_I, 9)], &[50]);
    assert!(names.iter().all(|n| text(n) == "3g.40gb"));
    // Other GPUs keep their layout.
    assert_eq!(
        rows.iter().filter(|r| r.entity.0 == GPU_I).count(),
        7 + 2 + 1 + 2
    );
    // An impossible layout is refused; MIG can be turned off.
    e.inject(Fault::MigReconfigure {
        gpu: 1,
        instances: vec!["7g.80gb".into(); 2],
    });
    assert_eq!(
        hierarchy(&mut e)
            .iter()
            .filter(|r| r.parent == (GPU, 1))
            .count(),
        2
    );
    e.inject(Fault::MigReconfigure {
        gpu: 1,
        instances: vec![],
    });
    assert_eq!(
        hierarchy(&mut e)
            .iter()
            .filter(|r| r.parent == (GPU, 1))
            .count(),
        0
    );
    let Reply::DeviceAttributes(a) = e.handle(0, &Request::GetDeviceAttributes { gpu_id: 1 })
    else {
        panic!()
    };
    assert_eq!(a.mig_mode, 0);
}

#[test]
fn link_states_and_injected_incidents_change_at_run_time() {
    let (mut e, _) = engine("h100-8gpu-nvswitch.toml");
    e.inject(Fault::LinkState {
        gpu: 7,
        link: 17,
        state: 3,
    });
    e.inject(Fault::LinkState {
        gpu: 0,
        link: 2,
        state: 1,
    });
    e.inject(Fault::SwitchPortState {
        switch: 0,
        port: 5,
        state: 2,
    });
    let Reply::LinkStatus(ls) = e.handle(0, &Request::GetNvLinkLinkStatus) else {
        panic!()
    };
    assert_eq!(
        (ls.gpus[7].1[17], ls.gpus[0].1[2], ls.switches[0].1[5]),
        (3, 1, 2)
    );
    let g = group(&mut e, 0, &[(GPU, 3)]);
    e.inject(Fault::HealthIncident {
        gpu: 3,
        system: 0x10,
        health: 20,
        code: 80,
        msg: String::new(),
    });
    let (overall, incidents) = health(&mut e, g, 0x10);
    assert_eq!(overall, 20);
    assert_eq!(
        incidents[0].msg,
        "GPU 3 had uncorrectable memory errors and row remapping failed."
    );
    assert_eq!(health(&mut e, g, 0x1), (0, vec![]));
    // Faults naming hardware that does not exist are ignored.
    e.inject(Fault::GpuLost { gpu: 99 });
    e.inject(Fault::LinkState {
        gpu: 0,
        link: 40,
        state: 2,
    });
    assert_eq!(
        ids(e.handle(
            0,
            &Request::GetAllDevices {
                only_supported: true
            }
        ))
        .len(),
        8
    );
}

#[test]
fn scheduled_faults_apply_at_their_time_even_when_nobody_asked_meanwhile() {
    let (mut e, clock) = engine_str(
        "[gpus]\ncount = 2\nmodel = \"NVIDIA H100 80GB HBM3\"\n\
         [[faults]]\nat_s = 5.0\naction = \"gpu_lost 0\"\n\
         [[faults]]\nat_s = 2.5\naction = \"xid 1 48\"\n",
    );
    let (g, f) = watch(&mut e, 0, &[(GPU, 0)], &[150], 1000, 60.0);
    clock.advance_ms(4900);
    assert_eq!(
        e.handle(0, &Request::GetGpuStatus { gpu_id: 0 }),
        Reply::Status(1)
    );
    clock.advance_ms(5100);
    let (s, _) = since(&mut e, g, f, 0);
    assert_eq!(s.len(), 11);
    for x in &s {
        // The sample at the fault's own time still saw the GPU.
        assert_eq!(int(x) == INT64_BLANK, x.ts_us > T0 + 5 * S, "{x:?}");
    }
    assert_eq!(
        e.handle(0, &Request::GetGpuStatus { gpu_id: 0 }),
        Reply::Status(4)
    );
    let g1 = group(&mut e, 0, &[(GPU, 1)]);
    assert_eq!(health(&mut e, g1, 0xffff_ffff).0, 20, "XID 48 at 2.5 s");
}

#[test]
fn the_control_file_injects_faults_at_run_time() {
    let ctl = std::env::temp_dir().join(format!("dcgm-sim-engine-ctl-{}", std::process::id()));
    std::fs::write(&ctl, "").unwrap();
    std::env::set_var("DCGM_SIM_CONTROL", &ctl);
    std::env::remove_var("DCGM_SIM_PROFILE");
    let mut e = Engine::from_env().unwrap();
    std::env::remove_var("DCGM_SIM_CONTROL");
    std::fs::write(&ctl, "gpu_lost 2\n").unwrap();
    assert_eq!(
        e.handle(0, &Request::GetGpuStatus { gpu_id: 2 }),
        Reply::Status(4)
    );
    // A bad line is reported and skipped; the lines after it still apply.
    std::fs::write(
        &ctl,
        "gpu_lost 2\ngpu_recovered two\ngpu_recovered 2\nmig 3 3g.40gb,3g.40gb\n",
    )
    .unwrap();
    assert_eq!(
        e.handle(0, &Request::GetGpuStatus { gpu_id: 2 }),
        Reply::Status(1)
    );
    assert_eq!(
        hierarchy(&mut e).len(),
        4,
        "two GPU instances with one compute instance each"
    );
    std::fs::remove_file(&ctl).unwrap();
}

// ------------------------------------------------------------------------------ cost

#[test]
fn reading_latest_values_stays_cheap_on_a_big_node() {
    let (mut e, clock) = engine("large-bench.toml");
    let fields: Vec<u16> = dcgm_sys::fields::FIELDS
        .iter()
        .filter(|f| f.entity_level == 1 && f.field_type != b'b')
        .map(|f| f.id)
        .take(60)
        .collect();
    assert_eq!(fields.len(), 60);
    let gpus: Vec<(u32, u32)> = (0..8).map(|g| (GPU, g)).collect();
    watch(&mut e, 0, &gpus, &fields, 1000, 600.0);
    let links: Vec<(u32, u32)> = ids(e.handle(
        0,
        &Request::GetEntityGroupEntities {
            entity_group: LINK,
            only_supported: false,
        },
    ))
    .into_iter()
    .map(|l| (LINK, l))
    .collect();
    watch(&mut e, 0, &links, &[1532, 1533, 780, 781], 1000, 600.0);
    let cores: Vec<(u32, u32)> = (0..144).map(|c| (8, c)).collect();
    watch(&mut e, 0, &cores, &[1100, 1120], 1000, 600.0);
    // Two minutes of history first, so a per-read scan of it would show.
    clock.advance_ms(120_000);
    e.handle(0, &Request::UpdateAllFields { wait: true });
    // Reads see the newest sample with the whole history kept behind it. (How fast this
    // is belongs to bench/, not to a timed assertion here.)
    for _ in 0..20 {
        clock.advance_ms(1000);
        let v = latest(&mut e, &gpus, &fields);
        assert_eq!(v.len(), 480);
        assert!(v.iter().all(|s| s.ts_us == v[0].ts_us));
    }
    assert!(e.history_len((GPU, 0), fields[0]) >= 120);
}

#[test]
fn counters_never_go_down() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    let g = group(&mut e, 0, &[(GPU, 0)]);
    let f = field_group(&mut e, 0, &[156, 202]);
    watch_group(&mut e, 0, g, f, 100, 600.0, 0);
    for _ in 0..50 {
        clock.advance_ms(137);
        e.handle(0, &Request::UpdateAllFields { wait: true });
    }
    let (all, _) = since(&mut e, g, f, 0);
    for field in [156, 202] {
        let v: Vec<i64> = all
            .iter()
            .filter(|s| s.field_id == field)
            .map(int)
            .collect();
        assert!(v.len() > 50, "{} samples of {field}", v.len());
        assert!(
            v.windows(2).all(|w| w[0] <= w[1]),
            "field {field} went down: {v:?}"
        );
    }
}

fn devices(e: &mut Engine, only_supported: bool) -> Vec<u32> {
    ids(e.handle(0, &Request::GetAllDevices { only_supported }))
}

fn gpu_status(e: &mut Engine, gpu_id: u32) -> u32 {
    match e.handle(0, &Request::GetGpuStatus { gpu_id }) {
        Reply::Status(s) => s,
        other => panic!("expected a status, got {other:?}"),
    }
}

fn gpu_entities(e: &mut Engine, only_supported: bool) -> Vec<u32> {
    ids(e.handle(
        0,
        &Request::GetEntityGroupEntities {
            entity_group: GPU,
            only_supported,
        },
    ))
}

/// DCGM 4.6 keeps an unbound GPU listed with status Detached (7): dcgmGetAllDevices and the
/// unfiltered entity list still have it, the supported-only lists do not, a group refuses it
/// with BADPARAM, its watches go with their samples and it leaves the groups it was in.
/// Bound again, it is Ok and can be added and watched again.
#[test]
fn gpu_unbind_leaves_the_gpu_listed_as_detached_and_records_bind_unbind_events() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    let (g, f) = watch(&mut e, 0, &[(GPU, 0)], &[6], 1000, 600.0);
    let (tg, tf) = watch(&mut e, 0, &[(GPU, 2), (GPU, 3)], &[150], 100, 60.0);
    clock.advance_ms(2500);
    let (s, _) = since(&mut e, g, f, 0);
    assert_eq!(
        s.iter().map(|x| (x.ts_us, int(x))).collect::<Vec<_>>(),
        [],
        "an event field: no sample before the first event, as real DCGM's XID field"
    );
    assert_eq!(one(&mut e, (GPU, 3), 150).status, 0);
    assert!(e.history_len((GPU, 3), 150) > 0);
    e.inject(Fault::GpuBind {
        gpu: 3,
        bound: false,
    });
    assert_eq!(devices(&mut e, false), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(devices(&mut e, true), [0, 1, 2, 4, 5, 6, 7]);
    assert_eq!(gpu_entities(&mut e, false), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(gpu_entities(&mut e, true), [0, 1, 2, 4, 5, 6, 7]);
    assert_eq!(gpu_status(&mut e, 3), 7);
    assert_eq!(gpu_status(&mut e, 2), 1);
    let fresh = id(e.handle(
        0,
        &Request::GroupCreate {
            group_type: 1,
            name: "after".into(),
        },
    ));
    let add = |e: &mut Engine, gpu: u32| {
        e.handle(
            0,
            &Request::GroupAddEntity {
                group_id: fresh,
                entity_group: GPU,
                entity_id: gpu,
            },
        )
    };
    assert_eq!(add(&mut e, 3), Reply::Error(-1));
    assert_eq!(add(&mut e, 2), Reply::Ok);
    // A default group leaves it out too.
    let all = id(e.handle(
        0,
        &Request::GroupCreate {
            group_type: 0,
            name: "default".into(),
        },
    ));
    match e.handle(0, &Request::GroupGetInfo { group_id: all }) {
        Reply::GroupInfo { entities, .. } => assert!(!entities.contains(&(GPU, 3))),
        other => panic!("{other:?}"),
    }
    // Its watch and samples are gone, and it left the group it was in; GPU 2 is untouched.
    assert_eq!(e.history_len((GPU, 3), 150), 0);
    assert!(e.history_len((GPU, 2), 150) > 0);
    assert_eq!(one(&mut e, (GPU, 3), 150).status, -16);
    match e.handle(0, &Request::GroupGetInfo { group_id: tg }) {
        Reply::GroupInfo { entities, .. } => assert_eq!(entities, [(GPU, 2)]),
        other => panic!("{other:?}"),
    }
    clock.advance_ms(1000);
    let (s, _) = since(&mut e, g, f, T0 + 1);
    let at = T0 + 2_500_000;
    assert_eq!(
        s.iter().map(|x| (x.ts_us, int(x))).collect::<Vec<_>>(),
        [(at, 1), (at + 1, 2)]
    );
    assert_eq!(int(&one(&mut e, (GPU, 0), 6)), 2);
    e.inject(Fault::GpuBind {
        gpu: 3,
        bound: true,
    });
    assert_eq!(devices(&mut e, true).len(), 8);
    assert_eq!(gpu_status(&mut e, 3), 1);
    assert_eq!(add(&mut e, 3), Reply::Ok);
    watch_group(&mut e, 0, fresh, tf, 100, 60.0, 0);
    clock.advance_ms(500);
    assert_eq!(one(&mut e, (GPU, 3), 150).status, 0);
}

/// One H100 with NVLinks whose NVLink KiB counters grow 100.25 MB/s (TX) and 200.25 MB/s
/// (RX); `extra` is appended.
fn nvlink_engine(extra: &str) -> (Engine, ManualClock) {
    engine_str(&format!(
        "[gpus]\ncount = 1\nmodel = \"NVIDIA H100 80GB HBM3\"\nnvlinks = 2\n\
         [[nvml_fields]]\nid = 138\ngen = {{ kind = \"counter\", per_s = 100250.0, start = 1.0e6 }}\n\
         [[nvml_fields]]\nid = 139\ngen = {{ kind = \"counter\", per_s = 200250.0, start = 2.0e6 }}\n{extra}"
    ))
}

/// DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL (449), _TX_ (843) and _RX_THROUGHPUT_TOTAL (897) are
/// what the real DCGM's cache manager makes of NVML's NVLink KiB counters: the first
/// sample of a watch 0, then each sample the rate since the previous one / 1000,
/// truncated; a live read (no previous sample) 0; watched again, the rate since the last
/// kept sample.
#[test]
fn nvlink_throughput_is_the_rate_dcgm_computes_from_the_nvml_counters() {
    let (mut e, clock) = nvlink_engine("");
    let fields = [449, 843, 897];
    let (g, f) = watch(&mut e, 0, &[(GPU, 0)], &fields, 1000, 600.0);
    let vals =
        |e: &mut Engine| -> Vec<i64> { latest(e, &[(GPU, 0)], &fields).iter().map(int).collect() };
    assert_eq!(
        vals(&mut e),
        [0, 0, 0],
        "the first sample has none before it"
    );
    clock.advance_ms(1000);
    assert_eq!(vals(&mut e), [300, 100, 200]);
    clock.advance_ms(3500);
    let (all, _) = since(&mut e, g, f, 0);
    let series: Vec<(i64, i64)> = all
        .iter()
        .filter(|s| s.field_id == 449)
        .map(|s| (s.ts_us, int(s)))
        .collect();
    let want: Vec<(i64, i64)> = (0..5)
        .map(|i| (T0 + i * S, if i == 0 { 0 } else { 300 }))
        .collect();
    assert_eq!(series, want);
    assert_eq!(
        live(&mut e, &[(GPU, 0)], &fields)
            .iter()
            .map(int)
            .collect::<Vec<_>>(),
        [0, 0, 0],
        "a live read has no previous sample"
    );
    // Unwatched for 10 s and watched again: DCGM kept the time series, so the first new
    // sample is the rate since the last kept one, not 0.
    unwatch(&mut e, 0, g, f);
    clock.advance_ms(10_000);
    watch_group(&mut e, 0, g, f, 1000, 600.0, 0);
    assert_eq!(vals(&mut e), [300, 100, 200]);
    // Refused by NVML (the DCGM field made unsupported): DCGM's NOT_SUPPORTED.
    e.inject(Fault::FieldNotSupported {
        gpu: Some(0),
        field: 449,
    });
    clock.advance_ms(1000);
    assert_eq!(int(&one(&mut e, (GPU, 0), 449)), INT64_NOT_SUPPORTED);
}

/// A counter that goes back (a driver reload) gives DCGM's signed difference: a negative
/// rate for that interval, never a huge wrapped one; a zero sum gives 0.
#[test]
fn an_nvlink_counter_reset_is_dcgms_negative_rate_and_a_zero_sum_is_zero() {
    let (mut e, clock) = nvlink_engine(
        "[[nvml_fields]]\nid = 138\n\
         gen = { kind = \"ramp\", start = 0.0, per_s = 100000.0, max = 250000.0, wrap = true }\n\
         [[nvml_fields]]\nid = 139\ngen = { kind = \"constant\", value = 0.0 }\n",
    );
    watch(&mut e, 0, &[(GPU, 0)], &[449], 1000, 600.0);
    let mut got = Vec::new();
    for _ in 0..6 {
        got.push(int(&one(&mut e, (GPU, 0), 449)));
        clock.advance_ms(1000);
    }
    // Counter: 0 (a zero sum), 100000, 200000, 50000 (reset at 2.5 s), 150000, 0 (5 s).
    assert_eq!(got, [0, 100, 100, -150, 100, 0]);
}

/// The rates are no reading of their own: a profile cannot set them, only the counters,
/// and only the counters the simulated NVML has.
#[test]
fn profiles_set_the_nvlink_counters_not_the_rates() {
    const H100: &str = "[gpus]\ncount = 1\nmodel = \"NVIDIA H100 80GB HBM3\"\n";
    // (section, field id, generator, what the error names)
    for (section, id, gen, names) in [
        (
            "fields",
            449,
            "{ kind = \"constant\", value = 5.0 }",
            &["fields[0]", "[[nvml_fields]]"][..],
        ),
        (
            "nvml_fields",
            140,
            "{ kind = \"constant\", value = 5.0 }",
            &["nvml_fields[0]", "140"],
        ),
        (
            "nvml_fields",
            138,
            "{ kind = \"text\", value = \"x\" }",
            &["nvml_fields[0]"],
        ),
    ] {
        let err =
            Profile::parse(&format!("{H100}[[{section}]]\nid = {id}\ngen = {gen}\n")).unwrap_err();
        assert!(
            names.iter().all(|n| err.contains(n)),
            "{section} {id}: {err}"
        );
    }
}
