use super::*;
use http_body_util::BodyExt;
use std::time::Duration;
use tower::Service;

fn opts(max: usize) -> Options {
    Options {
        telemetry_path: "/gpu/metrics".into(),
        max_concurrent_scrapes: max,
        read_timeout: Duration::from_secs(10),
        write_timeout: Duration::from_secs(10),
        pprof: false,
        openmetrics: false,
    }
}

async fn call(
    f: &BoxedFilter<(Response,)>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, hyper::HeaderMap, Bytes) {
    let mut req = hyper::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(http_body_util::Empty::<Bytes>::new()).unwrap();
    let resp = warp::service(f.clone()).call(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, body)
}

fn shared() -> Arc<Shared> {
    Arc::new(Shared::new(Duration::from_secs(1)))
}

#[tokio::test]
async fn paths_methods_and_the_telemetry_path() {
    let f = Routes::new(shared(), opts(4), Web::load(None, false).unwrap()).filter;
    for method in ["GET", "POST", "DELETE"] {
        let (status, h, body) = call(&f, method, "/gpu/metrics", &[]).await;
        assert_eq!(status, StatusCode::OK, "{method}");
        assert_eq!(
            h[header::CONTENT_TYPE],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        assert_eq!(h[header::CONTENT_LENGTH], body.len().to_string().as_str());
        assert!(String::from_utf8_lossy(&body).contains("dcgm_exporter_"));
    }
    for path in [
        "/metrics",
        "/gpu/metrics/",
        "/health/",
        "/nope",
        "/debug/pprof/",
    ] {
        let (status, _, body) = call(&f, "GET", path, &[]).await;
        assert_eq!(
            (status, &body[..]),
            (StatusCode::NOT_FOUND, &b"404 page not found\n"[..]),
            "{path}"
        );
    }
    let (_, h, body) = call(&f, "GET", "/", &[]).await;
    assert!(String::from_utf8_lossy(&body).contains("href=\"./gpu/metrics\""));
    assert_eq!(h[header::CONTENT_TYPE], "text/html; charset=utf-8");
}

/// `/health` is upstream's liveness contract (200 whenever we answer); `/ready` is the
/// strict one. Both say why in the body and `X-Registry-Available`.
#[tokio::test]
async fn health_stays_200_for_liveness_and_ready_fails_with_the_reason() {
    let shared = shared();
    let f = Routes::new(shared.clone(), opts(4), Web::load(None, false).unwrap()).filter;
    let probe = |path: &'static str| {
        let f = f.clone();
        async move {
            let (status, h, body) = call(&f, "GET", path, &[]).await;
            let avail = h["X-Registry-Available"].to_str().unwrap().to_string();
            (status, avail, String::from_utf8_lossy(&body).into_owned())
        }
    };
    // Not connected yet: not ready, yet alive.
    let (status, avail, body) = probe("/health").await;
    assert_eq!((status, avail.as_str()), (StatusCode::OK, "false"));
    assert!(
        body.starts_with("OK - not ready: DCGM host engine not connected"),
        "{body}"
    );
    let (status, avail, body) = probe("/ready").await;
    assert_eq!(
        (status, avail.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "false")
    );
    assert!(
        body.starts_with("unhealthy: DCGM host engine not connected"),
        "{body}"
    );
    // A fresh page: both 200 with upstream's plain body; a failing source is a line.
    shared.set_connected(true);
    shared.publish(
        &crate::model::Page::default(),
        crate::model::clock::now_us(),
    );
    shared.set_last_success(std::time::Instant::now());
    shared.set_notes(vec!["kubelet: down".into()]);
    for path in ["/health", "/ready"] {
        let (status, avail, body) = probe(path).await;
        assert_eq!(
            (status, avail.as_str(), body.as_str()),
            (StatusCode::OK, "true", "OK\ndegraded: kubelet: down"),
            "{path}"
        );
    }
}

/// Data frames of a scrape's body and its bytes.
async fn frames(mut body: PageBody) -> (usize, Vec<u8>) {
    let (mut n, mut bytes) = (0, Vec::new());
    while let Some(f) = body.frame().await {
        if let Ok(d) = f.unwrap().into_data() {
            n += 1;
            bytes.extend_from_slice(&d);
        }
    }
    (n, bytes)
}

#[tokio::test]
async fn a_scrape_sends_one_buffer_unless_the_self_metrics_are_live() {
    let shared = shared();
    let mut page = crate::model::Page::default();
    let labels = [("gpu", "0"), ("UUID", "GPU-0")];
    let ty = crate::model::naming::PromType::Gauge;
    page.add("DCGM_FI_DEV_POWER_USAGE", "h", ty, &labels, 1.0);
    shared.publish(&page, crate::model::clock::now_us());
    let ep = Endpoints::new(shared.clone(), opts(4));
    for gzip in [None, Some(HeaderValue::from_static("gzip"))] {
        let (n, first) = frames(ep.metrics(None, gzip.as_ref()).into_body()).await;
        assert_eq!(n, 1, "gzip {gzip:?}");
        // The same body again, from the slot.
        let (_, again) = frames(ep.metrics(None, gzip.as_ref()).into_body()).await;
        assert_eq!(first, again);
        let text = match gzip {
            None => String::from_utf8(first).unwrap(),
            Some(_) => {
                let mut d = flate2::read::GzDecoder::new(&first[..]);
                let mut text = String::new();
                std::io::Read::read_to_string(&mut d, &mut text).unwrap();
                text
            }
        };
        assert!(text.contains("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\""), "{text}");
        assert!(text.contains("dcgm_exporter_"), "{text}");
    }
    // --enable-exporter-metrics: the page as published, then this scrape's own tail,
    // counting this scrape.
    shared.metrics.enable_exporter_metrics();
    let (n, bytes) = frames(ep.metrics(None, None).into_body()).await;
    assert_eq!(n, 2);
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.contains("promhttp_metric_handler_requests_in_flight 1"));
}

