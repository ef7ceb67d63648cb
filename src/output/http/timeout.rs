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
//!   a flush ([`WriteDeadline`] tells). [`Activity::watch`] ends the connection when an
//!   HTTP/1 response has not gone out by then, whether or not anything is being written.
//!   An HTTP/2 response's deadline is its stream's (`super::stream`): a stream the client
//!   grants no window is reset, not the connection.
//! * a write that cannot make progress for the write timeout ends the connection even when
//!   no response is being written (hyper's own replies, HTTP/2 control frames): nothing
//!   the server writes may wait on a client for longer ([`Ended::Stalled`]).
//!
//! Per request this costs a few atomics: no lock is taken, no timer armed, no task woken
//! (`bench serving` compares it with a server that only sends the bytes). The
//! watches sleep on a runtime of their own ([`Timers`]): a timer armed on the serving
//! runtime, even one that never fires, makes each of its workers read the clock and look
//! through the timer wheel every time it parks, that is for about every request.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep, Instant};

/// One connection's requests in progress, since when it has had none, and the write
/// deadlines of its responses. Nothing here wakes anybody: [`Activity::watch`] looks at it
/// when a deadline it knows of comes, and at least once per timeout, which is soon enough
/// for anything that began since (a deadline is always a full timeout away from its start).
/// A request then costs a few atomics, never a lock or a timer. Times are nanoseconds
/// after `born`, plus one, 0 standing for none: one word each, so that the connection's
/// requests touch one small struct and the watch reads it from another thread as it is.
///
/// Write deadlines are HTTP/1's (an HTTP/2 stream keeps its own, `super::stream`), and
/// HTTP/1 writes one response at a time: hyper reads the next request head only once the
/// response before it has been handed its last frame. So one response is open at most,
/// and every response done before it waits for the same flush.
pub struct Activity {
    /// Requests received whose response body has not ended yet.
    in_flight: AtomicUsize,
    /// When `in_flight` last fell to zero (none: since the connection began).
    quiet_since: AtomicU64,
    born: Instant,
    /// The deadline of the response being written.
    open: AtomicU64,
    /// The earliest deadline of the responses whose bodies are done and whose bytes wait
    /// for the connection's next completed flush.
    unflushed: AtomicU64,
    /// Since when a write of the connection has been refused (none accepted since).
    blocked_since: AtomicU64,
    /// How many times an [`Activity::watch`] has been polled (were it polled for every
    /// request, its timer would be too: the tests count them).
    polls: AtomicU64,
    /// What the connection's watch told it ([`Told::code`]), 0 for nothing yet. In the
    /// block every request of the connection touches anyway, not an allocation of its own:
    /// the connection looks here at every wake of its task.
    told: AtomicU8,
    /// The connection's task, left by [`Activity::told`]'s first poll, woken once by
    /// [`Activity::tell`].
    told_waker: Mutex<Option<Waker>>,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            quiet_since: AtomicU64::new(0),
            born: Instant::now(),
            open: AtomicU64::new(0),
            unflushed: AtomicU64::new(0),
            blocked_since: AtomicU64::new(0),
            polls: AtomicU64::new(0),
            told: AtomicU8::new(0),
            told_waker: Mutex::new(None),
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
    /// A write made no progress for the write timeout.
    Stalled,
}

/// What a connection's watch tells it.
#[derive(Debug, PartialEq, Eq)]
pub enum Told {
    /// The server stops (or the runtime the watch ran on did).
    Stop,
    Ended(Ended),
}

impl Told {
    fn code(&self) -> u8 {
        match self {
            Told::Stop => 1,
            Told::Ended(Ended::Idle) => 2,
            Told::Ended(Ended::Overdue) => 3,
            Told::Ended(Ended::Stalled) => 4,
        }
    }

    fn of(code: u8) -> Option<Told> {
        Some(match code {
            1 => Told::Stop,
            2 => Told::Ended(Ended::Idle),
            3 => Told::Ended(Ended::Overdue),
            4 => Told::Ended(Ended::Stalled),
            _ => return None,
        })
    }
}

impl Ended {
    /// Why the connection ends, for its log line.
    pub fn reason(&self) -> &'static str {
        match self {
            Ended::Idle => "no request for the read timeout",
            Ended::Overdue => "a response was not written within the write timeout",
            Ended::Stalled => "the client took no bytes for the write timeout",
        }
    }
}

impl Activity {
    /// A request arrived; it counts until the returned guard (moved into the response body)
    /// is dropped.
    pub fn request(self: &Arc<Self>) -> Request {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Request {
            activity: self.clone(),
            writing: false,
            body_done: false,
        }
    }

