//! One push on the wire: OTLP/HTTP (a protobuf `POST` over hyper's HTTP/1.1 client) or
//! OTLP/gRPC (tonic's client over HTTP/2), both over our own TCP or TLS connection (rustls:
//! the CA file or the system's roots, an optional client certificate), so the HTTP stack is
//! the one hyper of the tree. Every push, connection included, ends within the timeout.

use super::proto::collector::ExportMetricsServiceResponse;
use super::proto::EXPORT_PATH;
use crate::config::otlp::{Protocol, Settings};
use bytes::{BufMut, Bytes};
use http_body_util::{BodyExt, Full, Limited};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

/// Largest response read (an `ExportMetricsServiceResponse` is a few bytes, or an error
/// message).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// Why a push failed, whether trying it again may help, and when the receiver asked to
/// be tried again (HTTP `Retry-After`, gRPC `RetryInfo`), if it did.
#[derive(Debug)]
pub(super) struct PushError {
    pub why: String,
    pub retryable: bool,
    pub retry_after: Option<Duration>,
    /// A kept HTTP connection failed before any answer (the receiver closed it while it
    /// was idle, as the request went out): the request never reached a receiver that
    /// meant to answer it, so the next try is made at once on a new connection. Never
    /// set once an answer came, whatever its status.
    pub stale: bool,
}

impl PushError {
    pub(super) fn retry(why: impl Into<String>) -> PushError {
        PushError {
            why: why.into(),
            retryable: true,
            retry_after: None,
            stale: false,
        }
    }

    fn fatal(why: impl Into<String>) -> PushError {
        PushError {
            why: why.into(),
            retryable: false,
            retry_after: None,
            stale: false,
        }
    }

    /// A failure before any answer came on a connection that was kept from before.
    fn unanswered(why: impl Into<String>, reused: bool) -> PushError {
        PushError {
            stale: reused,
            ..PushError::retry(why)
        }
    }

    fn after(mut self, hint: Option<Duration>) -> PushError {
        if let Some(d) = hint {
            self.why = format!("{} (retry after {:.1}s)", self.why, d.as_secs_f64());
        }
        self.retry_after = hint;
        self
    }
}

/// An HTTP `Retry-After` value (RFC 9110 10.2.3): delay-seconds, or an HTTP-date, whose
/// wait is counted from `now` (a date already past: no wait). Anything else is no hint.
pub(super) fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for u64 is a very long wait all the same (capped by the sender).
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A plain or TLS connection to the receiver.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Where and how to connect.
#[derive(Clone)]
struct Dialer {
    host: String,
    port: u16,
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
}

impl Dialer {
    async fn dial(&self) -> io::Result<Stream> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
        tcp.set_nodelay(true)?;
        match &self.tls {
            None => Ok(Stream::Plain(tcp)),
            Some((connector, name)) => {
                let tls = connector.connect(name.clone(), tcp).await?;
                Ok(Stream::Tls(Box::new(tls)))
            }
        }
    }
}

/// The sender's connection to the receiver, kept between pushes.
pub(super) enum Transport {
    Http(Http),
    Grpc(Grpc),
}

pub(super) struct Http {
    dialer: Dialer,
    authority: String,
    path: String,
    headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
    timeout: Duration,
    conn: Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
}

pub(super) struct Grpc {
    client: tonic::client::Grpc<tonic::transport::Channel>,
    /// Makes a fresh channel (see [`Grpc::reset`]).
    channel: Box<dyn Fn() -> tonic::transport::Channel + Send>,
    headers: Vec<(
        tonic::metadata::MetadataKey<tonic::metadata::Ascii>,
        tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
    )>,
    timeout: Duration,
    /// The service method pushes call: the metrics', or the logs' (`Transport::for_logs`).
    method: &'static str,
}

