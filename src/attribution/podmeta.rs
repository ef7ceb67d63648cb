//! Pod UIDs and labels from a watch of the pods on this node (`spec.nodeName=$NODE_NAME`),
//! kept in a cache the attribution stage reads by namespace and pod name
//! (`--kubernetes-enable-pod-uid`, `--kubernetes-enable-pod-labels`,
//! `--kubernetes-pod-label-allowlist-regex`), as dcgm-exporter's pod informer.

use super::{PodMeta, PodMetadata};
use crate::runtime::kubeapi::{ErrorStreak, KubeApi};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use regex::Regex;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Which pod labels become series labels: those whose (raw) name matches any pattern,
/// unanchored as Go's MatchString; no usable pattern means all of them.
#[derive(Clone, Debug, Default)]
pub struct Allowlist(Vec<Regex>);

impl Allowlist {
    /// Invalid patterns are skipped with a warning, as dcgm-exporter does.
    pub fn new(patterns: &[String]) -> Allowlist {
        let mut compiled = Vec::new();
        for p in patterns.iter().filter(|p| !p.is_empty()) {
            match Regex::new(p) {
                Ok(r) => compiled.push(r),
                Err(e) => tracing::warn!(
                    "--kubernetes-pod-label-allowlist-regex {p:?}: {e}; pattern ignored"
                ),
            }
        }
        Allowlist(compiled)
    }

    pub fn allows(&self, label: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|r| r.is_match(label))
    }
}

pub use crate::model::sanitize_label_name;

/// The exporter's own label names on a GPU series (identity, pod, HPC, virtual-GPU and DRA
/// labels): a pod label never takes their place.
fn ours(name: &str) -> bool {
    const OURS: [&str; 18] = [
        "gpu",
        "UUID",
        "uuid",
        "device",
        "modelName",
        "Hostname",
        "hostname",
        "pci_bus_id",
        "GPU_I_PROFILE",
        "GPU_I_ID",
        "pod",
        "namespace",
        "container",
        "pod_name",
        "pod_namespace",
        "container_name",
        "pod_uid",
        "hpc_job",
    ];
    OURS.contains(&name) || name == "vgpu" || name.starts_with("dra_")
}

/// A pod's allowed labels under valid, distinct names ([`sanitize_label_name`]). When two
/// keys give the same name the first in key order wins (Kubernetes keeps them sorted); a
/// name the exporter sets itself stays the exporter's. What is left out is logged.
fn series_labels(
    pod: &str,
    raw: &std::collections::BTreeMap<String, String>,
    allow: &Allowlist,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in raw.iter().filter(|(k, _)| allow.allows(k)) {
        let name = sanitize_label_name(k);
        if ours(&name) || out.iter().any(|(n, _)| *n == name) {
            tracing::warn!(
                "pod {pod}: label {k:?} becomes {name:?}, a label the series already has; left out"
            );
            continue;
        }
        out.push((name, v.clone()));
    }
    out
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Copy the pod's labels (the UID is always kept; the stage decides whether to show it).
    pub labels: bool,
    pub allowlist: Allowlist,
}

/// namespace -> pod name -> metadata.
type Pods = HashMap<String, HashMap<String, PodMeta>>;

/// The cache the watch fills; `lookup` is a read lock and two hash lookups.
pub struct PodCache {
    opts: Options,
    pods: RwLock<Pods>,
}

impl PodMetadata for PodCache {
    fn lookup(&self, namespace: &str, pod: &str) -> Option<PodMeta> {
        let pods = self.pods.read().unwrap_or_else(|p| p.into_inner());
        pods.get(namespace)?.get(pod).cloned()
    }
}

impl PodCache {
    pub fn new(opts: Options) -> PodCache {
        PodCache {
            opts,
            pods: RwLock::new(HashMap::new()),
        }
    }

    /// What the stage needs from a pod object: its UID and its allowed, sanitised labels.
    pub fn meta_of(&self, pod: &Pod) -> Option<(String, String, PodMeta)> {
        let m = &pod.metadata;
        let (namespace, name) = (m.namespace.clone()?, m.name.clone()?);
        let labels = match (&m.labels, self.opts.labels) {
            (Some(raw), true) => {
                series_labels(&format!("{namespace}/{name}"), raw, &self.opts.allowlist)
            }
            _ => Vec::new(),
        };
        let uid = m.uid.clone().unwrap_or_default();
        Some((namespace, name, PodMeta { uid, labels }))
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Pods> {
        self.pods.write().unwrap_or_else(|p| p.into_inner())
    }

    fn apply(&self, pod: &Pod) {
        if let Some((ns, name, meta)) = self.meta_of(pod) {
            self.write().entry(ns).or_default().insert(name, meta);
        }
    }

    fn delete(&self, pod: &Pod) {
        let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            return;
        };
        let mut pods = self.write();
        if let Some(by_name) = pods.get_mut(ns) {
            by_name.remove(name);
            if by_name.is_empty() {
                pods.remove(ns);
            }
        }
    }

    /// Follows the watch: a (re)list replaces the whole cache once complete, so pods deleted
    /// while the watch was down disappear; single events update it in place.
    async fn follow(self: Arc<Self>, api: kube::Api<Pod>, config: watcher::Config) {
        let mut events = watcher::watcher(api, config).default_backoff().boxed();
        let mut listing: Option<Pods> = None;
        let mut streak = ErrorStreak::default();
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Init) => listing = Some(HashMap::new()),
                Ok(Event::InitApply(pod)) => {
                    if let (Some(l), Some((ns, name, meta))) = (&mut listing, self.meta_of(&pod)) {
                        l.entry(ns).or_default().insert(name, meta);
                    }
                }
                Ok(Event::InitDone) => {
                    if let Some(l) = listing.take() {
                        *self.write() = l;
                    }
                    streak.ok("pod watch");
                }
                Ok(Event::Apply(pod)) => self.apply(&pod),
                Ok(Event::Delete(pod)) => self.delete(&pod),
                Err(e) => streak.error("pod watch", &e),
            }
        }
    }
}

