//! `--web-config-file`: Prometheus exporter-toolkit's web configuration (the file NVIDIA's
//! Helm chart generates): `tls_server_config`, `http_server_config`, `basic_auth_users`.
//! Unknown keys are errors, as in exporter-toolkit (strict YAML). Relative file names are
//! relative to the web config file's directory, as there.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    http_server_config: Option<HttpFile>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<String>,
    key_file: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    client_ca: Option<String>,
    client_allowed_sans: Option<Vec<String>>,
    cipher_suites: Option<Vec<String>>,
    curve_preferences: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    prefer_server_cipher_suites: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// PEM data from a file (re-read when it changes) or inline in the web config.
#[derive(Clone, Debug, PartialEq)]
pub enum Pem {
    File(PathBuf),
    Inline(String),
}

/// A PEM file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", .path.display())]
pub struct PemReadError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl Pem {
    pub fn read(&self) -> Result<Vec<u8>, PemReadError> {
        match self {
            Pem::File(p) => std::fs::read(p).map_err(|source| PemReadError {
                path: p.clone(),
                source,
            }),
            Pem::Inline(s) => Ok(s.as_bytes().to_vec()),
        }
    }

    pub fn path(&self) -> Option<&Path> {
        match self {
            Pem::File(p) => Some(p),
            Pem::Inline(_) => None,
        }
    }
}

/// Go's `tls.ClientAuthType` names, as exporter-toolkit spells them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ClientAuth {
    NoClientCert,
    RequestClientCert,
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

impl TlsVersion {
    /// As the web config spells it.
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "TLS12",
            TlsVersion::Tls13 => "TLS13",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct TlsSettings {
    pub cert: Pem,
    pub key: Pem,
    pub client_auth: ClientAuth,
    pub client_ca: Option<Pem>,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
    /// TLS 1.2 suites by IANA name (Go's names); `None` = the library's defaults.
    pub cipher_suites: Option<Vec<String>>,
    /// Go's curve names; `None` = the library's defaults.
    pub curves: Option<Vec<String>>,
    pub prefer_server_cipher_suites: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WebConfig {
    pub tls: Option<TlsSettings>,
    pub http2: bool,
    pub headers: Vec<(String, String)>,
    /// user -> bcrypt hash
    pub users: BTreeMap<String, String>,
}

impl WebConfig {
    /// The files whose change on disk should trigger a reload.
    pub fn files(&self) -> Vec<PathBuf> {
        let Some(t) = &self.tls else {
            return Vec::new();
        };
        [Some(&t.cert), Some(&t.key), t.client_ca.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|p| p.path().map(Path::to_path_buf))
            .collect()
    }
}

/// What a web configuration asks of clients, for telling whether a new version lowers it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Protection {
    pub tls: bool,
    /// A client certificate is required (RequireAnyClientCert, RequireAndVerifyClientCert).
    pub requires_cert: bool,
    /// A client certificate is verified against the CA (VerifyClientCertIfGiven,
    /// RequireAndVerifyClientCert).
    pub verifies_cert: bool,
    pub users: Vec<String>,
    /// With TLS: the versions spoken.
    pub versions: Option<(TlsVersion, TlsVersion)>,
    /// With TLS: the TLS 1.2 suites and the curves allowed (`None`: all the library has).
    pub suites: Option<Vec<String>>,
    pub curves: Option<Vec<String>>,
    /// `http_server_config.headers`, by canonical name.
    pub headers: Vec<(String, String)>,
    /// `http_server_config.http2` (only spoken with TLS).
    pub http2: bool,
}

/// What a new version would take away from the configuration in force; its `Display` is
/// the words of the refusal's log line and `/health` note.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Loss {
    Tls,
    CertRequirement,
    CertVerification,
    /// Every basic-auth user (those in force).
    Users(Vec<String>),
    MinVersion {
        old: TlsVersion,
        new: TlsVersion,
    },
    MaxVersion {
        old: TlsVersion,
        new: TlsVersion,
    },
    /// The limit of `cipher_suites`, and what the new version would allow besides.
    Suites(Widened),
    Curves(Widened),
    HeaderDropped {
        name: String,
        old: String,
    },
    HeaderWeakened {
        name: String,
        old: String,
        new: String,
    },
    /// `http2: false` turned back on.
    Http2,
}

