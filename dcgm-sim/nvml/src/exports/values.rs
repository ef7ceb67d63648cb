//! The value calls: temperatures, clocks, power and energy, utilisation, PCIe replays, clock
//! event reasons, ECC and remapped rows, and `nvmlDeviceGetFieldValues`. Each answers from
//! what the simulated DCGM reads for the same GPU (`Sim::reading`, by DCGM field id), so the
//! two simulators agree wherever DCGM reads the value from NVML.

use super::{put, with_device};
use crate::ffi::{self, Device, Return};
use crate::sim::{Dev, Sim};
use dcgm_sim_model::profile::FieldValueBug;
use std::ffi::{c_int, c_uint, c_ulonglong};

/// A DCGM field's reading on the device, as an unsigned integer (NVML's counters and
/// gauges are unsigned).
fn whole(sim: &Sim, dev: &Dev<'_>, field: u16) -> Result<u64, Return> {
    sim.reading(dev, field).map(|v| v.max(0.0).round() as u64)
}

/// One unsigned output from one DCGM field, converted by `cast`.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn unsigned_from<T>(device: Device, out: *mut T, field: u16, cast: fn(u64) -> T) -> Return {
    with_device(device, |sim, dev| {
        let v = whole(sim, &dev, field)?;
        // SAFETY: the caller's contract.
        unsafe { put(out, cast(v)) }
    })
}

/// One unsigned int output from one DCGM field.
///
/// # Safety
/// `out` is NULL or an output uint.
unsafe fn uint_from(device: Device, out: *mut c_uint, field: u16) -> Return {
    // SAFETY: the caller's contract.
    unsafe { unsigned_from(device, out, field, |v| v as c_uint) }
}

/// `NVML_TEMPERATURE_GPU` (0) only; DCGM_FI_DEV_GPU_TEMP.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: Device,
    sensor: c_uint,
    temp: *mut c_uint,
) -> Return {
    if sensor != 0 {
        return with_device(device, |_, _| Err(ffi::ERROR_NOT_SUPPORTED));
    }
    // SAFETY: nvml.h: `temp` is an output uint.
    unsafe { uint_from(device, temp, 150) }
}

/// The DCGM clock field of an `nvmlClockType_t` (graphics 0, SM 1, memory 2, video 3):
/// current clocks, or the maximum ones.
fn clock_field(clock: c_uint, max: bool) -> Option<u16> {
    Some(match (clock, max) {
        (0 | 1, false) => 100,
        (2, false) => 101,
        (3, false) => 102,
        (0 | 1, true) => 113,
        (2, true) => 114,
        (3, true) => 115,
        _ => return None,
    })
}

