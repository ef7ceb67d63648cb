//! The C ABI as nvml.h specifies it, through `dlopen` like any client: initialisation and
//! reference counting, return codes for bad arguments, the two-call size protocol, struct
//! versions, the legacy v1 process struct, NOT_SUPPORTED stubs, and run-time faults from
//! the control file shared with the simulated DCGM.

#![allow(non_snake_case)]

mod support;

use libloading::{Library, Symbol};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_uint, c_void, CStr};
use support::*;

type Device = *mut c_void;

const SUCCESS: c_uint = 0;
const UNINITIALIZED: c_uint = 1;
const INVALID_ARGUMENT: c_uint = 2;
const NOT_SUPPORTED: c_uint = 3;
const NOT_FOUND: c_uint = 6;
const INSUFFICIENT_SIZE: c_uint = 7;
const GPU_IS_LOST: c_uint = 15;
const ARGUMENT_VERSION_MISMATCH: c_uint = 25;
const UNKNOWN: c_uint = 999;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct ProcessInfoV1 {
    pid: c_uint,
    used: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct MemoryV2 {
    version: c_uint,
    total: u64,
    reserved: u64,
    free: u64,
    used: u64,
}

struct Nvml(Library);

impl Nvml {
    /// The simulator initialised on `a100-mixed-mig.toml`, reading faults from a fresh
    /// control file that starts as `lines`; its path comes back for the test to write to.
    fn init_with_control(tag: &str, lines: &str) -> (Nvml, std::path::PathBuf) {
        use_profile("a100-mixed-mig.toml");
        let control = std::env::temp_dir().join(format!("nvml-sim-{tag}-{}", std::process::id()));
        std::fs::write(&control, lines).unwrap();
        std::env::set_var("DCGM_SIM_CONTROL", &control);
        let nvml = Nvml::open();
        assert_eq!(nvml.call0("nvmlInit_v2"), SUCCESS);
        std::env::remove_var("DCGM_SIM_CONTROL");
        (nvml, control)
    }
    fn open() -> Nvml {
        // SAFETY: loading the simulator runs no initialisers with preconditions.
        Nvml(unsafe { Library::new(nvml_library()) }.expect("dlopen libnvidia-ml.so.1"))
    }
    fn sym<T>(&self, name: &str) -> Symbol<'_, T> {
        // SAFETY: each test names a symbol with the type nvml.h declares for it.
        unsafe { self.0.get(name.as_bytes()) }.unwrap_or_else(|e| panic!("{name}: {e}"))
    }
    fn call0(&self, name: &str) -> c_uint {
        // SAFETY: nvmlInit_v2 / nvmlShutdown / stubs take no arguments the callee reads.
        unsafe { self.sym::<unsafe extern "C" fn() -> c_uint>(name)() }
    }
    fn handle(&self, index: u32) -> Device {
        let mut d: Device = std::ptr::null_mut();
        // SAFETY: (uint, nvmlDevice_t*) as declared.
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, *mut Device) -> c_uint>(
                "nvmlDeviceGetHandleByIndex_v2",
            )(index, &mut d)
        };
        assert_eq!(rc, SUCCESS);
        d
    }
    fn count(&self) -> c_uint {
        let mut n = 0;
        // SAFETY: (uint*) as declared.
        unsafe {
            self.sym::<unsafe extern "C" fn(*mut c_uint) -> c_uint>("nvmlDeviceGetCount_v2")(&mut n)
        }
    }
    fn memory_v2(&self, d: Device, version: c_uint) -> (c_uint, MemoryV2) {
        let mut m = MemoryV2 {
            version,
            ..MemoryV2::default()
        };
        // SAFETY: (nvmlDevice_t, nvmlMemory_v2_t*) as declared.
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(Device, *mut MemoryV2) -> c_uint>(
                "nvmlDeviceGetMemoryInfo_v2",
            )(d, &mut m)
        };
        (rc, m)
    }
    fn max_mig(&self, d: Device) -> (c_uint, c_uint) {
        let mut n = 99;
        // SAFETY: (nvmlDevice_t, uint*) as declared.
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(Device, *mut c_uint) -> c_uint>(
                "nvmlDeviceGetMaxMigDeviceCount",
            )(d, &mut n)
        };
        (rc, n)
    }
}

