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

fn with(env: &[(&str, &str)], f: &Flags) -> Result<Option<Settings>, Error> {
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
        matches!(&e, Error::Endpoint { origin, why: EndpointProblem::GrpcPath, .. } if origin == "--otlp-endpoint"),
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
    type Is = fn(&Error) -> bool;
    let cases: &[(Env, &str, Is)] = &[
        (
            &[],
            "ftp://x",
            |e| matches!(e, Error::Endpoint { origin, why: EndpointProblem::Scheme(s), .. } if origin == "--otlp-endpoint" && s == "ftp"),
        ),
        (&[], "localhost:4318", |e| {
            matches!(
                e,
                Error::Endpoint {
                    why: EndpointProblem::NoScheme,
                    ..
                }
            )
        }),
        (
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
            "http://x",
            |e| matches!(e, Error::HttpJson { origin } if origin == "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ),
        (
            &[("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "udp")],
            "http://x",
            |e| matches!(e, Error::Protocol { origin, value } if origin == "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL" && value == "udp"),
        ),
        (
            &[("OTEL_EXPORTER_OTLP_HEADERS", "a=1,b")],
            "http://x",
            |e| matches!(e, Error::Item { origin, item: 2, why: ItemProblem::NotKeyValue, .. } if origin == "OTEL_EXPORTER_OTLP_HEADERS"),
        ),
        (
            &[("OTEL_EXPORTER_OTLP_HEADERS", "bad key=1")],
            "http://x",
            |e| {
                matches!(
                    e,
                    Error::Item {
                        why: ItemProblem::HeaderName,
                        ..
                    }
                )
            },
        ),
        (
            &[("OTEL_EXPORTER_OTLP_HEADERS", "k=%zz")],
            "http://x",
            |e| {
                matches!(
                    e,
                    Error::Item {
                        why: ItemProblem::PercentEncoding,
                        ..
                    }
                )
            },
        ),
        (
            &[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")],
            "http://x",
            |e| matches!(e, Error::Timeout { origin, value } if origin == "OTEL_EXPORTER_OTLP_TIMEOUT" && value == "10s"),
        ),
        (
            &[("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "0")],
            "http://x",
            |e| matches!(e, Error::Timeout { origin, .. } if origin == "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT"),
        ),
        (
            &[("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k")],
            "http://x",
            |e| matches!(e, Error::HalfClientCertificate),
        ),
        (
            &[("OTEL_RESOURCE_ATTRIBUTES", "=x")],
            "http://x",
            |e| matches!(e, Error::Item { origin, why: ItemProblem::EmptyKey, .. } if origin == "OTEL_RESOURCE_ATTRIBUTES"),
        ),
    ];
    for (env, endpoint, is) in cases {
        let e = with(env, &flags(endpoint)).unwrap_err();
        assert!(is(&e), "{env:?} {endpoint}: {e}");
    }
    let e = with(
        &[],
        &Flags {
            queue_size: 0,
            ..flags("http://x")
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::QueueSize(0)), "{e}");
    let e = with(
        &[],
        &Flags {
            metric_names: "otel",
            ..flags("http://x")
        },
    )
    .unwrap_err();
    assert!(matches!(&e, Error::MetricNames(n) if n == "otel"), "{e}");
}

/// The words that name the source and the value, as the operator reads them.
#[test]
fn errors_read_source_value_then_why() {
    let cases = [
        (
            Error::Item {
                origin: "OTEL_EXPORTER_OTLP_HEADERS".into(),
                item: 2,
                text: "b".into(),
                why: ItemProblem::NotKeyValue,
            },
            "OTEL_EXPORTER_OTLP_HEADERS: item 2 (\"b\"): not key=value",
        ),
        (
            Error::Endpoint {
                origin: "--otlp-endpoint".into(),
                raw: "ftp://x".into(),
                why: EndpointProblem::Scheme("ftp".into()),
            },
            "--otlp-endpoint \"ftp://x\": scheme ftp: use http:// or https://",
        ),
        (
            Error::Insecure {
                var: "OTEL_EXPORTER_OTLP_INSECURE".into(),
                insecure: true,
            },
            "OTEL_EXPORTER_OTLP_INSECURE=true contradicts the https:// endpoint; the endpoint's \
             scheme (http:// or https://) decides",
        ),
        (
            Error::Insecure {
                var: "OTEL_EXPORTER_OTLP_INSECURE".into(),
                insecure: false,
            },
            "OTEL_EXPORTER_OTLP_INSECURE=false contradicts the http:// endpoint; the endpoint's \
             scheme (http:// or https://) decides",
        ),
    ];
    for (e, words) in cases {
        assert_eq!(e.to_string(), words);
    }
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
    assert!(
        matches!(&e, Error::Compression { var, value } if var == "OTEL_EXPORTER_OTLP_COMPRESSION" && value == "gzip"),
        "{e}"
    );
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
    assert!(
        matches!(
            e,
            Error::Insecure {
                insecure: false,
                ..
            }
        ),
        "{e}"
    );
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
    assert!(matches!(e, Error::Insecure { insecure: true, .. }), "{e}");
    let e = with(
        &[https, ("OTEL_EXPORTER_OTLP_INSECURE", "maybe")],
        &flags(""),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::NotBool { value, .. } if value == "maybe"),
        "{e}"
    );
}
