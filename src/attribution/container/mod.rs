//! Container labels outside Kubernetes (`--container-labels`): on a Docker or podman host,
//! GPUs explicitly assigned to a running container get a `container` label (its name, or
//! its short id) from the runtime's API on its unix socket (`--container-runtime-socket`).
//!
//! A thread of its own asks the runtime (`GET /containers/json`, then
//! `GET /containers/{id}/json` each) once per collection interval, every refresh bounded by
//! a deadline; the collection only reads its last answer, so a slow or missing socket
//! never delays a collection or a scrape. Failures reach the attribution stage's report
//! (warned once, a self-metric, a /health note). Which configurations count as an explicit
//! assignment: [`docker`].

pub mod docker;
pub mod http;

use super::usage::{Consumer, Owner};
use super::{DeviceLabelSource, DeviceLabels};
use crate::runtime::supervisor::Supervisor;
use docker::{GpuRef, Inspect, Listed};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Where Docker and podman listen by default, in the order they are tried when
/// `--container-runtime-socket` is empty.
const DEFAULT_SOCKETS: [&str; 2] = ["/var/run/docker.sock", "/run/podman/podman.sock"];

/// The socket to use: the flag's path (`unix://` allowed), or the first default that
/// exists (else Docker's, so the error names the usual place).
pub(crate) fn socket_path(flag: &str) -> PathBuf {
    let flag = flag.trim();
    let flag = flag.strip_prefix("unix://").unwrap_or(flag);
    if !flag.is_empty() {
        return PathBuf::from(flag);
    }
    let mut candidates: Vec<PathBuf> = DEFAULT_SOCKETS.iter().map(PathBuf::from).collect();
    // Rootless podman.
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR") {
        candidates.push(Path::new(&dir).join("podman/podman.sock"));
    }
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKETS[0]))
}

/// A running container that was given GPUs.
#[derive(Clone, Debug)]
struct Held {
    /// The full id (64 hex digits), as its processes' cgroups name it.
    id: String,
    /// Its name (or short id), the `container` label's value.
    label: String,
    gpus: Vec<GpuRef>,
}

/// Running containers and the GPUs each was given.
type Assignments = Vec<Held>;

/// The last refresh: `None` until the first one ends.
/// The refreshing thread's name, in the supervisor's lines and start-up's error.
const THREAD: &str = "container-labels";

type Latest = Arc<Mutex<Option<Result<Assignments, String>>>>;

pub(crate) struct ContainerSource {
    latest: Latest,
    /// GPU UUID -> index, from the page (for `NVIDIA_VISIBLE_DEVICES=0`, `all`).
    gpus: HashMap<String, u32>,
    /// `container`, or `container_name` with `-o`.
    label: &'static str,
    /// Dropped with the source, which ends the refresh thread at its next wake-up.
    _stop: mpsc::Sender<()>,
}

impl ContainerSource {
    /// Starts refreshing from `socket` every `interval`, each refresh given `deadline`.
    pub(crate) fn start(
        socket: PathBuf,
        interval: Duration,
        deadline: Duration,
        label: &'static str,
    ) -> Result<ContainerSource, crate::attribution::Error> {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let own = own_container_id(&read("/proc/self/cgroup"), &read("/proc/self/mountinfo"));
        if let Some(id) = &own {
            tracing::debug!("running in container {id}: it is not counted as holding GPUs");
        }
        let latest: Latest = Arc::new(Mutex::new(None));
        let (stop, stopped) = mpsc::channel::<()>();
        let sink = latest.clone();
        // Each round is one refresh (bounded by `deadline`) and one wait; longer silence
        // means a stuck thread.
        let stall_after = (interval + deadline) * 2 + Duration::from_secs(5);
        Supervisor::global()
            .spawn(THREAD, Some(stall_after), move |beat| {
                // Labels from before a failure are not served while the thread is down.
                let _withdraw = WithdrawOnPanic(sink.clone());
                let mut seen = Inspected::new();
                let mut skipped = Skipped::new();
                loop {
                    let answer = refresh(
                        &socket,
                        Instant::now() + deadline,
                        &mut seen,
                        &mut skipped,
                        own.as_deref(),
                    );
                    *sink.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer);
                    beat.alive();
                    match stopped.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => continue,
                        _ => return Ok(()),
                    }
                }
            })
            .map_err(|source| crate::attribution::Error::Thread {
                name: THREAD,
                source,
            })?;
        Ok(ContainerSource {
            latest,
            gpus: HashMap::new(),
            label,
            _stop: stop,
        })
    }
}

