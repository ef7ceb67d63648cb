//! What the timeouts mean, as Go's `http.Server` (exporter-toolkit) means them:
//! * read timeout: reading a request, and an idle connection. A connection with no request
//!   in progress for the read timeout is closed gracefully ([`Activity::watch`]): that
//!   bounds an idle keep-alive connection, an idle HTTP/2 connection and an HTTP/1 request
//!   head that never comes or comes too slowly alike (its close gets the read timeout
//!   again at most, then the connection is dropped with no answer). A graceful close with
//!   bytes still to write gets the write timeout at most. No endpoint reads a
//!   request body, and hyper gives up an unread one at once instead of waiting for it. It
//!   never runs while a handler works: a 20 s profile is not cut by a 5 s read timeout.
//! * write timeout: writing a response, from the moment its head is ready until its last
//!   byte went out. The deadline outlives the response body: hyper takes the last frame
//!   (or drops the body) long before a client that does not read has the bytes, so a
//!   finished body leaves its deadline in force until the connection's I/O next completes
//!   a flush. [`WriteDeadline`] fails a write that cannot go on past it; [`Activity::watch`]
//!   ends the connection when an HTTP/1 response has not gone out by then even though
//!   nothing is being written. An HTTP/2 response's deadline is its stream's
//!   (`super::stream`): a stream the client grants no window is reset, not the connection.
//! * a write that cannot make progress for the write timeout fails even when no response
//!   is being written (hyper's own replies, HTTP/2 control frames): nothing the server
//!   writes may wait on a client for longer.
//!
//! Per request this costs a few atomics and one uncontended lock: no timer is armed, no
//! task woken (`bench serving` compares it with a server that only sends the bytes).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep, Instant, Sleep};

/// A response's write deadline; once its body is done it lasts until the next completed
/// flush of the connection.
#[derive(Clone, Copy)]
struct Deadline {
    id: u64,
    at: Instant,
    body_done: bool,
}

/// One connection's requests in progress, since when it has had none, and the write
/// deadlines of its responses. Nothing here wakes anybody: [`Activity::watch`] looks at it
/// when a deadline it knows of comes, and at least once per timeout, which is soon enough
/// for anything that began since (a deadline is always a full timeout away from its start).
/// A request then costs a few atomics and one uncontended lock, never a timer.
pub struct Activity {
    /// Requests received whose response body has not ended yet.
    in_flight: AtomicUsize,
    /// When `in_flight` last fell to zero (or the connection began), in nanoseconds after
    /// `born`.
    quiet_since: AtomicU64,
    born: Instant,
    /// Responses being written, oldest first.
    writing: Mutex<Vec<Deadline>>,
    /// How many of `writing` wait only for a flush: a flush looks here, not at the lock.
    flushing: AtomicUsize,
    next_id: AtomicU64,
    /// How many times an [`Activity::watch`] has been polled (were it polled for every
    /// request, its timer would be too: the tests count them).
    polls: AtomicU64,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            quiet_since: AtomicU64::new(0),
            born: Instant::now(),
            writing: Mutex::new(Vec::new()),
            flushing: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            polls: AtomicU64::new(0),
        }
    }
}

/// Why [`Activity::watch`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// No request in progress for the idle timeout.
    Idle,
    /// A response was not written by its deadline.
    Overdue,
}

impl Activity {
    /// A request arrived; it counts until the returned guard (moved into the response body)
    /// is dropped.
    pub fn request(self: &Arc<Self>) -> Request {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Request {
            activity: self.clone(),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            writing: false,
            body_done: false,
        }
    }

    fn writes(&self) -> std::sync::MutexGuard<'_, Vec<Deadline>> {
        self.writing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The earliest deadline of the responses being written.
    fn write_deadline(&self) -> Option<Instant> {
        self.writes().iter().map(|d| d.at).min()
    }

    /// The connection's I/O completed a flush: every response whose body was done before
    /// it has left the process.
    fn flushed(&self) {
        if self.flushing.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut writes = self.writes();
        writes.retain(|d| !d.body_done);
        self.flushing.store(0, Ordering::Release);
    }

    /// How many times an [`Activity::watch`] has been polled so far.
    #[cfg(test)]
    pub(crate) fn watch_polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    /// Whether a response still has bytes to write (or to flush).
    pub fn writing(&self) -> bool {
        !self.writes().is_empty()
    }