#[test]
fn lifecycle_is_reference_counted_and_gated() {
    let _l = lock();
    use_profile("one-gpu.toml");
    let nvml = Nvml::open();
    assert_eq!(nvml.call0("nvmlShutdown"), UNINITIALIZED);
    assert_eq!(nvml.count(), UNINITIALIZED);
    assert_eq!(nvml.call0("nvmlDeviceGetTemperature"), UNINITIALIZED);
    // nvmlErrorString works before init.
    // SAFETY: (nvmlReturn_t) -> const char*, a static string.
    let text = unsafe {
        CStr::from_ptr(nvml.sym::<unsafe extern "C" fn(c_uint) -> *const c_char>(
            "nvmlErrorString",
        )(NOT_SUPPORTED))
    };
    assert_eq!(text.to_str().unwrap(), "Not Supported");

    assert_eq!(nvml.call0("nvmlInit_v2"), SUCCESS);
    assert_eq!(nvml.call0("nvmlInit_v2"), SUCCESS);
    assert_eq!(nvml.call0("nvmlShutdown"), SUCCESS);
    // One user is left.
    assert_eq!(nvml.count(), SUCCESS);
    assert_eq!(nvml.call0("nvmlDeviceGetFanSpeed"), NOT_SUPPORTED);
    assert_eq!(nvml.call0("nvmlDeviceGetPerformanceState"), NOT_SUPPORTED);
    // A modelled call checks its handle (none was passed).
    assert_eq!(nvml.call0("nvmlDeviceGetTemperature"), INVALID_ARGUMENT);
    assert_eq!(nvml.call0("nvmlShutdown"), SUCCESS);
    assert_eq!(nvml.count(), UNINITIALIZED);
}

#[test]
fn bad_arguments_get_nvml_return_codes() {
    let _l = lock();
    use_profile("one-gpu.toml");
    let nvml = Nvml::open();
    assert_eq!(nvml.call0("nvmlInit_v2"), SUCCESS);
    let d = nvml.handle(0);
    let get_uuid = nvml
        .sym::<unsafe extern "C" fn(Device, *mut c_char, c_uint) -> c_uint>("nvmlDeviceGetUUID");
    let mut buf = [0 as c_char; 96];
    // SAFETY: buffers are as large as the length passed.
    unsafe {
        assert_eq!(get_uuid(d, buf.as_mut_ptr(), 10), INSUFFICIENT_SIZE);
        assert_eq!(get_uuid(d, std::ptr::null_mut(), 96), INVALID_ARGUMENT);
        assert_eq!(
            get_uuid(0x1234 as Device, buf.as_mut_ptr(), 96),
            INVALID_ARGUMENT
        );
        // GPU-<36 characters> and the NUL fit exactly in 41 bytes.
        assert_eq!(get_uuid(d, buf.as_mut_ptr(), 41), SUCCESS);
        assert!(CStr::from_ptr(buf.as_ptr())
            .to_str()
            .unwrap()
            .starts_with("GPU-"));
    }
    assert_eq!(nvml.memory_v2(d, 0).0, ARGUMENT_VERSION_MISMATCH);
    let (rc, m) = nvml.memory_v2(d, 0x0200_0028);
    assert_eq!(rc, SUCCESS);
    assert_eq!(m.total, 40960 << 20);
    // No MIG on this GPU: no MIG devices, no instance ids.
    assert_eq!(nvml.max_mig(d), (SUCCESS, 0));
    let gi = nvml
        .sym::<unsafe extern "C" fn(Device, *mut c_uint) -> c_uint>("nvmlDeviceGetGpuInstanceId");
    let mut id = 0;
    // SAFETY: (nvmlDevice_t, uint*) as declared.
    assert_eq!(unsafe { gi(d, &mut id) }, NOT_SUPPORTED);
    let by_uuid = nvml.sym::<unsafe extern "C" fn(*const c_char, *mut Device) -> c_uint>(
        "nvmlDeviceGetHandleByUUID",
    );
    let mut h: Device = std::ptr::null_mut();
    // SAFETY: NUL-terminated string and an output handle.
    unsafe {
        assert_eq!(by_uuid(c"GPU-nope".as_ptr(), &mut h), NOT_FOUND);
        assert_eq!(by_uuid(std::ptr::null(), &mut h), INVALID_ARGUMENT);
    }
    assert_eq!(nvml.call0("nvmlShutdown"), SUCCESS);
}

