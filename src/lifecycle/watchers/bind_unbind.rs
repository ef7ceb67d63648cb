//! `--enable-gpu-bind-unbind-watch`: polls DCGM_FI_BIND_UNBIND_EVENT (a global field, read
//! through a GPU entity as dcgm-exporter does) every `--gpu-bind-unbind-poll-interval`.
//! DCGM records 1 (system reinitializing) when a GPU's driver is unbound or bound and 2
//! (reinitialization completed) when it is done; on a new 2 the node is rediscovered and
//! the watches rebuilt. The state at start is not an event: only samples newer than it count.
//!
//! The watch lives in the worker that owns the collector's DCGM session ([`WatchSlot`]), and
//! each poll is a job there with a deadline: it always uses the session the collection
//! loop uses, never a clone the loop has given up on, and a hung DCGM cannot hold this
//! thread. When the loop reconnects (a restarted host engine, an embedded engine started
//! again after a lost library) it sets the watch up on the new session before discovering
//! the node, so an event is either before the discovery (which then sees its result) or
//! seen by the watch; a poll that finds no watch (its set-up failed) sets it up. A failing
//! poll is a warning and a /health line until a poll works again.

use crate::lifecycle::control::{Control, Trigger};
use crate::runtime::supervisor::{Beat, Supervisor};
use crate::runtime::worker::Current;
use dcgm_sys::{Entity, FieldGroup, Group, Reading, Session, Value};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// DCGM_FI_SYSTEM_GPU_BIND_EVENT (alias DCGM_FI_BIND_UNBIND_EVENT).
pub(crate) const FIELD: u16 = 6;
const REINITIALIZING: i64 = 1;
const REINITIALIZED: i64 = 2;
/// Longest wait for one poll (or for setting the watch up) in the worker.
const POLL_DEADLINE: Duration = Duration::from_secs(10);

/// Parses the poll interval; a bad value falls back to 1 s with a warning, as upstream.
pub(crate) fn poll_interval(flag: &str) -> Duration {
    match crate::config::duration::parse(flag) {
        Ok(d) if !d.is_zero() => d,
        _ => {
            tracing::warn!(
                "--gpu-bind-unbind-poll-interval '{flag}' is not a positive duration; using 1s"
            );
            Duration::from_secs(1)
        }
    }
}

/// The watch on one session; kept in the worker's state.
pub(crate) struct Watch {
    session: Session,
    gpu: Entity,
    interval: Duration,
    // Kept for the watch's lifetime.
    handles: (Group, FieldGroup),
    last_ts: i64,
}

impl Watch {
    fn start(session: Session, interval: Duration) -> dcgm_sys::Result<Watch> {
        let gpus = session.gpus(false)?;
        let gpu = Entity::gpu(gpus.first().copied().unwrap_or(0));
        let name = format!("dcgm-exporter-bind-unbind-{}", std::process::id());
        let group = session.create_group(&name, &[gpu])?;
        let fg = session.create_field_group(&format!("{name}-fields"), &[FIELD])?;
        session.watch(&group, &fg, interval.as_micros() as i64, 0.0, 0)?;
        session.update_all_fields(true)?;
        let mut w = Watch {
            session,
            gpu,
            interval,
            handles: (group, fg),
            last_ts: 0,
        };
        w.last_ts = w.read()?.map_or(0, |(ts, _)| ts);
        Ok(w)
    }

    /// Makes the watch again after a rebuild. DCGM keys a watch by (entity, field,
    /// connection): the old collector's unwatch of a field group that held this field (a
    /// counters file that listed it and no longer does), or a refused watch of a new build
    /// that held it, removed this watch too, and the field would then read its last sample
    /// forever.
    pub(crate) fn reassert(&self) -> dcgm_sys::Result<()> {
        let (group, fg) = &self.handles;
        self.session
            .watch(group, fg, self.interval.as_micros() as i64, 0.0, 0)
    }

    /// The latest (timestamp, state), if there is one.
    fn read(&self) -> dcgm_sys::Result<Option<(i64, i64)>> {
        let r = self.session.latest_values(&[self.gpu], &[FIELD], false)?;
        Ok(r.into_iter().find_map(|v| match v.reading {
            Reading::Value(Value::Int64(s)) => Some((v.ts_us, s)),
            _ => None,
        }))
    }

    /// Some((timestamp, state)) when a new event arrived since the last poll.
    fn poll(&mut self) -> dcgm_sys::Result<Option<(i64, i64)>> {
        self.session.update_all_fields(true)?;
        match self.read()? {
            Some((ts, state)) if ts > self.last_ts && state != 0 => {
                self.last_ts = ts;
                Ok(Some((ts, state)))
            }
            _ => Ok(None),
        }
    }
}

