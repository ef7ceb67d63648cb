//! Field metadata exports: `DcgmFieldsInit`, `DcgmFieldGetById`, `DcgmFieldGetByTag`, ...
//!
//! The C table is built once from `dcgm_sys::fields::FIELDS` and leaked, so the pointers
//! handed out stay valid for the life of the process — longer than the real library
//! promises (until `DcgmFieldsTerm`), which is harmless and protects callers such as the
//! Python bindings that keep them. `DcgmFieldsTerm` only hides the table again.

use super::put_str;
use dcgm_sys::ffi::{
    dcgm_field_entity_group_t, dcgm_field_meta_t, dcgm_field_output_format_t, DCGM_FI_MAX_FIELDS,
};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::panic::catch_unwind;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

struct Table {
    metas: &'static [dcgm_field_meta_t],
    /// Index into `metas` by field id; `u16::MAX` where the id has no field.
    by_id: Vec<u16>,
    by_tag: HashMap<&'static str, u16>,
}

// SAFETY: the table is never mutated after construction. The only non-Sync members are the
// `valueFormat` pointers, which point into a leaked, likewise immutable array.
unsafe impl Sync for Table {}
// SAFETY: as above; nothing in the table is tied to the creating thread.
unsafe impl Send for Table {}

static TABLE: OnceLock<Table> = OnceLock::new();
static INITIALIZED: AtomicBool = AtomicBool::new(false);

fn table() -> &'static Table {
    TABLE.get_or_init(|| {
        // DCGM 4.6.0's fields, then the later base-unit ones (shown only when enabled).
        let src: Vec<&'static dcgm_sys::fields::FieldMeta> = dcgm_sys::fields::FIELDS
            .iter()
            .chain(dcgm_sys::fields::BASE_UNIT_FIELDS)
            .collect();
        let formats: &'static mut [dcgm_field_output_format_t] = Box::leak(
            src.iter()
                .map(|f| {
                    let mut o = dcgm_field_output_format_t {
                        shortName: [0; 10],
                        unit: [0; 4],
                        width: f.width,
                    };
                    put_str(&mut o.shortName, f.short_name);
                    put_str(&mut o.unit, f.unit);
                    o
                })
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let format_ptr = formats.as_mut_ptr();
        let metas: &'static [dcgm_field_meta_t] = Box::leak(
            src.iter()
                .enumerate()
                .map(|(i, f)| {
                    let mut m = dcgm_field_meta_t {
                        fieldId: f.id,
                        fieldType: f.field_type as c_char,
                        size: f.size,
                        tag: [0; 48],
                        scope: f.scope,
                        nvmlFieldId: f.nvml_field_id,
                        entityLevel: f.entity_level,
                        // `i` indexes `formats`, which has one entry per field.
                        valueFormat: format_ptr.wrapping_add(i),
                    };
                    put_str(&mut m.tag, f.tag);
                    m
                })
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let len = src.iter().map(|f| usize::from(f.id) + 1).max().unwrap_or(0);
        let mut by_id = vec![u16::MAX; len.max(DCGM_FI_MAX_FIELDS as usize)];
        let mut by_tag = HashMap::new();
        for (i, f) in src.iter().enumerate() {
            if let Some(slot) = by_id.get_mut(usize::from(f.id)) {
                *slot = i as u16;
            }
            by_tag.entry(f.tag).or_insert(i as u16);
        }
        Table {
            metas,
            by_id,
            by_tag,
        }
    })
}

/// Marks the table usable (building it on first use), like the real `DcgmFieldsInit`.
pub(crate) fn init() {
    table();
    INITIALIZED.store(true, Ordering::SeqCst);
}

pub(crate) fn term() {
    INITIALIZED.store(false, Ordering::SeqCst);
}

fn meta_by_id(id: u16) -> *const dcgm_field_meta_t {
    if !INITIALIZED.load(Ordering::SeqCst) {
        return ptr::null();
    }
    let t = table();
    match t.by_id.get(usize::from(id)) {
        Some(&i) if i != u16::MAX && shown(id) => &t.metas[usize::from(i)],
        _ => ptr::null(),
    }
}

