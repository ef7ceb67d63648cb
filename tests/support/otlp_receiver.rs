//! An OTLP metrics receiver for the tests: OTLP/gRPC (tonic's server of the generated
//! `MetricsService`) or OTLP/HTTP (hyper, `POST /v1/metrics`), decoding every push with the
//! messages generated from OpenTelemetry's official `.proto` files. It takes the logs signal
//! too (`LogsService`, `POST /v1/logs`: the event history's log records), kept apart: a log
//! push is neither a metrics push nor one of the `attempts`. It can also misbehave,
//! switched at run time: hang (accept and never answer), reset (accept and close with RST),
//! or answer an error status, also with the specification's back-off hints (HTTP
//! `Retry-After`, gRPC `google.rpc.RetryInfo` built with tonic-types' official messages).

use dcgm_exporter::output::otlp::proto::collector::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use dcgm_exporter::output::otlp::proto::collector::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use dcgm_exporter::output::otlp::proto::common::any_value;
use dcgm_exporter::output::otlp::proto::logs_collector::logs_service_server::{
    LogsService, LogsServiceServer,
};
use dcgm_exporter::output::otlp::proto::logs_collector::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use dcgm_exporter::output::otlp::proto::metrics::{metric, number_data_point, NumberDataPoint};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    Http,
}

impl Protocol {
    /// `--otlp-protocol`'s value.
    pub fn flag(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::Http => "http/protobuf",
        }
    }
}

/// How the receiver treats new connections (and, for `Status`, each request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Accept,
    /// Accepts the connection and never reads or answers.
    Hang,
    /// Accepts and closes at once with a TCP reset.
    Reset,
    /// Answers HTTP 503 / gRPC UNAVAILABLE.
    Unavailable,
    /// Answers HTTP 400 / gRPC INVALID_ARGUMENT (nothing a retry can change).
    BadRequest,
    /// Throttles, asking for a retry in N seconds: HTTP 429 with `Retry-After: N`, gRPC
    /// UNAVAILABLE with a RetryInfo of N s.
    ThrottleSeconds(u64),
    /// Throttles until N seconds from now: HTTP 503 with `Retry-After` an HTTP-date, gRPC
    /// RESOURCE_EXHAUSTED with a RetryInfo of N s.
    ThrottleDate(u64),
    /// gRPC RESOURCE_EXHAUSTED without RetryInfo: the receiver cannot recover, so the
    /// specification says not to retry (HTTP: 429 without a hint, which is retried).
    Exhausted,
    /// HTTP: answers a connection's first request and hangs up on the next one without
    /// answering (a receiver closing an idle keep-alive connection as a request arrives).
    HangUpOnReuse,
}

impl Mode {
    /// Whether connections are taken and answered (with whatever status).
    fn answers(self) -> bool {
        !matches!(self, Mode::Hang | Mode::Reset)
    }

    /// The HTTP status and `Retry-After` of a refusing mode.
    fn http_refusal(self) -> Option<(u16, Option<String>)> {
        let in_secs =
            |n: u64| httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(n));
        match self {
            Mode::Unavailable => Some((503, None)),
            Mode::BadRequest => Some((400, None)),
            Mode::ThrottleSeconds(n) => Some((429, Some(n.to_string()))),
            Mode::ThrottleDate(n) => Some((503, Some(in_secs(n)))),
            Mode::Exhausted => Some((429, None)),
            Mode::Accept | Mode::Hang | Mode::Reset | Mode::HangUpOnReuse => None,
        }
    }

    /// The gRPC status of a refusing mode.
    fn grpc_refusal(self) -> Option<tonic::Status> {
        use tonic_types::{ErrorDetails, StatusExt};
        let throttle = |code, n: u64| {
            tonic::Status::with_error_details(
                code,
                "told to throttle",
                ErrorDetails::with_retry_info(Some(Duration::from_secs(n))),
            )
        };
        match self {
            Mode::Unavailable => Some(tonic::Status::unavailable("told to refuse")),
            Mode::BadRequest => Some(tonic::Status::invalid_argument("told to reject")),
            Mode::ThrottleSeconds(n) => Some(throttle(tonic::Code::Unavailable, n)),
            Mode::ThrottleDate(n) => Some(throttle(tonic::Code::ResourceExhausted, n)),
            Mode::Exhausted => Some(tonic::Status::resource_exhausted("told to be full")),
            Mode::Accept | Mode::Hang | Mode::Reset | Mode::HangUpOnReuse => None,
        }
    }
}

