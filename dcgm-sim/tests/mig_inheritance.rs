//! What a MIG GPU instance or compute instance reads for every field of the counters CSVs
//! the exporter ships (`etc/*.csv`), by the field's entity level, as DCGM 4.6's cache
//! manager maps a field asked of an instance to its "practical entity"
//! (`DcgmCacheManager::SetPracticalEntityInfo`): GPU-level fields read the parent GPU,
//! GPU_I-level fields asked of a compute instance read its GPU instance, GPU_CI-level
//! fields stay on the instance; profiling fields are answered per instance by the
//! profiling module (device-level ones are N/A on MIG); global fields are node-wide.

#![forbid(unsafe_code)]

use dcgm_sim::engine::{Engine, ManualClock, Profile};
use dcgm_sim::proto::*;
use dcgm_sim_model::{FE_GPU as GPU, FE_GPU_CI as GPU_CI, FE_GPU_I as GPU_I};
use dcgm_sys::fields::FieldMeta;

const T0: i64 = 1_700_000_000_000_000;
const FS_GLOBAL: i32 = 0;

const INT64_NOT_SUPPORTED: i64 = 0x7fff_ffff_ffff_fff2;
const FP64_NOT_SUPPORTED: f64 = 140_737_488_355_330.0;
const STR_NOT_SUPPORTED: &str = "<<<NOT_SUPPORTED>>>";

fn repo(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
}

/// The DCGM fields of a counters CSV (first column of every row that is not a comment);
/// `DCGM_EXP_*` rows are the exporter's own.
fn csv_fields(name: &str) -> Vec<&'static FieldMeta> {
    let text = std::fs::read_to_string(repo(name)).unwrap();
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let field = line.split(',').next().unwrap().trim();
        if field.starts_with("DCGM_EXP_") {
            continue;
        }
        let meta = dcgm_sys::fields::by_name(field)
            .unwrap_or_else(|| panic!("{name}: {field} is not a DCGM 4.6 field"));
        out.push(meta);
    }
    assert!(out.len() >= 10, "{name}: only {} fields", out.len());
    out
}

fn not_supported(v: &Value) -> bool {
    match v {
        Value::Int64(x) => *x == INT64_NOT_SUPPORTED,
        Value::Double(x) => *x == FP64_NOT_SUPPORTED,
        Value::Str(s) => s == STR_NOT_SUPPORTED,
        Value::Blob(_) => false,
    }
}

fn reply_id(r: Reply) -> u64 {
    match r {
        Reply::Id(i) => i,
        other => panic!("expected an id, got {other:?}"),
    }
}

/// GPU 1 of the mixed-MIG node (3g.40gb + 2g.20gb + two 1g.10gb, one compute instance
/// each), its instances and compute instances, all watched on `fields` every second, read
/// ten seconds later.
/// Samples by (entity, field).
type Readings = std::collections::HashMap<((u32, u32), u16), Sample>;

fn read_mig_gpu(fields: &[u16]) -> (Vec<MigEntry>, Readings) {
    let p = Profile::load(&repo("etc/sim/a100-mixed-mig.toml")).unwrap();
    let clock = ManualClock::new(T0);
    let mut e = Engine::with_clock(p, Box::new(clock.clone()));
    let rows = match e.handle(0, &Request::GetGpuInstanceHierarchy) {
        Reply::MigHierarchy(rows) => rows,
        other => panic!("{other:?}"),
    };
    let mut entities = vec![(GPU, 1)];
    let mine: Vec<MigEntry> = rows.into_iter().filter(|r| r.nvml_gpu_index == 1).collect();
    entities.extend(mine.iter().map(|r| r.entity));
    assert_eq!(mine.iter().filter(|r| r.entity.0 == GPU_I).count(), 4);
    assert_eq!(mine.iter().filter(|r| r.entity.0 == GPU_CI).count(), 4);
    let g = reply_id(e.handle(
        0,
        &Request::GroupCreate {
            group_type: 1,
            name: "mig".into(),
        },
    ));
    for &(eg, eid) in &entities {
        let r = e.handle(
            0,
            &Request::GroupAddEntity {
                group_id: g,
                entity_group: eg,
                entity_id: eid,
            },
        );
        assert_eq!(r, Reply::Ok);
    }
    let mut by_key = std::collections::HashMap::new();
    // A field group holds at most 128 fields.
    for (n, chunk) in fields.chunks(100).enumerate() {
        let f = reply_id(e.handle(
            0,
            &Request::FieldGroupCreate {
                field_ids: chunk.to_vec(),
                name: format!("csv{n}"),
            },
        ));
        let r = e.handle(
            0,
            &Request::WatchFields {
                group_id: g,
                field_group_id: f,
                update_freq_us: 1_000_000,
                max_keep_age_s: 60.0,
                max_keep_samples: 0,
            },
        );
        assert_eq!(r, Reply::Ok);
    }
    clock.advance_ms(10_000);
    let samples = match e.handle(
        0,
        &Request::EntitiesGetLatestValues {
            entities: entities.clone(),
            field_ids: fields.to_vec(),
            live: false,
        },
    ) {
        Reply::Samples(s) => s,
        other => panic!("{other:?}"),
    };
    for s in samples {
        by_key.insert(((s.entity_group, s.entity_id), s.field_id), s);
    }
    (mine, by_key)
}

