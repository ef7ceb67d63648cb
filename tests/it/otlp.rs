//! The OTLP push (issue 32) against a receiver built on OpenTelemetry's official protocol
//! definitions (tests/support/otlp_receiver.rs), over gRPC and HTTP/protobuf: every push
//! decodes, and one push of each collection equals the Prometheus page for every series;
//! a receiver that hangs, refuses or resets costs the queue's bound, collection goes on and
//! the drops are counted. On the simulator and on NVIDIA's real DCGM kit.

use crate::support::otlp_receiver::{self, HistogramPoint, Kind, Mode, Protocol, Push, Receiver};
use crate::support::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Key = (String, BTreeMap<String, String>);

/// The page's DCGM series (not the exporter's own), with whether each family is a counter.
fn page_series(text: &str) -> BTreeMap<Key, (f64, bool)> {
    let counters: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, t)| t.trim() == "counter")
        .map(|(n, _)| n)
        .collect();
    parse(text)
        .into_iter()
        .filter(|s| !s.name.starts_with("dcgm_exporter_"))
        .map(|s| {
            let counter = counters.contains(s.name.as_str());
            ((s.name, s.labels), (s.value, counter))
        })
        .collect()
}

fn push_series(p: &Push) -> BTreeMap<Key, (f64, bool)> {
    otlp_receiver::points(&p.request)
        .into_iter()
        .map(|pt| {
            let counter = match pt.kind {
                Kind::MonotonicSum => true,
                Kind::Gauge => false,
                Kind::Sum => panic!("{}: a non-monotonic sum in dcgm naming", pt.metric),
            };
            ((pt.metric, pt.attributes), (pt.value, counter))
        })
        .collect()
}

/// Scrapes until some push received equals the page just scraped, series for series (value
/// and counter-ness); answers both. The push of a collection follows its publication, so
/// the match comes within a collection or two.
fn matching_push(e: &Exporter, r: &Receiver, secs: u64) -> (BTreeMap<Key, (f64, bool)>, Arc<Push>) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let page = page_series(&e.get("/metrics").1);
        std::thread::sleep(Duration::from_millis(150));
        let pushes = r.pushes();
        if !page.is_empty() {
            if let Some(p) = pushes.iter().rev().find(|p| push_series(p) == page) {
                return (page, p.clone());
            }
        }
        if Instant::now() > deadline {
            let last = pushes.last().map(|p| push_series(p)).unwrap_or_default();
            let only_page: Vec<_> = page
                .iter()
                .filter(|(k, v)| last.get(*k) != Some(v))
                .take(10)
                .collect();
            let only_push: Vec<_> = last
                .iter()
                .filter(|(k, v)| page.get(*k) != Some(v))
                .take(10)
                .collect();
            panic!(
                "no push equal to the page within {secs} s ({} pushes, page {} series, last push {}):\n\
                 page only: {only_page:?}\npush only: {only_push:?}\n{}",
                pushes.len(),
                page.len(),
                last.len(),
                e.stderr()
            );
        }
    }
}

