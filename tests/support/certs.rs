//! Test certificates made with the openssl command line: a CA and the certificates it
//! signs (X.509 v3, which WebPKI verifiers require).

use std::path::Path;
use std::process::Command;

/// A new P-256 key, unencrypted, for `openssl req`.
pub const EC_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
];

/// The extensions of a server certificate for 127.0.0.1.
pub const SERVER_EXT: &str =
    "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
/// The extensions of a client certificate.
pub const CLIENT_EXT: &str = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";

pub fn openssl(dir: &Path, args: &[&str]) {
    let out = super::output_within(
        Command::new("openssl").current_dir(dir).args(args),
        super::QUICK,
    );
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ca.key` and `ca.crt`: a self-signed CA named `cn`, valid two days.
pub fn ca(dir: &Path, cn: &str) {
    let subj = format!("/CN={cn}");
    let mut args = vec!["req", "-x509", "-days", "2", "-subj", &subj];
    args.extend(EC_KEY);
    args.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    openssl(dir, &args);
}

/// `<name>.key` and `<name>.crt`: a certificate for `cn` signed by `ca.crt`, valid two
/// days, with the extension lines `ext` (which make it v3).
pub fn signed(dir: &Path, name: &str, cn: &str, ext: &str) {
    let (key, csr, crt, extf) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
        format!("{name}.ext"),
    );
    let subj = format!("/CN={cn}");
    let mut req = vec!["req", "-subj", &subj, "-keyout", &key, "-out", &csr];
    req.extend(EC_KEY);
    openssl(dir, &req);
    std::fs::write(dir.join(&extf), ext).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            &extf,
            "-out",
            &crt,
        ],
    );
}

/// `ca.key`/`ca.crt` (a CA named `ca_cn`), and signed by it `server.key`/`server.crt`
/// (named `server_cn`, with the extensions `server_ext`) and `client.key`/`client.crt`
/// (named `client`).
pub fn ca_server_client(dir: &Path, ca_cn: &str, server_cn: &str, server_ext: &str) {
    ca(dir, ca_cn);
    signed(dir, "server", server_cn, server_ext);
    signed(dir, "client", "client", CLIENT_EXT);
}
