//! The safe layer end to end: dcgm-sys loads the simulated libdcgm.so.4 through the same
//! code path it uses for NVIDIA's, in embedded and remote mode.

mod support;

use dcgm_sys::*;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Builds dcgm-sim's library and `dcgm-sim-hostengine` once; the directory holding them.
fn sim_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| support::build_simulator(&["--bins"]))
}

/// The embedded engine is process-wide (as in the real library): tests that use it run
/// one at a time.
static EMBEDDED: Mutex<()> = Mutex::new(());

fn library() -> Arc<Library> {
    Arc::new(Library::load(Some(&sim_dir().join("libdcgm.so.4"))).expect("load the simulator"))
}

fn embedded() -> (std::sync::MutexGuard<'static, ()>, Session) {
    let g = EMBEDDED.lock().unwrap_or_else(|p| p.into_inner());
    std::env::remove_var("DCGM_SIM_PROFILE");
    (
        g,
        Session::embedded(library()).expect("start the embedded engine"),
    )
}

/// The embedded engine started on the profile at `path`.
fn embedded_on(path: impl AsRef<std::ffi::OsStr>) -> (std::sync::MutexGuard<'static, ()>, Session) {
    let g = EMBEDDED.lock().unwrap_or_else(|p| p.into_inner());
    std::env::set_var("DCGM_SIM_PROFILE", path);
    let s = Session::embedded(library()).expect("start the embedded engine");
    std::env::remove_var("DCGM_SIM_PROFILE");
    (g, s)
}

