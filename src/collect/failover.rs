//! `--backend auto`'s failover policy: which GPUs NVML may stand in for while DCGM is lost
//! ([`Covers`]), and how NVML's own failures are retried ([`Retry`], [`stuck_limit`]). The
//! loop that runs NVML on its worker and publishes its page is the lifecycle's
//! (`lifecycle::app::fallback`); the page itself is `collect::nvml`'s, limited to the GPUs
//! covered (`NvmlCollector::start_on`'s `only`).
//!
//! NVML sees this machine's GPUs. The embedded engine's are the same by construction; a
//! remote engine (TCP, unix socket, vsock) may be another machine's, so NVML stands in for
//! it only for the GPUs whose UUIDs it reported when its watches were last built, and not
//! at all before it has answered once or where it shares none with NVML.
//!
//! A hung NVML (a driver in trouble) is treated as a hung DCGM: the worker is let go, at
//! most [`MAX_STUCK`] are let go while still stuck, and tries back off.

use dcgm_sys::ConnectTarget;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// NVML collections made while waiting for DCGM are bounded by this at most, so that a
/// stuck NVML call cannot hold the loop longer than one interval.
pub(crate) const MIN_DEADLINE: Duration = Duration::from_secs(1);
/// NVML workers still stuck in a call beyond which no new one is started (each holds a
/// thread until its call returns).
const MAX_STUCK: usize = 4;
/// The longest wait between NVML tries after failures (or the interval, if longer).
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Whether another NVML worker may start while `stuck` are still stuck in a call; the
/// error says why not.
pub(crate) fn stuck_limit(stuck: usize) -> Result<(), String> {
    if stuck >= MAX_STUCK {
        return Err(format!(
            "{MAX_STUCK} NVML calls are stuck: no new NVML worker until one returns"
        ));
    }
    Ok(())
}

/// The GPUs (UUIDs) a DCGM engine's watches were last built on, recorded by the build job:
/// what NVML may stand in for.
#[derive(Clone, Default)]
pub(crate) struct EngineGpus(Arc<Mutex<Option<Vec<String>>>>);

impl EngineGpus {
    pub(crate) fn set(&self, uuids: Vec<String>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(uuids);
    }

    fn get(&self) -> Option<Vec<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Which GPUs NVML may serve in the engine's place.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Covers {
    /// The embedded engine's: this machine's, all of them.
    All,
    /// A remote engine that has not said which GPUs it has yet.
    Unknown,
    /// These of a remote engine's GPUs, which NVML lists too (none: another machine's).
    Gpus(Vec<String>),
}

impl Covers {
    /// `remote`: the engine's address (`None`: the embedded engine); `local`: this
    /// machine's GPUs as NVML listed them.
    fn of(remote: Option<&ConnectTarget>, engine: Option<Vec<String>>, local: &[String]) -> Covers {
        if remote.is_none() {
            return Covers::All;
        }
        match engine {
            None => Covers::Unknown,
            Some(engine) => {
                Covers::Gpus(engine.into_iter().filter(|u| local.contains(u)).collect())
            }
        }
    }

    /// The GPUs the NVML collector is limited to (`None`: every GPU NVML lists).
    pub(crate) fn only(&self) -> Option<Vec<String>> {
        match self {
            Covers::All => None,
            Covers::Unknown => Some(Vec::new()),
            Covers::Gpus(g) => Some(g.clone()),
        }
    }

    pub(crate) fn serves(&self) -> bool {
        match self {
            Covers::All => true,
            Covers::Unknown => false,
            Covers::Gpus(g) => !g.is_empty(),
        }
    }
}

/// What NVML may stand in for, as last looked at.
#[derive(Default)]
pub(crate) struct Coverage {
    /// What the engine's GPUs allowed when last looked at (`None` before).
    covers: Option<Covers>,
    /// The engine's GPUs when last looked at, for the line logged when they change.
    engine: Option<Vec<String>>,
}

impl Coverage {
    /// Looks at the GPUs the engine last reported (`remote`: its address, `None` for the
    /// embedded engine; `local`: this machine's NVML GPUs) and says once when what NVML may
    /// stand in for changes. True when it changed: a collector built for other GPUs must go.
    pub(crate) fn observe(
        &mut self,
        remote: Option<&ConnectTarget>,
        gpus: &EngineGpus,
        local: &[String],
    ) -> bool {
        let covers = Covers::of(remote, gpus.get(), local);
        if self.covers.as_ref() == Some(&covers) {
            return false;
        }
        let engine = gpus.get();
        if let (Some(t), Some(gpus)) = (remote, &engine) {
            if self.engine.as_ref() != Some(gpus) {
                say_covers(t, gpus, &covers, local.len());
            }
        }
        self.engine = engine;
        self.covers = Some(covers);
        true
    }

