//! More than 128 fields in one CSV (upstream 4.8.4: "Support metric configurations containing
//! more than 128 DCGM fields by batching reads and splitting oversized field groups"; DCGM
//! refuses a field group of 128 or more).

use crate::support::*;
use std::collections::BTreeSet;

#[test]
fn a_csv_of_more_than_128_gpu_fields_is_watched_and_read_whole() {
    let fields: Vec<&str> = dcgm_sys::fields::FIELDS
        .iter()
        .filter(|f| {
            f.entity_level == 1
                && (f.field_type == b'i' || f.field_type == b'd')
                && !f.name.starts_with("DCGM_FI_PROF_")
        })
        .map(|f| f.name)
        .take(200)
        .collect();
    assert!(fields.len() > 128, "only {} GPU fields", fields.len());
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("many.csv");
    let body: String = fields
        .iter()
        .map(|f| format!("{f}, gauge, {f}\n"))
        .collect();
    std::fs::write(&csv, body).unwrap();
    let e = exporter()
        .profile("one-gpu.toml")
        .args(&["-f", csv.to_str().unwrap()])
        .start();
    let page = e.scrape_until(20, |p| {
        p.iter()
            .filter(|s| s.name.starts_with("DCGM_FI_"))
            .map(|s| s.name.as_str())
            .collect::<BTreeSet<_>>()
            .len()
            > 128
    });
    let families: BTreeSet<&str> = page
        .iter()
        .filter(|s| s.name.starts_with("DCGM_FI_"))
        .map(|s| s.name.as_str())
        .collect();
    // Fields from the first field group (127 fields) and from the next one.
    let seen = |part: &[&str]| part.iter().filter(|f| families.contains(*f)).count();
    assert!(
        seen(&fields[..127]) > 100 && seen(&fields[127..]) > 0,
        "{} / {}",
        seen(&fields[..127]),
        seen(&fields[127..])
    );
    assert!(!e.stderr().contains("panicked"));
}
