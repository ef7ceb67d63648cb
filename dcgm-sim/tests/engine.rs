//! The simulated host engine driven directly through `Engine::handle`, on a clock the test
//! moves by hand: sampling at the watch frequency, retention, blanks, MIG, faults.

use dcgm_sim::engine::{Engine, Fault, ManualClock, Profile};
use dcgm_sim::proto::*;

const T0: i64 = 1_700_000_000_000_000;

fn engine(profile: &str) -> (Engine, ManualClock) {
    let clock = ManualClock::new(T0);
    let p = Profile::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../etc/sim")
            .join(profile),
    )
    .unwrap();
    (Engine::with_clock(p, Box::new(clock.clone())), clock)
}

fn id(r: Reply) -> u64 {
    match r {
        Reply::Id(i) => i,
        other => panic!("expected an id, got {other:?}"),
    }
}

fn samples(r: Reply) -> Vec<Sample> {
    match r {
        Reply::Samples(s) => s,
        other => panic!("expected samples, got {other:?}"),
    }
}

/// Watches `fields` on GPU 0 every `freq_ms`, returns (group, field group).
fn watch(e: &mut Engine, conn: u64, fields: &[u16], freq_ms: i64, keep_s: f64) -> (u64, u64) {
    let g = id(e.handle(
        conn,
        &Request::GroupCreate {
            group_type: 1,
            name: "g".into(),
        },
    ));
    assert_eq!(
        e.handle(
            conn,
            &Request::GroupAddEntity {
                group_id: g,
                entity_group: 1,
                entity_id: 0
            }
        ),
        Reply::Ok
    );
    let f = id(e.handle(
        conn,
        &Request::FieldGroupCreate {
            field_ids: fields.to_vec(),
            name: format!("f{g}"),
        },
    ));
    let r = e.handle(
        conn,
        &Request::WatchFields {
            group_id: g,
            field_group_id: f,
            update_freq_us: freq_ms * 1000,
            max_keep_age_s: keep_s,
            max_keep_samples: 0,
        },
    );
    assert_eq!(r, Reply::Ok);
    (g, f)
}

fn latest(e: &mut Engine, field: u16) -> Sample {
    samples(e.handle(
        0,
        &Request::EntitiesGetLatestValues {
            entities: vec![(1, 0)],
            field_ids: vec![field],
            live: false,
        },
    ))
    .remove(0)
}

#[test]
fn every_shipped_profile_parses_and_the_default_is_the_h100_node() {
    for p in [
        "one-gpu.toml",
        "h100-8gpu-nvswitch.toml",
        "a100-mixed-mig.toml",
        "large-bench.toml",
    ] {
        engine(p);
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
    assert!(Profile::parse("[gpus]\ncount = 0\nmodel = \"x\"\n").is_err());
    assert!(Profile::parse("[gpus]\ncount = 1\nmodel = \"x\"\nbogus = 1\n").is_err());
}

#[test]
fn values_change_only_when_the_watch_samples() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    watch(&mut e, 0, &[156, 150], 1000, 600.0);
    let a = latest(&mut e, 156);
    assert_eq!((a.status, a.ts_us), (0, T0));
    clock.advance_ms(999);
    assert_eq!(latest(&mut e, 156), a, "no new sample before the interval");
    clock.advance_ms(1);
    let b = latest(&mut e, 156);
    assert_eq!(b.ts_us, T0 + 1_000_000);
    let (Value::Int64(x), Value::Int64(y)) = (&a.value, &b.value) else {
        panic!()
    };
    assert!(y > x, "energy is a counter");
    // Samples land on the watch's grid even when reads are irregular.
    clock.advance_ms(3500);
    assert_eq!(latest(&mut e, 156).ts_us, T0 + 4_000_000);
}

#[test]
fn history_is_trimmed_to_the_keep_age_and_values_since_sees_it() {
    let (mut e, clock) = engine("one-gpu.toml");
    let (g, f) = watch(&mut e, 0, &[150], 1000, 5.0);
    clock.advance_ms(20_000);
    let Reply::ValuesSince {
        samples,
        next_since_us,
    } = e.handle(
        0,
        &Request::GetValuesSince {
            group_id: g,
            field_group_id: f,
            since_us: 0,
        },
    )
    else {
        panic!()
    };
    assert!(
        (5..=7).contains(&samples.len()),
        "{} samples kept",
        samples.len()
    );
    assert!(samples.windows(2).all(|w| w[0].ts_us < w[1].ts_us));
    assert_eq!(next_since_us, T0 + 20_000_000 + 1);
}