#[test]
fn a_limit_as_large_as_the_handler_threads_counts_nothing() {
    for (max, runners, counted) in [
        (16, 16, false),
        (16, 2, false),
        (2, 2, false),
        (1, 2, true),
        (15, 16, true),
    ] {
        let limit = Limit::new(max, runners);
        let held: Vec<_> = (0..max).map(|_| limit.try_take()).collect();
        assert!(held.iter().all(Option::is_some), "{max} places of {max}");
        assert_eq!(
            limit.try_take().is_none(),
            counted,
            "max {max}, {runners} threads"
        );
        assert_eq!(
            limit.taken.load(Ordering::Relaxed),
            if counted { max } else { 0 }
        );
        drop(held);
        assert_eq!(limit.taken.load(Ordering::Relaxed), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn the_limit_knows_the_servers_threads() {
    assert!(Endpoints::new(shared(), opts(2)).scrapes.counted);
    assert!(!Endpoints::new(shared(), opts(3)).scrapes.counted);
}

// Two threads run handlers: one place can be wanted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excess_scrapes_get_503_while_the_limit_is_taken() {
    let ep = Endpoints::new(shared(), opts(1));
    let held = ep.scrapes.try_take().unwrap();
    assert_eq!(
        ep.metrics(None, None).status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    drop(held);
    assert_eq!(ep.metrics(None, None).status(), StatusCode::OK);
}

#[tokio::test]
async fn basic_auth_refusals_are_401_with_the_configured_headers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(
        &path,
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\nbasic_auth_users:\n  \
         alice: $2y$10$CWCEbs7mt8QFrToJR9OcG.tduEKpx9SROhWnaDHQgQX4Q6hqWNASa\n",
    )
    .unwrap();
    let f = Routes::new(shared(), opts(4), Web::load(Some(&path), false).unwrap()).filter;
    for (path, auth) in [
        ("/gpu/metrics", None),
        ("/nope", None),
        ("/health", Some("Basic YWxpY2U6d3Jvbmc=")),
    ] {
        let headers: Vec<_> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let (status, h, _) = call(&f, "GET", path, &headers).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(h[header::WWW_AUTHENTICATE], "Basic");
        assert_eq!(h["x-frame-options"], "deny");
    }
    // alice:password
    let ok = [("authorization", "Basic YWxpY2U6cGFzc3dvcmQ=")];
    let (status, h, _) = call(&f, "GET", "/gpu/metrics", &ok).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h["x-frame-options"], "deny");
    assert_eq!(call(&f, "GET", "/nope", &ok).await.0, StatusCode::NOT_FOUND);
}

/// The scrape path is an optimisation, not a second server: for every request it takes,
/// it answers what the filter answers (status, headers, bytes), the configured headers
/// and a refused scrape (503) included; it leaves basic auth and other paths to the
/// filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrape_path_answers_as_the_filter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(
        &path,
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    \
         X-Content-Type-Options: nosniff\n",
    )
    .unwrap();
    for openmetrics in [false, true] {
        let mut o = opts(1);
        o.openmetrics = openmetrics;
        let routes = Routes::new(shared(), o, Web::load(Some(&path), false).unwrap());
        let gzip = ("accept-encoding", "gzip, deflate");
        let om = ("accept", "application/openmetrics-text;version=1.0.0");
        for (method, target, headers) in [
            ("GET", "/gpu/metrics", vec![]),
            ("POST", "/gpu/metrics?x=1&y", vec![gzip]),
            ("HEAD", "/gpu/metrics", vec![om]),
            ("GET", "/gpu/metrics", vec![om, gzip]),
        ] {
            let mut req = hyper::Request::builder().method(method).uri(target);
            for (k, v) in &headers {
                req = req.header(*k, *v);
            }
            let req = req.body(http_body_util::Empty::<Bytes>::new()).unwrap();
            for held in [false, true] {
                let permit = held.then(|| routes.ep.scrapes.try_take().unwrap());
                let fast = routes.scrape(&req).expect("the scrape path takes it");
                let (mut fast_parts, body) = fast.into_parts();
                // hyper states the length of a body that knows it, as the filter's
                // reply states it.
                let len = hyper::body::Body::size_hint(&body).exact().unwrap();
                assert!(!fast_parts.headers.contains_key(header::CONTENT_LENGTH));
                fast_parts
                    .headers
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
                let fast_body = body.collect().await.unwrap().to_bytes();
                let (status, h, body) = call(&routes.filter, method, target, &headers).await;
                drop(permit);
                let what = format!("{openmetrics} {method} {target} {headers:?} held {held}");
                assert_eq!(fast_parts.status, status, "{what}");
                assert_eq!(fast_parts.headers, h, "{what}");
                assert_eq!(fast_body, body, "{what}");
                assert_eq!(h["x-frame-options"], "deny", "{what}");
            }
        }
        for target in ["/metrics", "/gpu/metrics/", "/health", "/"] {
            let req = hyper::Request::get(target).body(()).unwrap();
            assert!(routes.scrape(&req).is_none(), "{target}");
        }
    }
    std::fs::write(
        &path,
        "basic_auth_users:\n  alice: $2y$10$CWCEbs7mt8QFrToJR9OcG.tduEKpx9SROhWnaDHQgQX4Q6hqWNASa\n",
    )
    .unwrap();
    let routes = Routes::new(shared(), opts(4), Web::load(Some(&path), false).unwrap());
    let req = hyper::Request::get("/gpu/metrics").body(()).unwrap();
    assert!(routes.scrape(&req).is_none(), "basic auth is the filter's");
}