#[test]
fn every_push_decodes_and_equals_the_page_for_every_series() {
    for protocol in [Protocol::Http, Protocol::Grpc] {
        let r = Receiver::start(protocol, Mode::Accept);
        let e = exporter()
            .args(&[
                "--otlp-endpoint",
                &r.endpoint(),
                "--otlp-protocol",
                protocol.flag(),
            ])
            .args(&["-c", "1000"])
            .env("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=gpu%20farm")
            .env("OTEL_SERVICE_NAME", "gpu-telemetry")
            .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
            .env("NODE_NAME", "node-a")
            .start();
        let (page, first) = matching_push(&e, &r, 20);
        assert!(
            page.len() > 50,
            "{protocol:?}: a small page ({})",
            page.len()
        );
        assert!(
            page.values().any(|(_, counter)| *counter),
            "{protocol:?}: no counter"
        );
        let (_, later) = loop {
            let (page2, p) = matching_push(&e, &r, 20);
            if page2 != page {
                break (page2, p);
            }
        };
        // The simulator's values move: equal pages are no accident.
        assert_ne!(push_series(&first), push_series(&later), "{protocol:?}");
        // A sum keeps its start from push to push; no point is timed before it (a DCGM
        // counter's first point is timed at its start: `unknown_starts_...` below).
        let starts = |p: &Push| -> BTreeMap<Key, u64> {
            otlp_receiver::points(&p.request)
                .into_iter()
                .filter(|pt| pt.kind == Kind::MonotonicSum)
                .inspect(|pt| assert!(pt.start_ns > 0 && pt.start_ns <= pt.time_ns, "{pt:?}"))
                .map(|pt| ((pt.metric, pt.attributes), pt.start_ns))
                .collect()
        };
        assert!(!starts(&first).is_empty());
        assert_eq!(starts(&first), starts(&later), "{protocol:?}");
        for p in r.pushes() {
            let res = otlp_receiver::resource(&p.request);
            assert_eq!(res.get("host.name").map(String::as_str), Some("node-a"));
            assert_eq!(
                res.get("service.name").map(String::as_str),
                Some("gpu-telemetry")
            );
            assert_eq!(
                res.get("deployment.environment").map(String::as_str),
                Some("test")
            );
            assert!(res.contains_key("service.version"));
            assert_eq!(
                p.headers.get("x-tenant").map(String::as_str),
                Some("gpu farm"),
                "{protocol:?}"
            );
        }
        // The receiver keeps a push before it answers: the sender counts it a moment later.
        e.scrape_until(10, |p| {
            p.iter()
                .filter(|s| {
                    s.name == "dcgm_exporter_otlp_pushes_total" && s.label("result") == Some("sent")
                })
                .any(|s| s.value >= 2.0)
        });
    }
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The point of `metric` (its first series) in each push, as (start, time).
fn start_and_time(pushes: &[Arc<Push>], metric: &str) -> Vec<(u64, u64)> {
    pushes
        .iter()
        .map(|p| {
            let pt = otlp_receiver::points(&p.request)
                .into_iter()
                .find(|pt| pt.metric == metric)
                .unwrap_or_else(|| panic!("no {metric} in a push"));
            assert_eq!(pt.kind, Kind::MonotonicSum, "{metric}");
            (pt.start_ns, pt.time_ns)
        })
        .collect()
}

/// OpenTelemetry's data model: a cumulative series whose count began before the exporter
/// saw it (DCGM's energy since the driver loaded) starts with a point whose start equals
/// its time, and keeps that start; a count the exporter begins from zero at its start
/// (`DCGM_EXP_XID_ERRORS_TOTAL`) carries that start. Both again after a restart.
#[test]
fn unknown_starts_begin_at_the_first_point_and_the_exporters_own_at_its_start() {
    let energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";
    let xids = "DCGM_EXP_XID_ERRORS_TOTAL";
    let r = Receiver::start(Protocol::Http, Mode::Accept);
    let mut seen = 0;
    for run in ["first", "after a restart"] {
        let spawned = unix_ns();
        let e = otlp_exporter(&r, &["-c", "300"]);
        let pushes = r.wait_for(seen + 3, 30)[seen..].to_vec();
        let e_points = start_and_time(&pushes, energy);
        let (first_start, first_time) = e_points[0];
        assert_eq!(
            first_start,
            first_time,
            "{run}: the first {energy} point claims its count since {first_start} \
             ({} ms before it)",
            (first_time - first_start) / 1_000_000
        );
        for (start, time) in &e_points[1..] {
            assert_eq!(*start, first_start, "{run}: {e_points:?}");
            assert!(time > start, "{run}: {e_points:?}");
        }
        let x_points = start_and_time(&pushes, xids);
        let exporter_start = x_points[0].0;
        assert!(
            exporter_start >= spawned && exporter_start < x_points[0].1,
            "{run}: {xids} starts at {exporter_start}, the exporter at {spawned}: {x_points:?}"
        );
        assert!(
            x_points.iter().all(|(s, _)| *s == exporter_start),
            "{run}: {x_points:?}"
        );
        drop(e);
        seen = r.pushes().len();
    }
}

#[test]
fn the_standard_variable_alone_pushes_with_the_prometheus_listener_off() {
    let r = Receiver::start(Protocol::Http, Mode::Accept);
    // OTEL_EXPORTER_OTLP_ENDPOINT is a base URL: the exporter appends /v1/metrics, which the
    // receiver requires.
    let e = exporter()
        .args(&["-a", "", "-c", "300"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("{}/", r.endpoint()))
        .spawn();
    let pushes = r.wait_for(3, 30);
    let points = otlp_receiver::points(&pushes[2].request);
    assert!(
        points.iter().any(|p| p.metric == "DCGM_FI_DEV_GPU_TEMP"),
        "{points:?}"
    );
    assert!(e.child_status().unwrap().is_none(), "{}", e.stderr());
    // No Prometheus endpoint was opened.
    assert!(ureq::get(&e.url("/metrics")).call().is_err());
}

/// The page's value of `name` per series, as semconv carries it (its scale applied).
fn semconv_expect(page: &BTreeMap<Key, (f64, bool)>) -> BTreeMap<Key, f64> {
    // (page name, semconv name, conversion) for the rows of the default counters.
    // (page name, semconv name, the attribute telling it from the metric's other fields,
    // conversion) for the rows of the default counters (docs/otlp.md's table).
    type Row = (
        &'static str,
        &'static str,
        Option<(&'static str, &'static str)>,
        fn(f64) -> f64,
    );
    let rows: [Row; 9] = [
        (
            "DCGM_FI_DEV_GPU_UTIL",
            "hw.gpu.utilization",
            Some(("hw.gpu.task", "general")),
            |v| v / 100.0,
        ),
        (
            "DCGM_FI_DEV_ENC_UTIL",
            "hw.gpu.utilization",
            Some(("hw.gpu.task", "encoder")),
            |v| v / 100.0,
        ),
        (
            "DCGM_FI_DEV_DEC_UTIL",
            "hw.gpu.utilization",
            Some(("hw.gpu.task", "decoder")),
            |v| v / 100.0,
        ),
        ("DCGM_FI_DEV_FB_USED", "hw.gpu.memory.usage", None, |v| {
            v * 1_048_576.0
        }),
        ("DCGM_FI_DEV_POWER_USAGE", "hw.power", None, |v| v),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "hw.energy",
            None,
            |v| v / 1000.0,
        ),
        (
            "DCGM_FI_DEV_GPU_TEMP",
            "hw.temperature",
            Some(("hw.sensor_location", "gpu")),
            |v| v,
        ),
        (
            "DCGM_FI_DEV_MEMORY_TEMP",
            "hw.temperature",
            Some(("hw.sensor_location", "memory")),
            |v| v,
        ),
        (
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
            "hw.errors",
            Some(("error.type", "pcie_replay")),
            |v| v,
        ),
    ];
    let mut out = BTreeMap::new();
    for ((name, labels), (v, _)) in page {
        match rows.iter().find(|r| r.0 == name) {
            Some((_, to, attr, f)) => {
                let mut labels = labels.clone();
                if let Some((k, v)) = attr {
                    labels.insert(k.to_string(), v.to_string());
                }
                out.insert((to.to_string(), labels), f(*v))
            }
            None => out.insert((name.clone(), labels.clone()), *v),
        };
    }
    out
}

/// Attributes semconv adds to every point of a hardware metric (the rest tell points apart).
const HW_COMMON: [&str; 5] = ["hw.id", "hw.parent", "hw.vendor", "hw.model", "hw.type"];

#[test]
fn semconv_names_carry_the_page_values_in_the_conventions_units() {
    let r = Receiver::start(Protocol::Grpc, Mode::Accept);
    let e = exporter()
        .args(&["--otlp-endpoint", &r.endpoint(), "--otlp-protocol", "grpc"])
        .args(&["--otlp-metric-names", "semconv", "-c", "1000"])
        .start();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = page_series(&e.get("/metrics").1);
        std::thread::sleep(Duration::from_millis(150));
        let want = semconv_expect(&page);
        let matched = r.pushes().iter().rev().find_map(|p| {
            // The page's labels are kept; semconv's own attributes come after them.
            let got: BTreeMap<Key, f64> = otlp_receiver::points(&p.request)
                .into_iter()
                .map(|pt| {
                    let labels = pt
                        .attributes
                        .into_iter()
                        .filter(|(k, _)| !HW_COMMON.contains(&k.as_str()))
                        .collect();
                    ((pt.metric, labels), pt.value)
                })
                .collect();
            (got == want).then(|| p.clone())
        });
        if let Some(p) = matched {
            let points = otlp_receiver::points(&p.request);
            let util: Vec<_> = points
                .iter()
                .filter(|p| p.metric == "hw.gpu.utilization")
                .collect();
            assert!(!util.is_empty());
            for u in util {
                assert_eq!(u.kind, Kind::Gauge);
                let task = u.attributes.get("hw.gpu.task").map(String::as_str);
                assert!(
                    matches!(task, Some("general" | "encoder" | "decoder")),
                    "{u:?}"
                );
                assert_eq!(u.attributes.get("hw.id"), u.attributes.get("UUID"));
                assert!((0.0..=1.0).contains(&u.value), "{u:?}");
            }
            let energy = points
                .iter()
                .find(|p| p.metric == "hw.energy")
                .expect("hw.energy");
            assert_eq!(energy.kind, Kind::MonotonicSum);
            assert_eq!(
                energy.attributes.get("hw.type").map(String::as_str),
                Some("gpu")
            );
            let mem = points
                .iter()
                .find(|p| p.metric == "hw.gpu.memory.usage")
                .expect("memory");
            assert_eq!(mem.kind, Kind::Sum);
            assert!(!points.iter().any(|p| p.metric == "DCGM_FI_DEV_GPU_UTIL"));
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no semconv push matched the page"
        );
    }
}

