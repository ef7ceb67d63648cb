//! The table of dcgm-exporter 4.9.0's base-unit metrics (`config::rename` uses it to rename
//! counter sets; `config::counters` to resolve a CSV name): for each, the legacy DCGM 4.6
//! field that measures the same thing and the exact conversion. Imports no other config
//! module, so both can use it.

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

const HZ: &[&str] = &["", "Hz"];
const MHZ: &[&str] = &["", "MHz"];
const BYTES: &[&str] = &["", "B"];
const MIB: &[&str] = &["", "MiB", "MB"];
const RATIO: &[&str] = &[""];
const PCT: &[&str] = &["", "%"];
pub(super) const INT: &[u8] = b"i";
pub(super) const NUM: &[u8] = b"id";

macro_rules! base {
    ($name:literal, $id:literal, $since:literal, $lid:literal, $lname:literal, $from:literal,
     $to:literal, $op:ident, $ty:expr, $bu:expr, $lu:expr) => {
        BaseUnit {
            name: $name,
            id: $id,
            since: $since,
            legacy_id: $lid,
            legacy_name: $lname,
            from: $from,
            to: $to,
            op: Op::$op,
            base_type: $ty,
            base_units: $bu,
            legacy_units: $lu,
        }
    };
}

/// Every base-unit metric we serve. Ids 1600-1612: DCGM 4.6.1 (go-dcgm v1.4611's
/// `base_unit_fields_test.go` pairs each with its legacy field); the rest: DCGM 4.7 (release
/// notes and NVIDIA's field reference only).
pub static BASE_UNITS: &[BaseUnit] = &[
    base!(
        "DCGM_FI_DEV_BAR1_CAPACITY_BYTES",
        1600,
        "4.6.1",
        90,
        "DCGM_FI_DEV_BAR1_TOTAL",
        "MiB",
        "bytes",
        Mebi,
        NUM,
        BYTES,
        MIB
    ),
    base!(
        "DCGM_FI_DEV_BAR1_USED_BYTES",
        1601,
        "4.6.1",
        92,
        "DCGM_FI_DEV_BAR1_USED",
        "MiB",
        "bytes",
        Mebi,
        NUM,
        BYTES,
        MIB
    ),
    base!(
        "DCGM_FI_DEV_BAR1_FREE_BYTES",
        1602,
        "4.6.1",
        93,
        "DCGM_FI_DEV_BAR1_FREE",
        "MiB",
        "bytes",
        Mebi,
        NUM,
        BYTES,
        MIB
    ),
    base!(
        "DCGM_FI_DEV_SM_CLOCK_HERTZ",
        1603,
        "4.6.1",
        100,
        "DCGM_FI_DEV_SM_CLOCK",
        "MHz",
        "Hz",
        Mega,
        NUM,
        HZ,
        MHZ
    ),
    base!(
        "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ",
        1604,
        "4.6.1",
        101,
        "DCGM_FI_DEV_MEM_CLOCK",
        "MHz",
        "Hz",
        Mega,
        NUM,
        HZ,
        MHZ
    ),
    base!(
        "DCGM_FI_DEV_VIDEO_CLOCK_HERTZ",
        1605,
        "4.6.1",
        102,
        "DCGM_FI_DEV_VIDEO_CLOCK",
        "MHz",
        "Hz",
        Mega,
        NUM,
        HZ,
        MHZ
    ),
    base!(
        "DCGM_FI_DEV_SM_APP_CLOCK_HERTZ",
        1606,
        "4.6.1",
        110,
        "DCGM_FI_DEV_APP_SM_CLOCK",
        "MHz",
        "Hz",
        Mega,
        NUM,
        HZ,
        MHZ
    ),
    base!(
        "DCGM_FI_DEV_MEMORY_APP_CLOCK_HERTZ",
        1607,
        "4.6.1",
        111,
        "DCGM_FI_DEV_APP_MEM_CLOCK",
        "MHz",
        "Hz",
        Mega,
        NUM,
        HZ,
        MHZ
    ),
    base!(
        "DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ",
        1608,
        "4.6.1",
        113,
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "MHz",
        "Hz",
        Mega,
        NUM,
        HZ,
        MHZ
    ),
    base!(
        "DCGM_FI_DEV_MEMORY_MAX_CLOCK_HERTZ",
        1609,
        "4.6.1",
        114,
        "DCGM_FI_DEV_MAX_MEM_CLOCK",
        "MHz",
        "Hz",
        Mega,
        NUM,
        HZ,
        MHZ
    ),
    base!(
        "DCGM_FI_DEV_VIDEO_MAX_CLOCK_HERTZ",
        1610,
        "4.6.1",
        115,
        "DCGM_FI_DEV_MAX_VIDEO_CLOCK",
        "MHz",
        "Hz",
        Mega,
        NUM,
        HZ,
        MHZ
    ),
    base!(
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
        1611,
        "4.6.1",
        156,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "mJ",
        "J",
        Milli,
        NUM,
        &["", "J"],
        &["", "mJ"]
    ),
    base!(
        "DCGM_FI_DEV_FAN_SPEED_RATIO",
        1612,
        "4.6.1",
        191,
        "DCGM_FI_DEV_FAN_SPEED",
        "%",
        "ratio",
        Percent,
        b"d",
        RATIO,
        PCT
    ),
    base!(
        "DCGM_FI_DEV_GPU_UTIL_RATIO",
        1613,
        "4.7.0",
        203,
        "DCGM_FI_DEV_GPU_UTIL",
        "%",
        "ratio",
        Percent,
        b"d",
        RATIO,
        PCT
    ),
    base!(
        "DCGM_FI_DEV_MEMORY_UTIL_RATIO",
        1614,
        "4.7.0",
        204,
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "%",
        "ratio",
        Percent,
        b"d",
        RATIO,
        PCT
    ),
    base!(
        "DCGM_FI_DEV_ENC_UTIL_RATIO",
        1615,
        "4.7.0",
        206,
        "DCGM_FI_DEV_ENC_UTIL",
        "%",
        "ratio",
        Percent,
        b"d",
        RATIO,
        PCT
    ),
    base!(
        "DCGM_FI_DEV_DEC_UTIL_RATIO",
        1616,
        "4.7.0",
        207,
        "DCGM_FI_DEV_DEC_UTIL",
        "%",
        "ratio",
        Percent,
        b"d",
        RATIO,
        PCT
    ),
    base!(
        "DCGM_FI_DEV_FB_CAPACITY_BYTES",
        1625,
        "4.7.0",
        250,
        "DCGM_FI_DEV_FB_TOTAL",
        "MiB",
        "bytes",
        Mebi,
        NUM,
        BYTES,
        MIB
    ),
    base!(
        "DCGM_FI_DEV_FB_FREE_BYTES",
        1626,
        "4.7.0",
        251,
        "DCGM_FI_DEV_FB_FREE",
        "MiB",
        "bytes",
        Mebi,
        NUM,
        BYTES,
        MIB
    ),
    base!(
        "DCGM_FI_DEV_FB_USED_BYTES",
        1627,
        "4.7.0",
        252,
        "DCGM_FI_DEV_FB_USED",
        "MiB",
        "bytes",
        Mebi,
        NUM,
        BYTES,
        MIB
    ),
    base!(
        "DCGM_FI_DEV_FB_RESERVED_BYTES",
        1628,
        "4.7.0",
        253,
        "DCGM_FI_DEV_FB_RESERVED",
        "MiB",
        "bytes",
        Mebi,
        NUM,
        BYTES,
        MIB
    ),
    base!(
        "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",
        1648,
        "4.7.0",
        449,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "MB/s",
        "bytes/s",
        Mega,
        INT,
        &["", "B/s"],
        &["", "MB/s"]
    ),
];

impl BaseUnit {
    /// The legacy value in this metric's unit.
    pub fn convert(&self, legacy: f64) -> f64 {
        self.op.apply(legacy)
    }

    /// DCGM 4.6's metadata of the legacy field.
    pub fn legacy_meta(&self) -> &'static FieldMeta {
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
pub fn by_id(id: u16) -> Option<&'static BaseUnit> {
    BASE_UNITS.iter().find(|b| b.id == id)
}

/// The base-unit metric 4.9.0 exports instead of dcgm-exporter 4.8.x's `legacy_name`.
pub fn by_legacy_name(legacy_name: &str) -> Option<&'static BaseUnit> {
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
