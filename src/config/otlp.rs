//! OTLP push (`--otlp-*` and OpenTelemetry's standard exporter variables): where to push,
//! how, with which headers, timeout, TLS files and resource attributes. The variables are
//! read as the OpenTelemetry specification says (a metrics-specific variable wins over the
//! generic one; `OTEL_EXPORTER_OTLP_ENDPOINT` gets `/v1/metrics` appended for HTTP), and
//! anything malformed is an error naming the flag or variable, never silently ignored.

mod error;

pub use error::{Endpoint as EndpointProblem, Error, Item as ItemProblem};
use std::path::PathBuf;
use std::time::Duration;

/// How pushes travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC: `MetricsService/Export` over HTTP/2.
    Grpc,
    /// OTLP/HTTP with a binary protobuf body, `POST` to the metrics URL.
    HttpProtobuf,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        }
    }
}

/// Which names the pushed metrics carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// The names of the Prometheus page.
    Dcgm,
    /// OpenTelemetry's hardware semantic conventions (`hw.*`) where a mapping exists.
    Semconv,
}

/// Everything the push needs, checked.
#[derive(Clone, Debug)]
pub struct Settings {
    pub protocol: Protocol,
    /// `https`: TLS to the receiver.
    pub tls: bool,
    /// Host and port to dial.
    pub host: String,
    pub port: u16,
    /// The request path (HTTP only; gRPC's is the service's).
    pub path: String,
    /// The URL as resolved, for logs.
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    /// CA bundle the receiver's certificate must chain to (else the system's roots).
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key for mutual TLS (both or neither).
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// The resource's attributes, in order (host.name, service.name, service.version, then
    /// OTEL_RESOURCE_ATTRIBUTES' own).
    pub resource: Vec<(String, String)>,
    pub naming: Naming,
    /// Pushes kept while the receiver is down or slow; past this the oldest is dropped.
    pub queue_batches: usize,
}

/// What the command line says about the push (the rest comes from the environment).
pub struct Flags<'a> {
    pub endpoint: &'a str,
    pub protocol: &'a str,
    pub metric_names: &'a str,
    pub queue_size: i64,
}

/// Timeout when neither variable sets one (the specification's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The push's settings, or `None` when no endpoint is configured. `env` reads a variable
/// (the process environment, or a table in tests); an empty value counts as unset.
pub fn settings(
    flags: &Flags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Settings>, Error> {
    let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    // A metrics-specific variable wins over the generic one.
    let pick = |suffix: &str| -> Option<(String, String)> {
        let specific = format!("OTEL_EXPORTER_OTLP_METRICS_{suffix}");
        let generic = format!("OTEL_EXPORTER_OTLP_{suffix}");
        env(&specific)
            .map(|v| (specific, v))
            .or_else(|| env(&generic).map(|v| (generic, v)))
    };
    let protocol = match (flags.protocol, pick("PROTOCOL")) {
        ("", None) => Protocol::HttpProtobuf,
        ("", Some((var, v))) => protocol(&var, &v)?,
        (p, _) => protocol("--otlp-protocol", p)?,
    };
    let (source, raw, signal) = if !flags.endpoint.is_empty() {
        (
            "--otlp-endpoint".to_string(),
            flags.endpoint.to_string(),
            true,
        )
    } else if let Some(v) = env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
        ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT".to_string(), v, true)
    } else if let Some(v) = env("OTEL_EXPORTER_OTLP_ENDPOINT") {
        ("OTEL_EXPORTER_OTLP_ENDPOINT".to_string(), v, false)
    } else {
        return Ok(None);
    };
    let target = endpoint(&source, raw.trim(), signal, protocol)?;
    let headers = match pick("HEADERS") {
        Some((var, v)) => key_values(&var, &v, true)?,
        None => Vec::new(),
    };
    refuse_unimplemented(&pick, target.tls)?;
    let timeout = match pick("TIMEOUT") {
        Some((var, v)) => timeout(&var, &v)?,
        None => DEFAULT_TIMEOUT,
    };
    let path = |suffix: &str| pick(suffix).map(|(_, v)| PathBuf::from(v.trim()));
    let client_cert = match (path("CLIENT_CERTIFICATE"), path("CLIENT_KEY")) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => return Err(Error::HalfClientCertificate),
    };
    let naming = match flags.metric_names {
        "dcgm" => Naming::Dcgm,
        "semconv" => Naming::Semconv,
        o => return Err(Error::MetricNames(o.to_string())),
    };
    let queue_batches = usize::try_from(flags.queue_size)
        .ok()
        .filter(|n| (1..=4096).contains(n))
        .ok_or(Error::QueueSize(flags.queue_size))?;
    Ok(Some(Settings {
        protocol,
        ca_file: path("CERTIFICATE"),
        client_cert,
        headers,
        timeout,
        resource: resource(&env)?,
        naming,
        queue_batches,
        ..target
    }))
}

