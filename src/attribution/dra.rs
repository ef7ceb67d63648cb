//! Dynamic Resource Allocation (`--kubernetes-enable-dra`): GPUs that NVIDIA's DRA driver
//! (`gpu.nvidia.com`) hands to containers. The kubelet names each device by claim, pool and
//! device name only; the driver's ResourceSlices say which GPU (its UUID) or MIG device
//! (parent UUID, profile, MIG UUID) that is. This module keeps those slices, from a watch,
//! in a cache the attribution stage reads, as dcgm-exporter's ResourceSlice informer.
//!
//! The API version is the newest `resource.k8s.io` version the server offers (v1 since
//! Kubernetes 1.34; v1beta2, v1beta1 and, in 1.31, v1alpha3 before), found by discovery:
//! the objects are the same in every version, only where device attributes sit differs
//! (`basic.attributes` in v1alpha3 and v1beta1, `attributes` later), and both are read.

use crate::runtime::kubeapi::KubeApi;
use futures_util::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// The only DRA driver whose devices are GPUs this exporter reads.
pub(crate) const GPU_DRIVER: &str = "gpu.nvidia.com";
pub const GROUP: &str = "resource.k8s.io";
/// Versions of the group that serve ResourceSlices, preferred first.
pub const VERSIONS: [&str; 4] = ["v1", "v1beta2", "v1beta1", "v1alpha3"];

/// What the driver's ResourceSlice says one device is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SliceDevice {
    Gpu {
        uuid: String,
    },
    Mig {
        parent_uuid: String,
        /// `MIG-…`, empty when the driver did not publish it.
        uuid: String,
        profile: String,
    },
}

impl SliceDevice {
    /// The GPU whose series the device's claims are copied onto.
    pub fn gpu_uuid(&self) -> &str {
        match self {
            SliceDevice::Gpu { uuid } => uuid,
            SliceDevice::Mig { parent_uuid, .. } => parent_uuid,
        }
    }
}

/// Looks devices up by (pool, device name); the stage reads it once per collection.
pub trait DraDevices: Send + Sync {
    fn lookup(&self, pool: &str, device: &str) -> Option<SliceDevice>;
    /// Whether the first complete list of slices has arrived (before it, a device that is
    /// not found is not yet a problem worth reporting).
    fn synced(&self) -> bool;
    /// Why the slices cannot be read right now (discovery or the watch failing, or no
    /// ResourceSlices in the cluster), for /health.
    fn problem(&self) -> Option<String> {
        None
    }
}

/// One ResourceSlice of the GPU driver: its pool, the pool's generation it was published
/// for, and its devices by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Slice {
    pub pool: String,
    pub generation: i64,
    pub devices: HashMap<String, SliceDevice>,
}

/// A device attribute's string value; a name may carry the driver's domain or not (the
/// DRA API treats `type` and `gpu.nvidia.com/type` as the same attribute of this driver).
fn attribute<'a>(attrs: &'a Value, name: &str) -> Option<&'a str> {
    let v = attrs
        .get(name)
        .or_else(|| attrs.get(format!("{GPU_DRIVER}/{name}")))?;
    v.get("string")?.as_str().filter(|s| !s.is_empty())
}

/// Device types that are neither `gpu` nor `mig` (warned about once each).
#[derive(Default)]
struct Unknown(Mutex<HashSet<String>>);

impl Unknown {
    fn note(&self, pool: &str, device: &str, kind: &str) {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if seen.insert(kind.to_string()) {
            tracing::warn!(
                "DRA: device {pool}/{device} of driver {GPU_DRIVER} has type {kind:?} (not gpu or mig): its claims get no dra_* labels"
            );
        }
    }
}

