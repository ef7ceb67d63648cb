//! Who a process belongs to, from its cgroup path (`/proc/<pid>/cgroup`).
//!
//! `pod_uid_of_pid` is dcgm-exporter's pid mapper: the first `pod<uid>` component, systemd's
//! `_` turned back into `-`. `owner_of_pid` also knows the owners outside Kubernetes (usage
//! accounting on a Docker/podman host or a Slurm node): a container by its full id, a Slurm
//! job by its id; see `owner_of_path` for the forms recognised.

pub use super::usage::Owner;
use std::path::Path;

/// The pod UID in one cgroup path, or `None`. Like dcgm-exporter's regex
/// `pod([a-f0-9_-]+)`, the first match decides; one shorter than a UUID is rejected.
pub(crate) fn pod_uid_of_path(path: &str) -> Option<String> {
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
    first_in_cgroup_file(text, pod_uid_of_path)
}

/// The first answer `of_path` gives for the paths of a cgroup file: the v1 controller lines
/// first (under v1 the unified line of a hybrid system is often systemd's view, not the
/// runtime's), then the unified (v2) line.
fn first_in_cgroup_file<T>(text: &str, of_path: impl Fn(&str) -> Option<T>) -> Option<T> {
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
        if let Some(found) = of_path(path) {
            return Some(found);
        }
    }
    unified.and_then(of_path)
}

/// The pod UID of a running process, read under `proc_root` (normally `/proc`).
#[cfg(test)]
pub(crate) fn pod_uid_of_pid(proc_root: &Path, pid: u32) -> Option<String> {
    pod_uid_of_cgroup_file(&read_cgroup_file(proc_root, pid)?)
}

fn read_cgroup_file(proc_root: &Path, pid: u32) -> Option<String> {
    std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup")).ok()
}

/// The owner of a running process, read under `proc_root` (normally `/proc`); `None` for a
/// process gone, unreadable, or in no cgroup we recognise (a host process).
#[cfg(test)]
pub(crate) fn owner_of_pid(proc_root: &Path, pid: u32) -> Option<Owner> {
    owner_of_cgroup_file(&read_cgroup_file(proc_root, pid)?)
}

/// One read of a process's cgroup file, both answers: its pod UID by dcgm-exporter's rule
/// (`pod_uid_of_pid`, for the per-pod series of `-k`) and its usage owner (`owner_of_pid`;
/// a pod UID found outside a `kubepods` hierarchy still makes a pod owner, as it makes
/// per-pod series, unless the path names a container or job).
pub(crate) fn pod_and_owner_of_pid(proc_root: &Path, pid: u32) -> (Option<String>, Option<Owner>) {
    let Some(text) = read_cgroup_file(proc_root, pid) else {
        return (None, None);
    };
    let pod = pod_uid_of_cgroup_file(&text);
    let owner = owner_of_cgroup_file(&text).or_else(|| pod.clone().map(Owner::Pod));
    (pod, owner)
}

/// The owner in a `/proc/<pid>/cgroup` file, v1 controller lines before the unified line.
pub fn owner_of_cgroup_file(text: &str) -> Option<Owner> {
    first_in_cgroup_file(text, owner_of_path)
}

/// The owner in one cgroup path, the first of:
/// * a Kubernetes pod: a `pod<uid>` component under a `kubepods` hierarchy (cgroupfs or
///   systemd driver; a pod's container ids below it do not count, the pod does);
/// * a Slurm job: `job_<id>` below Slurm's own cgroup, `slurm[_<node>]/uid_<n>/job_<id>/…`
///   (cgroup/v1) or `…/[<node>_]slurmstepd.scope/job_<id>/…` (cgroup/v2);
/// * a container: `docker-<id>.scope`, `libpod-<id>.scope` (podman, systemd manager),
///   `libpod-<id>` (podman, cgroupfs), `crio-<id>.scope`, `cri-containerd-<id>.scope`,
///   `nerdctl-<id>.scope`, or a bare `<id>` component (`/docker/<id>`, containerd's
///   `/<namespace>/<id>`), `<id>` being 64 lowercase hex digits. podman's monitor
///   (`libpod-conmon-<id>`) is not its container. With containers nested (Docker in
///   Docker) the outermost counts: it is the one the host's runtime knows.
///
/// `..` components (a reader in another cgroup namespace) are skipped.
pub(crate) fn owner_of_path(path: &str) -> Option<Owner> {
    let components = || path.split('/').filter(|c| !c.is_empty() && *c != "..");
    if components().any(|c| c.contains("kubepods")) {
        if let Some(uid) = pod_uid_of_path(path).filter(|u| !u.starts_with('-')) {
            return Some(Owner::Pod(uid));
        }
    }
    slurm_job(components()).or_else(|| components().find_map(container_id))
}

