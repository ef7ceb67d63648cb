//! Side threads under supervision: the kubelet refresher, the container-labels refresher,
//! the counters-file and GPU bind/unbind watches, the dump clean-up. None of them may die
//! or hang unseen, since each feeds something that is otherwise served unchanged.
//!
//! A supervised thread runs a body (`FnMut`, so its state survives a restart). The body
//! returning `Ok(())` is a planned end (its channel closed: the exporter is stopping); a
//! body returning `Err` or panicking is restarted on the same thread after a backoff
//! (doubling from `first` up to `max`, back to `first` after a life longer than `max`).
//! Each restart is counted in `dcgm_exporter_thread_restarts_total{thread}`; while a thread
//! is down, and after a restart until its body shows a sign of life ([`Beat::alive`]), it
//! is a `degraded:` line on /health. A body given a `stall_after` that shows no sign of
//! life for that long is also a line: a thread stuck in a call cannot be killed, but it is
//! not hidden.

use prometheus::{IntCounterVec, Opts};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Backoff between restarts.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub first: Duration,
    pub max: Duration,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            first: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

/// The state of one supervised thread.
struct Slot {
    name: String,
    stall_after: Option<Duration>,
    state: Mutex<SlotState>,
}

struct SlotState {
    /// Why the thread is down or was just restarted; cleared by its first sign of life.
    down: Option<String>,
    /// What the running thread reports failing ([`Beat::failing`]); cleared by its next
    /// success.
    trouble: Option<String>,
    last_beat: Instant,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Handed to a body: it calls [`Beat::alive`] each time it has done a round of work.
pub struct Beat(Arc<Slot>);

impl Beat {
    /// A round of work done.
    pub fn alive(&self) {
        let mut st = self.0.lock();
        st.last_beat = Instant::now();
        if let Some(was) = st.down.take().or_else(|| st.trouble.take()) {
            tracing::info!("{}: working again (was: {was})", self.0.name);
        }
        st.trouble = None;
    }

    /// A round of work that failed: the thread lives, but until a round succeeds its
    /// work is a /health line (and a warning when the reason changes).
    pub fn failing(&self, why: String) {
        let mut st = self.0.lock();
        st.last_beat = Instant::now();
        st.down = None;
        if st.trouble.as_deref() != Some(&why) {
            tracing::warn!("{}: {why}", self.0.name);
        }
        st.trouble = Some(why);
    }
}

struct Inner {
    policy: Policy,
    slots: Mutex<Vec<Arc<Slot>>>,
    restarts: IntCounterVec,
}

/// Supervises side threads; cheap to clone (all clones share the threads).
#[derive(Clone)]
pub struct Supervisor(Arc<Inner>);

impl Supervisor {
    pub fn new(policy: Policy) -> Supervisor {
        let restarts = IntCounterVec::new(
            Opts::new(
                format!("{}thread_restarts_total", crate::model::naming::PREFIX),
                "Side threads (kubelet, container labels, watches, dump clean-up) restarted \
                 after a panic or an unexpected stop, by thread.",
            ),
            &["thread"],
        )
        .expect("static metric options are valid");
        Supervisor(Arc::new(Inner {
            policy,
            slots: Mutex::new(Vec::new()),
            restarts,
        }))
    }

    /// The process's supervisor, the one the exporter's threads run under.
    pub fn global() -> &'static Supervisor {
        static GLOBAL: OnceLock<Supervisor> = OnceLock::new();
        GLOBAL.get_or_init(|| Supervisor::new(Policy::default()))
    }

    /// The restart counter, for a registry (see `SelfMetrics::register`).
    pub fn restarts(&self) -> IntCounterVec {
        self.0.restarts.clone()
    }

