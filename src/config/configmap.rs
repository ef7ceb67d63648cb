//! Where the counters come from: the `-f` file, or with `-m <namespace>:<name>` key
//! `metrics` of a ConfigMap read through the Kubernetes API. dcgm-exporter reads the
//! ConfigMap at startup (any failure is fatal) and on a reload; we also follow it (a watch,
//! or a `get` every [`poll_period`] where RBAC refuses the watch:
//! `lifecycle::watchers::counters_configmap`), so an edit reloads the counters without a
//! signal.

use super::counters::{self, Counters};
use k8s_openapi::api::core::v1::ConfigMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The variable that sets the poll period (a Go duration, at least 1s).
pub(crate) const POLL_ENV: &str = "DCGM_EXPORTER_CONFIGMAP_POLL_INTERVAL";
/// The poll period without [`POLL_ENV`], unless the collection interval is longer.
pub(crate) const POLL_DEFAULT: Duration = Duration::from_secs(60);

/// The ConfigMap key holding the CSV, as upstream.
pub(crate) const KEY: &str = "metrics";

/// The counters' origin, re-read on every reload.
#[derive(Clone, Debug)]
pub(crate) enum CountersSource {
    /// A CSV (or `--config-file` YAML) on disk; `given`: named by a flag, env var or the
    /// config file, else a missing default path means the built-in default set.
    File {
        path: PathBuf,
        given: bool,
        /// Picks the built-in set.
        emulate: crate::config::emulate::UpstreamVersion,
    },
    /// The latest `metrics` text of the ConfigMap (kept current by its watch or poll).
    ConfigMap {
        name: String,
        text: Arc<RwLock<String>>,
    },
}

impl CountersSource {
    pub(crate) fn load(&self) -> Result<Counters, crate::config::file::Error> {
        match self {
            CountersSource::File {
                path,
                given,
                emulate,
            } => crate::config::file::load_counters(path, *given, *emulate),
            CountersSource::ConfigMap { name, text } => {
                let text = text.read().unwrap_or_else(|p| p.into_inner()).clone();
                Ok(counters::parse_str(name, &text)?)
            }
        }
    }

    /// [`CountersSource::load`] read for the emulated release: in 4.9.0 mode 4.8.x names
    /// become 4.9.0's (one warning per renamed row, see `config::rename`) and a missing
    /// default file means the built-in 4.9.0 set.
    pub(crate) fn load_for(
        &self,
        version: crate::config::emulate::UpstreamVersion,
    ) -> Result<Counters, crate::config::file::Error> {
        use crate::config::rename::{self, Names};
        let names = rename::names_of(version);
        if let (
            CountersSource::File {
                path, given: false, ..
            },
            Names::V4_9_0,
        ) = (self, names)
        {
            if std::fs::metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
                tracing::info!(
                    "no counters file at {} (the -f default); using the built-in 4.9.0 default \
                     counter set",
                    path.display()
                );
                return Ok(rename::builtin_default_4_9_0()?);
            }
        }
        let counters = self.load()?;
        Ok(rename::for_generation(counters, &self.describe(), names))
    }

    /// The file to watch for changes on disk (a ConfigMap is followed through the API).
    pub(crate) fn path(&self) -> Option<&PathBuf> {
        match self {
            CountersSource::File { path, .. } => Some(path),
            CountersSource::ConfigMap { .. } => None,
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            CountersSource::File { path, .. } => path.display().to_string(),
            CountersSource::ConfigMap { name, .. } => name.clone(),
        }
    }
}

/// `-m`'s reference or [`POLL_ENV`] refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// `-m` that is not `<namespace>:<name>`.
    #[error("-m/--configmap-data {0:?}: expected <namespace>:<name>")]
    Ref(String),
    #[error("{env}: {0}", env = POLL_ENV)]
    PollPeriod(#[source] crate::config::duration::Error),
    #[error("{env} {0:?}: at least 1s", env = POLL_ENV)]
    PollTooShort(String),
}

/// `-m` as dcgm-exporter splits it: exactly one `:` between namespace and name.
pub(crate) fn parse_ref(value: &str) -> Result<(String, String), Error> {
    match value.split(':').collect::<Vec<_>>()[..] {
        [ns, name] if !ns.is_empty() && !name.is_empty() => Ok((ns.into(), name.into())),
        _ => Err(Error::Ref(value.to_string())),
    }
}

/// The CSV text of the ConfigMap, `None` without the key.
pub(crate) fn metrics_of(cm: &ConfigMap) -> Option<String> {
    cm.data.as_ref()?.get(KEY).cloned()
}

