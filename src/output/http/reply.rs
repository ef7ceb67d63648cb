//! The plain responses every handler sends (the endpoints and pprof alike), shaped as
//! upstream's Go handlers shape them.

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper::header::{self, HeaderValue};
use hyper::StatusCode;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use warp::Reply;

pub(crate) type Response = warp::reply::Response;

/// A plain-text response with Go's content type and `nosniff`, as upstream's handlers send.
pub(crate) fn text(status: StatusCode, body: impl Into<Bytes>) -> Response {
    let mut r = hyper::Response::new(body.into()).into_response();
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

pub(crate) fn html(body: impl Into<Bytes>) -> Response {
    let mut r = text(StatusCode::OK, body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

/// A scrape's body: the published page and this scrape's self-metrics tail, both shared
/// buffers (a scrape copies no byte of the page), sent as they are.
#[derive(Debug, Default)]
pub(crate) struct PageBody {
    parts: [Bytes; 2],
    next: usize,
}

impl PageBody {
    pub(crate) fn new(page: Bytes, tail: Bytes) -> PageBody {
        PageBody {
            parts: [page, tail],
            next: 0,
        }
    }

    fn left(&self) -> u64 {
        self.parts[self.next.min(2)..]
            .iter()
            .map(|b| b.len() as u64)
            .sum()
    }

    /// The same response for warp (the filter's replies have warp's boxed body).
    pub(crate) fn into_warp(resp: hyper::Response<PageBody>) -> Response {
        let (parts, body) = resp.into_parts();
        let len = body.left();
        let chunks = body.parts.map(Ok::<_, Infallible>);
        let mut r = warp::reply::stream(futures_util::stream::iter(chunks)).into_response();
        *r.status_mut() = parts.status;
        *r.headers_mut() = parts.headers;
        // A stream's length is unknown to hyper: stated here, as hyper states it for the
        // body as it is.
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        r
    }
}

impl From<Bytes> for PageBody {
    fn from(b: Bytes) -> PageBody {
        PageBody::new(b, Bytes::new())
    }
}

impl hyper::body::Body for PageBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        while self.next < 2 {
            let i = self.next;
            self.next += 1;
            let part = std::mem::take(&mut self.parts[i]);
            if !part.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(part))));
            }
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.left() == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left())
    }
}
