//! The endpoints as warp filters, answering as upstream's gorilla/mux router does: the
//! metrics path (default `/metrics`), `/health`, `/ready`, `/events`, `/` and, with
//! `--enable-pprof`, `/debug/pprof/`. Routes accept every method, as upstream registers
//! them without a method filter (`HEAD` gets the headers without the body), so no path
//! answers 405; other paths get Go's `404 page not found`. Basic auth, when configured, is
//! a filter in front of every path, as exporter-toolkit applies it; its rejection becomes
//! 401 with `WWW-Authenticate`. The web configuration's headers go on every response,
//! refusals included.

use super::auth::Outcome;
use super::reply::{html, text, PageBody, Response};
use super::state::Web;
use super::{negotiate, pprof, Options};
use crate::output::exposition::{Body, Exposition, Format};
use crate::output::published::Shared;
use arc_swap::ArcSwapOption;
use bytes::Bytes;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::StatusCode;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use warp::filters::path::FullPath;
use warp::filters::BoxedFilter;
use warp::reject::Rejection;
use warp::Filter;

/// How long the self-metrics tail built for one page, format and encoding is reused. The
/// page changes only per collection; within this time only the process self-metrics could
/// move, and encoding them per scrape would cost more than the rest of the scrape.
const TAIL_REUSE_US: i64 = 1_000_000;

/// A body built for one page, format and encoding.
struct Built {
    page: Arc<Exposition>,
    /// Unix µs.
    at_us: i64,
    /// The page and tail in one buffer, copied once per build: a scrape then sends one
    /// shared buffer, as a server of fixed bytes does.
    body: Body,
    /// The response's headers, cloned per scrape rather than hashed and inserted anew.
    headers: HeaderMap,
}

/// At most `max` scrapes being answered at once (`--max-concurrent-scrapes`). Never waited
/// for, so one atomic counter: tokio's `Semaphore` takes its waiters' lock, shared by every
/// core, at each release. A scrape holds its place only while its handler runs, which never
/// waits, so no more scrapes hold one than threads run handlers: with at least as many
/// places (the default 16 on up to 16 cores), no scrape can be refused, and the counter,
/// written by every core for every scrape, is left alone.
struct Limit {
    taken: AtomicUsize,
    max: usize,
    counted: bool,
}

/// One place of a [`Limit`], given back when dropped.
struct Taken<'a>(Option<&'a AtomicUsize>);

impl Limit {
    /// `runners`: how many threads may run a handler at once.
    fn new(max: usize, runners: usize) -> Limit {
        Limit {
            taken: AtomicUsize::new(0),
            max,
            counted: max < runners,
        }
    }

    fn try_take(&self) -> Option<Taken<'_>> {
        if !self.counted {
            return Some(Taken(None));
        }
        self.taken
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Taken(Some(&self.taken)))
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(taken) = self.0 {
            taken.fetch_sub(1, Ordering::Release);
        }
    }
}

/// The threads that run handlers: the workers of the runtime the server starts on (every
/// connection and HTTP/2 stream is a task of it); unknown outside one, so every thread.
fn handler_threads() -> usize {
    tokio::runtime::Handle::try_current().map_or(usize::MAX, |h| h.metrics().num_workers())
}

/// The endpoints' state, shared by every connection.
pub(crate) struct Endpoints {
    shared: Arc<Shared>,
    opts: Options,
    scrapes: Limit,
    landing: Bytes,
    /// One slot per (asked format, gzip), swapped whole: scrapes never wait on each other.
    built: [ArcSwapOption<Built>; 4],
}

/// Basic auth refused the request.
#[derive(Debug)]
struct Unauthorized;

impl warp::reject::Reject for Unauthorized {}

/// Too many password checks running and waiting: try again later.
#[derive(Debug)]
struct AuthOverloaded;

impl warp::reject::Reject for AuthOverloaded {}

/// Matches exactly `path` (no trailing-slash or prefix leniency, as Go's mux).
fn exact(path: String) -> impl Filter<Extract = (), Error = Rejection> + Clone {
    warp::path::full()
        .and_then(move |p: FullPath| {
            let matched = p.as_str() == path;
            async move {
                if matched {
                    Ok(())
                } else {
                    Err(warp::reject::not_found())
                }
            }
        })
        .untuple_one()
}

/// A request header's value when there is one (any bytes: never a rejection).
fn header(
    name: &'static str,
) -> impl Filter<Extract = (Option<HeaderValue>,), Error = Infallible> + Clone {
    warp::header::value(name)
        .map(Some)
        .or(warp::any().map(|| None))
        .unify()
}

/// The endpoints: the warp filter that answers every request, and the scrape of the
/// telemetry path without basic auth (what Prometheus asks for all day) answered without it.
#[derive(Clone)]
pub(crate) struct Routes {
    pub filter: BoxedFilter<(Response,)>,
    ep: Arc<Endpoints>,
    web: Web,
}

impl Routes {
    pub(crate) fn new(shared: Arc<Shared>, opts: Options, web: Web) -> Routes {
        let ep = Arc::new(Endpoints::new(shared, opts.clone()));
        Routes {
            filter: filter(ep.clone(), opts, web.clone()),
            ep,
            web,
        }
    }

