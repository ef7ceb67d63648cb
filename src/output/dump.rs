//! `--dump-enabled`: dcgm-exporter's debug dumps. For every entity group on the page it
//! writes `metrics-<group>-<YYYYMMDD-HHMMSS>-<8 hex>.json` (the series) and
//! `deviceinfo-<group>-<…>.json` (the entities the series were read from) to
//! `--dump-directory`, gzipped as `.json.gz` with `--dump-compression` (the default), as
//! indented JSON. Upstream writes them on every scrape; we collect once per interval
//! and scrapes never collect, so we write them once per collection. Dump files older than
//! `--dump-retention` hours are removed at start and then hourly (0 keeps them).

use crate::collect::topology::Topology;
use crate::logging::utc::Utc;
use crate::output::sink::Sink;
use prometheus::proto::{MetricFamily, MetricType};
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

const PREFIXES: [&str; 2] = ["metrics-", "deviceinfo-"];

#[derive(Clone, Debug)]
pub struct Dumper {
    pub dir: PathBuf,
    pub retention_hours: u64,
    pub compress: bool,
}

/// go-dcgm's names of the entity groups (`Field_Entity_Group.String()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Group {
    Gpu,
    Switch,
    Link,
    Cpu,
    CpuCore,
}

impl Group {
    fn name(self) -> &'static str {
        match self {
            Group::Gpu => "GPU",
            Group::Switch => "Switch",
            Group::Link => "Link",
            Group::Cpu => "CPU",
            Group::CpuCore => "CPU Core",
        }
    }

    /// Which group a series belongs to, from its identity labels (targets.rs gives every
    /// switch, link and CPU series its own label).
    fn of(labels: &[(&str, &str)]) -> Group {
        let has = |k: &str| labels.iter().any(|(n, _)| *n == k);
        if has("nvlink") {
            Group::Link
        } else if has("cpucore") {
            Group::CpuCore
        } else if has("cpu") {
            Group::Cpu
        } else if has("nvswitch") {
            Group::Switch
        } else {
            Group::Gpu
        }
    }
}

impl Dumper {
    /// Creates the directory and removes dumps past their retention.
    pub fn start(self) -> Result<Dumper, String> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("--dump-directory {}: {e}", self.dir.display()))?;
        self.cleanup();
        let d = self.clone();
        std::thread::Builder::new()
            .name("dump-cleanup".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_secs(3600));
                d.cleanup();
            })
            .map_err(|e| format!("cannot start the dump cleanup thread: {e}"))?;
        Ok(self)
    }

    /// Removes our dump files whose modification time is older than the retention.
    pub fn cleanup(&self) {
        if self.retention_hours == 0 {
            return;
        }
        let cutoff = SystemTime::now()
            .checked_sub(Duration::from_secs(
                self.retention_hours.saturating_mul(3600),
            ))
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("dump cleanup: {}: {e}", self.dir.display());
                return;
            }
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let ours = name
                .to_str()
                .is_some_and(|n| PREFIXES.iter().any(|p| n.starts_with(p)));
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < cutoff);
            if ours && old {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => removed += 1,
                    Err(e) => tracing::warn!("dump cleanup: {}: {e}", entry.path().display()),
                }
            }
        }
        if removed > 0 {
            tracing::debug!(
                "removed {removed} old dump files from {}",
                self.dir.display()
            );
        }
    }

    fn write(&self, prefix: &str, group: Group, data: &Value) -> std::io::Result<PathBuf> {
        let mut name = format!(
            "{prefix}-{}-{}-{:08x}",
            group.name(),
            Utc::now().compact(),
            random_u32()
        );
        name.push_str(if self.compress { ".json.gz" } else { ".json" });
        let path = self.dir.join(name);
        // As upstream: a directory removed while running is recreated.
        std::fs::create_dir_all(&self.dir)?;
        let mut text = serde_json::to_vec_pretty(data).map_err(std::io::Error::other)?;
        text.push(b'\n');
        let file = std::fs::File::create(&path)?;
        if self.compress {
            let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
            gz.write_all(&text)?;
            gz.finish()?;
        } else {
            let mut f = file;
            f.write_all(&text)?;
        }
        Ok(path)
    }
}

