//! The C ABI as nvml.h specifies it, through `dlopen` like any client: initialisation and
//! reference counting, return codes for bad arguments, the two-call size protocol, struct
//! versions, the legacy v1 process struct, NOT_SUPPORTED stubs, and run-time faults from
//! the control file shared with the simulated DCGM.

#![allow(non_snake_case)]

mod support;

use libloading::{Library, Symbol};
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
    assert_eq!(nvml.call0("nvmlDeviceGetTemperature"), NOT_SUPPORTED);
    assert_eq!(nvml.call0("nvmlDeviceGetPowerUsage"), NOT_SUPPORTED);
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
        assert_eq!(n, 2);
        assert_eq!(util(d, std::ptr::null_mut(), &mut n, u64::MAX), NOT_FOUND);
    }
    assert_eq!(nvml.call0("nvmlShutdown"), SUCCESS);
}

#[test]
fn control_file_faults_reach_nvml_as_they_reach_dcgm() {
    let _l = lock();
    use_profile("a100-mixed-mig.toml");
    let control = std::env::temp_dir().join(format!("nvml-sim-control-{}", std::process::id()));
    std::fs::write(&control, "").unwrap();
    std::env::set_var("DCGM_SIM_CONTROL", &control);
    let nvml = Nvml::open();
    assert_eq!(nvml.call0("nvmlInit_v2"), SUCCESS);
    std::env::remove_var("DCGM_SIM_CONTROL");
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
    // Its processes ran on the whole GPU, which is now one MIG instance: they are gone.
    assert_eq!(mem.used, 0);
    assert_eq!(nvml.call0("nvmlShutdown"), SUCCESS);
    let _ = std::fs::remove_file(control);
}
