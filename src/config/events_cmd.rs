//! `dcgm-exporter events`: the flags of the subcommand that asks a running exporter for its
//! event history (`/events`), checked into a [`Request`]. A parser of its own, reached only
//! when the first argument is `events`, so the exporter's own flags parse as they always
//! did. Credentials come from flags or from a client configuration file in the shape of
//! Prometheus' HTTP client configuration (promtool's `--http.config.file`):
//!
//! ```yaml
//! basic_auth: {username: alice, password_file: /etc/dcgm-exporter/password}
//! tls_config: {ca_file: ca.crt, cert_file: client.crt, key_file: client.key,
//!              server_name: gpu-node, insecure_skip_verify: false}
//! ```
//!
//! Relative paths are relative to the file; unknown keys are errors.

use clap::Parser;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Ask a running dcgm-exporter for its event history (XIDs, GPUs lost, engine restarts,
/// reloads, ...) and print it as a table or as JSON.
#[derive(Parser, Debug)]
#[command(name = "dcgm-exporter events", bin_name = "dcgm-exporter events")]
pub(crate) struct Args {
    /// The exporter: host:port, :port, or an http:// or https:// URL (a path in it
    /// prefixes /events).
    #[arg(short = 'a', long, default_value = "localhost:9400")]
    pub address: String,
    /// Events since: a duration back from now (10m, 1h30m) or an RFC 3339 time.
    #[arg(long, default_value = "1h")]
    pub since: String,
    /// Only these entities, comma-separated (gpu:0 also takes gpu:0/gi:1 and gpu:0/link:2;
    /// switch:1, engine:<address>, node, exporter).
    #[arg(long, value_name = "ENTITIES")]
    pub entity: Option<String>,
    /// Only these types, comma-separated (xid, health_action, health_system, gpu_lost,
    /// gpu_found, gpu_unbound, gpu_bound, engine_down, engine_up, failover_engaged,
    /// failover_released, reload, mig_change, profiling_rearm, web_config_refused).
    #[arg(long = "type", value_name = "TYPES")]
    pub kind: Option<String>,
    /// The newest N events only.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Print the exporter's JSON as it came instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Basic auth user.
    #[arg(short = 'u', long)]
    pub user: Option<String>,
    /// Basic auth password.
    #[arg(long, env = "DCGM_EXPORTER_EVENTS_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// A file whose first line is the basic auth password.
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// A client configuration file (basic_auth, tls_config) as Prometheus' HTTP client
    /// configuration; flags win over it.
    #[arg(long, value_name = "FILE")]
    pub http_config_file: Option<PathBuf>,
    /// Speak TLS (implied by an https:// address or any TLS flag).
    #[arg(long)]
    pub tls: bool,
    /// The CA file the exporter's certificate must chain to (else the system's).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Client certificate for the exporter's RequireAndVerifyClientCert (with --key-file).
    #[arg(long, value_name = "FILE")]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's key.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// The name the exporter's certificate must carry (default: the address's host).
    #[arg(long)]
    pub server_name: Option<String>,
    /// Do not check the exporter's certificate (tests, self-signed set-ups).
    #[arg(long)]
    pub insecure: bool,
    /// Give up after this long (Go duration).
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub timeout: String,
}

/// TLS toward the exporter.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Tls {
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<(PathBuf, PathBuf)>,
    pub server_name: Option<String>,
    pub insecure: bool,
}

/// One request, checked.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Request {
    pub host: String,
    pub port: u16,
    /// Path and query: `/events?since=1h`.
    pub target: String,
    pub tls: Option<Tls>,
    /// (user, password).
    pub auth: Option<(String, String)>,
    pub timeout: Duration,
    pub json: bool,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    basic_auth: Option<FileAuth>,
    #[serde(default)]
    tls_config: Option<FileTls>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAuth {
    username: String,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    password_file: Option<PathBuf>,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileTls {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    server_name: Option<String>,
    #[serde(default)]
    insecure_skip_verify: bool,
}

/// Why `events`' flags or client file ask for no request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client file or a password file cannot be read.
    #[error("{}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The client file is no valid YAML for it (strict: unknown keys are refused).
    #[error("{}: {source}", .path.display())]
    ClientFile {
        path: PathBuf,
        source: serde_norway::Error,
    },
    #[error("--address {address}: {why}")]
    Address { address: String, why: AddressWhy },
    #[error("--timeout {0}: not a positive duration")]
    Timeout(String),
    #[error("a client certificate needs both --cert-file and --key-file")]
    HalfClientCert,
    #[error("{0}: an http:// address with TLS settings (use https://)")]
    TlsOverHttp(String),
    #[error("a password needs a user (--user)")]
    PasswordWithoutUser,
}