fn is_profiling(id: u16) -> bool {
    (1000..1100).contains(&id)
}

#[test]
fn every_field_of_the_shipped_csvs_reads_on_mig_instances_by_its_entity_level() {
    let mut metas: Vec<&FieldMeta> = ["etc/default-counters.csv", "etc/dcp-metrics-included.csv"]
        .iter()
        .chain(["etc/1.x-compatibility-metrics.csv"].iter())
        .flat_map(|c| csv_fields(c))
        .collect();
    metas.sort_by_key(|m| m.id);
    metas.dedup_by_key(|m| m.id);
    let ids: Vec<u16> = metas.iter().map(|m| m.id).collect();
    let (mig, v) = read_mig_gpu(&ids);
    let gpu = (GPU, 1);
    let gi_of = |ci: (u32, u32)| mig.iter().find(|r| r.entity == ci).unwrap().parent;
    let mut inherited: Vec<u16> = Vec::new();
    for m in &metas {
        let at = |ent: (u32, u32)| &v[&(ent, m.id)];
        let on_gpu = at(gpu);
        for r in &mig {
            let s = at(r.entity);
            let what = format!(
                "{} (id {}, level {}, scope {}) on {:?}",
                m.name, m.id, m.entity_level, m.scope, r.entity
            );
            // An event field (the XID field) has no sample before its first event, on the
            // GPU and on its instances alike (DCGM_ST_NO_DATA).
            if on_gpu.status == -14 {
                assert_eq!(s.status, on_gpu.status, "{what}: {s:?}");
                continue;
            }
            assert_eq!(s.status, 0, "{what}: {s:?}");
            if m.scope == FS_GLOBAL || m.entity_level == 0 {
                assert_eq!(s.value, on_gpu.value, "{what}: global, node-wide");
            } else if is_profiling(m.id) {
                let per_instance = matches!(m.entity_level, GPU_I | GPU_CI);
                assert_eq!(
                    !not_supported(&s.value),
                    per_instance,
                    "{what}: profiling, {s:?}"
                );
            } else if m.entity_level == GPU {
                assert_eq!(
                    (s.value.clone(), s.ts_us),
                    (on_gpu.value.clone(), on_gpu.ts_us),
                    "{what}: the parent GPU's sample"
                );
                inherited.push(m.id);
            } else if m.entity_level == GPU_I && r.entity.0 == GPU_CI {
                assert_eq!(
                    s.value,
                    at(gi_of(r.entity)).value,
                    "{what}: its GPU instance's"
                );
            } else if matches!(m.entity_level, GPU_I | GPU_CI) {
                assert!(!not_supported(&s.value), "{what}: per instance, {s:?}");
            } else {
                assert!(not_supported(&s.value), "{what}: no reader on an instance");
            }
        }
    }
    // What NVIDIA's dashboard panels read: GPU temperature, power, SM and memory clocks,
    // energy.
    for id in [150, 155, 100, 101, 156] {
        assert!(
            inherited.contains(&id),
            "field {id} is inherited: {inherited:?}"
        );
    }
}

#[test]
fn instance_level_values_are_the_instances_own() {
    // fb total/reserved (GPU_CI level) and the profile name differ from the parent GPU's;
    // a compute instance shares its GPU instance's memory.
    let (mig, v) = read_mig_gpu(&[50, 250, 253, 1001]);
    let int = |ent: (u32, u32), f: u16| match v[&(ent, f)].value {
        Value::Int64(x) => x,
        ref o => panic!("{o:?}"),
    };
    let gpu = (GPU, 1);
    for r in &mig {
        assert!(int(r.entity, 250) < int(gpu, 250), "{r:?}");
        assert_eq!(int(r.entity, 253), 0);
        let name = match &v[&(r.entity, 50)].value {
            Value::Str(s) => s.clone(),
            o => panic!("{o:?}"),
        };
        assert!(
            name.ends_with("gb"),
            "MIG profile name, not the model: {name}"
        );
        if r.entity.0 == GPU_CI {
            assert_eq!(int(r.entity, 250), int(r.parent, 250));
        }
    }
    let gis: Vec<&MigEntry> = mig.iter().filter(|r| r.entity.0 == GPU_I).collect();
    let ratios: std::collections::BTreeSet<u64> = gis
        .iter()
        .map(|r| match v[&(r.entity, 1001)].value {
            Value::Double(x) => x.to_bits(),
            ref o => panic!("{o:?}"),
        })
        .collect();
    assert_eq!(
        ratios.len(),
        gis.len(),
        "each instance has its own activity"
    );
}
