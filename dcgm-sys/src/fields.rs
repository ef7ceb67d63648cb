//! The DCGM 4.6.0 field table: every public `DCGM_FI_*` field with the metadata
//! `DcgmFieldGetById` reports, the deprecated names DCGM and go-dcgm still accept, and
//! dcgm-exporter's 1.x lowercase names.
//!
//! The data comes from `fields/fields-4.6.0.csv` and `fields/aliases-4.6.0.csv` (generated
//! from NVIDIA's sources by `fields/gen_fields.py`) and is compiled in by `build.rs`.

/// Metadata of one field, as DCGM's `dcgm_field_meta_t` describes it.
#[derive(Debug, PartialEq, Eq)]
pub struct FieldMeta {
    pub id: u16,
    /// The DCGM 4.6 name, e.g. `DCGM_FI_DEV_GPU_TEMP_CELSIUS`.
    pub name: &'static str,
    /// `DCGM_FT_*` as its ASCII code: `b'i'` int64, `b'd'` double, `b's'` string,
    /// `b'b'` binary blob, `b't'` timestamp.
    pub field_type: u8,
    /// Raw value size in bytes; 0 means variable or unspecified.
    pub size: u8,
    /// Unique lower-case tag, e.g. `gpu_temp` (what `DcgmFieldGetByTag` takes).
    pub tag: &'static str,
    /// `DCGM_FS_GLOBAL` (0) or `DCGM_FS_ENTITY` (1).
    pub scope: i32,
    /// The NVML field id DCGM reads this from, 0 when it does not use NVML's field API.
    pub nvml_field_id: i32,
    /// The `DCGM_FE_*` entity group the field is read on (see [`entity_group_name`]).
    pub entity_level: u32,
    /// dcgmi dmon column title.
    pub short_name: &'static str,
    /// dcgmi dmon unit suffix (e.g. `" C"`, `" W"`, `"KB/s"`); often empty.
    pub unit: &'static str,
    /// dcgmi dmon column width.
    pub width: i16,
}

// Defines FIELDS, ALIASES, NAME_INDEX and TAG_INDEX (the last two sorted by key, holding
// indexes into FIELDS).
include!(concat!(env!("OUT_DIR"), "/fields_table.rs"));

fn lookup(index: &'static [(&'static str, usize)], key: &str) -> Option<&'static FieldMeta> {
    let pos = index.binary_search_by(|(k, _)| (*k).cmp(key)).ok()?;
    FIELDS.get(index[pos].1)
}

/// The field with this id, if DCGM 4.6 has one.
pub fn by_id(id: u16) -> Option<&'static FieldMeta> {
    FIELDS
        .binary_search_by_key(&id, |f| f.id)
        .ok()
        .and_then(|i| FIELDS.get(i))
}

/// Exact, case-sensitive lookup of a DCGM 4.6 name, a deprecated DCGM or go-dcgm name, or a
/// dcgm-exporter 1.x name (`dcgm_gpu_temp`). Canonical names and aliases never collide (the
/// build checks it), so one index serves both.
pub fn by_name(name: &str) -> Option<&'static FieldMeta> {
    lookup(NAME_INDEX, name)
}

/// The field with this tag (`gpu_temp`, `nvlink_l0_tx_bytes`, ...).
pub fn by_tag(tag: &str) -> Option<&'static FieldMeta> {
    lookup(TAG_INDEX, tag)
}

/// Up to `n` canonical or alias names closest to `name` by edit distance, ignoring case;
/// ties are broken alphabetically. Meant for "did you mean" hints.
pub fn closest_names(name: &str, n: usize) -> Vec<&'static str> {
    if n == 0 {
        return Vec::new();
    }
    let needle: Vec<char> = name.to_ascii_lowercase().chars().collect();
    let mut row = Vec::new();
    // The best `n` so far, by (distance, name). NAME_INDEX is in name order, so a later
    // candidate only enters with a strictly smaller distance than the worst kept: that
    // bound lets most candidates stop after a few characters.
    let mut best: Vec<(usize, &'static str)> = Vec::with_capacity(n + 1);
    for (cand, _) in NAME_INDEX {
        let bound = match best.get(n - 1) {
            Some((0, _)) => break,
            Some((worst, _)) => worst - 1,
            None => usize::MAX,
        };
        if let Some(d) = edit_distance_within(&needle, cand, bound, &mut row) {
            let at = best.partition_point(|&(bd, bn)| (bd, bn) <= (d, *cand));
            best.insert(at, (d, *cand));
            best.truncate(n);
        }
    }
    best.into_iter().map(|(_, c)| c).collect()
}