#[test]
fn process_lists_follow_the_two_call_protocol_in_both_struct_versions() {
    let _l = lock();
    use_profile("a100-mixed-mig.toml");
    let nvml = Nvml::open();
    assert_eq!(nvml.call0("nvmlInit_v2"), SUCCESS);
    let d = nvml.handle(4);
    let v1 = nvml.sym::<unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfoV1) -> c_uint>(
        "nvmlDeviceGetComputeRunningProcesses",
    );
    let mut n = 0;
    let mut infos = [ProcessInfoV1::default(); 3];
    // SAFETY: `infos` holds as many entries as `n` says each time.
    unsafe {
        assert_eq!(v1(d, &mut n, std::ptr::null_mut()), INSUFFICIENT_SIZE);
        assert_eq!(n, 2);
        n = 1;
        assert_eq!(v1(d, &mut n, infos.as_mut_ptr()), INSUFFICIENT_SIZE);
        assert_eq!(n, 2);
        n = 3;
        assert_eq!(v1(d, &mut n, infos.as_mut_ptr()), SUCCESS);
    }
    assert_eq!(n, 2);
    // The 16-byte v1 stride: the second entry is where a v1 client looks for it.
    assert_eq!((infos[1].pid, infos[1].used), (4142, 4096 << 20));
    // No MPS server on the node.
    let mps = nvml.sym::<unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfoV1) -> c_uint>(
        "nvmlDeviceGetMPSComputeRunningProcesses_v3",
    );
    n = 0;
    // SAFETY: count query with no buffer.
    assert_eq!(unsafe { mps(d, &mut n, std::ptr::null_mut()) }, SUCCESS);
    assert_eq!(n, 0);
    // Utilisation samples newer than "now" do not exist yet.
    let util = nvml.sym::<unsafe extern "C" fn(Device, *mut c_void, *mut c_uint, u64) -> c_uint>(
        "nvmlDeviceGetProcessUtilization",
    );
    n = 0;
    // SAFETY: count query with no buffer.
    unsafe {
        assert_eq!(util(d, std::ptr::null_mut(), &mut n, 0), INSUFFICIENT_SIZE);
        // One sample per process and second since init (a second may have begun since).
        assert!(n >= 2 && n % 2 == 0, "{n}");
        assert_eq!(util(d, std::ptr::null_mut(), &mut n, u64::MAX), NOT_FOUND);
    }
    assert_eq!(nvml.call0("nvmlShutdown"), SUCCESS);
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct UtilSample {
    pid: c_uint,
    time_stamp: u64,
    sm_util: c_uint,
    mem_util: c_uint,
    enc_util: c_uint,
    dec_util: c_uint,
}

type UtilFn = unsafe extern "C" fn(Device, *mut UtilSample, *mut c_uint, u64) -> c_uint;

/// Samples newer than `last_seen` through the two-call protocol; the error code otherwise.
fn samples(
    util: &Symbol<'_, UtilFn>,
    d: Device,
    last_seen: u64,
) -> Result<Vec<UtilSample>, c_uint> {
    let mut n = 0;
    // SAFETY: a count query with no buffer.
    match unsafe { util(d, std::ptr::null_mut(), &mut n, last_seen) } {
        INSUFFICIENT_SIZE => {}
        rc => return Err(rc),
    }
    // Room for a few more seconds than asked: one may begin between the two calls.
    let mut buf = vec![UtilSample::default(); n as usize + 16];
    n = buf.len() as c_uint;
    // SAFETY: `buf` holds `n` samples.
    match unsafe { util(d, buf.as_mut_ptr(), &mut n, last_seen) } {
        SUCCESS => {
            buf.truncate(n as usize);
            Ok(buf)
        }
        rc => Err(rc),
    }
}