/// One decoded push.
pub struct Push {
    pub request: ExportMetricsServiceRequest,
    pub headers: BTreeMap<String, String>,
    pub at: Instant,
}

/// One decoded push of log records.
pub struct LogPush {
    pub request: ExportLogsServiceRequest,
}

#[derive(Default)]
struct State {
    mode: Mutex<Option<Mode>>,
    pushes: Mutex<Vec<Arc<Push>>>,
    logs: Mutex<Vec<Arc<LogPush>>>,
    /// When each request arrived, refused or not.
    attempts: Mutex<Vec<Instant>>,
    /// Connections held open by `Hang`.
    held: Mutex<Vec<tokio::net::TcpStream>>,
}

impl State {
    fn mode(&self) -> Mode {
        self.mode.lock().unwrap().unwrap_or(Mode::Accept)
    }

    /// A request arrived: its time is recorded, and the mode it is answered in returned.
    fn attempt(&self) -> Mode {
        self.attempts.lock().unwrap().push(Instant::now());
        self.mode()
    }

    fn record(&self, request: ExportMetricsServiceRequest, headers: BTreeMap<String, String>) {
        self.pushes.lock().unwrap().push(Arc::new(Push {
            request,
            headers,
            at: Instant::now(),
        }));
    }
}

pub struct Receiver {
    pub port: u16,
    pub protocol: Protocol,
    state: Arc<State>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Receiver {
    /// A receiver on a free port.
    pub fn start(protocol: Protocol, mode: Mode) -> Receiver {
        Self::start_on(protocol, mode, super::free_port())
    }

    /// A receiver on `port` (one the exporter was told about before it listened).
    pub fn start_on(protocol: Protocol, mode: Mode, port: u16) -> Receiver {
        Self::start_with(protocol, mode, port, None)
    }

    /// A receiver speaking TLS with `server.crt`/`server.key` of `dir` that requires a
    /// client certificate signed by `dir`'s `ca.crt`.
    pub fn start_tls(protocol: Protocol, dir: &std::path::Path) -> Receiver {
        let acceptor = tls_acceptor(dir, protocol);
        Self::start_with(protocol, Mode::Accept, super::free_port(), Some(acceptor))
    }

    fn start_with(
        protocol: Protocol,
        mode: Mode,
        port: u16,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Receiver {
        let state = Arc::new(State::default());
        *state.mode.lock().unwrap() = Some(mode);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let st = state.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
                    .await
                    .expect("bind the OTLP receiver");
                ready_tx.send(()).expect("signal ready");
                tokio::select! {
                    _ = serve(listener, protocol, st, tls) => {}
                    _ = stopped => {}
                }
            });
        });
        ready_rx.recv().expect("receiver started");
        Receiver {
            port,
            protocol,
            state,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.state.mode.lock().unwrap() = Some(mode);
    }

    pub fn pushes(&self) -> Vec<Arc<Push>> {
        self.state.pushes.lock().unwrap().clone()
    }

    /// The log pushes received (the event history's events).
    pub fn logs(&self) -> Vec<Arc<LogPush>> {
        self.state.logs.lock().unwrap().clone()
    }

    /// Every log record received so far, in the order received.
    pub fn log_records(&self) -> Vec<LogEntry> {
        self.logs()
            .iter()
            .flat_map(|p| log_records(&p.request))
            .collect()
    }

    /// Waits until the log records received satisfy `done` (panics after `secs`).
    pub fn wait_for_logs(&self, secs: u64, done: impl Fn(&[LogEntry]) -> bool) -> Vec<LogEntry> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let l = self.log_records();
            if done(&l) {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "log records within {secs} s: {:#?}",
                l.iter().map(|r| &r.event_name).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// When each request arrived, refused ones included.
    pub fn attempts(&self) -> Vec<Instant> {
        self.state.attempts.lock().unwrap().clone()
    }

    /// Waits until `n` pushes have arrived (panics after `secs`).
    pub fn wait_for(&self, n: usize, secs: u64) -> Vec<Arc<Push>> {
        super::poll(secs, Duration::from_millis(50), || {
            let p = self.pushes();
            match p.len() >= n {
                true => Ok(p),
                false => Err(format!(
                    "{} OTLP pushes within {secs} s, wanted {n}",
                    p.len()
                )),
            }
        })
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    protocol: Protocol,
    state: Arc<State>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    // Connections the receiver serves go to tonic (gRPC) or hyper (HTTP); the others are
    // held or reset here.
    let (tx, rx) = tokio::sync::mpsc::channel::<tokio::net::TcpStream>(64);
    let served = state.clone();
    let server = async move {
        match protocol {
            Protocol::Grpc => {
                let incoming = futures_util::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|s| (Ok::<_, std::io::Error>(s), rx))
                });
                tonic::transport::Server::builder()
                    .add_service(MetricsServiceServer::new(Grpc(served.clone())))
                    .add_service(LogsServiceServer::new(Grpc(served)))
                    .serve_with_incoming(incoming)
                    .await
                    .expect("gRPC receiver serves");
            }
            Protocol::Http => serve_http(rx, served).await,
        }
    };
    let accept = async move {
        while let Ok((stream, _)) = listener.accept().await {
            match state.mode() {
                m if m.answers() && tls.is_some() => {
                    let (acceptor, state) = (tls.clone().unwrap(), state.clone());
                    tokio::spawn(async move {
                        // A client without an acceptable certificate fails here.
                        if let Ok(io) = acceptor.accept(stream).await {
                            match protocol {
                                Protocol::Http => serve_http_conn(io, state).await,
                                Protocol::Grpc => serve_grpc_conn(io, state).await,
                            }
                        }
                    });
                }
                m if m.answers() => {
                    let _ = tx.send(stream).await;
                }
                Mode::Hang => state.held.lock().unwrap().push(stream),
                _ => {
                    let std = stream.into_std().expect("a std socket");
                    let _ = socket2::SockRef::from(&std).set_linger(Some(Duration::ZERO));
                    drop(std);
                }
            }
        }
    };
    tokio::join!(server, accept);
}

