//! Whether this machine can reach a `vsock://CID:PORT` host engine at all, told apart from
//! an engine that is merely not answering yet: DCGM's own connect reports both as
//! "connection invalid", which says nothing about a kernel without vsock.

use std::time::Duration;

/// What one connection attempt to a vsock address found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Something accepted the connection (then closed).
    Reachable,
    /// The kernel cannot do vsock here: no AF_VSOCK, or no transport for the CID. Waiting
    /// will not help.
    Unsupported(String),
    /// vsock works but nothing answered (refused, timed out): the engine may still come.
    Unreachable(String),
}

/// The meaning of the errno of `socket(AF_VSOCK)` (`at_socket`) or of `connect`.
pub fn classify(errno: i32, at_socket: bool) -> Probe {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    match errno {
        libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT | libc::ESOCKTNOSUPPORT => Probe::Unsupported(
            format!("this kernel has no vsock support (AF_VSOCK: {text})"),
        ),
        libc::ENODEV | libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EADDRNOTAVAIL => {
            Probe::Unsupported(format!(
                "no vsock transport reaches that CID ({text}; in a VM load virtio_vsock, on \
                 the host vhost_vsock, for the local CID vsock_loopback)"
            ))
        }
        _ if at_socket => Probe::Unsupported(format!("cannot open an AF_VSOCK socket: {text}")),
        _ => Probe::Unreachable(text),
    }
}

/// One connection attempt to `cid:port`, bounded by `timeout`.
pub fn probe(cid: u32, port: u32, timeout: Duration) -> Probe {
    // SAFETY: plain integer arguments; the result is checked below.
    let fd = unsafe { libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return classify(last_errno(), true);
    }
    let fd = Fd(fd);
    // The kernel's own bound for a vsock connect (SO_VM_SOCKETS_CONNECT_TIMEOUT, level
    // AF_VSOCK, option 6 in <linux/vm_sockets.h>).
    const SO_VM_SOCKETS_CONNECT_TIMEOUT_OLD: libc::c_int = 6;
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(timeout.subsec_micros() as i32),
    };
    // SAFETY: `tv` is a valid timeval for the duration of the call; a failure only leaves
    // the kernel's default (2 s) in place.
    unsafe {
        libc::setsockopt(
            fd.0,
            libc::AF_VSOCK,
            SO_VM_SOCKETS_CONNECT_TIMEOUT_OLD,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    // SAFETY: all-zero bytes are a valid sockaddr_vm; the fields are set below.
    let mut addr: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
    addr.svm_family = libc::AF_VSOCK as libc::sa_family_t;
    addr.svm_cid = cid;
    addr.svm_port = port;
    // SAFETY: `addr` is a sockaddr_vm of the size passed; `fd` is an open socket.
    let rc = unsafe {
        libc::connect(
            fd.0,
            (&addr as *const libc::sockaddr_vm).cast(),
            std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Probe::Reachable
    } else {
        classify(last_errno(), false)
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor came from socket() and is closed once, here.
        unsafe { libc::close(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_say_whether_waiting_can_help() {
        for (errno, at_socket) in [
            (libc::EAFNOSUPPORT, true),
            (libc::ENODEV, false),
            (libc::EHOSTUNREACH, false),
            (libc::EPERM, true),
        ] {
            assert!(
                matches!(classify(errno, at_socket), Probe::Unsupported(_)),
                "{errno}"
            );
        }
        match classify(libc::EAFNOSUPPORT, true) {
            Probe::Unsupported(m) => assert!(m.contains("no vsock support"), "{m}"),
            other => panic!("{other:?}"),
        }
        for errno in [libc::ECONNREFUSED, libc::ETIMEDOUT, libc::ECONNRESET] {
            assert!(matches!(classify(errno, false), Probe::Unreachable(_)));
        }
    }
}