unsafe fn clock(device: Device, kind: c_uint, out: *mut c_uint, max: bool) -> Return {
    match clock_field(kind, max) {
        // SAFETY: nvml.h: `out` is an output uint.
        Some(f) => unsafe { uint_from(device, out, f) },
        None => with_device(device, |_, _| Err(ffi::ERROR_INVALID_ARGUMENT)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: Device,
    kind: c_uint,
    mhz: *mut c_uint,
) -> Return {
    // SAFETY: nvml.h: `clock` is an output uint.
    unsafe { clock(device, kind, mhz, false) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: Device,
    kind: c_uint,
    mhz: *mut c_uint,
) -> Return {
    // SAFETY: nvml.h: `clock` is an output uint.
    unsafe { clock(device, kind, mhz, true) }
}

/// Milliwatts: DCGM_FI_DEV_POWER_USAGE is NVML's answer / 1000.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(device: Device, mw: *mut c_uint) -> Return {
    with_device(device, |sim, dev| {
        let w = sim.reading(&dev, 155)?;
        // SAFETY: nvml.h: `power` is an output uint.
        unsafe { put(mw, (w.max(0.0) * 1000.0).round() as c_uint) }
    })
}

/// Millijoules, as DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: Device,
    mj: *mut c_ulonglong,
) -> Return {
    // SAFETY: nvml.h: `energy` is an output unsigned long long.
    unsafe { unsigned_from(device, mj, 156, |v| v) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieReplayCounter(device: Device, n: *mut c_uint) -> Return {
    // SAFETY: nvml.h: `value` is an output uint.
    unsafe { uint_from(device, n, 202) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: Device,
    util: *mut ffi::Utilization,
) -> Return {
    with_device(device, |sim, dev| {
        let u = ffi::Utilization {
            gpu: whole(sim, &dev, 203)? as c_uint,
            memory: whole(sim, &dev, 204)? as c_uint,
        };
        // SAFETY: nvml.h: `utilization` points to an nvmlUtilization_t.
        unsafe { put(util, u) }
    })
}

/// NVML's encoder/decoder sampling period on an H100 (µs).
const CODEC_PERIOD_US: c_uint = 167_000;

unsafe fn codec(device: Device, util: *mut c_uint, period: *mut c_uint, field: u16) -> Return {
    with_device(device, |sim, dev| {
        if period.is_null() {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        }
        let v = whole(sim, &dev, field)?;
        // SAFETY: nvml.h: both are output uints (`period` checked above).
        unsafe {
            put(util, v as c_uint)?;
            put(period, CODEC_PERIOD_US)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: Device,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> Return {
    // SAFETY: as nvml.h declares.
    unsafe { codec(device, util, period_us, 206) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: Device,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> Return {
    // SAFETY: as nvml.h declares.
    unsafe { codec(device, util, period_us, 207) }
}

/// The reasons of the clock events of the last second (DCGM_FI_DEV_CLOCKS_EVENT_REASONS).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: Device,
    reasons: *mut c_ulonglong,
) -> Return {
    // SAFETY: nvml.h: `clocksEventReasons` is an output unsigned long long.
    unsafe { unsigned_from(device, reasons, 112, |v| v) }
}

/// The older name of the same call (nvml-wrapper uses it).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: Device,
    reasons: *mut c_ulonglong,
) -> Return {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetCurrentClocksEventReasons(device, reasons) }
}

/// (corrected, uncorrected) x (volatile, aggregate) totals: DCGM_FI_DEV_ECC_{SBE,DBE}_{VOL,AGG}_TOTAL.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: Device,
    error_type: c_uint,
    counter_type: c_uint,
    count: *mut c_ulonglong,
) -> Return {
    with_device(device, |sim, dev| {
        let field = match (error_type, counter_type) {
            (0, 0) => 310,
            (1, 0) => 311,
            (0, 1) => 312,
            (1, 1) => 313,
            _ => return Err(ffi::ERROR_INVALID_ARGUMENT),
        };
        let v = whole(sim, &dev, field)?;
        // SAFETY: nvml.h: `eccCounts` is an output unsigned long long.
        unsafe { put(count, v) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: Device,
    corr: *mut c_uint,
    unc: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> Return {
    with_device(device, |sim, dev| {
        if [corr, unc, pending, failure].iter().any(|p| p.is_null()) {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        }
        let v = [394, 393, 396, 395].map(|f| whole(sim, &dev, f));
        let [c, u, p, f] = v;
        let (c, u, p, f) = (c?, u?, p?, f?);
        // SAFETY: four non-NULL output uints (nvml.h).
        unsafe {
            put(corr, c as c_uint)?;
            put(unc, u as c_uint)?;
            put(pending, p as c_uint)?;
            put(failure, f as c_uint)
        }
    })
}

/// NVML field id -> (DCGM field it is, value type, factor from DCGM's unit): the NVML
/// fields DCGM reads through `nvmlDeviceGetFieldValues` (dcgm_fields.cpp's nvmlFieldId),
/// plus the two it reads with their own call there (memory temperature, instant power).
const FIELD_VALUES: [(c_uint, u16, c_uint, f64); 20] = [
    (3, 310, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    (4, 311, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    (5, 312, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    (6, 313, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    (29, 390, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    (30, 391, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    (31, 392, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    // NVML_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL.
    (38, 409, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    (45, 419, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    (52, 429, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    (59, 439, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    (82, 140, ffi::VALUE_TYPE_UNSIGNED_INT, 1.0),
    (83, 156, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    (94, 202, ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, 1.0),
    (142, 394, ffi::VALUE_TYPE_UNSIGNED_INT, 1.0),
    (143, 393, ffi::VALUE_TYPE_UNSIGNED_INT, 1.0),
    (144, 396, ffi::VALUE_TYPE_UNSIGNED_INT, 1.0),
    (145, 395, ffi::VALUE_TYPE_UNSIGNED_INT, 1.0),
    // NVML_FI_DEV_POWER_INSTANT, mW.
    (186, 155, ffi::VALUE_TYPE_UNSIGNED_INT, 1000.0),
    // NVML_FI_DEV_NVLINK_LINK_COUNT: the GPU's links.
    (91, 0, ffi::VALUE_TYPE_UNSIGNED_INT, 1.0),
];

/// Fills each requested field; a field the simulator does not model, or one DCGM reads as
/// unsupported, gets its own error in `nvmlReturn` while the call succeeds, as NVML does.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: Device,
    count: c_int,
    values: *mut ffi::FieldValue,
) -> Return {
    with_device(device, |sim, dev| {
        if values.is_null() || count <= 0 {
            return Err(ffi::ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: nvml.h: `values` is an array of `valuesCount` nvmlFieldValue_t, each
        // with `fieldId` set by the caller; non-NULL and count > 0 checked above.
        let out = unsafe { std::slice::from_raw_parts_mut(values, count as usize) };
        let now = crate::sim::now_us() as i64;
        for fv in out.iter_mut() {
            fv.timestamp = now;
            fv.latency_usec = 0;
            if let Some(v) = nvlink_counter(sim, &dev, fv, now) {
                match v {
                    Ok(kib) => {
                        fv.set(ffi::VALUE_TYPE_UNSIGNED_LONG_LONG, kib);
                        fv.nvml_return = ffi::SUCCESS;
                    }
                    Err(e) => fv.nvml_return = e,
                }
                continue;
            }
            let Some(&(_, field, ty, factor)) = FIELD_VALUES.iter().find(|r| r.0 == fv.field_id)
            else {
                fv.nvml_return = ffi::ERROR_NOT_SUPPORTED;
                continue;
            };
            let v = if field == 0 {
                Ok(dev.gpu().links.len() as f64)
            } else {
                sim.reading(&dev, field)
            };
            match v {
                Ok(v) => {
                    fv.set(ty, (v.max(0.0) * factor).round() as u64);
                    fv.nvml_return = ffi::SUCCESS;
                    misanswer(&sim.field_value_bugs, fv);
                }
                Err(e) => fv.nvml_return = e,
            }
        }
        Ok(())
    })
}

/// A successful answer as a driver with `bugs` gives it (`[nvml] field_value_bugs`).
fn misanswer(bugs: &[FieldValueBug], fv: &mut ffi::FieldValue) {
    for bug in bugs {
        match bug {
            // NVML_FI_DEV_MEMORY_TEMP: the °C stays uiVal, the type says double.
            FieldValueBug::MemoryTempAsDouble if fv.field_id == 82 => {
                fv.value_type = ffi::VALUE_TYPE_DOUBLE;
            }
            // NVML_FI_DEV_ECC_CURRENT to NVML_FI_DEV_ECC_DBE_AGG_TEX: the count stays
            // ullVal, the type is left 0.
            FieldValueBug::EccTypeUnset if (1..=28).contains(&fv.field_id) => {
                fv.value_type = ffi::VALUE_TYPE_DOUBLE;
            }
            // NVML_FI_DEV_ECC_CURRENT to NVML_FI_DEV_RETIRED_PENDING, ECC disabled: the
            // entry as the caller zeroed it.
            FieldValueBug::EccUninitialised if (1..=31).contains(&fv.field_id) => {
                fv.timestamp = 0;
                fv.latency_usec = 0;
                fv.set(ffi::VALUE_TYPE_DOUBLE, 0);
            }
            _ => {}
        }
    }
}

/// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX}` (KiB), `None` for another field. Only the
/// sum over all links (scope `UINT_MAX`, as DCGM asks) is simulated: a single link's
/// counter (any other scope) is NOT_SUPPORTED, so a client that asks for link 0 while
/// meaning all of them is caught.
fn nvlink_counter(
    sim: &Sim,
    dev: &Dev<'_>,
    fv: &ffi::FieldValue,
    now_us: i64,
) -> Option<Result<u64, Return>> {
    use dcgm_sim_model::nvlink::{DATA_RX, DATA_TX};
    if fv.field_id != DATA_TX && fv.field_id != DATA_RX {
        return None;
    }
    if fv.scope_id != c_uint::MAX {
        return Some(Err(ffi::ERROR_NOT_SUPPORTED));
    }
    Some(sim.nvlink_kib(dev, fv.field_id, now_us))
}
