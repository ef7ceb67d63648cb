//! What the Docker Engine API (and podman's compatible API) says about a container's GPUs:
//! the parts of `GET /containers/json` and `GET /containers/{id}/json` we read, and the
//! rules that turn them into an explicit GPU assignment.
//!
//! Which GPUs a container was given, by how it was started:
//! * `docker run --gpus '"device=0,GPU-…,MIG-…"'` / `--device nvidia.com/gpu=0` (CDI): a
//!   device request with `DeviceIDs` (driver `nvidia`, capability `gpu`, or driver `cdi`
//!   with `nvidia.com/gpu=` names) → those devices;
//! * `--gpus all` (a request with `Count: -1`) → every GPU;
//! * `--gpus 1` (a count, no ids) → no label: the runtime picks the GPU, the API does not
//!   say which (and the image's `NVIDIA_VISIBLE_DEVICES=all` is not what it got);
//! * podman `--device nvidia.com/gpu=…` (CDI, in `HostConfig.Devices`) → those devices;
//! * no GPU request, runtime `nvidia` (`--runtime=nvidia` or the default runtime): the
//!   `NVIDIA_VISIBLE_DEVICES` the runtime reads (UUIDs, indexes, MIG UUIDs or `all`; `none`
//!   and `void` mean none). Under runc/crun that variable (set by every CUDA image) gives the
//!   container nothing, so it is ignored there.

use serde::Deserialize;

/// One row of `GET /containers/json` (running containers).
#[derive(Debug, Deserialize)]
pub struct Listed {
    #[serde(rename = "Id")]
    pub id: String,
    /// `["/name"]`; a rename shows here at once.
    #[serde(rename = "Names", default)]
    pub names: Option<Vec<String>>,
}

impl Listed {
    pub fn label(&self) -> String {
        let name = self
            .names
            .as_deref()
            .and_then(|n| n.first())
            .map_or("", String::as_str);
        label_of(name, &self.id)
    }
}

/// A container's name without its slash, or its short id (12 characters) when unnamed.
fn label_of(name: &str, id: &str) -> String {
    let name = name.trim_start_matches('/');
    if name.is_empty() {
        id.chars().take(12).collect()
    } else {
        name.to_string()
    }
}

