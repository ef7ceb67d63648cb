//! `--enable-gpu-bind-unbind-watch`: polls DCGM_FI_BIND_UNBIND_EVENT (a global field, read
//! through a GPU entity as dcgm-exporter does) every `--gpu-bind-unbind-poll-interval`.
//! DCGM records 1 (system reinitializing) when a GPU's driver is unbound or bound and 2
//! (reinitialization completed) when it is done; on a new 2 the node is rediscovered and
//! the watches rebuilt. The state at start is not an event: only samples newer than it count.

use crate::lifecycle::app::{Control, Engine};
use dcgm_sys::{Entity, FieldGroup, Group, Library, Reading, Session, Value};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

/// DCGM_FI_SYSTEM_GPU_BIND_EVENT (alias DCGM_FI_BIND_UNBIND_EVENT).
pub const FIELD: u16 = 6;
const REINITIALIZING: i64 = 1;
const REINITIALIZED: i64 = 2;

/// Parses the poll interval; a bad value falls back to 1 s with a warning, as upstream.
pub fn poll_interval(flag: &str) -> Duration {
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

struct Watch {
    session: Session,
    gpu: Entity,
    // Kept for the watch's lifetime.
    _handles: (Group, FieldGroup),
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
            _handles: (group, fg),
            last_ts: 0,
        };
        w.last_ts = w.read()?.map_or(0, |(ts, _)| ts);
        Ok(w)
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

/// Starts the watcher on `session` (the collector's; in remote mode it reconnects on its
/// own when the host engine comes back).
pub fn spawn(
    session: Session,
    library: Arc<Library>,
    engine: Engine,
    interval: Duration,
    control: Sender<Control>,
) -> Result<(), String> {
    let first = Watch::start(session, interval)
        .map_err(|e| format!("--enable-gpu-bind-unbind-watch: cannot watch {FIELD}: {e}"))?;
    tracing::info!("watching for GPU bind/unbind events every {:?}", interval);
    std::thread::Builder::new()
        .name("bind-unbind-watch".into())
        .spawn(move || {
            let mut watch = Some(first);
            loop {
                std::thread::sleep(interval);
                let Some(w) = watch.as_mut() else {
                    if let Engine::Remote(t) = &engine {
                        watch = Session::connect(library.clone(), t, 5000)
                            .and_then(|s| Watch::start(s, interval))
                            .ok();
                    }
                    continue;
                };
                match w.poll() {
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
                        if control.send(Control::Reload).is_err() {
                            return;
                        }
                    }
                    Ok(Some((ts, other))) => tracing::debug!(
                        event_state = other,
                        timestamp = ts,
                        "GPU bind/unbind: unknown event state"
                    ),
                    Ok(None) => {}
                    Err(e) if e.is_connection_lost() => {
                        tracing::debug!("GPU bind/unbind watch: {e}");
                        watch = None;
                    }
                    Err(e) => tracing::debug!("GPU bind/unbind watch: {e}"),
                }
            }
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start the bind/unbind watch thread: {e}"))
}

#[cfg(test)]
mod tests {
    use super::poll_interval;
    use std::time::Duration;

    #[test]
    fn a_bad_poll_interval_falls_back_to_one_second() {
        assert_eq!(poll_interval("250ms"), Duration::from_millis(250));
        assert_eq!(poll_interval("2s"), Duration::from_secs(2));
        for bad in ["", "fast", "0s", "-1s", "5"] {
            assert_eq!(poll_interval(bad), Duration::from_secs(1), "{bad}");
        }
    }
}