/// The id of the container a process runs in, from its `/proc/self/cgroup` (cgroup v1, or
/// v2 in the host's cgroup namespace) or else its `/proc/self/mountinfo`: Docker and podman
/// bind-mount the container's own `hostname`, `hosts` and `resolv.conf` from a directory
/// named by its id (`…/docker/containers/<id>/`, podman's
/// `…/overlay-containers/<id>/userdata/`), which shows even in a private cgroup namespace.
///
/// The exporter is usually run as `docker run --gpus all`: without this, its own container
/// would hold every GPU: its name on every GPU's series, and for usage accounting no GPU
/// ever held by one container alone.
fn own_container_id(cgroup: &str, mountinfo: &str) -> Option<String> {
    if let Some(Owner::Container(id)) = super::pids::owner_of_cgroup_file(cgroup) {
        return Some(id);
    }
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split(' ');
        let root = fields.nth(3)?;
        let mount_point = fields.next()?;
        if !matches!(
            mount_point,
            "/etc/hostname" | "/etc/hosts" | "/etc/resolv.conf"
        ) {
            return None;
        }
        let (_, after) = root.rsplit_once("containers/")?;
        let id = after.split('/').next()?;
        (id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| id.to_string())
    })
}

/// Replaces the last answer by an error when the refresh thread panics: the labels it
/// found are withdrawn (and the source reported failing) rather than served unchanged
/// while nobody refreshes them.
struct WithdrawOnPanic(Latest);

impl Drop for WithdrawOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Err(
                "the container-labels thread failed; its labels are withdrawn until it refreshes again".into(),
            ));
        }
    }
}

/// What was inspected, by container id: the GPUs a container was created with cannot
/// change while it runs, so each running container is inspected once.
type Inspected = HashMap<String, Vec<GpuRef>>;

/// Containers whose inspection failed (an error status, an answer that is not an
/// inspection), each logged once until it is inspected or gone.
type Skipped = HashSet<String>;

/// One look at the runtime: every running container and its GPUs (names from the listing,
/// so renames show; new containers inspected, gone ones forgotten), but the exporter's own
/// (`own`). A container whose inspection fails is left out (logged once) and asked again
/// next time; only a failing runtime (its listing, the socket) fails the refresh.
fn refresh(
    socket: &Path,
    deadline: Instant,
    seen: &mut Inspected,
    skipped: &mut Skipped,
    own: Option<&str>,
) -> Result<Assignments, String> {
    let list = get_json(socket, "/containers/json", deadline)?.ok_or_else(|| {
        format!(
            "{}: no /containers/json (not a Docker-compatible API)",
            socket.display()
        )
    })?;
    let listed: Vec<Listed> = serde_json::from_slice(&list)
        .map_err(|e| format!("GET /containers/json on {}: {e}", socket.display()))?;
    seen.retain(|id, _| listed.iter().any(|c| &c.id == id));
    skipped.retain(|id| listed.iter().any(|c| &c.id == id));
    let mut out = Vec::new();
    for c in &listed {
        // Ids are hex; anything else is not put into a URL.
        if c.id.is_empty() || !c.id.chars().all(|ch| ch.is_ascii_alphanumeric()) {
            continue;
        }
        if Some(c.id.as_str()) == own {
            continue;
        }
        if !seen.contains_key(&c.id) {
            match inspect(socket, &c.id, deadline)? {
                Ok(None) => continue,
                Ok(Some(gpus)) => {
                    skipped.remove(&c.id);
                    seen.insert(c.id.clone(), gpus);
                }
                Err(e) => {
                    if skipped.insert(c.id.clone()) {
                        tracing::warn!(
                            "container {} left out of the container labels until it can be inspected: {e}",
                            c.label()
                        );
                    }
                    continue;
                }
            }
        }
        if let Some(gpus) = seen.get(&c.id).filter(|g| !g.is_empty()) {
            out.push(Held {
                id: c.id.clone(),
                label: c.label(),
                gpus: gpus.clone(),
            });
        }
    }
    Ok(out)
}