/// Asks until `done` holds for the samples newer than `last_seen` (bounded: 10 s).
fn wait_for(
    util: &Symbol<'_, UtilFn>,
    d: Device,
    last_seen: u64,
    done: impl Fn(&[UtilSample]) -> bool,
) -> Vec<UtilSample> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let got = samples(util, d, last_seen).unwrap_or_default();
        if done(&got) {
            return got;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "samples newer than {last_seen} never matched: {got:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn process_utilization_keeps_per_second_samples_and_follows_the_control_file() {
    let _l = lock();
    let (nvml, control) = Nvml::init_with_control("util", "");
    let util = nvml.sym::<UtilFn>("nvmlDeviceGetProcessUtilization");
    let d = nvml.handle(4);

    // Too small a buffer: INSUFFICIENT_SIZE and the count needed, nothing written.
    let mut n = 0;
    // SAFETY: a count query with no buffer.
    assert_eq!(
        unsafe { util(d, std::ptr::null_mut(), &mut n, 0) },
        INSUFFICIENT_SIZE
    );
    let needed = n;
    let mut one = [UtilSample::default(); 1];
    n = 1;
    // SAFETY: `one` holds 1 sample.
    assert_eq!(
        unsafe { util(d, one.as_mut_ptr(), &mut n, 0) },
        INSUFFICIENT_SIZE
    );
    assert!(n >= needed, "{n} < {needed}");
    assert_eq!(one[0].pid, 0);

    // A new sample for each process every second, strictly newer than lastSeenTimeStamp.
    let first = samples(&util, d, 0).unwrap();
    let newest = first.iter().map(|s| s.time_stamp).max().unwrap();
    assert!(first.iter().all(|s| s.time_stamp % 1_000_000 == 0));
    assert_eq!(samples(&util, d, newest).err(), Some(NOT_FOUND));
    let next = wait_for(&util, d, newest, |s| s.len() >= 2);
    let pids: Vec<(u32, u32)> = next[..2].iter().map(|s| (s.pid, s.sm_util)).collect();
    assert_eq!(pids, [(4141, 35), (4142, 20)]);
    assert!(next.iter().all(|s| s.time_stamp > newest));

    // Changes through the control file show from the second they are read, not before.
    let seen = next.iter().map(|s| s.time_stamp).max().unwrap();
    std::fs::write(
        &control,
        "process_util 4141 80\nprocess_stop 4142\nprocess_start 9001 4 sm_util=5\n",
    )
    .unwrap();
    let changed = wait_for(&util, d, seen, |s| s.iter().any(|s| s.pid == 9001));
    // Seconds that passed before the lines were read (a loaded machine) keep the old state.
    let mut by_second: Vec<(u64, Vec<(u32, u32)>)> = Vec::new();
    for s in &changed {
        match by_second.last_mut() {
            Some((t, list)) if *t == s.time_stamp => list.push((s.pid, s.sm_util)),
            _ => by_second.push((s.time_stamp, vec![(s.pid, s.sm_util)])),
        }
    }
    let states: Vec<&[(u32, u32)]> = by_second.iter().map(|(_, l)| l.as_slice()).collect();
    let old: &[(u32, u32)] = &[(4141, 35), (4142, 20)];
    let new: &[(u32, u32)] = &[(4141, 80), (9001, 5)];
    let first_new = states.iter().position(|s| *s == new).unwrap();
    assert!(states[..first_new].iter().all(|s| *s == old), "{states:?}");
    assert!(states[first_new..].iter().all(|s| *s == new), "{states:?}");
    let v1 = nvml.sym::<unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfoV1) -> c_uint>(
        "nvmlDeviceGetComputeRunningProcesses",
    );
    let mut infos = [ProcessInfoV1::default(); 4];
    n = 4;
    // SAFETY: `infos` holds 4 entries.
    assert_eq!(unsafe { v1(d, &mut n, infos.as_mut_ptr()) }, SUCCESS);
    let listed: Vec<u32> = infos[..n as usize].iter().map(|p| p.pid).collect();
    assert_eq!(listed, [4141, 9001]);
    // Earlier seconds keep what they were.
    let all = samples(&util, d, 0).unwrap();
    assert!(all.iter().any(|s| s.pid == 4142 && s.sm_util == 20));
    assert!(all.iter().any(|s| s.pid == 4141 && s.sm_util == 35));
    assert_eq!(nvml.call0("nvmlShutdown"), SUCCESS);
    std::fs::remove_file(&control).unwrap();
}

#[test]
fn control_file_faults_reach_nvml_as_they_reach_dcgm() {
    let _l = lock();
    let (nvml, control) = Nvml::init_with_control("control", "");
    let d4 = nvml.handle(4);
    assert_eq!(nvml.max_mig(d4), (SUCCESS, 0));

    std::fs::write(&control, "gpu_lost 4\nmig 4 7g.80gb\n").unwrap();
    assert_eq!(nvml.memory_v2(d4, 0x0200_0028).0, GPU_IS_LOST);
    // The lost GPU keeps its identity (index, UUID) and its new MIG layout.
    assert_eq!(nvml.max_mig(d4), (SUCCESS, 7));
    let mig = nvml.sym::<unsafe extern "C" fn(Device, c_uint, *mut Device) -> c_uint>(
        "nvmlDeviceGetMigDeviceHandleByIndex",
    );
    let mut m: Device = std::ptr::null_mut();
    // SAFETY: (nvmlDevice_t, uint, nvmlDevice_t*) as declared.
    unsafe {
        assert_eq!(mig(d4, 0, &mut m), SUCCESS);
        assert_eq!(mig(d4, 1, &mut m), NOT_FOUND);
        assert_eq!(mig(d4, 7, &mut m), INVALID_ARGUMENT);
    }

    std::fs::write(&control, "gpu_lost 4\nmig 4 7g.80gb\ngpu_recovered 4\n").unwrap();
    let (rc, mem) = nvml.memory_v2(d4, 0x0200_0028);
    assert_eq!(rc, SUCCESS);
    // Its processes ran on the whole GPU, which is now one MIG instance: they are gone,
    // and used memory is the simulated DCGM's FB_USED again, not their 12 GiB.
    assert_ne!(mem.used, 12288 << 20);
    assert_eq!(mem.total, mem.free + mem.reserved + mem.used);
    assert_eq!(nvml.call0("nvmlShutdown"), SUCCESS);
    let _ = std::fs::remove_file(control);
}

