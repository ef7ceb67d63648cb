//! DCGM watches as the collector makes them: groups of the entities DCGM accepts
//! ([`group_of_accepted`]), every field it will watch on them ([`watch_all`]), and each watch
//! kept ([`Watch`]) so that it can be made again or removed.

use super::failures;
use dcgm_sys::{Entity, FieldGroup, Group, Session};

/// Entities per DCGM group (DCGM_GROUP_MAX_ENTITIES_V2).
const MAX_GROUP_ENTITIES: usize = 1024;
/// Fields per field group (the library rejects 128 or more).
const MAX_FIELD_GROUP_FIELDS: usize = 127;

/// One `dcgmWatchFields` call as it was made, kept so that it can be made again: DCGM keys a
/// watch by (entity, field, connection), not by group, so removing another group's watch of
/// the same pairs on this connection removes this one too (see [`Collector::reassert`]).
pub struct Watch {
    pub group: Group,
    pub fields: FieldGroup,
    pub freq_us: i64,
    pub keep_age_s: f64,
    pub keep_samples: i32,
}

impl Watch {
    /// A watch just made with (update interval µs, max keep age s, max keep samples).
    fn made(group: Group, fields: FieldGroup, rate: (i64, f64, i32)) -> Watch {
        let (freq_us, keep_age_s, keep_samples) = rate;
        Watch {
            group,
            fields,
            freq_us,
            keep_age_s,
            keep_samples,
        }
    }

    /// Sets (again) the watch's interval and retention; idempotent in DCGM.
    pub fn assert(&self, session: &Session) -> dcgm_sys::Result<()> {
        session.watch(
            &self.group,
            &self.fields,
            self.freq_us,
            self.keep_age_s,
            self.keep_samples,
        )
    }

    /// Removes this connection's watch of every (entity, field) pair of the watch.
    pub fn remove(&self, session: &Session) -> dcgm_sys::Result<()> {
        session.unwatch(&self.group, &self.fields)
    }
}

/// What [`watch_all`] set up: the live watches and the fields DCGM refused.
pub struct Watched {
    pub watches: Vec<Watch>,
    /// Fields DCGM would not watch on these entities, each with its error.
    pub refused: Vec<(u16, dcgm_sys::Error)>,
    /// Entities DCGM would not take into a group (e.g. a GPU detached since discovery).
    pub refused_entities: Vec<(Entity, dcgm_sys::Error)>,
}

/// A group of `entities`. When DCGM refuses one (BADPARAM for a GPU detached from its
/// driver since the node was discovered), each is tried alone and the refused ones are left
/// out with their error, so that one entity never costs the others their watches.
pub(crate) fn group_of_accepted(
    session: &Session,
    name: &str,
    entities: &[Entity],
    refused: &mut Vec<(Entity, dcgm_sys::Error)>,
) -> dcgm_sys::Result<Group> {
    let err = match session.create_group(name, entities) {
        Ok(g) => return Ok(g),
        Err(e) if failures::is_fatal(&e) || entities.len() < 2 => return Err(e),
        Err(e) => e,
    };
    let mut accepted = Vec::new();
    for &e in entities {
        match session.create_group(&format!("{name}-probe"), &[e]) {
            Ok(_) => accepted.push(e),
            Err(x) if failures::is_fatal(&x) => return Err(x),
            Err(x) => {
                tracing::warn!("{e:?} refused in a group, left out of its watches: {x}");
                refused.push((e, x));
            }
        }
    }
    if accepted.is_empty() || accepted.len() == entities.len() {
        return Err(err);
    }
    session.create_group(name, &accepted)
}