/// The GPU driver's part of a ResourceSlice's `spec`, or None for another driver's slice.
/// Devices without the attributes that identify them are left out, as upstream does.
fn parse_spec(spec: &Value, unknown: &Unknown) -> Option<Slice> {
    if spec.get("driver")?.as_str()? != GPU_DRIVER {
        return None;
    }
    let pool_spec = spec.get("pool")?;
    let pool = pool_spec.get("name")?.as_str()?.to_string();
    let generation = pool_spec
        .get("generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut devices = HashMap::new();
    for dev in spec
        .get("devices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(name) = dev.get("name").and_then(Value::as_str) else {
            continue;
        };
        let Some(attrs) = dev
            .get("attributes")
            .or_else(|| dev.get("basic").and_then(|b| b.get("attributes")))
        else {
            continue;
        };
        let found = match attribute(attrs, "type").unwrap_or("") {
            "gpu" => attribute(attrs, "uuid").map(|u| SliceDevice::Gpu {
                uuid: u.to_string(),
            }),
            "mig" => attribute(attrs, "parentUUID").map(|p| SliceDevice::Mig {
                parent_uuid: p.to_string(),
                uuid: attribute(attrs, "uuid").unwrap_or("").to_string(),
                profile: attribute(attrs, "profile").unwrap_or("").to_string(),
            }),
            other => {
                unknown.note(&pool, name, other);
                None
            }
        };
        if let Some(d) = found {
            devices.insert(name.to_string(), d);
        }
    }
    Some(Slice {
        pool,
        generation,
        devices,
    })
}

/// A slice and its place in the order slices arrived (later ones higher).
struct Held {
    arrived: u64,
    slice: Slice,
}

/// ResourceSlice name -> the slice.
type Slices = HashMap<String, Held>;

/// The cache the watch fills.
#[derive(Default)]
pub struct SliceCache {
    slices: RwLock<Slices>,
    /// How many slices have arrived (each apply, each slice of a relist).
    arrivals: AtomicU64,
    synced: AtomicBool,
    unknown: Unknown,
    problem: Mutex<Option<Problem>>,
}

/// Why the slices cannot be read. A watch that fails and then resumes quietly (kube's
/// watcher reports the failure, not the recovery) must not leave /health degraded for
/// good: a failure counts while it keeps recurring, which it does at least every 30 s (the
/// watcher's longest backoff) for as long as it lasts.
#[derive(Clone, Debug)]
enum Problem {
    /// The cluster has no ResourceSlice API: nothing will change it.
    Lasting(String),
    Recent(std::time::Instant, String),
}

/// How long a failure of the watch or of discovery is shown after it last happened.
const PROBLEM_SHOWN_FOR: Duration = Duration::from_secs(65);

impl DraDevices for SliceCache {
    /// A pool may span several slices (there are few: a scan is cheap). Only the pool's
    /// newest generation counts (older slices are stale, as the DRA API defines them), and
    /// where two slices of it name the device, the one that arrived last: a driver that
    /// publishes its complete set again under the same generation (new slice names, the old
    /// slices deleted after) is followed at once (dcgm-exporter 4.10.0's fix).
    fn lookup(&self, pool: &str, device: &str) -> Option<SliceDevice> {
        let slices = self.slices.read().unwrap_or_else(|p| p.into_inner());
        let of_pool = || slices.values().filter(|h| h.slice.pool == pool);
        let newest = of_pool().map(|h| h.slice.generation).max()?;
        of_pool()
            .filter(|h| h.slice.generation == newest)
            .filter_map(|h| Some((h.arrived, h.slice.devices.get(device)?)))
            .max_by_key(|(arrived, _)| *arrived)
            .map(|(_, d)| d.clone())
    }

    fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    fn problem(&self) -> Option<String> {
        match self
            .problem
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?
        {
            Problem::Lasting(why) => Some(why),
            Problem::Recent(at, why) => (at.elapsed() < PROBLEM_SHOWN_FOR).then_some(why),
        }
    }
}

impl SliceCache {
    /// Reads one ResourceSlice object (as JSON, any served version).
    fn parse(&self, obj: &Value) -> Option<(String, Slice)> {
        let name = obj.get("metadata")?.get("name")?.as_str()?.to_string();
        let slice = parse_spec(obj.get("spec")?, &self.unknown)?;
        Some((name, slice))
    }

    fn set_problem(&self, p: Option<Problem>) {
        *self.problem.lock().unwrap_or_else(|p| p.into_inner()) = p;
    }