    /// Whether NVML may serve now.
    pub(crate) fn serves(&self) -> bool {
        self.covers.as_ref().is_some_and(Covers::serves)
    }

    /// The GPUs the NVML collector is limited to (`None`: every GPU NVML lists).
    pub(crate) fn only(&self) -> Option<Vec<String>> {
        self.covers.as_ref().and_then(Covers::only)
    }
}

/// When NVML is next asked, while it serves or after it failed.
#[derive(Default)]
pub(crate) struct Retry {
    /// When the next NVML page is due while DCGM is away.
    next_due: Option<Instant>,
    /// The wait before the next try after a failure (0: none failed).
    backoff: Duration,
    /// The NVML failure last logged: each different one is logged once.
    failing: Option<String>,
}

impl Retry {
    /// Backing off after a failure: no try before the wait is over.
    pub(crate) fn backing_off(&self) -> bool {
        self.next_due.is_some_and(|t| Instant::now() < t)
    }

    /// A new page is due.
    pub(crate) fn due(&self) -> bool {
        self.next_due.is_some_and(|t| Instant::now() >= t)
    }

    /// NVML served a page: the next is due in one `interval`.
    pub(crate) fn succeeded(&mut self, interval: Duration) {
        self.next_due = Some(Instant::now() + interval);
        self.backoff = Duration::ZERO;
        if self.failing.take().is_some() {
            tracing::info!("NVML answers again");
        }
    }

    /// NVML failed (`why`, logged once while it stays the same): the next try waits,
    /// longer after each failure, from one `interval` up to [`MAX_BACKOFF`].
    pub(crate) fn failed(&mut self, why: String, interval: Duration) {
        if self.failing.as_deref() != Some(why.as_str()) {
            tracing::warn!("NVML failed too: {why}");
            self.failing = Some(why);
        }
        self.backoff = (self.backoff * 2).clamp(interval, MAX_BACKOFF.max(interval));
        self.next_due = Some(Instant::now() + self.backoff);
    }
}

/// The line saying what NVML stands in for, for a remote engine's `gpus`.
fn say_covers(target: &ConnectTarget, gpus: &[String], covers: &Covers, local: usize) {
    let n = gpus.len();
    let s = if n == 1 { "" } else { "s" };
    match covers {
        Covers::Gpus(g) if g.is_empty() => tracing::warn!(
            "NVML failover is off for the host engine at {target}: none of its {n} GPU{s} ({}) \
             is among this machine's {local} NVML GPUs, so they are another machine's; while \
             it is down its series are withdrawn",
            gpus.join(", ")
        ),
        Covers::Gpus(g) if g.len() < n => tracing::info!(
            "NVML stands in for {} of the host engine's {n} GPUs while it is down: the others \
             are not among this machine's NVML GPUs",
            g.len()
        ),
        _ => tracing::info!(
            "NVML stands in for the host engine's {n} GPU{s} while it is down (this machine's, \
             by UUID)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuids(u: &[&str]) -> Vec<String> {
        u.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn nvml_covers_the_embedded_engine_whole_and_a_remote_one_by_uuid() {
        let remote = ConnectTarget::parse("10.0.0.1:5555").unwrap();
        let local = uuids(&["GPU-a", "GPU-b"]);
        assert_eq!(Covers::of(None, None, &local), Covers::All);
        assert_eq!(Covers::of(Some(&remote), None, &local), Covers::Unknown);
        let some = Covers::of(Some(&remote), Some(uuids(&["GPU-b", "GPU-z"])), &local);
        assert_eq!(some, Covers::Gpus(uuids(&["GPU-b"])));
        assert!(some.serves());
        assert_eq!(some.only(), Some(uuids(&["GPU-b"])));
        let none = Covers::of(Some(&remote), Some(uuids(&["GPU-z"])), &local);
        assert!(!none.serves());
        assert!(!Covers::Unknown.serves());
        assert_eq!(Covers::Unknown.only(), Some(Vec::new()));
        assert_eq!(Covers::All.only(), None);
    }

    #[test]
    fn failures_back_off_from_one_interval_to_the_bound() {
        let interval = Duration::from_secs(5);
        let mut r = Retry::default();
        assert!(!r.backing_off() && !r.due());
        let waits: Vec<Duration> = (0..5)
            .map(|_| {
                r.failed("x".into(), interval);
                r.backoff
            })
            .collect();
        assert_eq!(waits, [5, 10, 20, 30, 30].map(Duration::from_secs));
        assert!(r.backing_off());
        r.succeeded(interval);
        assert_eq!(r.backoff, Duration::ZERO);
        assert!(r.failing.is_none());
        assert!(stuck_limit(MAX_STUCK - 1).is_ok());
        assert_eq!(
            stuck_limit(MAX_STUCK).unwrap_err(),
            "4 NVML calls are stuck: no new NVML worker until one returns"
        );
    }
}