/// What a widened list would allow: the library's whole set, or the names added.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Widened {
    Everything,
    Names(Vec<String>),
}

impl std::fmt::Display for Widened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Widened::Everything => f.write_str("the library's whole set"),
            Widened::Names(n) => f.write_str(&n.join(", ")),
        }
    }
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loss::Tls => f.write_str("TLS (the port would answer plain HTTP)"),
            Loss::CertRequirement => f.write_str("the client-certificate requirement"),
            Loss::CertVerification => f.write_str("client-certificate verification"),
            Loss::Users(users) => write!(
                f,
                "every basic-auth user ({}: anyone would be let in)",
                users.join(", ")
            ),
            Loss::MinVersion { old, new } => write!(
                f,
                "tls_server_config.min_version {} (it would accept {})",
                old.name(),
                new.name()
            ),
            Loss::MaxVersion { old, new } => write!(
                f,
                "tls_server_config.max_version {} (connections would use {})",
                old.name(),
                new.name()
            ),
            Loss::Suites(w) => write!(
                f,
                "the limit of tls_server_config.cipher_suites (it would allow {w})"
            ),
            Loss::Curves(w) => write!(
                f,
                "the limit of tls_server_config.curve_preferences (it would allow {w})"
            ),
            Loss::HeaderDropped { name, old } => write!(f, "the {name} header ({old:?})"),
            Loss::HeaderWeakened { name, old, new } => {
                write!(f, "the {name} header {old:?} (it would be {new:?})")
            }
            Loss::Http2 => {
                f.write_str("http_server_config.http2: false (HTTP/2 would be spoken again)")
            }
        }
    }
}

/// Names in `new` that `old` did not allow (`None`: everything the library has).
fn widened(old: &Option<Vec<String>>, new: &Option<Vec<String>>) -> Option<Widened> {
    let old = old.as_ref()?;
    match new {
        None => Some(Widened::Everything),
        Some(new) => {
            let added: Vec<String> = new.iter().filter(|n| !old.contains(n)).cloned().collect();
            (!added.is_empty()).then_some(Widened::Names(added))
        }
    }
}

/// Whether a header's new value asks less of browsers than the old one. Only orders that
/// are clear count: X-Frame-Options `deny` over `sameorigin`, a Strict-Transport-Security
/// whose max-age shrinks or that drops includeSubDomains or preload. Other changes (a new
/// Content-Security-Policy) are the operator's to judge.
fn header_weakened(name: &str, old: &str, new: &str) -> bool {
    match name {
        "X-Frame-Options" => old.eq_ignore_ascii_case("deny") && !new.eq_ignore_ascii_case("deny"),
        "Strict-Transport-Security" => {
            let directives = |v: &str| -> (u64, bool, bool) {
                let mut d = (0, false, false);
                for part in v.split(';').map(|p| p.trim().to_ascii_lowercase()) {
                    if let Some(age) = part.strip_prefix("max-age=") {
                        d.0 = age.trim_matches('"').parse().unwrap_or(0);
                    }
                    d.1 |= part == "includesubdomains";
                    d.2 |= part == "preload";
                }
                d
            };
            let (o, n) = (directives(old), directives(new));
            n.0 < o.0 || (o.1 && !n.1) || (o.2 && !n.2)
        }
        _ => false,
    }
}

