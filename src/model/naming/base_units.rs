//! The table of dcgm-exporter 4.9.0's base-unit metrics (`config::rename` uses it to rename
//! counter sets, `config::counters` to resolve a CSV name, `attribution` to convert
//! per-process values): for each, the legacy DCGM 4.6 field that measures the same thing and
//! the exact conversion; and 4.10.0's new names of four DCGM 4.6 fields ([`RENAMED_4_10`]).

use dcgm_sys::fields::{self, FieldMeta};

/// The conversion of a legacy value to its base unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// x 10^6 (MHz -> Hz, MB/s -> B/s).
    Mega,
    /// / 1000 (mJ -> J).
    Milli,
    /// / 100 (% -> 0-1 ratio).
    Percent,
    /// x 2^20 (MiB -> bytes).
    Mebi,
}

impl Op {
    /// Each is one IEEE operation: exact for the integers DCGM reports (x 10^6, x 2^20 up
    /// to 2^53), else the correctly rounded quotient.
    pub fn apply(self, v: f64) -> f64 {
        match self {
            Op::Mega => v * 1e6,
            Op::Milli => v / 1000.0,
            Op::Percent => v / 100.0,
            Op::Mebi => v * 1_048_576.0,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Op::Mega => "x 10^6",
            Op::Milli => "/ 1000",
            Op::Percent => "/ 100",
            Op::Mebi => "x 2^20",
        }
    }
}

/// One 4.9.0 metric in base units and the legacy field it can be derived from.
#[derive(Debug, PartialEq)]
pub struct BaseUnit {
    /// The 4.9.0 metric name, which is DCGM's name of the base-unit field.
    pub name: &'static str,
    /// The base-unit field (DCGM 4.6.1 or 4.7).
    pub id: u16,
    /// The first DCGM release with field `id`.
    pub since: &'static str,
    /// The legacy field and dcgm-exporter 4.8.x's name for it.
    pub legacy_id: u16,
    pub legacy_name: &'static str,
    /// How the legacy value becomes the base-unit one.
    pub conv: Conversion,
}

/// A legacy unit, its base unit, and what the library may say of each field.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Conversion {
    /// Units, as the metrics reference writes them.
    pub from: &'static str,
    pub to: &'static str,
    pub op: Op,
    /// The value type the base-unit field must have (`b'd'` for ratios, whose integer
    /// namesake in DCGM 4.6 holds percent).
    pub base_type: &'static [u8],
    /// Unit texts the library may report for the base-unit field (trimmed; empty: none).
    pub base_units: &'static [&'static str],
    /// Unit texts the library may report for the legacy field.
    pub legacy_units: &'static [&'static str],
}

pub(crate) const INT: &[u8] = b"i";
pub(crate) const NUM: &[u8] = b"id";

const MIB_TO_BYTES: Conversion = Conversion {
    from: "MiB",
    to: "bytes",
    op: Op::Mebi,
    base_type: NUM,
    base_units: &["", "B"],
    legacy_units: &["", "MiB", "MB"],
};
const MHZ_TO_HZ: Conversion = Conversion {
    from: "MHz",
    to: "Hz",
    op: Op::Mega,
    base_type: NUM,
    base_units: &["", "Hz"],
    legacy_units: &["", "MHz"],
};
const MJ_TO_J: Conversion = Conversion {
    from: "mJ",
    to: "J",
    op: Op::Milli,
    base_type: NUM,
    base_units: &["", "J"],
    legacy_units: &["", "mJ"],
};
const PERCENT_TO_RATIO: Conversion = Conversion {
    from: "%",
    to: "ratio",
    op: Op::Percent,
    base_type: b"d",
    base_units: &[""],
    legacy_units: &["", "%"],
};
const MBPS_TO_BPS: Conversion = Conversion {
    from: "MB/s",
    to: "bytes/s",
    op: Op::Mega,
    base_type: INT,
    base_units: &["", "B/s"],
    legacy_units: &["", "MB/s"],
};