/// DCGM 4.6.0's fields (less those after the library's release); the later base-unit fields
/// when this process's engine or the profile named by `DCGM_SIM_PROFILE` (a remote client's
/// view of its library) enables them.
fn shown(id: u16) -> bool {
    static FROM_ENV: OnceLock<bool> = OnceLock::new();
    // A library of an older release (`[node] dcgm_version`) lacks the fields added since.
    if !dcgm_sys::releases::knows_field(super::lifecycle::library_release(), id) {
        return false;
    }
    dcgm_sys::fields::by_id(id).is_some()
        || crate::engine::fields::base_units()
        || *FROM_ENV.get_or_init(|| {
            std::env::var_os("DCGM_SIM_PROFILE")
                .filter(|p| !p.is_empty())
                .and_then(|p| crate::engine::profile::Profile::load(std::path::Path::new(&p)).ok())
                .is_some_and(|p| p.node.base_unit_fields)
        })
}

/// `int DcgmFieldsInit(void)`: 0, also when already initialised.
#[no_mangle]
pub extern "C" fn DcgmFieldsInit() -> c_int {
    catch_unwind(|| {
        init();
        0
    })
    .unwrap_or(-1)
}

/// `int DcgmFieldsTerm(void)`: 0.
#[no_mangle]
pub extern "C" fn DcgmFieldsTerm() -> c_int {
    term();
    0
}

/// `dcgm_field_meta_p DcgmFieldGetById(unsigned short)`: NULL before `DcgmFieldsInit`
/// and for ids without a field.
#[no_mangle]
pub extern "C" fn DcgmFieldGetById(field_id: u16) -> *const dcgm_field_meta_t {
    catch_unwind(|| meta_by_id(field_id)).unwrap_or(ptr::null())
}

/// `dcgm_field_meta_p DcgmFieldGetByTag(const char *)`: exact tag match or NULL.
#[no_mangle]
pub unsafe extern "C" fn DcgmFieldGetByTag(tag: *const c_char) -> *const dcgm_field_meta_t {
    if tag.is_null() || !INITIALIZED.load(Ordering::SeqCst) {
        return ptr::null();
    }
    // SAFETY: non-NULL, and the API requires a NUL-terminated string.
    let tag = unsafe { CStr::from_ptr(tag) };
    catch_unwind(|| {
        let t = table();
        let Ok(tag) = tag.to_str() else {
            return ptr::null();
        };
        t.by_tag
            .get(tag)
            .filter(|&&i| shown(t.metas[usize::from(i)].fieldId))
            .map_or(ptr::null(), |&i| &t.metas[usize::from(i)] as *const _)
    })
    .unwrap_or(ptr::null())
}

/// `const char *DcgmFieldsGetEntityGroupString(dcgm_field_entity_group_t)`.
#[no_mangle]
pub extern "C" fn DcgmFieldsGetEntityGroupString(
    group: dcgm_field_entity_group_t,
) -> *const c_char {
    let name: &CStr = match group {
        1 => c"GPU",
        2 => c"vGPU",
        3 => c"Switch",
        4 => c"GPU_I",
        5 => c"GPU_CI",
        6 => c"LINK",
        7 => c"CPU",
        8 => c"CPU_CORE",
        9 => c"ConnectX",
        _ => c"None",
    };
    name.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_table_matches_the_rust_table() {
        init();
        let p = meta_by_id(150);
        assert!(!p.is_null());
        // SAFETY: non-NULL pointers from the table point to leaked, immutable metadata.
        let m = unsafe { &*p };
        assert_eq!(m.fieldId, 150);
        assert_eq!(m.fieldType as u8, b'i');
        // SAFETY: `tag` is NUL-terminated by `put_str`.
        assert_eq!(unsafe { CStr::from_ptr(m.tag.as_ptr()) }, c"gpu_temp");
        assert!(!m.valueFormat.is_null());
        let hole = (1..DCGM_FI_MAX_FIELDS as u16)
            .find(|&i| dcgm_sys::fields::by_id(i).is_none())
            .unwrap();
        assert!(meta_by_id(hole).is_null(), "id {hole} has no field");
        assert!(meta_by_id(0).is_null());
        assert!(meta_by_id(u16::MAX).is_null());
        for (i, f) in dcgm_sys::fields::FIELDS.iter().enumerate() {
            // SAFETY: as above.
            let fmt = unsafe { &*table().metas[i].valueFormat };
            assert_eq!(fmt.width, f.width, "field {}", f.id);
        }
    }
}