impl Protection {
    /// What `new` would take away from `self` (empty: nothing). Adding protection or
    /// changing users while some remain is not a loss.
    pub(crate) fn removed_by(&self, new: &Protection) -> Vec<Loss> {
        let mut lost = Vec::new();
        if self.tls && !new.tls {
            lost.push(Loss::Tls);
        }
        if self.requires_cert && !new.requires_cert {
            lost.push(Loss::CertRequirement);
        }
        if self.verifies_cert && !new.verifies_cert {
            lost.push(Loss::CertVerification);
        }
        if !self.users.is_empty() && new.users.is_empty() {
            lost.push(Loss::Users(self.users.clone()));
        }
        if self.tls && new.tls {
            lost.extend(self.tls_lowered_by(new));
        }
        lost.extend(self.headers_lowered_by(new));
        if self.tls && new.tls && !self.http2 && new.http2 {
            lost.push(Loss::Http2);
        }
        lost
    }

    /// TLS versions, suites and curves that `new` would allow and `self` does not.
    fn tls_lowered_by(&self, new: &Protection) -> Vec<Loss> {
        let mut lost = Vec::new();
        if let (Some((old_min, old_max)), Some((new_min, new_max))) = (self.versions, new.versions)
        {
            if new_min < old_min {
                lost.push(Loss::MinVersion {
                    old: old_min,
                    new: new_min,
                });
            }
            if new_max < old_max {
                lost.push(Loss::MaxVersion {
                    old: old_max,
                    new: new_max,
                });
            }
        }
        lost.extend(widened(&self.suites, &new.suites).map(Loss::Suites));
        lost.extend(widened(&self.curves, &new.curves).map(Loss::Curves));
        lost
    }

    /// Headers `new` would drop or weaken.
    fn headers_lowered_by(&self, new: &Protection) -> Vec<Loss> {
        self.headers
            .iter()
            .filter_map(
                |(name, old)| match new.headers.iter().find(|(n, _)| n == name) {
                    None => Some(Loss::HeaderDropped {
                        name: name.clone(),
                        old: old.clone(),
                    }),
                    Some((_, v)) if header_weakened(name, old, v) => Some(Loss::HeaderWeakened {
                        name: name.clone(),
                        old: old.clone(),
                        new: v.clone(),
                    }),
                    Some(_) => None,
                },
            )
            .collect()
    }
}

/// The TLS 1.2 suites among names (Go ignores `cipher_suites` for TLS 1.3, as we do).
fn tls12_suites(names: &Option<Vec<String>>) -> Option<Vec<String>> {
    names
        .as_ref()
        .map(|n| n.iter().filter(|s| s.contains("_WITH_")).cloned().collect())
}

impl WebConfig {
    pub(crate) fn protection(&self) -> Protection {
        let auth = self.tls.as_ref().map(|t| t.client_auth);
        Protection {
            tls: self.tls.is_some(),
            requires_cert: matches!(
                auth,
                Some(ClientAuth::RequireAnyClientCert | ClientAuth::RequireAndVerifyClientCert)
            ),
            verifies_cert: matches!(
                auth,
                Some(ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert)
            ),
            users: self.users.keys().cloned().collect(),
            versions: self.tls.as_ref().map(|t| (t.min_version, t.max_version)),
            suites: self
                .tls
                .as_ref()
                .and_then(|t| tls12_suites(&t.cipher_suites)),
            curves: self.tls.as_ref().and_then(|t| t.curves.clone()),
            headers: self.headers.clone(),
            http2: self.http2,
        }
    }
}

/// Headers exporter-toolkit lets a web config set, with the values it accepts (`None`: any).
const HEADERS: [(&str, Option<&[&str]>); 5] = [
    ("Strict-Transport-Security", None),
    ("X-Content-Type-Options", Some(&["nosniff"])),
    ("X-Frame-Options", Some(&["deny", "sameorigin"])),
    ("X-XSS-Protection", None),
    ("Content-Security-Policy", None),
];

/// A web config file's text that is refused: the file, and what is wrong by key.
#[derive(Debug, thiserror::Error)]
#[error("--web-config-file {}: {problem}", .path.display())]
pub struct Error {
    pub path: PathBuf,
    pub problem: Problem,
}

