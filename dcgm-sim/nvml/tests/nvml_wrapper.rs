//! The `nvml-wrapper` crate, unchanged, against the simulated NVML: it enumerates the GPUs,
//! MIG devices and processes of a profile and gets what the simulated DCGM reports for the
//! same node.

#![forbid(unsafe_code)]

mod support;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use std::collections::BTreeMap;
use support::*;

/// The `a100-mixed-mig.toml` node as the simulated DCGM reports it, and nvml-wrapper
/// initialised on the simulated NVML serving the same node.
fn mixed_mig() -> (Vec<DcgmGpu>, Nvml) {
    use_profile("a100-mixed-mig.toml");
    let dcgm = dcgm_view();
    let nvml = Nvml::builder()
        .lib_path(nvml_library().as_os_str())
        .init()
        .expect("nvml-wrapper initialises the simulated NVML");
    (dcgm, nvml)
}

#[test]
fn gpus_and_mig_devices_match_the_simulated_dcgm() {
    let _l = lock();
    let (dcgm, nvml) = mixed_mig();
    assert_eq!(nvml.sys_driver_version().unwrap(), "550.54.15");
    assert_eq!(nvml.device_count().unwrap() as usize, dcgm.len());
    for g in &dcgm {
        let d = nvml.device_by_index(g.id).unwrap();
        assert_eq!(d.uuid().unwrap(), g.uuid, "GPU {}", g.id);
        assert_eq!(d.name().unwrap(), g.name);
        assert_eq!(d.index().unwrap(), g.id);
        assert_eq!(d.pci_info().unwrap().bus_id, g.pci_bus_id);
        assert_eq!(
            nvml.device_by_uuid(g.uuid.as_str())
                .unwrap()
                .index()
                .unwrap(),
            g.id
        );
        assert_eq!(
            nvml.device_by_pci_bus_id(g.pci_bus_id.as_str())
                .unwrap()
                .index()
                .unwrap(),
            g.id
        );
        assert_eq!(
            d.mig_mode().unwrap().current == 1,
            g.mig_mode,
            "GPU {}",
            g.id
        );
        assert!(!d.mig_is_mig_device_handle().unwrap());

        // Every compute instance DCGM lists is one MIG device; the first of each GPU
        // instance carries the instance's UUID.
        let max = d.mig_device_count().unwrap();
        let migs: Vec<_> = (0..max)
            .filter_map(|i| match d.mig_device_by_index(i) {
                Ok(m) => Some(m),
                Err(NvmlError::NotFound) => None,
                Err(e) => panic!("GPU {} MIG device {i}: {e}", g.id),
            })
            .collect();
        assert_eq!(migs.len(), g.compute_instances.len(), "GPU {}", g.id);
        let mut uuids: Vec<String> = migs.iter().map(|m| m.uuid().unwrap()).collect();
        for (_, gi_uuid) in &g.instances {
            assert!(
                uuids.contains(gi_uuid),
                "GPU {}: no MIG device {gi_uuid}",
                g.id
            );
        }
        for m in &migs {
            assert!(m.mig_is_mig_device_handle().unwrap());
            assert_eq!(m.mig_parent_device().unwrap().uuid().unwrap(), g.uuid);
            let by_uuid = nvml.device_by_uuid(m.uuid().unwrap()).unwrap();
            assert_eq!(by_uuid.mig_parent_device().unwrap().uuid().unwrap(), g.uuid);
            assert!(m.memory_info().unwrap().total > 0);
        }
        uuids.dedup();
        assert_eq!(uuids.len(), migs.len(), "MIG UUIDs are unique");
    }
}

#[test]
fn processes_and_their_utilisation() {
    let _l = lock();
    let (dcgm, nvml) = mixed_mig();
    const MIB: u64 = 1024 * 1024;
    let used = |m: &UsedGpuMemory| match m {
        UsedGpuMemory::Used(b) => *b,
        UsedGpuMemory::Unavailable => panic!("memory unavailable"),
    };

    // A whole GPU shared by two processes: memory, and SM utilisation per process.
    let g4 = nvml.device_by_index(4).unwrap();
    let procs: BTreeMap<u32, u64> = g4
        .running_compute_processes()
        .unwrap()
        .iter()
        .map(|p| {
            assert_eq!((p.gpu_instance_id, p.compute_instance_id), (None, None));
            (p.pid, used(&p.used_gpu_memory))
        })
        .collect();
    assert_eq!(
        procs,
        BTreeMap::from([(4141, 8192 * MIB), (4142, 4096 * MIB)])
    );
    let util: BTreeMap<u32, u32> = g4
        .process_utilization_stats(0)
        .unwrap()
        .iter()
        .map(|s| (s.pid, s.sm_util))
        .collect();
    assert_eq!(util, BTreeMap::from([(4141, 35), (4142, 20)]));
    let mem = g4.memory_info().unwrap();
    assert_eq!(mem.used, 12288 * MIB);
    assert_eq!(mem.total, mem.free + mem.reserved + mem.used);
    assert_eq!(nvml.sys_process_name(4141, 64).unwrap(), "worker-a");

    // A MIG GPU: the parent lists every instance's processes with their instance ids, and
    // the process shows up on exactly the MIG device of that GPU instance.
    let g0 = nvml.device_by_index(0).unwrap();
    let on_parent: Vec<(u32, Option<u32>)> = g0
        .running_compute_processes()
        .unwrap()
        .iter()
        .map(|p| (p.pid, p.gpu_instance_id))
        .collect();
    assert_eq!(on_parent, [(4101, Some(7)), (4102, Some(9))]);
    let gi7_uuid = &dcgm[0]
        .instances
        .iter()
        .find(|(gi, _)| *gi == 7)
        .expect("DCGM knows GPU instance 7")
        .1;
    let mig = nvml.device_by_uuid(gi7_uuid.as_str()).unwrap();
    let on_mig = mig.running_compute_processes().unwrap();
    assert_eq!(on_mig.len(), 1);
    assert_eq!(on_mig[0].pid, 4101);
    assert_eq!(used(&on_mig[0].used_gpu_memory), 3072 * MIB);
    // nvml.h: "On MIG-enabled GPUs, querying process utilization is not currently supported".
    assert!(matches!(
        g0.process_utilization_stats(0),
        Err(NvmlError::NotSupported)
    ));
    // A GPU without processes has no utilisation samples.
    assert!(matches!(
        nvml.device_by_index(6)
            .unwrap()
            .process_utilization_stats(0),
        Err(NvmlError::NotFound)
    ));
}
