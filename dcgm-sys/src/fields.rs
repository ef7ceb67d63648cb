//! The DCGM 4.6.0 field table: every public `DCGM_FI_*` field with its metadata, the
//! deprecated aliases of dcgm_fields.h and dcgm-exporter's 1.x names. Generated at build
//! time from `fields/*.csv` (themselves generated from NVIDIA's sources by
//! `fields/gen_fields.py`).

/// Metadata of one field, as `dcgm_field_meta_t` describes it.
#[derive(Debug, PartialEq, Eq)]
pub struct FieldMeta {
    pub id: u16,
    /// The DCGM 4.6 name, e.g. `DCGM_FI_DEV_GPU_TEMP_CELSIUS`.
    pub name: &'static str,
    /// ASCII type: `b'i'` int64, `b'd'` double, `b's'` string, `b'b'` binary, `b't'` timestamp.
    pub field_type: u8,
    pub size: u8,
    pub tag: &'static str,
    pub scope: i32,
    pub nvml_field_id: i32,
    /// The `DCGM_FE_*` entity group the field belongs to.
    pub entity_level: u32,
    pub short_name: &'static str,
    pub unit: &'static str,
    pub width: i16,
}

include!(concat!(env!("OUT_DIR"), "/fields_table.rs"));

pub fn by_id(id: u16) -> Option<&'static FieldMeta> {
    FIELDS
        .binary_search_by_key(&id, |f| f.id)
        .ok()
        .map(|i| &FIELDS[i])
}

/// Exact, case-sensitive: a 4.6 name, then a deprecated alias or 1.x name.
pub fn by_name(name: &str) -> Option<&'static FieldMeta> {
    FIELDS.iter().find(|f| f.name == name).or_else(|| {
        let (_, canonical) = ALIASES.iter().find(|(a, _)| *a == name)?;
        FIELDS.iter().find(|f| f.name == *canonical)
    })
}

pub fn by_tag(tag: &str) -> Option<&'static FieldMeta> {
    FIELDS.iter().find(|f| f.tag == tag)
}

/// Names (canonical or alias) closest to `name`, for "did you mean" messages.
pub fn closest_names(name: &str, n: usize) -> Vec<&'static str> {
    let needle = name.to_ascii_lowercase();
    let mut scored: Vec<(usize, &'static str)> = FIELDS
        .iter()
        .map(|f| f.name)
        .chain(ALIASES.iter().map(|(a, _)| *a))
        .map(|cand| (edit_distance(&needle, &cand.to_ascii_lowercase()), cand))
        .collect();
    scored.sort();
    scored.dedup_by_key(|(_, c)| *c);
    scored.into_iter().take(n).map(|(_, c)| c).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// `DcgmFieldsGetEntityGroupString`.
pub fn entity_group_name(level: u32) -> &'static str {
    match level {
        1 => "GPU",
        2 => "vGPU",
        3 => "Switch",
        4 => "GPU_I",
        5 => "GPU_CI",
        6 => "LINK",
        7 => "CPU",
        8 => "CPU_CORE",
        9 => "ConnectX",
        _ => "None",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_4_6_table_is_there() {
        // 639 numeric defines minus DCGM_FI_DEV_NVLINK_GET_STATE, which has no metadata.
        assert_eq!(FIELDS.len(), 638);
        assert!(FIELDS.windows(2).all(|w| w[0].id < w[1].id));
        let t = by_id(150).unwrap();
        assert_eq!(
            (t.name, t.tag, t.field_type, t.entity_level),
            ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "gpu_temp", b'i', 1)
        );
        assert_eq!(by_id(155).unwrap().field_type, b'd');
        assert_eq!(
            (
                by_id(1001).unwrap().field_type,
                by_id(1001).unwrap().entity_level
            ),
            (b'd', 5)
        );
        assert_eq!(by_id(54).unwrap().field_type, b's');
        assert_eq!(by_id(1040).unwrap().tag, "nvlink_l0_tx_bytes");
        assert_eq!(by_id(1075).unwrap().tag, "nvlink_l17_rx_bytes");
        assert_eq!(by_id(1532).unwrap().entity_level, 6);
        assert_eq!(by_id(1533).unwrap().entity_level, 6);
        assert_eq!(by_id(1017).unwrap().tag, "nvdec0_active");
        assert!(by_id(1508).is_none());
        assert_eq!(by_tag("gpu_temp").unwrap().id, 150);
    }

    #[test]
    fn aliases_and_legacy_names_resolve() {
        assert_eq!(by_name("DCGM_FI_DEV_GPU_TEMP").unwrap().id, 150);
        assert_eq!(
            by_name("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL").unwrap().id,
            449
        );
        assert_eq!(by_name("DCGM_FI_DRIVER_VERSION").unwrap().id, 1);
        assert_eq!(
            by_name("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS").unwrap().id,
            112
        );
        assert_eq!(by_name("dcgm_gpu_temp").unwrap().id, 150);
        assert_eq!(by_name("dcgm_fi_prof_pcie_rx_bytes").unwrap().id, 1010);
        assert!(
            by_name("dcgm_GPU_TEMP").is_none(),
            "lookups are case-sensitive"
        );
    }

    #[test]
    fn suggestions_find_typos() {
        assert!(closest_names("DCGM_FI_DEV_GPU_TEMPP", 3).contains(&"DCGM_FI_DEV_GPU_TEMP"));
        assert_eq!(entity_group_name(3), "Switch");
    }
}