/// Every base-unit metric we serve. Ids 1600-1612: DCGM 4.6.1 (go-dcgm v1.4611's
/// `base_unit_fields_test.go` pairs each with its legacy field); the rest: DCGM 4.7 (release
/// notes and NVIDIA's field reference only).
pub static BASE_UNITS: &[BaseUnit] = &[
    BaseUnit {
        name: "DCGM_FI_DEV_BAR1_CAPACITY_BYTES",
        id: 1600,
        since: "4.6.1",
        legacy_id: 90,
        legacy_name: "DCGM_FI_DEV_BAR1_TOTAL",
        conv: MIB_TO_BYTES,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_BAR1_USED_BYTES",
        id: 1601,
        since: "4.6.1",
        legacy_id: 92,
        legacy_name: "DCGM_FI_DEV_BAR1_USED",
        conv: MIB_TO_BYTES,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_BAR1_FREE_BYTES",
        id: 1602,
        since: "4.6.1",
        legacy_id: 93,
        legacy_name: "DCGM_FI_DEV_BAR1_FREE",
        conv: MIB_TO_BYTES,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_SM_CLOCK_HERTZ",
        id: 1603,
        since: "4.6.1",
        legacy_id: 100,
        legacy_name: "DCGM_FI_DEV_SM_CLOCK",
        conv: MHZ_TO_HZ,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ",
        id: 1604,
        since: "4.6.1",
        legacy_id: 101,
        legacy_name: "DCGM_FI_DEV_MEM_CLOCK",
        conv: MHZ_TO_HZ,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_VIDEO_CLOCK_HERTZ",
        id: 1605,
        since: "4.6.1",
        legacy_id: 102,
        legacy_name: "DCGM_FI_DEV_VIDEO_CLOCK",
        conv: MHZ_TO_HZ,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_SM_APP_CLOCK_HERTZ",
        id: 1606,
        since: "4.6.1",
        legacy_id: 110,
        legacy_name: "DCGM_FI_DEV_APP_SM_CLOCK",
        conv: MHZ_TO_HZ,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_MEMORY_APP_CLOCK_HERTZ",
        id: 1607,
        since: "4.6.1",
        legacy_id: 111,
        legacy_name: "DCGM_FI_DEV_APP_MEM_CLOCK",
        conv: MHZ_TO_HZ,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ",
        id: 1608,
        since: "4.6.1",
        legacy_id: 113,
        legacy_name: "DCGM_FI_DEV_MAX_SM_CLOCK",
        conv: MHZ_TO_HZ,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_MEMORY_MAX_CLOCK_HERTZ",
        id: 1609,
        since: "4.6.1",
        legacy_id: 114,
        legacy_name: "DCGM_FI_DEV_MAX_MEM_CLOCK",
        conv: MHZ_TO_HZ,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_VIDEO_MAX_CLOCK_HERTZ",
        id: 1610,
        since: "4.6.1",
        legacy_id: 115,
        legacy_name: "DCGM_FI_DEV_MAX_VIDEO_CLOCK",
        conv: MHZ_TO_HZ,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
        id: 1611,
        since: "4.6.1",
        legacy_id: 156,
        legacy_name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        conv: MJ_TO_J,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_FAN_SPEED_RATIO",
        id: 1612,
        since: "4.6.1",
        legacy_id: 191,
        legacy_name: "DCGM_FI_DEV_FAN_SPEED",
        conv: PERCENT_TO_RATIO,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_GPU_UTIL_RATIO",
        id: 1613,
        since: "4.7.0",
        legacy_id: 203,
        legacy_name: "DCGM_FI_DEV_GPU_UTIL",
        conv: PERCENT_TO_RATIO,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_MEMORY_UTIL_RATIO",
        id: 1614,
        since: "4.7.0",
        legacy_id: 204,
        legacy_name: "DCGM_FI_DEV_MEM_COPY_UTIL",
        conv: PERCENT_TO_RATIO,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_ENC_UTIL_RATIO",
        id: 1615,
        since: "4.7.0",
        legacy_id: 206,
        legacy_name: "DCGM_FI_DEV_ENC_UTIL",
        conv: PERCENT_TO_RATIO,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_DEC_UTIL_RATIO",
        id: 1616,
        since: "4.7.0",
        legacy_id: 207,
        legacy_name: "DCGM_FI_DEV_DEC_UTIL",
        conv: PERCENT_TO_RATIO,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_FB_CAPACITY_BYTES",
        id: 1625,
        since: "4.7.0",
        legacy_id: 250,
        legacy_name: "DCGM_FI_DEV_FB_TOTAL",
        conv: MIB_TO_BYTES,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_FB_FREE_BYTES",
        id: 1626,
        since: "4.7.0",
        legacy_id: 251,
        legacy_name: "DCGM_FI_DEV_FB_FREE",
        conv: MIB_TO_BYTES,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_FB_USED_BYTES",
        id: 1627,
        since: "4.7.0",
        legacy_id: 252,
        legacy_name: "DCGM_FI_DEV_FB_USED",
        conv: MIB_TO_BYTES,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_FB_RESERVED_BYTES",
        id: 1628,
        since: "4.7.0",
        legacy_id: 253,
        legacy_name: "DCGM_FI_DEV_FB_RESERVED",
        conv: MIB_TO_BYTES,
    },
    BaseUnit {
        name: "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",
        id: 1648,
        since: "4.7.0",
        legacy_id: 449,
        legacy_name: "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        conv: MBPS_TO_BPS,
    },
];