/// Levenshtein distance between `a` (already lower-case) and `b` compared case-insensitively,
/// or `None` once it is sure to exceed `bound`; `row` is scratch space reused across calls.
fn edit_distance_within(a: &[char], b: &str, bound: usize, row: &mut Vec<usize>) -> Option<usize> {
    if a.len().abs_diff(b.chars().count()) > bound {
        return None;
    }
    row.clear();
    row.extend(0..=a.len());
    for (j, cb) in b.chars().enumerate() {
        let cb = cb.to_ascii_lowercase();
        // `diag` is the distance for the prefixes one shorter in both strings.
        let mut diag = row[0];
        row[0] = j + 1;
        let mut row_min = row[0];
        for (i, ca) in a.iter().enumerate() {
            let subst = diag + usize::from(*ca != cb);
            diag = row[i + 1];
            row[i + 1] = subst.min(row[i + 1] + 1).min(row[i] + 1);
            row_min = row_min.min(row[i + 1]);
        }
        // Distances never fall below a row's minimum further down.
        if row_min > bound {
            return None;
        }
    }
    Some(row[a.len()]).filter(|&d| d <= bound)
}

/// Base-unit fields DCGM added after 4.6.0, which [`FIELDS`] (DCGM 4.6.0) lacks: ids
/// 1600-1612 from DCGM 4.6.1 (go-dcgm v1.4611, `pkg/dcgm/const_fields.go` and its
/// `base_unit_fields_test.go`), the utilisation ratios, framebuffer bytes and NVLink
/// bytes/s from DCGM 4.7 (ids from NVIDIA's release notes and field reference only: no DCGM
/// 4.7 source could be read). Each keeps the entity level of the field it gives in base
/// units. Tags, short names, units and sizes are ours: what a library reports for them is
/// asked at run time (`Library::field_meta`), never taken from here. The simulator serves
/// these when a profile asks for a later DCGM's table.
pub static BASE_UNIT_FIELDS: &[FieldMeta] = &[
    FieldMeta {
        id: 1600,
        name: "DCGM_FI_DEV_BAR1_CAPACITY_BYTES",
        field_type: b'i',
        size: 8,
        tag: "bar1_capacity_bytes",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 5,
        short_name: "B1CAP",
        unit: "B",
        width: 10,
    },
    FieldMeta {
        id: 1601,
        name: "DCGM_FI_DEV_BAR1_USED_BYTES",
        field_type: b'i',
        size: 8,
        tag: "bar1_used_bytes",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 5,
        short_name: "B1USB",
        unit: "B",
        width: 10,
    },
    FieldMeta {
        id: 1602,
        name: "DCGM_FI_DEV_BAR1_FREE_BYTES",
        field_type: b'i',
        size: 8,
        tag: "bar1_free_bytes",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 5,
        short_name: "B1FRB",
        unit: "B",
        width: 10,
    },
    FieldMeta {
        id: 1603,
        name: "DCGM_FI_DEV_SM_CLOCK_HERTZ",
        field_type: b'i',
        size: 8,
        tag: "sm_clock_hertz",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "SMCHZ",
        unit: "Hz",
        width: 10,
    },
    FieldMeta {
        id: 1604,
        name: "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ",
        field_type: b'i',
        size: 8,
        tag: "memory_clock_hertz",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "MMCHZ",
        unit: "Hz",
        width: 10,
    },
    FieldMeta {
        id: 1605,
        name: "DCGM_FI_DEV_VIDEO_CLOCK_HERTZ",
        field_type: b'i',
        size: 8,
        tag: "video_clock_hertz",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "VICHZ",
        unit: "Hz",
        width: 10,
    },
    FieldMeta {
        id: 1606,
        name: "DCGM_FI_DEV_SM_APP_CLOCK_HERTZ",
        field_type: b'i',
        size: 8,
        tag: "sm_app_clock_hertz",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "SACHZ",
        unit: "Hz",
        width: 10,
    },
    FieldMeta {
        id: 1607,
        name: "DCGM_FI_DEV_MEMORY_APP_CLOCK_HERTZ",
        field_type: b'i',
        size: 8,
        tag: "memory_app_clock_hertz",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "MACHZ",
        unit: "Hz",
        width: 10,
    },
    FieldMeta {
        id: 1608,
        name: "DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ",
        field_type: b'i',
        size: 8,
        tag: "sm_max_clock_hertz",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "SMMHZ",
        unit: "Hz",
        width: 10,
    },
    FieldMeta {
        id: 1609,
        name: "DCGM_FI_DEV_MEMORY_MAX_CLOCK_HERTZ",
        field_type: b'i',
        size: 8,
        tag: "memory_max_clock_hertz",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "MMMHZ",
        unit: "Hz",
        width: 10,
    },
    FieldMeta {
        id: 1610,
        name: "DCGM_FI_DEV_VIDEO_MAX_CLOCK_HERTZ",
        field_type: b'i',
        size: 8,
        tag: "video_max_clock_hertz",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "VIMHZ",
        unit: "Hz",
        width: 10,
    },
    FieldMeta {
        id: 1611,
        name: "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
        field_type: b'i',
        size: 8,
        tag: "gpu_energy_joules_total",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "ENRGJ",
        unit: "J",
        width: 10,
    },
    FieldMeta {
        id: 1612,
        name: "DCGM_FI_DEV_FAN_SPEED_RATIO",
        field_type: b'd',
        size: 8,
        tag: "fan_speed_ratio",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "FANSR",
        unit: "",
        width: 10,
    },
    FieldMeta {
        id: 1613,
        name: "DCGM_FI_DEV_GPU_UTIL_RATIO",
        field_type: b'd',
        size: 8,
        tag: "gpu_util_ratio",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "GPUTR",
        unit: "",
        width: 10,
    },
    FieldMeta {
        id: 1614,
        name: "DCGM_FI_DEV_MEMORY_UTIL_RATIO",
        field_type: b'd',
        size: 8,
        tag: "memory_util_ratio",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "MCUTR",
        unit: "",
        width: 10,
    },
    FieldMeta {
        id: 1615,
        name: "DCGM_FI_DEV_ENC_UTIL_RATIO",
        field_type: b'd',
        size: 8,
        tag: "enc_util_ratio",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "ECUTR",
        unit: "",
        width: 10,
    },
    FieldMeta {
        id: 1616,
        name: "DCGM_FI_DEV_DEC_UTIL_RATIO",
        field_type: b'd',
        size: 8,
        tag: "dec_util_ratio",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "DCUTR",
        unit: "",
        width: 10,
    },
    FieldMeta {
        id: 1625,
        name: "DCGM_FI_DEV_FB_CAPACITY_BYTES",
        field_type: b'i',
        size: 8,
        tag: "fb_capacity_bytes",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 5,
        short_name: "FBCAP",
        unit: "B",
        width: 10,
    },
    FieldMeta {
        id: 1626,
        name: "DCGM_FI_DEV_FB_FREE_BYTES",
        field_type: b'i',
        size: 8,
        tag: "fb_free_bytes",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 5,
        short_name: "FBFRB",
        unit: "B",
        width: 10,
    },
    FieldMeta {
        id: 1627,
        name: "DCGM_FI_DEV_FB_USED_BYTES",
        field_type: b'i',
        size: 8,
        tag: "fb_used_bytes",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 5,
        short_name: "FBUSB",
        unit: "B",
        width: 10,
    },
    FieldMeta {
        id: 1628,
        name: "DCGM_FI_DEV_FB_RESERVED_BYTES",
        field_type: b'i',
        size: 8,
        tag: "fb_reserved_bytes",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 5,
        short_name: "FBRSB",
        unit: "B",
        width: 10,
    },
    FieldMeta {
        id: 1648,
        name: "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",
        field_type: b'i',
        size: 8,
        tag: "nvlink_throughput_bytes_per_second",
        scope: 1,
        nvml_field_id: 0,
        entity_level: 1,
        short_name: "NVLBS",
        unit: "B/s",
        width: 10,
    },
];

