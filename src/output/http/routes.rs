//! The endpoints, as upstream's gorilla/mux router answers them: the metrics path (default
//! `/metrics`), `/health`, `/` and, with `--enable-pprof`, `/debug/pprof/`. Routes accept
//! every method, as upstream registers them without a method filter (`HEAD` gets the headers
//! without the body); other paths get Go's `404 page not found`. Basic auth, when
//! configured, applies to every path, as exporter-toolkit applies it.

use super::auth::Outcome;
use super::state::WebState;
use super::{negotiate, pprof, Options};
use crate::lifecycle::app::Shared;
use crate::output::exposition::Exposition;
use crate::output::exposition::Format;
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Body, Request, Response, StatusCode};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How long a built response body is reused for the same page, format and encoding. The
/// page changes only per collection; within this time only the process self-metrics could
/// move, and rebuilding per scrape would cost more than the rest of the scrape.
const BODY_REUSE: Duration = Duration::from_secs(1);

/// A response body built for one page, format and encoding.
struct Built {
    page: Arc<Exposition>,
    at: Instant,
    format: Format,
    body: Bytes,
}

/// One slot per (asked format, gzip).
#[derive(Default)]
struct Bodies(Mutex<[Option<Built>; 4]>);

impl Bodies {
    fn get(
        &self,
        page: &Arc<Exposition>,
        wanted: Format,
        gzip: bool,
        build: impl FnOnce() -> (Format, Vec<u8>),
    ) -> (Format, Bytes) {
        let slot = usize::from(wanted == Format::OpenMetrics) * 2 + usize::from(gzip);
        let mut slots = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = &slots[slot] {
            if Arc::ptr_eq(&b.page, page) && b.at.elapsed() < BODY_REUSE {
                return (b.format, b.body.clone());
            }
        }
        let (format, body) = build();
        let body = Bytes::from(body);
        slots[slot] = Some(Built {
            page: page.clone(),
            at: Instant::now(),
            format,
            body: body.clone(),
        });
        (format, body)
    }
}

pub struct Routes {
    shared: Arc<Shared>,
    opts: Options,
    scrapes: Arc<Semaphore>,
    landing: String,
    bodies: Bodies,
}

