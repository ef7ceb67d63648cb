use super::*;
use crate::config::otlp::{Naming, Protocol};
use crate::model::naming::PromType;

fn settings(port: u16, queue: usize, protocol: Protocol) -> Settings {
    Settings {
        protocol,
        tls: false,
        host: "127.0.0.1".into(),
        port,
        path: "/v1/metrics".into(),
        url: format!("http://127.0.0.1:{port}/v1/metrics"),
        headers: Vec::new(),
        timeout: Duration::from_millis(200),
        ca_file: None,
        client_cert: None,
        resource: Vec::new(),
        naming: Naming::Dcgm,
        queue_batches: queue,
    }
}

fn page() -> Page {
    let mut p = Page::default();
    for i in 0..50 {
        let gpu = i.to_string();
        p.add(
            "DCGM_FI_DEV_GPU_TEMP",
            "t",
            PromType::Gauge,
            &[("gpu", &gpu)],
            50.0,
        );
    }
    p
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn a_receiver_that_is_down_costs_the_queue_bound_and_never_blocks_enqueue() {
    for protocol in [Protocol::HttpProtobuf, Protocol::Grpc] {
        let metrics = SelfMetrics::new();
        let otlp = Otlp::start(&settings(closed_port(), 4, protocol), &metrics).unwrap();
        let page = page();
        let started = std::time::Instant::now();
        for _ in 0..200 {
            otlp.enqueue(&page);
            let (n, _) = otlp.queue.len();
            assert!(n <= 4, "{protocol:?}: queue holds {n}");
        }
        // 200 enqueues against a dead receiver with 500 ms back-offs: none waited on it.
        assert!(started.elapsed() < Duration::from_secs(20), "{protocol:?}");
        let m = &otlp.metrics;
        let full = m.dropped.with_label_values(&["queue_full"]).get();
        assert!(full >= 190, "{protocol:?}: {full} dropped");
        assert_eq!(
            m.dropped_points.get(),
            full * 50 + m.dropped.with_label_values(&["retries_exhausted"]).get() * 50
        );
        otlp.close();
    }
}

#[test]
fn retry_after_reads_seconds_and_http_dates_and_nothing_else() {
    use std::time::SystemTime;
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let at = |v: &str| transport::retry_after(v, now);
    assert_eq!(at("120"), Some(Duration::from_secs(120)));
    assert_eq!(at(" 0 "), Some(Duration::ZERO));
    // IMF-fixdate, and the two obsolete forms RFC 9110 still asks recipients to accept.
    let later = now + Duration::from_secs(90);
    let date = httpdate::fmt_http_date(later);
    assert_eq!(at(&date), Some(Duration::from_secs(90)), "{date}");
    assert_eq!(
        at("Tuesday, 14-Nov-23 22:13:50 GMT"),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        at("Tue Nov 14 22:13:50 2023"),
        Some(Duration::from_secs(30))
    );
    // A date already past: retry now.
    assert_eq!(
        at(&httpdate::fmt_http_date(now - Duration::from_secs(5))),
        Some(Duration::ZERO)
    );
    // Absurdly long: a very long wait, which the sender caps.
    assert_eq!(
        at("99999999999999999999999"),
        Some(Duration::from_secs(u64::MAX))
    );
    for bad in [
        "",
        "-5",
        "1.5",
        "soon",
        "120s",
        "Tue, 99 Nov 2023 22:14:20 GMT",
    ] {
        assert_eq!(at(bad), None, "{bad:?}");
    }
}

#[test]
fn a_hint_replaces_the_back_off_up_to_the_cap() {
    let backoff = Duration::from_millis(500);
    assert_eq!(retry_wait(None, backoff), backoff);
    assert_eq!(
        retry_wait(Some(Duration::from_secs(7)), backoff),
        Duration::from_secs(7)
    );
    assert_eq!(retry_wait(Some(Duration::ZERO), backoff), Duration::ZERO);
    assert_eq!(
        retry_wait(Some(Duration::from_secs(u64::MAX)), backoff),
        MAX_RETRY_AFTER
    );
}