#[test]
fn a_bad_profile_fails_init_and_leaves_the_library_uninitialised() {
    let _l = lock();
    let dir = std::env::temp_dir().join(format!("nvml-sim-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[gpus]\ncount = 1\nmodel = \"x\"\n[[processes]]\npid = 1\ngpu = 3\n",
    )
    .unwrap();
    std::env::set_var("DCGM_SIM_PROFILE", &bad);
    let nvml = Nvml::open();
    assert_eq!(nvml.call0("nvmlInit_v2"), UNKNOWN);
    assert_eq!(nvml.count(), UNINITIALIZED);
    assert_eq!(nvml.call0("nvmlShutdown"), UNINITIALIZED);
    let _ = std::fs::remove_dir_all(dir);
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct EventData {
    device: Device,
    event_type: u64,
    event_data: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

const TIMEOUT: c_uint = 10;
const XID_EVENT: u64 = 0x8;
const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// XID control lines, as dcgm-sim takes them, reach registered event sets as
/// `nvmlEventTypeXidCriticalError` events on the physical GPU, attributed to the MIG
/// instance the line names; GPUs not registered, and XIDs before registering, raise none.
#[test]
fn xid_control_lines_are_events_of_the_sets_that_registered_their_gpu() {
    let _l = lock();
    let (nvml, control) = Nvml::init_with_control("events", "xid 1 31\n");
    type Set = *mut c_void;
    let create = nvml.sym::<unsafe extern "C" fn(*mut Set) -> c_uint>("nvmlEventSetCreate");
    let register =
        nvml.sym::<unsafe extern "C" fn(Device, u64, Set) -> c_uint>("nvmlDeviceRegisterEvents");
    let supported = nvml.sym::<unsafe extern "C" fn(Device, *mut u64) -> c_uint>(
        "nvmlDeviceGetSupportedEventTypes",
    );
    let wait = nvml
        .sym::<unsafe extern "C" fn(Set, *mut EventData, c_uint) -> c_uint>("nvmlEventSetWait_v2");
    let free = nvml.sym::<unsafe extern "C" fn(Set) -> c_uint>("nvmlEventSetFree");
    let (d0, d1) = (nvml.handle(0), nvml.handle(1));
    let mut set: Set = std::ptr::null_mut();
    let mut types = 0u64;
    let mut ev = EventData {
        device: std::ptr::null_mut(),
        event_type: 0,
        event_data: 0,
        gpu_instance_id: 0,
        compute_instance_id: 0,
    };
    // SAFETY: every call has the signature nvml.h declares, with valid pointers.
    unsafe {
        assert_eq!(create(std::ptr::null_mut()), INVALID_ARGUMENT);
        assert_eq!(create(&mut set), SUCCESS);
        assert_eq!(supported(d0, &mut types), SUCCESS);
        assert_eq!(types, XID_EVENT);
        // An event type the GPU does not raise: refused, as nvml.h says.
        assert_eq!(register(d0, XID_EVENT | 0x1, set), NOT_SUPPORTED);
        assert_eq!(register(d0, XID_EVENT, set), SUCCESS);
        assert_eq!(register(d1, XID_EVENT, set), SUCCESS);
        // GPU 1's XID 31 came before the registration.
        assert_eq!(wait(set, &mut ev, 0), TIMEOUT);
        std::fs::write(
            &control,
            "xid 1 31\nxid 2 48\nxid 1 13\nxid 0/7 43\nxid 0/7/0 95\n",
        )
        .unwrap();
        assert_eq!(wait(set, &mut ev, 0), SUCCESS);
        assert_eq!(
            (ev.device, ev.event_type, ev.event_data),
            (d1, XID_EVENT, 13),
            "GPU 2 is not registered"
        );
        assert_eq!(
            (ev.gpu_instance_id, ev.compute_instance_id),
            (NO_INSTANCE, NO_INSTANCE)
        );
        assert_eq!(wait(set, &mut ev, 0), SUCCESS);
        assert_eq!((ev.device, ev.event_data), (d0, 43));
        assert_eq!(
            (ev.gpu_instance_id, ev.compute_instance_id),
            (7, NO_INSTANCE)
        );
        assert_eq!(wait(set, &mut ev, 0), SUCCESS);
        assert_eq!((ev.device, ev.event_data), (d0, 95));
        assert_eq!((ev.gpu_instance_id, ev.compute_instance_id), (7, 0));
        assert_eq!(wait(set, &mut ev, 0), TIMEOUT);
        // A wait with a timeout returns the event that arrives during it.
        let later = control.clone();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(later)
                .unwrap();
            std::io::Write::write_all(&mut f, b"xid 0 79\n").unwrap();
        });
        assert_eq!(wait(set, &mut ev, 30_000), SUCCESS);
        writer.join().unwrap();
        assert_eq!((ev.device, ev.event_data), (d0, 79));
        assert_eq!(free(set), SUCCESS);
        assert_eq!(wait(set, &mut ev, 0), INVALID_ARGUMENT);
        assert_eq!(free(set), INVALID_ARGUMENT);
    }
    assert_eq!(nvml.call0("nvmlShutdown"), SUCCESS);
    let _ = std::fs::remove_file(control);
}

#[repr(C)]
#[derive(Clone, Copy)]
struct GpmMetric {
    metric_id: c_uint,
    nvml_return: c_uint,
    value: f64,
    info: [*mut c_char; 3],
}

#[repr(C)]
struct GpmMetricsGet {
    version: c_uint,
    num_metrics: c_uint,
    sample1: *mut c_void,
    sample2: *mut c_void,
    metrics: [GpmMetric; 210],
}

/// GPM as nvml.h specifies it: support per device and struct version, samples allocated,
/// taken and freed, each metric with its own return code, the simulated DCGM's profiling
/// ratio as a percent between two samples of the same GPU.
#[test]
fn gpm_samples_and_metrics_follow_nvml_h() {
    let _l = lock();
    use_profile("units-fixed.toml");
    let nvml = Nvml::open();
    assert_eq!(nvml.call0("nvmlInit_v2"), SUCCESS);
    type Sample = *mut c_void;
    let support = nvml.sym::<unsafe extern "C" fn(Device, *mut [c_uint; 2]) -> c_uint>(
        "nvmlGpmQueryDeviceSupport",
    );
    let alloc = nvml.sym::<unsafe extern "C" fn(*mut Sample) -> c_uint>("nvmlGpmSampleAlloc");
    let take = nvml.sym::<unsafe extern "C" fn(Device, Sample) -> c_uint>("nvmlGpmSampleGet");
    let free = nvml.sym::<unsafe extern "C" fn(Sample) -> c_uint>("nvmlGpmSampleFree");
    let get = nvml.sym::<unsafe extern "C" fn(*mut GpmMetricsGet) -> c_uint>("nvmlGpmMetricsGet");
    let d0 = nvml.handle(0);
    let (mut s1, mut s2): (Sample, Sample) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: every call has the signature nvml.h declares, with valid pointers.
    unsafe {
        let mut sup = [2, 0];
        assert_eq!(support(d0, &mut sup), ARGUMENT_VERSION_MISMATCH);
        sup = [1, 0];
        assert_eq!(support(d0, &mut sup), SUCCESS);
        assert_eq!(sup, [1, 1], "an H100 has GPM");
        assert_eq!(alloc(&mut s1), SUCCESS);
        assert_eq!(alloc(&mut s2), SUCCESS);
        assert_eq!(take(d0, s1), SUCCESS);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(take(d0, s2), SUCCESS);
        let mut req = GpmMetricsGet {
            version: 1,
            num_metrics: 3,
            sample1: s1,
            sample2: s2,
            metrics: [GpmMetric {
                metric_id: 0,
                nvml_return: 0,
                value: 0.0,
                info: [std::ptr::null_mut(); 3],
            }; 210],
        };
        // GRAPHICS_UTIL and ANY_TENSOR_UTIL (the profile's 0.75 and 0.25), and one metric
        // the simulator does not model.
        for (m, id) in req.metrics.iter_mut().zip([1, 5, 150]) {
            m.metric_id = id;
        }
        assert_eq!(get(&mut req), SUCCESS);
        assert_eq!(
            (req.metrics[0].nvml_return, req.metrics[0].value),
            (SUCCESS, 75.0)
        );
        assert_eq!(
            (req.metrics[1].nvml_return, req.metrics[1].value),
            (SUCCESS, 25.0)
        );
        assert_eq!(req.metrics[2].nvml_return, NOT_SUPPORTED);
        // Samples in the wrong order, a wrong version: the request is refused.
        req.sample1 = s2;
        req.sample2 = s1;
        assert_eq!(get(&mut req), INVALID_ARGUMENT);
        req.sample1 = s1;
        req.sample2 = s2;
        req.version = 2;
        assert_eq!(get(&mut req), ARGUMENT_VERSION_MISMATCH);
        assert_eq!(free(s1), SUCCESS);
        assert_eq!(free(s1), INVALID_ARGUMENT);
        req.version = 1;
        assert_eq!(get(&mut req), INVALID_ARGUMENT, "a freed sample");
        assert_eq!(free(s2), SUCCESS);
    }
    assert_eq!(nvml.call0("nvmlShutdown"), SUCCESS);
}

/// `nvmlFieldValue_t` (nvml.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct FieldValue {
    field_id: c_uint,
    scope_id: c_uint,
    timestamp: i64,
    latency_usec: i64,
    value_type: c_uint,
    nvml_return: c_uint,
    value: u64,
}

