//! The value of the `Hostname` label (dcgm-exporter's rules).

/// With `-k`: `$NODE_NAME`, else the OS hostname. Else in remote mode: the host part of
/// `-r`. Else `$NODE_NAME`, else the OS hostname. `None` with `--no-hostname`.
pub fn resolve(
    no_hostname: bool,
    kubernetes: bool,
    remote_host: Option<&str>,
    node_name: Option<&str>,
) -> Option<String> {
    if no_hostname {
        return None;
    }
    let node = node_name.filter(|s| !s.is_empty()).map(str::to_string);
    if kubernetes {
        return node.or_else(os_hostname);
    }
    if let Some(h) = remote_host {
        return Some(h.to_string());
    }
    node.or_else(os_hostname)
}

fn os_hostname() -> Option<String> {
    // The kernel's view, as gethostname(2) returns it, without unsafe code here.
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
}

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn follows_dcgm_exporter_rules() {
        assert_eq!(resolve(true, false, None, Some("n")), None);
        assert_eq!(
            resolve(false, true, Some("he"), Some("node1")).as_deref(),
            Some("node1")
        );
        assert_eq!(
            resolve(false, false, Some("he"), Some("node1")).as_deref(),
            Some("he")
        );
        assert_eq!(
            resolve(false, false, None, Some("node1")).as_deref(),
            Some("node1")
        );
        assert!(resolve(false, false, None, None).is_some_and(|h| !h.is_empty()));
    }
}
