//! The push's TLS client: the receiver's certificate checked against the CA file
//! (OTEL_EXPORTER_OTLP_CERTIFICATE) or else the system's trust store, and a client
//! certificate for mutual TLS when one is configured. Files are read once, at start.

use super::Error;
use crate::config::otlp::Settings;
use std::sync::Arc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

pub(super) fn client_config(s: &Settings, alpn: &[u8]) -> Result<Arc<ClientConfig>, Error> {
    let roots = roots(s)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::TlsVersions)?
        .with_root_certificates(roots);
    let mut config = match &s.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let read = |p: &std::path::Path, what: &'static str| {
                std::fs::read(p).map_err(|source| Error::ReadClientFile {
                    what,
                    path: p.to_path_buf(),
                    source,
                })
            };
            let pem = read(cert, "client certificate")?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|source| Error::ClientCertPem {
                    path: cert.clone(),
                    source,
                })?;
            if certs.is_empty() {
                return Err(Error::NoClientCert { path: cert.clone() });
            }
            let key_pem = read(key, "client key")?;
            let private =
                PrivateKeyDer::from_pem_slice(&key_pem).map_err(|source| Error::ClientKeyPem {
                    path: key.clone(),
                    source,
                })?;
            builder
                .with_client_auth_cert(certs, private)
                .map_err(Error::ClientCertAndKey)?
        }
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

fn roots(s: &Settings) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    match &s.ca_file {
        Some(path) => {
            let path = || path.clone();
            let pem = std::fs::read(path()).map_err(|source| Error::CaRead {
                path: path(),
                source,
            })?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|source| Error::CaPem {
                    path: path(),
                    source,
                })?;
                roots.add(cert).map_err(|source| Error::CaRefused {
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
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(Error::NoSystemRoots { url: s.url.clone() });
            }
        }
    }
    Ok(roots)
}
