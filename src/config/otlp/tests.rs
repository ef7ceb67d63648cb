use super::*;
use std::collections::HashMap;

fn flags(endpoint: &str) -> Flags<'_> {
    Flags {
        endpoint,
        protocol: "",
        metric_names: "dcgm",
        queue_size: 16,
    }
}

fn with(env: &[(&str, &str)], f: &Flags) -> Result<Option<Settings>, String> {
    let map: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    settings(f, &move |k| map.get(k).cloned())
}

#[test]
fn nothing_configured_means_no_push() {
    assert!(with(&[], &flags("")).unwrap().is_none());
    assert!(with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")], &flags(""))
        .unwrap()
        .is_none());
}

#[test]
fn endpoints_resolve_as_the_specification_says() {
    // The generic variable is a base URL: /v1/metrics is appended for HTTP.
    let s = with(
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")],
        &flags(""),
    )
    .unwrap()
    .unwrap();
    assert_eq!((s.url.as_str(), s.port), ("http://c:4318/v1/metrics", 4318));
    let s = with(
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c/otlp")],
        &flags(""),
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        (s.path.as_str(), s.port, s.tls),
        ("/otlp/v1/metrics", 443, true)
    );
    // The metrics variable is used as given, and wins over the generic one.
    let s = with(
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://b:2/custom"),
        ],
        &flags(""),
    )
    .unwrap()
    .unwrap();
    assert_eq!((s.host.as_str(), s.path.as_str()), ("b", "/custom"));
    // The flag wins over both; a bare host gets the metrics path.
    let s = with(
        &[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://b:2/custom")],
        &flags("http://[::1]:9"),
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        (s.host.as_str(), s.port, s.path.as_str()),
        ("::1", 9, "/v1/metrics")
    );
}

#[test]
fn grpc_endpoints_take_no_path() {
    let f = Flags {
        protocol: "grpc",
        ..flags("http://c:4317")
    };
    let s = with(&[], &f).unwrap().unwrap();
    assert_eq!((s.protocol, s.path.as_str()), (Protocol::Grpc, ""));
    let f = Flags {
        protocol: "grpc",
        ..flags("http://c:4317/v1/metrics")
    };
    let e = with(&[], &f).unwrap_err();
    assert!(
        e.contains("--otlp-endpoint") && e.contains("no path"),
        "{e}"
    );
    // The protocol comes from the variables when the flag does not say.
    let s = with(
        &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
        &flags("http://c:4317"),
    )
    .unwrap()
    .unwrap();
    assert_eq!(s.protocol, Protocol::Grpc);
}

#[test]
fn bad_values_are_errors_naming_their_source() {
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: &[(Env, &str, &str)] = &[
        (&[], "ftp://x", "--otlp-endpoint"),
        (&[], "localhost:4318", "no scheme"),
        (
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
            "http://x",
            "not supported",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "udp")],
            "http://x",
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_HEADERS", "a=1,b")],
            "http://x",
            "OTEL_EXPORTER_OTLP_HEADERS: item 2",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_HEADERS", "bad key=1")],
            "http://x",
            "header name",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_HEADERS", "k=%zz")],
            "http://x",
            "percent",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")],
            "http://x",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "0")],
            "http://x",
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k")],
            "http://x",
            "set both or neither",
        ),
        (
            &[("OTEL_RESOURCE_ATTRIBUTES", "=x")],
            "http://x",
            "OTEL_RESOURCE_ATTRIBUTES",
        ),
    ];
    for (env, endpoint, want) in cases {
        let e = with(env, &flags(endpoint)).unwrap_err();
        assert!(e.contains(want), "{env:?} {endpoint}: {e}");
    }
    let e = with(
        &[],
        &Flags {
            queue_size: 0,
            ..flags("http://x")
        },
    )
    .unwrap_err();
    assert!(e.contains("--otlp-queue-size"), "{e}");
    let e = with(
        &[],
        &Flags {
            metric_names: "otel",
            ..flags("http://x")
        },
    )
    .unwrap_err();
    assert!(e.contains("--otlp-metric-names"), "{e}");
}

#[test]
fn headers_timeout_tls_and_resource() {
    let s = with(
        &[
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b, x-tenant=t1"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
                "authorization=Bearer%20tok",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/ca.pem"),
            ("OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE", "/c.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k.pem"),
            ("NODE_NAME", "node-7"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=prod,service.name=ignored",
            ),
            ("OTEL_SERVICE_NAME", "gpu-telemetry"),
        ],
        &flags("https://c:4318"),
    )
    .unwrap()
    .unwrap();
    // The metrics-specific headers replace the generic ones.
    assert_eq!(
        s.headers,
        vec![("authorization".into(), "Bearer tok".into())]
    );
    assert_eq!(s.timeout, Duration::from_millis(2500));
    assert_eq!(s.ca_file, Some(PathBuf::from("/ca.pem")));
    assert_eq!(
        s.client_cert,
        Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem")))
    );
    let r: HashMap<_, _> = s.resource.iter().cloned().collect();
    assert_eq!(r["host.name"], "node-7");
    assert_eq!(r["service.name"], "gpu-telemetry");
    assert_eq!(r["service.version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(r["deployment.environment"], "prod");
}

#[test]
fn compression_and_insecure_are_refused_where_they_would_be_ignored() {
    let http = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")];
    let e = with(
        &[http[0], ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")],
        &flags(""),
    )
    .unwrap_err();
    assert!(e.contains("OTEL_EXPORTER_OTLP_COMPRESSION=gzip"), "{e}");
    assert!(with(
        &[http[0], ("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "none")],
        &flags("")
    )
    .is_ok());
    let e = with(
        &[http[0], ("OTEL_EXPORTER_OTLP_INSECURE", "false")],
        &flags(""),
    )
    .unwrap_err();
    assert!(e.contains("contradicts the http://"), "{e}");
    assert!(with(
        &[http[0], ("OTEL_EXPORTER_OTLP_INSECURE", "true")],
        &flags("")
    )
    .is_ok());
    let https = ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318");
    let e = with(
        &[https, ("OTEL_EXPORTER_OTLP_INSECURE", "true")],
        &flags(""),
    )
    .unwrap_err();
    assert!(e.contains("contradicts the https://"), "{e}");
    let e = with(
        &[https, ("OTEL_EXPORTER_OTLP_INSECURE", "maybe")],
        &flags(""),
    )
    .unwrap_err();
    assert!(e.contains("use true or false"), "{e}");
}
