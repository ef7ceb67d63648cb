//! Writes the NVML answers that DCGM's NVML injection library (`libnvml_injection.so`) reads
//! from `NVML_YAML_FILE`, so the real host engine sees the GPUs a test describes.
//!
//! Format (DCGM's `nvml-injection/README.md` and `src/InjectedNvml.cpp`): a `Global` section
//! (`DeviceOrder` lists the UUIDs, in NVML index order) and one `Device` section per UUID.
//! Each key is an NVML getter's name without `nvmlDeviceGet`/`nvmlSystemGet`, its answer
//! `{FunctionReturn: nvmlReturn_t, ReturnValue: ...}`; getters with extra arguments nest one
//! map level per argument. A key that is absent answers "not injected" (an NVML error),
//! which is how a test makes one piece fail.

use std::fmt::Write;

const MIB: u64 = 1024 * 1024;

/// One GPU. Everything defaults to an idle H100 80GB HBM3.
#[derive(Clone, Debug)]
pub struct Gpu {
    pub temp_c: u32,
    pub memory_temp_c: u32,
    pub power_mw: u32,
    pub energy_mj: u64,
    pub sm_clock_mhz: u32,
    pub mem_clock_mhz: u32,
    pub fb_total_mib: u64,
    pub fb_used_mib: u64,
    pub fb_reserved_mib: u64,
    pub gpu_util: u32,
    pub mem_util: u32,
    pub enc_util: u32,
    pub dec_util: u32,
    pub pcie_replays: u64,
    /// Volatile ECC error counts: (corrected, uncorrected).
    pub ecc_volatile: (u64, u64),
    /// Aggregate ECC error counts: (corrected, uncorrected).
    pub ecc_aggregate: (u64, u64),
    /// Remapped rows: (correctable, uncorrectable, pending, failure).
    pub remapped_rows: (u64, u64, u64, u64),
    /// All links' NVLink error totals: flit CRC, data CRC, replay, recovery.
    pub nvlink_errors: (u64, u64, u64, u64),
    /// NVLink KiB counters of all links (`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX}`):
    /// static in the injection library, so DCGM's rate of them is 0 from the second sample
    /// on (non-zero here so that the sum is not the 0 DCGM publishes without computing).
    pub nvlink_data_kib: (u64, u64),
    /// State of each NVLink (true: up); empty means no NVLink.
    pub nvlinks: Vec<bool>,
    /// NVML's P2P status (`nvmlGpuP2PStatus_t`, 0 OK) over NVLink to every other GPU; `None`
    /// leaves `P2PStatus` out, so NVML's answer is an error.
    pub p2p: Option<u32>,
    /// `nvmlClocksEventReasons` bit mask.
    pub clocks_event_reasons: u64,
    /// MIG GPU instances (MIG mode on when not empty), each with one compute instance
    /// over all its slices.
    pub mig: Vec<MigInstance>,
    /// Also describe each MIG device to NVML clients (`MigDeviceUUID` and a `MigDevice`
    /// section: UUID [`mig_uuid`], GPU- and compute-instance id), so that
    /// `nvmlDeviceGetMigDeviceHandleByIndex` finds them.
    pub mig_uuids: bool,
}

/// A MIG GPU instance of an H100 80GB.
#[derive(Clone, Debug)]
pub struct MigInstance {
    /// Slices: 1, 2, 3, 4 or 7 (profiles 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb).
    pub slices: u32,
    /// NVML GPU-instance id (the `GPU_I_ID` label).
    pub nvml_id: u32,
    /// First slice of its placement.
    pub start: u32,
}

impl MigInstance {
    /// The split the real tier uses: a 3g.40gb (GPU instance 2) at slice 0 and a 1g.10gb
    /// (GPU instance 9) at slice 6.
    pub fn three_and_one() -> Vec<MigInstance> {
        vec![
            MigInstance {
                slices: 3,
                nvml_id: 2,
                start: 0,
            },
            MigInstance {
                slices: 1,
                nvml_id: 9,
                start: 6,
            },
        ]
    }
}

/// NVML's GPU-instance profiles of an H100 80GB, by profile index: (profile id, slices,
/// memory MiB). DCGM names a profile `{slices}g.{ceil(memory / 1024)}gb`.
const GI_PROFILES: [(u32, u32, u32); 5] = [
    (19, 1, 9856),
    (14, 2, 19968),
    (9, 3, 40192),
    (5, 4, 40192),
    (0, 7, 80384),
];

