//! The plain responses every handler sends (the endpoints and pprof alike), shaped as
//! upstream's Go handlers shape them.

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::StatusCode;
use warp::Reply;

pub type Response = warp::reply::Response;

/// A plain-text response with Go's content type and `nosniff`, as upstream's handlers send.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response {
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

pub fn html(body: impl Into<Bytes>) -> Response {
    let mut r = text(StatusCode::OK, body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}
