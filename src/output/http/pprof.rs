//! `--enable-pprof`: a CPU profile in pprof's protobuf format at upstream's path
//! `/debug/pprof/profile?seconds=N` (read by `go tool pprof` and `pprof`), the index at
//! `/debug/pprof/` and the command line at `/debug/pprof/cmdline`. Go's other profiles (heap,
//! goroutine, ...) have no Rust counterpart and answer 404 as Go's unknown profiles do.

use super::reply::{html, text, Response};
use hyper::header::{self, HeaderValue};
use hyper::StatusCode;
use pprof::protos::Message;
use std::time::Duration;
use warp::Reply;

const INDEX: &str =
    "<html>\n<head><title>/debug/pprof/</title></head>\n<body>\n/debug/pprof/<br>\n<br>\n\
<a href=\"profile?seconds=30\">profile</a>: CPU profile (pprof protobuf); add ?seconds=N<br>\n\
<a href=\"cmdline\">cmdline</a>: the command line<br>\n</body>\n</html>\n";

pub(crate) async fn handle(path: &str, query: &str, write_timeout: Duration) -> Response {
    match path {
        "/debug/pprof/" => html(INDEX),
        "/debug/pprof/cmdline" => text(
            StatusCode::OK,
            std::env::args().collect::<Vec<_>>().join("\0"),
        ),
        "/debug/pprof/profile" => profile(query, write_timeout).await,
        _ => text(StatusCode::NOT_FOUND, "Unknown profile\n"),
    }
}

fn seconds(query: &str) -> Result<u64, String> {
    match query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "seconds")
    {
        None => Ok(30),
        Some((_, v)) => match v.parse::<u64>() {
            Ok(0) => Ok(30),
            Ok(n) => Ok(n),
            Err(_) => Err(format!("invalid value for \"seconds\": {v:?}\n")),
        },
    }
}

async fn profile(query: &str, write_timeout: Duration) -> Response {
    let secs = match seconds(query) {
        Ok(s) => s,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    // As Go: a profile longer than the write timeout could never be delivered.
    if Duration::from_secs(secs) >= write_timeout {
        return text(
            StatusCode::BAD_REQUEST,
            "profile duration exceeds server's WriteTimeout (--web-write-timeout)\n",
        );
    }
    // The profiler is process-wide and its guard is not Send: it lives on a blocking thread.
    let result = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
        let guard = pprof::ProfilerGuardBuilder::default()
            .frequency(100)
            .blocklist(&["libc", "libgcc", "pthread", "vdso"])
            .build()
            .map_err(|e| format!("could not enable CPU profiling: {e}"))?;
        std::thread::sleep(Duration::from_secs(secs));
        let report = guard.report().build().map_err(|e| e.to_string())?;
        let profile = report.pprof().map_err(|e| e.to_string())?;
        profile.write_to_bytes().map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    match result {
        Ok(bytes) => {
            let mut r = hyper::Response::new(bytes).into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            h.insert(
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment; filename=\"profile\""),
            );
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            r
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}