    /// Starts `body` on a thread named `name` under supervision. The handle joins once the
    /// body ended as planned.
    pub fn spawn<F>(
        &self,
        name: &str,
        stall_after: Option<Duration>,
        mut body: F,
    ) -> std::io::Result<std::thread::JoinHandle<()>>
    where
        F: FnMut(&Beat) -> Result<(), String> + Send + 'static,
    {
        let slot = Arc::new(Slot {
            name: name.to_string(),
            stall_after,
            state: Mutex::new(SlotState {
                down: None,
                trouble: None,
                last_beat: Instant::now(),
            }),
        });
        // Dashboards see a zero, not an absent series.
        self.0.restarts.with_label_values(&[name]);
        self.slots().push(slot.clone());
        let sup = self.clone();
        let mine = slot.clone();
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || sup.run(&mine, &Beat(mine.clone()), &mut body));
        if spawned.is_err() {
            self.slots().retain(|s| !Arc::ptr_eq(s, &slot));
        }
        spawned
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Slot>>> {
        self.0.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(
        &self,
        slot: &Arc<Slot>,
        beat: &Beat,
        body: &mut dyn FnMut(&Beat) -> Result<(), String>,
    ) {
        let policy = self.0.policy;
        let mut backoff = policy.first;
        loop {
            let started = Instant::now();
            // The body's state is its own: after a panic it may be half-updated, and each
            // body is written to start a round afresh from it.
            let why = match catch_unwind(AssertUnwindSafe(|| body(beat))) {
                Ok(Ok(())) => break,
                Ok(Err(e)) => format!("stopped: {e}"),
                Err(p) => format!("panicked: {}", panic_text(p.as_ref())),
            };
            if started.elapsed() >= policy.max {
                backoff = policy.first;
            }
            tracing::error!("thread {} {why}; restarting it in {backoff:?}", slot.name);
            slot.lock().down = Some(format!(
                "thread {} {why}; restarting in {backoff:?}",
                slot.name
            ));
            std::thread::sleep(backoff);
            self.0.restarts.with_label_values(&[&slot.name]).inc();
            {
                let mut st = slot.lock();
                st.down = Some(format!("thread {} restarted after it {why}", slot.name));
                st.trouble = None;
                st.last_beat = Instant::now();
            }
            backoff = (backoff * 2).min(policy.max);
        }
        self.slots().retain(|s| !Arc::ptr_eq(s, slot));
    }

    /// `/health` lines: threads down or not yet working again after a restart, and threads
    /// silent past their `stall_after`.
    pub fn notes(&self) -> Vec<String> {
        let slots: Vec<Arc<Slot>> = self.slots().clone();
        slots
            .iter()
            .filter_map(|s| {
                let st = s.lock();
                if let Some(d) = &st.down {
                    return Some(d.clone());
                }
                if let Some(t) = &st.trouble {
                    return Some(format!("{}: {t}", s.name));
                }
                let silent = st.last_beat.elapsed();
                s.stall_after.filter(|limit| silent > *limit).map(|limit| {
                    format!(
                        "thread {}: no sign of life for {:.0}s (expected within {limit:?}); it may be stuck",
                        s.name,
                        silent.as_secs_f64()
                    )
                })
            })
            .collect()
    }
}

/// What a caught panic said.
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    fn quick() -> Supervisor {
        Supervisor::new(Policy {
            first: Duration::from_millis(20),
            max: Duration::from_millis(200),
        })
    }

    /// Waits (bounded) until `cond` holds.
    fn until(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "{what} did not happen in 10 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn restarts(s: &Supervisor, name: &str) -> u64 {
        s.restarts().with_label_values(&[name]).get()
    }

    #[test]
    fn a_panicking_thread_is_restarted_counted_and_shown_until_it_works() {
        let s = quick();
        let (go_on, told) = mpsc::channel::<&'static str>();
        let (lives_tx, lives) = mpsc::channel::<usize>();
        let life = AtomicUsize::new(0);
        s.spawn("t-panic", None, move |beat| {
            lives_tx.send(life.fetch_add(1, Ordering::SeqCst)).unwrap();
            loop {
                match told.recv() {
                    Ok("panic") => panic!("hostile input"),
                    Ok("fail") => return Err("its socket closed".into()),
                    Ok(_) => beat.alive(),
                    Err(_) => return Ok(()),
                }
            }
        })
        .unwrap();
        assert_eq!(lives.recv().unwrap(), 0);
        assert_eq!(restarts(&s, "t-panic"), 0);
        assert!(s.notes().is_empty());

        go_on.send("panic").unwrap();
        // Restarted on the same state: the second life of the body.
        assert_eq!(lives.recv().unwrap(), 1);
        assert_eq!(restarts(&s, "t-panic"), 1);
        let notes = s.notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("thread t-panic restarted after it panicked: hostile input"),
            "{notes:?}"
        );
        // Working again: the line goes.
        go_on.send("work").unwrap();
        until("the note cleared", || s.notes().is_empty());