/// Starts the watch of this node's pods; the cache fills as the API server answers.
pub fn watch(api: &KubeApi, node_name: Option<&str>, opts: Options) -> Arc<PodCache> {
    let cache = Arc::new(PodCache::new(opts));
    let config = match node_name.filter(|n| !n.is_empty()) {
        Some(node) => watcher::Config::default().fields(&format!("spec.nodeName={node}")),
        None => {
            tracing::warn!("NODE_NAME is not set: watching the pods of every node");
            watcher::Config::default()
        }
    };
    tracing::info!(
        "watching pods{} through {}",
        node_name
            .map(|n| format!(" on node {n}"))
            .unwrap_or_default(),
        api.source
    );
    api.spawn(cache.clone().follow(kube::Api::all(api.client()), config));
    cache
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn pod(labels: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some("ml".into());
        p.metadata.name = Some("trainer-0".into());
        p.metadata.uid = Some("0b3c6a6e-1b7e-4d55-9a55-2d0e2b1f7c11".into());
        p.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        p
    }

    #[test]
    fn label_names_are_sanitised_as_upstream() {
        assert_eq!(
            sanitize_label_name("app.kubernetes.io/name"),
            "app_kubernetes_io_name"
        );
        assert_eq!(sanitize_label_name("team-α"), "team__");
    }

    /// Kubernetes allows keys that upstream turns into names Prometheus refuses (a leading
    /// digit), and a whole node's page with them.
    #[test]
    fn every_label_key_becomes_a_valid_name() {
        use crate::model::is_valid_label_name;
        for (raw, want) in [
            ("3rd-party", "_3rd_party"),
            ("1password.com/managed", "_1password_com_managed"),
            ("9lives", "_9lives"),
            ("__meta_secret", "_meta_secret"),
            ("_private", "_private"),
            ("-x", "_x"),
            ("../..", "_"),
            ("", "_"),
            ("日本", "_"),
            ("team", "team"),
        ] {
            let got = sanitize_label_name(raw);
            assert_eq!(got, want, "{raw:?}");
            assert!(is_valid_label_name(&got), "{raw:?} -> {got:?}");
        }
    }

    #[test]
    fn colliding_and_reserved_pod_labels_are_left_out_first_key_wins() {
        let cache = PodCache::new(Options {
            labels: true,
            allowlist: Allowlist::default(),
        });
        let (_, _, meta) = cache
            .meta_of(&pod(&[
                ("a-b", "dash"),
                ("a.b", "dot"),
                ("pod", "not-the-pod-name"),
                ("dra_claim_name", "fake"),
                ("hpc.job", "fake"),
                ("1password.com/managed", "true"),
            ]))
            .unwrap();
        assert_eq!(
            meta.labels,
            vec![
                ("_1password_com_managed".to_string(), "true".to_string()),
                ("a_b".to_string(), "dash".to_string()),
            ]
        );
    }

    #[test]
    fn the_allowlist_matches_raw_names_unanchored_and_skips_bad_patterns() {
        let a = Allowlist::new(&["^app$".into(), "kubernetes\\.io/".into(), "([".into()]);
        assert!(a.allows("app"));
        assert!(!a.allows("application"));
        assert!(a.allows("app.kubernetes.io/name"));
        assert!(!a.allows("team"));
        // Only invalid patterns: no filtering.
        assert!(Allowlist::new(&["([".into()]).allows("team"));
        assert!(Allowlist::new(&[]).allows("anything"));
    }

    #[test]
    fn a_pod_gives_its_uid_and_its_allowed_labels() {
        let cache = PodCache::new(Options {
            labels: true,
            allowlist: Allowlist::new(&["^app".into()]),
        });
        let (ns, name, meta) = cache
            .meta_of(&pod(&[("app.kubernetes.io/name", "bert"), ("team", "nlp")]))
            .unwrap();
        assert_eq!((ns.as_str(), name.as_str()), ("ml", "trainer-0"));
        assert_eq!(meta.uid, "0b3c6a6e-1b7e-4d55-9a55-2d0e2b1f7c11");
        assert_eq!(
            meta.labels,
            vec![("app_kubernetes_io_name".to_string(), "bert".to_string())]
        );
        let no_labels = PodCache::new(Options {
            labels: false,
            allowlist: Allowlist::default(),
        });
        let (_, _, meta) = no_labels.meta_of(&pod(&[("team", "nlp")])).unwrap();
        assert!(meta.labels.is_empty());
        assert!(!meta.uid.is_empty(), "the UID is kept without labels");
    }

    #[test]
    fn apply_and_delete_update_the_cache() {
        let cache = PodCache::new(Options {
            labels: true,
            allowlist: Allowlist::default(),
        });
        cache.apply(&pod(&[("team", "nlp")]));
        assert_eq!(
            cache.lookup("ml", "trainer-0").unwrap().labels,
            vec![("team".to_string(), "nlp".to_string())]
        );
        cache.apply(&pod(&[("team", "vision")]));
        assert_eq!(
            cache.lookup("ml", "trainer-0").unwrap().labels[0].1,
            "vision"
        );
        assert!(cache.lookup("other", "trainer-0").is_none());
        cache.delete(&pod(&[]));
        assert!(cache.lookup("ml", "trainer-0").is_none());
    }
}