/// A receiver that misbehaves as `mode` (`None`: nothing listens) from the start.
fn survive(protocol: Protocol, mode: Option<Mode>) {
    let port = free_port();
    let mut r = mode.map(|m| Receiver::start_on(protocol, m, port));
    let e = exporter()
        .args(&["--otlp-endpoint", &format!("http://127.0.0.1:{port}")])
        .args(&[
            "--otlp-protocol",
            protocol.flag(),
            "--otlp-queue-size",
            "4",
            "-c",
            "200",
        ])
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
        .start();
    let what = format!("{protocol:?} {mode:?}");
    let dropped =
        |e: &Exporter| self_metric(&e.scrape(), "dcgm_exporter_otlp_pushes_dropped_total", &[]);
    let collections = |e: &Exporter| {
        self_metric(
            &e.scrape(),
            "dcgm_exporter_collections_total",
            &[("result", "success")],
        )
    };
    e.scrape_until(20, |_| dropped(&e) >= 3.0);
    let (c1, d1, rss1) = (collections(&e), dropped(&e), rss_kib(e.child.id()));
    // Several intervals later collection has gone on and more was dropped.
    e.scrape_until(20, |_| {
        collections(&e) >= c1 + 10.0 && dropped(&e) > d1 + 5.0
    });
    let queued = self_metric(&e.scrape(), "dcgm_exporter_otlp_queue_length", &[]);
    assert!(queued <= 4.0, "{what}: {queued} queued");
    let failed = self_metric(
        &e.scrape(),
        "dcgm_exporter_otlp_pushes_total",
        &[("result", "failed")],
    );
    assert!(failed >= 1.0, "{what}: no failed try counted");
    let points = self_metric(
        &e.scrape(),
        "dcgm_exporter_otlp_data_points_dropped_total",
        &[],
    );
    assert!(points > dropped(&e), "{what}: {points} points dropped");
    let rss2 = rss_kib(e.child.id());
    assert!(
        rss2 < rss1 + 32 * 1024,
        "{what}: RSS grew from {rss1} to {rss2} KiB"
    );
    assert_eq!(e.get("/health").0, 200, "{what}");
    // The receiver comes back: pushes arrive again.
    match &r {
        Some(r) => r.set_mode(Mode::Accept),
        None => r = Some(Receiver::start_on(protocol, Mode::Accept, port)),
    }
    let r = r.unwrap();
    let before = r.pushes().len();
    let deadline = Instant::now() + Duration::from_secs(30);
    while r.pushes().len() < before + 2 {
        assert!(
            Instant::now() < deadline,
            "{what}: no push after the receiver came back:\n{}",
            e.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_receiver_that_hangs_refuses_resets_or_is_down_is_survived() {
    for protocol in [Protocol::Grpc, Protocol::Http] {
        for mode in [
            Some(Mode::Hang),
            Some(Mode::Reset),
            Some(Mode::Unavailable),
            None,
        ] {
            survive(protocol, mode);
        }
    }
}

/// An answer a retry cannot change (HTTP 400, gRPC INVALID_ARGUMENT, and gRPC
/// RESOURCE_EXHAUSTED without the RetryInfo that says the receiver can recover) drops the
/// push at once: one failed try per push, each counted as refused, none retried.
#[test]
fn a_push_the_receiver_rejects_is_dropped_without_retries() {
    for (protocol, mode) in [
        (Protocol::Http, Mode::BadRequest),
        (Protocol::Grpc, Mode::BadRequest),
        (Protocol::Grpc, Mode::Exhausted),
    ] {
        let r = Receiver::start(protocol, mode);
        let e = exporter()
            .args(&[
                "--otlp-endpoint",
                &r.endpoint(),
                "--otlp-protocol",
                protocol.flag(),
            ])
            .args(&["-c", "200"])
            .start();
        let refused = |e: &Exporter| {
            self_metric(
                &e.scrape(),
                "dcgm_exporter_otlp_pushes_dropped_total",
                &[("reason", "refused")],
            )
        };
        e.scrape_until(20, |_| refused(&e) >= 5.0);
        let page = e.scrape();
        let get = |name: &str, labels: &[(&str, &str)]| -> f64 {
            page.iter()
                .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
                .map(|s| s.value)
                .sum()
        };
        let failed = get("dcgm_exporter_otlp_pushes_total", &[("result", "failed")]);
        let refused = get(
            "dcgm_exporter_otlp_pushes_dropped_total",
            &[("reason", "refused")],
        );
        // The push in flight may have failed without being counted as dropped yet.
        assert!(
            failed - refused <= 1.0,
            "{protocol:?} {mode:?}: {failed} tries, {refused} refused"
        );
        assert_eq!(
            get("dcgm_exporter_otlp_pushes_total", &[("result", "sent")]),
            0.0
        );
        assert!(e.stderr().contains("OTLP push failed"), "{}", e.stderr());
    }
}

fn otlp_exporter(r: &Receiver, args: &[&str]) -> Exporter {
    exporter()
        .args(&[
            "--otlp-endpoint",
            &r.endpoint(),
            "--otlp-protocol",
            r.protocol.flag(),
        ])
        .args(args)
        .start()
}

/// Waits until `r` has seen `n` requests, refused or not.
fn attempts(r: &Receiver, n: usize, secs: u64) -> Vec<Instant> {
    poll(secs, Duration::from_millis(20), || {
        let a = r.attempts();
        match a.len() >= n {
            true => Ok(a),
            false => Err(format!("{} requests, wanted {n}", a.len())),
        }
    })
}

/// The specification's throttling: HTTP 429/503 with `Retry-After` (seconds, or an
/// HTTP-date) and gRPC UNAVAILABLE/RESOURCE_EXHAUSTED with `google.rpc.RetryInfo`. The
/// next request waits the hint, not the 0.5 s first back-off, and the push then arrives.
#[test]
fn a_receivers_back_off_hint_is_waited_for_before_the_retry() {
    for (protocol, mode, at_least) in [
        (Protocol::Http, Mode::ThrottleSeconds(2), 1.9),
        // An HTTP-date has whole seconds: 3 s from now is at least 2 s away.
        (Protocol::Http, Mode::ThrottleDate(3), 1.9),
        (Protocol::Grpc, Mode::ThrottleSeconds(2), 1.9),
        (Protocol::Grpc, Mode::ThrottleDate(2), 1.9),
    ] {
        let r = Receiver::start(protocol, mode);
        let e = otlp_exporter(&r, &["-c", "200"]);
        attempts(&r, 1, 20);
        r.set_mode(Mode::Accept);
        let a = attempts(&r, 2, 20);
        let gap = a[1].duration_since(a[0]).as_secs_f64();
        assert!(
            gap >= at_least,
            "{protocol:?} {mode:?}: retried after {gap:.2} s"
        );
        r.wait_for(1, 20);
        let log = e.stderr();
        assert!(log.contains("retry after"), "{protocol:?} {mode:?}: {log}");
    }
}

/// A receiver that keeps throttling over HTTP (429 with `Retry-After` in seconds, 503 with
/// an HTTP-date) gets one request per try, each the asked wait after the one before: a
/// throttled answer on a kept connection is an answer, never re-sent at once on a new
/// connection. Every request is a failed try in `otlp_pushes_total{result="failed"}`.
#[test]
fn a_throttled_push_is_one_request_per_try_each_waited_for_and_counted() {
    // An HTTP-date has whole seconds: 3 s from now is at least 2 s away.
    for (mode, at_least) in [
        (Mode::ThrottleSeconds(2), 1.9),
        (Mode::ThrottleDate(3), 1.9),
    ] {
        let r = Receiver::start(Protocol::Http, mode);
        let e = otlp_exporter(&r, &["-c", "200"]);
        // Four tries of the first push (the fifth is its last, after which the next push's
        // first try follows at once).
        let a = attempts(&r, 4, 30);
        // Between two tries: the last one answered and counted, the next not yet made.
        std::thread::sleep(Duration::from_millis(500));
        let failed = self_metric(
            &e.scrape(),
            "dcgm_exporter_otlp_pushes_total",
            &[("result", "failed")],
        );
        let requests = r.attempts().len();
        let gaps: Vec<f64> = a[..4]
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).as_secs_f64())
            .collect();
        assert!(
            gaps.iter().all(|g| *g >= at_least),
            "{mode:?}: requests {gaps:.3?} s apart, wanted one per try, {at_least} s apart"
        );
        assert_eq!(
            failed, requests as f64,
            "{mode:?}: {requests} requests, {failed} counted as failed tries"
        );
    }
}

/// A kept HTTP connection the receiver hangs up on as a request arrives (unanswered: a
/// connection-level failure, unlike any status) is the one case tried again at once, on a
/// new connection: every push arrives, and the unanswered try is counted as failed.
#[test]
fn an_unanswered_request_on_a_kept_connection_is_sent_again_at_once_and_counted() {
    let r = Receiver::start(Protocol::Http, Mode::HangUpOnReuse);
    let e = otlp_exporter(&r, &["-c", "300"]);
    r.wait_for(4, 30);
    // Between two collections: the last push answered and counted, the next not begun.
    let (requests, pushes, failed, sent) = loop {
        let before = r.attempts().len();
        std::thread::sleep(Duration::from_millis(100));
        let failed = self_metric(
            &e.scrape(),
            "dcgm_exporter_otlp_pushes_total",
            &[("result", "failed")],
        );
        let sent = self_metric(
            &e.scrape(),
            "dcgm_exporter_otlp_pushes_total",
            &[("result", "sent")],
        );
        let (requests, pushes) = (r.attempts().len(), r.pushes().len());
        if requests == before && requests == r.attempts().len() && sent == pushes as f64 {
            break (requests, pushes, failed, sent);
        }
    };
    assert_eq!(
        sent, pushes as f64,
        "every push arrived and was counted sent"
    );
    // One unanswered request per push after the first (each on the connection the one
    // before kept), each a failed try; no push dropped.
    assert_eq!(
        requests,
        2 * pushes - 1,
        "{requests} requests for {pushes} pushes"
    );
    assert_eq!(failed, (pushes - 1) as f64, "{failed} failed tries counted");
    let dropped = self_metric(&e.scrape(), "dcgm_exporter_otlp_pushes_dropped_total", &[]);
    assert_eq!(dropped, 0.0);
}

/// SIGTERM with pushes queued behind a receiver that throttled (asking for 30 s): the exit
/// sends them at once, within its flush deadline, and says so.
#[test]
fn a_clean_exit_sends_what_is_queued() {
    for protocol in [Protocol::Http, Protocol::Grpc] {
        let r = Receiver::start(protocol, Mode::ThrottleSeconds(30));
        let mut e = otlp_exporter(&r, &["-c", "200", "--otlp-queue-size", "8"]);
        attempts(&r, 1, 20);
        e.scrape_until(20, |_| {
            self_metric(&e.scrape(), "dcgm_exporter_otlp_queue_length", &[]) >= 3.0
        });
        r.set_mode(Mode::Accept);
        let term = Instant::now();
        let status = e.signal_and_wait("TERM");
        assert!(status.success(), "{protocol:?}: {status:?}");
        let after = r.pushes().iter().filter(|p| p.at >= term).count();
        assert!(
            after >= 3,
            "{protocol:?}: {after} pushes at exit\n{}",
            e.stderr()
        );
        let log = e.stderr();
        assert!(
            log.contains("queued OTLP push(es) before exiting"),
            "{protocol:?}: {log}"
        );
    }
}

/// SIGTERM with pushes queued for a receiver that hangs (and a push timeout far beyond the
/// flush deadline): the exit does not wait for it beyond its deadline, and says what was
/// not sent.
#[test]
fn a_hung_receiver_does_not_hold_the_exit() {
    for protocol in [Protocol::Http, Protocol::Grpc] {
        let r = Receiver::start(protocol, Mode::Hang);
        let mut e = exporter()
            .args(&[
                "--otlp-endpoint",
                &r.endpoint(),
                "--otlp-protocol",
                protocol.flag(),
                "-c",
                "200",
            ])
            .env("OTEL_EXPORTER_OTLP_TIMEOUT", "60000")
            .start();
        e.scrape_until(20, |_| {
            self_metric(&e.scrape(), "dcgm_exporter_otlp_queue_length", &[]) >= 2.0
        });
        // signal_and_wait fails past its own bound (15 s), far below the push timeout.
        let status = e.signal_and_wait("TERM");
        assert!(status.success(), "{protocol:?}: {status:?}");
        let log = e.stderr();
        assert!(
            log.contains("not sent by the exit's 5s flush deadline"),
            "{protocol:?}: {log}"
        );
    }
}

#[test]
fn bad_otlp_settings_stop_the_start_naming_the_flag_or_variable() {
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: [(&[&str], Env, &str); 4] = [
        (&["--otlp-endpoint", "ftp://x:1"], &[], "--otlp-endpoint"),
        (
            &[
                "--otlp-endpoint",
                "http://127.0.0.1:1",
                "--otlp-protocol",
                "http/json",
            ],
            &[],
            "not supported",
        ),
        (
            &[],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:1"),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
            ],
            "OTEL_EXPORTER_OTLP_CERTIFICATE /nonexistent/ca.pem",
        ),
        (
            &["--otlp-endpoint", "http://127.0.0.1:1"],
            &[("OTEL_EXPORTER_OTLP_HEADERS", "novalue")],
            "OTEL_EXPORTER_OTLP_HEADERS",
        ),
    ];
    for (args, env, want) in cases {
        let mut b = exporter().args(args);
        for (k, v) in env {
            b = b.env(k, v);
        }
        let (code, err) = b.run_to_exit();
        assert_ne!(code, 0, "{args:?} {env:?}");
        assert!(err.contains(want), "{args:?} {env:?}: {err}");
    }
}