/// A plain-text response with Go's content type and `nosniff`, as upstream's handlers send.
pub(super) fn text(status: StatusCode, body: impl Into<Body>) -> Response<Body> {
    let mut r = Response::new(body.into());
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

impl Routes {
    pub fn new(shared: Arc<Shared>, opts: Options) -> Routes {
        let pprof = if opts.pprof {
            "<h2>Profiling (pprof)</h2>\n<ul>\n<li><a href=\"./debug/pprof/\">Index</a></li>\n\
             <li><a href=\"./debug/pprof/profile?seconds=5\">CPU profile (5 s)</a></li>\n</ul>\n"
        } else {
            ""
        };
        let landing = format!(
            "<html>\n<head><title>GPU Exporter</title></head>\n<body>\n<h1>GPU Exporter</h1>\n\
             <p><a href=\".{}\">Metrics</a></p>\n<p><a href=\"./health\">Health</a></p>\n{pprof}</body>\n</html>\n",
            opts.telemetry_path
        );
        Routes {
            shared,
            scrapes: Arc::new(Semaphore::new(opts.max_concurrent_scrapes)),
            opts,
            landing,
            bodies: Bodies::default(),
        }
    }

    pub async fn handle(&self, req: Request<Body>, web: &WebState) -> Response<Body> {
        let outcome = match &web.auth {
            Some(auth) => {
                let value = req.headers().get(header::AUTHORIZATION);
                auth.check_header(value.map(|v| v.as_bytes())).await
            }
            None => Outcome::Allowed,
        };
        let mut resp = match outcome {
            Outcome::Allowed => self.route(req).await,
            Outcome::Denied => {
                let mut r = text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
                r
            }
            Outcome::Overloaded => {
                let mut r = text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many password checks at once, try again\n",
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                r
            }
        };
        for (k, v) in &web.headers {
            resp.headers_mut().entry(k).or_insert_with(|| v.clone());
        }
        resp
    }

    async fn route(&self, req: Request<Body>) -> Response<Body> {
        let path = req.uri().path();
        if path == self.opts.telemetry_path {
            return self.metrics(&req);
        }
        match path {
            "/health" => self.health(),
            "/" => {
                let mut r = text(StatusCode::OK, self.landing.clone());
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                );
                r
            }
            p if self.opts.pprof && p.starts_with("/debug/pprof/") => {
                pprof::handle(&req, self.opts.write_timeout).await
            }
            _ => text(StatusCode::NOT_FOUND, "404 page not found\n"),
        }
    }

    fn metrics(&self, req: &Request<Body>) -> Response<Body> {
        // The permit is held while the response is built; excess scrapes are refused rather
        // than queued, as upstream's --max-concurrent-scrapes does.
        let Ok(_permit) = self.scrapes.try_acquire() else {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "too many concurrent scrapes (--max-concurrent-scrapes={})\n",
                    self.opts.max_concurrent_scrapes
                ),
            );
        };
        // promhttp_metric_handler_requests_* (--enable-exporter-metrics).
        let _counted = self.shared.metrics.scrape();
        let h = req.headers();
        let wanted = if self.opts.openmetrics {
            negotiate::format(h.get(header::ACCEPT))
        } else {
            Format::Text
        };
        let gzip = negotiate::gzip(h.get(header::ACCEPT_ENCODING));
        let page = self.shared.page();
        let build = || page.body(wanted, &self.shared.metrics.gather(), gzip);
        let (format, body) = if self.shared.metrics.live() {
            let (format, body) = build();
            (format, Bytes::from(body))
        } else {
            self.bodies.get(&page, wanted, gzip, build)
        };
        let mut r = Response::new(Body::from(body));
        let hs = r.headers_mut();
        hs.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        );
        hs.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        hs.insert(
            header::VARY,
            HeaderValue::from_static(if self.opts.openmetrics {
                "Accept-Encoding, Accept"
            } else {
                "Accept-Encoding"
            }),
        );
        if gzip {
            hs.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        r
    }

    /// 200 `OK` as upstream while collections succeed (with upstream's headers); 503 with
    /// the reason otherwise, so probes see a stalled or disconnected exporter.
    fn health(&self) -> Response<Body> {
        match self.shared.health() {
            Ok(()) => {
                // Degraded attribution sources (a kubelet that is down) are reported but do
                // not make the exporter unhealthy: GPU metrics are still served.
                let body = std::iter::once("OK".to_string())
                    .chain(
                        self.shared
                            .notes()
                            .into_iter()
                            .map(|n| format!("degraded: {n}")),
                    )
                    .collect::<Vec<_>>()
                    .join("\n");
                let mut r = text(StatusCode::OK, body);
                r.headers_mut()
                    .insert("X-Registry-Available", HeaderValue::from_static("true"));
                r
            }
            Err(why) => {
                let mut r = text(StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {why}"));
                r.headers_mut()
                    .insert("X-Registry-Available", HeaderValue::from_static("false"));
                r
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn routes(max: usize) -> Routes {
        Routes::new(
            Arc::new(Shared::new(Duration::from_secs(1))),
            Options {
                telemetry_path: "/gpu/metrics".into(),
                max_concurrent_scrapes: max,
                read_timeout: Duration::from_secs(10),
                write_timeout: Duration::from_secs(10),
                pprof: false,
                openmetrics: false,
            },
        )
    }

    fn get(path: &str) -> Request<Body> {
        Request::get(path).body(Body::empty()).unwrap()
    }

    #[tokio::test]
    async fn excess_scrapes_get_503_while_the_limit_is_taken() {
        let r = routes(1);
        let web = WebState::plain();
        let held = r.scrapes.clone().try_acquire_owned().unwrap();
        let resp = r.handle(get("/gpu/metrics"), &web).await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(held);
        let resp = r.handle(get("/gpu/metrics"), &web).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()[header::CONTENT_TYPE],
            "text/plain; version=0.0.4; charset=utf-8"
        );
    }

    #[tokio::test]
    async fn the_telemetry_path_replaces_metrics() {
        let r = routes(4);
        let web = WebState::plain();
        assert_eq!(
            r.handle(get("/metrics"), &web).await.status(),
            StatusCode::NOT_FOUND
        );
        let landing = r.handle(get("/"), &web).await;
        let body = hyper::body::to_bytes(landing.into_body()).await.unwrap();
        assert!(String::from_utf8_lossy(&body).contains("href=\"./gpu/metrics\""));
    }
}
