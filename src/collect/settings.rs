//! What shapes a collector's watches and labels ([`Settings`]), and the retention and
//! interval each watch gets from it.

use super::{aggregate, heal};
pub use crate::config::file::WatchGroup;

/// How long DCGM keeps samples by default (dcgm-exporter's value; --watch-max-keep-age).
pub const MAX_KEEP_AGE_S: f64 = 600.0;

/// Settings that shape what is watched and how it is labelled.
#[derive(Clone, Debug)]
pub struct Settings {
    pub gpus: crate::config::selector::Selector,
    pub switches: crate::config::selector::Selector,
    pub cpus: crate::config::selector::Selector,
    pub compute_instances: bool,
    pub use_old_namespace: bool,
    pub replace_blanks_in_model_name: bool,
    pub hostname: Option<String>,
    pub interval_ms: u64,
    pub xid_window_ms: u64,
    pub clock_events_window_ms: u64,
    /// dcgmWatchFields' maxKeepAge (s; 0: no age limit) and maxKeepSamples (0: no limit)
    /// from --watch-max-keep-age/--watch-max-keep-samples (their defaults unless
    /// `keep_explicit`).
    pub keep_age_s: f64,
    pub keep_samples: i32,
    /// The user set the retention (flag or environment): every watch keeps what they asked
    /// for instead of what the exporter reads (see [`Settings::latest_retention`]).
    pub keep_explicit: bool,
    /// --fake-gpus: a GPU whose attributes cannot be read is kept as `fake<N>`.
    pub fake_gpus: bool,
    /// Watch frequencies for fields matching a glob (the config file's watch groups); a
    /// field no group matches is watched at `interval_ms`.
    pub watch_groups: Vec<WatchGroup>,
    /// The upstream release emulated (`--emulate-version`).
    pub emulate: crate::config::emulate::UpstreamVersion,
    /// `--low-cardinality`: info series, static labels left out of the others.
    pub low_cardinality: bool,
    /// Profiling that heals (`--profiling-rearm-after`, `--profiling-restart-period`) and
    /// the modules the embedded engine is started without (`--dcgm-denylist-modules`).
    pub profiling: heal::Options,
    /// Sub-interval aggregation (`--aggregate`): fields sampled faster, with their
    /// min/max/mean/count per collection.
    pub aggregate: aggregate::Options,
}

/// Samples DCGM keeps of a field whose latest value is all the exporter reads. Upstream
/// keeps 600 s of every field, which embedded mode pays for in memory that grows for ten
/// minutes after start; a count, not an age, so that a field DCGM updates late or rarely
/// still has its latest value.
pub const LATEST_KEEP_SAMPLES: i32 = 4;

impl Settings {
    /// (maxKeepAge s, maxKeepSamples) for a watch of which only the latest value is read.
    pub(crate) fn latest_retention(&self) -> (f64, i32) {
        if self.keep_explicit {
            (self.keep_age_s, self.keep_samples)
        } else {
            (0.0, LATEST_KEEP_SAMPLES)
        }
    }

    /// (maxKeepAge s, maxKeepSamples) for a field read back over `window_ms` (the XID and
    /// clock-event counts): the whole window, plus one collection interval for the read that
    /// starts a little after the window's newest sample was taken.
    pub(crate) fn window_retention(&self, window_ms: u64) -> (f64, i32) {
        if self.keep_explicit {
            (self.keep_age_s.max(window_ms as f64 / 1000.0), 0)
        } else {
            ((window_ms + self.interval_ms) as f64 / 1000.0, 0)
        }
    }

    fn watch_group(&self, field: u16) -> Option<&WatchGroup> {
        self.watch_groups.iter().find(|g| {
            g.fields
                .iter()
                .any(|p| crate::config::file::field_matches(p, field))
        })
    }

    /// The watch frequency of a field: the first watch group matching its name, else -c.
    pub(crate) fn watch_interval_ms(&self, field: u16) -> u64 {
        let own = self
            .watch_group(field)
            .map_or(self.interval_ms, |g| g.interval_ms);
        self.aggregate.interval_ms(field, own)
    }

    /// The retention of a field whose latest value is read: its watch group's own, each
    /// property over the default retention, else [`Settings::latest_retention`].
    pub(crate) fn field_retention(&self, field: u16) -> (f64, i32) {
        let own = match self.watch_group(field) {
            Some(g) if g.keep_age_s.is_some() || g.keep_samples.is_some() => (
                g.keep_age_s.unwrap_or(self.keep_age_s),
                g.keep_samples.unwrap_or(self.keep_samples),
            ),
            _ => self.latest_retention(),
        };
        self.aggregate.retention(field, own, self.interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(explicit: bool, age_s: f64, samples: i32) -> Settings {
        let all = crate::config::selector::parse("-d", "f").unwrap();
        Settings {
            gpus: all.clone(),
            switches: all.clone(),
            cpus: all,
            compute_instances: false,
            use_old_namespace: false,
            replace_blanks_in_model_name: false,
            hostname: None,
            interval_ms: 30_000,
            xid_window_ms: 300_000,
            clock_events_window_ms: 300_000,
            keep_age_s: age_s,
            keep_samples: samples,
            keep_explicit: explicit,
            fake_gpus: false,
            watch_groups: Vec::new(),
            emulate: Default::default(),
            low_cardinality: false,
            profiling: Default::default(),
            aggregate: Default::default(),
        }
    }

    /// A config-file watch group with its own retention (version 2's collection
    /// `sources.dcgm.watch`, version 1's `retention`) overrides each property it states.
    #[test]
    fn a_watch_groups_retention_applies_to_its_fields_only() {
        let mut s = settings(false, 600.0, 0);
        s.watch_groups = vec![
            WatchGroup {
                name: "power".into(),
                interval_ms: 100,
                fields: vec!["DCGM_FI_DEV_POWER_*".into()],
                keep_age_s: Some(0.0),
                keep_samples: Some(2),
            },
            WatchGroup {
                name: "temp".into(),
                interval_ms: 200,
                fields: vec!["DCGM_FI_DEV_GPU_TEMP".into()],
                keep_age_s: None,
                keep_samples: Some(9),
            },
        ];
        assert_eq!(s.field_retention(155), (0.0, 2));
        assert_eq!(s.watch_interval_ms(155), 100);
        assert_eq!(s.field_retention(150), (600.0, 9));
        assert_eq!(s.field_retention(100), s.latest_retention());
        assert_eq!(s.watch_interval_ms(100), 30_000);
    }

    #[test]
    fn by_default_latest_fields_keep_a_few_samples_and_windows_their_window() {
        // The defaults of the flags (600 s, no sample limit), not given by the user.
        let s = settings(false, 600.0, 0);
        assert_eq!(s.latest_retention(), (0.0, LATEST_KEEP_SAMPLES));
        // 5 min window + one 30 s interval, by age: the window's samples, however many.
        assert_eq!(s.window_retention(300_000), (330.0, 0));
        assert_eq!(s.window_retention(0), (30.0, 0));
    }

    #[test]
    fn a_retention_the_user_sets_wins() {
        let s = settings(true, 600.0, 0);
        assert_eq!(s.latest_retention(), (600.0, 0));
        // Never shorter than a window that is read back.
        assert_eq!(s.window_retention(300_000), (600.0, 0));
        assert_eq!(s.window_retention(900_000), (900.0, 0));
        let s = settings(true, 0.0, 5);
        assert_eq!(s.latest_retention(), (0.0, 5));
        assert_eq!(s.window_retention(300_000), (300.0, 0));
    }
}
