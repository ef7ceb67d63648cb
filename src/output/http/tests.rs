use super::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

fn ctx(opts: &Options) -> Ctx {
    let web = Web::load(None, false).unwrap();
    let shared = Arc::new(Shared::new(Duration::from_secs(1)));
    Ctx {
        routes: Routes::new(shared, opts.clone(), web.clone()),
        web,
        opts: opts.clone(),
        handshakes: Arc::new(HandshakeErrors::new()),
    }
}

/// Reads one response (head and a Content-Length body); its status line.
async fn response<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> String {
    whole_response(r).await.0
}

/// Reads one response: its status line, its header lines (lower case) and its body.
async fn whole_response<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
) -> (String, Vec<String>, String) {
    let (mut status, mut len, mut head) = (String::new(), 0usize, Vec::new());
    r.read_line(&mut status).await.unwrap();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        let line = line.trim_end().to_ascii_lowercase();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        head.push(line);
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await.unwrap();
    (status, head, String::from_utf8(body).unwrap())
}

/// A scrape's body as `answer` wraps it, and whether hyper may be told its end.
fn tracked(tell_end: bool, page: &'static [u8]) -> Tracked<Out> {
    let requests = Arc::new(Requests::default());
    let body = PageBody::new(bytes::Bytes::from_static(page), bytes::Bytes::new());
    Tracked {
        inner: http_body_util::Either::Left(body),
        request: requests.start(),
        tell_end,
        done: false,
    }
}

fn frame(body: &mut Tracked<Out>) -> Option<usize> {
    use hyper::body::Body as _;
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match Pin::new(body).poll_frame(&mut cx) {
        Poll::Ready(Some(Ok(f))) => Some(f.into_data().map_or(0, |d| d.len())),
        Poll::Ready(None) => None,
        other => panic!("a scrape's body is never pending or failing: {other:?}"),
    }
}

#[test]
fn http1_is_told_the_end_with_the_last_frame_http2_never() {
    use hyper::body::Body as _;
    let mut h1 = tracked(true, b"page");
    assert!(!h1.is_end_stream(), "no frame given yet");
    assert_eq!(frame(&mut h1), Some(4));
    assert!(h1.is_end_stream(), "HTTP/1: the last frame was given");

    let mut h2 = tracked(false, b"page");
    assert_eq!(frame(&mut h2), Some(4));
    assert!(
        !h2.is_end_stream(),
        "HTTP/2 waits for the window: asked once more"
    );
    assert_eq!(frame(&mut h2), None);
    assert!(!h2.is_end_stream());

    // An empty body gives no frame: hyper polls it to its end, which marks it done.
    let mut empty = tracked(true, b"");
    assert!(!empty.is_end_stream());
    assert_eq!(frame(&mut empty), None);
}

/// `/metrics` served with a minute for each timeout: none is due in a test.
fn minute_timeouts() -> Options {
    Options {
        telemetry_path: "/metrics".into(),
        max_concurrent_scrapes: 4,
        read_timeout: Duration::from_secs(60),
        write_timeout: Duration::from_secs(60),
        pprof: false,
        openmetrics: false,
    }
}