/// The parts of `GET /containers/{id}/json` that say which GPUs a container has.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Inspect {
    #[serde(rename = "Id")]
    pub id: String,
    /// `/name` (Docker and podman prefix a slash).
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Config")]
    pub config: Option<ContainerConfig>,
    #[serde(rename = "HostConfig")]
    pub host_config: Option<HostConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ContainerConfig {
    #[serde(rename = "Env")]
    pub env: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct HostConfig {
    #[serde(rename = "Runtime")]
    pub runtime: String,
    #[serde(rename = "DeviceRequests")]
    pub device_requests: Option<Vec<DeviceRequest>>,
    #[serde(rename = "Devices")]
    pub devices: Option<Vec<DeviceMapping>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct DeviceRequest {
    #[serde(rename = "Driver")]
    pub driver: String,
    #[serde(rename = "Count")]
    pub count: i64,
    #[serde(rename = "DeviceIDs")]
    pub device_ids: Option<Vec<String>>,
    #[serde(rename = "Capabilities")]
    pub capabilities: Option<Vec<Vec<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct DeviceMapping {
    #[serde(rename = "PathOnHost")]
    pub path_on_host: String,
}

/// A GPU as a container's configuration names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GpuRef {
    Uuid(String),
    /// A `MIG-…` UUID.
    Mig(String),
    /// An NVML index.
    Index(u32),
    All,
}

/// The CDI device-name prefix of NVIDIA's container toolkit (`nvidia.com/gpu=0`).
const CDI_GPU: &str = "nvidia.com/gpu=";

fn parse_ref(id: &str) -> Option<GpuRef> {
    let id = id.trim();
    let id = id.strip_prefix(CDI_GPU).unwrap_or(id);
    if id.eq_ignore_ascii_case("all") {
        Some(GpuRef::All)
    } else if id.starts_with("GPU-") {
        Some(GpuRef::Uuid(id.to_string()))
    } else if id.starts_with("MIG-") {
        Some(GpuRef::Mig(id.to_string()))
    } else {
        // Plain indexes; "0:1" (a MIG device by index) and anything else name nothing we
        // can place.
        id.parse().ok().map(GpuRef::Index)
    }
}

impl DeviceRequest {
    fn is_gpu(&self) -> bool {
        let cap = self
            .capabilities
            .iter()
            .flatten()
            .any(|set| set.iter().any(|c| c == "gpu"));
        let cdi = self.driver == "cdi"
            && self
                .device_ids
                .iter()
                .flatten()
                .any(|d| d.starts_with(CDI_GPU));
        self.driver == "nvidia" || cap || cdi
    }
}

impl Inspect {
    /// `name` without its slash, or the short id (12 characters) of an unnamed container.
    pub fn label(&self) -> String {
        label_of(&self.name, &self.id)
    }

    fn env(&self, key: &str) -> Option<&str> {
        self.config
            .as_ref()?
            .env
            .as_ref()?
            .iter()
            .rev()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    }

    /// The GPUs explicitly assigned to this container (empty: none, or only a count).
    pub fn gpus(&self) -> Vec<GpuRef> {
        let host = self.host_config.as_ref();
        let requests: Vec<&DeviceRequest> = host
            .and_then(|h| h.device_requests.as_ref())
            .into_iter()
            .flatten()
            .filter(|r| r.is_gpu())
            .collect();
        let mut out: Vec<GpuRef> = Vec::new();
        for r in &requests {
            match r.device_ids.as_deref() {
                Some(ids) if !ids.is_empty() => out.extend(ids.iter().filter_map(|i| parse_ref(i))),
                _ if r.count < 0 => out.push(GpuRef::All),
                // A count only: which GPUs is the runtime's choice, not in the API.
                _ => {}
            }
        }
        out.extend(
            host.and_then(|h| h.devices.as_ref())
                .into_iter()
                .flatten()
                .filter(|d| d.path_on_host.starts_with(CDI_GPU))
                .filter_map(|d| parse_ref(&d.path_on_host)),
        );
        let nvidia_runtime = host.is_some_and(|h| h.runtime == "nvidia");
        if requests.is_empty() && out.is_empty() && nvidia_runtime {
            if let Some(v) = self.env("NVIDIA_VISIBLE_DEVICES") {
                if !matches!(v.trim(), "" | "none" | "void") {
                    out.extend(v.split(',').filter_map(parse_ref));
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inspect(json: &str) -> Inspect {
        serde_json::from_str(json).expect("inspect JSON")
    }

    const UUID: &str = "GPU-6af230c7-f8b3-6f36-4eb3-90b4118f4e5f";

    #[test]
    fn device_requests_with_ids_indexes_and_mig_uuids() {
        // `docker run --gpus '"device=0,GPU-…,MIG-…"'` as Docker 24 reports it.
        let c = inspect(&format!(
            r#"{{"Id":"4f1c2b","Name":"/trainer","Config":{{"Env":["PATH=/usr/bin","NVIDIA_VISIBLE_DEVICES=all"]}},
               "HostConfig":{{"Runtime":"runc","Devices":[],"DeviceRequests":[{{"Driver":"","Count":0,
               "DeviceIDs":["0","{UUID}","MIG-1a0d1098-ef1e-8863-815c-f77d2fc9bb11"],"Capabilities":[["gpu"]],"Options":{{}}}}]}}}}"#
        ));
        assert_eq!(c.label(), "trainer");
        assert_eq!(
            c.gpus(),
            [
                GpuRef::Uuid(UUID.into()),
                GpuRef::Mig("MIG-1a0d1098-ef1e-8863-815c-f77d2fc9bb11".into()),
                GpuRef::Index(0)
            ]
        );
    }

    #[test]
    fn gpus_all_is_every_gpu_and_a_count_is_nothing() {
        let all = inspect(
            r#"{"Id":"a","Name":"/x","HostConfig":{"Runtime":"runc","DeviceRequests":[{"Driver":"","Count":-1,"DeviceIDs":null,"Capabilities":[["gpu"]]}]}}"#,
        );
        assert_eq!(all.gpus(), [GpuRef::All]);
        // `--gpus 1` on a CUDA image under the nvidia runtime: the image's
        // NVIDIA_VISIBLE_DEVICES=all is not what the container got.
        let count = inspect(
            r#"{"Id":"b","Name":"/y","Config":{"Env":["NVIDIA_VISIBLE_DEVICES=all"]},
               "HostConfig":{"Runtime":"nvidia","DeviceRequests":[{"Driver":"nvidia","Count":1,"DeviceIDs":null,"Capabilities":[["gpu"]]}]}}"#,
        );
        assert!(count.gpus().is_empty());
        // Other device requests (not GPUs) do not count.
        let other = inspect(
            r#"{"Id":"c","Name":"/z","HostConfig":{"Runtime":"runc","DeviceRequests":[{"Driver":"fpga","Count":-1,"Capabilities":[["fpga"]]}]}}"#,
        );
        assert!(other.gpus().is_empty());
    }

    #[test]
    fn the_environment_counts_only_under_the_nvidia_runtime() {
        let env = |runtime: &str, value: &str| {
            inspect(&format!(
                r#"{{"Id":"d","Name":"","Config":{{"Env":["A=1","NVIDIA_VISIBLE_DEVICES={value}"]}},"HostConfig":{{"Runtime":"{runtime}","DeviceRequests":null}}}}"#
            ))
            .gpus()
        };
        assert_eq!(
            env("nvidia", &format!("{UUID},2")),
            [GpuRef::Uuid(UUID.into()), GpuRef::Index(2)]
        );
        assert_eq!(env("nvidia", "all"), [GpuRef::All]);
        assert!(env("nvidia", "none").is_empty());
        assert!(env("nvidia", "void").is_empty());
        assert!(env("nvidia", "").is_empty());
        assert!(env("runc", "all").is_empty());
        assert!(env("crun", "0").is_empty());
    }

    #[test]
    fn cdi_devices_of_docker_and_podman() {
        let docker = inspect(
            r#"{"Id":"e","Name":"/cdi","HostConfig":{"Runtime":"runc","DeviceRequests":[{"Driver":"cdi","Count":0,"DeviceIDs":["nvidia.com/gpu=1"]}]}}"#,
        );
        assert_eq!(docker.gpus(), [GpuRef::Index(1)]);
        let podman = inspect(
            r#"{"Id":"f","Name":"/pod","HostConfig":{"Runtime":"crun","Devices":[{"PathOnHost":"nvidia.com/gpu=all","PathInContainer":"nvidia.com/gpu=all","CgroupPermissions":""},{"PathOnHost":"/dev/fuse","PathInContainer":"/dev/fuse","CgroupPermissions":"rwm"}]}}"#,
        );
        assert_eq!(podman.gpus(), [GpuRef::All]);
    }

    #[test]
    fn unnamed_containers_go_by_their_short_id() {
        let c = inspect(r#"{"Id":"0123456789abcdef0123","Name":""}"#);
        assert_eq!(c.label(), "0123456789ab");
        assert!(c.gpus().is_empty());
        let listed: Vec<Listed> = serde_json::from_str(
            r#"[{"Id":"0123456789abcdef0123","Names":["/web"],"State":"running"},
                {"Id":"fedcba9876543210fedc","Names":[],"State":"running"}]"#,
        )
        .unwrap();
        assert_eq!(listed[0].label(), "web");
        assert_eq!(listed[1].label(), "fedcba987654");
    }
}