    /// The response the filter would give a request for the telemetry path when basic
    /// auth is off (`None`: ask the filter): the same status, headers and bytes (the test
    /// `the_scrape_path_answers_as_the_filter`), without the filter's boxed futures, boxed
    /// bodies and reference-counted configuration per request.
    pub(crate) fn scrape<B>(&self, req: &hyper::Request<B>) -> Option<hyper::Response<PageBody>> {
        if req.uri().path() != self.ep.opts.telemetry_path {
            return None;
        }
        let state = self.web.peek();
        if state.auth.is_some() {
            return None;
        }
        let h = req.headers();
        let accept = self.ep.opts.openmetrics.then(|| h.get(header::ACCEPT));
        let mut resp = self
            .ep
            .metrics(accept.flatten(), h.get(header::ACCEPT_ENCODING));
        configured_headers(resp.headers_mut(), &state.headers);
        Some(resp)
    }
}

/// Every endpoint, behind basic auth, with the configured headers.
fn filter(ep: Arc<Endpoints>, opts: Options, web: Web) -> BoxedFilter<(Response,)> {
    let auth = {
        let web = web.clone();
        header("authorization")
            .and_then(move |h: Option<HeaderValue>| {
                let state = web.current();
                async move {
                    let outcome = match &state.auth {
                        Some(auth) => auth.check_header(h.as_ref().map(|v| v.as_bytes())).await,
                        None => Outcome::Allowed,
                    };
                    match outcome {
                        Outcome::Allowed => Ok(()),
                        Outcome::Denied => Err(warp::reject::custom(Unauthorized)),
                        Outcome::Overloaded => Err(warp::reject::custom(AuthOverloaded)),
                    }
                }
            })
            .untuple_one()
    };
    let metrics = {
        let ep = ep.clone();
        exact(opts.telemetry_path.clone())
            .and(header("accept"))
            .and(header("accept-encoding"))
            .map(
                move |accept: Option<HeaderValue>, encoding: Option<HeaderValue>| {
                    PageBody::into_warp(ep.metrics(accept.as_ref(), encoding.as_ref()))
                },
            )
    };
    let health = {
        let ep = ep.clone();
        exact("/health".into()).map(move || ep.health())
    };
    let ready = {
        let ep = ep.clone();
        exact("/ready".into()).map(move || ep.ready())
    };
    let landing = {
        let ep = ep.clone();
        exact("/".into()).map(move || html(ep.landing.clone()))
    };
    let events = exact("/events".into())
        .and(warp::query::raw().or(warp::any().map(String::new)).unify())
        .map(|query: String| super::events::reply(&query));
    let pprof = {
        let (enabled, write_timeout) = (opts.pprof, opts.write_timeout);
        warp::path::full()
            .and(warp::query::raw().or(warp::any().map(String::new)).unify())
            .and_then(move |p: FullPath, query: String| async move {
                if enabled && p.as_str().starts_with("/debug/pprof/") {
                    Ok(pprof::handle(p.as_str(), &query, write_timeout).await)
                } else {
                    Err(warp::reject::not_found())
                }
            })
    };
    let endpoints = metrics
        .or(health)
        .unify()
        .or(ready)
        .unify()
        .or(landing)
        .unify()
        .or(events)
        .unify()
        .or(pprof)
        .unify();
    auth.and(endpoints)
        .recover(|r: Rejection| async move { Ok::<_, Infallible>(refused(&r)) })
        .unify()
        .map(move |mut resp: Response| {
            configured_headers(resp.headers_mut(), &web.current().headers);
            resp
        })
        .boxed()
}

/// The web configuration's headers, on every response (refusals included) where the
/// handler did not set them.
fn configured_headers(hs: &mut hyper::HeaderMap, configured: &[(header::HeaderName, HeaderValue)]) {
    for (k, v) in configured {
        hs.entry(k).or_insert_with(|| v.clone());
    }
}

fn refused(r: &Rejection) -> Response {
    if r.find::<Unauthorized>().is_some() {
        let mut resp = text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
        return resp;
    }
    if r.find::<AuthOverloaded>().is_some() {
        let mut resp = text(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many password checks at once, try again\n",
        );
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return resp;
    }
    text(StatusCode::NOT_FOUND, "404 page not found\n")
}

impl Endpoints {
    pub(crate) fn new(shared: Arc<Shared>, opts: Options) -> Endpoints {
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
        Endpoints {
            shared,
            scrapes: Limit::new(opts.max_concurrent_scrapes, handler_threads()),
            opts,
            landing: Bytes::from(landing),
            built: Default::default(),
        }
    }