/// How often the ConfigMap is read when it cannot be watched: [`POLL_ENV`] if set, else
/// every 60 s or every collection interval, whichever is longer.
pub(crate) fn poll_period(interval: Duration, env: Option<&str>) -> Result<Duration, Error> {
    let Some(value) = env else {
        return Ok(interval.max(POLL_DEFAULT));
    };
    let period = crate::config::duration::parse(value).map_err(Error::PollPeriod)?;
    if period < Duration::from_secs(1) {
        return Err(Error::PollTooShort(value.to_string()));
    }
    Ok(period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_period_is_a_minute_or_the_interval_unless_the_variable_says() {
        let s = Duration::from_secs;
        assert_eq!(poll_period(s(30), None), Ok(s(60)));
        assert_eq!(poll_period(s(300), None), Ok(s(300)));
        assert_eq!(poll_period(s(30), Some("5s")), Ok(s(5)));
        assert_eq!(poll_period(s(300), Some("1m30s")), Ok(s(90)));
        for short in ["500ms", "0"] {
            let e = poll_period(s(30), Some(short));
            assert_eq!(e, Err(Error::PollTooShort(short.into())), "{short}");
        }
        use crate::config::duration::Error as D;
        assert_eq!(
            poll_period(s(30), Some("soon")),
            Err(Error::PollPeriod(D::NotADuration("soon".into())))
        );
        assert_eq!(
            poll_period(s(30), Some("-1s")),
            Err(Error::PollPeriod(D::Negative("-1s".into())))
        );
    }

    #[test]
    fn counters_are_read_for_the_emulated_release() {
        use crate::config::emulate::UpstreamVersion::{V4_8_4, V4_9_0};
        let names = |c: &Counters| c.all.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        let missing = |emulate| CountersSource::File {
            path: "/nonexistent/default-counters.csv".into(),
            given: false,
            emulate,
        };
        // A missing default file: each release's built-in set.
        let v49 = missing(V4_9_0).load_for(V4_9_0).unwrap();
        assert_eq!(names(&v49)[0], "DCGM_FI_DEV_SM_CLOCK_HERTZ");
        assert!(names(&v49).contains(&"DCGM_FI_DEV_FB_CAPACITY_BYTES".to_string()));
        assert!(v49.warnings.is_empty());
        assert_eq!(
            names(&missing(V4_8_4).load_for(V4_8_4).unwrap())[0],
            "DCGM_FI_DEV_SM_CLOCK"
        );
        // A file that was named must exist, in every mode.
        let given = CountersSource::File {
            path: "/nonexistent/c.csv".into(),
            given: true,
            emulate: V4_9_0,
        };
        let e = given.load_for(V4_9_0).unwrap_err();
        assert!(
            matches!(
                &e,
                crate::config::file::Error::Counters(counters::CountersError::Read { path, .. })
                    if path == "/nonexistent/c.csv"
            ),
            "{e}"
        );
        // A 4.8.x file in 4.9.0 mode: renamed, a warning per row naming the file and line.
        let old = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/default-counters.csv");
        let file = CountersSource::File {
            path: old.clone(),
            given: true,
            emulate: V4_9_0,
        };
        let c = file.load_for(V4_9_0).unwrap();
        assert_eq!(names(&c)[0], "DCGM_FI_DEV_SM_CLOCK_HERTZ");
        assert_eq!(c.warnings.len(), 23, "{:?}", c.warnings);
        let line = std::fs::read_to_string(&old)
            .unwrap()
            .lines()
            .position(|l| l.starts_with("DCGM_FI_DEV_SM_CLOCK,"))
            .unwrap()
            + 1;
        assert!(c.warnings[0].starts_with(&format!(
            "{}:{line}: DCGM_FI_DEV_SM_CLOCK (MHz)",
            old.display()
        )));
        assert!(file.load_for(V4_8_4).unwrap().warnings.is_empty());
    }

    #[test]
    fn the_reference_is_namespace_colon_name() {
        assert_eq!(
            parse_ref("gpu:exporter-metrics-config-map").unwrap(),
            ("gpu".to_string(), "exporter-metrics-config-map".to_string())
        );
        for bad in ["gpu", "gpu:a:b", ":name", "ns:", ""] {
            assert_eq!(parse_ref(bad), Err(Error::Ref(bad.into())), "{bad}");
        }
    }

    #[test]
    fn a_configmap_source_parses_the_latest_text_and_names_itself_in_errors() {
        let text = Arc::new(RwLock::new(
            "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n".to_string(),
        ));
        let src = CountersSource::ConfigMap {
            name: "configmap gpu/m key metrics".into(),
            text: text.clone(),
        };
        assert_eq!(src.load().unwrap().all.len(), 1);
        *text.write().unwrap() = "DCGM_FI_NOPE, gauge, x\n".into();
        let e = src.load().unwrap_err();
        assert!(
            matches!(
                &e,
                crate::config::file::Error::Counters(counters::CountersError::Line { file, line: 1, .. })
                    if file == "configmap gpu/m key metrics"
            ),
            "{e}"
        );
    }
}
