//! Which pod a process belongs to, from its cgroup path (`/proc/<pid>/cgroup`), as
//! dcgm-exporter's pid mapper does: the first `pod<uid>` component, systemd's `_` turned
//! back into `-`.

use std::path::Path;

/// The pod UID in one cgroup path, or `None`. Like dcgm-exporter's regex
/// `pod([a-f0-9_-]+)`, the first match decides; one shorter than a UUID is rejected.
pub fn pod_uid_of_path(path: &str) -> Option<String> {
    let mut rest = path;
    while let Some(at) = rest.find("pod") {
        let after = &rest[at + 3..];
        let len = after
            .bytes()
            .take_while(|b| matches!(b, b'a'..=b'f' | b'0'..=b'9' | b'_' | b'-'))
            .count();
        if len > 0 {
            let uid = after[..len].replace('_', "-");
            return (uid.len() >= 32).then_some(uid);
        }
        rest = after;
    }
    None
}

/// The pod UID in a `/proc/<pid>/cgroup` file: cgroup v1 controller lines are searched
/// before the unified (v2) line.
pub fn pod_uid_of_cgroup_file(text: &str) -> Option<String> {
    let mut unified = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            unified.get_or_insert(path);
            continue;
        }
        if let Some(uid) = pod_uid_of_path(path) {
            return Some(uid);
        }
    }
    unified.and_then(pod_uid_of_path)
}

/// The pod UID of a running process, read under `proc_root` (normally `/proc`).
pub fn pod_uid_of_pid(proc_root: &Path, pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    pod_uid_of_cgroup_file(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    // dcgm-exporter's extractPodUID table.
    #[test]
    fn pod_uid_from_cgroup_paths() {
        let uid = "a9c80282-3f6b-4d5b-84d5-a137a6668011";
        for (path, want) in [
            (
                "/kubepods/besteffort/poda9c80282-3f6b-4d5b-84d5-a137a6668011/container123",
                Some(uid),
            ),
            (
                "/kubepods/burstable/pod12345678-1234-1234-1234-123456789012/abc",
                Some("12345678-1234-1234-1234-123456789012"),
            ),
            (
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poda9c80282_3f6b_4d5b_84d5_a137a6668011.slice",
                Some(uid),
            ),
            ("/system.slice/docker.service", None),
            ("/kubepods/pod123/container", None),
            ("", None),
        ] {
            assert_eq!(pod_uid_of_path(path).as_deref(), want, "{path}");
        }
    }

    #[test]
    fn controllers_before_unified() {
        let v1 = "12:memory:/kubepods/burstable/pod12345678-1234-1234-1234-123456789012/c\n\
                  0::/kubepods/besteffort/poda9c80282-3f6b-4d5b-84d5-a137a6668011/c\n";
        assert_eq!(
            pod_uid_of_cgroup_file(v1).as_deref(),
            Some("12345678-1234-1234-1234-123456789012")
        );
        let v2 = "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poda9c80282_3f6b_4d5b_84d5_a137a6668011.slice/cri-containerd-1.scope\n";
        assert_eq!(
            pod_uid_of_cgroup_file(v2).as_deref(),
            Some("a9c80282-3f6b-4d5b-84d5-a137a6668011")
        );
        assert_eq!(pod_uid_of_cgroup_file("0::/user.slice\n"), None);
    }

    #[test]
    fn reads_proc_layout() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("42")).unwrap();
        std::fs::write(
            dir.path().join("42/cgroup"),
            "0::/kubepods/pod12345678-1234-1234-1234-123456789012/x\n",
        )
        .unwrap();
        assert_eq!(
            pod_uid_of_pid(dir.path(), 42).as_deref(),
            Some("12345678-1234-1234-1234-123456789012")
        );
        assert_eq!(pod_uid_of_pid(dir.path(), 43), None);
    }
}