/// Why a poll (or setting the watch up) failed.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    #[error("no DCGM session")]
    NoSession,
    #[error("cannot watch field {field}: {0}", field = FIELD)]
    Watch(#[source] dcgm_sys::Error),
    #[error("polling field {field}: {0}", field = FIELD)]
    Poll(#[source] dcgm_sys::Error),
}

/// Why the watch did not start ([`spawn`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The library cannot watch the field: the flag's error.
    #[error("--enable-gpu-bind-unbind-watch: {0}")]
    Refused(#[source] PollError),
    #[error("cannot start the bind/unbind watch thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// The worker's state, which holds the session and this watch beside the collector's
/// watches (`lifecycle::app::Dcgm`).
pub(crate) trait WatchSlot: 'static {
    fn session(&self) -> Option<Session>;
    fn watch(&mut self) -> &mut Option<Watch>;
}

/// One poll, run in the worker: sets the watch up on the worker's session when it has
/// none (first poll, or after a reconnect), else reads it. A failed watch is dropped, so
/// the next poll sets it up again.
pub(crate) fn poll_in<D: WatchSlot>(
    d: &mut D,
    interval: Duration,
) -> Result<Option<(i64, i64)>, PollError> {
    let session = d.session();
    let slot = d.watch();
    let watch = match slot.as_mut() {
        Some(w) => w,
        None => {
            let session = session.ok_or(PollError::NoSession)?;
            // A DCGM before 4.5.0 on either side has no such field: the flag is left out.
            if crate::collect::versions::left_out(&session, FIELD, "--enable-gpu-bind-unbind-watch")
            {
                return Ok(None);
            }
            let w = Watch::start(session, interval).map_err(PollError::Watch)?;
            *slot = Some(w);
            return Ok(None);
        }
    };
    watch.poll().map_err(|e| {
        *slot = None;
        PollError::Poll(e)
    })
}

/// Sets the watch up on the current worker (a refusal here is the flag's: the library
/// cannot watch the field), then polls it on a supervised thread of its own. Without an
/// engine yet (a remote one not up, or one that does not answer) the polls set the watch
/// up once the collection loop has connected, like everything else that needs the engine.
pub(crate) fn spawn<D: WatchSlot>(
    current: Current<D>,
    interval: Duration,
    control: Sender<Control>,
) -> Result<(), Error> {
    let first = current.call(Instant::now() + POLL_DEADLINE, move |d: &mut D| {
        poll_in(d, interval)
    });
    match first {
        Ok(r) => {
            r.map_err(Error::Refused)?;
        }
        Err(e) => tracing::warn!(
            "--enable-gpu-bind-unbind-watch: {e}; watching once DCGM answers (retried every {interval:?})"
        ),
    }
    tracing::info!("watching for GPU bind/unbind events every {:?}", interval);
    // A round is one poll (bounded by its deadline) and one wait.
    let stall_after = (interval + POLL_DEADLINE) * 2;
    Supervisor::global()
        .spawn("bind-unbind-watch", Some(stall_after), move |beat| loop {
            std::thread::sleep(interval);
            if !poll_once(&current, interval, &control, beat) {
                return Ok(());
            }
        })
        .map(|_| ())
        .map_err(Error::Thread)
}

/// One poll through the worker; false once the collection loop is gone.
fn poll_once<D: WatchSlot>(
    current: &Current<D>,
    interval: Duration,
    control: &Sender<Control>,
    beat: &Beat,
) -> bool {
    let polled = current
        .call(Instant::now() + POLL_DEADLINE, move |d: &mut D| {
            poll_in(d, interval)
        })
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    match polled {
        Ok(Some((ts, REINITIALIZING))) => tracing::info!(
            event_state = REINITIALIZING,
            timestamp = ts,
            "GPU bind/unbind: the system is reinitializing"
        ),
        Ok(Some((ts, REINITIALIZED))) => {
            tracing::info!(
                event_state = REINITIALIZED,
                timestamp = ts,
                "GPU bind/unbind: reinitialization completed; rediscovering GPUs and rebuilding watches"
            );
            if control.send(Control::Reload(Trigger::BindUnbind)).is_err() {
                return false;
            }
        }
        Ok(Some((ts, other))) => tracing::debug!(
            event_state = other,
            timestamp = ts,
            "GPU bind/unbind: unknown event state"
        ),
        Ok(None) => {}
        Err(e) => {
            beat.failing(format!("GPU bind/unbind watch: {e}"));
            return true;
        }
    }
    beat.alive();
    true
}

#[cfg(test)]
mod tests {
    use super::{poll_interval, Error, PollError};
    use std::time::Duration;

    #[test]
    fn a_watch_that_cannot_start_names_the_flag_or_the_thread() {
        let refused = Error::Refused(PollError::NoSession);
        assert!(matches!(refused, Error::Refused(PollError::NoSession)));
        // The fatal line keeps the words it had as text.
        assert_eq!(
            refused.to_string(),
            "--enable-gpu-bind-unbind-watch: no DCGM session"
        );
        assert_eq!(
            Error::Thread(std::io::Error::other("no memory")).to_string(),
            "cannot start the bind/unbind watch thread: no memory"
        );
    }

    #[test]
    fn a_bad_poll_interval_falls_back_to_one_second() {
        assert_eq!(poll_interval("250ms"), Duration::from_millis(250));
        assert_eq!(poll_interval("2s"), Duration::from_secs(2));
        for bad in ["", "fast", "0s", "-1s", "5"] {
            assert_eq!(poll_interval(bad), Duration::from_secs(1), "{bad}");
        }
    }
}
