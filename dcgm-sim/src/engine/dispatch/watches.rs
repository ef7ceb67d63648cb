//! Watches and readings: watch and unwatch, update, latest values, values since a time.

use crate::engine::*;

fn is_profiling(id: u16) -> bool {
    fields::by_id(id).is_some_and(|m| m.name.starts_with("DCGM_FI_PROF_"))
}

impl Engine {
    pub(in crate::engine) fn watch_request(
        &mut self,
        conn: u64,
        req: &Request,
        now: i64,
    ) -> Result<Reply, i32> {
        Ok(match req {
            Request::WatchFields {
                group_id,
                field_group_id,
                update_freq_us,
                max_keep_age_s,
                max_keep_samples,
            } => {
                if *group_id == 0 || *update_freq_us <= 0 {
                    return Err(ST_BADPARAM);
                }
                let (_, entities) = self.group(*group_id).ok_or(ST_NOT_CONFIGURED)?;
                let fg = self.field_group_fields(*field_group_id)?;
                // The profiling module serves DCGM_FI_PROF_*; without it DCGM refuses the
                // whole watch, the other fields included.
                if !self.world.node.profiling_module && fg.iter().any(|f| is_profiling(*f)) {
                    return Err(ST_MODULE_NOT_LOADED);
                }
                let who = WatcherId {
                    conn,
                    group: *group_id as u32,
                    field_group: *field_group_id,
                };
                let age = watch::retention_us(*update_freq_us, *max_keep_age_s, *max_keep_samples);
                log_watch(*update_freq_us, *max_keep_age_s, *max_keep_samples, &fg);
                for e in entities {
                    // DcgmHostEngineHandler::WatchFieldGroup drops detached entities.
                    if self.world.node.resolve(e).is_none() || self.is_detached(e) {
                        continue;
                    }
                    for f in &fg {
                        self.watches
                            .entry((e.0, e.1, *f))
                            .or_insert_with(|| Watch::new(*f, now))
                            .add_watcher(who, *update_freq_us, age);
                    }
                }
                Reply::Ok
            }
            Request::UnwatchFields {
                group_id,
                field_group_id,
            } => {
                self.group(*group_id).ok_or(ST_NOT_CONFIGURED)?;
                self.field_group_fields(*field_group_id)?;
                let (g, f) = (*group_id as u32, *field_group_id);
                self.unwatch(|w| w.group == g && w.field_group == f);
                Reply::Ok
            }
            // AUTO mode samples on its own (lazily); an explicit cycle brings everything due
            // up to date.
            Request::UpdateAllFields { .. } => {
                self.catch_up_all(now);
                Reply::Ok
            }
            Request::EntitiesGetLatestValues {
                entities,
                field_ids,
                live,
            } => {
                if entities.is_empty()
                    || field_ids.is_empty()
                    || entities.len() > MAX_GROUP_ENTITIES
                    || field_ids.len() > MAX_FIELDS_PER_GROUP
                {
                    return Err(ST_BADPARAM);
                }
                let mut out = Vec::with_capacity(entities.len() * field_ids.len());
                for e in entities {
                    for f in field_ids {
                        out.push(self.latest(*e, *f, *live, now));
                    }
                }
                Reply::Samples(out)
            }
            Request::GetValuesSince {
                group_id,
                field_group_id,
                since_us,
            } => {
                let (_, entities) = self.group(*group_id).ok_or(ST_NOT_CONFIGURED)?;
                let fg = self.field_group_fields(*field_group_id)?;
                let mut out = Vec::new();
                for e in &entities {
                    for f in &fg {
                        let key = (e.0, e.1, *f);
                        let (Some(w), Some(meta)) = (self.watches.get_mut(&key), fields::by_id(*f))
                        else {
                            // No data for this pair: skipped, as DcgmApi.cpp:2488-2655 does.
                            continue;
                        };
                        w.catch_up(key, meta, &self.world, now);
                        w.since(*e, meta, *since_us, &mut out);
                    }
                }
                Reply::ValuesSince {
                    samples: out,
                    next_since_us: now + 1,
                }
            }
            // dispatch() routes only this family here.
            _ => return Err(ST_GENERIC_ERROR),
        })
    }
}

/// `DCGM_SIM_WATCH_LOG=<file>`: one line per dcgmWatchFields call, so that tests can see the
/// frequency and retention a client asked for (the real engine keeps them to itself).
fn log_watch(freq_us: i64, max_keep_age_s: f64, max_keep_samples: i32, fields: &[u16]) {
    use std::io::Write;
    let Some(path) = std::env::var_os("DCGM_SIM_WATCH_LOG").filter(|p| !p.is_empty()) else {
        return;
    };
    let ids: Vec<String> = fields.iter().map(u16::to_string).collect();
    let line = format!(
        "freq_us={freq_us} max_keep_age_s={max_keep_age_s} max_keep_samples={max_keep_samples} fields={}\n",
        ids.join(",")
    );
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}
