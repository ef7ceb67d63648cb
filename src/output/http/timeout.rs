//! What the timeouts mean, as Go's `http.Server` (exporter-toolkit) means them:
//! * read timeout: reading a request. For HTTP/1 it is hyper's `header_read_timeout`, which
//!   runs from the moment a connection waits for a request head (so it also closes idle
//!   keep-alive connections) until the head is in; no endpoint reads a request body, and
//!   hyper gives up an unread one at once instead of waiting for it. It never runs while a
//!   handler works: a 20 s profile is not cut by a 5 s read timeout.
//! * idle: a connection with no request in progress for the read timeout is closed
//!   gracefully ([`Activity::idle`]; HTTP/2 has no header timeout, so this is what closes an
//!   idle HTTP/2 connection).
//! * write timeout: writing a response, from the moment its head is ready until its last
//!   byte went out ([`WriteDeadline`] on the connection's I/O): a client that does not read
//!   its response loses the connection then.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::{sleep, Instant, Sleep};

/// One connection's requests in progress and their write deadlines.
#[derive(Default)]
pub struct Activity {
    /// Requests received whose response has not been written yet.
    in_flight: AtomicUsize,
    /// Responses being written: id -> when their write time is up.
    writing: Mutex<BTreeMap<u64, Instant>>,
    next_id: AtomicU64,
    changed: Notify,
}

impl Activity {
    /// A request arrived; it counts until the returned guard (moved into the response body)
    /// is dropped.
    pub fn request(self: &Arc<Self>) -> Request {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
        Request {
            activity: self.clone(),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            writing: false,
        }
    }

    fn writes(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Instant>> {
        self.writing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The earliest deadline of the responses being written.
    fn write_deadline(&self) -> Option<Instant> {
        self.writes().values().min().copied()
    }

    /// Resolves once no request has been in progress for `timeout`.
    pub async fn idle(&self, timeout: Duration) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                tokio::select! {
                    _ = sleep(timeout) => return,
                    _ = changed => {}
                }
            } else {
                changed.await;
            }
        }
    }
}

/// A request in progress, from its head to the end of its response.
pub struct Request {
    activity: Arc<Activity>,
    id: u64,
    writing: bool,
}

impl Request {
    /// The response head is ready: its writing must be done within `timeout`.
    pub fn writing(&mut self, timeout: Duration) {
        self.activity
            .writes()
            .insert(self.id, Instant::now() + timeout);
        self.writing = true;
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if self.writing {
            self.activity.writes().remove(&self.id);
        }
        self.activity.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.activity.changed.notify_waiters();
    }
}

/// The connection's I/O with the write deadline of the responses being written: a write
/// that cannot go on past it fails the connection. Reads are never timed here.
pub struct WriteDeadline<S> {
    inner: S,
    activity: Arc<Activity>,
    timer: Pin<Box<Sleep>>,
}

impl<S> WriteDeadline<S> {
    pub fn new(inner: S, activity: Arc<Activity>) -> WriteDeadline<S> {
        WriteDeadline {
            inner,
            activity,
            timer: Box::pin(sleep(Duration::ZERO)),
        }
    }

    /// A pending write: an error once the deadline has passed, else wake up at it.
    fn pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let Some(deadline) = self.activity.write_deadline() else {
            return Poll::Pending;
        };
        if self.timer.deadline() != deadline {
            self.timer.as_mut().reset(deadline);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "writing the response took longer than the write timeout",
            )),
            Poll::Pending => Poll::Pending,
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
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.pending(cx).map(Err),
            ready => ready,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.pending(cx).map(Err),
            ready => ready,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.pending(cx).map(Err),
            ready => ready,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
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
        let mut io = WriteDeadline::new(server, activity.clone());
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
    async fn idle_waits_for_the_last_request_to_end() {
        let activity = Arc::new(Activity::default());
        let req = activity.request();
        let idle = tokio::spawn({
            let a = activity.clone();
            async move {
                a.idle(Duration::from_secs(5)).await;
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