    /// When the connection turns idle if no request comes: `None` while one is in progress.
    fn idle_at(&self, timeout: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::SeqCst) != 0 {
            return None;
        }
        let quiet = Duration::from_nanos(self.quiet_since.load(Ordering::SeqCst));
        Some(self.born + quiet + timeout)
    }

    /// Resolves once no request has been in progress for `idle` (when given), or once a
    /// response has not been written by its deadline, whether or not anything is being
    /// written (`overdue`: the write timeout; a response the client's flow control holds
    /// writes nothing, so no write can fail for it).
    pub async fn watch(&self, idle: Option<Duration>, overdue: Option<Duration>) -> Ended {
        let looking = self.looks(idle, overdue);
        tokio::pin!(looking);
        std::future::poll_fn(|cx| {
            self.polls.fetch_add(1, Ordering::Relaxed);
            looking.as_mut().poll(cx)
        })
        .await
    }

    /// [`Activity::watch`], uncounted.
    async fn looks(&self, idle: Option<Duration>, overdue: Option<Duration>) -> Ended {
        let timer = sleep(Duration::ZERO);
        tokio::pin!(timer);
        loop {
            let now = Instant::now();
            // Whatever starts after this look has its deadline a full timeout from now or
            // later: looking again by then is early enough.
            let look_again = idle.into_iter().chain(overdue).min();
            // A year stands for never: an `Instant` cannot hold much more.
            let mut next = now + look_again.unwrap_or(Duration::from_secs(365 * 86400));
            if let Some(at) = idle.and_then(|t| self.idle_at(t)) {
                if at <= now {
                    return Ended::Idle;
                }
                next = next.min(at);
            }
            if let Some(at) = overdue.and_then(|_| self.write_deadline()) {
                if at <= now {
                    return Ended::Overdue;
                }
                next = next.min(at);
            }
            timer.as_mut().reset(next);
            timer.as_mut().await;
        }
    }
}

/// A request in progress, from its head to the end of its response.
pub struct Request {
    activity: Arc<Activity>,
    id: u64,
    writing: bool,
    body_done: bool,
}

impl Request {
    /// The response head is ready: its writing must be done within `timeout`.
    pub fn writing(&mut self, timeout: Duration) {
        self.writing_until(Instant::now() + timeout);
    }

    /// The response head is ready: its writing must be done by `at`.
    pub fn writing_until(&mut self, at: Instant) {
        let d = Deadline {
            id: self.id,
            at,
            body_done: false,
        };
        self.activity.writes().push(d);
        self.writing = true;
    }

