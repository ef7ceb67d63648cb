//! The C face of the simulator: every function of NVIDIA's `libdcgm.so.4` export list,
//! with the real signatures, as plain unversioned `extern "C"` symbols.
//!
//! Each export validates its arguments the way `dcgmlib/src/DcgmApi.cpp` does, turns them
//! into a [`Request`], and sends it either to the in-process engine (the embedded handle
//! `0x7fffffff`) or over the connection behind a remote handle. Replies are written into the
//! caller's structs field by field after zeroing them.
//!
//! Rules every export follows:
//! * the body runs under `catch_unwind`; a panic becomes `DCGM_ST_GENERIC_ERROR`;
//! * before `dcgmInit` → `DCGM_ST_UNINITIALIZED` (the real `apiEnter`), NULL pointer →
//!   `DCGM_ST_BADPARAM`, wrong struct version → `DCGM_ST_VER_MISMATCH`;
//! * no lock is held while a user callback runs, and the engine lock only for one request.

// The exports are documented by NVIDIA's dcgm_agent.h; a `# Safety` section on each would
// only repeat "pointers must be valid as the header describes".
#![allow(clippy::missing_safety_doc)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod discovery;
pub mod errors;
pub mod fields;
pub mod groups;
pub mod health;
pub mod layouts;
pub mod lifecycle;
pub mod stubs;
pub mod values;

use crate::engine::Engine;
use crate::proto::{Reply, Request, Sample, Value};
use crate::transport::Client;
use dcgm_sys::ffi::*;
use std::collections::BTreeMap;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// `DCGM_EMBEDDED_HANDLE`: the only handle an embedded engine ever gets.
pub const EMBEDDED_HANDLE: dcgmHandle_t = 0x7fff_ffff;

/// Process-wide library state (the real `g_dcgmGlobals` plus its client handler).
struct Globals {
    initialized: bool,
    embedded: Option<Arc<Mutex<Engine>>>,
    remotes: BTreeMap<dcgmHandle_t, Arc<Client>>,
    next_handle: dcgmHandle_t,
    /// The real library's client handler (with its `dcgm_ipc` thread): allocated by the
    /// first connect attempt, successful or not, and freed only by dcgmShutdown.
    client_handler: bool,
    /// An embedded engine ran since dcgmInit. Stopping it does not return the real library
    /// to its state before (the engine's modules stay loaded, and exits after a stopped
    /// embedded engine faulted too); only dcgmShutdown does.
    engine_started: bool,
}

static GLOBALS: Mutex<Globals> = Mutex::new(Globals {
    initialized: false,
    embedded: None,
    remotes: BTreeMap::new(),
    next_handle: 1,
    client_handler: false,
    engine_started: false,
});

impl Globals {
    /// Whether the real library would have threads of its own running now.
    fn threads_live(&self) -> bool {
        self.initialized
            && (self.embedded.is_some()
                || !self.remotes.is_empty()
                || self.client_handler
                || self.engine_started)
    }
}

/// Remote requests in flight (the real client handler's reference count): dcgmShutdown
/// waits for them to return before it frees the client, as the real one does.
pub(crate) static IN_FLIGHT: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Counts one remote request for as long as it lives.
pub(crate) struct InFlight;

impl InFlight {
    pub(crate) fn enter() -> InFlight {
        IN_FLIGHT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The state lock. A panic while it was held cannot leave it half-updated (every update is
/// a single assignment), so a poisoned lock is simply taken over.
fn globals() -> MutexGuard<'static, Globals> {
    GLOBALS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs an export body, turning `Err(code)` and panics into a `dcgmReturn_t`.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), dcgmReturn_t>) -> dcgmReturn_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => DCGM_ST_OK,
        Ok(Err(code)) => code,
        Err(_) => DCGM_ST_GENERIC_ERROR,
    }
}

/// [`guard`] plus the real library's `apiEnter` check: nothing works before `dcgmInit`.
pub(crate) fn api(f: impl FnOnce() -> Result<(), dcgmReturn_t>) -> dcgmReturn_t {
    guard(|| {
        require_init()?;
        f()
    })
}

pub(crate) fn require_init() -> Result<(), dcgmReturn_t> {
    if globals().initialized {
        Ok(())
    } else {
        Err(DCGM_ST_UNINITIALIZED)
    }
}

enum Backend {
    Embedded(Arc<Mutex<Engine>>),
    Remote(Arc<Client>),
}

/// Sends `req` to whatever `handle` names. Engine errors come back as `Err(code)` too.
pub(crate) fn call(handle: dcgmHandle_t, req: Request) -> Result<Reply, dcgmReturn_t> {
    let backend = {
        let g = globals();
        if !g.initialized {
            return Err(DCGM_ST_UNINITIALIZED);
        }
        if handle == 0 {
            return Err(DCGM_ST_BADPARAM);
        }
        if handle == EMBEDDED_HANDLE {
            // The real library answers UNINITIALIZED when no embedded engine is running.
            Backend::Embedded(g.embedded.clone().ok_or(DCGM_ST_UNINITIALIZED)?)
        } else {
            Backend::Remote(
                g.remotes
                    .get(&handle)
                    .cloned()
                    .ok_or(DCGM_ST_CONNECTION_NOT_VALID)?,
            )
        }
    };
    let reply = match backend {
        Backend::Embedded(engine) => engine
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .handle(0, &req),
        Backend::Remote(client) => {
            let _counted = InFlight::enter();
            client.request(&req)?
        }
    };
    match reply {
        Reply::Error(DCGM_ST_OK) => Err(DCGM_ST_GENERIC_ERROR),
        Reply::Error(code) => Err(code),
        r => Ok(r),
    }
}