fn profile(name: &str) -> String {
    format!("{}/../etc/sim/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_missing_library_lists_what_was_tried_and_how_to_install() {
    let e = Library::load(Some(std::path::Path::new("/nonexistent/libdcgm.so.4")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/nonexistent/libdcgm.so.4") && e.contains("datacenter-gpu-manager-4-core"),
        "{e}"
    );
}

#[test]
fn discovery_on_the_default_node() {
    let (_g, s) = embedded();
    assert_eq!(*s.kind(), SessionKind::Embedded);
    let gpus = s.gpus(false).unwrap();
    assert_eq!(gpus, (0..8).collect::<Vec<_>>());
    assert_eq!(s.gpus(true).unwrap(), gpus);
    let a = s.device_attributes(3).unwrap();
    assert!(
        a.uuid.starts_with("GPU-")
            && a.name.contains("H100")
            && a.pci_bus_id.starts_with("00000000:")
    );
    assert!(a.fb_total_mib > 0);
    assert_eq!(
        s.device_attributes(99).unwrap_err().status(),
        Some(Status::BadParam)
    );
    assert_eq!(s.entities(EntityGroup::Switch, false).unwrap().len(), 4);
    let links = s.link_status().unwrap();
    assert_eq!(links.gpus.len(), 8);
    assert_eq!(
        links.gpus[0]
            .1
            .iter()
            .filter(|l| **l == LinkState::Up)
            .count(),
        18
    );
    assert_eq!(links.gpus[7].1[17], LinkState::Down);
    assert!(s.mig_hierarchy().unwrap().is_empty(), "no MIG on this node");
    let p2p = s.p2p_status().unwrap();
    assert_eq!(p2p.gpus.len(), 8);
    // Toward every other GPU OK; toward itself NotSupported, as DCGM reports it.
    assert_eq!(p2p.gpus[0].1[0], P2PStatus::NotSupported);
    assert!(p2p.gpus[0].1[1..].iter().all(|x| *x == P2PStatus::Ok));
    assert!(!s.supported_metric_groups(0).unwrap().is_empty());
    // No Grace CPUs: DCGM's sysmon module is not loaded, as on real x86 nodes.
    assert_eq!(
        s.cpu_hierarchy().unwrap_err().status(),
        Some(Status::ModuleNotLoaded)
    );
}

#[test]
fn groups_watches_values_and_sentinels() {
    let (_g, s) = embedded();
    let group = s
        .create_group("t", &[Entity::gpu(0), Entity::gpu(1)])
        .unwrap();
    let (name, members) = s.group_info(group.id()).unwrap();
    assert_eq!((name.as_str(), members.len()), ("t", 2));
    // 150 gpu temp (int), 155 power (double), 54 uuid (string), 526 vGPU license (not supported on a GPU).
    let fg = s
        .create_field_group("t-fields", &[150, 155, 54, 526])
        .unwrap();
    // Not watched yet: status NOT_WATCHED, never a number.
    let r = s.latest_values(&[Entity::gpu(0)], &[150], false).unwrap();
    assert_eq!(r[0].reading, Reading::Error(Status::NotWatched));
    s.watch(&group, &fg, 100_000, 600.0, 0).unwrap();
    s.update_all_fields(true).unwrap();
    let r = s
        .latest_values(
            &[Entity::gpu(0), Entity::gpu(1)],
            &[150, 155, 54, 526],
            false,
        )
        .unwrap();
    assert_eq!(r.len(), 8);
    for v in &r {
        match v.field_id {
            150 => assert!(
                matches!(v.reading, Reading::Value(Value::Int64(t)) if (0..120).contains(&t))
            ),
            155 => assert!(matches!(v.reading, Reading::Value(Value::Double(_)))),
            54 => assert!(
                matches!(&v.reading, Reading::Value(Value::String(u)) if u.starts_with("GPU-"))
            ),
            526 => assert_eq!(v.reading, Reading::Sentinel(Sentinel::NotSupported)),
            _ => unreachable!(),
        }
        assert!(v.ts_us > 0);
    }
    // The v1 single-entity call agrees.
    let one = s.entity_latest_values(Entity::gpu(1), &[150, 526]).unwrap();
    assert_eq!(one[1].reading, Reading::Sentinel(Sentinel::NotSupported));
    // A request larger than one call's buffer is split: every value comes back, and the
    // kept buffer is no larger than one call's.
    let many: Vec<Entity> = (0..300).map(|i| Entity::gpu(i % 2)).collect();
    let r = s.latest_values(&many, &[150, 155, 54, 526], false).unwrap();
    assert_eq!(r.len(), 1200);
    assert_eq!(r.iter().filter(|v| v.field_id == 54).count(), 300);
    assert!(r
        .iter()
        .filter(|v| v.field_id == 150)
        .all(|v| matches!(v.reading, Reading::Value(Value::Int64(_)))));
    assert_eq!(
        s.latest_values_buffer(),
        dcgm_sys::MAX_VALUES_PER_CALL,
        "the buffer is one call's"
    );
    // Unknown entity: an error status per value, not a number.
    let r = s.latest_values(&[Entity::gpu(42)], &[150], false).unwrap();
    assert!(matches!(r[0].reading, Reading::Error(_)));
    s.unwatch(&group, &fg).unwrap();
    // Error paths.
    assert_eq!(
        s.group_info(4242).unwrap_err().status(),
        Some(Status::NotConfigured)
    );
    assert_eq!(
        s.create_field_group("t-fields", &[150])
            .unwrap_err()
            .status(),
        Some(Status::DuplicateKey)
    );
    assert_eq!(
        s.create_field_group("bad", &[9999]).unwrap_err().status(),
        Some(Status::BadParam)
    );
    assert!(s.create_group("bad", &[Entity::gpu(77)]).is_err());
    let id = group.id();
    drop(group);
    assert_eq!(
        s.group_info(id).unwrap_err().status(),
        Some(Status::NotConfigured),
        "dropping destroys"
    );
}

#[test]
fn values_change_only_at_the_watch_frequency() {
    let (_g, s) = embedded();
    let group = s.create_group("freq", &[Entity::gpu(0)]).unwrap();
    let fg = s.create_field_group("freq-fields", &[156]).unwrap();
    s.watch(&group, &fg, 400_000, 600.0, 0).unwrap();
    s.update_all_fields(true).unwrap();
    let read = || {
        s.latest_values(&[Entity::gpu(0)], &[156], false)
            .unwrap()
            .remove(0)
    };
    let a = read();
    let b = read();
    assert_eq!(
        (a.ts_us, &a.reading),
        (b.ts_us, &b.reading),
        "same sample within one interval"
    );
    // Poll for the next sample rather than sleeping a guessed time.
    let deadline = Instant::now() + Duration::from_secs(5);
    let c = loop {
        let c = read();
        if c.ts_us != a.ts_us {
            break c;
        }
        assert!(Instant::now() < deadline, "no new sample in 5 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        c.ts_us >= a.ts_us + 400_000,
        "a new sample after the interval"
    );
    let (Reading::Value(Value::Int64(x)), Reading::Value(Value::Int64(y))) =
        (&a.reading, &c.reading)
    else {
        panic!()
    };
    assert!(y > x, "the energy counter grows");
    // History is kept: values since the first sample include it and the newer ones.
    let (since, next) = s.values_since(&group, &fg, a.ts_us).unwrap();
    assert!(since.len() >= 2 && next > c.ts_us);
}

#[test]
fn cpu_hierarchy_on_the_grace_node() {
    let (_g, s) = embedded_on(profile("large-bench.toml"));
    let cpus = s.cpu_hierarchy().unwrap();
    assert_eq!(cpus.len(), 2);
    assert_eq!(cpus[1].cores, (72..144).collect::<Vec<u32>>());
    assert_eq!(s.entities(EntityGroup::CpuCore, false).unwrap().len(), 144);
}

#[test]
fn mig_hierarchy_and_health_on_the_mixed_node() {
    let (_g, s) = embedded_on(profile("a100-mixed-mig.toml"));
    let h = s.mig_hierarchy().unwrap();
    let gis: Vec<&MigEntity> = h
        .iter()
        .filter(|e| e.entity.group == EntityGroup::GpuInstance)
        .collect();
    let cis: Vec<&MigEntity> = h
        .iter()
        .filter(|e| e.entity.group == EntityGroup::ComputeInstance)
        .collect();
    assert_eq!(gis.len(), 7 + 4 + 1 + 2);
    assert_eq!(cis.len(), 7 + 4 + 2 + 2);
    assert!(gis
        .iter()
        .all(|g| g.parent.group == EntityGroup::Gpu && g.nvml_compute_instance_id.is_none()));
    for ci in &cis {
        assert!(
            gis.iter().any(|g| g.entity == ci.parent),
            "CI parent is a GI"
        );
    }
    // Profile names of instances come from field 50, read live.
    let names = s.latest_values(&[gis[0].entity], &[50], true).unwrap();
    assert_eq!(
        names[0].reading,
        Reading::Value(Value::String("1g.10gb".into()))
    );
    // Health: all pass until a fault.
    let g = s.create_group("h", &[Entity::gpu(0)]).unwrap();
    s.health_set(&g, health_system::ALL).unwrap();
    assert_eq!(s.health_get(&g).unwrap(), health_system::ALL);
    assert_eq!(s.health_check(&g).unwrap(), HealthResponse::default());
}

struct Engine(Child);
impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `dcgm-sim-hostengine` in the foreground on `port`, with `extra` arguments, once it
/// says it listens.
fn start_engine(port: u16, extra: &[&str]) -> Engine {
    let mut c = Command::new(sim_dir().join("dcgm-sim-hostengine"))
        .args(["-n", "-p", &port.to_string()])
        .args(extra)
        .env_remove("DCGM_SIM_PROFILE")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start dcgm-sim-hostengine");
    let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(line.contains("listening"), "{line}");
    Engine(c)
}

#[test]
fn remote_sessions_fail_cleanly_when_the_engine_dies_and_work_again_after_restart() {
    let port = support::free_port();
    let target = ConnectTarget::parse(&format!("127.0.0.1:{port}")).unwrap();
    let lib = library();
    let t0 = Instant::now();
    let e = Session::connect(lib.clone(), &target, 300).unwrap_err();
    assert_eq!(e.status(), Some(Status::ConnectionNotValid));
    assert!(e.is_connection_lost());
    assert!(t0.elapsed() < Duration::from_secs(3));

    let engine = start_engine(port, &[]);
    let s = Session::connect(lib.clone(), &target, 2000).unwrap();
    assert_eq!(s.gpus(false).unwrap().len(), 8);
    let group = s.create_group("r", &[Entity::gpu(0)]).unwrap();
    let fg = s.create_field_group("r-fields", &[150]).unwrap();
    s.watch(&group, &fg, 100_000, 600.0, 0).unwrap();
    s.update_all_fields(true).unwrap();
    assert!(matches!(
        s.latest_values(&[Entity::gpu(0)], &[150], false).unwrap()[0].reading,
        Reading::Value(_)
    ));
    let gid = group.id();
    drop(engine);
    let err = s
        .latest_values(&[Entity::gpu(0)], &[150], false)
        .unwrap_err();
    assert!(err.is_connection_lost(), "{err}");
    assert!(
        s.gpus(false).unwrap_err().is_connection_lost(),
        "stays dead"
    );

    let _engine = start_engine(port, &[]);
    let s2 = Session::connect(lib, &target, 2000).unwrap();
    assert_eq!(
        s2.group_info(gid).unwrap_err().status(),
        Some(Status::NotConfigured),
        "groups died with the engine"
    );
    assert_eq!(s2.gpus(false).unwrap().len(), 8);
}

#[test]
fn field_metadata_comes_from_the_librarys_own_table() {
    {
        let (_g, s) = embedded();
        let lib = s.library();
        let t = lib.field_meta(150).unwrap().expect("field 150");
        assert_eq!(
            (t.id, t.field_type, t.tag.as_str(), t.unit.as_str()),
            (150, b'i', "gpu_temp", " C")
        );
        // DCGM's unit text holds three characters.
        assert_eq!(lib.field_meta(449).unwrap().unwrap().unit, "MB/");
        // DCGM 4.6.0 has no base-unit field, and no field 0.
        assert_eq!(lib.field_meta(1603).unwrap(), None);
        assert_eq!(lib.field_meta(0).unwrap(), None);
    }
    // A library that knows DCGM 4.6.1's and 4.7's base-unit fields.
    let dir = std::env::temp_dir().join(format!("dcgm-sys-meta-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("later.toml");
    let one = std::fs::read_to_string(profile("one-gpu.toml")).unwrap();
    std::fs::write(
        &p,
        one.replace("seed = 7\n", "seed = 7\nbase_unit_fields = true\n"),
    )
    .unwrap();
    let (g, s) = embedded_on(&p);
    let hz = s.library().field_meta(1603).unwrap().expect("field 1603");
    assert_eq!((hz.field_type, hz.unit.as_str()), (b'i', "Hz"));
    let ratio = s.library().field_meta(1613).unwrap().expect("field 1613");
    assert_eq!(ratio.field_type, b'd');
    drop(s);
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `dcgmStartEmbedded_v2` with the profiling module on its denylist (parameters version 2):
/// the engine reports it denylisted from the start and a profiling request answers
/// MODULE_NOT_LOADED; without a denylist it is not loaded until a request needs it. The
/// simulated host engine takes nv-hostengine's `--denylist-modules` the same way.
#[test]
fn an_embedded_engine_started_with_the_profiling_module_denied_never_loads_it() {
    let g = EMBEDDED.lock().unwrap_or_else(|p| p.into_inner());
    std::env::remove_var("DCGM_SIM_PROFILE");
    let lib = library();
    lib.set_module_denylist(&[Module::Profiling]);
    assert_eq!(lib.module_denylist(), vec![Module::Profiling]);
    let s = Session::embedded(lib.clone()).expect("start with a denylist");
    assert_eq!(
        s.module_status(Module::Profiling).unwrap(),
        Some(ModuleStatus::Denylisted)
    );
    let e = s.supported_metric_groups(0).unwrap_err();
    assert_eq!(e.status(), Some(Status::ModuleNotLoaded), "{e}");
    assert_eq!(
        s.module_status(Module::Core).unwrap(),
        Some(ModuleStatus::Loaded)
    );
    drop(s);
    lib.set_module_denylist(&[]);
    let s = Session::embedded(lib).expect("start without a denylist");
    assert_eq!(
        s.module_status(Module::Profiling).unwrap(),
        Some(ModuleStatus::NotLoaded)
    );
    assert!(!s.supported_metric_groups(0).unwrap().is_empty());
    assert_eq!(
        s.module_status(Module::Profiling).unwrap(),
        Some(ModuleStatus::Loaded)
    );
    drop(s);
    drop(g);

    let port = support::free_port();
    let _engine = start_engine(port, &["--denylist-modules", "8"]);
    let target = ConnectTarget::parse(&format!("127.0.0.1:{port}")).unwrap();
    let r = Session::connect(library(), &target, 2000).unwrap();
    assert_eq!(
        r.module_status(Module::Profiling).unwrap(),
        Some(ModuleStatus::Denylisted)
    );
}