/// `job_<id>` after a Slurm component (`slurm`, `slurm_<node>`, `[<node>_]slurmstepd.scope`).
fn slurm_job<'a>(mut components: impl Iterator<Item = &'a str>) -> Option<Owner> {
    components
        .find(|c| *c == "slurm" || c.starts_with("slurm_") || c.ends_with("slurmstepd.scope"))?;
    components.find_map(|c| {
        let id = c.strip_prefix("job_")?;
        (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
            .then(|| Owner::Job(id.to_string()))
    })
}

/// The unit-name prefixes container runtimes give a container's cgroup.
const CONTAINER_PREFIXES: [&str; 5] =
    ["docker-", "libpod-", "crio-", "cri-containerd-", "nerdctl-"];

fn container_id(component: &str) -> Option<Owner> {
    let is_id =
        |s: &str| s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let name = component.strip_suffix(".scope").unwrap_or(component);
    let id = CONTAINER_PREFIXES
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
    is_id(id).then(|| Owner::Container(id.to_string()))
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

    const ID: &str = "3f8a1c0e9b7d4a6f5e2c1b0a9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e";
    const ID2: &str = "cf21d19260ace8544fe8b769fc2638bf2c0873dfbfff0b6253f0569b26a1d5eb";

    fn container() -> Option<Owner> {
        Some(Owner::Container(ID.to_string()))
    }

    fn job(id: &str) -> Option<Owner> {
        Some(Owner::Job(id.to_string()))
    }

    #[test]
    fn owners_from_real_cgroup_paths() {
        let pod = Some(Owner::Pod(
            "a9c80282-3f6b-4d5b-84d5-a137a6668011".to_string(),
        ));
        let cases: Vec<(String, Option<Owner>)> = vec![
            // Docker, cgroupfs driver (v1 and v2): Docker's "Runtime metrics" page,
            // /sys/fs/cgroup/memory/docker/<longid>/.
            (format!("/docker/{ID}"), container()),
            // Docker, systemd driver: /sys/fs/cgroup/system.slice/docker-<longid>.scope.
            (format!("/system.slice/docker-{ID}.scope"), container()),
            // Rootless Docker (systemd driver, user manager).
            (
                format!("/user.slice/user-1000.slice/user@1000.service/user.slice/docker-{ID}.scope"),
                container(),
            ),
            // Read from inside another container's cgroup namespace.
            (format!("/../docker-{ID}.scope"), container()),
            // Docker in Docker: the outer container is the one the host's runtime knows.
            (format!("/docker/{ID}/docker/{ID2}"), container()),
            // podman, systemd manager, root and rootless (podman issues #20423, #11690).
            (format!("/machine.slice/libpod-{ID}.scope/container"), container()),
            (
                format!("/user.slice/user-0.slice/user@0.service/machine.slice/libpod-{ID2}.scope/container"),
                Some(Owner::Container(ID2.to_string())),
            ),
            (
                format!("/user.slice/user-1006.slice/user@1006.service/user.slice/libpod-{ID}.scope"),
                container(),
            ),
            // A container of a podman pod: the "pod" in libpod_pod_ is not a Kubernetes pod.
            (
                format!("/machine.slice/machine-libpod_pod_{ID2}.slice/libpod-{ID}.scope/container"),
                container(),
            ),
            // podman's monitor is not its container; cgroupfs manager, old (podman #359)
            // and current layout.
            (format!("/machine.slice/libpod-conmon-{ID}.scope"), None),
            (format!("/libpod_parent/libpod-conmon-{ID2}/{ID}"), container()),
            (format!("/libpod_parent/libpod-{ID}"), container()),
            // containerd (nerdctl, systemd and cgroupfs: /<namespace>/<id>), CRI-O.
            (format!("/system.slice/nerdctl-{ID}.scope"), container()),
            (format!("/default/{ID}"), container()),
            (format!("/system.slice/crio-{ID}.scope"), container()),
            (format!("/system.slice/cri-containerd-{ID}.scope"), container()),
            // Kubernetes: the pod, not its container.
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poda9c80282_3f6b_4d5b_84d5_a137a6668011.slice/cri-containerd-{ID}.scope"),
                pod.clone(),
            ),
            (
                format!("/kubepods/besteffort/poda9c80282-3f6b-4d5b-84d5-a137a6668011/{ID}"),
                pod.clone(),
            ),
            // kind / k3s nest kubepods under the kubelet's slice.
            (
                "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-poda9c80282_3f6b_4d5b_84d5_a137a6668011.slice/cri-containerd-x.scope".to_string(),
                pod,
            ),
            // Slurm cgroup/v1 (slurm.schedmd.com/cgroups.html): slurm/uid_<uid>/job_<id>/
            // step_<step>/task_<n>; slurm_<node> with several slurmd on one host.
            ("/slurm/uid_1000/job_4242/step_0/task_0".to_string(), job("4242")),
            ("/slurm/uid_1000/job_4242/step_batch/task_0".to_string(), job("4242")),
            ("/slurm_node07/uid_0/job_17/step_extern".to_string(), job("17")),
            // Slurm cgroup/v2 (slurm.schedmd.com/cgroup_v2.html, hierarchy overview).
            (
                "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0".to_string(),
                job("4242"),
            ),
            (
                "/system.slice/node07_slurmstepd.scope/job_99/step_interactive/user/task_special".to_string(),
                job("99"),
            ),
            // slurmstepd itself, not a job.
            ("/system.slice/slurmstepd.scope/system".to_string(), None),
            // Host processes and near misses.
            ("/system.slice/slurmd.service".to_string(), None),
            ("/system.slice/docker.service".to_string(), None),
            ("/user.slice/user-1000.slice/session-3.scope".to_string(), None),
            ("/init.scope".to_string(), None),
            ("/".to_string(), None),
            (String::new(), None),
            ("/batch/job_12/step_0".to_string(), None),
            ("/slurm/uid_1000/job_12a/step_0".to_string(), None),
            (format!("/system.slice/docker-{}.scope", &ID[1..]), None),
            (format!("/docker/{}", ID.to_uppercase()), None),
            (format!("/docker/{ID}0"), None),
        ];
        for (path, want) in cases {
            assert_eq!(owner_of_path(&path), want, "{path}");
        }
    }

    #[test]
    fn owner_lines_v1_before_unified_and_from_the_proc_tree() {
        // cgroup v1 hybrid with Slurm: the devices/memory hierarchies hold the job, the
        // cpu one slurmd's service, the unified line systemd's view.
        let v1 = "12:devices:/slurm/uid_1000/job_7/step_0/task_0\n\
                  4:cpu,cpuacct:/system.slice/slurmd.service\n\
                  1:name=systemd:/system.slice/slurmd.service\n\
                  0::/system.slice/slurmd.service\n";
        assert_eq!(owner_of_cgroup_file(v1), job("7"));
        let v2 = format!("0::/system.slice/docker-{ID}.scope\n");
        assert_eq!(owner_of_cgroup_file(&v2), container());
        assert_eq!(owner_of_cgroup_file("garbage\n\n0::/init.scope\n"), None);

        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("42")).unwrap();
        std::fs::write(dir.path().join("42/cgroup"), v2).unwrap();
        std::fs::create_dir(dir.path().join("43")).unwrap();
        std::fs::write(dir.path().join("43/cgroup"), v1).unwrap();
        assert_eq!(owner_of_pid(dir.path(), 42), container());
        assert_eq!(owner_of_pid(dir.path(), 43), job("7"));
        // Gone (or never there): no owner, no error.
        assert_eq!(owner_of_pid(dir.path(), 44), None);
        assert_eq!(pod_and_owner_of_pid(dir.path(), 44), (None, None));
        assert_eq!(pod_and_owner_of_pid(dir.path(), 42), (None, container()));

        // A podman container: the pod rule of dcgm-exporter mistakes `libpod-<id>` for a
        // pod, the owner is the container.
        let podman = format!("0::/machine.slice/libpod-{ID}.scope/container\n");
        std::fs::create_dir(dir.path().join("45")).unwrap();
        std::fs::write(dir.path().join("45/cgroup"), podman).unwrap();
        assert_eq!(
            pod_and_owner_of_pid(dir.path(), 45),
            (Some(format!("-{ID}")), container())
        );
        // A pod path outside any kubepods hierarchy: still the pod, as for -k.
        std::fs::create_dir(dir.path().join("46")).unwrap();
        std::fs::write(
            dir.path().join("46/cgroup"),
            "0::/pod12345678-1234-1234-1234-123456789012/c\n",
        )
        .unwrap();
        let uid = "12345678-1234-1234-1234-123456789012".to_string();
        assert_eq!(
            pod_and_owner_of_pid(dir.path(), 46),
            (Some(uid.clone()), Some(Owner::Pod(uid)))
        );
    }
}
