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
                let keys = self.watch_keys(&entities, &fg);
                // The profiling module serves DCGM_FI_PROF_* on entities not sampled through
                // GPM; loaded by this request, or denied or absent: then DCGM fails the
                // watch after adding the cache manager's watches, and unwatches every pair of
                // the group and field group for this connection
                // (DcgmHostEngineHandler::WatchFieldGroup, GETOUT), also pairs the connection
                // had watched before through other field groups.
                if let Err(status) = self.load_profiling_for(&keys, &fg) {
                    // The cache manager made an entry for every pair before the failure.
                    for key in &keys {
                        self.watches
                            .entry(*key)
                            .or_insert_with(|| Watch::new(key.2, now));
                    }
                    // Every pair has an entry now: nothing more to report.
                    let _ = self.unwatch(conn, &keys, now);
                    return Err(status);
                }
                let age = watch::retention_us(*update_freq_us, *max_keep_age_s, *max_keep_samples);
                log_watch(*update_freq_us, *max_keep_age_s, *max_keep_samples, &fg);
                for &key in &keys {
                    let w = self
                        .watches
                        .entry(key)
                        .or_insert_with(|| Watch::new(key.2, now));
                    w.add_watcher(conn, *update_freq_us, age, now);
                }
                self.rearmed(&keys, now);
                Reply::Ok
            }
            Request::UnwatchFields {
                group_id,
                field_group_id,
            } => {
                let (_, entities) = self.group(*group_id).ok_or(ST_NOT_CONFIGURED)?;
                let fg = self.field_group_fields(*field_group_id)?;
                let keys = self.watch_keys(&entities, &fg);
                self.unwatch(conn, &keys, now)?;
                self.disarmed(&keys);
                // The profiling module is asked to unwatch too; one that cannot load fails
                // the call after every pair is gone (UnwatchFieldGroup keeps going).
                self.load_profiling_for(&keys, &fg)?;
                // After every pair is gone, as the real handler reports a failing pair.
                let faults = &self.world.faults.unwatch_fails;
                if let Some(status) = fg.iter().find_map(|f| faults.get(f)) {
                    return Err(*status);
                }
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
                if self.world.faults.fail_reads > 0 {
                    self.world.faults.fail_reads -= 1;
                    return Err(ST_GENERIC_ERROR);
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
                if let Some((n, field)) = &mut self.world.faults.fail_values_since {
                    if *n > 0 && fg.contains(field) {
                        *n -= 1;
                        return Err(ST_GENERIC_ERROR);
                    }
                }
                let mut out = Vec::new();
                for e in &entities {
                    for f in &fg {
                        if let Err(status) = self.samples_since(*e, *f, *since_us, now, &mut out) {
                            // The samples of the pairs before reach the callback; the call
                            // fails and the caller's timestamp stays.
                            return Ok(Reply::ValuesSince {
                                samples: out,
                                next_since_us: *since_us,
                                status,
                            });
                        }
                    }
                }
                Reply::ValuesSince {
                    samples: out,
                    next_since_us: now + 1,
                    status: ST_OK,
                }
            }
            // dispatch() routes only this family here.
            _ => return Err(ST_GENERIC_ERROR),
        })
    }
}

impl Engine {
    /// Loads the profiling module for a watch or unwatch of `fields` on the entities of
    /// `keys` when it holds a DCGM_FI_PROF_* field and an entity DCGM does not sample
    /// through GPM (`GetProfModuleServicedEntities`: only GPUs, their instances and their
    /// links can be, where the GPU has GPM); MODULE_NOT_LOADED when it is denied or absent.
    fn load_profiling_for(&mut self, keys: &[Key], fields: &[u16]) -> Result<(), i32> {
        if !fields.iter().any(|f| is_profiling(*f)) {
            return Ok(());
        }
        let node = &self.world.node;
        let serviced = keys.iter().any(|k| {
            !node
                .resolve((k.0, k.1))
                .and_then(|e| e.gpu())
                .is_some_and(|g| g.gpm)
        });
        if !serviced {
            return Ok(());
        }
        let available = node.profiling_module;
        self.modules.load(modules::PROFILING, available)
    }

    /// The physical GPU of each profiling pair of `keys`.
    fn profiling_gpus(&self, keys: &[Key]) -> HashSet<u32> {
        keys.iter()
            .filter(|k| is_profiling(k.2))
            .filter_map(|k| self.world.node.resolve((k.0, k.1)).and_then(|e| e.gpu()))
            .map(|g| g.id)
            .collect()
    }

    /// `prof_stuck`: an unwatch of a stuck GPU's profiling fields is half of a re-arm.
    fn disarmed(&mut self, keys: &[Key]) {
        for gpu in self.profiling_gpus(keys) {
            if let Some(s) = self.prof_stuck.get_mut(&gpu) {
                s.1 = true;
            }
        }
    }

    /// `prof_stuck`: a watch of a stuck GPU's profiling fields after an unwatch of them
    /// heals it (unless only a restart does); the samples before keep reading stuck.
    fn rearmed(&mut self, keys: &[Key], now: i64) {
        let healed: Vec<u32> = self
            .profiling_gpus(keys)
            .into_iter()
            .filter(|g| self.prof_stuck.get(g) == Some(&(false, true)))
            .collect();
        if healed.is_empty() {
            return;
        }
        self.catch_up_all(now);
        for gpu in healed {
            self.prof_stuck.remove(&gpu);
            self.world.faults.prof_stuck.remove(&gpu);
        }
    }

    /// The (entity, field) pairs a watch or unwatch of these members and fields touches:
    /// detached entities are left out (DcgmHostEngineHandler::WatchFieldGroup and
    /// UnwatchFieldGroup), and so are entities that do not exist.
    fn watch_keys(&self, entities: &[(u32, u32)], fields: &[u16]) -> Vec<Key> {
        let mut keys = Vec::with_capacity(entities.len() * fields.len());
        for &e in entities {
            if self.world.node.resolve(e).is_none() || self.is_detached(e) {
                continue;
            }
            keys.extend(fields.iter().map(|f| (e.0, e.1, *f)));
        }
        keys
    }

    /// The samples of one pair since `since_us`, as dcgmGetValuesSince asks the cache
    /// (DcgmCacheManager::GetSamples): a pair with no sample in the range is NO_DATA (and
    /// skipped) when the watch ever had a sample or is watched, NOT_WATCHED otherwise,
    /// which fails the whole call (DcgmApi.cpp helperGetValuesSince).
    fn samples_since(
        &mut self,
        e: (u32, u32),
        f: u16,
        since_us: i64,
        now: i64,
        out: &mut Vec<Sample>,
    ) -> Result<(), i32> {
        let key = (e.0, e.1, f);
        let meta = fields::by_id(f).ok_or(ST_UNKNOWN_FIELD)?;
        let Some(w) = self.watches.get_mut(&key) else {
            return Err(ST_NOT_WATCHED);
        };
        w.catch_up(key, meta, &self.world, now);
        if w.is_empty() {
            return Err(ST_NOT_WATCHED);
        }
        w.since(e, meta, since_us, out);
        Ok(())
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