    fn failed(&self, why: String) {
        self.set_problem(Some(Problem::Recent(std::time::Instant::now(), why)));
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Slices> {
        self.slices.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The slice, stamped as the latest to arrive.
    fn held(&self, slice: Slice) -> Held {
        Held {
            arrived: self.arrivals.fetch_add(1, Ordering::Relaxed),
            slice,
        }
    }

    /// A slice added or changed (a slice of another driver is ignored).
    pub fn apply(&self, obj: &Value) {
        if let Some((name, slice)) = self.parse(obj) {
            let held = self.held(slice);
            self.write().insert(name, held);
        }
    }

    pub fn delete(&self, obj: &Value) {
        if let Some(name) = obj
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
        {
            self.write().remove(name);
        }
    }

    /// A complete list, replacing whatever was known (slices deleted while the watch was
    /// down disappear); in the list's order of arrival.
    pub fn replace(&self, objects: &[Value]) {
        let all = objects
            .iter()
            .filter_map(|o| self.parse(o))
            .map(|(name, slice)| (name, self.held(slice)))
            .collect();
        *self.write() = all;
        self.synced.store(true, Ordering::Release);
    }

    /// Follows the watch: a (re)list is gathered and swapped in once complete; single
    /// events update the cache in place.
    async fn follow(self: Arc<Self>, api: kube::Api<DynamicObject>, config: watcher::Config) {
        let mut events = watcher::watcher(api, config).default_backoff().boxed();
        let mut listing: Option<Vec<Value>> = None;
        let json = |o: DynamicObject| serde_json::to_value(o).unwrap_or(Value::Null);
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Init) => listing = Some(Vec::new()),
                Ok(Event::InitApply(o)) => {
                    if let Some(l) = &mut listing {
                        l.push(json(o));
                    }
                }
                Ok(Event::InitDone) => {
                    if let Some(l) = listing.take() {
                        self.replace(&l);
                    }
                    self.set_problem(None);
                }
                Ok(Event::Apply(o)) => {
                    self.apply(&json(o));
                    self.set_problem(None);
                }
                Ok(Event::Delete(o)) => {
                    self.delete(&json(o));
                    self.set_problem(None);
                }
                // The stage logs it (once per change) and shows it on /health.
                Err(e) => self.failed(format!("ResourceSlice watch: {e}")),
            }
        }
    }
}

/// The newest of `VERSIONS` the server offers for the group, from discovery; Ok(None) when
/// the server has no such group (DRA is not enabled in the cluster).
async fn served_version(client: &kube::Client) -> Result<Option<&'static str>, String> {
    let groups = client
        .list_api_groups()
        .await
        .map_err(|e| format!("API discovery (/apis): {e}"))?;
    let Some(group) = groups.groups.iter().find(|g| g.name == GROUP) else {
        return Ok(None);
    };
    Ok(VERSIONS
        .into_iter()
        .find(|v| group.versions.iter().any(|gv| gv.version == *v)))
}

/// The ResourceSlice resource in one version of the group.
pub fn resource(version: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: version.into(),
        api_version: format!("{GROUP}/{version}"),
        kind: "ResourceSlice".into(),
        plural: "resourceslices".into(),
    }
}