/// What is wrong in a web config file's text, by key.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// Not YAML, or a key exporter-toolkit does not know (strict).
    #[error("{0}")]
    Yaml(#[from] serde_norway::Error),
    /// `{key}_file` and inline `{key}` both set (`key`: cert, key, client_ca).
    #[error("tls_server_config.{key}_file: cannot set both {key} and {key}_file")]
    BothPem { key: &'static str },
    #[error("tls_server_config.cert_file: missing (required with any TLS setting)")]
    NoCert,
    #[error("tls_server_config.key_file: missing (required with any TLS setting)")]
    NoKey,
    #[error(
        "tls_server_config.client_auth_type: invalid value {0:?} (NoClientCert, \
         RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, \
         RequireAndVerifyClientCert)"
    )]
    ClientAuthType(String),
    #[error("tls_server_config.client_ca_file: missing (required by client_auth_type {0:?})")]
    NoClientCa(ClientAuth),
    #[error("tls_server_config.client_ca_file: set without a client_auth_type that uses it")]
    UnusedClientCa,
    #[error("tls_server_config.client_allowed_sans: not supported by this exporter")]
    ClientAllowedSans,
    /// TLS 1.0 or 1.1 (`key`: min_version, max_version).
    #[error(
        "tls_server_config.{key}: {version} is not supported (this exporter's TLS library, \
         rustls, speaks TLS 1.2 and 1.3 only; use TLS12 or TLS13)"
    )]
    OldTlsVersion { key: &'static str, version: String },
    #[error("tls_server_config.{key}: unknown TLS version {version:?} (use TLS12 or TLS13)")]
    UnknownTlsVersion { key: &'static str, version: String },
    #[error("tls_server_config.min_version: greater than max_version")]
    MinAboveMax,
    #[error(
        "http_server_config.headers: header {name:?} can not be configured (allowed: {})",
        HEADERS.map(|h| h.0).join(", ")
    )]
    HeaderNotAllowed { name: String },
    #[error(
        "http_server_config.headers: invalid value {value:?} for {header} (allowed: {})",
        .allowed.join(", ")
    )]
    HeaderValueNotAllowed {
        header: &'static str,
        value: String,
        allowed: &'static [&'static str],
    },
    #[error("http_server_config.headers.{header}: {value:?} is not a valid header value")]
    HeaderValueInvalid { header: &'static str, value: String },
    #[error(
        "basic_auth_users.{user}: not a bcrypt hash (make one with `htpasswd -nBC 10 {user}`)"
    )]
    NotBcrypt { user: String },
}

/// Validates the file's text (read by `state`, which also needs to know whether it was
/// empty); every error names the file and the key.
pub fn parse(text: &str, path: &Path) -> Result<WebConfig, Error> {
    parse_text(text, path).map_err(|problem| Error {
        path: path.to_path_buf(),
        problem,
    })
}