pub fn mig_profile_name(slices: u32) -> String {
    let (_, s, mem) = GI_PROFILES
        .iter()
        .find(|p| p.1 == slices)
        .copied()
        .expect("a slice count of an H100 profile");
    format!("{s}g.{}gb", mem.div_ceil(1024))
}

impl Default for Gpu {
    fn default() -> Self {
        Gpu {
            temp_c: 45,
            memory_temp_c: 35,
            power_mw: 75_000,
            energy_mj: 123_456_789,
            sm_clock_mhz: 345,
            mem_clock_mhz: 2619,
            fb_total_mib: 81559,
            fb_used_mib: 0,
            fb_reserved_mib: 580,
            gpu_util: 0,
            mem_util: 0,
            enc_util: 0,
            dec_util: 0,
            pcie_replays: 0,
            ecc_volatile: (0, 0),
            ecc_aggregate: (0, 0),
            remapped_rows: (0, 0, 0, 0),
            nvlink_errors: (0, 0, 0, 0),
            // etc/sim/real-kit.toml's counters.
            nvlink_data_kib: (1_234_567, 7_654_321),
            nvlinks: Vec::new(),
            p2p: None,
            clocks_event_reasons: 1,
            mig: Vec::new(),
            mig_uuids: false,
        }
    }
}

pub const DRIVER_VERSION: &str = "580.159.04";
pub const MODEL: &str = "NVIDIA H100 80GB HBM3";

pub fn uuid(index: usize) -> String {
    format!("GPU-5fa7c6a1-3d2b-4e51-9a0c-7b1e2d3c4f{index:02x}")
}

/// The UUID of MIG device `n` (in `Gpu::mig` order) of GPU `index`.
pub fn mig_uuid(index: usize, n: usize) -> String {
    format!("MIG-0b5e7d2c-9a41-4c3e-8f6d-1a2b3c{index:02x}{n:04x}")
}

pub fn pci_bus_id(index: usize) -> String {
    format!("00000000:{:02X}:00.0", 0x18 + 0x10 * index)
}

fn ok(v: impl std::fmt::Display) -> String {
    format!("{{FunctionReturn: 0, ReturnValue: {v}}}")
}

fn quoted(s: &str) -> String {
    format!("\"{s}\"")
}

/// The whole YAML document for `gpus`, in NVML index order.
pub fn render(gpus: &[Gpu]) -> String {
    let mut y = String::from("# NVML injection answers, written by tests/support/nvml_yaml.rs\n");
    let uuids: Vec<String> = (0..gpus.len()).map(uuid).collect();
    y.push_str("Global:\n  DeviceOrder:\n");
    for u in &uuids {
        let _ = writeln!(y, "    - {}", quoted(u));
    }
    for (k, v) in [
        ("Count", ok(gpus.len())),
        ("Count_v2", ok(gpus.len())),
        ("DriverVersion", ok(quoted(DRIVER_VERSION))),
        ("NVMLVersion", ok(quoted("13.580.159.04"))),
        ("CudaDriverVersion", ok(13000)),
        ("CudaDriverVersion_v2", ok(13000)),
        ("ExcludedDeviceCount", ok(0)),
    ] {
        let _ = writeln!(y, "  {k}: {v}");
    }
    y.push_str("Device:\n");
    for (i, g) in gpus.iter().enumerate() {
        device(&mut y, i, g, &uuids);
    }
    mig_sections(&mut y, gpus, &uuids);
    y
}

/// The MIG keys of one device: its mode and profiles, and which GPU instances (named
/// `gi-{gpu}-{n}`, described in the top-level `GpuInstance` section) each profile has.
fn mig_device_keys(y: &mut String, i: usize, g: &Gpu) {
    let mode = u32::from(!g.mig.is_empty());
    let _ = writeln!(
        y,
        "    MigMode: {}",
        ok(format!("{{currentMode: {mode}, pendingMode: {mode}}}"))
    );
    if g.mig.is_empty() {
        return;
    }
    let _ = writeln!(y, "    MaxMigDeviceCount: {}", ok(7));
    if g.mig_uuids {
        let list: Vec<String> = (0..g.mig.len()).map(|n| quoted(&mig_uuid(i, n))).collect();
        let _ = writeln!(y, "    MigDeviceUUID: [{}]", list.join(", "));
    }
    y.push_str("    GpuInstanceProfileInfo:\n");
    for (idx, (id, slices, mem)) in GI_PROFILES.iter().enumerate() {
        let _ = writeln!(
            y,
            "      {idx}: {}",
            ok(format!(
                "{{id: {id}, isP2pSupported: 0, sliceCount: {slices}, instanceCount: {}, \
                 multiprocessorCount: {}, copyEngineCount: 1, decoderCount: 0, encoderCount: 0, \
                 jpegCount: 0, ofaCount: 0, memorySizeMB: {mem}}}",
                7 / slices,
                16 * slices
            ))
        );
    }
    // NVML_ERROR_INVALID_ARGUMENT past the last profile index ends DCGM's iteration.
    let _ = writeln!(y, "      {}: {{FunctionReturn: 2}}", GI_PROFILES.len());
    y.push_str("    GpuInstances:\n");
    for (id, slices, _) in GI_PROFILES {
        let names: Vec<String> = g
            .mig
            .iter()
            .enumerate()
            .filter(|(_, m)| m.slices == slices)
            .map(|(n, _)| quoted(&format!("gi-{i}-{n}")))
            .collect();
        let _ = writeln!(y, "      {id}: {}", ok(format!("[{}]", names.join(", "))));
    }
}

