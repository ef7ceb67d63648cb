//! What the timeouts mean, as Go's `http.Server` (exporter-toolkit) means them:
//! * read timeout: reading a request head, and an idle connection. HTTP/1 has hyper's
//!   header read timeout, which runs from the moment hyper waits for a head (a keep-alive
//!   connection waiting for its next request included) and closes the connection without
//!   an answer. An HTTP/2 connection with no request in progress for the read timeout is
//!   told to close ([`Requests::idle`]). No endpoint reads a request body, and the
//!   timeout never runs while a handler works: a 20 s profile is not cut by a 5 s read
//!   timeout.
//! * write timeout: an HTTP/1 response must be written from the moment its head is ready
//!   until its last byte went out. hyper takes the last frame long before a client that
//!   does not read has the bytes, so a finished response keeps its deadline until the
//!   connection's I/O next completes a flush. An HTTP/2 response's deadline is its
//!   stream's (`super::stream`): a stream the client grants no window is reset, not the
//!   connection.
//! * a write that cannot make progress for the write timeout fails, whatever is being
//!   written (hyper's own replies, HTTP/2 control frames), and ends the connection.
//!
//! A write the socket takes arms no timer: only a refused one looks at the deadlines and
//! sleeps until the earliest ([`Timed`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep_until, Instant, Sleep};

/// One connection's requests in progress and the write deadlines of its HTTP/1 responses.
pub(crate) struct Requests(Mutex<State>);

struct State {
    /// Requests received whose response body has not been dropped yet.
    in_flight: usize,
    /// When `in_flight` last fell to zero, or the connection began.
    quiet_since: Instant,
    /// The deadline of the HTTP/1 response whose body is being written (HTTP/1 writes one
    /// response at a time).
    open: Option<Instant>,
    /// The earliest deadline of the responses whose bodies are done and whose bytes wait
    /// for the connection's next completed flush.
    unflushed: Option<Instant>,
}

impl Default for Requests {
    fn default() -> Requests {
        Requests(Mutex::new(State {
            in_flight: 0,
            quiet_since: Instant::now(),
            open: None,
            unflushed: None,
        }))
    }
}

/// The earlier of two deadlines, none giving way to any.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Requests {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request arrived; it is in progress until the returned guard (moved into its
    /// response body) is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> InFlight {
        self.state().in_flight += 1;
        InFlight {
            requests: self.clone(),
            writing: false,
            written: false,
        }
    }

    /// The earliest deadline of the responses being written.
    pub(crate) fn write_deadline(&self) -> Option<Instant> {
        let s = self.state();
        earliest(s.open, s.unflushed)
    }

    /// The connection's I/O completed a flush: every response done before it is out.
    fn flushed(&self) {
        self.state().unflushed = None;
    }

    /// Resolves once no request has been in progress for `timeout`. It looks at the
    /// requests when that could first be true, and at least once per `timeout`: whatever
    /// ends after a look is a full timeout from being idle then.
    pub(crate) async fn idle(&self, timeout: Duration) {
        loop {
            let at = {
                let s = self.state();
                if s.in_flight == 0 {
                    s.quiet_since + timeout
                } else {
                    Instant::now() + timeout
                }
            };
            if at <= Instant::now() {
                return;
            }
            sleep_until(at).await;
        }
    }
}

/// A request in progress, from its head until its response body is dropped.
pub(crate) struct InFlight {
    requests: Arc<Requests>,
    /// Whether its HTTP/1 response's head is ready (the connection's open deadline is its).
    writing: bool,
    /// Whether the body gave its last frame.
    written: bool,
}

impl InFlight {
    /// The HTTP/1 response head is ready: its bytes must be out by `at`.
    pub(crate) fn writing_until(&mut self, at: Instant) {
        self.writing = true;
        let mut s = self.requests.state();
        s.open = earliest(s.open, Some(at));
    }