fn parse_text(text: &str, path: &Path) -> Result<WebConfig, Problem> {
    let file: File = if text.trim().is_empty() {
        File::default()
    } else {
        serde_norway::from_str(text)?
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let tls = match file.tls_server_config {
        Some(t) => tls_settings(t, dir)?,
        None => None,
    };
    let http = file.http_server_config.unwrap_or_default();
    let mut headers = Vec::new();
    for (name, value) in http.headers.unwrap_or_default() {
        let Some(&(canonical, allowed)) =
            HEADERS.iter().find(|(h, _)| h.eq_ignore_ascii_case(&name))
        else {
            return Err(Problem::HeaderNotAllowed { name });
        };
        if let Some(values) = allowed {
            if !values.iter().any(|v| v.eq_ignore_ascii_case(&value)) {
                return Err(Problem::HeaderValueNotAllowed {
                    header: canonical,
                    value,
                    allowed: values,
                });
            }
        }
        if hyper::header::HeaderValue::from_str(&value).is_err() {
            return Err(Problem::HeaderValueInvalid {
                header: canonical,
                value,
            });
        }
        headers.push((canonical.to_string(), value));
    }
    let users = file.basic_auth_users.unwrap_or_default();
    if let Some(user) = users
        .iter()
        .find(|(_, hash)| hash.parse::<bcrypt::HashParts>().is_err())
        .map(|(user, _)| user.clone())
    {
        return Err(Problem::NotBcrypt { user });
    }
    Ok(WebConfig {
        tls,
        // exporter-toolkit's default; it only matters with TLS (no h2c, as in Go).
        http2: http.http2.unwrap_or(true),
        headers,
        users,
    })
}

fn pem(
    file: Option<String>,
    inline: Option<String>,
    key: &'static str,
    dir: &Path,
) -> Result<Option<Pem>, Problem> {
    match (
        file.filter(|f| !f.is_empty()),
        inline.filter(|s| !s.is_empty()),
    ) {
        (Some(_), Some(_)) => Err(Problem::BothPem { key }),
        (Some(f), None) => Ok(Some(Pem::File(dir.join(f)))),
        (None, Some(s)) => Ok(Some(Pem::Inline(s))),
        (None, None) => Ok(None),
    }
}

fn version(
    key: &'static str,
    v: Option<String>,
    default: TlsVersion,
) -> Result<TlsVersion, Problem> {
    match v.as_deref() {
        None | Some("") => Ok(default),
        Some("TLS12") => Ok(TlsVersion::Tls12),
        Some("TLS13") => Ok(TlsVersion::Tls13),
        Some(o @ ("TLS10" | "TLS11")) => Err(Problem::OldTlsVersion {
            key,
            version: o.to_string(),
        }),
        Some(o) => Err(Problem::UnknownTlsVersion {
            key,
            version: o.to_string(),
        }),
    }
}

fn tls_settings(t: TlsFile, dir: &Path) -> Result<Option<TlsSettings>, Problem> {
    let cert = pem(t.cert_file, t.cert, "cert", dir)?;
    let key = pem(t.key_file, t.key, "key", dir)?;
    let client_ca = pem(t.client_ca_file, t.client_ca, "client_ca", dir)?;
    let auth = t.client_auth_type.filter(|s| !s.is_empty());
    if cert.is_none() && key.is_none() && auth.is_none() && client_ca.is_none() {
        // exporter-toolkit: no TLS settings at all means plain HTTP.
        return Ok(None);
    }
    let cert = cert.ok_or(Problem::NoCert)?;
    let key = key.ok_or(Problem::NoKey)?;
    let client_auth = match auth.as_deref() {
        None | Some("NoClientCert") => ClientAuth::NoClientCert,
        Some("RequestClientCert") => ClientAuth::RequestClientCert,
        Some("RequireAnyClientCert") => ClientAuth::RequireAnyClientCert,
        Some("VerifyClientCertIfGiven") => ClientAuth::VerifyClientCertIfGiven,
        Some("RequireAndVerifyClientCert") => ClientAuth::RequireAndVerifyClientCert,
        Some(o) => return Err(Problem::ClientAuthType(o.to_string())),
    };
    let verifies = matches!(
        client_auth,
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert
    );
    if verifies && client_ca.is_none() {
        return Err(Problem::NoClientCa(client_auth));
    }
    if client_ca.is_some() && client_auth == ClientAuth::NoClientCert {
        return Err(Problem::UnusedClientCa);
    }
    if t.client_allowed_sans.is_some_and(|s| !s.is_empty()) {
        return Err(Problem::ClientAllowedSans);
    }
    let min_version = version("min_version", t.min_version, TlsVersion::Tls12)?;
    let max_version = version("max_version", t.max_version, TlsVersion::Tls13)?;
    if min_version > max_version {
        return Err(Problem::MinAboveMax);
    }
    Ok(Some(TlsSettings {
        cert,
        key,
        client_auth,
        client_ca,
        min_version,
        max_version,
        cipher_suites: t.cipher_suites.filter(|s| !s.is_empty()),
        curves: t.curve_preferences.filter(|s| !s.is_empty()),
        prefer_server_cipher_suites: t.prefer_server_cipher_suites.unwrap_or(true),
    }))
}

#[cfg(test)]
mod tests;
