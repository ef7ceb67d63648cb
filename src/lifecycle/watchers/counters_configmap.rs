//! The `-m` ConfigMap: read at start-up ([`open`]), then followed. First a watch of that
//! one object from the resourceVersion the read returned (RBAC verbs `get` and `watch`; no
//! `list`). When RBAC refuses the watch (NVIDIA's chart grants configmaps `get` only, the
//! GPU operator `get` and `list`), one warning, then a `get` every poll period
//! ([`configmap::poll_period`]), backing off while a `get` fails: never a request per
//! second. A watch event and a poll alike go through [`Target::apply`], the one reload
//! path.

use crate::config::configmap::{self, CountersSource, KEY};
use crate::config::counters;
use crate::runtime::kubeapi::{ApiError, ErrorStreak, KubeApi, STARTUP_DEADLINE};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::WatchParams;
use kube::core::WatchEvent;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// A failing `get` waits at most this many poll periods before the next.
const POLL_BACKOFF_CAP: u32 = 16;
/// A watch that failed is opened again after 1 s, doubling to 30 s.
const WATCH_RETRY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));
/// How long the server may keep one watch open before we open the next.
const WATCH_TIMEOUT_S: u32 = 290;

/// Why the `-m` ConfigMap could not be read at start-up ([`open`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// [`configmap::POLL_ENV`] refused.
    #[error(transparent)]
    PollPeriod(#[from] configmap::Error),
    #[error("no answer from the Kubernetes API within {0:?}")]
    NoAnswer(Duration),
    /// Boxed: `kube::Error` is large, and start-up's error holds this one.
    #[error("-m {namespace}:{name}: cannot read the ConfigMap: {source}")]
    Read {
        namespace: String,
        name: String,
        source: Box<kube::Error>,
    },
    #[error("-m {namespace}:{name}: the ConfigMap has no key {key:?}", key = KEY)]
    NoKey { namespace: String, name: String },
    /// Its `metrics` text is not a counters list.
    #[error(transparent)]
    Counters(#[from] counters::CountersError),
}

/// Reads the ConfigMap now, then follows it (see `follow`): each change of its `metrics`
/// text is stored in the returned source and announced through `changed` (which triggers a
/// reload). `interval`: the collection interval, which the poll period is never shorter than
/// unless [`configmap::POLL_ENV`] says otherwise.
pub(crate) fn open(
    api: &KubeApi,
    namespace: &str,
    name: &str,
    interval: Duration,
    changed: impl Fn() + Send + Sync + 'static,
) -> Result<CountersSource, Error> {
    let poll =
        configmap::poll_period(interval, std::env::var(configmap::POLL_ENV).ok().as_deref())?;
    let label = format!("configmap {namespace}/{name} key {KEY}");
    let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(api.client(), namespace);
    let cm = api
        .block_on(STARTUP_DEADLINE, configmaps.get(name))
        .ok_or(Error::NoAnswer(STARTUP_DEADLINE))?
        .map_err(|e| Error::Read {
            namespace: namespace.to_string(),
            name: name.to_string(),
            source: Box::new(e),
        })?;
    let text = configmap::metrics_of(&cm).ok_or_else(|| Error::NoKey {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })?;
    // Validated now so that a bad list stops the start, as a bad -f file does.
    counters::parse_str(&label, &text)?;
    let shared = Arc::new(RwLock::new(text));
    let target = Target {
        api: configmaps,
        name: name.to_string(),
        what: label.clone(),
        latest: shared.clone(),
        changed: Box::new(changed),
        poll,
    };
    api.spawn(follow(target, cm.metadata.resource_version.clone()));
    Ok(CountersSource::ConfigMap {
        name: label,
        text: shared,
    })
}

/// The ConfigMap followed and where what is read goes.
pub(crate) struct Target {
    pub api: kube::Api<ConfigMap>,
    pub name: String,
    /// `configmap NS/NAME key metrics`, for log lines.
    pub what: String,
    /// The latest `metrics` text, which the counters are loaded from.
    pub latest: Arc<RwLock<String>>,
    /// Asks for a reload.
    pub changed: Box<dyn Fn() + Send + Sync>,
    /// See [`configmap::poll_period`].
    pub poll: Duration,
}

impl Target {
    /// Stores the object's `metrics` text and asks for a reload when it changed; false when
    /// the key is gone (the counters in use stay).
    fn apply(&self, cm: &ConfigMap) -> bool {
        let Some(text) = configmap::metrics_of(cm) else {
            return false;
        };
        let mut current = self.latest.write().unwrap_or_else(|p| p.into_inner());
        if *current != text {
            *current = text;
            drop(current);
            tracing::info!("{} changed: reloading the counters", self.what);
            (self.changed)();
        }
        true
    }

    /// [`Target::apply`] for a watch event or a re-read: a missing key is said each time.
    fn apply_or_warn(&self, cm: &ConfigMap) {
        if !self.apply(cm) {
            tracing::warn!(
                "{}: key \"metrics\" is gone; keeping the counters in use",
                self.what
            );
        }
    }

    async fn get(&self) -> Result<ConfigMap, ApiError> {
        Ok(self.api.get(&self.name).await?)
    }
}

/// Watches from `rv` (None: read the object again first) for the life of the process, or
/// polls once RBAC refuses a verb the watch needs.
pub(crate) async fn follow(t: Target, mut rv: Option<String>) {
    let mut pause = Pause::new(WATCH_RETRY.0, WATCH_RETRY.1);
    let mut streak = ErrorStreak::default();
    loop {
        let (verb, step) = match rv.as_mut() {
            Some(from) => (Verb::Watch, watch_once(&t, from).await),
            None => (Verb::Get, reread(&t, &mut rv).await),
        };
        match step {
            Ok(true) => {
                pause.reset();
                streak.ok(&t.what);
            }
            Ok(false) => tokio::time::sleep(pause.next()).await,
            Err(ApiError::Forbidden(why)) => return poll(t, verb, &why).await,
            Err(ApiError::Gone(_)) => rv = None,
            Err(e) => {
                streak.error(&t.what, &e);
                tokio::time::sleep(pause.next()).await;
            }
        }
    }
}

/// Reads the object again (its resourceVersion was too old to watch from). Ok(false): not
/// progress of a watch, so a server answering 410 again and again is asked ever more slowly.
async fn reread(t: &Target, rv: &mut Option<String>) -> Result<bool, ApiError> {
    let cm = t.get().await?;
    let Some(version) = cm.metadata.resource_version.clone() else {
        return Err(ApiError::Other(
            "the ConfigMap has no resourceVersion".into(),
        ));
    };
    t.apply_or_warn(&cm);
    *rv = Some(version);
    Ok(false)
}

/// One watch request until the server ends it: Ok(whether it made progress: an event, or
/// open a while), or the error that ended it. `rv` follows the events.
async fn watch_once(t: &Target, rv: &mut String) -> Result<bool, ApiError> {
    let params = WatchParams::default()
        .fields(&format!("metadata.name={}", t.name))
        .timeout(WATCH_TIMEOUT_S);
    let opened = Instant::now();
    let mut events = t.api.watch(&params, rv).await?.boxed();
    let mut progressed = false;
    while let Some(event) = events.next().await {
        let cm = match event? {
            WatchEvent::Added(cm) | WatchEvent::Modified(cm) => {
                t.apply_or_warn(&cm);
                cm
            }
            WatchEvent::Deleted(cm) => {
                tracing::warn!(
                    "{}: the ConfigMap was deleted; keeping the counters in use",
                    t.what
                );
                cm
            }
            WatchEvent::Bookmark(b) => {
                *rv = b.metadata.resource_version;
                progressed = true;
                continue;
            }
            WatchEvent::Error(status) => return Err(ApiError::of_status(&status)),
        };
        if let Some(v) = cm.metadata.resource_version {
            *rv = v;
        }
        progressed = true;
    }
    Ok(progressed || opened.elapsed() >= WATCH_RETRY.1)
}

/// What one poll's `get` found; a change of it is logged once.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Read,
    NoKey,
    Forbidden(String),
    /// 404, no answer, a server error.
    Failed(String),
}

