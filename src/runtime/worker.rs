//! A thread that owns state whose calls may never return: the DCGM session (a host engine
//! stopped with SIGSTOP answers nothing until its 60 s request timeout; a hung driver holds
//! an embedded engine) or an NVML collector. The collection loop never makes such calls
//! itself: it hands a job to the worker and waits with a deadline. Past the deadline the
//! loop abandons the worker, and with it the state; the thread ends (dropping the state)
//! whenever the stuck call returns. Any stage may run jobs on one; it knows no stage.

use super::supervisor::panic_text;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

/// Why a job gave no result. The first field of `Stuck` and `Panicked` names what the
/// worker calls into ("DCGM", "NVML"): a warning must name what hung.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("no answer from {0} within {1:.1?}")]
    Stuck(&'static str, Duration),
    #[error("the {0} worker thread panicked: {1}")]
    Panicked(&'static str, String),
    /// The waiter was told to stop while the job ran.
    #[error("interrupted")]
    Interrupted,
}

/// A thread owning state `S` (the DCGM session and its watches), running one job at a time.
pub(crate) struct Worker<S> {
    jobs: Sender<Job<S>>,
    /// Alive while the thread runs (it holds the only strong reference).
    running: Weak<()>,
    /// What its jobs call into, for messages: "NVML" for the `nvml` thread, else "DCGM".
    source: &'static str,
}

impl<S: Default + 'static> Worker<S> {
    pub(crate) fn spawn(name: &str) -> std::io::Result<Worker<S>> {
        let source = if name == "nvml" { "NVML" } else { "DCGM" };
        let (jobs, inbox) = mpsc::channel::<Job<S>>();
        let token = Arc::new(());
        let running = Arc::downgrade(&token);
        // Its DCGM calls' lines name the engine its session is with.
        let engine = crate::logging::thread_engine();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                crate::logging::set_thread_engine(engine);
                let _alive = token;
                let mut state = S::default();
                // Ends when the worker is dropped or abandoned, after the current job.
                for job in inbox {
                    job(&mut state);
                }
            })?;
        Ok(Worker {
            jobs,
            running,
            source,
        })
    }

    /// Runs `f` on the worker's state and waits until `deadline` for its result. `interrupt`
    /// is polled while waiting; when it returns true the wait ends with `Interrupted` (the
    /// job still runs to its end). A panic in `f` comes back as `Panicked`; the state may
    /// then be half-updated, so the caller should abandon the worker.
    pub(crate) fn call<R: Send + 'static>(
        &self,
        deadline: Instant,
        mut interrupt: impl FnMut() -> bool,
        f: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, JobError> {
        call_on(&self.jobs, self.source, deadline, &mut interrupt, f)
    }

    /// Lets the thread go: it ends after its current job. Returns a handle that tells
    /// whether it has ended yet.
    pub(crate) fn abandon(self) -> Abandoned {
        Abandoned(self.running)
    }
}

/// The worker in use, for other threads that run jobs on it (the GPU bind/unbind watch):
/// the collection loop names each new worker here and withdraws one it abandons, so a job
/// always reaches the session the loop uses, never a dead one. Only a call in progress
/// holds the worker's queue open, so an abandoned worker still ends when its stuck call
/// returns.
pub(crate) struct Current<S>(Arc<Mutex<Option<Sender<Job<S>>>>>);

impl<S> Clone for Current<S> {
    fn clone(&self) -> Self {
        Current(self.0.clone())
    }
}

impl<S> Default for Current<S> {
    fn default() -> Self {
        Current(Arc::new(Mutex::new(None)))
    }
}

/// Why a job on the current worker gave no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CurrentError {
    #[error("no DCGM session (reconnecting)")]
    NoWorker,
    #[error(transparent)]
    Job(#[from] JobError),
}

impl<S: 'static> Current<S> {
    /// Names `w` as the worker in use (`None`: there is none).
    pub(crate) fn set(&self, w: Option<&Worker<S>>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = w.map(|w| w.jobs.clone());
    }

    /// [`Worker::call`] on the worker in use.
    pub(crate) fn call<R: Send + 'static>(
        &self,
        deadline: Instant,
        f: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, CurrentError> {
        let jobs = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(CurrentError::NoWorker)?;
        Ok(call_on(&jobs, "DCGM", deadline, || false, f)?)
    }
}

/// A worker let go, possibly still stuck in a call.
pub(crate) struct Abandoned(Weak<()>);

impl Abandoned {
    pub(crate) fn has_ended(&self) -> bool {
        self.0.strong_count() == 0
    }
}

fn call_on<S, R: Send + 'static>(
    jobs: &Sender<Job<S>>,
    source: &'static str,
    deadline: Instant,
    mut interrupt: impl FnMut() -> bool,
    f: impl FnOnce(&mut S) -> R + Send + 'static,
) -> Result<R, JobError> {
    let started = Instant::now();
    let (tx, rx) = mpsc::sync_channel::<Result<R, String>>(1);
    let job: Job<S> = Box::new(move |state| {
        let r = catch_unwind(AssertUnwindSafe(|| f(state))).map_err(|p| panic_text(&*p));
        // The waiter may have given up; then nobody wants the result.
        let _ = tx.send(r);
    });
    if jobs.send(job).is_err() {
        return Err(JobError::Panicked(
            source,
            "the worker thread is gone".into(),
        ));
    }
    wait(&rx, source, started, deadline, &mut interrupt)
}

