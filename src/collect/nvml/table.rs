//! The one table of the NVML source: which NVML call answers which DCGM field, and how
//! DCGM converts the answer (`dcgmlib/src/DcgmCacheManager.cpp`, DCGM 4.6: the case of each
//! field in `BufferOrCacheLatestGpuValue`, and the `nvmlFieldId` column of
//! `dcgm_fields.cpp` for the fields it reads through `nvmlDeviceGetFieldValues`). A field
//! that is not here is one NVML cannot answer as DCGM would: it is left out, never guessed.
//! `docs/metrics.md` shows the same table.

/// `nvmlClockType_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ClockKind {
    Sm,
    Memory,
    Video,
}

/// Which NVLink KiB counters a throughput field sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Direction {
    /// RX + TX (DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL).
    All,
    Tx,
    Rx,
}

/// One NVML call on one device (or on the system); a collection makes each at most once
/// per device, whatever number of fields it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Call {
    /// `nvmlSystemGetDriverVersion` (text).
    DriverVersion,
    /// `nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)`, °C.
    Temperature,
    /// `nvmlDeviceGetClockInfo`, MHz.
    Clock(ClockKind),
    /// `nvmlDeviceGetMaxClockInfo`, MHz.
    MaxClock(ClockKind),
    /// `nvmlDeviceGetPowerUsage`, mW.
    PowerUsage,
    /// `nvmlDeviceGetPcieReplayCounter`.
    PcieReplay,
    /// `nvmlDeviceGetUtilizationRates`: [gpu %, memory %].
    Utilization,
    /// `nvmlDeviceGetEncoderUtilization`, %.
    Encoder,
    /// `nvmlDeviceGetDecoderUtilization`, %.
    Decoder,
    /// `nvmlDeviceGetMemoryInfo_v2`, bytes: [total, free, used, reserved].
    Memory,
    /// `nvmlDeviceGetCurrentClocksEventReasons`: the `nvmlClocksEventReasons` mask.
    ClocksEventReasons,
    /// `nvmlDeviceGetFieldValues` of one NVML field id (`NVML_FI_*`).
    FieldValue(u32),
    /// `nvmlEventTypeXidCriticalError` events (`events.rs`): the latest XID, no call.
    XidEvent,
    /// `nvmlGpmMetricsGet` of one `NVML_GPM_METRIC_*` id between the samples of two
    /// collections (`gpm.rs`).
    Gpm(u32),
    /// `nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{RX,TX})`, all links:
    /// DCGM's rate of the KiB counters between two collections (`nvlink.rs`).
    NvLinkThroughput(Direction),
}

impl Call {}

/// Which number of a call's answer a field is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    /// The n-th number (0 for calls answering one).
    At(usize),
    /// `used / (total - reserved)` of [`Call::Memory`] (DCGM's FB_USED_RATIO).
    UsedRatio,
}

/// DCGM's conversion of the NVML answer into the field's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Convert {
    Same,
    /// mW -> W (a double).
    MilliToUnit,
    /// bytes -> MiB, truncated (DCGM divides integers).
    BytesToMib,
    /// % -> ratio (DCGM's GPM manager: "percentage to activity level").
    PercentToRatio,
    /// MiB/s -> bytes/s, truncated (DCGM's cache manager for GPM bandwidths).
    MibToBytes,
}

impl Convert {
    pub(crate) fn apply(self, v: f64) -> f64 {
        match self {
            Convert::Same => v,
            Convert::MilliToUnit => v / 1000.0,
            Convert::BytesToMib => (v / 1_048_576.0).trunc(),
            Convert::PercentToRatio => v / 100.0,
            Convert::MibToBytes => (v * 1_048_576.0).trunc(),
        }
    }
}

/// One DCGM field as NVML answers it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Row {
    pub field: u16,
    pub call: Call,
    pub pick: Pick,
    pub convert: Convert,
}

const fn row(field: u16, call: Call) -> Row {
    Row {
        field,
        call,
        pick: Pick::At(0),
        convert: Convert::Same,
    }
}

