//! The push's TLS client: the receiver's certificate checked against the CA file
//! (OTEL_EXPORTER_OTLP_CERTIFICATE) or else the system's trust store, and a client
//! certificate for mutual TLS when one is configured. Files are read once, at start.

use crate::config::otlp::Settings;
use std::sync::Arc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

pub(super) fn client_config(s: &Settings, alpn: &[u8]) -> Result<Arc<ClientConfig>, String> {
    let roots = roots(s)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("OTLP TLS: {e}"))?
        .with_root_certificates(roots);
    let mut config = match &s.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let read = |p: &std::path::Path, what: &str| {
                std::fs::read(p).map_err(|e| format!("OTLP {what} {}: {e}", p.display()))
            };
            let pem = read(cert, "client certificate")?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("OTLP client certificate {}: {e}", cert.display()))?;
            if certs.is_empty() {
                return Err(format!(
                    "OTLP client certificate {}: no certificate in it",
                    cert.display()
                ));
            }
            let key_pem = read(key, "client key")?;
            let private = PrivateKeyDer::from_pem_slice(&key_pem)
                .map_err(|e| format!("OTLP client key {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(certs, private)
                .map_err(|e| format!("OTLP client certificate and key: {e}"))?
        }
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

fn roots(s: &Settings) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match &s.ca_file {
        Some(path) => {
            let what = |e: &dyn std::fmt::Display| {
                format!("OTEL_EXPORTER_OTLP_CERTIFICATE {}: {e}", path.display())
            };
            let pem = std::fs::read(path).map_err(|e| what(&e))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                roots
                    .add(cert.map_err(|e| what(&e))?)
                    .map_err(|e| what(&e))?;
            }
            if roots.is_empty() {
                return Err(what(&"no certificate in it"));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(format!(
                    "OTLP endpoint {}: the system has no trusted CA certificates; name a CA \
                     file with OTEL_EXPORTER_OTLP_CERTIFICATE",
                    s.url
                ));
            }
        }
    }
    Ok(roots)
}
