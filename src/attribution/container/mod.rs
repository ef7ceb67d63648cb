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
mod http;

use super::{DeviceLabelSource, DeviceLabels};
use docker::{GpuRef, Inspect, Listed};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Where Docker and podman listen by default, in the order they are tried when
/// `--container-runtime-socket` is empty.
const DEFAULT_SOCKETS: [&str; 2] = ["/var/run/docker.sock", "/run/podman/podman.sock"];

/// The socket to use: the flag's path (`unix://` allowed), or the first default that
/// exists (else Docker's, so the error names the usual place).
pub fn socket_path(flag: &str) -> PathBuf {
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

/// Running containers and the GPUs each was given, labelled as they will be.
type Assignments = Vec<(String, Vec<GpuRef>)>;

/// The last refresh: `None` until the first one ends.
type Latest = Arc<Mutex<Option<Result<Assignments, String>>>>;

pub struct ContainerSource {
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
    pub fn start(
        socket: PathBuf,
        interval: Duration,
        deadline: Duration,
        label: &'static str,
    ) -> Result<ContainerSource, String> {
        let latest: Latest = Arc::new(Mutex::new(None));
        let (stop, stopped) = mpsc::channel::<()>();
        let sink = latest.clone();
        std::thread::Builder::new()
            .name("container-labels".into())
            .spawn(move || {
                let mut seen = Inspected::new();
                loop {
                    let answer = refresh(&socket, Instant::now() + deadline, &mut seen);
                    *sink.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer);
                    match stopped.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => continue,
                        _ => break,
                    }
                }
            })
            .map_err(|e| format!("cannot start the container-labels thread: {e}"))?;
        Ok(ContainerSource {
            latest,
            gpus: HashMap::new(),
            label,
            _stop: stop,
        })
    }
}

/// What was inspected, by container id: the GPUs a container was created with cannot
/// change while it runs, so each running container is inspected once.
type Inspected = HashMap<String, Vec<GpuRef>>;

/// One look at the runtime: every running container and its GPUs (names from the listing,
/// so renames show; new containers inspected, gone ones forgotten).
fn refresh(socket: &Path, deadline: Instant, seen: &mut Inspected) -> Result<Assignments, String> {
    let get_json = |path: &str| -> Result<Option<Vec<u8>>, String> {
        let (status, body) = http::get(socket, path, deadline)?;
        match status {
            200 => Ok(Some(body)),
            // Gone between the listing and the inspection.
            404 => Ok(None),
            s => Err(format!(
                "GET {path} on {}: HTTP {s}: {}",
                socket.display(),
                String::from_utf8_lossy(&body).trim()
            )),
        }
    };
    let list = get_json("/containers/json")?.ok_or_else(|| {
        format!(
            "{}: no /containers/json (not a Docker-compatible API)",
            socket.display()
        )
    })?;
    let listed: Vec<Listed> = serde_json::from_slice(&list)
        .map_err(|e| format!("GET /containers/json on {}: {e}", socket.display()))?;
    seen.retain(|id, _| listed.iter().any(|c| &c.id == id));
    let mut out = Vec::new();
    for c in &listed {
        // Ids are hex; anything else is not put into a URL.
        if c.id.is_empty() || !c.id.chars().all(|ch| ch.is_ascii_alphanumeric()) {
            continue;
        }
        if !seen.contains_key(&c.id) {
            let path = format!("/containers/{}/json", c.id);
            let Some(body) = get_json(&path)? else {
                continue;
            };
            let inspect: Inspect = serde_json::from_slice(&body)
                .map_err(|e| format!("GET {path} on {}: {e}", socket.display()))?;
            seen.insert(c.id.clone(), inspect.gpus());
        }
        if let Some(gpus) = seen.get(&c.id).filter(|g| !g.is_empty()) {
            out.push((c.label(), gpus.clone()));
        }
    }
    Ok(out)
}

/// Device labels from assignments: GPUs by UUID (indexes and `all` through `gpus`), MIG
/// devices by their UUID. A device several containers share gets their names joined by
/// commas, sorted, rather than one of them at random.
fn device_labels(
    assignments: &Assignments,
    gpus: &HashMap<String, u32>,
    label: &str,
) -> Vec<DeviceLabels> {
    let mut by_device: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (name, refs) in assignments {
        let mut devices: Vec<String> = Vec::new();
        for r in refs {
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
        for d in devices {
            by_device.entry(d).or_default().push(name);
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

impl DeviceLabelSource for ContainerSource {
    fn name(&self) -> &'static str {
        "container-runtime"
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_and_all_resolve_through_the_page_and_sharing_joins_names() {
        let gpus = HashMap::from([("GPU-a".to_string(), 0), ("GPU-b".to_string(), 1)]);
        let a: Assignments = vec![
            (
                "train".into(),
                vec![GpuRef::Index(1), GpuRef::Mig("MIG-x".into())],
            ),
            ("notebook".into(), vec![GpuRef::All]),
            ("stale".into(), vec![GpuRef::Index(7)]),
        ];
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