/// What is wrong with `--address`.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum AddressWhy {
    #[error("unknown scheme {0} (http or https)")]
    UnknownScheme(String),
    #[error("not a port")]
    NotAPort,
    #[error("no port (host:port)")]
    NoPort,
}

/// Parses `events`' arguments (the first is the program's name, as `events`).
pub(crate) fn parse_from<I, T>(args: I) -> Result<Args, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Args::try_parse_from(args)
}

impl Args {
    /// The request these flags ask for.
    pub(crate) fn request(&self) -> Result<Request, Error> {
        let file = match &self.http_config_file {
            Some(p) => read_config(p)?,
            None => (FileConfig::default(), PathBuf::new()),
        };
        let (scheme_tls, host, port, prefix) = address(&self.address)?;
        let tls = self.tls_settings(&file.0, &file.1, scheme_tls)?;
        let auth = self.auth(&file.0, &file.1)?;
        let timeout = crate::config::duration::parse(&self.timeout)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| Error::Timeout(self.timeout.clone()))?;
        Ok(Request {
            host,
            port,
            target: format!("{prefix}/events?{}", self.query()),
            tls,
            auth,
            timeout,
            json: self.json,
        })
    }

    fn query(&self) -> String {
        let mut q = vec![format!("since={}", encode(&self.since))];
        if let Some(e) = &self.entity {
            q.push(format!("entity={}", encode(e)));
        }
        if let Some(t) = &self.kind {
            q.push(format!("type={}", encode(t)));
        }
        if let Some(n) = self.limit {
            q.push(format!("limit={n}"));
        }
        q.join("&")
    }

    fn tls_settings(
        &self,
        file: &FileConfig,
        dir: &Path,
        scheme: Option<bool>,
    ) -> Result<Option<Tls>, Error> {
        let f = file.tls_config.as_ref();
        let rel = |p: &Option<PathBuf>| p.as_ref().map(|p| dir.join(p));
        let ca_file = self
            .ca_file
            .clone()
            .or_else(|| rel(&f.and_then(|f| f.ca_file.clone())));
        let cert = self
            .cert_file
            .clone()
            .or_else(|| rel(&f.and_then(|f| f.cert_file.clone())));
        let key = self
            .key_file
            .clone()
            .or_else(|| rel(&f.and_then(|f| f.key_file.clone())));
        let client_cert = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => return Err(Error::HalfClientCert),
        };
        let tls = Tls {
            ca_file,
            client_cert,
            server_name: self
                .server_name
                .clone()
                .or_else(|| f.and_then(|f| f.server_name.clone())),
            insecure: self.insecure || f.is_some_and(|f| f.insecure_skip_verify),
        };
        let asked = self.tls || f.is_some() || tls != Tls::default();
        match scheme {
            Some(false) if asked => Err(Error::TlsOverHttp(self.address.clone())),
            Some(true) => Ok(Some(tls)),
            _ if asked => Ok(Some(tls)),
            _ => Ok(None),
        }
    }

    fn auth(&self, file: &FileConfig, dir: &Path) -> Result<Option<(String, String)>, Error> {
        let f = file.basic_auth.as_ref();
        let Some(user) = self.user.clone().or_else(|| f.map(|f| f.username.clone())) else {
            if self.password.is_some() || self.password_file.is_some() {
                return Err(Error::PasswordWithoutUser);
            }
            return Ok(None);
        };
        let password = match (&self.password, &self.password_file) {
            (Some(p), _) => p.clone(),
            (None, Some(path)) => first_line(path)?,
            (None, None) => match f {
                Some(FileAuth {
                    password: Some(p), ..
                }) => p.clone(),
                Some(FileAuth {
                    password_file: Some(p),
                    ..
                }) => first_line(&dir.join(p))?,
                _ => String::new(),
            },
        };
        Ok(Some((user, password)))
    }
}

fn read(p: &Path) -> Result<String, Error> {
    std::fs::read_to_string(p).map_err(|source| Error::Read {
        path: p.to_path_buf(),
        source,
    })
}

fn first_line(p: &Path) -> Result<String, Error> {
    Ok(read(p)?.lines().next().unwrap_or_default().to_string())
}

/// The client configuration file and its directory.
fn read_config(p: &Path) -> Result<(FileConfig, PathBuf), Error> {
    let text = read(p)?;
    let c: FileConfig = if text.trim().is_empty() {
        FileConfig::default()
    } else {
        serde_norway::from_str(&text).map_err(|source| Error::ClientFile {
            path: p.to_path_buf(),
            source,
        })?
    };
    let dir = p.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok((c, dir))
}

