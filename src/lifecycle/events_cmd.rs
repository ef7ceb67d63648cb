//! `dcgm-exporter events`: asks a running exporter for its event history over HTTP or
//! HTTPS (hyper's HTTP/1.1 client, the one HTTP stack of the tree; rustls), with basic auth
//! and client certificates as its `--web-config-file` asks, and prints the events as a
//! table, in time order, or the JSON as it came (`--json`).

use crate::config::events_cmd::{self, Request, Tls};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use std::io::Write;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls::{self, pki_types};

/// The largest answer read (the history's bound is 1 GiB at most; its JSON some more).
const MAX_BODY: usize = 2 << 30;

/// Why the events were not printed (after `dcgm-exporter events: `, exit 1). `at` is the
/// exporter's `host:port`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The flags or the client file.
    #[error(transparent)]
    Request(#[from] events_cmd::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("no answer within {0:?}")]
    NoAnswer(std::time::Duration),
    /// Another status than 200, with the answer's first 1024 bytes.
    #[error("{at} answered {status}: {text}")]
    Status {
        at: String,
        status: u16,
        text: String,
    },
    #[error("cannot connect to {at}: {source}")]
    Connect { at: String, source: std::io::Error },
    #[error("server name {name}: {source}")]
    ServerName {
        name: String,
        source: pki_types::InvalidDnsNameError,
    },
    #[error("TLS with {at}: {source}")]
    Handshake { at: String, source: std::io::Error },
    #[error("{at}: {source}")]
    Http { at: String, source: hyper::Error },
    #[error("request: {0}")]
    BadRequest(#[source] hyper::http::Error),
    #[error("{at}: reading the answer: {source}")]
    Body {
        at: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// rustls refused its own safe protocol versions.
    #[error("TLS: {0}")]
    TlsVersions(#[source] rustls::Error),
    /// The client certificate or key file.
    #[error("{}: {source}", .path.display())]
    ClientFile {
        path: std::path::PathBuf,
        source: pki_types::pem::Error,
    },
    #[error("client certificate and key: {0}")]
    ClientCertAndKey(#[source] rustls::Error),
    #[error("--ca-file {}: {source}", .path.display())]
    CaFile {
        path: std::path::PathBuf,
        source: pki_types::pem::Error,
    },
    #[error("--ca-file {}: {source}", .path.display())]
    CaRefused {
        path: std::path::PathBuf,
        source: rustls::Error,
    },
    #[error("--ca-file {}: no certificate in it", .path.display())]
    NoCaCert { path: std::path::PathBuf },
    #[error("the answer is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("stdout: {0}")]
    Stdout(#[source] std::io::Error),
}

/// Runs the subcommand; `args` start with `events`. The process's exit code: 0 when the
/// exporter answered with the events, 1 when it could not be asked or refused, 2 for bad
/// flags.
pub fn main(args: impl Iterator<Item = std::ffi::OsString>) -> u8 {
    let parsed = match events_cmd::parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.exit_code() == 0 { 0 } else { 2 };
        }
    };
    let outcome = parsed.request().map_err(Error::from).and_then(|r| {
        let body = fetch(&r)?;
        print(&r, &body)
    });
    match outcome {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("dcgm-exporter events: {e}");
            1
        }
    }
}

/// The answer's body, when it is a 200.
fn fetch(r: &Request) -> Result<Bytes, Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let (status, body) = rt.block_on(async {
        tokio::time::timeout(r.timeout, get(r))
            .await
            .map_err(|_| Error::NoAnswer(r.timeout))?
    })?;
    if status != 200 {
        let text = String::from_utf8_lossy(&body[..body.len().min(1024)])
            .trim()
            .to_string();
        return Err(Error::Status {
            at: format!("{}:{}", r.host, r.port),
            status,
            text,
        });
    }
    Ok(body)
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

async fn get(r: &Request) -> Result<(u16, Bytes), Error> {
    let at = format!("{}:{}", r.host, r.port);
    let tcp = tokio::net::TcpStream::connect((r.host.as_str(), r.port))
        .await
        .map_err(|source| Error::Connect {
            at: at.clone(),
            source,
        })?;
    let io: Box<dyn Io> = match &r.tls {
        None => Box::new(tcp),
        Some(t) => {
            let name = t.server_name.as_deref().unwrap_or(&r.host);
            let name = pki_types::ServerName::try_from(name.to_string()).map_err(|source| {
                Error::ServerName {
                    name: name.to_string(),
                    source,
                }
            })?;
            let connector = tokio_rustls::TlsConnector::from(client_config(t)?);
            Box::new(
                connector
                    .connect(name, tcp)
                    .await
                    .map_err(|source| Error::Handshake {
                        at: at.clone(),
                        source,
                    })?,
            )
        }
    };
    let http = |source| Error::Http {
        at: at.clone(),
        source,
    };
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
        .await
        .map_err(http)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let authority = if r.host.contains(':') {
        format!("[{}]:{}", r.host, r.port)
    } else {
        at.clone()
    };
    let mut req = hyper::Request::get(r.target.as_str())
        .header(hyper::header::HOST, authority)
        .header(hyper::header::ACCEPT, "application/json")
        .header(
            hyper::header::USER_AGENT,
            concat!("dcgm-exporter/", env!("CARGO_PKG_VERSION")),
        );
    if let Some((user, password)) = &r.auth {
        use base64::Engine;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        req = req.header(hyper::header::AUTHORIZATION, format!("Basic {token}"));
    }
    let req = req.body(Empty::<Bytes>::new()).map_err(Error::BadRequest)?;
    let resp = send.send_request(req).await.map_err(http)?;
    let status = resp.status().as_u16();
    let body = Limited::new(resp.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|source| Error::Body {
            at: at.clone(),
            source,
        })?
        .to_bytes();
    Ok((status, body))
}

fn client_config(t: &Tls) -> Result<Arc<rustls::ClientConfig>, Error> {
    use pki_types::pem::PemObject;
    use pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(Error::TlsVersions)?;
    let builder = if t.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
    } else {
        builder.with_root_certificates(roots(t)?)
    };
    let mut config = match &t.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let what = |p: &std::path::Path| {
                let path = p.to_path_buf();
                move |source| Error::ClientFile { path, source }
            };
            let certs = CertificateDer::pem_file_iter(cert)
                .map_err(what(cert))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(what(cert))?;
            let private = PrivateKeyDer::from_pem_file(key).map_err(what(key))?;
            builder
                .with_client_auth_cert(certs, private)
                .map_err(Error::ClientCertAndKey)?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn roots(t: &Tls) -> Result<rustls::RootCertStore, Error> {
    use pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match &t.ca_file {
        Some(p) => {
            let path = || p.clone();
            let pem = |source| Error::CaFile {
                path: path(),
                source,
            };
            for c in pki_types::CertificateDer::pem_file_iter(p).map_err(pem)? {
                roots
                    .add(c.map_err(pem)?)
                    .map_err(|source| Error::CaRefused {
                        path: path(),
                        source,
                    })?;
            }
            if roots.is_empty() {
                return Err(Error::NoCaCert { path: path() });
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    Ok(roots)
}

/// `--insecure`: any certificate is taken; the handshake's signatures are still checked.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &pki_types::CertificateDer<'_>,
        _intermediates: &[pki_types::CertificateDer<'_>],
        _server_name: &pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Writes the answer: as it came with `--json`, else a table.
fn print(r: &Request, body: &[u8]) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    let written = if r.json {
        out.write_all(body).and_then(|()| out.write_all(b"\n"))
    } else {
        let v: serde_json::Value = serde_json::from_slice(body).map_err(Error::NotJson)?;
        out.write_all(table(&v).as_bytes())
    };
    match written.and_then(|()| out.flush()) {
        // `events | head`: the reader has what it wanted.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::Stdout(e)),
        _ => Ok(()),
    }
}

/// The events as aligned columns: time, type, entity (and engine, with several), message.
pub fn table(v: &serde_json::Value) -> String {
    let events = v["events"].as_array().cloned().unwrap_or_default();
    // Every control character (a line break, an escape sequence from a message the exporter
    // passed on) prints as a space: a cell stays on its line and cannot drive the terminal.
    let field = |e: &serde_json::Value, k: &str| {
        let text = e[k].as_str().unwrap_or_default();
        text.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect::<String>()
    };
    let engines = events.iter().any(|e| e.get("engine").is_some());
    let mut rows = vec![vec!["TIME".to_string(), "TYPE".into(), "ENTITY".into()]];
    if engines {
        rows[0].push("ENGINE".into());
    }
    rows[0].push("MESSAGE".into());
    for e in &events {
        let mut row = vec![field(e, "time"), field(e, "type"), field(e, "entity")];
        if engines {
            row.push(field(e, "engine"));
        }
        row.push(field(e, "message"));
        rows.push(row);
    }
    let cols = rows[0].len();
    let widths: Vec<usize> = (0..cols - 1)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        for (c, cell) in row.iter().enumerate() {
            if c + 1 < cols {
                out.push_str(&format!("{cell:<w$}  ", w = widths[c]));
            } else {
                out.push_str(cell);
            }
        }
        out.push('\n');
    }
    let dropped = v["dropped_total"].as_u64().unwrap_or(0);
    if dropped > 0 {
        out.push_str(&format!(
            "({dropped} older event(s) were dropped from the history to keep it within its bounds)\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_table_in_columns() {
        let v = serde_json::json!({
            "events": [
                {"time": "2026-11-28T10:00:00.000001Z", "type": "xid", "entity": "gpu:0", "message": "XID 79\non gpu:0"},
                {"time": "2026-11-28T10:00:01.000001Z", "type": "engine_down", "entity": "engine:embedded", "message": "lost"},
            ],
            "dropped_total": 2,
        });
        let t = super::table(&v);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "TIME                         TYPE         ENTITY           MESSAGE"
        );
        assert_eq!(
            lines[1],
            "2026-11-28T10:00:00.000001Z  xid          gpu:0            XID 79 on gpu:0"
        );
        assert!(lines[3].starts_with("(2 older event(s)"));
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        let v = serde_json::json!({
            "events": [{"time": "t\u{1b}[2J", "type": "xid\u{7}", "entity": "gpu:0\u{1b}]0;owned\u{7}",
                        "engine": "e\u{9b}1m", "message": "a\u{1b}[31mred\r\nb\u{7f}"}],
        });
        let t = super::table(&v);
        assert!(!t.chars().any(|c| c.is_control() && c != '\n'), "{t:?}");
        assert_eq!(t.lines().count(), 2, "{t:?}");
        assert!(
            t.lines().nth(1).unwrap().ends_with("a [31mred  b "),
            "{t:?}"
        );
    }
}