impl Transport {
    /// Prepares the connection (TLS files are read now: a bad one stops the start); nothing
    /// is dialled until the first push. Must run inside the sender's runtime.
    pub(super) fn new(s: &Settings) -> Result<Transport, super::Error> {
        let alpn: &[u8] = match s.protocol {
            Protocol::Grpc => b"h2",
            Protocol::HttpProtobuf => b"http/1.1",
        };
        let tls = if s.tls {
            let config = super::tls::client_config(s, alpn)?;
            let name =
                rustls::pki_types::ServerName::try_from(s.host.clone()).map_err(|source| {
                    super::Error::ServerName {
                        url: s.url.clone(),
                        host: s.host.clone(),
                        source,
                    }
                })?;
            Some((tokio_rustls::TlsConnector::from(config), name))
        } else {
            None
        };
        let dialer = Dialer {
            host: s.host.clone(),
            port: s.port,
            tls,
        };
        let header = |(k, v): &(String, String)| {
            Ok::<_, super::Error>((
                hyper::header::HeaderName::from_bytes(k.as_bytes()).map_err(|source| {
                    super::Error::HeaderName {
                        name: k.clone(),
                        source,
                    }
                })?,
                hyper::header::HeaderValue::from_str(v).map_err(|source| {
                    super::Error::HeaderValue {
                        name: k.clone(),
                        source,
                    }
                })?,
            ))
        };
        Ok(match s.protocol {
            Protocol::HttpProtobuf => Transport::Http(Http {
                dialer,
                authority: authority(&s.host, s.port),
                path: s.path.clone(),
                headers: s.headers.iter().map(header).collect::<Result<_, _>>()?,
                timeout: s.timeout,
                conn: None,
            }),
            Protocol::Grpc => Transport::Grpc(grpc(s, dialer)?),
        })
    }

    /// The same receiver's logs signal (the event history's log records): OTLP/HTTP posts
    /// to `http_path`, gRPC calls `LogsService/Export`.
    pub(super) fn for_logs(mut self, http_path: &str) -> Transport {
        match &mut self {
            Transport::Http(h) => h.path = http_path.to_string(),
            Transport::Grpc(g) => g.method = super::proto::LOGS_EXPORT_PATH,
        }
        self
    }

    /// Sends one encoded request; within the timeout, connection included.
    pub(super) async fn push(&mut self, body: Bytes) -> Result<(), PushError> {
        let timeout = match self {
            Transport::Http(h) => h.timeout,
            Transport::Grpc(g) => g.timeout,
        };
        let pushed = match self {
            Transport::Http(h) => tokio::time::timeout(timeout, h.push(body)).await,
            Transport::Grpc(g) => tokio::time::timeout(timeout, g.push(body)).await,
        };
        pushed.unwrap_or_else(|_| {
            // A connection that hung is not reused.
            match self {
                Transport::Http(h) => h.conn = None,
                Transport::Grpc(g) => g.reset(),
            }
            Err(PushError::retry(format!(
                "no answer within {} ms",
                timeout.as_millis()
            )))
        })
    }
}

fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl Http {
    /// One request. The connection is kept only after an answer: one that failed is
    /// dropped, so a try after a stale one dials afresh.
    async fn push(&mut self, body: Bytes) -> Result<(), PushError> {
        let (mut conn, reused) = match self.conn.take() {
            Some(c) if !c.is_closed() => (c, true),
            _ => (self.connect().await?, false),
        };
        conn.ready()
            .await
            .map_err(|e| PushError::unanswered(format!("connection: {e}"), reused))?;
        let mut req = hyper::Request::post(self.path.as_str())
            .header(hyper::header::HOST, self.authority.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
            .header(hyper::header::USER_AGENT, user_agent());
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| PushError::fatal(format!("request: {e}")))?;
        let resp = conn
            .send_request(req)
            .await
            .map_err(|e| PushError::unanswered(format!("request: {e}"), reused))?;
        let status = resp.status();
        let hint = resp
            .headers()
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, SystemTime::now()));
        let body = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| PushError::retry(format!("response: {e}")))?
            .to_bytes();
        self.conn = Some(conn);
        if status.is_success() {
            return accepted(&body);
        }
        let why = format!("HTTP {status}: {}", printable(&body));
        // The specification's retryable answers; anything else would fail again. Its
        // throttling answers may say when to come back.
        match status.as_u16() {
            429 | 503 => Err(PushError::retry(why).after(hint)),
            502 | 504 => Err(PushError::retry(why)),
            _ => Err(PushError::fatal(why)),
        }
    }

    async fn connect(
        &self,
    ) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, PushError> {
        let stream = self
            .dialer
            .dial()
            .await
            .map_err(|e| PushError::retry(format!("connect: {e}")))?;
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| PushError::retry(format!("connect: {e}")))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(send)
    }
}