fn field_values(nvml: &Nvml, d: Device, asks: &[(c_uint, c_uint)]) -> Vec<FieldValue> {
    let mut fv: Vec<FieldValue> = asks
        .iter()
        .map(|&(field_id, scope_id)| FieldValue {
            field_id,
            scope_id,
            ..FieldValue::default()
        })
        .collect();
    // SAFETY: (nvmlDevice_t, int, nvmlFieldValue_t*) as declared; `fv` holds that many.
    let rc = unsafe {
        nvml.sym::<unsafe extern "C" fn(Device, i32, *mut FieldValue) -> c_uint>(
            "nvmlDeviceGetFieldValues",
        )(d, fv.len() as i32, fv.as_mut_ptr())
    };
    assert_eq!(rc, SUCCESS);
    fv
}

/// NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX (138) / _RX (139) of all links (scope UINT_MAX, as
/// DCGM asks) are KiB counters from the profile that grow with time, stamped; a single
/// link's (scope 0) is not simulated, and a counter the profile refuses is refused.
#[test]
fn nvlink_throughput_counters_grow_for_all_links_only() {
    let _l = lock();
    let dir = std::env::temp_dir().join(format!("nvml-sim-nvlink-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("p.toml");
    std::fs::write(
        &profile,
        "[gpus]\ncount = 2\nmodel = \"NVIDIA H100 80GB HBM3\"\nnvlinks = 4\n\
         [[nvml_fields]]\nid = 138\ngen = { kind = \"counter\", per_s = 1.0e6, start = 5.0e6 }\n\
         [[nvml_fields]]\nid = 139\ngen = { kind = \"constant\", value = 777.0 }\n\
         [[nvml_fields]]\nid = 138\ngpus = [1]\ngen = { kind = \"sentinel\", which = \"not_supported\" }\n",
    )
    .unwrap();
    std::env::set_var("DCGM_SIM_PROFILE", &profile);
    let nvml = Nvml::open();
    assert_eq!(nvml.call0("nvmlInit_v2"), SUCCESS);
    let all = c_uint::MAX;
    let d0 = nvml.handle(0);
    let a = field_values(&nvml, d0, &[(138, all), (139, all), (138, 0)]);
    assert_eq!((a[0].nvml_return, a[0].value_type), (SUCCESS, 3), "{a:?}");
    assert!(a[0].value >= 5_000_000 && a[0].timestamp > 0, "{a:?}");
    assert_eq!((a[1].nvml_return, a[1].value), (SUCCESS, 777));
    assert_eq!(a[2].nvml_return, NOT_SUPPORTED, "link 0 alone");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let b = field_values(&nvml, d0, &[(138, all)]);
    let dt_s = (b[0].timestamp - a[0].timestamp) as f64 / 1e6;
    let kib = (b[0].value - a[0].value) as f64;
    assert!(
        dt_s >= 0.3 && (kib - 1.0e6 * dt_s).abs() <= 2.0,
        "{kib} KiB in {dt_s} s"
    );
    let c = field_values(&nvml, nvml.handle(1), &[(138, all), (139, all)]);
    assert_eq!(
        (c[0].nvml_return, c[1].nvml_return),
        (NOT_SUPPORTED, SUCCESS)
    );
    assert_eq!(nvml.call0("nvmlShutdown"), SUCCESS);
    let _ = std::fs::remove_dir_all(dir);
}

/// `nvmlSample_t`: a timestamp and the 8-byte `nvmlValue_t` union.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct Sample {
    time_stamp: u64,
    value: [u8; 8],
}

type SamplesFn =
    unsafe extern "C" fn(Device, c_uint, u64, *mut c_uint, *mut c_uint, *mut Sample) -> c_uint;

/// (value type, samples) newer than `last_seen` of buffer `kind`, through the count query
/// then the read; the error code otherwise.
fn device_samples(
    f: &Symbol<'_, SamplesFn>,
    d: Device,
    kind: c_uint,
    last_seen: u64,
) -> Result<(c_uint, Vec<(u64, u32)>), c_uint> {
    let (mut ty, mut n) = (99, 0);
    // SAFETY: a count query: no buffer.
    match unsafe { f(d, kind, last_seen, &mut ty, &mut n, std::ptr::null_mut()) } {
        SUCCESS => {}
        rc => return Err(rc),
    }
    let mut buf = vec![Sample::default(); n as usize];
    // SAFETY: `buf` holds `n` samples.
    match unsafe { f(d, kind, last_seen, &mut ty, &mut n, buf.as_mut_ptr()) } {
        SUCCESS => {}
        rc => return Err(rc),
    }
    buf.truncate(n as usize);
    let uint = |s: &Sample| u32::from_ne_bytes(s.value[..4].try_into().unwrap());
    Ok((ty, buf.iter().map(|s| (s.time_stamp, uint(s))).collect()))
}

#[test]
fn device_samples_keep_the_power_and_clocks_dcgm_reads_and_catch_a_spike() {
    const POWER: c_uint = 0;
    const PROCESSOR_CLK: c_uint = 5;
    const UNSIGNED_INT: c_uint = 1;
    let _l = lock();
    let (nvml, control) = Nvml::init_with_control("samples", "");
    let f = nvml.sym::<SamplesFn>("nvmlDeviceGetSamples");
    let d = nvml.handle(4);

    // The buffer as first asked: the newest samples the driver keeps, 100 ms apart,
    // unsigned ints (mW, MHz), oldest first.
    let (ty, power) = device_samples(&f, d, POWER, 0).unwrap();
    assert_eq!(ty, UNSIGNED_INT);
    assert!(power.len() > 100, "{}", power.len());
    assert!(power.windows(2).all(|w| w[1].0 - w[0].0 == 100_000));
    assert!(
        power.iter().all(|s| s.1 > 10_000 && s.1 < 1_000_000),
        "{power:?}"
    );
    let (_, clocks) = device_samples(&f, d, PROCESSOR_CLK, 0).unwrap();
    assert!(clocks.iter().all(|s| s.1 > 100 && s.1 < 3000), "{clocks:?}");
    // Nothing newer than the newest: NOT_FOUND. A short buffer gets the oldest that fit.
    let newest = power.last().unwrap().0;
    assert_eq!(device_samples(&f, d, POWER, newest).err(), Some(NOT_FOUND));
    let (mut ty, mut n) = (0, 2);
    let mut two = [Sample::default(); 2];
    // SAFETY: `two` holds 2 samples.
    assert_eq!(
        unsafe { f(d, POWER, 0, &mut ty, &mut n, two.as_mut_ptr()) },
        SUCCESS
    );
    assert_eq!((n, two[0].time_stamp), (2, power[0].0));
    // No buffer of this type here; none on a MIG device (GPU 0 is split).
    assert_eq!(device_samples(&f, d, 8, 0).err(), Some(NOT_SUPPORTED));
    let mut mig: Device = std::ptr::null_mut();
    // SAFETY: (nvmlDevice_t, uint, nvmlDevice_t*) as declared.
    let rc = unsafe {
        nvml.sym::<unsafe extern "C" fn(Device, c_uint, *mut Device) -> c_uint>(
            "nvmlDeviceGetMigDeviceHandleByIndex",
        )(nvml.handle(0), 0, &mut mig)
    };
    assert_eq!(rc, SUCCESS);
    assert_eq!(device_samples(&f, mig, POWER, 0).err(), Some(NOT_SUPPORTED));

    // A 300 ms spike of 950 W read in now: three samples of 950 000 mW between two reads,
    // the samples before it untouched.
    std::fs::write(&control, "spike 4 155 950 300 200\n").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let spiked = loop {
        let got = device_samples(&f, d, POWER, newest)
            .map(|x| x.1)
            .unwrap_or_default();
        let high: Vec<u64> = got.iter().filter(|s| s.1 == 950_000).map(|s| s.0).collect();
        if high.len() == 3 && got.last().is_some_and(|l| l.0 > high[2]) {
            break high;
        }
        assert!(std::time::Instant::now() < deadline, "no spike: {got:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(spiked.windows(2).all(|w| w[1] - w[0] == 100_000));
    // The samples before it read as they did.
    let before: BTreeMap<u64, u32> = power.iter().copied().collect();
    for (t, v) in device_samples(&f, d, POWER, 0).unwrap().1 {
        assert!(before.get(&t).is_none_or(|b| *b == v), "{t}: {v}");
    }
    // A lost GPU: GPU_IS_LOST.
    std::fs::write(&control, "spike 4 155 950 300 200\ngpu_lost 4\n").unwrap();
    assert_eq!(device_samples(&f, d, POWER, 0).err(), Some(GPU_IS_LOST));
    assert_eq!(nvml.call0("nvmlShutdown"), SUCCESS);
    std::fs::remove_file(&control).unwrap();
}