const fn mem(field: u16, at: usize) -> Row {
    Row {
        field,
        call: Call::Memory,
        pick: Pick::At(at),
        convert: Convert::BytesToMib,
    }
}

/// A profiling ratio from a GPM metric (`DcgmFieldIdToNvmlGpmMetricId`, DCGM 4.6).
const fn gpm(field: u16, metric: u32) -> Row {
    Row {
        field,
        call: Call::Gpm(metric),
        pick: Pick::At(0),
        convert: Convert::PercentToRatio,
    }
}

/// A GPM throughput metric (MiB/s) for a DCGM field in bytes per second.
const fn gpm_bytes(field: u16, metric: u32) -> Row {
    Row {
        convert: Convert::MibToBytes,
        ..gpm(field, metric)
    }
}

/// DCGM field id -> NVML call -> conversion.
pub(crate) const TABLE: &[Row] = &[
    row(1, Call::DriverVersion),
    row(100, Call::Clock(ClockKind::Sm)),
    row(101, Call::Clock(ClockKind::Memory)),
    row(102, Call::Clock(ClockKind::Video)),
    row(112, Call::ClocksEventReasons),
    row(113, Call::MaxClock(ClockKind::Sm)),
    row(114, Call::MaxClock(ClockKind::Memory)),
    row(115, Call::MaxClock(ClockKind::Video)),
    // NVML_FI_DEV_MEMORY_TEMP.
    row(140, Call::FieldValue(82)),
    row(150, Call::Temperature),
    Row {
        field: 155,
        call: Call::PowerUsage,
        pick: Pick::At(0),
        convert: Convert::MilliToUnit,
    },
    // NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ.
    row(156, Call::FieldValue(83)),
    row(202, Call::PcieReplay),
    // The latest XID event's XID.
    row(230, Call::XidEvent),
    row(203, Call::Utilization),
    Row {
        field: 204,
        call: Call::Utilization,
        pick: Pick::At(1),
        convert: Convert::Same,
    },
    row(206, Call::Encoder),
    row(207, Call::Decoder),
    mem(250, 0),
    mem(251, 1),
    mem(252, 2),
    mem(253, 3),
    Row {
        field: 254,
        call: Call::Memory,
        pick: Pick::UsedRatio,
        convert: Convert::Same,
    },
    // NVML_FI_DEV_ECC_{SBE,DBE}_{VOL,AGG}_TOTAL.
    row(310, Call::FieldValue(3)),
    row(311, Call::FieldValue(4)),
    row(312, Call::FieldValue(5)),
    row(313, Call::FieldValue(6)),
    // NVML_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL: all links'
    // error counters, read by DCGM with scope 0 (not an NVLink5 aggregate field).
    row(409, Call::FieldValue(38)),
    row(419, Call::FieldValue(45)),
    row(429, Call::FieldValue(52)),
    row(439, Call::FieldValue(59)),
    // DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL (= _BANDWIDTH_TOTAL), _TX_, _RX_THROUGHPUT_TOTAL:
    // MiB/s, computed from the KiB counters of two collections as DCGM does.
    row(449, Call::NvLinkThroughput(Direction::All)),
    row(843, Call::NvLinkThroughput(Direction::Tx)),
    row(897, Call::NvLinkThroughput(Direction::Rx)),
    // NVML_FI_DEV_RETIRED_DBE, NVML_FI_DEV_RETIRED_PENDING.
    row(391, Call::FieldValue(30)),
    row(392, Call::FieldValue(31)),
    // NVML_FI_DEV_REMAPPED_{UNC,COR,FAILURE,PENDING}.
    row(393, Call::FieldValue(143)),
    row(394, Call::FieldValue(142)),
    row(395, Call::FieldValue(145)),
    row(396, Call::FieldValue(144)),
    // DCGM_FI_PROF_{GR_ENGINE_ACTIVE,SM_ACTIVE,SM_OCCUPANCY,PIPE_TENSOR_ACTIVE,DRAM_ACTIVE}:
    // NVML_GPM_METRIC_{GRAPHICS_UTIL,SM_UTIL,SM_OCCUPANCY,ANY_TENSOR_UTIL,DRAM_BW_UTIL}.
    gpm(1001, 1),
    gpm(1002, 2),
    gpm(1003, 3),
    gpm(1004, 5),
    gpm(1005, 10),
    // DCGM_FI_PROF_{PCIE,NVLINK}_{TX,RX}_BYTES: NVML_GPM_METRIC_PCIE_{TX,RX}_PER_SEC,
    // NVML_GPM_METRIC_NVLINK_TOTAL_{TX,RX}_PER_SEC, MiB/s.
    gpm_bytes(1009, 20),
    gpm_bytes(1010, 21),
    gpm_bytes(1011, 61),
    gpm_bytes(1012, 60),
];

