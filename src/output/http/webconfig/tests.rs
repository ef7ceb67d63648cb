use super::*;

fn p(yaml: &str) -> Result<WebConfig, Error> {
    parse(yaml, Path::new("/etc/dcgm-exporter/web-config.yaml"))
}

const ALICE: &str = "$2y$10$CWCEbs7mt8QFrToJR9OcG.tduEKpx9SROhWnaDHQgQX4Q6hqWNASa";

#[test]
fn the_helm_charts_file() {
    let c = p(&format!(
        "tls_server_config:\n  cert_file: /etc/dcgm-exporter/tls/tls.crt\n  key_file: tls/tls.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: /etc/dcgm-exporter/tls/ca.crt\n\
         basic_auth_users:\n  alice: {ALICE}\n"
    ))
    .unwrap();
    let t = c.tls.clone().unwrap();
    assert_eq!(t.cert, Pem::File("/etc/dcgm-exporter/tls/tls.crt".into()));
    assert_eq!(t.key, Pem::File("/etc/dcgm-exporter/tls/tls.key".into()));
    assert_eq!(t.client_auth, ClientAuth::RequireAndVerifyClientCert);
    assert_eq!(
        (t.min_version, t.max_version),
        (TlsVersion::Tls12, TlsVersion::Tls13)
    );
    assert_eq!(c.users["alice"], ALICE);
    assert!(c.http2);
    assert_eq!(c.files().len(), 3);
}

#[test]
fn empty_or_auth_only_is_plain_http() {
    assert_eq!(p("").unwrap().tls, None);
    assert_eq!(p("tls_server_config: {}\n").unwrap().tls, None);
    let c = p(&format!("basic_auth_users:\n  bob: '{ALICE}'\n")).unwrap();
    assert!(c.tls.is_none() && c.users.contains_key("bob"));
}

#[test]
fn errors_name_the_file_and_key() {
    use Problem as P;
    type Is = fn(&Problem) -> bool;
    let cases: [(&str, Is); 14] = [
        ("tls_server_config:\n  cert_file: a\n", |e| matches!(e, P::NoKey)),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n",
            |e| {
                matches!(e, P::OldTlsVersion { key: "min_version", version } if version == "TLS10")
            },
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  max_version: TLS11\n",
            |e| matches!(e, P::OldTlsVersion { key: "max_version", .. }),
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS13\n  max_version: TLS12\n",
            |e| matches!(e, P::MinAboveMax),
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Sometimes\n",
            |e| matches!(e, P::ClientAuthType(v) if v == "Sometimes"),
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: VerifyClientCertIfGiven\n",
            |e| matches!(e, P::NoClientCa(ClientAuth::VerifyClientCertIfGiven)),
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n",
            |e| matches!(e, P::UnusedClientCa),
        ),
        (
            "tls_server_config:\n  cert_file: a\n  cert: inline\n  key_file: b\n",
            |e| matches!(e, P::BothPem { key: "cert" }),
        ),
        // serde names an unknown key only in its message: that text is all there is.
        ("tls_server_config:\n  certfile: a\n", |e| {
            matches!(e, P::Yaml(y) if y.to_string().contains("unknown field `certfile`"))
        }),
        ("basic_auth_users:\n  alice: plaintext\n", |e| {
            matches!(e, P::NotBcrypt { user } if user == "alice")
        }),
        ("http_server_config:\n  headers:\n    Server: x\n", |e| {
            matches!(e, P::HeaderNotAllowed { name } if name == "Server")
        }),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
            |e| {
                matches!(e, P::HeaderValueNotAllowed { header: "X-Frame-Options", value, .. } if value == "allow")
            },
        ),
        // As above: serde's message is the only place that names the key.
        ("nonsense: 1\n", |e| {
            matches!(e, P::Yaml(y) if y.to_string().contains("unknown field `nonsense`"))
        }),
        ("tls_server_config: [1\n", |e| matches!(e, P::Yaml(_))),
    ];
    for (yaml, is) in cases {
        let Error { path, problem } = p(yaml).unwrap_err();
        assert_eq!(path, Path::new("/etc/dcgm-exporter/web-config.yaml"));
        assert!(is(&problem), "{yaml}: {problem:?}");
    }
    // Pins the text an operator reads: the file first, then the key.
    let e = p("tls_server_config:\n  cert_file: a\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "--web-config-file /etc/dcgm-exporter/web-config.yaml: tls_server_config.key_file: \
         missing (required with any TLS setting)"
    );
}