/// `GET path` as JSON: the body, `None` for a 404, an error for another status. The outer
/// error is the socket's (the runtime failing), the inner one this answer's.
fn get_json_status(
    socket: &Path,
    path: &str,
    deadline: Instant,
) -> Result<Result<Option<Vec<u8>>, String>, String> {
    let (status, body) = http::get(socket, path, deadline).map_err(|e| e.to_string())?;
    Ok(match status {
        200 => Ok(Some(body)),
        // Gone between the listing and the inspection.
        404 => Ok(None),
        s => Err(format!(
            "GET {path} on {}: HTTP {s}: {}",
            socket.display(),
            String::from_utf8_lossy(&body).trim()
        )),
    })
}

fn get_json(socket: &Path, path: &str, deadline: Instant) -> Result<Option<Vec<u8>>, String> {
    get_json_status(socket, path, deadline)?
}

/// One container's GPUs: `Ok(None)` when it is gone; the inner error when the runtime's
/// answer about this container is an error or no inspection.
fn inspect(
    socket: &Path,
    id: &str,
    deadline: Instant,
) -> Result<Result<Option<Vec<GpuRef>>, String>, String> {
    let path = format!("/containers/{id}/json");
    Ok(get_json_status(socket, &path, deadline)?.and_then(|body| {
        body.map(|b| {
            serde_json::from_slice::<Inspect>(&b)
                .map(|i| i.gpus())
                .map_err(|e| format!("GET {path} on {}: {e}", socket.display()))
        })
        .transpose()
    }))
}

/// The devices a container was given: GPUs by UUID (indexes and `all` through `gpus`), MIG
/// devices by their UUID; sorted, once each.
fn devices_of(held: &Held, gpus: &HashMap<String, u32>) -> Vec<String> {
    let mut devices: Vec<String> = Vec::new();
    for r in &held.gpus {
        match r {
            GpuRef::Uuid(u) | GpuRef::Mig(u) => devices.push(u.clone()),
            GpuRef::Index(i) => devices.extend(
                gpus.iter()
                    .filter(|(_, idx)| *idx == i)
                    .map(|(u, _)| u.clone()),
            ),
            GpuRef::All => devices.extend(gpus.keys().cloned()),
        }
    }
    devices.sort();
    devices.dedup();
    devices
}

/// Device labels from assignments. A device several containers share gets their names
/// joined by commas, sorted, rather than one of them at random.
fn device_labels(
    assignments: &Assignments,
    gpus: &HashMap<String, u32>,
    label: &str,
) -> Vec<DeviceLabels> {
    let mut by_device: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for held in assignments {
        for d in devices_of(held, gpus) {
            by_device.entry(d).or_default().push(&held.label);
        }
    }
    by_device
        .into_iter()
        .map(|(device_uuid, mut names)| {
            names.sort_unstable();
            names.dedup();
            DeviceLabels {
                device_uuid,
                labels: vec![(label.to_string(), names.join(","))],
            }
        })
        .collect()
}