impl Outcome {
    fn same_state(&self, other: &Outcome) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// How long the poll waits after `outcome`, the `failures`-th failed `get` in a row (0
/// after one that read): a period after a read; after a failure 2, 4, 8 periods, after a
/// refusal 4, 8 periods, both up to 16 (16 min at the default period).
fn next_wait(period: Duration, outcome: &Outcome, failures: u32) -> Duration {
    let doublings = match outcome {
        Outcome::Read | Outcome::NoKey => return period,
        Outcome::Failed(_) => failures,
        Outcome::Forbidden(_) => failures.saturating_add(1),
    };
    period * 2u32.saturating_pow(doublings).min(POLL_BACKOFF_CAP)
}

/// The request a refusal answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Watch,
    /// The re-read after a 410.
    Get,
}

/// Reads the ConfigMap every period for the life of the process, RBAC having refused the
/// `refused` request (`why`: the server's words).
async fn poll(t: Target, refused: Verb, why: &str) {
    let (mut last, mut failures) = if refused == Verb::Watch {
        tracing::warn!(
            "{}: watching it is forbidden by RBAC: the service account lacks verb \"watch\" on \
             configmaps ({why}); reading it with get every {:?} instead (an edit applies at \
             the next read); grant get and watch to follow edits at once",
            t.what,
            t.poll
        );
        (Outcome::Read, 0)
    } else {
        (Outcome::Forbidden(why.to_string()), 1)
    };
    let mut wait = next_wait(t.poll, &last, failures);
    if failures > 0 {
        log_change(&t.what, &last, wait);
    }
    loop {
        tokio::time::sleep(wait).await;
        let now = match t.get().await {
            Ok(cm) if t.apply(&cm) => Outcome::Read,
            Ok(_) => Outcome::NoKey,
            Err(ApiError::Forbidden(why)) => Outcome::Forbidden(why),
            Err(e) => Outcome::Failed(e.to_string()),
        };
        failures = match now {
            Outcome::Read | Outcome::NoKey => 0,
            _ => failures.saturating_add(1),
        };
        wait = next_wait(t.poll, &now, failures);
        if !now.same_state(&last) {
            log_change(&t.what, &now, wait);
        }
        last = now;
    }
}