/// The top-level `GpuInstance` and `ComputeInstance` sections.
fn mig_sections(y: &mut String, gpus: &[Gpu], uuids: &[String]) {
    if gpus.iter().all(|g| g.mig.is_empty()) {
        return;
    }
    y.push_str("GpuInstance:\n");
    for (i, g) in gpus.iter().enumerate() {
        for (n, m) in g.mig.iter().enumerate() {
            let profile_id = GI_PROFILES
                .iter()
                .find(|p| p.1 == m.slices)
                .map_or(0, |p| p.0);
            let _ = writeln!(y, "  {}:", quoted(&format!("gi-{i}-{n}")));
            let _ = writeln!(
                y,
                "    Info: {}",
                ok(format!(
                    "{{device: \"{}\", id: {}, profileId: {profile_id}, \
                     placement: {{start: {}, size: {}}}}}",
                    uuids[i], m.nvml_id, m.start, m.slices
                ))
            );
            // Compute-instance profiles by index (1..=slices slices), the last one used.
            y.push_str("    ComputeInstanceProfileInfo:\n");
            for idx in 0..m.slices {
                let _ = writeln!(
                    y,
                    "      {idx}: {{0: {}}}",
                    ok(format!(
                        "{{id: {idx}, sliceCount: {}, instanceCount: 1, multiprocessorCount: {}}}",
                        idx + 1,
                        16 * (idx + 1)
                    ))
                );
            }
            let _ = writeln!(y, "      {}: {{0: {{FunctionReturn: 2}}}}", m.slices);
            y.push_str("    ComputeInstances:\n");
            for idx in 0..m.slices {
                let list = if idx + 1 == m.slices {
                    format!("[{}]", quoted(&format!("ci-{i}-{n}")))
                } else {
                    "[]".to_string()
                };
                let _ = writeln!(y, "      {idx}: {list}");
            }
        }
    }
    y.push_str("ComputeInstance:\n");
    for (i, g) in gpus.iter().enumerate() {
        for (n, m) in g.mig.iter().enumerate() {
            let _ = writeln!(y, "  {}:", quoted(&format!("ci-{i}-{n}")));
            let _ = writeln!(
                y,
                "    Info: {}",
                ok(format!(
                    "{{device: \"{}\", gpuInstance: \"gi-{i}-{n}\", id: 0, profileId: {}, \
                     placement: {{start: 0, size: {}}}}}",
                    uuids[i],
                    m.slices - 1,
                    m.slices
                ))
            );
        }
    }
    // The MIG devices' own answers, keyed by the UUIDs `MigDeviceUUID` lists.
    if gpus.iter().any(|g| g.mig_uuids && !g.mig.is_empty()) {
        y.push_str("MigDevice:\n");
        for (i, g) in gpus.iter().enumerate().filter(|(_, g)| g.mig_uuids) {
            for (n, m) in g.mig.iter().enumerate() {
                let u = mig_uuid(i, n);
                let _ = writeln!(y, "  {}:", quoted(&u));
                let _ = writeln!(y, "    UUID: {}", ok(quoted(&u)));
                let _ = writeln!(y, "    GpuInstanceId: {}", ok(m.nvml_id));
                let _ = writeln!(y, "    ComputeInstanceId: {}", ok(0));
                let _ = writeln!(
                    y,
                    "    Name: {}",
                    ok(quoted(&format!(
                        "{MODEL} MIG {}",
                        mig_profile_name(m.slices)
                    )))
                );
            }
        }
    }
}

