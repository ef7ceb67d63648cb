//! The HTTP surface with the clients users point at it: curl and `openssl s_client` against
//! an exporter-toolkit web config (TLS, client certificates, basic auth, headers, certificate
//! rotation), systemd socket activation through `systemd-socket-activate`, gzip, methods,
//! timeouts and the pprof endpoint.

use crate::support::certs::openssl;
use crate::support::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// From `htpasswd -nBC 10 alice`, password "password" (upstream's own test fixture).
const ALICE: &str = "$2y$10$CWCEbs7mt8QFrToJR9OcG.tduEKpx9SROhWnaDHQgQX4Q6hqWNASa";

/// Skips the test (with the reason printed; a failure under CI) when a client is not installed.
macro_rules! require {
    ($($tool:literal),+) => {
        $(if !require_tool($tool, "apt-get install it; .ci/run does") {
            return;
        })+
    };
}

fn run(cmd: &mut Command) -> Output {
    output_within(cmd, QUICK)
}

/// A CA, a server certificate for 127.0.0.1 signed by it (`server`, CN given), a client
/// certificate signed by it (`client`) and a self-signed client certificate (`stranger`).
fn certificates(dir: &Path) {
    certs::ca_server_client(
        dir,
        "test-ca",
        "server-one",
        "subjectAltName=IP:127.0.0.1\n",
    );
    let mut stranger = vec!["req", "-subj", "/CN=stranger", "-keyout", "stranger.key"];
    stranger.extend(certs::EC_KEY);
    stranger.extend(["-x509", "-days", "2", "-out", "stranger.crt"]);
    certs::openssl(dir, &stranger);
}

/// (Re)writes server.crt/server.key: a certificate for 127.0.0.1 with the given CN.
fn server_cert(dir: &Path, cn: &str) {
    certs::signed(dir, "new", cn, "subjectAltName=IP:127.0.0.1\n");
    // Replaced by rename, as a Kubernetes secret volume (and cert-manager) does.
    std::fs::rename(dir.join("new.key"), dir.join("server.key")).unwrap();
    std::fs::rename(dir.join("new.crt"), dir.join("server.crt")).unwrap();
}

fn write_web_config(dir: &Path, tls_extra: &str, rest: &str) -> PathBuf {
    let path = dir.join("web-config.yml");
    let tmp = dir.join("web-config.yml.tmp");
    std::fs::write(
        &tmp,
        format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n{tls_extra}{rest}"),
    )
    .unwrap();
    std::fs::rename(tmp, &path).unwrap();
    path
}

/// curl over HTTPS to the exporter: (exit code, HTTP status, headers+body).
fn curl(dir: &Path, port: u16, path: &str, args: &[&str]) -> (i32, u16, String) {
    let url = format!("https://127.0.0.1:{port}{path}");
    let out = run(Command::new("curl")
        .current_dir(dir)
        .args([
            "-s",
            "-i",
            "--max-time",
            "10",
            "--cacert",
            "ca.crt",
            "-w",
            "\n%{http_code}",
        ])
        .args(args)
        .arg(url));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        out.status.code().unwrap_or(-1),
        code.trim().parse().unwrap_or(0),
        body.to_string(),
    )
}

const AUTH: [&str; 2] = ["-u", "alice:password"];
const CERT: [&str; 4] = ["--cert", "client.crt", "--key", "client.key"];
const STRANGER: [&str; 4] = ["--cert", "stranger.crt", "--key", "stranger.key"];

fn start_tls(dir: &Path, web_config: &Path, extra: &[&str]) -> Exporter {
    let e = exporter()
        .args(&["--web-config-file", web_config.to_str().unwrap()])
        .args(extra)
        .spawn();
    e.wait_until(30, |e| {
        let (_, status, body) = curl(dir, e.port, "/metrics", &[&AUTH[..], &CERT[..]].concat());
        status == 200 && body.contains("DCGM_FI_DEV_GPU_TEMP")
    });
    e
}