fn log_change(what: &str, now: &Outcome, wait: Duration) {
    match now {
        Outcome::Read => tracing::info!("{what}: reading it works again"),
        Outcome::NoKey => {
            tracing::warn!("{what}: key \"metrics\" is gone; keeping the counters in use")
        }
        Outcome::Forbidden(why) => tracing::warn!(
            "{what}: reading it is forbidden by RBAC: the service account lacks verb \
             \"get\" on configmaps ({why}); keeping the counters in use, next try in \
             {wait:?}, backing off"
        ),
        Outcome::Failed(e) => tracing::warn!(
            "{what}: cannot read it: {e}; keeping the counters in use, next try in {wait:?}, \
             backing off"
        ),
    }
}

/// Exponential back-off between watch attempts.
struct Pause {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Pause {
    fn new(first: Duration, max: Duration) -> Pause {
        Pause {
            first,
            max,
            next: first,
        }
    }

    fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (now * 2).min(self.max);
        now
    }

    fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_get_backs_off_to_minutes_and_a_read_returns_to_the_period() {
        let p = Duration::from_secs(60);
        let min = |m: u64| Duration::from_secs(60 * m);
        let refused = Outcome::Forbidden("no".into());
        let failed = Outcome::Failed("down".into());
        let waits = |o: &Outcome| (1..=5).map(|n| next_wait(p, o, n)).collect::<Vec<_>>();
        assert_eq!(waits(&refused), [min(4), min(8), min(16), min(16), min(16)]);
        assert_eq!(waits(&failed), [min(2), min(4), min(8), min(16), min(16)]);
        assert_eq!(next_wait(p, &refused, u32::MAX), min(16));
        assert_eq!(next_wait(p, &Outcome::Read, 0), p);
        assert_eq!(next_wait(p, &Outcome::NoKey, 0), p);
    }

    #[test]
    fn watch_retries_double_to_a_ceiling_and_start_over_after_progress() {
        let mut pause = Pause::new(WATCH_RETRY.0, WATCH_RETRY.1);
        let s = Duration::from_secs;
        let first: Vec<_> = (0..7).map(|_| pause.next()).collect();
        assert_eq!(first, [s(1), s(2), s(4), s(8), s(16), s(30), s(30)]);
        pause.reset();
        assert_eq!(pause.next(), s(1));
    }

    /// The start-up lines an operator reads when `-m` cannot be used (tests/it/kubeapi.rs
    /// finds them in the fatal line): their words are the contract.
    #[test]
    fn a_configmap_that_cannot_be_read_says_which_and_why() {
        let no_key = Error::NoKey {
            namespace: "gpu".into(),
            name: "cm".into(),
        };
        assert_eq!(
            no_key.to_string(),
            "-m gpu:cm: the ConfigMap has no key \"metrics\""
        );
        assert_eq!(
            Error::NoAnswer(STARTUP_DEADLINE).to_string(),
            "no answer from the Kubernetes API within 30s"
        );
    }
}