    /// `at` as stored: nanoseconds after `born`, plus one.
    fn stamp(&self, at: Instant) -> u64 {
        let ns = at.saturating_duration_since(self.born).as_nanos();
        u64::try_from(ns).unwrap_or(u64::MAX - 1) + 1
    }

    /// A stored time as an instant; `None` for none.
    fn instant(&self, stamp: u64) -> Option<Instant> {
        stamp
            .checked_sub(1)
            .map(|ns| self.born + Duration::from_nanos(ns))
    }

    /// The earliest deadline of the responses being written.
    fn write_deadline(&self) -> Option<Instant> {
        // Loaded in the order a finished response moves them (`Request::drop` sets
        // `unflushed` before it clears `open`), so that its deadline is seen in one or the
        // other.
        let open = self.open.load(Ordering::Acquire);
        let unflushed = self.unflushed.load(Ordering::Acquire);
        self.instant(earliest(open, unflushed))
    }

    /// The connection's I/O completed a flush: every response whose body was done before
    /// it has left the process.
    fn flushed(&self) {
        if self.unflushed.load(Ordering::Acquire) != 0 {
            self.unflushed.store(0, Ordering::Release);
        }
    }

    /// A write was refused after one that was not: the connection stalls from now unless
    /// one is accepted within the write timeout.
    fn blocked(&self) {
        self.blocked_since
            .store(self.stamp(Instant::now()), Ordering::Release);
    }

    /// A write was accepted (or a flush completed): no stall.
    fn unblocked(&self) {
        self.blocked_since.store(0, Ordering::Release);
    }

    /// When the write refused since [`Activity::blocked`] becomes a stall.
    fn stalled_at(&self, stall: Duration) -> Option<Instant> {
        self.instant(self.blocked_since.load(Ordering::Acquire))
            .map(|since| since + stall)
    }

    /// Tells the connection to end and wakes its task; the first word told stands.
    pub fn tell(&self, why: Told) {
        let code = why.code();
        if self
            .told
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let waker = self
            .told_waker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// What the connection was told, once [`Activity::tell`] was called. For the
    /// connection's own task, which polls it at every wake: the first poll leaves the
    /// task's waker (a tokio task's waker stays the same for its life), every later poll
    /// is one load. A tokio oneshot in its place cost a cache line of its own and the
    /// task's budget at every wake (about 100 ns per request under 64 connections: bench
    /// README).
    pub fn told(&self) -> impl Future<Output = Told> + '_ {
        let mut left_waker = false;
        std::future::poll_fn(move |cx| {
            if let Some(t) = Told::of(self.told.load(Ordering::Acquire)) {
                return Poll::Ready(t);
            }
            if !left_waker {
                left_waker = true;
                *self.told_waker.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(cx.waker().clone());
                // Told before the waker was left: `tell` found none to wake. Its word was
                // stored before it looked (under the same lock), so it shows here.
                if let Some(t) = Told::of(self.told.load(Ordering::Acquire)) {
                    return Poll::Ready(t);
                }
            }
            Poll::Pending
        })
    }

    /// How many times an [`Activity::watch`] has been polled so far.
    #[cfg(test)]
    pub(crate) fn watch_polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    /// Whether a response still has bytes to write (or to flush).
    pub fn writing(&self) -> bool {
        self.write_deadline().is_some()
    }

    /// When the connection turns idle if no request comes: `None` while one is in progress.
    fn idle_at(&self, timeout: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::SeqCst) != 0 {
            return None;
        }
        let quiet = self.instant(self.quiet_since.load(Ordering::SeqCst));
        Some(quiet.unwrap_or(self.born) + timeout)
    }

    /// Resolves once no request has been in progress for `idle` (when given), once a
    /// response has not been written by its deadline, whether or not anything is being
    /// written (a response the client's flow control holds writes nothing), or once a
    /// write has been refused for `overdue` (the write timeout) without a byte accepted.
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
            if let Some(at) = overdue.and_then(|t| self.stalled_at(t)) {
                if at <= now {
                    return Ended::Stalled;
                }
                next = next.min(at);
            }
            timer.as_mut().reset(next);
            timer.as_mut().await;
        }
    }
}

/// The earlier of two stored times, 0 (none) giving way to any other.
fn earliest(a: u64, b: u64) -> u64 {
    match (a, b) {
        (0, t) | (t, 0) => t,
        (a, b) => a.min(b),
    }
}

/// A request in progress, from its head to the end of its response.
pub struct Request {
    activity: Arc<Activity>,
    writing: bool,
    body_done: bool,
}

impl Request {
    /// The response head is ready: its writing must be done within `timeout`.
    pub fn writing(&mut self, timeout: Duration) {
        self.writing_until(Instant::now() + timeout);
    }