#[test]
fn tls_client_certificates_and_basic_auth_with_curl() {
    require!("curl", "openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    let cfg = write_web_config(
        d,
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
        &format!("http_server_config:\n  headers:\n    X-Frame-Options: deny\nbasic_auth_users:\n  alice: {ALICE}\n"),
    );
    let e = start_tls(d, &cfg, &[]);
    let with_cert = [&AUTH[..], &CERT[..]].concat();

    let (_, status, page) = curl(d, e.port, "/metrics", &with_cert);
    assert_eq!(status, 200);
    assert!(
        page.to_ascii_lowercase().contains("x-frame-options: deny"),
        "{page}"
    );

    // No client certificate, or one no trusted CA signed: the handshake fails.
    let (code, status, _) = curl(d, e.port, "/metrics", &AUTH);
    assert!(
        code != 0 && status == 0,
        "curl without a client cert: exit {code}, HTTP {status}"
    );
    let (code, _, _) = curl(d, e.port, "/metrics", &[&AUTH[..], &STRANGER[..]].concat());
    assert_ne!(code, 0, "a self-signed client certificate must be refused");

    // Wrong or missing password: 401 asking for basic auth, on every path.
    for (args, path) in [
        (vec!["-u", "alice:wrong"], "/metrics"),
        (vec![], "/metrics"),
        (vec!["-u", "mallory:password"], "/health"),
    ] {
        let (_, status, resp) = curl(d, e.port, path, &[&args[..], &CERT[..]].concat());
        assert_eq!(status, 401, "{args:?} {path}: {resp}");
        assert!(
            resp.contains("WWW-Authenticate: Basic") || resp.contains("www-authenticate: Basic"),
            "{resp}"
        );
        assert!(
            resp.to_ascii_lowercase().contains("x-frame-options: deny"),
            "{resp}"
        );
    }
    let (_, status, resp) = curl(d, e.port, "/health", &with_cert);
    assert_eq!(status, 200, "{resp}");
    assert!(resp.ends_with("OK"), "{resp}");

    // HTTP/2 over TLS (ALPN), as exporter-toolkit's default http2: true.
    let version = |e: &Exporter| {
        let out = run(Command::new("curl")
            .current_dir(d)
            .args([
                "-s",
                "--http2",
                "-o",
                "/dev/null",
                "-w",
                "%{http_version}",
                "--cacert",
                "ca.crt",
            ])
            .args(with_cert.iter())
            .arg(e.url("/metrics").replace("http:", "https:")));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(version(&e), "2");

    // Plain HTTP to the TLS port: Go's answer, 400.
    let mut s = TcpStream::connect(("127.0.0.1", e.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.0 400 Bad Request"), "{answer}");
    assert!(answer.contains("Client sent an HTTP request to an HTTPS server."));
    let http = http_get(&format!("http://127.0.0.1:{}/metrics", e.port));
    assert!(
        !matches!(http, Ok((200, _))),
        "plain HTTP must not be served: {http:?}"
    );

    // http2: false keeps clients on HTTP/1.1 (picked up without a restart; the header
    // stays: dropping it would lower security, which a reload refuses).
    write_web_config(
        d,
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
        &format!(
            "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n\
             basic_auth_users:\n  alice: {ALICE}\n"
        ),
    );
    e.wait_until(10, |e| version(e) == "1.1");
}

#[test]
fn every_client_auth_type_and_the_tls_version_floor() {
    require!("curl", "openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    let start = || {
        let cfg = write_web_config(d, "", "");
        let e = exporter()
            .args(&["--web-config-file", cfg.to_str().unwrap()])
            .spawn();
        e.wait_until(30, |e| curl(d, e.port, "/health", &[]).1 == 200);
        e
    };
    // (client_auth_type, without a cert, with an untrusted cert, with a CA-signed cert)
    let table = [
        ("NoClientCert", true, true, true),
        ("RequestClientCert", true, true, true),
        ("RequireAnyClientCert", false, true, true),
        ("VerifyClientCertIfGiven", true, false, true),
        ("RequireAndVerifyClientCert", false, false, true),
    ];
    for (auth, none, stranger, client) in table {
        let ca = if auth.contains("Verify") {
            "  client_ca_file: ca.crt\n"
        } else {
            ""
        };
        // The web config is re-read when it changes; each row starts from TLS without
        // client certificates, since a change that drops a certificate check is refused
        // until a restart (fail closed).
        let e = start();
        write_web_config(d, &format!("  client_auth_type: {auth}\n{ca}"), "");
        let deadline = Instant::now() + Duration::from_secs(10);
        for (args, expect) in [
            (&[][..], none),
            (&STRANGER[..], stranger),
            (&CERT[..], client),
        ] {
            loop {
                let (_, status, _) = curl(d, e.port, "/health", args);
                if (status == 200) == expect {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{auth} with {args:?}: expected success={expect}, got HTTP {status}; {}",
                    e.stderr()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    let e = start();
    // min_version TLS13: a TLS 1.2-only client is refused, a TLS 1.3 one is served.
    write_web_config(d, "  min_version: TLS13\n", "");
    let s_client = |flag: &str| {
        let out = run(Command::new("openssl").current_dir(d).args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{}", e.port),
            flag,
            "-CAfile",
            "ca.crt",
            "-verify_return_error",
        ]));
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tls12 = s_client("-tls1_2");
        if tls12.contains("alert protocol version")
            || tls12.contains("no protocols available")
            || tls12.contains("Cipher is (NONE)")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "TLS 1.2 still accepted:\n{tls12}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let tls13 = s_client("-tls1_3");
    assert!(
        tls13.contains("TLSv1.3") && tls13.contains("Verify return code: 0"),
        "{tls13}"
    );
}

#[test]
fn a_rotated_certificate_is_served_without_a_restart() {
    require!("curl", "openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    let cfg = write_web_config(d, "", "");
    let e = exporter()
        .args(&["--web-config-file", cfg.to_str().unwrap()])
        .spawn();
    let subject = |e: &Exporter| {
        let (_, _, _) = curl(d, e.port, "/health", &[]);
        let out = run(Command::new("curl")
            .current_dir(d)
            .args(["-s", "-v", "-o", "/dev/null", "--cacert", "ca.crt"])
            .arg(format!("https://127.0.0.1:{}/health", e.port)));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    e.wait_until(30, |e| subject(e).contains("CN=server-one"));
    let pid = e.child.id();
    server_cert(d, "server-two");
    e.wait_until(10, |e| subject(e).contains("CN=server-two"));
    assert_eq!(e.child.id(), pid);
    e.assert_logged("reloaded the web configuration");
}

#[test]
fn a_broken_web_config_is_a_clear_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("web.yml");
    for (text, expect) in [
        ("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "tls_server_config.cipher_suites: TLS_RSA_WITH_RC4_128_SHA"),
        ("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n", "missing.crt"),
        ("basic_auth_users:\n  alice: password\n", "basic_auth_users.alice: not a bcrypt hash"),
    ] {
        std::fs::write(&cfg, text).unwrap();
        let args = ["--web-config-file", cfg.to_str().unwrap()];
        let (code, stderr) = exporter().args(&args).run_to_exit();
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains(expect) && stderr.contains("web.yml"), "{stderr}");
        assert_eq!(stderr.matches("level=fatal").count(), 1, "{stderr}");
    }
    let (code, stderr) = exporter().arg("--enable-pprof").run_to_exit();
    assert_eq!(code, 1);
    assert!(
        stderr.contains("--enable-pprof requires --web-config-file"),
        "{stderr}"
    );
}

#[test]
fn pprof_needs_a_web_config_that_asks_clients_who_they_are() {
    require!("curl", "openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    // Nothing in these identifies a client: start-up fails, naming the file.
    for (name, text) in [
        ("empty.yml", String::new()),
        (
            "http.yml",
            "http_server_config:\n  http2: false\n".to_string(),
        ),
        ("tls.yml", tls.to_string()),
        (
            "any-cert.yml",
            format!("{tls}  client_auth_type: RequireAnyClientCert\n"),
        ),
        (
            "cert-if-given.yml",
            format!("{tls}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"),
        ),
    ] {
        let cfg = d.join(name);
        std::fs::write(&cfg, text).unwrap();
        let (code, stderr) = exporter()
            .args(&["--enable-pprof", "--web-config-file", cfg.to_str().unwrap()])
            .run_to_exit();
        assert_eq!(code, 1, "{name}: {stderr}");
        assert!(
            stderr.contains(
                "--enable-pprof: profiles are served only to clients that are asked who they are"
            ) && stderr.contains(name),
            "{name}: {stderr}"
        );
        assert_eq!(stderr.matches("level=fatal").count(), 1, "{stderr}");
    }
    // Verified client certificates: profiles are served to a client that has one.
    let cfg = write_web_config(
        d,
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
        "",
    );
    let e = exporter()
        .args(&["--enable-pprof", "--web-config-file", cfg.to_str().unwrap()])
        .spawn();
    e.wait_until(30, |e| curl(d, e.port, "/debug/pprof/", &CERT).1 == 200);
    let (_, status, body) = curl(d, e.port, "/debug/pprof/cmdline", &CERT);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("--enable-pprof"), "{body}");
    let (code, status, _) = curl(d, e.port, "/debug/pprof/", &[]);
    assert!(code != 0 && status == 0, "served without a certificate");
}

#[test]
fn a_refused_client_certificate_is_logged_and_counted() {
    require!("curl", "openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    // What many guides make: `openssl x509 -req` without -extfile gives an X.509 v1
    // certificate, which rustls (WebPKI) refuses.
    openssl(
        d,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=v1",
            "-keyout",
            "v1.key",
            "-out",
            "v1.csr",
        ],
    );
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            "v1.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "v1.crt",
        ],
    );
    let text = run(Command::new("openssl")
        .current_dir(d)
        .args(["x509", "-in", "v1.crt", "-noout", "-text"]));
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("Version: 1 (0x0)"),
        "not a v1 certificate"
    );
    let cfg = write_web_config(
        d,
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
        "",
    );
    let e = exporter()
        .args(&["--web-config-file", cfg.to_str().unwrap()])
        .spawn();
    e.wait_until(30, |e| curl(d, e.port, "/health", &CERT).1 == 200);
    let v1 = ["--cert", "v1.crt", "--key", "v1.key"];
    for _ in 0..3 {
        let (code, status, _) = curl(d, e.port, "/health", &v1);
        assert!(code != 0 && status == 0, "a v1 certificate was accepted");
    }
    let counted = "dcgm_exporter_tls_handshake_errors_total{reason=\"UnsupportedCertVersion\"} 3";
    e.wait_until(10, |e| {
        curl(d, e.port, "/metrics", &CERT).2.contains(counted)
    });
    // One warning with the peer and the reason; the repeats within the minute are counted,
    // not logged.
    let stderr = e.stderr();
    let warnings = lines_with(&stderr, "TLS handshake error from 127.0.0.1:");
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("level=warning") && warnings[0].contains("UnsupportedCertVersion"),
        "{}",
        warnings[0]
    );
}

/// `Key=value` of a systemd unit file shipped under etc/systemd/.
fn unit_value(unit: &str, key: &str) -> String {
    let text = std::fs::read_to_string(repo(&format!("etc/systemd/{unit}"))).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{unit} has no {key}="))
        .to_string()
}

#[test]
fn systemd_socket_activation_with_the_shipped_units() {
    require!("systemd-socket-activate");
    // The shipped pair: the socket listens on 9400, the service takes it.
    assert_eq!(unit_value("dcgm-exporter.socket", "ListenStream"), "9400");
    let exec = unit_value("dcgm-exporter.service", "ExecStart");
    let mut args: Vec<String> = exec.split_whitespace().map(String::from).collect();
    assert_eq!(args.remove(0), "/usr/bin/dcgm-exporter");
    assert!(args.contains(&"--web-systemd-socket".to_string()), "{exec}");
    // Here: a free port instead of 9400, the repository's files instead of /etc's.
    for a in args.iter_mut() {
        if a == "/etc/dcgm-exporter/default-counters.csv" {
            *a = repo("etc/default-counters.csv")
                .to_string_lossy()
                .into_owned();
        }
    }
    sim_built();
    let port = free_port();
    let mut child = hermetic(&mut Command::new("systemd-socket-activate"))
        .args([
            "-l",
            &format!("127.0.0.1:{port}"),
            env!("CARGO_BIN_EXE_dcgm-exporter"),
        ])
        .args(&args)
        // -a is ignored with a systemd socket.
        .args([
            "-a",
            "127.0.0.1:1",
            "-c",
            "500",
            "--dcgm-library",
            sim_library().to_str().unwrap(),
        ])
        .env_remove("DCGM_SIM_PROFILE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("systemd-socket-activate");
    // systemd-socket-activate starts the exporter on the first connection.
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        if let Ok((200, body)) = http_get(&format!("http://127.0.0.1:{port}/metrics")) {
            if body.contains("DCGM_FI_DEV_GPU_TEMP") {
                break body;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no metrics through the systemd socket"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(body.contains("dcgm_exporter_collections_total"));

    // Without a socket from systemd the flag is a clear error.
    let (code, stderr) = exporter().arg("--web-systemd-socket").run_to_exit();
    assert_eq!(code, 1);
    assert!(
        stderr.contains("--web-systemd-socket: no socket was passed"),
        "{stderr}"
    );
}

#[test]
fn basic_auth_with_a_hash_from_htpasswd() {
    require!("htpasswd");
    let out = run(Command::new("htpasswd").args(["-nbBC", "10", "bob", "s3cret"]));
    let line = String::from_utf8(out.stdout).unwrap();
    let (user, hash) = line.trim().split_once(':').unwrap();
    let (_dir, cfg) = temp_file(
        "web.yml",
        format!("basic_auth_users:\n  {user}: '{hash}'\n"),
    );
    let e = exporter()
        .args(&["--web-config-file", cfg.to_str().unwrap()])
        .spawn();
    let auth = |pass: &str| {
        let b = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("bob:{pass}"),
        );
        e.get_with("/health", &[("Authorization", &format!("Basic {b}"))])
            .0
    };
    e.wait_until(30, |_| auth("s3cret") == 200);
    assert_eq!(auth("secret"), 401);
}

#[test]
fn gzip_methods_paths_and_health_headers() {
    let e = exporter()
        .args(&["--web-telemetry-path", "/gpu/metrics"])
        .start_at("/gpu/metrics");
    let raw = |req: &str| -> Vec<u8> {
        let mut s = TcpStream::connect(("127.0.0.1", e.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    };
    let split = |resp: &[u8]| -> (String, Vec<u8>) {
        let at = resp
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("header end");
        (
            String::from_utf8_lossy(&resp[..at]).into_owned(),
            resp[at + 4..].to_vec(),
        )
    };

    // gzip: one compressed body that a single-member decoder reads, much smaller.
    let (head, gz) = split(&raw("GET /gpu/metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("content-encoding: gzip"),
        "{head}"
    );
    let mut plain = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut plain)
        .expect("gzip body");
    assert!(
        plain.contains("DCGM_FI_DEV_GPU_TEMP") && plain.contains("dcgm_exporter_collections_total")
    );
    assert!(
        gz.len() * 4 < plain.len(),
        "{} compressed vs {} plain",
        gz.len(),
        plain.len()
    );
    if require_tool("curl", "apt-get install curl; .ci/run does") {
        let out = run(Command::new("curl").args(["-s", "--compressed", &e.url("/gpu/metrics")]));
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(
            body.contains("DCGM_FI_DEV_GPU_TEMP")
                && body.trim_end().ends_with(|c: char| c.is_ascii_digit())
        );
    }

    // HEAD: headers, no body.
    let (head, body) = split(&raw(
        "HEAD /gpu/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert!(
        body.is_empty(),
        "HEAD returned a body of {} bytes",
        body.len()
    );

    // Any method on a route, as upstream's router (no method filter); other paths 404.
    let (head, body) = split(&raw(
        "POST /gpu/metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ));
    assert!(
        head.starts_with("HTTP/1.1 200") && !body.is_empty(),
        "{head}"
    );
    for path in ["/metrics", "/nope", "/gpu/metrics/", "/debug/pprof/"] {
        let (status, body) = e.get(path);
        assert_eq!(
            (status, body.as_str()),
            (404, "404 page not found\n"),
            "{path}"
        );
    }

    // /health: upstream's body and headers.
    let (head, body) = split(&raw(
        "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ));
    let h = head.to_ascii_lowercase();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"OK");
    assert!(h.contains("x-registry-available: true"), "{head}");
    assert!(h.contains("x-content-type-options: nosniff"), "{head}");
    assert!(
        h.contains("content-type: text/plain; charset=utf-8"),
        "{head}"
    );
}

#[test]
fn a_port_in_use_is_reported_once_before_dcgm_starts() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // A library that does not exist: reaching DCGM would fail differently.
    let (code, stderr) = exporter()
        .args(&["-a", &addr, "--dcgm-library", "/nonexistent/libdcgm.so.4"])
        .run_to_exit();
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
    assert_eq!(stderr.matches("in use").count(), 1, "{stderr}");
    assert!(
        !stderr.contains("libdcgm"),
        "DCGM was started first: {stderr}"
    );
}

#[test]
fn a_silent_connection_is_closed_after_the_read_timeout() {
    let e = exporter().args(&["--web-read-timeout", "1s"]).start();
    // Half a request header, never finished: the server closes (no answer), the client's
    // own 15 s limit is not what ends the read.
    let mut s = TcpStream::connect(("127.0.0.1", e.port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let t0 = Instant::now();
    let mut buf = Vec::new();
    let closed = s.read_to_end(&mut buf);
    let waited = t0.elapsed();
    assert!(
        closed.is_ok() && buf.is_empty(),
        "not closed by the server after {waited:?}: {closed:?} {:?}",
        String::from_utf8_lossy(&buf)
    );
    assert!(
        waited < Duration::from_secs(10),
        "the connection stayed open {waited:?}"
    );
    // A keep-alive connection left idle after a response is closed too.
    let mut s = TcpStream::connect(("127.0.0.1", e.port)).unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut answer = Vec::new();
    let closed = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(closed.is_ok(), "idle keep-alive not closed: {closed:?}");
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    let (code, stderr) = exporter()
        .args(&["--web-read-timeout", "soon"])
        .run_to_exit();
    assert_eq!(code, 1);
    assert!(
        stderr.contains("--web-read-timeout 'soon' is not a duration"),
        "{stderr}"
    );
    let (code, stderr) = exporter()
        .args(&["--max-concurrent-scrapes", "0"])
        .run_to_exit();
    assert_eq!(code, 1);
    assert!(
        stderr.contains("--max-concurrent-scrapes 0: must be at least 1"),
        "{stderr}"
    );
}

#[test]
fn a_profile_longer_than_the_read_timeout_arrives_whole() {
    use pprof::protos::Message;
    let (_dir, cfg) = temp_file("web.yml", format!("basic_auth_users:\n  alice: {ALICE}\n"));
    // The limits in docs/security.md: the read timeout bounds reading the request, not the 20 s the
    // handler takes.
    let e = exporter()
        .args(&["--enable-pprof", "--web-config-file", cfg.to_str().unwrap()])
        .args(&["--web-read-timeout", "2s", "--web-write-timeout", "30s"])
        .spawn();
    let auth = format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "alice:password")
    );
    e.wait_until(30, |e| {
        e.get_with("/health", &[("Authorization", &auth)]).0 == 200
    });
    let resp = ureq::get(&e.url("/debug/pprof/profile?seconds=20"))
        .timeout(Duration::from_secs(60))
        .set("Authorization", &auth)
        .call()
        .unwrap_or_else(|err| panic!("the profile was cut: {err}\n{}", e.stderr()));
    assert_eq!(resp.status(), 200);
    let mut body = Vec::new();
    resp.into_reader()
        .read_to_end(&mut body)
        .unwrap_or_else(|err| panic!("the profile was cut: {err}"));
    let profile = pprof::protos::Profile::parse_from_bytes(&body).expect("a whole pprof protobuf");
    assert!(
        profile.duration_nanos >= 19_000_000_000,
        "{}",
        profile.duration_nanos
    );
}

#[test]
fn pprof_serves_a_cpu_profile_behind_the_web_config() {
    use pprof::protos::Message;
    let (dir, cfg) = temp_file("web.yml", format!("basic_auth_users:\n  alice: {ALICE}\n"));
    let e = exporter()
        .args(&["--enable-pprof", "--web-config-file", cfg.to_str().unwrap()])
        .spawn();
    let auth = format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "alice:password")
    );
    let get = |path: &str, auth: Option<&str>| {
        let mut req = ureq::get(&e.url(path)).timeout(Duration::from_secs(20));
        if let Some(a) = auth {
            req = req.set("Authorization", a);
        }
        match req.call() {
            Ok(r) => {
                let mut body = Vec::new();
                let status = r.status();
                r.into_reader().read_to_end(&mut body).unwrap();
                (status, body)
            }
            Err(ureq::Error::Status(c, _)) => (c, Vec::new()),
            Err(err) => (0, err.to_string().into_bytes()),
        }
    };
    e.wait_until(30, |_| get("/health", Some(&auth)).0 == 200);
    assert_eq!(get("/debug/pprof/profile?seconds=1", None).0, 401);
    let (status, body) = get("/debug/pprof/profile?seconds=1", Some(&auth));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let profile = pprof::protos::Profile::parse_from_bytes(&body).expect("a pprof protobuf");
    let strings = &profile.string_table;
    let sample_type: Vec<&str> = profile
        .sample_type
        .iter()
        .map(|t| strings[t.ty as usize].as_str())
        .collect();
    assert!(sample_type.contains(&"cpu"), "{sample_type:?}");
    assert!(
        profile.duration_nanos >= 900_000_000,
        "{}",
        profile.duration_nanos
    );
    // The client users point at it: Go's own `go tool pprof` reads the profile.
    if require_tool("go", "apt-get install golang-go; .ci/run does this") {
        let file = write_in(dir.path(), "cpu.pb", &body);
        let out = output_within(
            std::process::Command::new("go")
                .args(["tool", "pprof", "-symbolize=none", "-raw"])
                .arg(&file)
                .env("HOME", dir.path())
                .env("GOFLAGS", "-mod=mod"),
            BUILD,
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "go tool pprof: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("PeriodType: cpu"), "{text}");
    }
    let (status, _) = get("/debug/pprof/profile?seconds=60", Some(&auth));
    assert_eq!(status, 400, "longer than the write timeout");
    let (status, index) = get("/debug/pprof/", Some(&auth));
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&index).contains("profile"));
}

/// curl over plain HTTP: (HTTP status, body).
fn curl_plain(port: u16, path: &str, args: &[&str]) -> (u16, String) {
    let out = run(Command::new("curl")
        .args(["-s", "--max-time", "10", "-w", "\n%{http_code}"])
        .args(args)
        .arg(format!("http://127.0.0.1:{port}{path}")));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

const REFUSED: &str = "dcgm_exporter_web_config_reload_refused_total";
const LOWERS: &[(&str, &str)] = &[("reason", "lowers_security")];
const INVALID: &[(&str, &str)] = &[("reason", "invalid")];
const LAST_OK: &str = "dcgm_exporter_web_config_last_reload_successful";

/// The series `name` with `labels` on a page as `curl -i` prints it (headers first), or as
/// the body alone.
fn reload_metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let body = text.split_once("\r\n\r\n").map_or(text, |(_, body)| body);
    find_metric(&parse(body), name, labels)
}

/// Issue 30: a web config truncated in place (`: > web.yml`) or rewritten as garbage keeps
/// basic auth in force (a client without a password still gets 401), logs an error naming
/// the file and what it would remove, counts, and shows on /health; a file with fewer users
/// but some is put in force at once. Before, the truncated file served /metrics to anyone.
#[test]
fn a_web_config_that_would_drop_basic_auth_is_refused_until_a_restart() {
    require!("curl");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("web.yml");
    let bob = bcrypt::hash("bob-pass", 4).unwrap();
    std::fs::write(
        &cfg,
        format!("basic_auth_users:\n  alice: {ALICE}\n  bob: '{bob}'\n"),
    )
    .unwrap();
    let e = exporter()
        .args(&["-c", "500", "--web-config-file", cfg.to_str().unwrap()])
        .spawn();
    let page = |e: &Exporter| curl_plain(e.port, "/metrics", &AUTH).1;
    e.wait_until(30, |e| page(e).contains("DCGM_FI_DEV_GPU_TEMP"));
    assert_eq!(curl_plain(e.port, "/metrics", &[]).0, 401);
    assert_eq!(reload_metric(&page(&e), LAST_OK, &[]), Some(1.0));

    // As `: > web.yml` does: the same file, truncated.
    std::fs::File::create(&cfg).unwrap();
    e.wait_until(10, |e| {
        reload_metric(&page(e), REFUSED, LOWERS) == Some(1.0)
    });
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        curl_plain(e.port, "/metrics", &[]).0,
        401,
        "open after truncation"
    );
    assert_eq!(reload_metric(&page(&e), LAST_OK, &[]), Some(0.0));
    let (status, health) = curl_plain(e.port, "/health", &AUTH);
    assert_eq!(status, 200, "{health}");
    assert!(
        health.contains("degraded: ")
            && health.contains("web.yml")
            && health.contains("the file is empty")
            && health.contains("every basic-auth user (alice, bob"),
        "{health}"
    );
    let log = e.stderr();
    assert!(
        log.contains("level=error") && log.contains("refusing the changed file"),
        "{log}"
    );

    // Garbage: refused as invalid, auth still on.
    std::fs::write(&cfg, "basic_auth_users: [\n  {{{\n").unwrap();
    e.wait_until(10, |e| {
        reload_metric(&page(e), REFUSED, INVALID) == Some(1.0)
    });
    assert_eq!(
        curl_plain(e.port, "/metrics", &[]).0,
        401,
        "open after garbage"
    );
    assert!(curl_plain(e.port, "/health", &AUTH)
        .1
        .contains("degraded: "));

    // Fewer users but some: in force, and /health is clean again.
    std::fs::write(&cfg, format!("basic_auth_users:\n  bob: '{bob}'\n")).unwrap();
    let as_bob = ["-u", "bob:bob-pass"];
    // Bob was a user all along: alice's refusal is what says the new file is in force.
    e.wait_until(10, |e| curl_plain(e.port, "/metrics", &AUTH).0 == 401);
    assert_eq!(curl_plain(e.port, "/metrics", &as_bob).0, 200);
    assert_eq!(curl_plain(e.port, "/metrics", &[]).0, 401);
    let (_, health) = curl_plain(e.port, "/health", &as_bob);
    assert!(!health.contains("degraded"), "{health}");
    e.wait_until(10, |e| {
        find_metric(
            &parse(&curl_plain(e.port, "/metrics", &as_bob).1),
            LAST_OK,
            &[],
        ) == Some(1.0)
    });
}

/// Issue 30: a web config rewritten without TLS is refused: the port keeps speaking TLS (a
/// plain request gets Go's 400), /health says what would have been removed. Before, the
/// port answered plain HTTP within half a second.
#[test]
fn a_web_config_without_tls_is_refused_and_tls_stays() {
    require!("curl", "openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    let cfg = write_web_config(d, "", "");
    let e = exporter()
        .args(&["-c", "500", "--web-config-file", cfg.to_str().unwrap()])
        .spawn();
    e.wait_until(30, |e| {
        curl(d, e.port, "/metrics", &[])
            .2
            .contains("DCGM_FI_DEV_GPU_TEMP")
    });
    let tmp = d.join("web-config.yml.tmp");
    std::fs::write(&tmp, "http_server_config:\n  http2: true\n").unwrap();
    std::fs::rename(&tmp, &cfg).unwrap();
    e.wait_until(10, |e| {
        reload_metric(&curl(d, e.port, "/metrics", &[]).2, REFUSED, LOWERS) == Some(1.0)
    });
    std::thread::sleep(Duration::from_millis(700));
    let (code, status, _) = curl(d, e.port, "/metrics", &[]);
    assert_eq!((code, status), (0, 200), "TLS still served");
    let (status, body) = curl_plain(e.port, "/metrics", &[]);
    assert_eq!(status, 400, "plain HTTP on the TLS port: {body}");
    assert!(body.contains("HTTPS server"), "{body}");
    let (_, _, health) = curl(d, e.port, "/health", &[]);
    assert!(
        health.contains("degraded: ") && health.contains("it would remove TLS"),
        "{health}"
    );
}

/// Issue 30: a web config rewritten to accept TLS 1.2 where TLS 1.3 was required, and
/// without the Strict-Transport-Security header, is refused: TLS 1.2 handshakes still fail,
/// the header is still sent, the log and /health name the file and both losses, the
/// self-metrics count it. A later version that raises nothing but keeps both is put in
/// force. Before, the lower version was in force within half a second.
#[test]
fn a_web_config_that_lowers_the_tls_version_or_drops_a_header_is_refused() {
    require!("curl", "openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    let strict = "  min_version: TLS13\n";
    let hsts = "http_server_config:\n  headers:\n    Strict-Transport-Security: max-age=31536000\n";
    let cfg = write_web_config(d, strict, hsts);
    let e = exporter()
        .args(&["-c", "500", "--web-config-file", cfg.to_str().unwrap()])
        .spawn();
    e.wait_until(30, |e| {
        curl(d, e.port, "/metrics", &[])
            .2
            .contains("DCGM_FI_DEV_GPU_TEMP")
    });
    let tls12 = |e: &Exporter| curl(d, e.port, "/health", &["--tlsv1.2", "--tls-max", "1.2"]).0;
    assert_ne!(tls12(&e), 0, "TLS 1.2 refused at first");
    write_web_config(d, "", "");
    e.wait_until(10, |e| {
        reload_metric(&curl(d, e.port, "/metrics", &[]).2, REFUSED, LOWERS) == Some(1.0)
    });
    std::thread::sleep(Duration::from_millis(700));
    assert_ne!(tls12(&e), 0, "TLS 1.2 accepted after the refused change");
    let (code, status, page) = curl(d, e.port, "/metrics", &[]);
    assert_eq!((code, status), (0, 200));
    assert!(
        page.to_ascii_lowercase()
            .contains("strict-transport-security: max-age=31536000"),
        "{page}"
    );
    assert_eq!(reload_metric(&page, LAST_OK, &[]), Some(0.0));
    let (_, _, health) = curl(d, e.port, "/health", &[]);
    for what in [
        "degraded: ",
        "web-config.yml",
        "tls_server_config.min_version TLS13 (it would accept TLS12)",
        "the Strict-Transport-Security header",
    ] {
        assert!(health.contains(what), "{what}: {health}");
    }
    assert!(e.stderr().contains("level=error"), "{}", e.stderr());
    // Keeping both (and adding a header) lowers nothing: in force, /health clean.
    let more = format!("{hsts}    X-Frame-Options: deny\n");
    write_web_config(d, strict, &more);
    e.wait_until(10, |e| {
        curl(d, e.port, "/health", &[])
            .2
            .to_ascii_lowercase()
            .contains("x-frame-options: deny")
    });
    let (_, _, health) = curl(d, e.port, "/health", &[]);
    assert!(!health.contains("degraded"), "{health}");
    assert_ne!(tls12(&e), 0);
}

/// The event history (issue 47) behind the web config: `/events` asks for the same client
/// certificate and basic auth as `/metrics`; hostile queries (a `since` out of range, before
/// 1970 or in the future, unknown types, parameters or entity shapes, a query too long) get
/// a clear 4xx and nothing else; `dcgm-exporter events` reaches it over TLS with flags or a
/// client file; a refused web-config change is itself an event.
#[test]
fn the_event_history_behind_tls_and_basic_auth_refuses_hostile_queries() {
    use crate::support::events::events_command;
    require!("curl", "openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    let ctl = d.join("control");
    std::fs::write(&ctl, "").unwrap();
    let tls = "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n";
    let cfg = write_web_config(d, tls, &format!("basic_auth_users:\n  alice: {ALICE}\n"));
    let e = exporter()
        .args(&["--web-config-file", cfg.to_str().unwrap(), "-c", "200"])
        .control(&ctl)
        .spawn();
    let with_cert = [&AUTH[..], &CERT[..]].concat();
    e.wait_until(30, |e| curl(d, e.port, "/metrics", &with_cert).1 == 200);
    control(&ctl, "xid 0 13");
    e.wait_until(10, |e| {
        let (_, status, body) = curl(d, e.port, "/events?type=xid", &with_cert);
        status == 200 && body.contains("\"entity\":\"gpu:0\"")
    });
    let (_, _, resp) = curl(d, e.port, "/events?since=10m", &with_cert);
    assert!(
        resp.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{resp}"
    );
    for args in [vec![], vec!["-u", "alice:wrong"]] {
        let (_, status, resp) = curl(
            d,
            e.port,
            "/events?since=10m",
            &[&args[..], &CERT[..]].concat(),
        );
        assert_eq!(status, 401, "{args:?}: {resp}");
        assert!(!resp.contains("xid"), "{resp}");
    }
    let long = format!("entity={}", "gpu:1,".repeat(500));
    for (query, want, why) in [
        ("since=99999999999999h", 400, "out of range"),
        ("since=1000000h", 400, "before 1970"),
        ("since=1969-12-31T23:59:59Z", 400, "before 1970"),
        ("since=9999-01-01T00:00:00Z", 400, "in the future"),
        ("since=2026-13-01T00:00:00Z", 400, "not an RFC 3339 time"),
        ("type=bogus", 400, "unknown type"),
        ("entity=gpu:0%3Brm", 400, "not an entity"),
        ("limit=0", 400, "not 1 to"),
        ("drop=1", 400, "unknown parameter"),
        ("since=%E0%A4", 400, "UTF-8"),
        (long.as_str(), 414, "longer than"),
    ] {
        let (_, status, resp) = curl(d, e.port, &format!("/events?{query}"), &with_cert);
        assert_eq!(status, want, "{query}: {resp}");
        assert!(
            resp.contains(why) && !resp.contains("\"events\""),
            "{query}: {resp}"
        );
    }
    // The subcommand, with flags: TLS to the exporter's CA, the client certificate, the user.
    let file = |n: &str| d.join(n).to_str().unwrap().to_string();
    let url = format!("https://127.0.0.1:{}", e.port);
    let tls_flags = [
        "--ca-file",
        &file("ca.crt"),
        "--cert-file",
        &file("client.crt"),
    ];
    let key = ["--key-file", &file("client.key")];
    let flags = [&tls_flags[..], &key[..], &["-a", &url, "--since", "10m"]].concat();
    let (code, table, err) =
        events_command(&[&flags[..], &["-u", "alice", "--password", "password"]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(
        table
            .lines()
            .any(|l| l.contains(" xid ") && l.contains("gpu:0")),
        "{table}"
    );
    let (code, _, err) = events_command(&flags);
    assert_eq!(code, 1);
    assert!(err.contains("401"), "{err}");
    // With a client file (Prometheus' HTTP client shape), the certificate not checked.
    std::fs::write(d.join("pw"), "password\n").unwrap();
    let client = d.join("client.yml");
    std::fs::write(
        &client,
        "basic_auth: {username: alice, password_file: pw}\n\
         tls_config: {cert_file: client.crt, key_file: client.key, insecure_skip_verify: true}\n",
    )
    .unwrap();
    let (code, json, err) = events_command(&[
        "-a",
        &url,
        "--http-config-file",
        client.to_str().unwrap(),
        "--json",
        "--type",
        "xid",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["events"][0]["details"]["xid"], 13, "{json}");
    // A change that would drop basic auth is refused, and recorded.
    write_web_config(d, tls, "");
    e.wait_until(10, |e| {
        let (_, _, body) = curl(d, e.port, "/events?type=web_config_refused", &with_cert);
        body.contains("\"reason\":\"lowers_security\"")
    });
    assert_eq!(curl(d, e.port, "/events", &CERT).1, 401);
    assert!(!e.stderr().contains("panicked"), "{}", e.stderr());
}
