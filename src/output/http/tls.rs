//! A rustls server configuration from the web config's `tls_server_config`, honouring what
//! rustls can honour and refusing, by key, what it cannot (TLS 1.0/1.1, CBC suites, P-521).

use super::webconfig::{ClientAuth, PemReadError, TlsSettings, TlsVersion};
use std::sync::Arc;
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::crypto::{self, ring, CryptoProvider, WebPkiSupportedAlgorithms};
use tokio_rustls::rustls::pki_types::pem::{Error as PemError, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{
    version, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};

/// Why the TLS settings make no server configuration, by key.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "tls_server_config.cipher_suites: {0} is not supported (rustls supports the ECDHE \
         AES-GCM and CHACHA20-POLY1305 suites only)"
    )]
    CipherSuite(String),
    #[error(
        "tls_server_config.curve_preferences: {0} is not supported (use X25519, CurveP256 or \
         CurveP384)"
    )]
    Curve(String),
    /// The certificate, key or client CA file.
    #[error(transparent)]
    Read(#[from] PemReadError),
    #[error("tls_server_config.client_ca_file: {0}")]
    ClientCaPem(#[source] PemError),
    #[error("tls_server_config.client_ca_file: {0}")]
    ClientCaRefused(#[source] tokio_rustls::rustls::Error),
    #[error("tls_server_config.client_ca_file: no certificate in it")]
    NoClientCaCert,
    #[error("tls_server_config.client_ca_file: {0}")]
    ClientVerifier(#[source] tokio_rustls::rustls::server::VerifierBuilderError),
    #[error("tls_server_config: {0}")]
    Versions(#[source] tokio_rustls::rustls::Error),
    #[error("tls_server_config.cert_file: {0}")]
    CertPem(#[source] PemError),
    #[error("tls_server_config.cert_file: no certificate in it")]
    NoCert,
    #[error("tls_server_config.key_file: {0}")]
    KeyPem(#[source] PemError),
    #[error("tls_server_config: certificate and key: {0}")]
    CertAndKey(#[source] tokio_rustls::rustls::Error),
}

/// Go's curve names and the rustls groups they mean.
fn kx_group(name: &str) -> Option<&'static dyn crypto::SupportedKxGroup> {
    match name {
        "X25519" => Some(ring::kx_group::X25519),
        "CurveP256" => Some(ring::kx_group::SECP256R1),
        "CurveP384" => Some(ring::kx_group::SECP384R1),
        _ => None,
    }
}

/// The provider restricted to the configured TLS 1.2 suites and curves. Go ignores
/// `cipher_suites` for TLS 1.3, so every TLS 1.3 suite stays.
fn provider(t: &TlsSettings) -> Result<CryptoProvider, Error> {
    let mut p = ring::default_provider();
    if let Some(names) = &t.cipher_suites {
        let mut suites: Vec<_> = p
            .cipher_suites
            .iter()
            .filter(|s| s.tls13().is_some())
            .copied()
            .collect();
        for name in names {
            // Go also accepts the CHACHA20 names without the _SHA256 suffix.
            // rustls names the TLS 1.3 suites TLS13_*.
            let full = if name.ends_with("CHACHA20_POLY1305") {
                format!("{name}_SHA256")
            } else if name.starts_with("TLS_AES_") || name.starts_with("TLS_CHACHA20_") {
                name.replacen("TLS_", "TLS13_", 1)
            } else {
                name.clone()
            };
            match ring::ALL_CIPHER_SUITES
                .iter()
                .find(|s| format!("{:?}", s.suite()) == full)
            {
                Some(s) if s.tls13().is_none() => suites.push(*s),
                Some(_) => {} // a TLS 1.3 suite: always enabled, as in Go
                None => return Err(Error::CipherSuite(name.clone())),
            }
        }
        p.cipher_suites = suites;
    }
    if let Some(names) = &t.curves {
        p.kx_groups = names
            .iter()
            .map(|n| kx_group(n).ok_or_else(|| Error::Curve(n.clone())))
            .collect::<Result<_, _>>()?;
    }
    Ok(p)
}

fn root_store(t: &TlsSettings) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    if let Some(ca) = &t.client_ca {
        let pem = ca.read()?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(Error::ClientCaPem)?;
            roots.add(cert).map_err(Error::ClientCaRefused)?;
        }
        if roots.is_empty() {
            return Err(Error::NoClientCaCert);
        }
    }
    Ok(roots)
}

/// Builds the server configuration, reading the certificate, key and CA now.
pub(crate) fn server_config(t: &TlsSettings, http2: bool) -> Result<Arc<ServerConfig>, Error> {
    let provider = Arc::new(provider(t)?);
    let versions: Vec<&'static tokio_rustls::rustls::SupportedProtocolVersion> = [
        (TlsVersion::Tls12, &version::TLS12),
        (TlsVersion::Tls13, &version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (t.min_version..=t.max_version).contains(v))
    .map(|(_, p)| p)
    .collect();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(Error::Versions)?;
    let verifier: Arc<dyn ClientCertVerifier> = match t.client_auth {
        ClientAuth::NoClientCert => WebPkiClientVerifier::no_client_auth(),
        ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert => Arc::new(AnyCert {
            mandatory: t.client_auth == ClientAuth::RequireAnyClientCert,
            algorithms: provider.signature_verification_algorithms,
        }),
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert => {
            let b = WebPkiClientVerifier::builder_with_provider(
                Arc::new(root_store(t)?),
                provider.clone(),
            );
            let b = if t.client_auth == ClientAuth::VerifyClientCertIfGiven {
                b.allow_unauthenticated()
            } else {
                b
            };
            b.build().map_err(Error::ClientVerifier)?
        }
    };
    let cert_pem = t.cert.read()?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::CertPem)?;
    if certs.is_empty() {
        return Err(Error::NoCert);
    }
    let key = PrivateKeyDer::from_pem_slice(&t.key.read()?).map_err(Error::KeyPem)?;
    let mut config = builder
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(Error::CertAndKey)?;
    config.ignore_client_order = t.prefer_server_cipher_suites;
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(Arc::new(config))
}

/// Go's RequestClientCert / RequireAnyClientCert: a client certificate is asked for (and
/// for the second, required) but not checked against any CA. The client still has to prove
/// it holds the certificate's key: the handshake signature is verified.
#[derive(Debug)]
struct AnyCert {
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, tokio_rustls::rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::http::webconfig::Pem;

    fn settings() -> TlsSettings {
        TlsSettings {
            cert: Pem::Inline(String::new()),
            key: Pem::Inline(String::new()),
            client_auth: ClientAuth::NoClientCert,
            client_ca: None,
            min_version: TlsVersion::Tls12,
            max_version: TlsVersion::Tls13,
            cipher_suites: None,
            curves: None,
            prefer_server_cipher_suites: true,
        }
    }

    #[test]
    fn suites_and_curves_rustls_has_are_honoured() {
        let mut t = settings();
        t.cipher_suites = Some(vec![
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into(),
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305".into(),
            "TLS_AES_128_GCM_SHA256".into(),
        ]);
        t.curves = Some(vec!["CurveP256".into(), "X25519".into()]);
        let p = provider(&t).unwrap();
        let tls12: Vec<String> = p
            .cipher_suites
            .iter()
            .filter(|s| s.tls13().is_none())
            .map(|s| format!("{:?}", s.suite()))
            .collect();
        assert_eq!(
            tls12,
            [
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
            ]
        );
        assert_eq!(
            p.cipher_suites
                .iter()
                .filter(|s| s.tls13().is_some())
                .count(),
            3
        );
        assert_eq!(p.kx_groups.len(), 2);
    }

    #[test]
    fn what_rustls_cannot_do_is_an_error_naming_the_key() {
        let mut t = settings();
        t.cipher_suites = Some(vec!["TLS_RSA_WITH_AES_128_CBC_SHA".into()]);
        let e = provider(&t).unwrap_err();
        assert!(
            matches!(&e, Error::CipherSuite(s) if s == "TLS_RSA_WITH_AES_128_CBC_SHA"),
            "{e:?}"
        );
        let mut t = settings();
        t.curves = Some(vec!["CurveP521".into()]);
        let e = provider(&t).unwrap_err();
        assert!(matches!(&e, Error::Curve(c) if c == "CurveP521"), "{e:?}");
    }
}
