//! Field values, telling real readings from DCGM's blank sentinels.
//!
//! DCGM marks a missing value two ways: a non-OK `status` with a BLANK payload (nothing
//! sampled, field not watched, ...), or `status == OK` with a sentinel payload (the driver
//! said "not supported", "no permission", ...). [`Reading`] folds both into one type so that
//! no sentinel can be mistaken for a number downstream.

use crate::error::Status;
use crate::ffi;
use crate::types::Entity;
use std::ffi::CStr;

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int64(i64),
    Double(f64),
    String(String),
    Blob(Vec<u8>),
    /// Microseconds since the Unix epoch (`DCGM_FT_TIMESTAMP`).
    Timestamp(i64),
}

/// The four DCGM sentinels, for any field type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sentinel {
    Blank,
    NotFound,
    NotSupported,
    NotPermissioned,
}

impl Sentinel {
    pub fn as_str(self) -> &'static str {
        match self {
            Sentinel::Blank => "blank",
            Sentinel::NotFound => "not_found",
            Sentinel::NotSupported => "not_supported",
            Sentinel::NotPermissioned => "not_permissioned",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Reading {
    Value(Value),
    Sentinel(Sentinel),
    /// The value carried a non-OK status (no data, not watched, GPU lost, ...).
    Error(Status),
}

impl Reading {
    pub fn value(&self) -> Option<&Value> {
        match self {
            Reading::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// One value of one field of one entity.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldReading {
    pub entity: Entity,
    pub field_id: u16,
    /// Microseconds since the Unix epoch; 0 when DCGM has no sample.
    pub ts_us: i64,
    pub reading: Reading,
}

const INT64_BLANK: i64 = ffi::DCGM_INT64_BLANK as i64;
const INT32_BLANK: i64 = ffi::DCGM_INT32_BLANK as i64;

/// Classifies an INT64 payload. Like `DCGM_INT64_IS_BLANK`, anything at or above BLANK is a
/// sentinel; the INT32 sentinels are also caught because some fields store them widened
/// (dcgm-exporter drops those values too).
pub fn classify_i64(v: i64) -> std::result::Result<i64, Sentinel> {
    match v {
        v if v >= INT64_BLANK => Err(sentinel_from_offset(v - INT64_BLANK)),
        v if (INT32_BLANK..=INT32_BLANK + 3).contains(&v) => {
            Err(sentinel_from_offset(v - INT32_BLANK))
        }
        v => Ok(v),
    }
}

/// Classifies a DOUBLE payload (`DCGM_FP64_IS_BLANK`: at or above 2^47). NaN and infinities
/// are not sentinels; the caller decides whether to export them.
pub fn classify_f64(v: f64) -> std::result::Result<f64, Sentinel> {
    if v >= ffi::DCGM_FP64_BLANK {
        Err(sentinel_from_offset((v - ffi::DCGM_FP64_BLANK) as i64))
    } else {
        Ok(v)
    }
}

/// Classifies a STRING payload (`DCGM_STR_IS_BLANK`: starts with `<<<` and contains `>>>`).
pub fn classify_str(s: &str) -> std::result::Result<&str, Sentinel> {
    if s.starts_with("<<<") && s.contains(">>>") {
        Err(match s {
            "<<<NOT_FOUND>>>" => Sentinel::NotFound,
            "<<<NOT_SUPPORTED>>>" => Sentinel::NotSupported,
            "<<<NOT_PERM>>>" | "<<<NOT_PERMISSIONED>>>" => Sentinel::NotPermissioned,
            _ => Sentinel::Blank,
        })
    } else {
        Ok(s)
    }
}

fn sentinel_from_offset(off: i64) -> Sentinel {
    match off {
        1 => Sentinel::NotFound,
        2 => Sentinel::NotSupported,
        3 => Sentinel::NotPermissioned,
        _ => Sentinel::Blank,
    }
}

/// Reads a NUL-terminated C string out of a fixed buffer, never past its end.
pub(crate) fn c_buf_to_string(buf: &[std::os::raw::c_char]) -> String {
    // SAFETY: c_char and u8 have the same size and alignment; the slice bounds are kept.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), buf.len()) };
    match CStr::from_bytes_until_nul(bytes) {
        Ok(c) => c.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// Decodes a value payload of the given type and status.
pub(crate) fn decode(
    field_type: u16,
    status: i32,
    value: &ffi::dcgmFieldValue_v1__bindgen_ty_1,
) -> Reading {
    if let Some(st) = Status::from_code(status) {
        return Reading::Error(st);
    }
    // SAFETY: the union is 4096 initialised bytes (DCGM always writes the whole value, and
    // our buffers are zeroed before the call); which member is meaningful is given by
    // fieldType, and every bit pattern is valid for i64, f64 and c_char arrays.
    unsafe {
        match field_type as u8 {
            ffi::DCGM_FT_INT64 => match classify_i64(value.i64_) {
                Ok(v) => Reading::Value(Value::Int64(v)),
                Err(s) => Reading::Sentinel(s),
            },
            ffi::DCGM_FT_TIMESTAMP => match classify_i64(value.i64_) {
                Ok(v) => Reading::Value(Value::Timestamp(v)),
                Err(s) => Reading::Sentinel(s),
            },
            ffi::DCGM_FT_DOUBLE => match classify_f64(value.dbl) {
                Ok(v) => Reading::Value(Value::Double(v)),
                Err(s) => Reading::Sentinel(s),
            },
            ffi::DCGM_FT_STRING => {
                let s = c_buf_to_string(&value.str_);
                match classify_str(&s) {
                    Ok(_) => Reading::Value(Value::String(s)),
                    Err(sent) => Reading::Sentinel(sent),
                }
            }
            ffi::DCGM_FT_BINARY => {
                let bytes: &[u8] =
                    std::slice::from_raw_parts(value.blob.as_ptr().cast(), value.blob.len());
                Reading::Value(Value::Blob(bytes.to_vec()))
            }
            _ => Reading::Error(Status::GenericError),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int64_sentinels_are_not_numbers() {
        assert_eq!(classify_i64(42), Ok(42));
        assert_eq!(classify_i64(9223372036854775792), Err(Sentinel::Blank));
        assert_eq!(classify_i64(9223372036854775793), Err(Sentinel::NotFound));
        assert_eq!(
            classify_i64(9223372036854775794),
            Err(Sentinel::NotSupported)
        );
        assert_eq!(
            classify_i64(9223372036854775795),
            Err(Sentinel::NotPermissioned)
        );
        assert_eq!(classify_i64(i64::MAX), Err(Sentinel::Blank));
        assert_eq!(classify_i64(2147483634), Err(Sentinel::NotSupported));
        assert_eq!(classify_i64(2147483631), Ok(2147483631));
        assert_eq!(classify_i64(-5), Ok(-5));
    }

    #[test]
    fn double_and_string_sentinels() {
        assert_eq!(classify_f64(0.5), Ok(0.5));
        assert_eq!(classify_f64(140737488355328.0), Err(Sentinel::Blank));
        assert_eq!(classify_f64(140737488355330.0), Err(Sentinel::NotSupported));
        assert_eq!(classify_str("<<<NULL>>>"), Err(Sentinel::Blank));
        assert_eq!(
            classify_str("<<<NOT_SUPPORTED>>>"),
            Err(Sentinel::NotSupported)
        );
        assert_eq!(
            classify_str("<<<NOT_PERM>>>"),
            Err(Sentinel::NotPermissioned)
        );
        assert_eq!(classify_str("550.54.15"), Ok("550.54.15"));
    }
}