#[test]
fn headers_and_http2() {
    let c = p("http_server_config:\n  http2: false\n  headers:\n    x-frame-options: deny\n    Strict-Transport-Security: max-age=31536000\n").unwrap();
    assert!(!c.http2);
    assert_eq!(
        c.headers,
        vec![
            (
                "Strict-Transport-Security".to_string(),
                "max-age=31536000".to_string()
            ),
            ("X-Frame-Options".to_string(), "deny".to_string()),
        ]
    );
}

#[test]
fn what_a_new_version_would_remove() {
    let tls = |auth: &str| {
        format!("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: {auth}\n  client_ca_file: c\n")
    };
    let users = |names: &[&str]| {
        let mut y = "basic_auth_users:\n".to_string();
        for n in names {
            y.push_str(&format!("  {n}: {ALICE}\n"));
        }
        y
    };
    let prot = |yaml: &str| p(yaml).unwrap().protection();
    let full = prot(&format!(
        "{}{}",
        tls("RequireAndVerifyClientCert"),
        users(&["alice", "bob"])
    ));
    assert!(full.removed_by(&full).is_empty());
    // Fewer users but some, another CA, another certificate: nothing removed.
    let fewer = prot(&format!(
        "{}{}",
        tls("RequireAndVerifyClientCert"),
        users(&["bob"])
    ));
    assert!(full.removed_by(&fewer).is_empty());
    assert_eq!(
        full.removed_by(&prot("")),
        [
            Loss::Tls,
            Loss::CertRequirement,
            Loss::CertVerification,
            Loss::Users(vec!["alice".into(), "bob".into()])
        ]
    );
    // Each weaker client_auth_type loses what it no longer does.
    for (auth, expect) in [
        ("VerifyClientCertIfGiven", Loss::CertRequirement),
        ("RequireAnyClientCert", Loss::CertVerification),
    ] {
        let lost = full.removed_by(&prot(&format!("{}{}", tls(auth), users(&["bob"]))));
        assert_eq!(lost, [expect], "{auth}");
    }
    let no_ca = prot(&format!(
        "tls_server_config:\n  cert_file: a\n  key_file: b\n{}",
        users(&["bob"])
    ));
    assert_eq!(
        full.removed_by(&no_ca),
        [Loss::CertRequirement, Loss::CertVerification]
    );
    // Adding TLS, a certificate check or the first user removes nothing.
    assert!(prot("").removed_by(&full).is_empty());
    assert!(no_ca.removed_by(&full).is_empty());
}