struct Grpc(Arc<State>);

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        if let Some(status) = self.0.attempt().grpc_refusal() {
            return Err(status);
        }
        let headers = request
            .metadata()
            .iter()
            .filter_map(|kv| match kv {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.to_string(), v.to_str().ok()?.to_string()))
                }
                _ => None,
            })
            .collect();
        self.0.record(request.into_inner(), headers);
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        if let Some(status) = self.0.mode().grpc_refusal() {
            return Err(status);
        }
        let request = request.into_inner();
        self.0
            .logs
            .lock()
            .unwrap()
            .push(Arc::new(LogPush { request }));
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}

/// A `POST /v1/logs`: recorded apart from the metrics pushes and attempts; the status.
fn http_logs(state: &State, body: Result<bytes::Bytes, hyper::Error>) -> u16 {
    if let Some((status, _)) = state.mode().http_refusal() {
        return status;
    }
    let decoded = body
        .ok()
        .and_then(|b| <ExportLogsServiceRequest as prost::Message>::decode(b).ok());
    match decoded {
        Some(request) => {
            state
                .logs
                .lock()
                .unwrap()
                .push(Arc::new(LogPush { request }));
            200
        }
        None => 400,
    }
}

async fn serve_http(mut rx: tokio::sync::mpsc::Receiver<tokio::net::TcpStream>, state: Arc<State>) {
    while let Some(stream) = rx.recv().await {
        tokio::spawn(serve_http_conn(stream, state.clone()));
    }
}