impl Sink for Dumper {
    fn published(&self, topology: &Topology, families: &[MetricFamily], _bytes: &[u8]) {
        let mut by_group: std::collections::BTreeMap<Group, Vec<Value>> = Default::default();
        for fam in families {
            let ty = if fam.get_field_type() == MetricType::COUNTER {
                "counter"
            } else {
                "gauge"
            };
            for m in fam.get_metric() {
                let labels: Vec<(&str, &str)> = m
                    .get_label()
                    .iter()
                    .map(|l| (l.name(), l.value()))
                    .collect();
                let value = if fam.get_field_type() == MetricType::COUNTER {
                    m.get_counter().value()
                } else {
                    m.get_gauge().value()
                };
                let label_obj: serde_json::Map<String, Value> = labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
                    .collect();
                by_group.entry(Group::of(&labels)).or_default().push(json!({
                    "name": fam.name(),
                    "type": ty,
                    "help": fam.help(),
                    "labels": label_obj,
                    "value": value,
                }));
            }
        }
        for (group, series) in by_group {
            let metrics = self.write("metrics", group, &Value::Array(series));
            let devices = self.write("deviceinfo", group, &device_info(topology, group));
            match (metrics, devices) {
                (Ok(m), Ok(d)) => tracing::debug!(
                    "dumped {} to {} and {}",
                    group.name(),
                    m.display(),
                    d.display()
                ),
                (Err(e), _) | (_, Err(e)) => tracing::warn!(
                    "cannot write a {} dump to {}: {e}",
                    group.name(),
                    self.dir.display()
                ),
            }
        }
    }
}

/// The entities of one group, as discovered.
fn device_info(t: &Topology, group: Group) -> Value {
    match group {
        Group::Gpu => json!({
            "gpus": t.gpus.iter().map(|g| json!({
                "gpu": g.id,
                "uuid": g.uuid,
                "pciBusId": g.pci_bus_id,
                "modelName": g.model,
                "instances": t.instances.iter().filter(|i| i.gpu == g.id).map(|i| json!({
                    "entityId": i.entity.id,
                    "gpuInstanceId": i.nvml_instance_id,
                    "computeInstanceId": i.compute_instance,
                    "profile": i.profile,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }),
        Group::Switch => json!({ "switches": t.switches }),
        Group::Link => json!({
            "links": t.links.iter().map(|l| json!({
                "parentType": if l.id.parent == dcgm_sys::EntityGroup::Switch { "Switch" } else { "GPU" },
                "parentId": l.id.parent_id,
                "index": l.id.index,
                "state": format!("{:?}", l.state),
            })).collect::<Vec<_>>(),
        }),
        Group::Cpu | Group::CpuCore => json!({
            "cpus": t.cpus.iter().map(|c| json!({ "cpu": c.id, "cores": c.cores })).collect::<Vec<_>>(),
        }),
    }
}

/// Eight hex digits that keep two dumps within one second apart (not for security).
fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish() as u32
}

/// Is `name` a dump file this exporter writes (for tests and the cleanup)?
pub fn is_dump_name(name: &str) -> bool {
    PREFIXES.iter().any(|p| name.starts_with(p))
        && (name.ends_with(".json") || name.ends_with(".json.gz"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_go_to_their_entity_group() {
        assert_eq!(Group::of(&[("gpu", "0"), ("UUID", "x")]), Group::Gpu);
        assert_eq!(Group::of(&[("nvswitch", "nvswitch0")]), Group::Switch);
        assert_eq!(
            Group::of(&[("nvlink", "1"), ("nvswitch", "nvswitch0")]),
            Group::Link
        );
        assert_eq!(Group::of(&[("cpucore", "3"), ("cpu", "0")]), Group::CpuCore);
        assert_eq!(Group::of(&[("cpu", "0")]), Group::Cpu);
    }

    #[test]
    fn cleanup_removes_only_old_dumps() {
        let dir = tempfile::tempdir().unwrap();
        let d = Dumper {
            dir: dir.path().to_path_buf(),
            retention_hours: 1,
            compress: false,
        };
        let old = SystemTime::now() - Duration::from_secs(2 * 3600);
        for name in [
            "metrics-GPU-x.json",
            "other.txt",
            "deviceinfo-GPU-y.json.gz",
        ] {
            let p = dir.path().join(name);
            std::fs::write(&p, "{}").unwrap();
            std::fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        std::fs::write(dir.path().join("metrics-GPU-new.json"), "{}").unwrap();
        d.cleanup();
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["metrics-GPU-new.json", "other.txt"]);
    }
}