/// Usage-accounting consumers from assignments: each container on each of its devices, on
/// its own (its processes are told apart by the id in their cgroup), in device then label
/// order.
fn consumers(
    assignments: &Assignments,
    gpus: &HashMap<String, u32>,
    label: &str,
) -> Vec<(String, Consumer)> {
    let mut out: Vec<(String, Consumer)> = assignments
        .iter()
        .flat_map(|held| {
            devices_of(held, gpus).into_iter().map(|d| {
                let c = Consumer {
                    labels: vec![(label.to_string(), held.label.clone())],
                    owner: Some(Owner::Container(held.id.clone())),
                    replica: false,
                    source: super::usage::CONTAINERS,
                };
                (d, c)
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.0, &a.1.labels, &a.1.owner).cmp(&(&b.0, &b.1.labels, &b.1.owner)));
    out
}

impl DeviceLabelSource for ContainerSource {
    fn name(&self) -> &'static str {
        super::usage::CONTAINERS
    }

    fn observe_gpus(&mut self, gpus: &HashMap<String, u32>) {
        self.gpus.clone_from(gpus);
    }

    fn device_labels(&mut self) -> Result<Vec<DeviceLabels>, String> {
        match &*self.latest.lock().unwrap_or_else(PoisonError::into_inner) {
            None => Ok(Vec::new()),
            Some(Err(e)) => Err(e.clone()),
            Some(Ok(a)) => Ok(device_labels(a, &self.gpus, self.label)),
        }
    }

    fn consumers(&mut self) -> Vec<(String, Consumer)> {
        match &*self.latest.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(Ok(a)) => consumers(a, &self.gpus, self.label),
            // Not answered yet, or failing: the labels are withdrawn, and so are these.
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(id: char, label: &str, gpus: Vec<GpuRef>) -> Held {
        Held {
            id: id.to_string().repeat(64),
            label: label.into(),
            gpus,
        }
    }

    fn three_containers() -> Assignments {
        vec![
            held(
                'a',
                "train",
                vec![GpuRef::Index(1), GpuRef::Mig("MIG-x".into())],
            ),
            held('b', "notebook", vec![GpuRef::All]),
            held('c', "stale", vec![GpuRef::Index(7)]),
        ]
    }

    /// For usage accounting, containers sharing a GPU are not joined: each is a consumer of
    /// its own, owned by its full id (which its processes' cgroups name).
    #[test]
    fn consumers_are_one_per_container_and_device_with_the_full_id() {
        let gpus = HashMap::from([("GPU-a".to_string(), 0), ("GPU-b".to_string(), 1)]);
        let got: Vec<(String, String, Option<Owner>)> =
            consumers(&three_containers(), &gpus, "container_name")
                .into_iter()
                .map(|(d, c)| {
                    assert!(!c.replica);
                    assert_eq!(c.labels.len(), 1);
                    assert_eq!(c.labels[0].0, "container_name");
                    (d, c.labels[0].1.clone(), c.owner)
                })
                .collect();
        let owner = |ch: char| Some(Owner::Container(ch.to_string().repeat(64)));
        assert_eq!(
            got,
            [
                ("GPU-a".into(), "notebook".into(), owner('b')),
                ("GPU-b".into(), "notebook".into(), owner('b')),
                ("GPU-b".into(), "train".into(), owner('a')),
                ("MIG-x".into(), "train".into(), owner('a')),
            ]
        );
    }

    #[test]
    fn the_exporters_own_container_from_its_cgroup_or_mounts() {
        let id = "3f8a1c0e9b7d4a6f5e2c1b0a9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e";
        // cgroup v1 / host cgroup namespace: the cgroup names it.
        let v1 = format!("12:memory:/docker/{id}\n0::/\n");
        assert_eq!(own_container_id(&v1, "").as_deref(), Some(id));
        // Private cgroup namespace (Docker's default on cgroup v2): `0::/`; the bind mounts
        // of its hostname/hosts/resolv.conf name it (Docker, then podman).
        let docker = format!(
            "1021 1001 0:52 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/X\n\
             1030 1021 259:2 /var/lib/docker/containers/{id}/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/nvme0n1p2 rw\n\
             1031 1021 259:2 /var/lib/docker/containers/{id}/hostname /etc/hostname rw,relatime - ext4 /dev/nvme0n1p2 rw\n"
        );
        assert_eq!(own_container_id("0::/\n", &docker).as_deref(), Some(id));
        let podman = format!(
            "620 600 0:25 /containers/storage/overlay-containers/{id}/userdata/hostname /etc/hostname rw,nosuid,nodev - tmpfs tmpfs rw\n"
        );
        assert_eq!(own_container_id("0::/\n", &podman).as_deref(), Some(id));
        // A host process; a volume from another container's directory is not ours.
        let other = format!(
            "700 600 259:2 /var/lib/docker/containers/{id}/hostname /data/x rw - ext4 /dev/sda rw\n"
        );
        assert_eq!(
            own_container_id("0::/user.slice/session-1.scope\n", &other),
            None
        );
        assert_eq!(own_container_id("", ""), None);
    }

    #[test]
    fn indexes_and_all_resolve_through_the_page_and_sharing_joins_names() {
        let gpus = HashMap::from([("GPU-a".to_string(), 0), ("GPU-b".to_string(), 1)]);
        let a = three_containers();
        let got: Vec<(String, String)> = device_labels(&a, &gpus, "container")
            .into_iter()
            .map(|d| (d.device_uuid, d.labels[0].1.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("GPU-a".into(), "notebook".into()),
                ("GPU-b".into(), "notebook,train".into()),
                ("MIG-x".into(), "train".into()),
            ]
        );
    }

    /// The runtime's socket turning hostile (an overflowing Content-Length or chunk size):
    /// the refresh fails with an error naming it, the labels are withdrawn (the source
    /// reports the error, so the stage adds none and /health says why), and the thread
    /// lives on: when the runtime answers sanely again, the labels come back.
    #[test]
    fn a_hostile_runtime_withdraws_the_labels_and_the_thread_lives_on() {
        type Answer = Result<Vec<DeviceLabels>, String>;
        use std::sync::atomic::{AtomicUsize, Ordering};
        const UUID: &str = "GPU-11111111-2222-3333-4444-555555555555";
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let mode = Arc::new(AtomicUsize::new(0));
        let m = mode.clone();
        let ok = |body: String| {
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        };
        let _peer = http::tests::peer_with(&socket, move |req| match m.load(Ordering::SeqCst) {
            1 => format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n[]",
                usize::MAX
            )
            .into_bytes(),
            2 => b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n[]".to_vec(),
            3 => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n"
                .to_vec(),
            _ if req.starts_with("GET /containers/json ") => {
                ok(r#"[{"Id":"4f1c2b","Names":["/trainer"]}]"#.into())
            }
            _ => ok(format!(
                r#"{{"Id":"4f1c2b","Name":"/trainer","HostConfig":{{"Runtime":"runc","DeviceRequests":[{{"Driver":"","Count":0,"DeviceIDs":["{UUID}"],"Capabilities":[["gpu"]]}}]}}}}"#
            )),
        });
        let mut src = ContainerSource::start(
            socket,
            Duration::from_millis(20),
            Duration::from_secs(5),
            "container",
        )
        .unwrap();
        let until = |src: &mut ContainerSource, what: &str, ok: &dyn Fn(&Answer) -> bool| {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let got = src.device_labels();
                if ok(&got) {
                    return got;
                }
                assert!(Instant::now() < deadline, "{what}: still {got:?}");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        let labelled = |r: &Result<Vec<DeviceLabels>, String>| matches!(r, Ok(l) if l.len() == 1 && l[0].device_uuid == UUID && l[0].labels == [("container".to_string(), "trainer".to_string())]);
        let _ = until(&mut src, "labels", &labelled);
        for (hostile, says) in [
            (1, "message head is too large"),
            (2, "invalid content-length parsed"),
            (3, "invalid chunk size: overflow"),
        ] {
            mode.store(hostile, Ordering::SeqCst);
            let e = until(&mut src, "the error", &|r| r.is_err()).unwrap_err();
            // A source's failure reaches /health as text (DeviceLabelSource); hyper's words.
            assert!(
                e.contains(says) && e.contains("GET /containers/json"),
                "{e}"
            );
            // Usage accounting withdraws the container with its labels.
            assert!(src.consumers().is_empty());
            mode.store(0, Ordering::SeqCst);
            let _ = until(&mut src, "labels again", &labelled);
            let held = src.consumers();
            assert_eq!(held.len(), 1, "{held:?}");
            assert_eq!(held[0].0, UUID);
            assert_eq!(held[0].1.owner, Some(Owner::Container("4f1c2b".into())));
        }
        assert!(
            !Supervisor::global()
                .notes()
                .iter()
                .any(|n| n.contains("container-labels")),
            "{:?}",
            Supervisor::global().notes()
        );
    }

    /// The exporter in a container of its own (`docker run --gpus all`): that container is
    /// left out of the refresh, so it neither labels every GPU nor holds them all.
    #[test]
    fn the_exporters_own_container_holds_nothing() {
        let own = "e".repeat(64);
        let user = "a".repeat(64);
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let (o, u) = (own.clone(), user.clone());
        let _peer = http::tests::peer_with(&socket, move |req| {
            let body = if req.starts_with("GET /containers/json ") {
                format!(
                    r#"[{{"Id":"{o}","Names":["/dcgm-exporter"]}},{{"Id":"{u}","Names":["/trainer"]}}]"#
                )
            } else {
                let id = if req.contains(&o) { &o } else { &u };
                format!(
                    r#"{{"Id":"{id}","HostConfig":{{"Runtime":"runc","DeviceRequests":[{{"Driver":"","Count":-1,"Capabilities":[["gpu"]]}}]}}}}"#
                )
            };
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        });
        let deadline = || Instant::now() + Duration::from_secs(10);
        let ids = |a: Assignments| a.into_iter().map(|h| h.id).collect::<Vec<_>>();
        let mut seen = Inspected::new();
        let all = refresh(&socket, deadline(), &mut seen, &mut Skipped::new(), None).unwrap();
        assert_eq!(ids(all), [own.clone(), user.clone()]);
        let mut seen = Inspected::new();
        let others = refresh(
            &socket,
            deadline(),
            &mut seen,
            &mut Skipped::new(),
            Some(&own),
        )
        .unwrap();
        assert_eq!(ids(others), [user]);
        assert!(!seen.contains_key(&own), "not even inspected");
    }

    /// One container the runtime cannot inspect (an error status) and one whose inspection
    /// is not one (mistyped): each is left out on its own, the others keep their labels,
    /// and once inspectable it is back.
    #[test]
    fn a_container_that_cannot_be_inspected_is_skipped_not_the_whole_refresh() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (good, failing, mistyped) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let healed = Arc::new(AtomicBool::new(false));
        let (g, f, m, h) = (
            good.clone(),
            failing.clone(),
            mistyped.clone(),
            healed.clone(),
        );
        let _peer = http::tests::peer_with(&socket, move |req| {
            let gpu = |id: &str| {
                format!(
                    r#"{{"Id":"{id}","HostConfig":{{"Runtime":"runc","DeviceRequests":[{{"Driver":"","Count":-1,"Capabilities":[["gpu"]]}}]}}}}"#
                )
            };
            let (status, body) = if req.starts_with("GET /containers/json ") {
                (
                    200,
                    format!(
                        r#"[{{"Id":"{g}","Names":["/good"]}},{{"Id":"{f}","Names":["/failing"]}},{{"Id":"{m}","Names":["/mistyped"]}}]"#
                    ),
                )
            } else if req.contains(&f) && !h.load(Ordering::SeqCst) {
                (500, r#"{"message":"inspect failed"}"#.to_string())
            } else if req.contains(&m) {
                (200, r#"{"Id":7,"HostConfig":"runc"}"#.to_string())
            } else if req.contains(&f) {
                (200, gpu(&f))
            } else {
                (200, gpu(&g))
            };
            format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        });
        let deadline = || Instant::now() + Duration::from_secs(10);
        let ids = |a: Assignments| a.into_iter().map(|h| h.id).collect::<Vec<_>>();
        let (mut seen, mut skipped) = (Inspected::new(), Skipped::new());
        for _ in 0..2 {
            let got = refresh(&socket, deadline(), &mut seen, &mut skipped, None).unwrap();
            assert_eq!(ids(got), std::slice::from_ref(&good));
            let mut s: Vec<&String> = skipped.iter().collect();
            s.sort();
            assert_eq!(s, [&failing, &mistyped]);
        }
        healed.store(true, Ordering::SeqCst);
        let got = refresh(&socket, deadline(), &mut seen, &mut skipped, None).unwrap();
        assert_eq!(ids(got), [good.clone(), failing.clone()]);
        assert_eq!(skipped.iter().collect::<Vec<_>>(), [&mistyped]);
    }

    #[test]
    fn the_socket_flag_takes_unix_urls_and_defaults_to_a_known_place() {
        assert_eq!(
            socket_path("unix:///run/x.sock"),
            PathBuf::from("/run/x.sock")
        );
        assert_eq!(socket_path("/tmp/d.sock"), PathBuf::from("/tmp/d.sock"));
        let d = socket_path("");
        assert!(
            DEFAULT_SOCKETS.iter().any(|s| d == Path::new(s)) || d.ends_with("podman/podman.sock")
        );
    }
}