async fn serve_http_conn<I>(io: I, state: Arc<State>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use http_body_util::{BodyExt, Full};
    // Requests this connection got.
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let state = state.clone();
        let nth = requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async move {
            if nth > 0 && state.mode() == Mode::HangUpOnReuse {
                state.attempt();
                // An error from the service makes hyper close the connection unanswered.
                return Err("hung up".to_string());
            }
            if req.method() == hyper::Method::POST && req.uri().path() == "/v1/logs" {
                let body = req.into_body().collect().await.map(|b| b.to_bytes());
                let status = http_logs(&state, body);
                let resp = hyper::Response::builder()
                    .status(status)
                    .header("content-type", "application/x-protobuf");
                return Ok(resp.body(Full::new(bytes::Bytes::new())).unwrap());
            }
            let ok = req.method() == hyper::Method::POST
                && req.uri().path() == "/v1/metrics"
                && req
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    == Some("application/x-protobuf");
            let headers = req
                .headers()
                .iter()
                .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_string())))
                .collect();
            let body = req.into_body().collect().await.map(|b| b.to_bytes());
            let refusal = state.attempt().http_refusal();
            let retry_after = refusal.as_ref().and_then(|r| r.1.clone());
            let status = match (refusal, ok, body) {
                (Some((status, _)), _, _) => status,
                (None, true, Ok(body)) => {
                    match <ExportMetricsServiceRequest as prost::Message>::decode(body) {
                        Ok(r) => {
                            state.record(r, headers);
                            200
                        }
                        Err(_) => 400,
                    }
                }
                _ => 400,
            };
            let body = prost::Message::encode_to_vec(&ExportMetricsServiceResponse::default());
            let mut resp = hyper::Response::builder()
                .status(status)
                .header("content-type", "application/x-protobuf");
            if let Some(v) = retry_after {
                resp = resp.header("retry-after", v);
            }
            Ok::<_, String>(resp.body(Full::new(bytes::Bytes::from(body))).unwrap())
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
        .await;
}

/// The generated gRPC service on one HTTP/2 connection (a TLS one: tonic's own server
/// takes plain streams only without its TLS features).
async fn serve_grpc_conn<I>(io: I, state: Arc<State>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = tonic::service::Routes::new(MetricsServiceServer::new(Grpc(state.clone())))
        .add_service(LogsServiceServer::new(Grpc(state)));
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        tower::ServiceExt::oneshot(svc.clone(), req)
    });
    let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
        .await;
}

fn tls_acceptor(dir: &std::path::Path, protocol: Protocol) -> tokio_rustls::TlsAcceptor {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls::{self, server::WebPkiClientVerifier, RootCertStore};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = |f: &str| -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_file_iter(dir.join(f))
            .expect("read certificate")
            .collect::<Result<_, _>>()
            .expect("parse certificate")
    };
    let mut roots = RootCertStore::empty();
    for c in certs("ca.crt") {
        roots.add(c).expect("CA");
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .expect("client verifier");
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).expect("server key");
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs("server.crt"), key)
        .expect("server certificate");
    config.alpn_protocols = vec![match protocol {
        Protocol::Grpc => b"h2".to_vec(),
        Protocol::Http => b"http/1.1".to_vec(),
    }];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// A data point's identity and value, in a push.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub metric: String,
    pub kind: Kind,
    pub attributes: BTreeMap<String, String>,
    pub value: f64,
    pub start_ns: u64,
    pub time_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    MonotonicSum,
    Sum,
}

