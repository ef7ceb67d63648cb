//! Read and write timeouts on a connection, as Go's `http.Server` has them: a read that waits
//! longer than the read timeout (a client that sends its request too slowly, or a keep-alive
//! connection left idle) and a write that cannot make progress for the write timeout (a client
//! that does not read its response) end the connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep, Instant, Sleep};

pub struct TimeoutIo<S> {
    inner: S,
    read_timeout: Duration,
    write_timeout: Duration,
    read_deadline: Deadline,
    write_deadline: Deadline,
}

/// A timer allocated once per connection and re-armed, not re-created, per wait.
struct Deadline {
    sleep: Pin<Box<Sleep>>,
    armed: bool,
}

impl Deadline {
    fn new() -> Deadline {
        Deadline {
            sleep: Box::pin(sleep(Duration::ZERO)),
            armed: false,
        }
    }
}

impl<S> TimeoutIo<S> {
    pub fn new(inner: S, read_timeout: Duration, write_timeout: Duration) -> TimeoutIo<S> {
        TimeoutIo {
            inner,
            read_timeout,
            write_timeout,
            read_deadline: Deadline::new(),
            write_deadline: Deadline::new(),
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

/// Arms the deadline on the first pending poll and fails once it passes; a ready poll
/// disarms it.
fn check(d: &mut Deadline, timeout: Duration, cx: &mut Context<'_>, what: &str) -> Poll<io::Error> {
    if !d.armed {
        d.sleep.as_mut().reset(Instant::now() + timeout);
        d.armed = true;
    }
    match d.sleep.as_mut().poll(cx) {
        Poll::Ready(()) => Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{what} timed out after {timeout:?}"),
        )),
        Poll::Pending => Poll::Pending,
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for TimeoutIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        match Pin::new(&mut me.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                me.read_deadline.armed = false;
                Poll::Ready(r)
            }
            Poll::Pending => check(&mut me.read_deadline, me.read_timeout, cx, "read").map(Err),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TimeoutIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        match Pin::new(&mut me.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                me.write_deadline.armed = false;
                Poll::Ready(r)
            }
            Poll::Pending => check(&mut me.write_deadline, me.write_timeout, cx, "write").map(Err),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        match Pin::new(&mut me.inner).poll_flush(cx) {
            Poll::Ready(r) => {
                me.write_deadline.armed = false;
                Poll::Ready(r)
            }
            Poll::Pending => check(&mut me.write_deadline, me.write_timeout, cx, "write").map(Err),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S> TimeoutIo<S> {
    /// When the current read deadline passes, if one is armed (for tests).
    pub fn read_deadline(&self) -> Option<Instant> {
        self.read_deadline
            .armed
            .then(|| self.read_deadline.sleep.deadline())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_client_that_does_not_read_fails_the_write_after_the_timeout() {
        let (server, _client) = tokio::io::duplex(64);
        let mut io = TimeoutIo::new(server, Duration::from_secs(10), Duration::from_secs(3));
        let t0 = Instant::now();
        let err = io.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_client_fails_the_read_and_a_talking_one_does_not() {
        let (server, mut client) = tokio::io::duplex(64);
        let mut io = TimeoutIo::new(server, Duration::from_secs(2), Duration::from_secs(30));
        let writer = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                client.write_all(b"x").await.unwrap();
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(client);
        });
        let mut buf = [0u8; 1];
        for _ in 0..3 {
            io.read_exact(&mut buf).await.unwrap();
        }
        assert!(io.read_deadline().is_none());
        let t0 = Instant::now();
        let err = io.read_exact(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
        writer.abort();
    }
}
