//! Failed TLS handshakes, made visible as Go's net/http makes them (it logs every one): a
//! warning with the peer's address and the reason, at most once per reason per minute (a
//! scanner or a misconfigured client retrying must not flood the log), and
//! `dcgm_exporter_tls_handshake_errors_total{reason}`.

use prometheus::{IntCounterVec, Opts};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio_rustls::rustls;

/// At most one warning per reason in this time.
const LOG_EVERY: Duration = Duration::from_secs(60);

pub(crate) struct HandshakeErrors {
    counter: IntCounterVec,
    /// reason -> (when it was last logged, how many were not logged since).
    logged: Mutex<HashMap<String, (Instant, u64)>>,
}

impl HandshakeErrors {
    pub(crate) fn new() -> HandshakeErrors {
        HandshakeErrors {
            counter: IntCounterVec::new(
                Opts::new(
                    "dcgm_exporter_tls_handshake_errors_total",
                    "TLS handshakes that failed, by reason (rustls' name for it, e.g. \
                     UnsupportedCertVersion, UnknownIssuer, NoCertificatesPresented, Timeout).",
                ),
                &["reason"],
            )
            .expect("static metric options are valid"),
            logged: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn collector(&self) -> Box<dyn prometheus::core::Collector> {
        Box::new(self.counter.clone())
    }

    #[cfg(test)]
    pub(crate) fn count(&self, reason: &str) -> u64 {
        self.counter.with_label_values(&[reason]).get()
    }

    /// Counts a failed handshake and logs it unless its reason was logged in the last minute.
    pub(crate) fn record(&self, peer: SocketAddr, error: &Failure) {
        let reason = error.reason();
        self.counter.with_label_values(&[&reason]).inc();
        let suppressed = {
            let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            match logged.get_mut(&reason) {
                Some((at, skipped)) if now.duration_since(*at) < LOG_EVERY => {
                    *skipped += 1;
                    return;
                }
                Some((at, skipped)) => {
                    *at = now;
                    std::mem::take(skipped)
                }
                None => {
                    logged.insert(reason.clone(), (now, 0));
                    0
                }
            }
        };
        let also = if suppressed > 0 {
            format!(" ({suppressed} more with this reason in the last minute were not logged)")
        } else {
            String::new()
        };
        tracing::warn!("TLS handshake error from {peer}: {reason}: {error}{also}");
    }
}

impl Default for HandshakeErrors {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a handshake did not complete.
#[derive(Debug)]
pub(crate) enum Failure {
    Io(std::io::Error),
    Timeout(Duration),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Io(e) => write!(f, "{e}"),
            Failure::Timeout(d) => write!(f, "no complete handshake within {d:?}"),
        }
    }
}

impl Failure {
    /// A short, bounded label: the innermost variant name of rustls' error, or the I/O
    /// error kind.
    pub(crate) fn reason(&self) -> String {
        match self {
            Failure::Timeout(_) => "Timeout".into(),
            Failure::Io(e) => match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                Some(tls) => rustls_reason(tls),
                None => format!("{:?}", e.kind()),
            },
        }
    }
}

/// Wrappers whose inner value says more than their own name.
const WRAPPERS: [&str; 6] = [
    "InvalidCertificate",
    "Other",
    "OtherError",
    "PeerIncompatible",
    "PeerMisbehaved",
    "InvalidCertRevocationList",
];

/// `InvalidCertificate(Other(OtherError(UnsupportedCertVersion)))` -> `UnsupportedCertVersion`;
/// `InvalidCertificate(UnknownIssuer)` -> `UnknownIssuer`; `AlertReceived(..)` ->
/// `AlertReceived`. Only variant names are kept, never data, so the label set stays small.
fn rustls_reason(e: &rustls::Error) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|t| !t.is_empty())
        .find(|t| !WRAPPERS.contains(t))
        .unwrap_or("Unknown")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{CertificateError, Error};

    fn io(e: Error) -> Failure {
        Failure::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    #[test]
    fn reasons_are_variant_names() {
        assert_eq!(
            io(Error::InvalidCertificate(CertificateError::UnknownIssuer)).reason(),
            "UnknownIssuer"
        );
        assert_eq!(
            io(Error::NoCertificatesPresented).reason(),
            "NoCertificatesPresented"
        );
        assert_eq!(
            io(Error::PeerIncompatible(
                rustls::PeerIncompatible::Tls12NotOffered
            ))
            .reason(),
            "Tls12NotOffered"
        );
        assert_eq!(
            io(Error::AlertReceived(
                rustls::AlertDescription::BadCertificate
            ))
            .reason(),
            "AlertReceived"
        );
        assert_eq!(
            Failure::Io(std::io::ErrorKind::UnexpectedEof.into()).reason(),
            "UnexpectedEof"
        );
        assert_eq!(Failure::Timeout(Duration::from_secs(1)).reason(), "Timeout");
    }

    #[test]
    fn every_failure_counts_but_a_reason_is_logged_once_a_minute() {
        let h = HandshakeErrors::new();
        let peer: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        for _ in 0..5 {
            h.record(peer, &io(Error::NoCertificatesPresented));
        }
        h.record(peer, &Failure::Timeout(Duration::from_secs(1)));
        assert_eq!(h.count("NoCertificatesPresented"), 5);
        assert_eq!(h.count("Timeout"), 1);
        let logged = h.logged.lock().unwrap();
        assert_eq!(logged["NoCertificatesPresented"].1, 4, "suppressed repeats");
        assert_eq!(logged["Timeout"].1, 0);
    }
}
