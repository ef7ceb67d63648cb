//! What the OTLP push's flags and variables refuse; each error names the flag or variable
//! (`origin`) and the value it gave.

/// Why the OTLP push's settings cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{origin} http/json: not supported; use grpc or http/protobuf")]
    HttpJson { origin: String },
    #[error("{origin} {value}: use grpc or http/protobuf")]
    Protocol { origin: String, value: String },
    #[error("{origin} {raw:?}: {why}")]
    Endpoint {
        origin: String,
        raw: String,
        why: Endpoint,
    },
    /// An item of a `key=value,...` list (headers, resource attributes); `item` counts from 1.
    #[error("{origin}: item {item} ({text:?}): {why}")]
    Item {
        origin: String,
        item: usize,
        text: String,
        why: Item,
    },
    #[error("{var}={value}: compression is not supported; unset it or set it to none")]
    Compression { var: String, value: String },
    /// `*_INSECURE` that says the opposite of the endpoint's scheme.
    #[error(
        "{var}={insecure} contradicts the {scheme} endpoint; the endpoint's scheme (http:// or \
         https://) decides",
        scheme = contradicted(.insecure)
    )]
    Insecure { var: String, insecure: bool },
    #[error("{var}={value}: use true or false")]
    NotBool { var: String, value: String },
    #[error("{origin} {value:?}: milliseconds, a whole number above 0")]
    Timeout { origin: String, value: String },
    #[error(
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY (or their \
         METRICS_ forms) go together: set both or neither"
    )]
    HalfClientCertificate,
    #[error("--otlp-metric-names {0}: use dcgm or semconv")]
    MetricNames(String),
    #[error("--otlp-queue-size {0}: must be between 1 and 4096")]
    QueueSize(i64),
}

/// What is wrong with an endpoint.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Endpoint {
    #[error("not a URL ({0})")]
    NotUrl(String),
    #[error("scheme {0}: use http:// or https://")]
    Scheme(String),
    #[error("no scheme: use http://host:port or https://host:port")]
    NoScheme,
    #[error("no host")]
    NoHost,
    #[error("a gRPC endpoint takes no query")]
    GrpcQuery,
    #[error("a gRPC endpoint has no path (gRPC names its own)")]
    GrpcPath,
}

/// What is wrong with an item of a `key=value,...` list.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Item {
    #[error("not key=value")]
    NotKeyValue,
    #[error("bad percent-encoding")]
    PercentEncoding,
    #[error("empty key")]
    EmptyKey,
    #[error("not a valid HTTP header name")]
    HeaderName,
    #[error("not a valid HTTP header value")]
    HeaderValue,
}

/// The scheme an `*_INSECURE` value contradicts.
fn contradicted(insecure: &bool) -> &'static str {
    if *insecure {
        "https://"
    } else {
        "http://"
    }
}