    /// The response body gave its last frame: when this guard goes, the deadline stays
    /// until the bytes are flushed. A guard dropped without it is a response given up
    /// (a reset stream, a failed body): nothing of it is left to write.
    pub fn body_done(&mut self) {
        self.body_done = true;
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if self.writing {
            let mut writes = self.activity.writes();
            if let Some(i) = writes.iter().position(|d| d.id == self.id) {
                if self.body_done {
                    writes[i].body_done = true;
                    self.activity.flushing.fetch_add(1, Ordering::AcqRel);
                } else {
                    writes.remove(i);
                }
            }
        }
        // Stored before the count falls: whoever sees no request in progress sees this
        // end too (were it stored after, an old quiet time could close the connection the
        // moment a long request ended).
        let a = &self.activity;
        let quiet = u64::try_from(a.born.elapsed().as_nanos()).unwrap_or(u64::MAX);
        a.quiet_since.fetch_max(quiet, Ordering::SeqCst);
        a.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The connection's I/O with the write deadline of the responses being written: a write
/// that cannot go on past it, or that makes no progress for `stall`, fails the connection.
/// Reads are never timed here.
pub struct WriteDeadline<S> {
    inner: S,
    activity: Arc<Activity>,
    stall: Duration,
    /// Since when writes have been refused (none accepted since).
    blocked_since: Option<Instant>,
    timer: Pin<Box<Sleep>>,
}

impl<S> WriteDeadline<S> {
    pub fn new(inner: S, activity: Arc<Activity>, stall: Duration) -> WriteDeadline<S> {
        WriteDeadline {
            inner,
            activity,
            stall,
            blocked_since: None,
            timer: Box::pin(sleep(Duration::ZERO)),
        }
    }

    /// A pending write: an error once a deadline has passed, else wake up at it.
    fn pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let since = *self.blocked_since.get_or_insert_with(Instant::now);
        let stalled = since + self.stall;
        let deadline = match self.activity.write_deadline() {
            Some(d) => d.min(stalled),
            None => stalled,
        };
        if self.timer.deadline() != deadline {
            self.timer.as_mut().reset(deadline);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "writing to the client took longer than the write timeout",
            )),
            Poll::Pending => Poll::Pending,
        }
    }

    /// What a write call answered: pending is timed, anything else is progress.
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Pending => self.pending(cx).map(Err),
            ready => {
                self.blocked_since = None;
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.timed(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.timed(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = polled {
            self.activity.flushed();
        }
        self.timed(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // A TLS close_notify is a write too.
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.timed(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_response_nobody_reads_fails_at_the_write_timeout() {
        let (server, _client) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let mut io = WriteDeadline::new(server, activity.clone(), Duration::from_secs(3600));
        let mut req = activity.request();
        let t0 = Instant::now();
        req.writing(Duration::from_secs(3));
        let err = io.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_handler_and_a_silent_reader_are_not_write_timeouts() {
        let (server, mut client) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let mut io = WriteDeadline::new(server, activity.clone(), Duration::from_secs(3600));
        // A request whose handler runs for a minute: no deadline while it works, and reads
        // are never timed.
        let mut req = activity.request();
        let read = tokio::spawn(async move {
            let mut buf = [0u8; 1];
            let n = io.read(&mut buf).await;
            (io, n.map(|_| buf[0]))
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        client.write_all(b"x").await.unwrap();
        let (mut io, byte) = read.await.unwrap();
        assert_eq!(byte.unwrap(), b'x');
        // Then the response goes out to a client that reads it.
        req.writing(Duration::from_secs(3));
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 4096];
            client.read_exact(&mut got).await.map(|_| got.len())
        });
        io.write_all(&[1u8; 4096]).await.unwrap();
        assert_eq!(reader.await.unwrap().unwrap(), 4096);
        drop(req);
        assert!(activity.write_deadline().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_body_keeps_its_deadline_until_the_bytes_are_flushed() {
        let (server, _client) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let mut io = WriteDeadline::new(server, activity.clone(), Duration::from_secs(3600));
        let mut req = activity.request();
        let t0 = Instant::now();
        req.writing(Duration::from_secs(3));
        // hyper took the last frame and dropped the body; the bytes are still to be written.
        req.body_done();
        drop(req);
        let err = io.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_completed_flush_retires_finished_responses_only() {
        let (server, mut client) = tokio::io::duplex(4096);
        let activity = Arc::new(Activity::default());
        let mut io = WriteDeadline::new(server, activity.clone(), Duration::from_secs(3600));
        let mut done = activity.request();
        done.writing(Duration::from_secs(3));
        done.body_done();
        drop(done);
        let mut open = activity.request();
        open.writing(Duration::from_secs(5));
        // Given up (a reset stream): nothing of it is left to write.
        let mut reset = activity.request();
        reset.writing(Duration::from_secs(1));
        drop(reset);
        io.write_all(b"tail").await.unwrap();
        io.flush().await.unwrap();
        let mut got = [0u8; 4];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(
            activity.write_deadline(),
            Some(Instant::now() + Duration::from_secs(5))
        );
        drop(open);
        assert!(activity.write_deadline().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_that_writes_nothing_is_overdue_at_its_deadline() {
        // An HTTP/2 stream without window: no write is pending, the deadline still holds.
        let activity = Arc::new(Activity::default());
        let t0 = Instant::now();
        let overdue = tokio::spawn({
            let a = activity.clone();
            async move { a.watch(None, Some(Duration::from_secs(3))).await }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!overdue.is_finished(), "overdue without a response");
        let mut req = activity.request();
        req.writing(Duration::from_secs(3));
        assert_eq!(overdue.await.unwrap(), Ended::Overdue);
        assert_eq!(t0.elapsed(), Duration::from_secs(63));
        drop(req);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_stalled_without_any_response_fails_after_the_stall_limit() {
        let (server, _client) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let mut io = WriteDeadline::new(server, activity, Duration::from_secs(7));
        let t0 = Instant::now();
        let err = io.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(t0.elapsed(), Duration::from_secs(7));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_waits_for_the_last_request_to_end() {
        let activity = Arc::new(Activity::default());
        let req = activity.request();
        let idle = tokio::spawn({
            let a = activity.clone();
            async move {
                assert_eq!(
                    a.watch(Some(Duration::from_secs(5)), None).await,
                    Ended::Idle
                );
                Instant::now()
            }
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!idle.is_finished(), "idle while a request is in progress");
        let ended = Instant::now();
        drop(req);
        assert_eq!(idle.await.unwrap() - ended, Duration::from_secs(5));
    }
}