    /// The page as published and this scrape's self-metrics, with the response's headers:
    /// shared, not copied, where the self-metrics change per scrape; else the body and
    /// headers built for this page, format and encoding within [`TAIL_REUSE_US`], the body
    /// in one buffer.
    fn reply(&self, wanted: Format, gzip: bool) -> (Body, HeaderMap) {
        self.shared.with_page(|page, now_us| {
            let build = || page.body(wanted, &self.shared.metrics.gather(), gzip);
            if self.shared.metrics.live() {
                let (format, body) = build();
                let headers = self.headers(format, gzip);
                return (body, headers);
            }
            let i = usize::from(wanted == Format::OpenMetrics) * 2 + usize::from(gzip);
            let slot = &self.built[i];
            if let Some(b) = &*slot.load() {
                let age = now_us.saturating_sub(b.at_us);
                if Arc::ptr_eq(&b.page, page) && (0..TAIL_REUSE_US).contains(&age) {
                    return (b.body.clone(), b.headers.clone());
                }
            }
            let (format, body) = build();
            let body = Body {
                page: Bytes::from(body.to_vec()),
                tail: Bytes::new(),
            };
            let headers = self.headers(format, gzip);
            slot.store(Some(Arc::new(Built {
                page: page.clone(),
                at_us: now_us,
                body: body.clone(),
                headers: headers.clone(),
            })));
            (body, headers)
        })
    }

    /// A scrape's response headers, as promhttp sends them.
    fn headers(&self, format: Format, gzip: bool) -> HeaderMap {
        // No Content-Length: hyper writes it from the body's exact size (a value of our own
        // would be a shared buffer whose count every core changes for every scrape).
        let mut hs = HeaderMap::with_capacity(4);
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
        hs
    }

    fn metrics(
        &self,
        accept: Option<&HeaderValue>,
        encoding: Option<&HeaderValue>,
    ) -> hyper::Response<PageBody> {
        // Excess scrapes are refused rather than queued, as upstream's
        // --max-concurrent-scrapes does.
        let Some(_taken) = self.scrapes.try_take() else {
            let mut r = hyper::Response::new(PageBody::from(Bytes::from(format!(
                "too many concurrent scrapes (--max-concurrent-scrapes={})\n",
                self.opts.max_concurrent_scrapes
            ))));
            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            let hs = r.headers_mut();
            hs.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            hs.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            return r;
        };
        // promhttp_metric_handler_requests_* (--enable-exporter-metrics).
        let _counted = self.shared.metrics.scrape();
        let wanted = if self.opts.openmetrics {
            negotiate::format(accept)
        } else {
            Format::Text
        };
        let (body, headers) = self.reply(wanted, negotiate::gzip(encoding));
        let mut r = hyper::Response::new(PageBody::new(body.page, body.tail));
        *r.headers_mut() = headers;
        r
    }

    /// Upstream's liveness contract: 200 whenever the exporter answers, as NVIDIA's probes
    /// (liveness on `/health`, 3 failures 5 s apart) expect; a restart cannot bring back an
    /// unbound GPU or a stopped host engine, and would take away the self-metrics that say
    /// what is wrong. The truth stays in the body (`OK - not ready: why`, as upstream's
    /// `OK - reload in progress`) and `X-Registry-Available`; `/ready` fails on it. Only
    /// upstream's opt-in `--health-require-gpus` fails it (503 while no GPU is collected).
    fn health(&self) -> Response {
        if let Err(why) = self.shared.liveness() {
            let mut r = text(StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {why}"));
            r.headers_mut()
                .insert("X-Registry-Available", registry_available(false));
            return r;
        }
        let (ready, body) = self.state();
        let body = match &ready {
            Ok(()) => body,
            Err(why) => std::iter::once(format!("OK - not ready: {why}"))
                .chain(body.lines().skip(1).map(str::to_string))
                .collect::<Vec<_>>()
                .join("\n"),
        };
        let mut r = text(StatusCode::OK, body);
        r.headers_mut()
            .insert("X-Registry-Available", registry_available(ready.is_ok()));
        r
    }

    /// The strict probe (our chart's readiness probe): 200 `OK` while collections succeed;
    /// 503 with the reason while DCGM is unreachable, the last collection failed or values
    /// are stale.
    fn ready(&self) -> Response {
        let (ready, body) = self.state();
        let mut r = match &ready {
            Ok(()) => text(StatusCode::OK, body),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {why}")),
        };
        r.headers_mut()
            .insert("X-Registry-Available", registry_available(ready.is_ok()));
        r
    }

    /// Whether the page is fresh, and the healthy body: `OK`, the backend when it is not
    /// DCGM, and one `degraded:` line per failing attribution source (those do not make the
    /// exporter unready: GPU metrics are still served).
    fn state(&self) -> (Result<(), crate::output::published::Unhealthy>, String) {
        let backend = self.shared.backend();
        let body = std::iter::once("OK".to_string())
            .chain((backend != "dcgm").then(|| format!("backend: {backend}")))
            .chain(
                self.shared
                    .notes()
                    .into_iter()
                    .map(|n| format!("degraded: {n}")),
            )
            .collect::<Vec<_>>()
            .join("\n");
        (self.shared.health(), body)
    }
}

fn registry_available(yes: bool) -> HeaderValue {
    HeaderValue::from_static(if yes { "true" } else { "false" })
}

#[cfg(test)]
mod tests;
