//! Where the server listens: the `-a` address (Go's `:port` means every interface, IPv6
//! included), or the sockets systemd passes (`--web-systemd-socket`: `LISTEN_FDS` and
//! `LISTEN_PID`, file descriptors from 3). Binding happens before DCGM starts, so a port
//! in use is reported at once.

use crate::output::Error;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

/// Resolves dcgm-exporter's `-a` value: `:9400` (all interfaces), `host:port`, `[v6]:port`.
pub(crate) fn listen_addrs(addr: &str) -> Result<Vec<SocketAddr>, Error> {
    if let Some(port) = addr.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| Error::InvalidPort {
            addr: addr.into(),
            port: port.into(),
        })?;
        // Go's ":port" listens on every interface, IPv6 included.
        return Ok(vec![
            SocketAddr::from(([0u16; 8], port)),
            SocketAddr::from(([0u8; 4], port)),
        ]);
    }
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|source| Error::Resolve {
            addr: addr.into(),
            source,
        })?
        .collect();
    if addrs.is_empty() {
        return Err(Error::NoAddress { addr: addr.into() });
    }
    Ok(addrs)
}

/// Binds every address of `-a`. On a dual-stack host `[::]` already covers `0.0.0.0`, so
/// only a total failure is an error; it is reported once, with each distinct reason.
pub(crate) fn bind(address: &str) -> Result<Vec<TcpListener>, Error> {
    let mut bound = Vec::new();
    let mut reasons = Vec::new();
    for mut addr in listen_addrs(address)? {
        // `:0` is one random port for every address, not one per address family: the
        // later ones take the port the first was given.
        if addr.port() == 0 {
            if let Some(port) = bound
                .first()
                .and_then(|l: &TcpListener| l.local_addr().ok())
            {
                addr.set_port(port.port());
            }
        }
        match TcpListener::bind(addr) {
            Ok(l) => bound.push(l),
            Err(e) => reasons.push(e),
        }
    }
    if bound.is_empty() {
        return Err(Error::Bind {
            address: address.into(),
            reasons,
        });
    }
    Ok(bound)
}

/// The TCP sockets systemd passed to this process.
pub(crate) fn systemd() -> Result<Vec<TcpListener>, Error> {
    let mut fds = listenfd::ListenFd::from_env();
    if fds.len() == 0 {
        return Err(Error::NoSystemdSocket);
    }
    (0..fds.len())
        .map(|i| match fds.take_tcp_listener(i) {
            Ok(Some(l)) => Ok(l),
            Ok(None) => Err(Error::SystemdSocketTaken { fd: i + 3 }),
            Err(source) => Err(Error::SystemdNotTcp { fd: i + 3, source }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_listen_addresses() {
        assert_eq!(listen_addrs(":9400").unwrap().len(), 2);
        assert_eq!(listen_addrs("127.0.0.1:9500").unwrap()[0].port(), 9500);
        assert!(listen_addrs("[::1]:9401").unwrap()[0].is_ipv6());
        assert!(matches!(
            listen_addrs(":http").unwrap_err(),
            Error::InvalidPort { addr, port } if addr == ":http" && port == "http"
        ));
        assert!(matches!(
            listen_addrs("nohost").unwrap_err(),
            Error::Resolve { addr, .. } if addr == "nohost"
        ));
    }

    #[test]
    fn port_0_is_one_port_for_every_address() {
        let bound = bind(":0").unwrap();
        let ports: std::collections::BTreeSet<u16> = bound
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        assert_eq!(ports.len(), 1, "{bound:?}");
        assert_ne!(ports.first(), Some(&0));
    }

    #[test]
    fn a_port_in_use_is_one_error() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let e = bind(&addr).unwrap_err();
        let Error::Bind { address, reasons } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(address, &addr);
        assert!(reasons
            .iter()
            .all(|r| r.kind() == std::io::ErrorKind::AddrInUse));
        // The operator reads each distinct reason once.
        let text = e.to_string();
        assert_eq!(text.matches("in use").count(), 1, "{text}");
        assert!(
            text.starts_with(&format!("cannot listen on {addr}: ")),
            "{text}"
        );
    }
}
