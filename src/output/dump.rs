//! `--dump-enabled`: dcgm-exporter's debug dumps. For every entity group on the page it
//! writes `metrics-<group>-<YYYYMMDD-HHMMSS>-<8 hex>.json` (the series) and
//! `deviceinfo-<group>-<…>.json` (the entities the series were read from) to
//! `--dump-directory`, gzipped as `.json.gz` with `--dump-compression` (the default), as
//! indented JSON. Upstream writes them on every scrape; we collect once per interval
//! and scrapes never collect, so we write them once per collection. Dump files this process
//! wrote are removed hourly once older than `--dump-retention` hours (0 keeps them); a file
//! it did not write (another program's `metrics-…`, an earlier run's dumps) is never touched.

use crate::logging::utc::Utc;
use crate::model::node::Topology;
use crate::model::Page;
use crate::output::dirs;
use crate::output::sink::Sink;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

#[derive(Clone, Debug)]
pub(crate) struct Dumper {
    pub dir: PathBuf,
    pub retention_hours: u64,
    pub compress: bool,
    /// The files this process wrote, oldest first, with when: the only ones the clean-up
    /// may remove. Empty when nothing is ever removed (retention 0).
    written: Arc<Mutex<VecDeque<(SystemTime, String)>>>,
    /// Whether the directory was refused last time (logged once per streak).
    failing: Arc<AtomicBool>,
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
    pub(crate) fn new(dir: PathBuf, retention_hours: u64, compress: bool) -> Dumper {
        Dumper {
            dir,
            retention_hours,
            compress,
            written: Arc::default(),
            failing: Arc::default(),
        }
    }

    /// Creates the directory (or checks the existing one: `dirs`' rules for a private
    /// directory) and starts the hourly clean-up.
    pub(crate) fn start(self) -> Result<Dumper, crate::output::Error> {
        self.prepare_dir()?;
        let d = self.clone();
        crate::runtime::supervisor::Supervisor::global()
            .spawn(
                "dump-cleanup",
                Some(Duration::from_secs(3 * 3600)),
                move |beat| loop {
                    std::thread::sleep(Duration::from_secs(3600));
                    d.cleanup();
                    beat.alive();
                },
            )
            .map_err(crate::output::Error::DumpThread)?;
        Ok(self)
    }

    fn prepare_dir(&self) -> Result<(), crate::output::DirError> {
        self.open_dir().map(|_| ())
    }

    /// The dump directory checked and opened: every file is made and removed through it.
    fn open_dir(&self) -> Result<dirs::Handle, crate::output::DirError> {
        dirs::open_private(&self.dir, "--dump-directory")
    }

    /// Removes the dump files this process wrote more than the retention ago.
    pub(crate) fn cleanup(&self) {
        self.cleanup_at(SystemTime::now());
    }

