//! Shared by the integration tests: the built simulators as clients find them, and what the
//! simulated DCGM says about a profile's node (the reference the NVML answers must match).
//!
//! Both simulators keep process-wide state and read `DCGM_SIM_PROFILE` at init, so tests
//! that load them in-process hold [`lock`] for their whole body.

#![forbid(unsafe_code)]
#![allow(dead_code)]

/// Skipping honestly (fails under CI), shared with the exporter's tests.
#[path = "../../../../tests/support/skip.rs"]
pub mod skip;

use dcgm_sys::{Entity, EntityGroup, Library, Session, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises tests that use the libraries; a failed test does not poison the rest.
pub fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// `<target>/<profile>`: the test binary lives in `<target>/<profile>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test binary");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary inside <target>/<profile>/deps")
        .to_path_buf()
}

/// Builds both simulators' libraries once per test binary: `cargo test -p nvml-sim` builds
/// this crate's cdylib, but not dcgm-sim's, and the symlinks come from the build scripts.
pub fn built() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = profile_dir();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", "nvml-sim", "-p", "dcgm-sim", "--lib"]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.current_dir(repo("")).status().expect("run cargo build");
        assert!(status.success(), "building the simulators failed");
        dir
    })
}

/// The simulated NVML under the name clients ask for.
pub fn nvml_library() -> PathBuf {
    built().join("libnvidia-ml.so.1")
}

pub fn dcgm_library() -> PathBuf {
    built().join("libdcgm.so.4")
}

/// Points both simulators at a profile under etc/sim/ (before their init).
pub fn use_profile(name: &str) {
    std::env::set_var("DCGM_SIM_PROFILE", repo(&format!("etc/sim/{name}")));
}

/// One GPU as the simulated DCGM reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct DcgmGpu {
    pub id: u32,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
    pub mig_mode: bool,
    /// (NVML GPU-instance id, instance UUID) of each GPU instance.
    pub instances: Vec<(u32, String)>,
    /// (NVML GPU-instance id, NVML compute-instance id) of each compute instance.
    pub compute_instances: Vec<(u32, u32)>,
}

/// The node as the simulated DCGM (through dcgm-sys, as the exporter reads it) describes it.
pub fn dcgm_view() -> Vec<DcgmGpu> {
    let lib = Arc::new(Library::load(Some(&dcgm_library())).expect("load the simulated DCGM"));
    let s = Session::embedded(lib).expect("embedded DCGM session");
    let hierarchy = s.mig_hierarchy().expect("MIG hierarchy");
    let gi_rows: Vec<_> = hierarchy
        .iter()
        .filter(|e| e.entity.group == EntityGroup::GpuInstance)
        .collect();
    let gi_entities: Vec<Entity> = gi_rows.iter().map(|e| e.entity).collect();
    // DCGM_FI_DEV_UUID of each GPU instance: the MIG UUID.
    let uuids = s
        .latest_values(&gi_entities, &[54], true)
        .expect("instance UUIDs");
    s.gpus(false)
        .expect("GPU ids")
        .into_iter()
        .map(|id| {
            let a = s.device_attributes(id).expect("device attributes");
            let mine = |e: &&&dcgm_sys::MigEntity| e.gpu_uuid == a.uuid;
            let instances = gi_rows
                .iter()
                .filter(mine)
                .map(|e| {
                    let uuid = uuids
                        .iter()
                        .find(|r| r.entity == e.entity)
                        .and_then(|r| match &r.reading {
                            dcgm_sys::Reading::Value(Value::String(u)) => Some(u.clone()),
                            _ => None,
                        })
                        .expect("a UUID for every GPU instance");
                    (e.nvml_instance_id, uuid)
                })
                .collect();
            let compute_instances = hierarchy
                .iter()
                .filter(|e| e.gpu_uuid == a.uuid)
                .filter_map(|e| {
                    e.nvml_compute_instance_id
                        .map(|ci| (e.nvml_instance_id, ci))
                })
                .collect();
            DcgmGpu {
                id,
                uuid: a.uuid,
                name: a.name,
                pci_bus_id: a.pci_bus_id,
                mig_mode: a.mig_mode,
                instances,
                compute_instances,
            }
        })
        .collect()
}