    /// The response head is ready: its writing must be done by `at`. Were another response
    /// of the connection still open (HTTP/1 has none), the earlier deadline holds for both.
    pub fn writing_until(&mut self, at: Instant) {
        let a = &self.activity;
        let at = earliest(a.open.load(Ordering::Acquire), a.stamp(at));
        a.open.store(at, Ordering::Release);
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
        let a = &self.activity;
        if self.writing {
            let open = a.open.load(Ordering::Acquire);
            if self.body_done && open != 0 {
                // Its bytes wait for a flush: moved before `open` is cleared, so that the
                // watch always sees the deadline in one of the two.
                let unflushed = earliest(a.unflushed.load(Ordering::Acquire), open);
                a.unflushed.store(unflushed, Ordering::Release);
            }
            a.open.store(0, Ordering::Release);
        }
        // Stored before the count falls: whoever sees no request in progress sees this
        // end too (were it stored after, an old quiet time could close the connection the
        // moment a long request ended).
        a.quiet_since
            .fetch_max(a.stamp(Instant::now()), Ordering::SeqCst);
        a.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The connection's I/O, telling its [`Activity`] when a write is refused and when one is
/// accepted or flushed; [`Activity::watch`] ends a connection whose write stalls or whose
/// response is late. Nothing here arms a timer (see the module's doc). Reads are never
/// timed here.
pub struct WriteDeadline<S> {
    inner: S,
    activity: Arc<Activity>,
    /// Whether the last write was refused (then `activity` knows since when).
    blocked: bool,
}

impl<S> WriteDeadline<S> {
    pub fn new(inner: S, activity: Arc<Activity>) -> WriteDeadline<S> {
        WriteDeadline {
            inner,
            activity,
            blocked: false,
        }
    }

    /// What a write call answered: pending starts a stall, anything else ends it.
    fn timed<T>(&mut self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match (&polled, self.blocked) {
            (Poll::Pending, false) => {
                self.blocked = true;
                self.activity.blocked();
            }
            (Poll::Ready(_), true) => {
                self.blocked = false;
                self.activity.unblocked();
            }
            _ => {}
        }
        polled
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
        self.timed(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.timed(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = polled {
            self.activity.flushed();
        }
        self.timed(polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // A TLS close_notify is a write too.
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.timed(polled)
    }
}

/// The runtime the connections' watches sleep on: a thread of its own, with a timer driver
/// and nothing else, ended (with the watches left on it) when this is dropped.
pub struct Timers {
    handle: tokio::runtime::Handle,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Timers {
    pub fn start() -> io::Result<Timers> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("http-timers".into())
            // A watch is a few hundred bytes of future; the runtime polls them in turn.
            .stack_size(256 * 1024)
            .spawn(move || {
                let _ = rt.block_on(stopped);
            })?;
        Ok(Timers {
            handle,
            _stop: stop,
        })
    }

    /// Runs `fut` on the timers' thread.
    pub fn spawn<F>(&self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(fut)
    }

    /// How many tasks sleep here.
    #[cfg(test)]
    pub(crate) fn tasks(&self) -> usize {
        self.handle.metrics().num_alive_tasks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Writes `n` bytes to `io` on a task of its own; the task ends with the write.
    fn writer<S: AsyncWrite + Unpin + Send + 'static>(
        mut io: S,
        n: usize,
    ) -> tokio::task::JoinHandle<io::Result<()>> {
        tokio::spawn(async move { io.write_all(&vec![0u8; n]).await })
    }

    /// Watches `activity` on a task of its own, with no idle timeout.
    fn watching(activity: &Arc<Activity>, overdue: u64) -> tokio::task::JoinHandle<Ended> {
        let a = activity.clone();
        tokio::spawn(async move { a.watch(None, Some(Duration::from_secs(overdue))).await })
    }

    /// A waker that counts its wakes.
    struct Counting(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_connection_is_told_once_woken_and_the_first_word_stands() {
        let activity = Activity::default();
        let counting = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(counting.clone());
        let mut cx = Context::from_waker(&waker);
        let mut told = std::pin::pin!(activity.told());
        assert!(told.as_mut().poll(&mut cx).is_pending());
        assert!(told.as_mut().poll(&mut cx).is_pending());
        std::thread::scope(|s| {
            s.spawn(|| activity.tell(Told::Ended(Ended::Idle)));
        });
        assert_eq!(counting.0.load(Ordering::SeqCst), 1, "woken once");
        assert_eq!(
            told.as_mut().poll(&mut cx),
            Poll::Ready(Told::Ended(Ended::Idle))
        );
        // A later word changes nothing and wakes nobody.
        activity.tell(Told::Stop);
        assert_eq!(counting.0.load(Ordering::SeqCst), 1);
        let mut again = std::pin::pin!(activity.told());
        assert_eq!(
            again.as_mut().poll(&mut cx),
            Poll::Ready(Told::Ended(Ended::Idle))
        );
    }

    #[test]
    fn a_word_told_before_the_first_look_is_seen_without_a_wake() {
        for why in [
            Told::Stop,
            Told::Ended(Ended::Idle),
            Told::Ended(Ended::Overdue),
            Told::Ended(Ended::Stalled),
        ] {
            let activity = Activity::default();
            let counting = Arc::new(Counting(AtomicUsize::new(0)));
            let waker = Waker::from(counting.clone());
            let mut cx = Context::from_waker(&waker);
            let code = why.code();
            activity.tell(why);
            let mut told = std::pin::pin!(activity.told());
            assert_eq!(
                told.as_mut().poll(&mut cx).map(|t| t.code()),
                Poll::Ready(code)
            );
            assert_eq!(counting.0.load(Ordering::SeqCst), 0);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_nobody_reads_is_overdue_at_its_deadline() {
        let (server, _client) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let io = WriteDeadline::new(server, activity.clone());
        let mut req = activity.request();
        let t0 = Instant::now();
        req.writing(Duration::from_secs(3));
        let write = writer(io, 1024);
        assert_eq!(watching(&activity, 5).await.unwrap(), Ended::Overdue);
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
        assert!(!write.is_finished(), "the write still waits for the client");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_handler_and_a_silent_reader_are_not_write_timeouts() {
        let (server, mut client) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let watch = watching(&activity, 3);
        let mut io = WriteDeadline::new(server, activity.clone());
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
        let (io, byte) = read.await.unwrap();
        assert_eq!(byte.unwrap(), b'x');
        // Then the response goes out to a client that reads it.
        req.writing(Duration::from_secs(3));
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 4096];
            client.read_exact(&mut got).await.map(|_| got.len())
        });
        writer(io, 4096).await.unwrap().unwrap();
        assert_eq!(reader.await.unwrap().unwrap(), 4096);
        drop(req);
        assert!(activity.write_deadline().is_none());
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!watch.is_finished(), "{:?}", watch.await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_body_keeps_its_deadline_until_the_bytes_are_flushed() {
        let (server, _client) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let io = WriteDeadline::new(server, activity.clone());
        let mut req = activity.request();
        let t0 = Instant::now();
        req.writing(Duration::from_secs(3));
        // hyper took the last frame and dropped the body; the bytes are still to be written.
        req.body_done();
        drop(req);
        let _write = writer(io, 1024);
        assert_eq!(watching(&activity, 5).await.unwrap(), Ended::Overdue);
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_completed_flush_retires_finished_responses_only() {
        let (server, mut client) = tokio::io::duplex(4096);
        let activity = Arc::new(Activity::default());
        let mut io = WriteDeadline::new(server, activity.clone());
        // Given up (a failed body): nothing of it is left to write.
        let mut given_up = activity.request();
        given_up.writing(Duration::from_secs(1));
        drop(given_up);
        assert!(activity.write_deadline().is_none());
        // Done, its bytes not yet flushed; then the next response opens (HTTP/1: one at a
        // time), and the earlier deadline holds.
        let mut done = activity.request();
        done.writing(Duration::from_secs(3));
        done.body_done();
        drop(done);
        let mut open = activity.request();
        open.writing(Duration::from_secs(5));
        assert_eq!(
            activity.write_deadline(),
            Some(Instant::now() + Duration::from_secs(3))
        );
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
        assert!(!activity.writing());
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
    async fn a_write_refused_without_any_response_stalls_after_the_write_timeout() {
        let (server, _client) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let t0 = Instant::now();
        let _write = writer(WriteDeadline::new(server, activity.clone()), 1024);
        assert_eq!(watching(&activity, 7).await.unwrap(), Ended::Stalled);
        assert_eq!(t0.elapsed(), Duration::from_secs(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_counts_from_the_last_write_accepted() {
        let (server, mut client) = tokio::io::duplex(64);
        let activity = Arc::new(Activity::default());
        let t0 = Instant::now();
        let write = writer(WriteDeadline::new(server, activity.clone()), 1024);
        let watch = watching(&activity, 7);
        // The client takes a few bytes after 5 s, then no more.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let mut got = [0u8; 64];
        client.read_exact(&mut got).await.unwrap();
        tokio::task::yield_now().await;
        assert_eq!(watch.await.unwrap(), Ended::Stalled);
        assert_eq!(t0.elapsed(), Duration::from_secs(12));
        assert!(!write.is_finished());
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