/// Settings we do not implement are refused rather than ignored: a push that is not what the
/// operator asked for is worse than a clear error at start. `tls`: the endpoint's scheme is
/// https.
fn refuse_unimplemented(
    pick: &dyn Fn(&str) -> Option<(String, String)>,
    tls: bool,
) -> Result<(), Error> {
    if let Some((var, value)) = pick("COMPRESSION") {
        if !value.trim().eq_ignore_ascii_case("none") {
            return Err(Error::Compression { var, value });
        }
    }
    if let Some((var, value)) = pick("INSECURE") {
        match value.trim().to_ascii_lowercase().as_str() {
            "true" if tls => {
                return Err(Error::Insecure {
                    var,
                    insecure: true,
                })
            }
            "false" if !tls => {
                return Err(Error::Insecure {
                    var,
                    insecure: false,
                })
            }
            "true" | "false" => {}
            _ => return Err(Error::NotBool { var, value }),
        }
    }
    Ok(())
}

fn protocol(source: &str, v: &str) -> Result<Protocol, Error> {
    let origin = source.to_string();
    match v.trim() {
        "grpc" => Ok(Protocol::Grpc),
        "http/protobuf" => Ok(Protocol::HttpProtobuf),
        "http/json" => Err(Error::HttpJson { origin }),
        o => Err(Error::Protocol {
            origin,
            value: o.to_string(),
        }),
    }
}

/// The target of `raw`: for OTLP/HTTP a signal-specific URL is used as given (a bare host
/// gets `/v1/metrics`) and a base URL gets `v1/metrics` appended to its path; for gRPC the
/// path must be empty.
fn endpoint(source: &str, raw: &str, signal: bool, protocol: Protocol) -> Result<Settings, Error> {
    let bad = |why| Error::Endpoint {
        origin: source.to_string(),
        raw: raw.to_string(),
        why,
    };
    let uri: hyper::Uri = raw
        .parse()
        .map_err(|e| bad(EndpointProblem::NotUrl(format!("{e}"))))?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        Some(s) => return Err(bad(EndpointProblem::Scheme(s.to_string()))),
        None => return Err(bad(EndpointProblem::NoScheme)),
    };
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad(EndpointProblem::NoHost))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    if uri.query().is_some() && protocol == Protocol::Grpc {
        return Err(bad(EndpointProblem::GrpcQuery));
    }
    let given = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let path = match protocol {
        Protocol::Grpc if given != "/" => return Err(bad(EndpointProblem::GrpcPath)),
        Protocol::Grpc => String::new(),
        Protocol::HttpProtobuf if signal && given != "/" => given.to_string(),
        Protocol::HttpProtobuf => format!("{}/v1/metrics", uri.path().trim_end_matches('/')),
    };
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
    let url = format!("{}://{authority}{path}", if tls { "https" } else { "http" });
    Ok(Settings {
        protocol,
        tls,
        host,
        port,
        path,
        url,
        headers: Vec::new(),
        timeout: DEFAULT_TIMEOUT,
        ca_file: None,
        client_cert: None,
        resource: Vec::new(),
        naming: Naming::Dcgm,
        queue_batches: 1,
    })
}

/// `key1=value1,key2=value2` (W3C Baggage's shape, values percent-decoded), as
/// OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES are written. `header`: each key
/// must be a valid HTTP header name and each value a valid header value.
fn key_values(source: &str, raw: &str, header: bool) -> Result<Vec<(String, String)>, Error> {
    let mut out = Vec::new();
    for (i, item) in raw.split(',').enumerate() {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let bad = |why| Error::Item {
            origin: source.to_string(),
            item: i + 1,
            text: item.to_string(),
            why,
        };
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| bad(ItemProblem::NotKeyValue))?;
        let k = k.trim();
        let v = percent_decode(v.trim()).ok_or_else(|| bad(ItemProblem::PercentEncoding))?;
        if k.is_empty() {
            return Err(bad(ItemProblem::EmptyKey));
        }
        if header {
            hyper::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| bad(ItemProblem::HeaderName))?;
            hyper::header::HeaderValue::from_str(&v).map_err(|_| bad(ItemProblem::HeaderValue))?;
        }
        out.push((k.to_string(), v));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn timeout(source: &str, v: &str) -> Result<Duration, Error> {
    match v.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(Error::Timeout {
            origin: source.to_string(),
            value: v.to_string(),
        }),
    }
}

/// The resource: the host, then the exporter as the service, then OTEL_RESOURCE_ATTRIBUTES
/// (which may override either), then OTEL_SERVICE_NAME (which wins for service.name).
fn resource(env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<(String, String)>, Error> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| match out.iter_mut().find(|(n, _)| n == k) {
        Some(slot) => slot.1 = v,
        None => out.push((k.to_string(), v)),
    };
    // The node's name where Kubernetes gives one (the pod's own hostname is not the host's).
    if let Some(h) = env("NODE_NAME").or_else(super::hostname::os_hostname) {
        set("host.name", h);
    }
    set("service.name", "dcgm-exporter".into());
    set("service.version", env!("CARGO_PKG_VERSION").into());
    if let Some(v) = env("OTEL_RESOURCE_ATTRIBUTES") {
        for (k, v) in key_values("OTEL_RESOURCE_ATTRIBUTES", &v, false)? {
            set(&k, v);
        }
    }
    if let Some(v) = env("OTEL_SERVICE_NAME") {
        set("service.name", v.trim().to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