/// For requests whose only answer is success.
pub(crate) fn call_ok(handle: dcgmHandle_t, req: Request) -> Result<(), dcgmReturn_t> {
    call(handle, req).map(|_| ())
}

/// The answer to a request did not have the shape its request promises.
pub(crate) fn unexpected<T>(_: Reply) -> Result<T, dcgmReturn_t> {
    Err(DCGM_ST_GENERIC_ERROR)
}

/// Sends a request and takes the payload of the one `Reply` variant it answers with; any
/// other reply ends the calling body with [`unexpected`]'s error.
macro_rules! ask {
    ($handle:expr, $req:expr, $variant:path) => {
        match $crate::abi::call($handle, $req)? {
            $variant(payload) => payload,
            r => return $crate::abi::unexpected(r),
        }
    };
}
pub(crate) use ask;

/// Group ids travel as `uintptr_t` but the host engine keeps only the low 32 bits.
pub(crate) fn group_id(g: dcgmGpuGrp_t) -> u64 {
    u64::from(g as u32)
}

/// Copies `s` into a C char array, truncating so that the terminating NUL always fits.
pub(crate) fn put_str(dst: &mut [c_char], s: &str) {
    let Some(room) = dst.len().checked_sub(1) else {
        return;
    };
    let n = s.len().min(room);
    for (d, &b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = b as c_char;
    }
    dst[n] = 0;
}

/// Writes as many of `rows` as fit into a caller's fixed array, one `put` each, and returns
/// how many that was (the count the caller's struct reports).
pub(crate) fn fill_slots<S, R>(
    slots: &mut [S],
    rows: &[R],
    mut put: impl FnMut(&mut S, &R),
) -> u32 {
    let n = rows.len().min(slots.len());
    for (slot, row) in slots.iter_mut().zip(&rows[..n]) {
        put(slot, row);
    }
    n as u32
}

/// Reads a caller's C string; NULL → `DCGM_ST_BADPARAM`. Invalid UTF-8 is replaced.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives the call.
pub(crate) unsafe fn read_str(p: *const c_char) -> Result<String, dcgmReturn_t> {
    non_null(p)?;
    // SAFETY: non-NULL and NUL-terminated per this function's contract.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Writes a sample payload into the 4096-byte value union of a field value: only the
/// bytes of the value (a string truncated to `DCGM_MAX_STR_LENGTH` with its NUL).
///
/// # Safety
/// `dst` is valid for writes of `DCGM_MAX_BLOB_LENGTH` bytes.
unsafe fn put_value(dst: *mut u8, v: &Value) {
    let bytes: &[u8] = match v {
        Value::Int64(i) => &i.to_ne_bytes(),
        Value::Double(d) => &d.to_ne_bytes(),
        Value::Str(s) => {
            // `value.str` is char[DCGM_MAX_STR_LENGTH]: truncate there, NUL-terminated.
            let n = s.len().min(DCGM_MAX_STR_LENGTH as usize - 1);
            // SAFETY: `n` < DCGM_MAX_STR_LENGTH <= the union's size, per the contract.
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr(), dst, n);
                dst.add(n).write(0);
            }
            return;
        }
        Value::Blob(b) => &b[..b.len().min(DCGM_MAX_BLOB_LENGTH as usize)],
    };
    // SAFETY: at most DCGM_MAX_BLOB_LENGTH bytes, valid for writes per the contract; a
    // sample's own buffer never overlaps the caller's.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) }
}

/// Writes the members `dcgmFieldValue_v1`/`_v2` share from a sample, and of the value only
/// the bytes it has (a string with its NUL), as the real library does
/// (`DcgmFvBuffer::ConvertBufferedFvToFv1`): the rest of the 4 KB union is left as the
/// caller's buffer had it, never cleared per value. Expands inside the caller's `unsafe`
/// block: `$dst` is valid for writes of one struct and aligned.
macro_rules! put_sample {
    ($dst:expr, $version:expr, $s:expr) => {{
        let (dst, s) = ($dst, $s);
        (*dst).version = $version;
        (*dst).fieldId = s.field_id;
        (*dst).fieldType = u16::from(s.field_type);
        (*dst).status = s.status;
        (*dst).ts = s.ts_us;
        put_value(std::ptr::addr_of_mut!((*dst).value).cast::<u8>(), &s.value);
    }};
}