/// How often a wait checks whether it was interrupted.
const POLL: Duration = Duration::from_millis(50);

fn wait<R>(
    rx: &Receiver<Result<R, String>>,
    source: &'static str,
    started: Instant,
    deadline: Instant,
    interrupt: &mut impl FnMut() -> bool,
) -> Result<R, JobError> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return match rx.try_recv() {
                Ok(r) => r.map_err(|e| JobError::Panicked(source, e)),
                Err(TryRecvError::Empty) => Err(JobError::Stuck(source, now - started)),
                Err(TryRecvError::Disconnected) => Err(JobError::Panicked(
                    source,
                    "the worker thread ended during the job".into(),
                )),
            };
        }
        match rx.recv_timeout((deadline - now).min(POLL)) {
            Ok(r) => return r.map_err(|e| JobError::Panicked(source, e)),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(JobError::Panicked(
                    source,
                    "the worker thread ended during the job".into(),
                ))
            }
            Err(RecvTimeoutError::Timeout) => {
                if interrupt() {
                    return Err(JobError::Interrupted);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    fn until(what: &str, cond: impl Fn() -> bool) {
        let deadline = soon(5000);
        while !cond() {
            assert!(Instant::now() < deadline, "{what} did not happen in 5 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn jobs_run_in_order_on_the_same_state() {
        let w = Worker::<Vec<u32>>::spawn("t").unwrap();
        w.call(soon(5000), || false, |s| s.push(1)).unwrap();
        let seen = w
            .call(
                soon(5000),
                || false,
                |s| {
                    s.push(2);
                    s.clone()
                },
            )
            .unwrap();
        assert_eq!(seen, vec![1, 2]);
    }

    #[test]
    fn a_stuck_job_is_abandoned_at_the_deadline_and_its_thread_ends_later() {
        let w = Worker::<()>::spawn("t").unwrap();
        let release = Arc::new(AtomicBool::new(false));
        let r = release.clone();
        let t0 = Instant::now();
        let e = w
            .call(
                soon(100),
                || false,
                move |_| {
                    while !r.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                },
            )
            .unwrap_err();
        assert!(matches!(e, JobError::Stuck("DCGM", _)), "{e:?}");
        assert!(t0.elapsed() < Duration::from_secs(2));
        let gone = w.abandon();
        assert!(!gone.has_ended());
        release.store(true, Ordering::SeqCst);
        until("the abandoned thread ending", || gone.has_ended());
    }

    #[test]
    fn an_nvml_worker_says_nvml_did_not_answer() {
        let w = Worker::<()>::spawn("nvml").unwrap();
        let e = w
            .call(
                soon(50),
                || false,
                |_| std::thread::sleep(Duration::from_millis(300)),
            )
            .unwrap_err();
        assert!(matches!(e, JobError::Stuck("NVML", _)), "{e:?}");
        assert!(
            e.to_string().starts_with("no answer from NVML within"),
            "{e}"
        );
    }

    #[test]
    fn a_panic_comes_back_as_an_error_with_its_message() {
        let w = Worker::<()>::spawn("t").unwrap();
        let e = w
            .call(soon(5000), || false, |_| -> u32 { panic!("boom") })
            .unwrap_err();
        assert_eq!(e, JobError::Panicked("DCGM", "boom".into()));
        // The thread survives the job that panicked.
        assert_eq!(w.call(soon(5000), || false, |_| 7).unwrap(), 7);
    }

    #[test]
    fn jobs_on_the_current_worker_follow_it_and_leave_an_abandoned_one_free_to_end() {
        let current = Current::<Vec<u32>>::default();
        assert_eq!(
            current.call(soon(1000), |s| s.len()),
            Err(CurrentError::NoWorker)
        );
        let first = Worker::<Vec<u32>>::spawn("t").unwrap();
        current.set(Some(&first));
        current.call(soon(5000), |s| s.push(1)).unwrap();
        // Replaced (the loop reconnected): jobs reach the new worker's state.
        let second = Worker::<Vec<u32>>::spawn("t").unwrap();
        current.set(Some(&second));
        assert_eq!(
            current.call(soon(5000), |s| s.clone()).unwrap(),
            Vec::<u32>::new()
        );
        // The old worker, let go, ends although `current` was once given it.
        let gone = first.abandon();
        until("the abandoned worker ending", || gone.has_ended());
        current.set(None);
        let gone = second.abandon();
        until("the second worker ending", || gone.has_ended());
        assert_eq!(
            current.call(soon(1000), |s| s.len()),
            Err(CurrentError::NoWorker)
        );
    }

    #[test]
    fn an_interrupt_ends_the_wait_early() {
        let w = Worker::<()>::spawn("t").unwrap();
        let t0 = Instant::now();
        let e = w
            .call(
                soon(10_000),
                || true,
                |_| std::thread::sleep(Duration::from_millis(500)),
            )
            .unwrap_err();
        assert_eq!(e, JobError::Interrupted);
        assert!(t0.elapsed() < Duration::from_millis(450));
    }
}