/// (`Some(true)` for https, `Some(false)` for http, `None` without a scheme), host, port
/// and the path prefix of an address.
fn address(a: &str) -> Result<(Option<bool>, String, u16, String), Error> {
    let bad = |why| Error::Address {
        address: a.to_string(),
        why,
    };
    let (scheme, rest) = match a.split_once("://") {
        Some(("http", r)) => (Some(false), r),
        Some(("https", r)) => (Some(true), r),
        Some((s, _)) => return Err(bad(AddressWhy::UnknownScheme(s.to_string()))),
        None => (None, a),
    };
    let (authority, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (authority, None),
    };
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| bad(AddressWhy::NotAPort))?,
        None if scheme == Some(true) => 443,
        None if scheme == Some(false) => 80,
        None => return Err(bad(AddressWhy::NoPort)),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { "localhost" } else { host };
    Ok((scheme, host.to_string(), port, prefix.to_string()))
}

/// Percent-encodes a query value (unreserved characters and `:` `,` `/` kept).
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'.'
            | b'_'
            | b'~'
            | b':'
            | b','
            | b'/' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(args: &[&str]) -> Result<Request, Error> {
        parse_from(std::iter::once("events").chain(args.iter().copied()))
            .unwrap()
            .request()
    }

    #[test]
    fn addresses_queries_and_defaults() {
        let r = req(&[]).unwrap();
        assert_eq!(
            (r.host.as_str(), r.port, r.tls.is_none()),
            ("localhost", 9400, true)
        );
        assert_eq!(r.target, "/events?since=1h");
        let r = req(&[
            "-a",
            ":9500",
            "--since",
            "2026-11-28T10:00:00+01:00",
            "--entity",
            "gpu:0",
            "--type",
            "xid,gpu_lost",
            "--limit",
            "5",
        ])
        .unwrap();
        assert_eq!((r.host.as_str(), r.port), ("localhost", 9500));
        assert_eq!(
            r.target,
            "/events?since=2026-11-28T10:00:00%2B01:00&entity=gpu:0&type=xid,gpu_lost&limit=5"
        );
        let r = req(&["-a", "https://[::1]:9400/gpu/", "--insecure"]).unwrap();
        assert_eq!((r.host.as_str(), r.port), ("::1", 9400));
        assert_eq!(r.target, "/gpu/events?since=1h");
        assert!(r.tls.unwrap().insecure);
        let address = |a: &str| match req(&["-a", a]) {
            Err(Error::Address { address, why }) if address == a => Some(why),
            _ => None,
        };
        assert_eq!(address("localhost"), Some(AddressWhy::NoPort));
        assert_eq!(address("h:port"), Some(AddressWhy::NotAPort));
        assert_eq!(
            address("ftp://h:1"),
            Some(AddressWhy::UnknownScheme("ftp".into()))
        );
        assert!(matches!(
            req(&["-a", "http://h:1", "--ca-file", "x"]),
            Err(Error::TlsOverHttp(a)) if a == "http://h:1"
        ));
        assert!(matches!(
            req(&["--timeout", "0s"]),
            Err(Error::Timeout(t)) if t == "0s"
        ));
        assert!(matches!(
            req(&["--cert-file", "c"]),
            Err(Error::HalfClientCert)
        ));
        assert!(matches!(
            req(&["--password", "p"]),
            Err(Error::PasswordWithoutUser)
        ));
    }

    #[test]
    fn credentials_from_flags_and_a_client_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pw"), "s3cret\nignored\n").unwrap();
        let file = dir.path().join("client.yml");
        std::fs::write(
            &file,
            "basic_auth: {username: alice, password_file: pw}\n\
             tls_config: {ca_file: ca.crt, server_name: gpu-node}\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let r = req(&["-a", "node:9400", "--http-config-file", f]).unwrap();
        assert_eq!(r.auth, Some(("alice".into(), "s3cret".into())));
        let tls = r.tls.unwrap();
        assert_eq!(tls.ca_file, Some(dir.path().join("ca.crt")));
        assert_eq!(tls.server_name.as_deref(), Some("gpu-node"));
        // Flags win.
        let r = req(&["--http-config-file", f, "-u", "bob", "--password", "pw2"]).unwrap();
        assert_eq!(r.auth, Some(("bob".into(), "pw2".into())));
        std::fs::write(&file, "basic_auth: {username: a, pasword: x}\n").unwrap();
        match req(&["--http-config-file", f]) {
            // serde names an unknown key only in its message: that text is all there is.
            Err(Error::ClientFile { path, source }) => {
                assert_eq!(path, file);
                assert!(source.to_string().contains("unknown field `pasword`"));
            }
            other => panic!("{:?}", other.err()),
        }
        assert!(matches!(
            req(&["--http-config-file", "/nonexistent/client.yml"]),
            Err(Error::Read { path, .. }) if path == Path::new("/nonexistent/client.yml")
        ));
    }
}