/// A plain HTTP/1 connection served with `opts` over an in-memory pipe: the client's end
/// and the connection's task.
fn served(
    opts: &Options,
    requests: &Arc<Requests>,
    stop: watch::Receiver<bool>,
) -> (tokio::io::DuplexStream, tokio::task::JoinHandle<()>) {
    let ctx = ctx(opts);
    let (server, client) = tokio::io::duplex(1 << 20);
    let io = Timed::new(server, requests.clone(), opts.write_timeout);
    let requests = requests.clone();
    let conn = tokio::spawn(async move { serve(&ctx, io, false, requests, stop).await });
    (client, conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_requests_leave_no_request_in_progress_nor_a_deadline() {
    let requests = Arc::new(Requests::default());
    let (_stop_tx, stop) = watch::channel(false);
    let (client, conn) = served(&minute_timeouts(), &requests, stop);
    let (r, mut w) = tokio::io::split(client);
    let mut r = BufReader::new(r);
    for i in 0..200 {
        let path = if i % 2 == 0 { "/metrics" } else { "/health" };
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        w.write_all(req.as_bytes()).await.unwrap();
        let status = response(&mut r).await;
        assert!(status.starts_with("HTTP/1.1 "), "{status:?}");
    }
    // A deadline left behind would cut the next response the client reads slowly. The
    // client can read the last response before the server's flush of it completes (the
    // moment a deadline is cleared), so the check waits a little for that flush; a
    // deadline that leaked stays and fails it.
    let flushed = tokio::time::timeout(Duration::from_secs(2), async {
        while requests.write_deadline().is_some() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    assert!(flushed.await.is_ok(), "{:?}", requests.write_deadline());
    let idle = tokio::time::timeout(Duration::from_millis(10), requests.idle(Duration::ZERO));
    assert!(idle.await.is_ok(), "a request is still in progress");
    drop((r, w));
    conn.await.unwrap();
}

/// One keep-alive connection is answered, at each request, from what is in force then:
/// every newly published page, a page's expiry, self-metrics turned live, and a reload
/// of the web configuration that adds basic auth and a header. Whatever a scrape reuses
/// (the built reply; any cache a later change adds) never outlives any of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_is_answered_from_what_is_in_force_at_each_request() {
    let dir = tempfile::tempdir().unwrap();
    let web_yml = dir.path().join("web.yml");
    std::fs::write(&web_yml, "").unwrap();
    let web = Web::load(Some(&web_yml), false).unwrap();
    web.watch().unwrap();
    let interval = Duration::from_secs(1);
    let shared = Arc::new(Shared::new(interval));
    let opts = minute_timeouts();
    let ctx = Ctx {
        routes: Routes::new(shared.clone(), opts.clone(), web.clone()),
        web: web.clone(),
        opts: opts.clone(),
        handshakes: Arc::new(HandshakeErrors::new()),
    };
    let (server, client) = tokio::io::duplex(1 << 20);
    let requests = Arc::new(Requests::default());
    let (_stop_tx, stop) = watch::channel(false);
    let io = Timed::new(server, requests.clone(), opts.write_timeout);
    let conn = tokio::spawn(async move { serve(&ctx, io, false, requests, stop).await });
    let (r, mut w) = tokio::io::split(client);
    let mut r = BufReader::new(r);
    let mut scrape = async move || {
        w.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        whole_response(&mut r).await
    };
    let power = |watts: f64| {
        let mut page = crate::model::Page::default();
        let ty = crate::model::naming::PromType::Gauge;
        page.add("DCGM_FI_DEV_POWER_USAGE", "h", ty, &[("gpu", "0")], watts);
        page
    };
    for watts in [1.0, 2.0, 3.0] {
        shared.publish(&power(watts), crate::model::clock::now_us());
        for _ in 0..3 {
            let (status, _, body) = scrape().await;
            assert!(status.starts_with("HTTP/1.1 200"), "{status}");
            assert!(
                body.contains(&format!("DCGM_FI_DEV_POWER_USAGE{{gpu=\"0\"}} {watts}\n")),
                "{watts} W published: {body}"
            );
        }
    }
    // A page whose oldest sample turns too old to serve in 300 ms.
    let age = crate::model::clock::max_served_age(interval);
    let oldest = crate::model::clock::now_us() - i64::try_from(age.as_micros()).unwrap() + 300_000;
    shared.publish(&power(4.0), oldest);
    assert!(scrape().await.2.contains("DCGM_FI_DEV_POWER_USAGE"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (status, _, body) = scrape().await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(!body.contains("DCGM_FI_DEV_POWER_USAGE"), "expired: {body}");
    // Basic auth and a header, put in force while the connection is open.
    shared.publish(&power(5.0), crate::model::clock::now_us());
    assert!(scrape().await.2.contains("} 5\n"));
    // Self-metrics that change per scrape are never kept.
    shared.metrics.enable_exporter_metrics();
    for _ in 0..2 {
        let body = scrape().await.2;
        assert!(
            body.contains("promhttp_metric_handler_requests_in_flight 1"),
            "{body}"
        );
    }
    std::fs::write(
        &web_yml,
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\nbasic_auth_users:\n  \
         alice: $2y$10$CWCEbs7mt8QFrToJR9OcG.tduEKpx9SROhWnaDHQgQX4Q6hqWNASa\n",
    )
    .unwrap();
    for _ in 0..200 {
        if web.current().auth.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(web.current().auth.is_some(), "the watcher did not reload");
    let (status, head, _) = scrape().await;
    assert!(status.starts_with("HTTP/1.1 401"), "{status}");
    assert!(
        head.iter().any(|h| h == "x-frame-options: deny"),
        "{head:?}"
    );
    drop(scrape);
    conn.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_or_a_lost_stop_signal_closes_a_kept_connection() {
    for drop_sender in [false, true] {
        let requests = Arc::new(Requests::default());
        let (stop_tx, stop) = watch::channel(false);
        let (mut client, conn) = served(&minute_timeouts(), &requests, stop);
        client
            .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut r = BufReader::new(client);
        assert!(response(&mut r).await.starts_with("HTTP/1.1 200"));
        if drop_sender {
            drop(stop_tx);
        } else {
            stop_tx.send(true).unwrap();
        }
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(10), r.read_to_end(&mut rest));
        assert!(
            closed.await.is_ok(),
            "still open (sender dropped: {drop_sender})"
        );
        assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
        tokio::time::timeout(Duration::from_secs(10), conn)
            .await
            .unwrap()
            .unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_head_that_never_ends_and_an_idle_connection_close_at_the_read_timeout() {
    let opts = Options {
        read_timeout: Duration::from_secs(5),
        ..minute_timeouts()
    };
    for (sent, answers) in [
        (&b"GET /health HTTP/1.1\r\nHost: x\r\nAccept: */"[..], 0),
        (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 1),
    ] {
        let requests = Arc::new(Requests::default());
        let (_stop_tx, stop) = watch::channel(false);
        let (mut client, conn) = served(&opts, &requests, stop);
        let t0 = tokio::time::Instant::now();
        client.write_all(sent).await.unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        let got = String::from_utf8_lossy(&got);
        assert_eq!(got.matches("HTTP/1.1 200").count(), answers, "{got}");
        assert_eq!(got.matches("HTTP/1.1 ").count(), answers, "{got}");
        let closed = t0.elapsed();
        assert!(
            closed >= opts.read_timeout && closed < opts.read_timeout * 2,
            "closed after {closed:?}"
        );
        conn.await.unwrap();
    }
}