    /// The body gave its last frame: once hyper drops it, its deadline stays until the
    /// next completed flush. A body dropped without it was given up (a reset stream, a
    /// failed body): nothing of it is left to write.
    pub(crate) fn written(&mut self) {
        self.written = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut s = self.requests.state();
        if self.writing {
            if self.written {
                s.unflushed = earliest(s.unflushed, s.open);
            }
            s.open = None;
        }
        s.in_flight -= 1;
        if s.in_flight == 0 {
            s.quiet_since = Instant::now();
        }
    }
}

/// The connection's I/O: a write refused for the write timeout since the last one
/// accepted, or past the deadline of an HTTP/1 response being written, fails with
/// `TimedOut`, which ends the connection. Reads are never timed here.
pub(crate) struct Timed<S> {
    inner: S,
    requests: Arc<Requests>,
    write_timeout: Duration,
    /// Since when writes have been refused; `None` while they are accepted.
    blocked_since: Option<Instant>,
    /// Armed at the deadline of a refused write.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<S> Timed<S> {
    pub(crate) fn new(inner: S, requests: Arc<Requests>, write_timeout: Duration) -> Timed<S> {
        Timed {
            inner,
            requests,
            write_timeout,
            blocked_since: None,
            timer: None,
        }
    }

    /// What a write call answered: ready ends a stall; pending is allowed until the stall
    /// or the response deadline, whichever comes first.
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.blocked_since = None;
            return polled;
        }
        let now = Instant::now();
        let stall = *self.blocked_since.get_or_insert(now) + self.write_timeout;
        let due = earliest(Some(stall), self.requests.write_deadline()).unwrap_or(stall);
        let timer = match &mut self.timer {
            Some(t) => {
                if t.deadline() != due {
                    t.as_mut().reset(due);
                }
                t
            }
            None => self.timer.insert(Box::pin(sleep_until(due))),
        };
        if due <= now || timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no bytes within the write timeout",
            )));
        }
        Poll::Pending
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Timed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Timed<S> {
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
            self.requests.flushed();
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

    /// Writes `n` bytes to `io` on a task of its own; the task ends with the write.
    fn writer<S: AsyncWrite + Unpin + Send + 'static>(
        mut io: S,
        n: usize,
    ) -> tokio::task::JoinHandle<io::Result<()>> {
        tokio::spawn(async move { io.write_all(&vec![0u8; n]).await })
    }

    fn timed_out(r: io::Result<()>) -> bool {
        r.is_err_and(|e| e.kind() == io::ErrorKind::TimedOut)
    }

    /// The server's end of a pipe whose client takes `buffer` bytes at most, its writes
    /// timed with `write_timeout`.
    fn pipe(
        buffer: usize,
        write_timeout: u64,
    ) -> (
        Timed<tokio::io::DuplexStream>,
        tokio::io::DuplexStream,
        Arc<Requests>,
    ) {
        let (server, client) = tokio::io::duplex(buffer);
        let requests = Arc::new(Requests::default());
        let io = Timed::new(server, requests.clone(), Duration::from_secs(write_timeout));
        (io, client, requests)
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_nobody_reads_fails_at_its_deadline() {
        let (io, _client, requests) = pipe(64, 5);
        let mut req = requests.start();
        let t0 = Instant::now();
        req.writing_until(t0 + Duration::from_secs(3));
        assert!(timed_out(writer(io, 1024).await.unwrap()));
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_handler_and_a_silent_reader_are_not_write_timeouts() {
        let (mut io, mut client, requests) = pipe(64, 3);
        // A request whose handler runs for a minute: no deadline while it works, and reads
        // are never timed.
        let mut req = requests.start();
        let read = tokio::spawn(async move {
            let mut buf = [0u8; 1];
            let n = io.read(&mut buf).await;
            (io, n.map(|_| buf[0]))
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        client.write_all(b"x").await.unwrap();
        let (io, byte) = read.await.unwrap();
        assert_eq!(byte.unwrap(), b'x');
        // Then the response goes out to a client that reads it, slower than the socket
        // takes it but well within the deadline.
        req.writing_until(Instant::now() + Duration::from_secs(3));
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 4096];
            client.read_exact(&mut got).await.map(|_| got.len())
        });
        writer(io, 4096).await.unwrap().unwrap();
        assert_eq!(reader.await.unwrap().unwrap(), 4096);
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_body_keeps_its_deadline_until_the_bytes_are_flushed() {
        let (io, _client, requests) = pipe(64, 5);
        let mut req = requests.start();
        let t0 = Instant::now();
        req.writing_until(t0 + Duration::from_secs(3));
        // hyper took the last frame and dropped the body; the bytes are still to be written.
        req.written();
        drop(req);
        assert!(timed_out(writer(io, 1024).await.unwrap()));
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_completed_flush_retires_finished_responses_only() {
        let (mut io, mut client, requests) = pipe(4096, 5);
        let now = Instant::now();
        // Given up (a failed body): nothing of it is left to write.
        let mut given_up = requests.start();
        given_up.writing_until(now + Duration::from_secs(1));
        drop(given_up);
        assert_eq!(requests.write_deadline(), None);
        // Done, its bytes not yet flushed; then the next response opens (HTTP/1: one at a
        // time), and the earlier deadline holds.
        let mut done = requests.start();
        done.writing_until(now + Duration::from_secs(3));
        done.written();
        drop(done);
        let mut open = requests.start();
        open.writing_until(now + Duration::from_secs(5));
        assert_eq!(
            requests.write_deadline(),
            Some(now + Duration::from_secs(3))
        );
        io.write_all(b"tail").await.unwrap();
        io.flush().await.unwrap();
        let mut got = [0u8; 4];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(
            requests.write_deadline(),
            Some(now + Duration::from_secs(5))
        );
        drop(open);
        assert_eq!(requests.write_deadline(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_refused_without_any_response_fails_after_the_write_timeout() {
        let (io, _client, _requests) = pipe(64, 7);
        let t0 = Instant::now();
        assert!(timed_out(writer(io, 1024).await.unwrap()));
        assert_eq!(t0.elapsed(), Duration::from_secs(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_counts_from_the_last_write_accepted() {
        let (io, mut client, _requests) = pipe(64, 7);
        let t0 = Instant::now();
        let write = writer(io, 1024);
        // The client takes a few bytes after 5 s, then no more.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let mut got = [0u8; 64];
        client.read_exact(&mut got).await.unwrap();
        assert!(timed_out(write.await.unwrap()));
        assert_eq!(t0.elapsed(), Duration::from_secs(12));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_keeps_taking_bytes_is_not_stalled_but_is_late() {
        // A trickle: a few bytes a second keeps the write from stalling, not from its
        // response's deadline.
        let (io, mut client, requests) = pipe(64, 3);
        let mut req = requests.start();
        let t0 = Instant::now();
        req.writing_until(t0 + Duration::from_secs(10));
        let write = writer(io, 1 << 20);
        let trickle = tokio::spawn(async move {
            let mut got = [0u8; 16];
            while client.read_exact(&mut got).await.is_ok() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        assert!(timed_out(write.await.unwrap()));
        assert_eq!(t0.elapsed(), Duration::from_secs(10));
        trickle.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn idle_waits_for_the_last_request_to_end() {
        let requests = Arc::new(Requests::default());
        let req = requests.start();
        let idle = tokio::spawn({
            let r = requests.clone();
            async move {
                r.idle(Duration::from_secs(5)).await;
                Instant::now()
            }
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!idle.is_finished(), "idle while a request is in progress");
        let ended = Instant::now();
        drop(req);
        assert_eq!(idle.await.unwrap() - ended, Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_requests_is_idle_from_its_start() {
        let requests = Requests::default();
        let t0 = Instant::now();
        requests.idle(Duration::from_secs(5)).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_of_overlapping_requests() {
        // HTTP/2: streams overlap; the connection is idle from when the last one ends.
        let requests = Arc::new(Requests::default());
        let (first, second) = (requests.start(), requests.start());
        let idle = tokio::spawn({
            let r = requests.clone();
            async move {
                r.idle(Duration::from_secs(5)).await;
                Instant::now()
            }
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(first);
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(
            !idle.is_finished(),
            "idle while the second request is in progress"
        );
        let ended = Instant::now();
        drop(second);
        assert_eq!(idle.await.unwrap() - ended, Duration::from_secs(5));
    }
}
