//! Where the counters come from: the `-f` file, or with `-m <namespace>:<name>` key
//! `metrics` of a ConfigMap read through the Kubernetes API. dcgm-exporter reads the
//! ConfigMap at startup (any failure is fatal) and on a reload; we also follow it (a watch,
//! or a `get` every poll period where RBAC refuses the watch: `follow`), so an edit reloads
//! the counters without a signal.

mod follow;

use super::counters::{self, Counters};
use crate::common::kubeapi::{KubeApi, STARTUP_DEADLINE};
use k8s_openapi::api::core::v1::ConfigMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub use follow::{poll_period, POLL_DEFAULT, POLL_ENV};

/// The ConfigMap key holding the CSV, as upstream.
pub const KEY: &str = "metrics";

/// The counters' origin, re-read on every reload.
#[derive(Clone, Debug)]
pub enum CountersSource {
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
    pub fn load(&self) -> Result<Counters, crate::config::file::Error> {
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
    pub fn load_for(
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
    pub fn path(&self) -> Option<&PathBuf> {
        match self {
            CountersSource::File { path, .. } => Some(path),
            CountersSource::ConfigMap { .. } => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            CountersSource::File { path, .. } => path.display().to_string(),
            CountersSource::ConfigMap { name, .. } => name.clone(),
        }
    }
}

/// `-m` as dcgm-exporter splits it: exactly one `:` between namespace and name.
pub fn parse_ref(value: &str) -> Result<(String, String), String> {
    match value.split(':').collect::<Vec<_>>()[..] {
        [ns, name] if !ns.is_empty() && !name.is_empty() => Ok((ns.into(), name.into())),
        _ => Err(format!(
            "-m/--configmap-data {value:?}: expected <namespace>:<name>"
        )),
    }
}

fn metrics_of(cm: &ConfigMap) -> Option<String> {
    cm.data.as_ref()?.get(KEY).cloned()
}

/// Reads the ConfigMap now, then follows it (see `follow`): each change of its `metrics`
/// text is stored in the returned source and announced through `changed` (which triggers a
/// reload). `interval`: the collection interval, which the poll period is never shorter than
/// unless [`POLL_ENV`] says otherwise.
pub fn open(
    api: &KubeApi,
    namespace: &str,
    name: &str,
    interval: Duration,
    changed: impl Fn() + Send + Sync + 'static,
) -> Result<CountersSource, String> {
    let poll = poll_period(interval, std::env::var(POLL_ENV).ok().as_deref())?;
    let label = format!("configmap {namespace}/{name} key {KEY}");
    let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(api.client(), namespace);
    let cm = api.block_on(STARTUP_DEADLINE, async {
        configmaps
            .get(name)
            .await
            .map_err(|e| format!("-m {namespace}:{name}: cannot read the ConfigMap: {e}"))
    })?;
    let text = metrics_of(&cm)
        .ok_or_else(|| format!("-m {namespace}:{name}: the ConfigMap has no key {KEY:?}"))?;
    // Validated now so that a bad list stops the start, as a bad -f file does.
    counters::parse_str(&label, &text).map_err(|e| e.to_string())?;
    let shared = Arc::new(RwLock::new(text));
    let target = follow::Target {
        api: configmaps,
        name: name.to_string(),
        what: label.clone(),
        latest: shared.clone(),
        changed: Box::new(changed),
        poll,
    };
    api.spawn(follow::follow(target, cm.metadata.resource_version.clone()));
    Ok(CountersSource::ConfigMap {
        name: label,
        text: shared,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let e = parse_ref(bad).unwrap_err();
            assert!(e.contains("-m/--configmap-data"), "{bad}: {e}");
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