#[test]
fn tls_with_a_client_certificate_reaches_a_receiver_that_requires_one() {
    if !require_tool("openssl", "apt-get install openssl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    certs::ca_server_client(dir.path(), "otlp-test-ca", "server", certs::SERVER_EXT);
    let file = |f: &str| dir.path().join(f).display().to_string();
    for protocol in [Protocol::Http, Protocol::Grpc] {
        let r = Receiver::start_tls(protocol, dir.path());
        let url = format!("https://127.0.0.1:{}", r.port);
        let e = exporter()
            .args(&["--otlp-endpoint", &url, "--otlp-protocol", protocol.flag()])
            .env("OTEL_EXPORTER_OTLP_CERTIFICATE", &file("ca.crt"))
            .env("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &file("client.crt"))
            .env("OTEL_EXPORTER_OTLP_CLIENT_KEY", &file("client.key"))
            .env("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20t0k")
            .start();
        let pushes = r.wait_for(2, 30);
        assert!(
            otlp_receiver::points(&pushes[1].request)
                .iter()
                .any(|p| p.metric == "DCGM_FI_DEV_GPU_TEMP"),
            "{protocol:?}"
        );
        assert_eq!(
            pushes[1].headers.get("authorization").map(String::as_str),
            Some("Bearer t0k")
        );
        drop(e);
        // Without the client certificate the receiver refuses the handshake: nothing
        // arrives, and the failed tries are counted.
        let before = r.pushes().len();
        let e = exporter()
            .args(&["--otlp-endpoint", &url, "--otlp-protocol", protocol.flag()])
            .env("OTEL_EXPORTER_OTLP_CERTIFICATE", &file("ca.crt"))
            .start();
        e.scrape_until(20, |_| {
            self_metric(
                &e.scrape(),
                "dcgm_exporter_otlp_pushes_total",
                &[("result", "failed")],
            ) >= 2.0
        });
        assert_eq!(r.pushes().len(), before, "{protocol:?}");
    }
}

mod real {
    use super::*;
    use crate::support::nvml_yaml::Gpu;
    use crate::support::real_dcgm::{kit, RealHostEngine, Scratch};

    fn gpus() -> Vec<Gpu> {
        (0..2u32)
            .map(|i| Gpu {
                temp_c: 50 + i,
                power_mw: 80_000 + 5_000 * i,
                fb_used_mib: 2000 * u64::from(i),
                gpu_util: 30 + i,
                ..Gpu::default()
            })
            .collect()
    }

    #[test]
    fn pushes_equal_the_page_on_the_real_dcgm_embedded() {
        let Some(kit) = kit() else { return };
        let dir = Scratch::new("otlp-embedded");
        let yaml = dir.yaml(&gpus());
        for protocol in [Protocol::Http, Protocol::Grpc] {
            let r = Receiver::start(protocol, Mode::Accept);
            let e = kit
                .embedded(&yaml)
                .args(&[
                    "--otlp-endpoint",
                    &r.endpoint(),
                    "--otlp-protocol",
                    protocol.flag(),
                ])
                .start();
            let (page, _) = matching_push(&e, &r, 30);
            assert!(
                page.keys()
                    .filter(|(n, _)| n == "DCGM_FI_DEV_GPU_TEMP")
                    .count()
                    == 2,
                "{protocol:?}: {page:?}"
            );
        }
    }

    /// A sum's start time survives the engine being killed and restarted (its counter did
    /// not go down), and the values still equal the page afterwards.
    #[test]
    fn a_sums_start_survives_a_real_host_engine_restart() {
        let Some(kit) = kit() else { return };
        let dir = Scratch::new("otlp-remote");
        let yaml = dir.yaml(&gpus());
        let port = free_port();
        let mut engine = RealHostEngine::start(kit, &yaml, &dir.0, port);
        let r = Receiver::start(Protocol::Grpc, Mode::Accept);
        let e = kit
            .remote(port)
            .args(&[
                "--otlp-endpoint",
                &r.endpoint(),
                "--otlp-protocol",
                "grpc",
                "-c",
                "300",
            ])
            .start();
        let starts = |p: &Push| -> BTreeMap<Key, u64> {
            otlp_receiver::points(&p.request)
                .into_iter()
                .filter(|pt| pt.kind == Kind::MonotonicSum)
                .map(|pt| ((pt.metric, pt.attributes), pt.start_ns))
                .collect()
        };
        let (_, before) = matching_push(&e, &r, 30);
        let before = starts(&before);
        assert!(!before.is_empty(), "no counter pushed");
        engine.kill();
        e.scrape_until(20, |p| {
            p.iter()
                .any(|s| s.name == "dcgm_exporter_dcgm_connected" && s.value == 0.0)
        });
        engine.restart(kit);
        e.scrape_until(20, |p| p.iter().any(|s| s.name == "DCGM_FI_DEV_GPU_TEMP"));
        let (_, after) = matching_push(&e, &r, 30);
        assert_eq!(starts(&after), before);
        let reconnects = self_metric(&e.scrape(), "dcgm_exporter_reconnects_total", &[]);
        assert!(reconnects >= 1.0);
    }
}

/// An exporter pushing to `r` over HTTP, collecting every second, with the power row
/// aggregated at 100 ms.
fn power_aggregated_to(r: &Receiver) -> ExporterBuilder {
    exporter()
        .args(&[
            "--otlp-endpoint",
            &r.endpoint(),
            "--otlp-protocol",
            "http/protobuf",
        ])
        .args(&["-c", "1000", "--aggregate", "DCGM_FI_DEV_POWER_USAGE"])
        .args(&["--aggregate-period", "100ms"])
}

/// Sub-interval aggregation (issue 47) in OTLP: a row's four `_interval_*` families of the
/// page are one DELTA histogram `<row>_interval` per push (count, sum, min, max, no
/// buckets), each point equal to the page's series of the same collection, its window
/// starting at the push before; every other series is pushed as without aggregation.
#[test]
fn aggregated_rows_are_pushed_as_delta_histograms_equal_to_the_page() {
    use crate::support::otlp_receiver::histograms;
    let r = Receiver::start(Protocol::Http, Mode::Accept);
    let e = power_aggregated_to(&r).start();
    let stat = |s: &str| format!("DCGM_FI_DEV_POWER_USAGE_interval_{s}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let (page, push) = loop {
        let text = e.get("/metrics").1;
        let page = parse(&text);
        std::thread::sleep(Duration::from_millis(150));
        let windows: BTreeMap<BTreeMap<String, String>, (u64, f64, f64, f64)> =
            series(&page, &stat("samples"))
                .into_iter()
                .map(|s| {
                    let at = |n: &str| {
                        series(&page, &stat(n))
                            .into_iter()
                            .find(|x| x.labels == s.labels)
                            .map_or(f64::NAN, |x| x.value)
                    };
                    let key = s.labels.clone();
                    (key, (s.value as u64, at("min"), at("max"), at("mean")))
                })
                .collect();
        // The sum is the mean times the count: equal to a rounding.
        let same = |p: &Push| {
            let h = histograms(&p.request);
            !windows.is_empty()
                && h.len() == windows.len()
                && h.iter().all(|h| {
                    windows.get(&h.attributes).is_some_and(|w| {
                        let mean = h.sum.unwrap() / h.count as f64;
                        (h.count, h.min, h.max) == (w.0, Some(w.1), Some(w.2))
                            && (mean - w.3).abs() <= 1e-9 * w.3.abs()
                    })
                })
        };
        if let Some(p) = r.pushes().iter().rev().find(|p| same(p)) {
            break (text, p.clone());
        }
        assert!(
            Instant::now() < deadline,
            "no push equal to the page's windows:\n{text}"
        );
    };
    let hist = histograms(&push.request);
    assert!(hist
        .iter()
        .all(|h| h.metric == "DCGM_FI_DEV_POWER_USAGE_interval"
            && h.delta
            && h.buckets == 0
            && h.count >= 5
            && h.start_ns < h.time_ns));
    assert_eq!(
        hist.len(),
        series(&parse(&page), "DCGM_FI_DEV_POWER_USAGE").len()
    );
    // The rest of the push is the rest of the page, and no gauge holds a statistic.
    let rest: BTreeMap<Key, (f64, bool)> = page_series(&page)
        .into_iter()
        .filter(|((n, _), _)| !n.contains("_interval_"))
        .collect();
    assert_eq!(push_series(&push), rest);
    // Each window starts where the push before ended.
    let pushes = r.wait_for(r.pushes().len() + 2, 10);
    let windows: Vec<(u64, u64)> = pushes
        .iter()
        .filter_map(|p| {
            histograms(&p.request)
                .first()
                .map(|h| (h.start_ns, h.time_ns))
        })
        .collect();
    assert!(
        windows.windows(2).any(|w| w[1].0 == w[0].1),
        "windows do not follow one another: {windows:?}"
    );
}

/// A collection whose read of the samples fails (the session up, the rest of the page
/// served) pushes no window for them; the next window holds both intervals' samples and
/// starts where the last window pushed ended, so that its time spans what it counts.
#[test]
fn a_window_after_a_failed_read_of_the_samples_spans_both_intervals() {
    let (before, after) = windows_around("fail_values_since 1 155", 1);
    spans_both(&before, &after);
}

/// The same when the read of the GPUs' values fails (`dcgmEntitiesGetLatestValues` of their
/// watch set): the GPUs get no series that collection, their samples are not read then,
/// and the next window holds both intervals'.
#[test]
fn a_window_after_a_failed_read_of_the_gpus_values_spans_both_intervals() {
    let (before, after) = windows_around("fail_reads 1", 1);
    spans_both(&before, &after);
}

/// Two failed reads in a row: DCGM keeps two intervals of samples, so the next window does
/// not make up for both; it holds its own interval and says so.
#[test]
fn a_window_after_two_failed_reads_is_its_own_interval() {
    let (before, after) = windows_around("fail_values_since 2 155", 2);
    let span = |h: &HistogramPoint| h.time_ns - h.start_ns;
    assert!(after.start_ns > before.time_ns, "{before:?} {after:?}");
    assert!(span(&after) < 3 * span(&before) / 2, "{before:?} {after:?}");
    assert!(
        (after.count as f64) < 1.5 * before.count as f64,
        "{before:?} {after:?}"
    );
}

fn spans_both(before: &HistogramPoint, after: &HistogramPoint) {
    assert_eq!(after.start_ns, before.time_ns, "{before:?} {after:?}");
    assert!(
        after.time_ns - after.start_ns > 3 * (before.time_ns - before.start_ns) / 2,
        "{before:?} {after:?}"
    );
    assert!(
        after.count as f64 > 1.5 * before.count as f64,
        "{before:?} {after:?}"
    );
}

/// Injects `fault` once the power row's windows are pushed; answers GPU 0's windows on
/// either side of the first pushes without one after it, which must be `gap` pushes (the
/// failed collections, the rest of their page pushed).
fn windows_around(fault: &str, gap: usize) -> (HistogramPoint, HistogramPoint) {
    use crate::support::otlp_receiver::histograms;
    let r = Receiver::start(Protocol::Http, Mode::Accept);
    let (_dir, ctl) = temp_file("control", "");
    let e = power_aggregated_to(&r).control(&ctl).start();
    let gpu_0 = |p: &Push| -> Option<HistogramPoint> {
        histograms(&p.request)
            .into_iter()
            .find(|h| h.attributes.get("gpu").map(String::as_str) == Some("0"))
    };
    r.wait_for(3, 20);
    crate::support::poll(20, Duration::from_millis(100), || {
        match r.pushes().iter().rev().take(2).all(|p| gpu_0(p).is_some()) {
            true => Ok(()),
            false => Err(format!("no two windows in a row: {}", e.stderr())),
        }
    });
    let pushed = r.pushes().len();
    control(&ctl, fault);
    let (before, after, between) = crate::support::poll(20, Duration::from_millis(100), || {
        let windows: Vec<(usize, HistogramPoint)> = r
            .pushes()
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, gpu_0(p)?)))
            .collect();
        windows
            .windows(2)
            .find(|w| w[1].0 >= pushed && w[1].0 > w[0].0 + 1)
            .map(|w| (w[0].1.clone(), w[1].1.clone(), w[1].0 - w[0].0 - 1))
            .ok_or_else(|| format!("no push without the window: {windows:?}\n{}", e.stderr()))
    });
    assert_eq!(
        between, gap,
        "pushes without the window: {before:?} {after:?}"
    );
    (before, after)
}