#[test]
fn unwatched_and_unsupported_values_are_blank_sentinels() {
    let (mut e, _) = engine("h100-8gpu-nvswitch.toml");
    let s = latest(&mut e, 150);
    assert_eq!(
        (s.status, s.ts_us, s.value.clone()),
        (-16, 0, Value::Int64(0x7fff_ffff_ffff_fff0))
    );
    watch(&mut e, 0, &[526, 155], 1000, 60.0);
    // vGPU license status on a bare-metal GPU: NOT_SUPPORTED in the payload, status OK.
    assert_eq!(
        latest(&mut e, 526).value,
        Value::Int64(0x7fff_ffff_ffff_fff2)
    );
    e.inject(Fault::FieldNotSupported {
        gpu: Some(0),
        field: 155,
    });
    e.inject(Fault::GpuLost { gpu: 1 });
    // Faults show from the next sample on.
    let live = samples(e.handle(
        0,
        &Request::EntitiesGetLatestValues {
            entities: vec![(1, 0), (1, 1)],
            field_ids: vec![155],
            live: true,
        },
    ));
    assert_eq!(live[0].value, Value::Double(140_737_488_355_330.0));
    assert_eq!(live[1].value, Value::Double(140_737_488_355_328.0));
    assert_eq!(
        e.handle(0, &Request::GetGpuStatus { gpu_id: 1 }),
        Reply::Status(4)
    );
}

#[test]
fn groups_and_field_groups_follow_the_real_error_codes() {
    let (mut e, _) = engine("one-gpu.toml");
    assert_eq!(
        e.handle(0, &Request::GroupDestroy { group_id: 99 }),
        Reply::Error(-5)
    );
    let g = id(e.handle(
        0,
        &Request::GroupCreate {
            group_type: 1,
            name: "a".into(),
        },
    ));
    assert_eq!(g, 2, "user groups start after the two internal ones");
    assert_eq!(
        e.handle(
            0,
            &Request::GroupAddEntity {
                group_id: g,
                entity_group: 1,
                entity_id: 5
            }
        ),
        Reply::Error(-1)
    );
    e.handle(
        0,
        &Request::GroupAddEntity {
            group_id: g,
            entity_group: 1,
            entity_id: 0,
        },
    );
    assert_eq!(
        e.handle(
            0,
            &Request::GroupAddEntity {
                group_id: g,
                entity_group: 1,
                entity_id: 0
            }
        ),
        Reply::Error(-1)
    );
    // Only the low 32 bits of a group id matter.
    assert!(matches!(
        e.handle(
            0,
            &Request::GroupGetInfo {
                group_id: g | 0xdead_0000_0000
            }
        ),
        Reply::GroupInfo { .. }
    ));
    assert!(matches!(
        e.handle(
            0,
            &Request::GroupGetInfo {
                group_id: 0x7fff_ffff
            }
        ),
        Reply::GroupInfo { .. }
    ));
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
    assert_eq!(mk(&mut e, vec![9999], "x"), Reply::Error(-1));
    assert!(matches!(mk(&mut e, vec![150], "x"), Reply::Id(_)));
    assert_eq!(mk(&mut e, vec![150], "x"), Reply::Error(-26));
    assert_eq!(
        e.handle(
            0,
            &Request::FieldGroupDestroy {
                field_group_id: 999
            }
        ),
        Reply::Error(-14)
    );
    for i in 0..70 {
        if let Reply::Error(code) = e.handle(
            0,
            &Request::GroupCreate {
                group_type: 1,
                name: format!("n{i}"),
            },
        ) {
            assert_eq!(code, -24);
            return;
        }
    }
    panic!("no MAX_LIMIT after 64 groups");
}

#[test]
fn a_connection_takes_its_groups_and_watches_with_it() {
    let (mut e, _) = engine("one-gpu.toml");
    let (g, _) = watch(&mut e, 7, &[150], 1000, 60.0);
    assert_eq!(latest(&mut e, 150).status, 0);
    e.disconnect(7);
    assert_eq!(
        e.handle(0, &Request::GroupGetInfo { group_id: g }),
        Reply::Error(-5)
    );
    assert_eq!(
        latest(&mut e, 150).status,
        -16,
        "the watch went with the connection"
    );
}