fn device(y: &mut String, i: usize, g: &Gpu, uuids: &[String]) {
    let bus = 0x18 + 0x10 * i;
    let busid = pci_bus_id(i);
    let total = g.fb_total_mib * MIB;
    let reserved = g.fb_reserved_mib * MIB;
    let used = g.fb_used_mib * MIB;
    // NVML_STRUCT_VERSION(Memory, 2): sizeof(nvmlMemory_v2_t) | 2 << 24.
    let mem_v2 = 40 | (2 << 24);
    let _ = writeln!(y, "  {}:", quoted(&uuids[i]));
    mig_device_keys(y, i, g);
    let mut key = |k: &str, v: String| {
        let _ = writeln!(y, "    {k}: {v}");
    };
    key("UUID", ok(quoted(&uuids[i])));
    key("Name", ok(quoted(MODEL)));
    key("Brand", ok(14));
    key("Index", ok(i));
    key("MinorNumber", ok(i));
    key("Serial", ok(quoted(&format!("165232000{}", 1000 + i))));
    key("BoardPartNumber", ok(quoted("692-2G520-0200-000")));
    key("VbiosVersion", ok(quoted("96.00.99.00.01")));
    key("Architecture", ok(9));
    key("CudaComputeCapability", ok("{major: 9, minor: 0}"));
    key(
        "PciInfo",
        ok(format!(
            "{{busIdLegacy: \"{busid}\", domain: 0, bus: {bus}, device: 0, \
             pciDeviceId: {}, pciSubSystemId: {}, busId: \"{busid}\"}}",
            0x2330_10DEu32, 0x16C1_10DEu32
        )),
    );
    key("VirtualizationMode", ok(0));
    key("PersistenceMode", ok(1));
    key("ComputeMode", ok(0));
    key("EccMode", ok("{current: 1, pending: 1}"));
    key("DisplayMode", ok(0));
    key("DisplayActive", ok(0));
    key("PerformanceState", ok(0));
    key("PowerUsage", ok(g.power_mw));
    key("TotalEnergyConsumption", ok(g.energy_mj));
    key("EnforcedPowerLimit", ok(700_000));
    key("PowerManagementLimit", ok(700_000));
    key("PowerManagementDefaultLimit", ok(700_000));
    key(
        "PowerManagementLimitConstraints",
        ok("{minLimit: 200000, maxLimit: 700000}"),
    );
    key("PowerManagementMode", ok(1));
    key(
        "MemoryInfo",
        ok(format!(
            "{{version: {mem_v2}, total: {total}, reserved: {reserved}, free: {}, used: {used}}}",
            total - reserved - used
        )),
    );
    key(
        "BAR1MemoryInfo",
        ok(format!(
            "{{bar1Total: {}, bar1Free: {}, bar1Used: {}}}",
            131072 * MIB,
            131070 * MIB,
            2 * MIB
        )),
    );
    key(
        "UtilizationRates",
        ok(format!("{{gpu: {}, memory: {}}}", g.gpu_util, g.mem_util)),
    );
    for (k, v) in [
        ("EncoderUtilization", g.enc_util),
        ("DecoderUtilization", g.dec_util),
    ] {
        key(
            k,
            ok(format!("{{utilization: {v}, samplingPeriodUs: 167000}}")),
        );
    }
    key("MaxPcieLinkGeneration", ok(5));
    key("MaxPcieLinkWidth", ok(16));
    key("CurrPcieLinkGeneration", ok(5));
    key("CurrPcieLinkWidth", ok(16));
    key("PcieReplayCounter", ok(g.pcie_replays));
    key("NumGpuCores", ok(16896));
    key("MemoryBusWidth", ok(5120));
    key("CurrentClocksEventReasons", ok(g.clocks_event_reasons));
    key("CurrentClocksThrottleReasons", ok(g.clocks_event_reasons));
    key("InforomImageVersion", ok(quoted("G520.0200.00.05")));
    key(
        "RemappedRows",
        ok(format!(
            "{{corrRows: {}, uncRows: {}, isPending: {}, failureOccurred: {}}}",
            g.remapped_rows.0, g.remapped_rows.1, g.remapped_rows.2, g.remapped_rows.3
        )),
    );
    // Maps keyed by an extra argument.
    let map = |pairs: &[(u64, String)]| {
        let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        format!("{{{}}}", inner.join(", "))
    };
    key("Temperature", map(&[(0, ok(g.temp_c))]));
    key(
        "TemperatureThreshold",
        map(&[
            (0, ok(92)),
            (1, ok(87)),
            (2, ok(85)),
            (3, ok(85)),
            (4, ok(95)),
        ]),
    );
    // nvmlClockType_t: graphics 0, SM 1, memory 2, video 3.
    let clocks =
        |sm: u32, mem: u32| map(&[(0, ok(sm)), (1, ok(sm)), (2, ok(mem)), (3, ok(765.min(sm)))]);
    key("ClockInfo", clocks(g.sm_clock_mhz, g.mem_clock_mhz));
    key("MaxClockInfo", clocks(1980, 2619));
    key("ApplicationsClock", clocks(1755, 2619));
    key("DefaultApplicationsClock", clocks(1755, 2619));
    key("MaxCustomerBoostClock", clocks(1980, 2619));
    key("FanSpeed", map(&[(0, ok(0))]));
    // nvmlMemoryErrorType_t (corrected 0, uncorrected 1) -> nvmlEccCounterType_t (volatile
    // 0, aggregate 1).
    key(
        "TotalEccErrors",
        format!(
            "{{0: {{0: {}, 1: {}}}, 1: {{0: {}, 1: {}}}}}",
            ok(g.ecc_volatile.0),
            ok(g.ecc_aggregate.0),
            ok(g.ecc_volatile.1),
            ok(g.ecc_aggregate.1)
        ),
    );
    if !g.nvlinks.is_empty() {
        let states: Vec<(u64, String)> = g
            .nvlinks
            .iter()
            .enumerate()
            .map(|(l, up)| (l as u64, ok(u32::from(*up))))
            .collect();
        key("NvLinkState", map(&states));
    }
    if let Some(status) = g.p2p {
        // Peer UUID -> nvmlGpuP2PCapsIndex_t (NVLINK 2, what DCGM asks) -> status.
        let peers: Vec<String> = uuids
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, u)| format!("{}: {{2: {}}}", quoted(u), ok(status)))
            .collect();
        key("P2PStatus", format!("{{{}}}", peers.join(", ")));
    }
    key("SupportedVgpus", ok("[]"));
    key(
        "QueryDeviceSupport",
        ok("{version: 1, isSupportedDevice: 0}"),
    );
    // nvmlDeviceGetFieldValues: NVML field id -> nvmlFieldValue_t (valueType 1 uint,
    // 3 unsigned long long).
    let fv = |id: u32, ty: u32, v: u64| {
        format!(
            "{id}: {{fieldId: {id}, scopeId: 0, timestamp: 0, latencyUsec: 0, \
             valueType: {ty}, nvmlReturn: 0, value: {v}}}"
        )
    };
    let values = [
        fv(82, 1, u64::from(g.memory_temp_c)), // NVML_FI_DEV_MEMORY_TEMP
        fv(83, 3, g.energy_mj),                // NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
        fv(186, 1, u64::from(g.power_mw)),     // NVML_FI_DEV_POWER_INSTANT
        fv(91, 1, g.nvlinks.len() as u64),     // NVML_FI_DEV_NVLINK_LINK_COUNT
        fv(3, 3, g.ecc_volatile.0),            // NVML_FI_DEV_ECC_SBE_VOL_TOTAL
        fv(4, 3, g.ecc_volatile.1),            // NVML_FI_DEV_ECC_DBE_VOL_TOTAL
        fv(5, 3, g.ecc_aggregate.0),           // NVML_FI_DEV_ECC_SBE_AGG_TOTAL
        fv(6, 3, g.ecc_aggregate.1),           // NVML_FI_DEV_ECC_DBE_AGG_TOTAL
        fv(29, 3, 0),                          // NVML_FI_DEV_RETIRED_SBE
        fv(30, 3, 0),                          // NVML_FI_DEV_RETIRED_DBE
        fv(31, 3, 0),                          // NVML_FI_DEV_RETIRED_PENDING
        fv(94, 3, g.pcie_replays),             // NVML_FI_DEV_PCIE_REPLAY_COUNTER
        fv(38, 3, g.nvlink_errors.0),          // NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL
        fv(45, 3, g.nvlink_errors.1),          // NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL
        fv(52, 3, g.nvlink_errors.2),          // NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL
        fv(59, 3, g.nvlink_errors.3),          // NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL
        fv(138, 3, g.nvlink_data_kib.0),       // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
        fv(139, 3, g.nvlink_data_kib.1),       // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
        fv(142, 1, g.remapped_rows.0),         // NVML_FI_DEV_REMAPPED_COR
        fv(143, 1, g.remapped_rows.1),         // NVML_FI_DEV_REMAPPED_UNC
        fv(144, 1, g.remapped_rows.2),         // NVML_FI_DEV_REMAPPED_PENDING
        fv(145, 1, g.remapped_rows.3),         // NVML_FI_DEV_REMAPPED_FAILURE
    ];
    key("FieldValues", ok(format!("{{{}}}", values.join(", "))));
}