/// Creates groups and field groups for a set of entities and watches them. When DCGM
/// refuses a whole watch (it rejects all of it for one bad field, e.g. a profiling field
/// while its module is not loaded), each field is tried alone and only the refused ones are
/// left out. A lost connection is returned as the error.
pub fn watch_all(
    session: &Session,
    name: &str,
    entities: &[Entity],
    fields: &[u16],
    interval_ms: u64,
    keep_age_s: f64,
    keep_samples: i32,
) -> dcgm_sys::Result<Watched> {
    // Field-group names must be unique in the engine, also while a rebuilt collector
    // briefly coexists with the one it replaces.
    static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let freq_us = (interval_ms * 1000) as i64;
    let rate = (freq_us, keep_age_s, keep_samples);
    let mut out = Watched {
        watches: Vec::new(),
        refused: Vec::new(),
        refused_entities: Vec::new(),
    };
    for (gi, ents) in entities.chunks(MAX_GROUP_ENTITIES).enumerate() {
        for (fi, flds) in fields.chunks(MAX_FIELD_GROUP_FIELDS).enumerate() {
            let mut refused = Vec::new();
            let group = group_of_accepted(
                session,
                &format!("{name}-{nonce}-{gi}-{fi}"),
                ents,
                &mut refused,
            )?;
            if fi == 0 {
                out.refused_entities.extend(refused);
            }
            let fg_name = format!("{name}-fields-{nonce}-{gi}-{fi}");
            let fg = session.create_field_group(&fg_name, flds)?;
            tracing::debug!(
                "{name}: watching {} entities x fields {flds:?} every {interval_ms} ms (keep {keep_age_s} s, {keep_samples} samples)",
                ents.len()
            );
            let err = match session.watch(&group, &fg, freq_us, keep_age_s, keep_samples) {
                Ok(()) => {
                    out.watches.push(Watch::made(group, fg, rate));
                    continue;
                }
                Err(e) if failures::is_fatal(&e) => return Err(e),
                Err(e) => e,
            };
            drop(fg);
            if flds.len() == 1 {
                out.refused.push((flds[0], err));
                continue;
            }
            let good = probe_fields(session, &group, &fg_name, flds, rate, &mut out.refused)?;
            if good.is_empty() {
                continue;
            }
            let fg = session.create_field_group(&fg_name, &good)?;
            match session.watch(&group, &fg, freq_us, keep_age_s, keep_samples) {
                Ok(()) => out.watches.push(Watch::made(group, fg, rate)),
                Err(e) if failures::is_fatal(&e) => return Err(e),
                // Each field alone was accepted but not together: none of them is watched.
                Err(e) => out
                    .refused
                    .extend(good.iter().map(|f| (*f, failures::copy(&e)))),
            }
        }
    }
    Ok(out)
}

/// The fields of `flds` DCGM watches on `group` when asked one by one; the others go to
/// `refused` with their error. Each probe is unwatched at once (the caller watches the good
/// ones together); pairs it shares with watches in place are made again after the build
/// (`Collector::reassert`).
fn probe_fields(
    session: &Session,
    group: &Group,
    fg_name: &str,
    flds: &[u16],
    (freq_us, keep_age_s, keep_samples): (i64, f64, i32),
    refused: &mut Vec<(u16, dcgm_sys::Error)>,
) -> dcgm_sys::Result<Vec<u16>> {
    let mut good = Vec::new();
    for &f in flds {
        let probe = session.create_field_group(&format!("{fg_name}-probe-{f}"), &[f])?;
        match session.watch(group, &probe, freq_us, keep_age_s, keep_samples) {
            Ok(()) => {
                // DCGM removes every pair of an unwatch and reports a failing one after
                // (DcgmHostEngineHandler::UnwatchFieldGroup); the real DCGM 4.6 kit answers
                // NotWatched for profiling fields of GPUs it samples through GPM. The field
                // was accepted all the same.
                match session.unwatch(group, &probe) {
                    Err(e) if failures::is_fatal(&e) => return Err(e),
                    Err(e) => tracing::debug!("unwatch of the probe of field {f}: {e}"),
                    Ok(()) => {}
                }
                good.push(f);
            }
            Err(e) if failures::is_fatal(&e) => return Err(e),
            Err(e) => refused.push((f, e)),
        }
    }
    Ok(good)
}