/// The event history as OTLP log records (issue 47), over both protocols: an XID, a GPU
/// lost, the host engine killed and back arrive at the receiver (`/v1/logs`,
/// `LogsService/Export`, decoded with the official messages) in that order, each as
/// `/events` serves it (type, entity, time, message), under the metrics' own resource.
#[test]
fn the_event_history_arrives_as_otlp_log_records_with_the_metrics_resource() {
    use crate::support::events::{events, position};
    for protocol in [Protocol::Http, Protocol::Grpc] {
        let r = Receiver::start(protocol, Mode::Accept);
        let (dir, ctl) = temp_file("control", "");
        let port = free_port();
        let mut engine = HostEngine::start_with(port, None, Some(&ctl));
        let e = exporter()
            .args(&["-r", &format!("127.0.0.1:{port}"), "-c", "200"])
            .args(&[
                "--otlp-endpoint",
                &r.endpoint(),
                "--otlp-protocol",
                protocol.flag(),
            ])
            .env("OTEL_SERVICE_NAME", "gpu-telemetry")
            .env("NODE_NAME", "node-a")
            .start();
        let at = format!("engine:127.0.0.1:{port}");
        let named = |recs: &[otlp_receiver::LogEntry], kind: &str, entity: &str| {
            recs.iter().position(|l| {
                l.event_name == format!("dcgm_exporter.{kind}")
                    && l.attributes.get("dcgm.entity").map(String::as_str) == Some(entity)
            })
        };
        control(&ctl, "xid 0 43");
        r.wait_for_logs(20, |l| named(l, "xid", "gpu:0").is_some());
        control(&ctl, "gpu_lost 1");
        r.wait_for_logs(20, |l| named(l, "gpu_lost", "gpu:1").is_some());
        engine.kill();
        r.wait_for_logs(20, |l| named(l, "engine_down", &at).is_some());
        let fresh = write_in(dir.path(), "fresh", "");
        let _engine = HostEngine::start_with(port, None, Some(&fresh));
        // Back: a second session, and GPU 1 with it.
        let recs = r.wait_for_logs(20, |l| {
            let ups = l
                .iter()
                .filter(|x| x.event_name == "dcgm_exporter.engine_up");
            ups.count() == 2 && named(l, "gpu_found", "gpu:1").is_some()
        });
        let order: Vec<usize> = [
            ("xid", "gpu:0"),
            ("gpu_lost", "gpu:1"),
            ("engine_down", &at),
        ]
        .iter()
        .map(|(k, en)| named(&recs, k, en).unwrap())
        .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "{protocol:?}: {recs:#?}"
        );
        // Each record is the event /events serves.
        let served = events(&e, "since=10m");
        for rec in &recs {
            let seq: u64 = rec.attributes["dcgm.event.seq"].parse().unwrap();
            let ev = served
                .iter()
                .find(|v| v["seq"] == seq)
                .unwrap_or_else(|| panic!("{protocol:?}: seq {seq} not served"));
            assert_eq!(
                rec.event_name,
                format!("dcgm_exporter.{}", ev["type"].as_str().unwrap())
            );
            assert_eq!(rec.body, ev["message"].as_str().unwrap());
            assert_eq!(
                rec.attributes["dcgm.entity"],
                ev["entity"].as_str().unwrap()
            );
            let time = dcgm_exporter::model::events::rfc3339_us((rec.time_ns / 1000) as i64);
            assert_eq!(time, ev["time"].as_str().unwrap(), "{protocol:?}");
        }
        let xid = &recs[order[0]];
        assert_eq!(xid.attributes["dcgm.xid"], "43");
        assert_eq!(xid.attributes["dcgm.time_source"], "dcgm");
        assert_eq!(xid.severity, 13, "WARN");
        assert_eq!(recs[order[2]].severity, 17, "ERROR");
        assert!(
            position(&served, "gpu_found", "gpu:1").is_some(),
            "{served:#?}"
        );
        // The same resource as the metrics pushes.
        let metrics = r.wait_for(1, 10);
        let resource = otlp_receiver::resource(&metrics[0].request);
        assert_eq!(
            resource.get("host.name").map(String::as_str),
            Some("node-a")
        );
        assert_eq!(
            resource.get("service.name").map(String::as_str),
            Some("gpu-telemetry")
        );
        assert!(recs.iter().all(|l| l.resource == resource), "{protocol:?}");
        e.scrape_until(10, |_| {
            self_metric(
                &e.scrape(),
                "dcgm_exporter_otlp_log_pushes_total",
                &[("result", "sent")],
            ) >= 1.0
        });
        assert_eq!(
            self_metric(
                &e.scrape(),
                "dcgm_exporter_otlp_log_records_dropped_total",
                &[]
            ),
            0.0
        );
    }
}