    fn cleanup_at(&self, now: SystemTime) {
        if self.retention_hours == 0 {
            return;
        }
        let cutoff = now
            .checked_sub(Duration::from_secs(
                self.retention_hours.saturating_mul(3600),
            ))
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let expired: Vec<String> = {
            let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
            let keep = written.partition_point(|(t, _)| *t < cutoff);
            written.drain(..keep).map(|(_, name)| name).collect()
        };
        if expired.is_empty() {
            return;
        }
        let dir = match self.open_dir() {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("dump cleanup: {e}");
                return;
            }
        };
        let mut removed = 0;
        for name in expired {
            let path = self.dir.join(&name);
            match dir.remove(&name) {
                Ok(()) => removed += 1,
                // Removed by someone else meanwhile: nothing to do.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!("dump cleanup: {}: {e}", path.display()),
            }
        }
        if removed > 0 {
            tracing::debug!(
                "removed {removed} old dump files from {}",
                self.dir.display()
            );
        }
    }

    fn write(
        &self,
        dir: &dirs::Handle,
        prefix: &str,
        group: Group,
        data: &Value,
    ) -> std::io::Result<PathBuf> {
        let mut name = format!(
            "{prefix}-{}-{}-{:08x}",
            group.name(),
            Utc::now().compact(),
            random_u32()
        );
        name.push_str(if self.compress { ".json.gz" } else { ".json" });
        let path = self.dir.join(&name);
        let mut text = serde_json::to_vec_pretty(data).map_err(std::io::Error::other)?;
        text.push(b'\n');
        // A new file only, in the directory checked, never through a link planted under the
        // name or in place of the directory.
        let file = dir.create_new(&name, 0o644)?;
        if self.retention_hours > 0 {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            self.written
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_back((SystemTime::now(), name));
        }
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
    fn published(&self, topology: &Topology, page: &Page, _bytes: &[u8]) {
        // As upstream, a directory removed while running is created again; under the rules
        // of the start, so nothing planted meanwhile is written through.
        let dir = match self.open_dir() {
            Ok(d) => d,
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::error!("cannot write dumps: {e}");
                }
                return;
            }
        };
        if self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!("writing dumps to {} works again", self.dir.display());
        }
        let mut by_group: std::collections::BTreeMap<Group, Vec<Value>> = Default::default();
        for fam in page.families() {
            let ty = if fam.is_counter() { "counter" } else { "gauge" };
            for m in fam.series() {
                let labels: Vec<(&str, &str)> = m.labels().collect();
                let value = m.value();
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
            let metrics = self.write(&dir, "metrics", group, &Value::Array(series));
            let devices = self.write(&dir, "deviceinfo", group, &device_info(topology, group));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
    fn cleanup_removes_only_old_dumps_this_process_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let d = Dumper::new(dir.path().to_path_buf(), 1, false);
        let old = SystemTime::now() - Duration::from_secs(2 * 3600);
        // Another program's files, and one named as ours but not written by this process:
        // old enough for the retention, never ours to remove.
        for name in [
            "metrics-foo",
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
        let ours = d
            .write(&d.open_dir().unwrap(), "metrics", Group::Gpu, &json!([]))
            .unwrap();
        let names = |d: &Path| {
            let mut left: Vec<_> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            left.sort();
            left
        };
        // Within the retention: all stay.
        d.cleanup();
        assert!(ours.exists());
        // Two hours on: ours goes, the foreign ones stay.
        d.cleanup_at(SystemTime::now() + Duration::from_secs(2 * 3600));
        assert!(!ours.exists());
        assert_eq!(
            names(dir.path()),
            [
                "deviceinfo-GPU-y.json.gz",
                "metrics-GPU-x.json",
                "metrics-foo",
                "other.txt"
            ]
        );
    }

    #[test]
    fn with_retention_0_nothing_is_tracked_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let d = Dumper::new(dir.path().to_path_buf(), 0, true);
        let ours = d
            .write(&d.open_dir().unwrap(), "metrics", Group::Gpu, &json!([]))
            .unwrap();
        d.cleanup_at(SystemTime::now() + Duration::from_secs(1000 * 3600));
        assert!(ours.exists());
        assert!(d.written.lock().unwrap().is_empty());
    }

    /// The directory checked is the one written into: swapped for a link to another
    /// directory after the check, the dump still lands in the directory that was checked
    /// (moved aside here), and nothing is written where the link points.
    #[test]
    fn a_dump_is_written_into_the_directory_checked_not_through_a_link_swapped_in_after() {
        let base = tempfile::tempdir().unwrap();
        let dumps = base.path().join("dumps");
        let elsewhere = tempfile::tempdir().unwrap();
        let d = Dumper::new(dumps.clone(), 0, false);
        let dir = d.open_dir().unwrap();
        let aside = base.path().join("aside");
        std::fs::rename(&dumps, &aside).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &dumps).unwrap();
        let written = d.write(&dir, "metrics", Group::Gpu, &json!([])).unwrap();
        let name = written.file_name().unwrap();
        assert!(aside.join(name).is_file());
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
        // Checked again for the next round: the link is refused.
        let e = d.open_dir().err().unwrap();
        assert!(matches!(e.why, crate::output::DirWhy::IsLink { .. }), "{e}");
    }
}
