//! The value of the hostname label (dcgm-exporter's rules; the label's name, `Hostname` or
//! `hostname`, follows the emulated release in `collect::targets`).

use crate::config::emulate::UpstreamVersion;

/// With `-k`: `$NODE_NAME`, else the OS hostname. Else in remote mode: the host part of
/// `-r`, except that from 4.8.3 (#697) a loopback host (`localhost`, 127.0.0.0/8, `::1`)
/// means this node: `$NODE_NAME`, else the OS hostname. Else `$NODE_NAME`, else the OS
/// hostname. `None` with `--no-hostname`.
pub(crate) fn resolve(
    no_hostname: bool,
    kubernetes: bool,
    remote_host: Option<&str>,
    node_name: Option<&str>,
    emulate: UpstreamVersion,
) -> Option<String> {
    if no_hostname {
        return None;
    }
    let node = node_name.filter(|s| !s.is_empty()).map(str::to_string);
    if kubernetes {
        return node.or_else(os_hostname);
    }
    if let Some(h) = remote_host {
        if !(emulate.at_least_4_8_3() && is_loopback(h)) {
            return Some(h.to_string());
        }
    }
    node.or_else(os_hostname)
}

/// `localhost` in any case, an IPv4 address in 127.0.0.0/8 or `::1` (the host part of
/// `-r`, brackets and port already removed). The unspecified address `::` is not loopback.
pub(crate) fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

pub(crate) fn os_hostname() -> Option<String> {
    // The kernel's view, as gethostname(2) returns it, without unsafe code here.
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
}

#[cfg(test)]
mod tests {
    use super::{is_loopback, resolve};
    use crate::config::emulate::UpstreamVersion::{V4_8_2, V4_8_4, V4_9_0};

    #[test]
    fn follows_dcgm_exporter_rules() {
        for v in [V4_8_2, V4_8_4, V4_9_0] {
            assert_eq!(resolve(true, false, None, Some("n"), v), None);
            assert_eq!(
                resolve(false, true, Some("he"), Some("node1"), v).as_deref(),
                Some("node1")
            );
            assert_eq!(
                resolve(false, false, Some("he"), Some("node1"), v).as_deref(),
                Some("he")
            );
            assert_eq!(
                resolve(false, false, None, Some("node1"), v).as_deref(),
                Some("node1")
            );
            assert!(resolve(false, false, None, None, v).is_some_and(|h| !h.is_empty()));
        }
    }

    /// Upstream #697 (4.8.3): a loopback `-r` names this node; 4.8.2 kept `localhost`.
    #[test]
    fn a_loopback_host_engine_names_this_node_from_4_8_3() {
        for h in [
            "localhost",
            "LocalHost",
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "[::1]",
        ] {
            assert!(is_loopback(h), "{h}");
            assert_eq!(
                resolve(false, false, Some(h), Some("node1"), V4_8_4).as_deref(),
                Some("node1"),
                "{h}"
            );
            assert_eq!(
                resolve(false, false, Some(h), Some("node1"), V4_9_0).as_deref(),
                Some("node1"),
                "{h}"
            );
            assert_eq!(
                resolve(false, false, Some(h), Some("node1"), V4_8_2).as_deref(),
                Some(h),
                "{h}"
            );
        }
        // Without NODE_NAME: the OS hostname, never the loopback name.
        let os = resolve(false, false, Some("127.0.0.1"), None, V4_8_4).unwrap();
        assert_ne!(os, "127.0.0.1");
        for h in [
            "::",
            "0.0.0.0",
            "example.com",
            "10.0.0.1",
            "localhost.example.com",
        ] {
            assert!(!is_loopback(h), "{h}");
            assert_eq!(
                resolve(false, false, Some(h), Some("node1"), V4_8_4).as_deref(),
                Some(h)
            );
        }
    }
}