#[test]
fn mig_hierarchy_and_reconfiguration() {
    let (mut e, _) = engine("a100-mixed-mig.toml");
    let Reply::MigHierarchy(rows) = e.handle(0, &Request::GetGpuInstanceHierarchy) else {
        panic!()
    };
    let gi_of_gpu1: Vec<&MigEntry> = rows
        .iter()
        .filter(|r| r.entity.0 == 4 && r.parent == (1, 1))
        .collect();
    assert_eq!(gi_of_gpu1.len(), 4);
    assert!(rows
        .iter()
        .filter(|r| r.entity.0 == 4)
        .all(|r| r.nvml_compute_instance_id == u32::MAX));
    // CI rows follow their GI and point at it.
    for (i, r) in rows.iter().enumerate().filter(|(_, r)| r.entity.0 == 5) {
        assert!(rows[..i]
            .iter()
            .rev()
            .find(|p| p.entity.0 == 4)
            .is_some_and(|p| p.entity == r.parent));
    }
    let name = samples(e.handle(
        0,
        &Request::EntitiesGetLatestValues {
            entities: vec![gi_of_gpu1[0].entity],
            field_ids: vec![50],
            live: true,
        },
    ));
    assert_eq!(name[0].value, Value::Str("3g.40gb".into()));
    e.inject(Fault::MigReconfigure {
        gpu: 1,
        instances: vec!["7g.80gb".into()],
    });
    let Reply::MigHierarchy(rows) = e.handle(0, &Request::GetGpuInstanceHierarchy) else {
        panic!()
    };
    assert_eq!(
        rows.iter()
            .filter(|r| r.entity.0 == 4 && r.parent == (1, 1))
            .count(),
        1
    );
}

#[test]
fn xids_are_events_and_raise_health_incidents() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    let (g, f) = watch(&mut e, 0, &[230], 1000, 600.0);
    e.handle(
        0,
        &Request::HealthSet {
            group_id: g,
            systems: u32::MAX,
        },
    );
    assert_eq!(
        e.handle(0, &Request::HealthCheck { group_id: g }),
        Reply::Health {
            overall: 0,
            incidents: vec![]
        }
    );
    clock.advance_ms(1500);
    e.inject(Fault::Xid { gpu: 0, xid: 79 });
    clock.advance_ms(3000);
    let Reply::ValuesSince { samples, .. } = e.handle(
        0,
        &Request::GetValuesSince {
            group_id: g,
            field_group_id: f,
            since_us: 0,
        },
    ) else {
        panic!()
    };
    let xids: Vec<&Value> = samples.iter().map(|s| &s.value).collect();
    assert_eq!(
        xids,
        vec![&Value::Int64(0), &Value::Int64(79)],
        "the initial reading and the event only"
    );
    let Reply::Health { overall, incidents } = e.handle(0, &Request::HealthCheck { group_id: g })
    else {
        panic!()
    };
    assert_eq!(overall, 20);
    assert_eq!(incidents[0].entity, (1, 0));
}

#[test]
fn the_control_file_injects_faults_at_run_time() {
    let dir = std::env::temp_dir().join(format!("dcgm-sim-engine-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ctl = dir.join("control");
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
    std::fs::write(&ctl, "gpu_lost 2\ngpu_recovered 2\n").unwrap();
    assert_eq!(
        e.handle(0, &Request::GetGpuStatus { gpu_id: 2 }),
        Reply::Status(1)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn counters_never_go_down() {
    let (mut e, clock) = engine("h100-8gpu-nvswitch.toml");
    let (g, f) = watch(&mut e, 0, &[156, 202], 100, 600.0);
    for _ in 0..50 {
        clock.advance_ms(137);
        e.handle(0, &Request::UpdateAllFields { wait: true });
    }
    let Reply::ValuesSince { samples, .. } = e.handle(
        0,
        &Request::GetValuesSince {
            group_id: g,
            field_group_id: f,
            since_us: 0,
        },
    ) else {
        panic!()
    };
    for field in [156, 202] {
        let v: Vec<i64> = samples
            .iter()
            .filter(|s| s.field_id == field)
            .map(|s| match s.value {
                Value::Int64(x) => x,
                _ => panic!("int64"),
            })
            .collect();
        assert!(v.len() > 50);
        assert!(
            v.windows(2).all(|w| w[0] <= w[1]),
            "field {field} went down: {v:?}"
        );
    }
}
