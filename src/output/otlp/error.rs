//! Why the OTLP push did not start: its threads, its TLS files, the endpoint and the
//! headers. Start-up prints it once (its `Display`, through `output::Error::Otlp`).

use std::path::PathBuf;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::Error as PemError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start the OTLP runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot start the OTLP thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("cannot start the OTLP logs runtime: {0}")]
    LogsRuntime(#[source] std::io::Error),
    #[error("cannot start the OTLP logs thread: {0}")]
    LogsThread(#[source] std::io::Error),
    /// rustls refused its own safe protocol versions.
    #[error("OTLP TLS: {0}")]
    TlsVersions(#[source] rustls::Error),
    /// The client certificate or key file (`what`) cannot be read.
    #[error("OTLP {what} {}: {source}", .path.display())]
    ReadClientFile {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("OTLP client certificate {}: {source}", .path.display())]
    ClientCertPem { path: PathBuf, source: PemError },
    #[error("OTLP client certificate {}: no certificate in it", .path.display())]
    NoClientCert { path: PathBuf },
    #[error("OTLP client key {}: {source}", .path.display())]
    ClientKeyPem { path: PathBuf, source: PemError },
    #[error("OTLP client certificate and key: {0}")]
    ClientCertAndKey(#[source] rustls::Error),
    /// OTEL_EXPORTER_OTLP_CERTIFICATE's file cannot be read.
    #[error("OTEL_EXPORTER_OTLP_CERTIFICATE {}: {source}", .path.display())]
    CaRead {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("OTEL_EXPORTER_OTLP_CERTIFICATE {}: {source}", .path.display())]
    CaPem { path: PathBuf, source: PemError },
    #[error("OTEL_EXPORTER_OTLP_CERTIFICATE {}: {source}", .path.display())]
    CaRefused {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("OTEL_EXPORTER_OTLP_CERTIFICATE {}: no certificate in it", .path.display())]
    NoCaCert { path: PathBuf },
    #[error(
        "OTLP endpoint {url}: the system has no trusted CA certificates; name a CA file with \
         OTEL_EXPORTER_OTLP_CERTIFICATE"
    )]
    NoSystemRoots { url: String },
    /// The endpoint's host is no name TLS can check the certificate against.
    #[error("OTLP endpoint {url}: host {host}: {source}")]
    ServerName {
        url: String,
        host: String,
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("OTLP header {name}: {source}")]
    HeaderName {
        name: String,
        source: hyper::header::InvalidHeaderName,
    },
    #[error("OTLP header {name}: {source}")]
    HeaderValue {
        name: String,
        source: hyper::header::InvalidHeaderValue,
    },
    /// tonic refuses the gRPC endpoint.
    #[error("OTLP endpoint {url}: {source}")]
    GrpcEndpoint {
        url: String,
        source: tonic::transport::Error,
    },
    #[error("OTLP header {0}: not a valid gRPC metadata key")]
    GrpcMetadataKey(String),
    #[error("OTLP header {0}: not a valid gRPC metadata value")]
    GrpcMetadataValue(String),
}