fn grpc(s: &Settings, dialer: Dialer) -> Result<Grpc, super::Error> {
    let endpoint_error = |source| super::Error::GrpcEndpoint {
        url: s.url.clone(),
        source,
    };
    let scheme = if s.tls { "https" } else { "http" };
    // Dialled by our connector (TLS included); tonic speaks HTTP/2 over it.
    let endpoint = tonic::transport::Endpoint::from_shared(format!(
        "{scheme}://{}",
        authority(&s.host, s.port)
    ))
    .map_err(endpoint_error)?
    .connect_timeout(s.timeout)
    .timeout(s.timeout)
    .user_agent(user_agent())
    .map_err(endpoint_error)?;
    let channel = move || {
        let dialer = dialer.clone();
        endpoint.connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
            let dialer = dialer.clone();
            async move { dialer.dial().await.map(hyper_util::rt::TokioIo::new) }
        }))
    };
    let headers = s
        .headers
        .iter()
        .map(|(k, v)| {
            Ok::<_, super::Error>((
                k.to_ascii_lowercase()
                    .parse()
                    .map_err(|_| super::Error::GrpcMetadataKey(k.clone()))?,
                v.parse()
                    .map_err(|_| super::Error::GrpcMetadataValue(k.clone()))?,
            ))
        })
        .collect::<Result<_, _>>()?;
    Ok(Grpc {
        client: client(channel()),
        channel: Box::new(channel),
        headers,
        timeout: s.timeout,
        method: EXPORT_PATH,
    })
}

fn client(channel: tonic::transport::Channel) -> tonic::client::Grpc<tonic::transport::Channel> {
    tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES)
}

impl Grpc {
    /// Drops the connection for a new one at the next push. A channel redials a connection
    /// that broke, but one whose HTTP/2 handshake never ends (a receiver that accepted and
    /// hangs) would hold it, and every later push, forever.
    fn reset(&mut self) {
        self.client = client((self.channel)());
    }

    async fn push(&mut self, body: Bytes) -> Result<(), PushError> {
        self.client
            .ready()
            .await
            .map_err(|e| PushError::retry(format!("connect: {e}")))?;
        let mut req = tonic::Request::new(body);
        for (k, v) in &self.headers {
            req.metadata_mut().insert(k.clone(), v.clone());
        }
        req.set_timeout(self.timeout);
        let path = hyper::http::uri::PathAndQuery::from_static(self.method);
        match self.client.unary(req, path, RawCodec).await {
            Ok(resp) => partial(resp.get_ref()),
            Err(status) => {
                use tonic::Code::*;
                use tonic_types::StatusExt;
                let why = format!("gRPC {:?}: {}", status.code(), status.message());
                // The throttling answers' google.rpc.RetryInfo, when the details hold one.
                let hint = status.get_details_retry_info().and_then(|r| r.retry_delay);
                // The specification's retryable codes; RESOURCE_EXHAUSTED only with the
                // RetryInfo that says the receiver can recover (else it would fail again).
                match status.code() {
                    Unavailable | ResourceExhausted if hint.is_some() => {
                        self.reset();
                        Err(PushError::retry(why).after(hint))
                    }
                    Cancelled | DeadlineExceeded | Aborted | OutOfRange | Unavailable
                    | DataLoss => {
                        self.reset();
                        Err(PushError::retry(why))
                    }
                    _ => Err(PushError::fatal(why)),
                }
            }
        }
    }
}

fn user_agent() -> &'static str {
    concat!("dcgm-exporter/", env!("CARGO_PKG_VERSION"))
}

/// A 2xx answer: the body is an `ExportMetricsServiceResponse` (or empty).
fn accepted(body: &[u8]) -> Result<(), PushError> {
    use prost::Message;
    match ExportMetricsServiceResponse::decode(body) {
        Ok(r) => partial(&r),
        // Success was said; a body we cannot read does not make it a failure.
        Err(_) => Ok(()),
    }
}

/// A receiver that took the request but refused some points says so in `partial_success`:
/// logged, not retried (the specification: the same points would be refused again).
fn partial(r: &ExportMetricsServiceResponse) -> Result<(), PushError> {
    if let Some(p) = &r.partial_success {
        if p.rejected_data_points > 0 {
            tracing::warn!(
                rejected = p.rejected_data_points,
                "OTLP receiver refused some data points: {}",
                p.error_message
            );
        }
    }
    Ok(())
}

fn printable(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(&body[..body.len().min(200)]);
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// gRPC's codec for a request already encoded on the collection thread: its bytes are
/// written as they are; the answer is decoded with the generated message.
#[derive(Default)]
struct RawCodec;

struct RawEncoder;

impl tonic::codec::Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Self::Error> {
        dst.put(item);
        Ok(())
    }
}

type ProstDecoder = <tonic::codec::ProstCodec<
    ExportMetricsServiceResponse,
    ExportMetricsServiceResponse,
> as tonic::codec::Codec>::Decoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = ExportMetricsServiceResponse;
    type Encoder = RawEncoder;
    type Decoder = ProstDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> ProstDecoder {
        tonic::codec::Codec::decoder(&mut tonic::codec::ProstCodec::<
            ExportMetricsServiceResponse,
            ExportMetricsServiceResponse,
        >::default())
    }
}