impl BaseUnit {
    /// The legacy value in this metric's unit.
    pub fn convert(&self, legacy: f64) -> f64 {
        self.conv.op.apply(legacy)
    }

    /// DCGM 4.6's metadata of the legacy field.
    pub(crate) fn legacy_meta(&self) -> &'static FieldMeta {
        fields::by_id(self.legacy_id).expect("every legacy field is in the DCGM 4.6 table")
    }

    /// Our description of the base-unit field, used when the library has it.
    pub fn base_meta(&self) -> &'static FieldMeta {
        fields::base_unit_by_id(self.id).expect("every base-unit field is in BASE_UNIT_FIELDS")
    }
}

/// The base-unit metric named `name` (its 4.9.0 name).
pub fn by_name(name: &str) -> Option<&'static BaseUnit> {
    BASE_UNITS.iter().find(|b| b.name == name)
}

/// The base-unit metric of field `id`.
pub(crate) fn by_id(id: u16) -> Option<&'static BaseUnit> {
    BASE_UNITS.iter().find(|b| b.id == id)
}

/// The base-unit metric 4.9.0 exports instead of dcgm-exporter 4.8.x's `legacy_name`.
pub(crate) fn by_legacy_name(legacy_name: &str) -> Option<&'static BaseUnit> {
    BASE_UNITS.iter().find(|b| b.legacy_name == legacy_name)
}

/// Resolution of a CSV name or id that only names a base-unit metric.
pub fn resolve(name: &str) -> Option<(&'static BaseUnit, String)> {
    if let Some(b) = by_name(name) {
        return Some((b, name.to_string()));
    }
    let id: u16 = name
        .parse()
        .ok()
        .filter(|_| name.bytes().all(|c| c.is_ascii_digit()))?;
    by_id(id).map(|b| (b, b.name.to_string()))
}

/// A DCGM 4.6 field dcgm-exporter 4.10.0 exports under another name: same field id, same
/// unit, no conversion.
#[derive(Debug, PartialEq, Eq)]
pub struct Renamed {
    /// dcgm-exporter 4.10.0's name (DCGM 4.8's, by its release notes).
    pub name: &'static str,
    /// The field, in DCGM 4.6's `dcgm_fields.h` under `legacy_name`.
    pub id: u16,
    /// DCGM 4.6's name, which dcgm-exporter 4.9.0 and earlier export.
    pub legacy_name: &'static str,
}

/// dcgm-exporter 4.10.0's four renamed profiling metrics (bytes per second in both names).
/// The names rest on 4.10.0's release notes; that the ids are DCGM 4.6's 1009-1012 is our
/// reading of "same unit, the old names still parse" (DCGM 4.8's headers are not readable
/// here).
pub static RENAMED_4_10: &[Renamed] = &[
    Renamed {
        name: "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",
        id: 1009,
        legacy_name: "DCGM_FI_PROF_PCIE_TX_BYTES",
    },
    Renamed {
        name: "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",
        id: 1010,
        legacy_name: "DCGM_FI_PROF_PCIE_RX_BYTES",
    },
    Renamed {
        name: "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND",
        id: 1011,
        legacy_name: "DCGM_FI_PROF_NVLINK_TX_BYTES",
    },
    Renamed {
        name: "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND",
        id: 1012,
        legacy_name: "DCGM_FI_PROF_NVLINK_RX_BYTES",
    },
];

impl Renamed {
    /// DCGM 4.6's metadata of the field.
    pub fn meta(&self) -> &'static FieldMeta {
        fields::by_id(self.id).expect("every renamed field is in the DCGM 4.6 table")
    }
}

/// The 4.10.0 rename whose new name is `name`.
pub(crate) fn by_4_10_name(name: &str) -> Option<&'static Renamed> {
    RENAMED_4_10.iter().find(|r| r.name == name)
}

/// The 4.10.0 rename of DCGM 4.6's `legacy_name`.
pub(crate) fn by_4_10_legacy_name(legacy_name: &str) -> Option<&'static Renamed> {
    RENAMED_4_10.iter().find(|r| r.legacy_name == legacy_name)
}
