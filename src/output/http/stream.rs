//! HTTP/2 streams with a send deadline each. hyper runs every stream of an HTTP/2 connection
//! as a task of the connection's executor; [`StreamExec`] gives each such task the write
//! timeout from the moment its response head is ready ([`set_deadline`], called by the
//! service). A stream still sending then (a client that grants it no flow-control window)
//! is dropped, which h2 answers with RST_STREAM(CANCEL), discarding what it buffered for
//! that stream: only the stream is lost, the connection, its keep-alive and its other
//! streams go on. A connection whose socket stops taking bytes is another matter: that is
//! a write stall ([`super::timeout::Ended::Stalled`]), which ends the connection.
//!
//! The response body never tells hyper it is at its end (`Tracked::is_end_stream`), so
//! hyper waits for flow-control window before it ends the stream instead of handing h2
//! the last frame beyond the window and finishing: the task, and so the deadline, lasts
//! until h2 may send every byte of the response.

use std::future::{poll_fn, Future};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use tokio::time::Instant;

tokio::task_local! {
    /// When the response of the stream being polled must be out.
    static DEADLINE: Arc<OnceLock<Instant>>;
}

/// The response head is ready and must be sent by `at`: true under [`StreamExec`] (an
/// HTTP/2 stream; the first call wins), false elsewhere (HTTP/1, whose deadlines are the
/// connection's).
pub(crate) fn set_deadline(at: Instant) -> bool {
    DEADLINE
        .try_with(|d| {
            let _ = d.set(at);
        })
        .is_ok()
}

/// The executor of HTTP/2 streams: each on a task of its own, as hyper's `TokioExecutor`
/// does, with its send deadline.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StreamExec;

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        tokio::spawn(with_deadline(fut));
    }
}

/// Runs a stream until it ends or its deadline passes (then drops it: h2 resets it).
async fn with_deadline<F: Future<Output = ()>>(fut: F) {
    let deadline = Arc::new(OnceLock::new());
    let stream = DEADLINE.scope(deadline.clone(), fut);
    tokio::pin!(stream);
    // The deadline is set while the stream is polled, on this task: looking right after
    // each poll of the stream needs no wake-up of its own. Until then the handler takes
    // what it takes (a 20 s profile is no late response).
    let at = tokio::select! {
        biased;
        () = &mut stream => return,
        at = poll_fn(|_| deadline.get().map_or(Poll::Pending, |at| Poll::Ready(*at))) => at,
    };
    if tokio::time::timeout_at(at, stream).await.is_err() {
        tracing::debug!(
            "an HTTP/2 response was not sent within the write timeout: its stream is reset"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// A stream whose response head is ready after `handler` and which then sends for
    /// `sending`; it tells whether it was dropped before its end.
    fn stream(
        handler: Duration,
        sending: Duration,
    ) -> (impl Future<Output = ()> + Send, Arc<AtomicBool>) {
        struct Flag(Arc<AtomicBool>, bool);
        impl Drop for Flag {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
        }
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = Flag(dropped.clone(), false);
        let fut = async move {
            // The whole guard, not just its field, lives in the future.
            let mut flag = flag;
            tokio::time::sleep(handler).await;
            assert!(set_deadline(Instant::now() + Duration::from_secs(3)));
            tokio::time::sleep(sending).await;
            flag.1 = true;
        };
        (fut, dropped)
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_still_sending_at_its_deadline_is_dropped_and_no_other() {
        let t0 = Instant::now();
        let (late, late_dropped) = stream(Duration::from_secs(20), Duration::from_secs(60));
        let (ok, ok_dropped) = stream(Duration::from_secs(20), Duration::from_secs(2));
        StreamExec.execute(late);
        StreamExec.execute(ok);
        tokio::time::sleep(Duration::from_secs(22) + Duration::from_millis(500)).await;
        // A 20 s handler is not late: the deadline starts at the head.
        assert!(!late_dropped.load(Ordering::SeqCst));
        assert!(!ok_dropped.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(late_dropped.load(Ordering::SeqCst), "at {:?}", t0.elapsed());
        assert!(!ok_dropped.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn outside_a_stream_there_is_no_stream_deadline() {
        assert!(!set_deadline(Instant::now()));
    }
}
