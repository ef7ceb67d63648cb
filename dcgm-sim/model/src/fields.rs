//! DCGM's field table as this simulated DCGM knows it: DCGM 4.6.0's, plus the base-unit
//! fields of DCGM 4.6.1 and 4.7 (`dcgm_sys::fields::BASE_UNIT_FIELDS`) when the profile sets
//! `[node] base_unit_fields = true`, as a later library would; less the fields added after
//! the release the profile's `[node] dcgm_version` names (`dcgm_sys::releases`).

pub use dcgm_sys::fields::*;
use dcgm_sys::releases::{knows_field, Release, BINDINGS};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static BASE_UNITS: AtomicBool = AtomicBool::new(false);

/// The release whose fields this process's engine knows, as `major << 32 | minor << 16 |
/// patch`; set by each engine from its profile, like the base-unit fields.
static RELEASE: AtomicU64 = AtomicU64::new(encode(BINDINGS));

const fn encode(r: Release) -> u64 {
    (r.major as u64) << 32 | (r.minor as u64) << 16 | r.patch as u64
}

/// Set by each engine from its profile's `[node] dcgm_version`.
pub fn set_release(r: Release) {
    RELEASE.store(encode(r), Ordering::SeqCst);
}

/// The release this process's engine answers as.
pub fn release() -> Release {
    let v = RELEASE.load(Ordering::SeqCst);
    Release::new((v >> 32) as u16, (v >> 16) as u16, v as u16)
}

/// Set by each engine from its profile: the table is process-wide, as the real library's.
pub fn set_base_units(on: bool) {
    BASE_UNITS.store(on, Ordering::SeqCst);
}

pub fn base_units() -> bool {
    BASE_UNITS.load(Ordering::SeqCst)
}

/// The field with this id in the table this DCGM knows.
pub fn by_id(id: u16) -> Option<&'static FieldMeta> {
    if !knows_field(release(), id) {
        return None;
    }
    dcgm_sys::fields::by_id(id).or_else(|| base_units().then(|| base_unit_by_id(id)).flatten())
}

/// For a base-unit field: the legacy field it measures in other units and the factor from
/// that unit (DCGM computes both from the same NVML reading).
pub fn base_unit_source(id: u16) -> Option<(u16, f64)> {
    const MIB: f64 = 1_048_576.0;
    Some(match id {
        1600 => (90, MIB),
        1601 => (92, MIB),
        1602 => (93, MIB),
        1603 => (100, 1e6),
        1604 => (101, 1e6),
        1605 => (102, 1e6),
        1606 => (110, 1e6),
        1607 => (111, 1e6),
        1608 => (113, 1e6),
        1609 => (114, 1e6),
        1610 => (115, 1e6),
        1611 => (156, 1e-3),
        1612 => (191, 1e-2),
        1613 => (203, 1e-2),
        1614 => (204, 1e-2),
        1615 => (206, 1e-2),
        1616 => (207, 1e-2),
        1625 => (250, MIB),
        1626 => (251, MIB),
        1627 => (252, MIB),
        1628 => (253, MIB),
        1648 => (449, 1e6),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_base_unit_field_has_a_source() {
        for f in super::BASE_UNIT_FIELDS {
            let (legacy, _) = super::base_unit_source(f.id).expect("source");
            assert!(dcgm_sys::fields::by_id(legacy).is_some(), "{}", f.name);
        }
    }
}