/// Every data point of a push (one resource, one scope, as the exporter sends).
pub fn points(r: &ExportMetricsServiceRequest) -> Vec<Point> {
    let mut out = Vec::new();
    for rm in &r.resource_metrics {
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                let (kind, dps): (Kind, &[NumberDataPoint]) = match m.data.as_ref() {
                    Some(metric::Data::Gauge(g)) => (Kind::Gauge, &g.data_points),
                    Some(metric::Data::Sum(s)) => {
                        assert_eq!(s.aggregation_temporality, 2, "{}: cumulative", m.name);
                        (
                            if s.is_monotonic {
                                Kind::MonotonicSum
                            } else {
                                Kind::Sum
                            },
                            &s.data_points,
                        )
                    }
                    // Sub-interval aggregation's (`histograms`): no number points.
                    Some(metric::Data::Histogram(_)) => continue,
                    other => panic!("{}: unexpected data {other:?}", m.name),
                };
                for p in dps {
                    out.push(Point {
                        metric: m.name.clone(),
                        kind,
                        attributes: p
                            .attributes
                            .iter()
                            .map(|kv| (kv.key.clone(), string(kv.value.as_ref())))
                            .collect(),
                        value: match p.value {
                            Some(number_data_point::Value::AsDouble(v)) => v,
                            Some(number_data_point::Value::AsInt(v)) => v as f64,
                            None => panic!("{}: a point without a value", m.name),
                        },
                        start_ns: p.start_time_unix_nano,
                        time_ns: p.time_unix_nano,
                    });
                }
            }
        }
    }
    out
}

/// A histogram point (sub-interval aggregation: count, sum, min, max, no buckets).
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramPoint {
    pub metric: String,
    /// Whether the metric's temporality is DELTA.
    pub delta: bool,
    pub attributes: BTreeMap<String, String>,
    pub count: u64,
    pub sum: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub buckets: usize,
    pub start_ns: u64,
    pub time_ns: u64,
}

/// Every histogram point of a push.
pub fn histograms(r: &ExportMetricsServiceRequest) -> Vec<HistogramPoint> {
    let mut out = Vec::new();
    for m in r
        .resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
    {
        let Some(metric::Data::Histogram(h)) = m.data.as_ref() else {
            continue;
        };
        for p in &h.data_points {
            out.push(HistogramPoint {
                metric: m.name.clone(),
                delta: h.aggregation_temporality == 1,
                attributes: p
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), string(kv.value.as_ref())))
                    .collect(),
                count: p.count,
                sum: p.sum,
                min: p.min,
                max: p.max,
                buckets: p.bucket_counts.len() + p.explicit_bounds.len(),
                start_ns: p.start_time_unix_nano,
                time_ns: p.time_unix_nano,
            });
        }
    }
    out
}

/// The resource's attributes.
pub fn resource(r: &ExportMetricsServiceRequest) -> BTreeMap<String, String> {
    r.resource_metrics[0]
        .resource
        .as_ref()
        .map(|res| {
            res.attributes
                .iter()
                .map(|kv| (kv.key.clone(), string(kv.value.as_ref())))
                .collect()
        })
        .unwrap_or_default()
}

fn string(v: Option<&dcgm_exporter::output::otlp::proto::common::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        other => panic!("a non-string attribute: {other:?}"),
    }
}

/// One log record of a push, its attributes as text.
#[derive(Clone, Debug, PartialEq)]
pub struct LogEntry {
    pub event_name: String,
    pub body: String,
    pub severity: i32,
    pub time_ns: u64,
    pub observed_ns: u64,
    pub attributes: BTreeMap<String, String>,
    pub resource: BTreeMap<String, String>,
}

/// Every log record of a push, with its resource's attributes.
pub fn log_records(r: &ExportLogsServiceRequest) -> Vec<LogEntry> {
    let text = |v: Option<&dcgm_exporter::output::otlp::proto::common::AnyValue>| match v
        .and_then(|v| v.value.as_ref())
    {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        other => panic!("an attribute of another type: {other:?}"),
    };
    let mut out = Vec::new();
    for rl in &r.resource_logs {
        let resource: BTreeMap<String, String> = rl
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
            .collect();
        for rec in rl.scope_logs.iter().flat_map(|s| &s.log_records) {
            out.push(LogEntry {
                event_name: rec.event_name.clone(),
                body: text(rec.body.as_ref()),
                severity: rec.severity_number,
                time_ns: rec.time_unix_nano,
                observed_ns: rec.observed_time_unix_nano,
                attributes: rec
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                    .collect(),
                resource: resource.clone(),
            });
        }
    }
    out
}