/// Fills a `dcgmFieldValue_v1` from a sample.
///
/// # Safety
/// `dst` is valid for writes of one `dcgmFieldValue_v1` and properly aligned.
pub(crate) unsafe fn write_fv1(dst: *mut dcgmFieldValue_v1, s: &Sample) {
    // SAFETY: `dst` is valid for writes and aligned per the contract; members are written
    // through the raw pointer, and the union as the 4096 raw bytes it is.
    unsafe { put_sample!(dst, dcgm_sys::versions::FIELD_VALUE_V1, s) }
}

/// Fills a `dcgmFieldValue_v2` from a sample.
///
/// # Safety
/// `dst` is valid for writes of one `dcgmFieldValue_v2` and properly aligned.
pub(crate) unsafe fn write_fv2(dst: *mut dcgmFieldValue_v2, s: &Sample) {
    // SAFETY: as in `write_fv1`.
    unsafe {
        put_sample!(dst, dcgm_sys::versions::FIELD_VALUE_V2, s);
        (*dst).entityGroupId = s.entity_group;
        (*dst).entityId = s.entity_id;
    }
}

const _: () = assert!(
    std::mem::size_of::<dcgmFieldValue_v1__bindgen_ty_1>() == DCGM_MAX_BLOB_LENGTH as usize
);
const _: () = assert!(
    std::mem::size_of::<dcgmFieldValue_v2__bindgen_ty_1>() == DCGM_MAX_BLOB_LENGTH as usize
);

/// Zeroes a caller's versioned output struct, keeping its `version` (the real library
/// copies the caller's struct into its request and back, so `version` survives).
///
/// # Safety
/// `p` is valid for writes of one `T`, aligned, and `T` starts with a `u32` version and
/// is plain data for which all-zero bytes are a valid value.
pub(crate) unsafe fn zero_keep_version<T>(p: *mut T) {
    // SAFETY: per the contract the first 4 bytes are the version and zero is valid for T.
    unsafe {
        let version = std::ptr::read(p.cast::<u32>());
        std::ptr::write_bytes(p, 0, 1);
        std::ptr::write(p.cast::<u32>(), version);
    }
}

/// A caller's pointer the call needs: NULL → `DCGM_ST_BADPARAM`.
pub(crate) fn non_null<T>(p: *const T) -> Result<(), dcgmReturn_t> {
    if p.is_null() {
        Err(DCGM_ST_BADPARAM)
    } else {
        Ok(())
    }
}

/// Checks a caller's versioned struct: NULL → `DCGM_ST_BADPARAM`, a `version` other than
/// `want` → `DCGM_ST_VER_MISMATCH`.
///
/// # Safety
/// `p` is NULL, or aligned and pointing to at least 4 readable bytes.
pub(crate) unsafe fn check_version<T>(p: *const T, want: u32) -> Result<(), dcgmReturn_t> {
    non_null(p)?;
    // SAFETY: non-NULL; the rest per the contract.
    if unsafe { version_of(p) } != want {
        return Err(DCGM_ST_VER_MISMATCH);
    }
    Ok(())
}

/// [`zero_keep_version`], then the struct lent for filling in place (the large ones are
/// never copied to the stack).
///
/// # Safety
/// As [`zero_keep_version`]; nothing else refers to `*p` while the reference lives.
pub(crate) unsafe fn cleared<'a, T>(p: *mut T) -> &'a mut T {
    // SAFETY: per the contract.
    unsafe {
        zero_keep_version(p);
        &mut *p
    }
}

/// The `version` member at offset 0 of every versioned DCGM struct.
///
/// # Safety
/// `p` is non-NULL, aligned, and points to at least 4 readable bytes.
pub(crate) unsafe fn version_of<T>(p: *const T) -> u32 {
    // SAFETY: per the contract.
    unsafe { std::ptr::read(p.cast::<u32>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_truncated_and_terminated() {
        let mut buf = [1 as c_char; 4];
        put_str(&mut buf, "KB/s");
        assert_eq!(buf, [b'K' as c_char, b'B' as c_char, b'/' as c_char, 0]);
        put_str(&mut buf, "");
        assert_eq!(buf[0], 0);
        put_str(&mut [], "x");
    }

    #[test]
    fn values_land_in_the_union() {
        let mut u = [0xffu8; 4096];
        // SAFETY: `u` is 4096 writable bytes.
        let put = |u: &mut [u8; 4096], v: &Value| unsafe { put_value(u.as_mut_ptr(), v) };
        put(&mut u, &Value::Int64(-2));
        assert_eq!(i64::from_ne_bytes(u[..8].try_into().unwrap()), -2);
        // Only the value's own bytes are written: what lies beyond is the caller's.
        assert_eq!(u[8], 0xff);
        put(&mut u, &Value::Str("x".repeat(300)));
        assert_eq!(u[254], b'x');
        assert_eq!(u[255], 0);
        assert_eq!(u[256], 0xff);
        put(&mut u, &Value::Blob(vec![7; 5000]));
        assert!(u.iter().all(|&b| b == 7));
    }

    #[test]
    fn only_the_low_32_bits_of_a_group_id_count() {
        assert_eq!(group_id(0xffff_ffff_0000_0002), 2);
        assert_eq!(group_id(0x7fff_ffff), 0x7fff_ffff);
    }
}