        go_on.send("fail").unwrap();
        assert_eq!(lives.recv().unwrap(), 2);
        assert_eq!(restarts(&s, "t-panic"), 2);
        assert!(
            s.notes()[0].contains("stopped: its socket closed"),
            "{:?}",
            s.notes()
        );

        // A planned end is not restarted and leaves no line.
        drop(go_on);
        until("the thread forgotten", || s.slots().is_empty());
        assert!(lives.recv().is_err(), "no further life");
        assert_eq!(restarts(&s, "t-panic"), 2);
        assert!(s.notes().is_empty());
    }

    #[test]
    fn a_thread_that_keeps_failing_backs_off_and_is_shown_while_down() {
        let s = Supervisor::new(Policy {
            first: Duration::from_millis(50),
            max: Duration::from_millis(400),
        });
        let (lives_tx, lives) = mpsc::channel::<Instant>();
        s.spawn("t-fail", None, move |_| {
            // Ends (planned) once the test has stopped listening.
            lives_tx
                .send(Instant::now())
                .map_err(|_| ())
                .map_or(Ok(()), |()| panic!("always"))
        })
        .unwrap();
        let mut starts = Vec::new();
        for _ in 0..5 {
            starts.push(lives.recv_timeout(Duration::from_secs(10)).unwrap());
        }
        let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        // 50, 100, 200, 400 ms at least (sleeps last at least their duration).
        for (gap, min) in gaps.iter().zip([50u64, 100, 200, 400]) {
            assert!(*gap >= Duration::from_millis(min), "{gaps:?}");
        }
        assert!(restarts(&s, "t-fail") >= 4);
        let notes = s.notes();
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("thread t-fail ") && n.contains("panicked: always")),
            "{notes:?}"
        );
        drop(lives);
        until("the thread ended", || s.slots().is_empty());
    }

    #[test]
    fn failing_work_is_shown_until_a_round_succeeds() {
        let s = quick();
        let (tell, told) = mpsc::channel::<Result<(), String>>();
        let (done_tx, done) = mpsc::channel::<()>();
        s.spawn("t-work", None, move |beat| {
            for r in &told {
                match r {
                    Ok(()) => beat.alive(),
                    Err(e) => beat.failing(e),
                }
                done_tx.send(()).unwrap();
            }
            Ok(())
        })
        .unwrap();
        tell.send(Err("the session is gone".into())).unwrap();
        done.recv().unwrap();
        assert_eq!(s.notes(), ["t-work: the session is gone"]);
        tell.send(Ok(())).unwrap();
        done.recv().unwrap();
        assert!(s.notes().is_empty());
        assert_eq!(restarts(&s, "t-work"), 0);
    }

    #[test]
    fn a_silent_thread_past_its_limit_is_shown() {
        let s = quick();
        let (release, wait) = mpsc::channel::<()>();
        let (beaten_tx, beaten) = mpsc::channel::<()>();
        s.spawn("t-stuck", Some(Duration::from_millis(50)), move |beat| {
            beat.alive();
            beaten_tx.send(()).unwrap();
            // Stuck in a call that does not return until released.
            let _ = wait.recv();
            Ok(())
        })
        .unwrap();
        beaten.recv().unwrap();
        until("the stall shown", || {
            s.notes()
                .iter()
                .any(|n| n.starts_with("thread t-stuck: no sign of life"))
        });
        release.send(()).unwrap();
        until("the thread forgotten", || {
            s.notes().is_empty() && s.slots().is_empty()
        });
    }
}