/// Finds the served version (retrying while the server cannot be reached), then watches
/// the GPU driver's slices of every node: a claim names its pool, which need not be this
/// node's (a pool can span nodes), so no node filter is applied, as upstream.
async fn discover_and_follow(cache: Arc<SliceCache>, client: kube::Client, source: String) {
    let mut backoff = Duration::from_millis(500);
    let version = loop {
        match served_version(&client).await {
            Ok(Some(v)) => {
                cache.set_problem(None);
                break v;
            }
            Ok(None) => {
                cache.set_problem(Some(Problem::Lasting(format!(
                    "{source} serves no {GROUP} ResourceSlices (is DynamicResourceAllocation enabled?): dra_* labels are off"
                ))));
                return;
            }
            Err(e) => {
                cache.failed(e);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    };
    tracing::info!("DRA: watching {GROUP}/{version} ResourceSlices of driver {GPU_DRIVER}");
    let api = kube::Api::<DynamicObject>::all_with(client, &resource(version));
    let config = watcher::Config::default().fields(&format!("spec.driver={GPU_DRIVER}"));
    cache.follow(api, config).await;
}

/// Starts discovery and the watch; the cache fills as the API server answers.
pub fn watch(api: &KubeApi) -> Arc<SliceCache> {
    let cache = Arc::new(SliceCache::default());
    api.spawn(discover_and_follow(
        cache.clone(),
        api.client(),
        api.source.clone(),
    ));
    cache
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A slice as NVIDIA's DRA driver publishes it, in v1 shape (attributes on the device).
    fn v1_slice(name: &str, pool: &str, devices: Value) -> Value {
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {"driver": GPU_DRIVER, "nodeName": pool,
                     "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}
        })
    }

    fn gpu(name: &str, uuid: &str) -> Value {
        json!({"name": name, "attributes": {
            "type": {"string": "gpu"}, "uuid": {"string": uuid},
            "productName": {"string": "NVIDIA H100 80GB HBM3"}, "index": {"int": 0}}})
    }

    fn mig(name: &str, parent: &str, uuid: &str, profile: &str) -> Value {
        json!({"name": name, "attributes": {
            "type": {"string": "mig"}, "parentUUID": {"string": parent},
            "uuid": {"string": uuid}, "profile": {"string": profile}}})
    }

    #[test]
    fn gpus_and_mig_devices_are_found_by_pool_and_name() {
        let c = SliceCache::default();
        assert!(!c.synced());
        c.replace(&[v1_slice(
            "node-a-gpu.nvidia.com-x1",
            "node-a",
            json!([
                gpu("gpu-0", "GPU-aaaa"),
                mig("gpu-1-mig-1g10gb-0", "GPU-bbbb", "MIG-cccc", "1g.10gb")
            ]),
        )]);
        assert!(c.synced());
        assert_eq!(
            c.lookup("node-a", "gpu-0"),
            Some(SliceDevice::Gpu {
                uuid: "GPU-aaaa".into()
            })
        );
        let m = c.lookup("node-a", "gpu-1-mig-1g10gb-0").unwrap();
        assert_eq!(m.gpu_uuid(), "GPU-bbbb");
        assert_eq!(
            m,
            SliceDevice::Mig {
                parent_uuid: "GPU-bbbb".into(),
                uuid: "MIG-cccc".into(),
                profile: "1g.10gb".into()
            }
        );
        assert_eq!(c.lookup("node-b", "gpu-0"), None, "another pool");
        assert_eq!(c.lookup("node-a", "gpu-7"), None);
    }

    #[test]
    fn v1beta1_attributes_under_basic_and_qualified_names_are_read() {
        let c = SliceCache::default();
        c.apply(&json!({
            "metadata": {"name": "s"},
            "spec": {"driver": GPU_DRIVER, "pool": {"name": "p"}, "devices": [
                {"name": "gpu-0", "basic": {"attributes": {
                    "type": {"string": "gpu"}, "uuid": {"string": "GPU-1"}}}},
                {"name": "gpu-1", "attributes": {
                    "gpu.nvidia.com/type": {"string": "gpu"},
                    "gpu.nvidia.com/uuid": {"string": "GPU-2"}}}
            ]}
        }));
        assert_eq!(c.lookup("p", "gpu-0").unwrap().gpu_uuid(), "GPU-1");
        assert_eq!(c.lookup("p", "gpu-1").unwrap().gpu_uuid(), "GPU-2");
    }

    #[test]
    fn other_drivers_unknown_types_and_incomplete_devices_are_left_out() {
        let c = SliceCache::default();
        let mut other = v1_slice("o", "p", json!([gpu("gpu-0", "GPU-x")]));
        other["spec"]["driver"] = json!("compute-domain.nvidia.com");
        c.apply(&other);
        c.apply(&v1_slice(
            "s",
            "q",
            json!([
                {"name": "cd-0", "attributes": {"type": {"string": "channel"}}},
                {"name": "gpu-9", "attributes": {"type": {"string": "gpu"}}},
                mig("mig-0", "", "MIG-1", "1g.10gb"),
                {"name": "bare"}
            ]),
        ));
        assert_eq!(c.lookup("p", "gpu-0"), None);
        for d in ["cd-0", "gpu-9", "mig-0", "bare"] {
            assert_eq!(c.lookup("q", d), None, "{d}");
        }
    }

    #[test]
    fn a_failure_shows_while_it_recurs_and_a_lasting_one_stays() {
        let c = SliceCache::default();
        assert_eq!(c.problem(), None);
        c.failed("ResourceSlice watch: 403".into());
        assert_eq!(c.problem().as_deref(), Some("ResourceSlice watch: 403"));
        // Last seen longer ago than a retry takes: the watch has resumed quietly.
        if let Some(long_ago) = std::time::Instant::now().checked_sub(PROBLEM_SHOWN_FOR) {
            c.set_problem(Some(Problem::Recent(long_ago, "old".into())));
            assert_eq!(c.problem(), None);
        }
        c.set_problem(Some(Problem::Lasting("no API".into())));
        assert_eq!(c.problem().as_deref(), Some("no API"));
    }

    /// The GPU UUID pool `p`'s device `gpu-0` resolves to.
    fn gpu0(c: &SliceCache) -> Option<String> {
        c.lookup("p", "gpu-0").map(|d| d.gpu_uuid().to_string())
    }

    #[test]
    fn a_set_published_again_with_the_same_generation_replaces_the_old_one_at_once() {
        // Many caches and names: a pick by the map's order would fail some of them.
        for i in 0..32 {
            let c = SliceCache::default();
            let old = v1_slice(&format!("old-{i}"), "p", json!([gpu("gpu-0", "GPU-old")]));
            let new = v1_slice(&format!("new-{i}"), "p", json!([gpu("gpu-0", "GPU-new")]));
            c.apply(&old);
            assert_eq!(gpu0(&c).as_deref(), Some("GPU-old"));
            c.apply(&new);
            assert_eq!(
                gpu0(&c).as_deref(),
                Some("GPU-new"),
                "{i}: old still listed"
            );
            c.delete(&old);
            assert_eq!(gpu0(&c).as_deref(), Some("GPU-new"), "{i}: old withdrawn");
            // A relist holding both: the one listed last is the newest.
            c.replace(&[new.clone(), old.clone()]);
            assert_eq!(gpu0(&c).as_deref(), Some("GPU-old"), "{i}: relist");
        }
    }

    #[test]
    fn only_the_newest_generation_of_a_pool_is_read() {
        let at = |name: &str, generation: i64, uuid: &str, device: &str| {
            let mut s = v1_slice(name, "p", json!([gpu(device, uuid)]));
            s["spec"]["pool"]["generation"] = json!(generation);
            s
        };
        let c = SliceCache::default();
        c.apply(&at("b", 2, "GPU-2", "gpu-0"));
        // A slice of an older generation arriving late is stale, also for its other devices.
        c.apply(&at("a", 1, "GPU-1", "gpu-0"));
        c.apply(&at("x", 1, "GPU-x", "gpu-1"));
        assert_eq!(gpu0(&c).as_deref(), Some("GPU-2"));
        assert_eq!(c.lookup("p", "gpu-1"), None);
        // The newer generation withdrawn: the older one is all there is.
        c.delete(&at("b", 2, "", ""));
        assert_eq!(gpu0(&c).as_deref(), Some("GPU-1"));
        // Another pool's generation does not matter.
        let mut q = at("q", 9, "GPU-q", "gpu-0");
        q["spec"]["pool"]["name"] = json!("q");
        c.apply(&q);
        assert_eq!(gpu0(&c).as_deref(), Some("GPU-1"));
    }

    #[test]
    fn a_deleted_slice_takes_its_devices_along_and_a_relist_replaces_all() {
        let c = SliceCache::default();
        let a = v1_slice("a", "p", json!([gpu("gpu-0", "GPU-0")]));
        let b = v1_slice("b", "p", json!([gpu("gpu-1", "GPU-1")]));
        c.apply(&a);
        c.apply(&b);
        assert!(c.lookup("p", "gpu-0").is_some() && c.lookup("p", "gpu-1").is_some());
        c.delete(&a);
        assert!(c.lookup("p", "gpu-0").is_none());
        assert!(c.lookup("p", "gpu-1").is_some());
        c.replace(&[a]);
        assert!(c.lookup("p", "gpu-0").is_some());
        assert!(c.lookup("p", "gpu-1").is_none(), "gone from the relist");
    }
}