/// A field of [`BASE_UNIT_FIELDS`] by id.
pub fn base_unit_by_id(id: u16) -> Option<&'static FieldMeta> {
    BASE_UNIT_FIELDS.iter().find(|f| f.id == id)
}

/// The name DCGM gives an entity group (`DcgmFieldsGetEntityGroupString`); "None" for
/// `DCGM_FE_NONE` and for unknown values, as there.
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

    fn field(id: u16) -> &'static FieldMeta {
        by_id(id).unwrap_or_else(|| panic!("field {id} missing"))
    }

    #[test]
    fn table_has_every_4_6_field_once_in_id_order() {
        // 648 numeric DCGM_FI_* defines in dcgm_fields.h minus 9 range markers.
        assert_eq!(FIELDS.len(), 639);
        assert!(FIELDS.windows(2).all(|w| w[0].id < w[1].id));
        assert_eq!(FIELDS.first().map(|f| f.id), Some(1));
        assert_eq!(FIELDS.last().map(|f| f.id), Some(1533));
        assert!(FIELDS.iter().all(|f| b"idsbt".contains(&f.field_type)));
        assert!(FIELDS.iter().all(|f| f.entity_level <= 9));
        // Range markers and DCGM-internal ids are not fields (520 and 1300 start a range and
        // are also real fields).
        assert_eq!(field(520).name, "DCGM_FI_DEV_VGPU_VM_ID");
        assert_eq!(field(1300).name, "DCGM_FI_DEV_CONNECTX_HEALTH");
        for id in [0, 210, 211, 220, 221, 570, 600, 699, 700, 899, 1399, 1534] {
            assert!(by_id(id).is_none(), "{id}");
        }
        for name in [
            "DCGM_FI_UNKNOWN",
            "DCGM_FI_MAX_FIELDS",
            "DCGM_FI_FIRST_VGPU_FIELD_ID",
        ] {
            assert!(by_name(name).is_none(), "{name}");
        }
    }

    #[test]
    fn spot_checks_against_dcgm_fields_cpp() {
        let t = field(150);
        assert_eq!(
            (t.name, t.tag, t.field_type, t.entity_level, t.size, t.unit),
            ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "gpu_temp", b'i', 1, 8, " C")
        );
        assert_eq!(entity_group_name(t.entity_level), "GPU");
        assert_eq!(field(155).field_type, b'd');
        assert_eq!(field(155).name, "DCGM_FI_DEV_BOARD_POWER_WATTS");
        let g = field(1001);
        assert_eq!((g.field_type, g.entity_level), (b'd', 5));
        assert_eq!(entity_group_name(g.entity_level), "GPU_CI");
        assert_eq!((field(54).field_type, field(54).tag), (b's', "uuid"));
        assert_eq!(field(1).scope, 0);
        assert_eq!(field(1).entity_level, 0);
        // The NVLink profiling loop: TX at even offsets, RX at odd, INT64 on the GPU.
        let l0 = field(1040);
        assert_eq!(
            (
                l0.name,
                l0.tag,
                l0.field_type,
                l0.entity_level,
                l0.short_name
            ),
            (
                "DCGM_FI_PROF_NVLINK_L0_TX_BYTES",
                "nvlink_l0_tx_bytes",
                b'i',
                1,
                "NVL0T"
            )
        );
        assert_eq!(field(1075).tag, "nvlink_l17_rx_bytes");
        // The NVDEC/NVJPG loops.
        assert_eq!(
            (field(1017).tag, field(1017).field_type),
            ("nvdec0_active", b'd')
        );
        assert_eq!(field(1032).tag, "nvjpg7_active");
        // Per-link fields of 4.6 live on DCGM_FE_LINK.
        assert_eq!(field(1532).entity_level, 6);
        assert_eq!(field(1533).entity_level, 6);
        assert_eq!(entity_group_name(field(1533).entity_level), "LINK");
        // Its metadata call has its first argument on a line of its own.
        assert_eq!(
            (field(1508).tag, field(1508).entity_level),
            ("nvlink_state", 6)
        );
        // NVML field ids are resolved from NVML_FI_* names (NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION).
        assert_eq!(field(156).nvml_field_id, 83);
        assert_eq!(field(526).entity_level, 2);
    }

    #[test]
    fn tags_resolve() {
        assert_eq!(by_tag("gpu_temp").map(|f| f.id), Some(150));
        assert_eq!(by_tag("nvlink_throughput_total").map(|f| f.id), Some(449));
        assert!(by_tag("GPU_TEMP").is_none());
        assert!(by_tag("").is_none());
        // Every tag finds its own field.
        assert!(FIELDS.iter().all(|f| by_tag(f.tag) == Some(f)));
        assert!(FIELDS.iter().all(|f| by_name(f.name) == Some(f)));
    }

    #[test]
    fn aliases_and_legacy_names_resolve() {
        let id = |n: &str| by_name(n).map(|f| f.id);
        assert_eq!(id("DCGM_FI_DEV_GPU_TEMP_CELSIUS"), Some(150));
        assert_eq!(id("DCGM_FI_DEV_GPU_TEMP"), Some(150));
        assert_eq!(id("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"), Some(449));
        assert_eq!(id("DCGM_FI_DEV_NVLINK_BANDWIDTH_L0"), Some(440));
        assert_eq!(id("DCGM_FI_DRIVER_VERSION"), Some(1));
        assert_eq!(id("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"), Some(112));
        assert_eq!(id("DCGM_FI_DEV_OEM_INFOROM_VER"), Some(56));
        assert_eq!(id("dcgm_gpu_temp"), Some(150));
        assert_eq!(id("dcgm_fi_prof_pcie_rx_bytes"), Some(1010));
        // A go-dcgm 4.6.1 rename of a field DCGM 4.6.0 already has.
        assert_eq!(
            id("DCGM_FI_DEV_CPU_UTIL_RATIO"),
            by_name("DCGM_FI_DEV_CPU_UTIL_TOTAL").map(|f| f.id)
        );
        // Lookups are exact.
        assert!(by_name("dcgm_GPU_TEMP").is_none());
        assert!(by_name("DCGM_FI_DEV_GPU_TEMP ").is_none());
        assert!(by_name("").is_none());
        // Every alias points at a canonical name, and none shadows one.
        for (alias, canonical) in ALIASES {
            let f = by_name(canonical).unwrap_or_else(|| panic!("{alias} -> {canonical}"));
            assert_eq!(f.name, *canonical);
            assert_eq!(by_name(alias), Some(f));
        }
    }

    #[test]
    fn closest_names_suggests_near_misses() {
        let near = closest_names("DCGM_FI_DEV_GPU_TEMPP", 3);
        assert_eq!(near.len(), 3);
        assert_eq!(near[0], "DCGM_FI_DEV_GPU_TEMP");
        assert_eq!(
            closest_names("dcgm_fi_dev_gpu_temp_celsius", 1),
            ["DCGM_FI_DEV_GPU_TEMP_CELSIUS"]
        );
        assert_eq!(closest_names("dcgm_gpu_tmp", 1), ["dcgm_gpu_temp"]);
        assert!(closest_names("x", 0).is_empty());
        assert_eq!(closest_names("", 5).len(), 5);
    }

    #[test]
    fn edit_distance_is_levenshtein() {
        let mut row = Vec::new();
        let d = |a: &str, b: &str, bound: usize, row: &mut Vec<usize>| {
            edit_distance_within(&a.chars().collect::<Vec<_>>(), b, bound, row)
        };
        assert_eq!(d("kitten", "sitting", 9, &mut row), Some(3));
        assert_eq!(d("kitten", "sitting", 3, &mut row), Some(3));
        assert_eq!(d("kitten", "sitting", 2, &mut row), None);
        assert_eq!(d("", "abc", 9, &mut row), Some(3));
        assert_eq!(d("abc", "", 9, &mut row), Some(3));
        assert_eq!(d("abc", "ABC", 0, &mut row), Some(0));
        assert_eq!(d("a", "abcdef", 4, &mut row), None);
    }

    #[test]
    fn the_bounded_search_ranks_like_a_full_sort() {
        let mut row = Vec::new();
        for name in [
            "DCGM_FI_DEV_GPU_TEMPP",
            "dcgm_gpu_tmp",
            "x",
            "",
            "NVLINK_BW",
            "150",
        ] {
            let needle: Vec<char> = name.to_ascii_lowercase().chars().collect();
            let mut all: Vec<(usize, &str)> = NAME_INDEX
                .iter()
                .map(|(c, _)| {
                    let d = edit_distance_within(&needle, c, usize::MAX, &mut row).unwrap();
                    (d, *c)
                })
                .collect();
            all.sort_unstable();
            let want: Vec<&str> = all.iter().take(4).map(|(_, c)| *c).collect();
            assert_eq!(closest_names(name, 4), want, "{name}");
        }
    }

    #[test]
    fn entity_group_names_match_dcgm() {
        let names: Vec<_> = (0..=10).map(entity_group_name).collect();
        assert_eq!(
            names,
            [
                "None", "GPU", "vGPU", "Switch", "GPU_I", "GPU_CI", "LINK", "CPU", "CPU_CORE",
                "ConnectX", "None"
            ]
        );
    }
}