/// The row of a DCGM field, `None` when NVML cannot answer it.
pub(crate) fn lookup(field: u16) -> Option<&'static Row> {
    TABLE.iter().find(|r| r.field == field)
}

/// `NVML_FI_DEV_MEMORY_TEMP`.
const NVML_MEMORY_TEMP: u32 = 82;
/// DCGM's highest plausible memory temperature: above it, its value is blank.
const MAX_MEMORY_TEMP_C: u32 = 200;

/// The number DCGM 4.6 makes of an `nvmlDeviceGetFieldValues` answer for NVML field `id`
/// (`DcgmCacheManager.cpp`), NaN where DCGM stores a blank, `NotSupported` where it stores
/// that. DCGM does not trust NVML's value type everywhere: the memory temperature is read
/// as `uiVal` whatever its type says (nvbugs/4300930: r545 drivers call it a double) and
/// blank above 200 °C; the ECC fields (DCGM 300-333) are read as `ullVal` (NVML bug
/// 2032468: their type left 0, a double); an ECC or retired-page field (NVML 3-31) with
/// no timestamp, no latency and a double's type was never filled (NVML bug 2009232, ECC
/// disabled): not supported. Every other value by its type, a double truncated for DCGM's
/// integer fields (`NvmlFieldValueToInt64`).
pub(crate) fn field_number(
    id: u32,
    sample: nvml_wrapper::struct_wrappers::device::FieldValueSample,
) -> Result<f64, nvml_wrapper::error::NvmlError> {
    use nvml_wrapper::enums::device::SampleValue;
    // The union's 8 bytes as `ullVal` (`uiVal` their low 4), and whether NVML said double.
    // nvml-wrapper zeroes the entry first, so a narrower member leaves the rest 0.
    let value = sample.value?;
    let (bits, double) = match value {
        SampleValue::F64(v) => (v.to_bits(), true),
        SampleValue::U32(v) => (u64::from(v), false),
        SampleValue::U64(v) => (v, false),
        SampleValue::I64(v) => (v as u64, false),
    };
    if id == NVML_MEMORY_TEMP {
        let c = bits as u32;
        return Ok(if c > MAX_MEMORY_TEMP_C {
            f64::NAN
        } else {
            c.into()
        });
    }
    if double && sample.timestamp == 0 && sample.latency == 0 && (3..=31).contains(&id) {
        return Err(nvml_wrapper::error::NvmlError::NotSupported);
    }
    let field = TABLE
        .iter()
        .find(|r| r.call == Call::FieldValue(id))
        .map(|r| r.field);
    if field.is_some_and(|f| (300..=333).contains(&f)) {
        return Ok(bits as f64);
    }
    Ok(match value {
        SampleValue::F64(v) => {
            let int64 = field
                .and_then(dcgm_sys::fields::by_id)
                .is_some_and(|m| m.field_type == b'i');
            if int64 {
                v.trunc()
            } else {
                v
            }
        }
        SampleValue::U32(v) => v.into(),
        SampleValue::U64(v) => v as f64,
        SampleValue::I64(v) => v as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_listed_once_and_known_to_dcgm() {
        let mut seen = std::collections::HashSet::new();
        for r in TABLE {
            assert!(seen.insert(r.field), "field {} listed twice", r.field);
            assert!(dcgm_sys::fields::by_id(r.field).is_some(), "{}", r.field);
        }
    }

    #[test]
    fn nvml_field_ids_are_dcgms_own() {
        // Where DCGM reads a field through nvmlDeviceGetFieldValues, its field table
        // names the NVML id: the table must ask for the same one.
        for r in TABLE {
            let meta = dcgm_sys::fields::by_id(r.field).unwrap();
            if let Call::FieldValue(id) = r.call {
                if meta.nvml_field_id != 0 {
                    assert_eq!(meta.nvml_field_id as u32, id, "{}", meta.name);
                }
            }
        }
    }

    /// DCGM's reading of field values whose type NVML got wrong, and of those it got
    /// right (`DcgmCacheManager.cpp`, DCGM 4.6).
    #[test]
    fn field_values_are_read_as_dcgm_reads_them() {
        use nvml_wrapper::enums::device::SampleValue;
        use nvml_wrapper::error::NvmlError;
        use nvml_wrapper::struct_wrappers::device::FieldValueSample;
        use nvml_wrapper::structs::device::FieldId;
        let at = |id: u32, value: SampleValue, timestamp: i64| FieldValueSample {
            field: FieldId(id),
            timestamp,
            latency: 0,
            value: Ok(value),
        };
        let read = |id, value, ts| field_number(id, at(id, value, ts));
        // r545: 71 °C as uiVal, typed double (a denormal when read as one).
        let as_double = f64::from_bits(71);
        assert!(as_double > 0.0 && as_double < 1e-300);
        assert_eq!(read(82, SampleValue::F64(as_double), 1).unwrap(), 71.0);
        assert_eq!(read(82, SampleValue::U32(64), 1).unwrap(), 64.0);
        assert!(read(82, SampleValue::U32(201), 1).unwrap().is_nan());
        // ECC counts as ullVal whatever the type says.
        let count = f64::from_bits(123_456);
        assert_eq!(read(3, SampleValue::F64(count), 1).unwrap(), 123_456.0);
        assert_eq!(read(6, SampleValue::U64(7), 1).unwrap(), 7.0);
        // Never filled (ECC disabled): not supported, ECC counts and retired pages alike.
        for id in [3, 4, 5, 6, 30, 31] {
            let e = read(id, SampleValue::F64(0.0), 0).unwrap_err();
            assert!(matches!(e, NvmlError::NotSupported), "{id}: {e:?}");
        }
        // Filled (a timestamp): a double's type is a double's value, truncated for an
        // integer field.
        assert_eq!(read(30, SampleValue::F64(2.75), 5).unwrap(), 2.0);
        assert_eq!(
            read(83, SampleValue::U64(1_367_122_340), 0).unwrap(),
            1_367_122_340.0
        );
        assert_eq!(read(38, SampleValue::I64(12), 5).unwrap(), 12.0);
        let failed = FieldValueSample {
            value: Err(NvmlError::NoPermission),
            ..at(5, SampleValue::U64(1), 1)
        };
        assert!(matches!(
            field_number(5, failed),
            Err(NvmlError::NoPermission)
        ));
    }

    #[test]
    fn conversions_are_dcgms() {
        assert_eq!(Convert::MilliToUnit.apply(75_500.0), 75.5);
        assert_eq!(
            Convert::BytesToMib.apply((81559.0 * 1_048_576.0) + 1.0),
            81559.0
        );
        assert_eq!(Convert::BytesToMib.apply(1_048_575.0), 0.0);
        assert_eq!(lookup(155).unwrap().convert, Convert::MilliToUnit);
        assert_eq!(Convert::PercentToRatio.apply(87.5), 0.875);
        assert_eq!(lookup(1004).unwrap().call, Call::Gpm(5));
        assert_eq!(Convert::MibToBytes.apply(953.674_316_406_25), 1e9);
        assert_eq!(Convert::MibToBytes.apply(0.5 / 1_048_576.0), 0.0);
        assert_eq!(
            lookup(230).unwrap().call,
            Call::XidEvent,
            "XIDs are events, not a value NVML holds"
        );
    }
}