/// Issue 30: lowering TLS versions, widening suites or curves, dropping or weakening a
/// header and turning HTTP/2 back on are losses; the opposite moves are not.
#[test]
fn tls_limits_headers_and_http2_that_a_new_version_would_lower() {
    let tls = |extra: &str| {
        p(&format!(
            "tls_server_config:\n  cert_file: a\n  key_file: b\n{extra}"
        ))
        .unwrap()
        .protection()
    };
    let strict = tls(
        "  min_version: TLS13\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n  \
         curve_preferences: [X25519]\nhttp_server_config:\n  http2: false\n  headers:\n    \
         Strict-Transport-Security: max-age=31536000; includeSubDomains\n    \
         X-Frame-Options: deny\n    Content-Security-Policy: default-src 'self'\n",
    );
    assert!(strict.removed_by(&strict).is_empty());
    // In the headers' order (sorted by name).
    let dropped = |name: &str, old: &str| Loss::HeaderDropped {
        name: name.into(),
        old: old.into(),
    };
    assert_eq!(
        strict.removed_by(&tls("")),
        [
            Loss::MinVersion {
                old: TlsVersion::Tls13,
                new: TlsVersion::Tls12
            },
            Loss::Suites(Widened::Everything),
            Loss::Curves(Widened::Everything),
            dropped("Content-Security-Policy", "default-src 'self'"),
            dropped(
                "Strict-Transport-Security",
                "max-age=31536000; includeSubDomains"
            ),
            dropped("X-Frame-Options", "deny"),
            Loss::Http2,
        ]
    );
    let one = |extra: &str| strict.removed_by(&tls(extra));
    let base =
        "  min_version: TLS13\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n  \
                curve_preferences: [X25519]\nhttp_server_config:\n  http2: false\n  headers:\n    \
                X-Frame-Options: deny\n    Content-Security-Policy: default-src 'none'\n";
    // Each weaker header value alone; another CSP is the operator's call.
    for (hsts, weaker) in [
        ("max-age=31536000; includeSubDomains", false),
        ("max-age=63072000; includeSubDomains; preload", false),
        ("max-age=600; includeSubDomains", true),
        ("max-age=31536000", true),
        ("max-age=0", true),
    ] {
        let lost = one(&format!("{base}    Strict-Transport-Security: {hsts}\n"));
        assert_eq!(lost.len(), usize::from(weaker), "{hsts}: {lost:?}");
    }
    let lost = one(&format!(
        "{}    Strict-Transport-Security: max-age=31536000; includeSubDomains\n",
        base.replace("X-Frame-Options: deny", "X-Frame-Options: sameorigin")
    ));
    assert_eq!(
        lost,
        [Loss::HeaderWeakened {
            name: "X-Frame-Options".into(),
            old: "deny".into(),
            new: "sameorigin".into()
        }]
    );
    // A suite or curve added to the list widens it; a TLS 1.3 name does not (always on).
    let hsts = "    Strict-Transport-Security: max-age=31536000; includeSubDomains\n";
    let lost = one(&format!(
        "{}{hsts}",
        base.replace(
            "cipher_suites: [",
            "cipher_suites: [TLS_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, "
        )
    ));
    assert_eq!(
        lost,
        [Loss::Suites(Widened::Names(vec![
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()
        ]))]
    );
    let lost = one(&format!(
        "{}{hsts}",
        base.replace("[X25519]", "[X25519, CurveP256]")
    ));
    assert_eq!(
        lost,
        [Loss::Curves(Widened::Names(vec!["CurveP256".into()]))]
    );
    let lost = tls("").removed_by(&tls("  max_version: TLS12\n"));
    assert_eq!(
        lost,
        [Loss::MaxVersion {
            old: TlsVersion::Tls13,
            new: TlsVersion::Tls12
        }]
    );
    // Raising: from the defaults to strict loses nothing; so does switching HTTP/2 off.
    assert!(tls("").removed_by(&strict).is_empty());
    // Without TLS (plain HTTP) HTTP/2 is never spoken: turning it on lowers nothing.
    let plain = |h2: bool| {
        p(&format!("http_server_config:\n  http2: {h2}\n"))
            .unwrap()
            .protection()
    };
    assert!(plain(false).removed_by(&plain(true)).is_empty());
}

/// Pins the words of the refusal's log line and `/health` note, which operators read.
#[test]
fn each_loss_in_words() {
    let names = |n: &[&str]| Widened::Names(n.iter().map(|s| s.to_string()).collect());
    for (loss, words) in [
        (Loss::Tls, "TLS (the port would answer plain HTTP)"),
        (Loss::CertRequirement, "the client-certificate requirement"),
        (Loss::CertVerification, "client-certificate verification"),
        (
            Loss::Users(vec!["alice".into(), "bob".into()]),
            "every basic-auth user (alice, bob: anyone would be let in)",
        ),
        (
            Loss::MinVersion {
                old: TlsVersion::Tls13,
                new: TlsVersion::Tls12,
            },
            "tls_server_config.min_version TLS13 (it would accept TLS12)",
        ),
        (
            Loss::MaxVersion {
                old: TlsVersion::Tls13,
                new: TlsVersion::Tls12,
            },
            "tls_server_config.max_version TLS13 (connections would use TLS12)",
        ),
        (
            Loss::Suites(Widened::Everything),
            "the limit of tls_server_config.cipher_suites (it would allow the library's whole set)",
        ),
        (
            Loss::Curves(names(&["X25519", "CurveP256"])),
            "the limit of tls_server_config.curve_preferences (it would allow X25519, CurveP256)",
        ),
        (
            Loss::HeaderDropped {
                name: "X-Frame-Options".into(),
                old: "deny".into(),
            },
            "the X-Frame-Options header (\"deny\")",
        ),
        (
            Loss::HeaderWeakened {
                name: "X-Frame-Options".into(),
                old: "deny".into(),
                new: "sameorigin".into(),
            },
            "the X-Frame-Options header \"deny\" (it would be \"sameorigin\")",
        ),
        (
            Loss::Http2,
            "http_server_config.http2: false (HTTP/2 would be spoken again)",
        ),
    ] {
        assert_eq!(loss.to_string(), words);
    }
}
