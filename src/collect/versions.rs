//! DCGM releases other than the 4.6.0 the bindings are built from. A library or host engine
//! of an older DCGM 4 does not know the fields added after it: the engine refuses a whole
//! field group holding one (`BadParam`), the library refuses to read one
//! (`dcgmGetValuesSince_v2`: `UnknownField`). So before anything is watched, what the older
//! side of the session lacks is left out, and one line names both releases and what is left
//! out (`dcgm_sys::releases` has the fields of each release, from NVIDIA's headers).

use super::fields;
use crate::config::counters::{Counter, CounterField, Counters};
use dcgm_sys::releases::{field_since, knows_field};
use dcgm_sys::Session;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

/// Whether both sides of the session know field `id` (a side that names no release counts
/// as knowing it: DCGM then refuses what it lacks, piece by piece).
pub(crate) fn knows(session: &Session, id: u16) -> bool {
    session
        .versions()
        .common()
        .is_none_or(|r| knows_field(r, id))
}

/// The counters without the rows whose field the older side of the session predates. What
/// is left out (those rows, and the recovery-action source of DCGM_EXP_GPU_HEALTH_ACTION) is
/// said in one line, once per pair of releases and what it leaves out.
pub(crate) fn supported(session: &Session, counters: Arc<Counters>) -> Arc<Counters> {
    let Some(common) = session.versions().common() else {
        return counters;
    };
    let unknown = |c: &Counter| match &c.field {
        CounterField::Dcgm(m) => !knows_field(common, m.id),
        CounterField::Exp(_) => false,
    };
    let mut missing: Vec<String> = counters
        .all
        .iter()
        .filter(|c| unknown(c))
        .filter_map(|c| match &c.field {
            CounterField::Dcgm(m) => Some(named(&c.name, m.id)),
            CounterField::Exp(_) => None,
        })
        .collect();
    let action = counters
        .all
        .iter()
        .any(|c| c.field == CounterField::Exp(crate::collect::exp::HEALTH_ACTION));
    for &(id, feature) in NEEDS.lock().unwrap_or_else(PoisonError::into_inner).iter() {
        if !knows_field(common, id) {
            missing.push(named(feature, id));
        }
    }
    if action && !knows_field(common, fields::GPU_RECOVERY_ACTION) {
        missing.push(named(
            "the driver's recovery action in DCGM_EXP_GPU_HEALTH_ACTION (its XIDs, health \
             watches and lost GPUs still decide)",
            fields::GPU_RECOVERY_ACTION,
        ));
    }
    if missing.is_empty() {
        return counters;
    }
    say_once(format!(
        "{}: left out, as DCGM {common} has no such field: {}",
        session.versions().describe(),
        missing.join("; ")
    ));
    if !counters.all.iter().any(unknown) {
        return counters;
    }
    Arc::new(Counters {
        all: counters
            .all
            .iter()
            .filter(|c| !unknown(c))
            .cloned()
            .collect(),
        warnings: counters.warnings.clone(),
    })
}

/// Whether the older side of the session predates field `id`, which `feature` (a flag
/// outside the collector) needs. The feature is then named in [`supported`]'s line with the
/// counters' rows, so that one line says everything a pair of releases leaves out.
pub(crate) fn left_out(session: &Session, id: u16, feature: &'static str) -> bool {
    if knows(session, id) {
        return false;
    }
    let mut needs = NEEDS.lock().unwrap_or_else(PoisonError::into_inner);
    if !needs.contains(&(id, feature)) {
        needs.push((id, feature));
    }
    true
}

/// Fields that features outside the collector need ([`left_out`]).
static NEEDS: Mutex<Vec<(u16, &'static str)>> = Mutex::new(Vec::new());

/// `NAME (field ID, DCGM RELEASE and later)`.
fn named(what: &str, id: u16) -> String {
    match field_since(id) {
        Some(since) => format!("{what} (field {id}, DCGM {since} and later)"),
        None => format!("{what} (field {id})"),
    }
}

/// Logs `line` unless it was logged before: a rebuild (SIGHUP, a reconnect to the same
/// engine) finds the same releases and says nothing new.
pub(crate) fn say_once(line: String) {
    static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(PoisonError::into_inner);
    if said.get_or_insert_with(HashSet::new).insert(line.clone()) {
        tracing::warn!("{line}");
    }
}
