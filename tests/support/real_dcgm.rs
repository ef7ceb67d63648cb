//! The real DCGM 4 (NVIDIA's `libdcgm.so.4` and `nv-hostengine`, built from source, with
//! DCGM's NVML injection library underneath) for the real-DCGM test tier.
//!
//! The kit most tests use is 4.6.0, `../shared/dcgm-real/dcgm-4.6.0-nvml-injection-linux-x86_64.tar.xz`
//! (rebuilt with `../shared/dcgm-real/build.sh`), unpacked once under the target directory, or
//! an unpacked kit named by `DCGM_REAL_DIR`. The older releases a host may run, 4.4.2 and
//! 4.5.3, are kits in `tests/dcgm-kits/` (built with `tests/dcgm-kits/build.sh`), found by
//! [`kit_of`]. Where a kit is absent or cannot run here, [`kit`] and [`kit_of`] say why and
//! the tests return early.

use super::{bin_dir, free_port, repo, ExporterBuilder};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const ARCHIVE: &str = "../shared/dcgm-real/dcgm-4.6.0-nvml-injection-linux-x86_64.tar.xz";

/// Every DCGM 4 release with a kit, oldest first, and its archive (relative to the repo).
pub const RELEASES: [(&str, &str); 3] = [
    (
        "4.4.2",
        "tests/dcgm-kits/dcgm-4.4.2-nvml-injection-linux-x86_64.tar.xz",
    ),
    (
        "4.5.3",
        "tests/dcgm-kits/dcgm-4.5.3-nvml-injection-linux-x86_64.tar.xz",
    ),
    ("4.6.0", ARCHIVE),
];

/// An unpacked kit: `bin/nv-hostengine`, `bin/dcgmi`, `lib/libdcgm.so.4`...
pub struct Kit {
    pub root: PathBuf,
}

/// The kit, or `None` after printing why the real-DCGM tests are skipped here. Under CI
/// (`CI=true` or `DCGM_REAL_REQUIRED`) a kit that cannot run fails the test instead.
pub fn kit() -> Option<&'static Kit> {
    static KIT: OnceLock<Result<Kit, String>> = OnceLock::new();
    match KIT.get_or_init(find) {
        Ok(k) => Some(k),
        Err(why) => {
            super::skip(&format!("the real-DCGM kit cannot run here: {why}"));
            None
        }
    }
}

/// The kit of DCGM `version` (one of [`RELEASES`]), or `None` after printing why it cannot
/// run here (a failure under CI, as for [`kit`]). 4.6.0 is [`kit`]'s.
pub fn kit_of(version: &str) -> Option<&'static Kit> {
    static KITS: OnceLock<Vec<Result<Kit, String>>> = OnceLock::new();
    let i = RELEASES.iter().position(|(v, _)| *v == version)?;
    if RELEASES[i].1 == ARCHIVE {
        return kit();
    }
    let all = KITS.get_or_init(|| {
        RELEASES
            .iter()
            .map(|(v, a)| {
                if *a == ARCHIVE {
                    Err("see kit()".into())
                } else {
                    open(unpack(a, &format!("real-dcgm-{v}"), v))
                }
            })
            .collect()
    });
    match &all[i] {
        Ok(k) => Some(k),
        Err(why) => {
            super::skip(&format!(
                "the real-DCGM {version} kit cannot run here: {why}"
            ));
            None
        }
    }
}

fn find() -> Result<Kit, String> {
    let root = match std::env::var_os("DCGM_REAL_DIR") {
        Some(d) => Ok(PathBuf::from(d)),
        None => unpack(ARCHIVE, "real-dcgm", "4.6.0"),
    };
    open(root)
}

fn open(root: Result<PathBuf, String>) -> Result<Kit, String> {
    if !(cfg!(target_os = "linux") && cfg!(target_arch = "x86_64")) {
        return Err("the kit is built for x86-64 Linux".into());
    }
    let kit = Kit { root: root? };
    for f in [kit.lib(), kit.bin("nv-hostengine"), kit.bin("dcgmi")] {
        if !f.exists() {
            return Err(format!("{} is missing", f.display()));
        }
        kit.runnable(&f)?;
    }
    Ok(kit)
}

/// Unpacks `archive` once into `target/<cache>/` (shared by every test binary); the kit's
/// root is `dcgm-<version>` in it.
fn unpack(archive: &str, cache: &str, version: &str) -> Result<PathBuf, String> {
    let archive = repo(archive);
    if !archive.exists() {
        return Err(format!("{} is absent", archive.display()));
    }
    let cache = bin_dir()
        .parent()
        .ok_or("target dir has no parent")?
        .join(cache);
    let root = cache.join(format!("dcgm-{version}"));
    let stamp = cache.join(".unpacked");
    let archive_len = std::fs::metadata(&archive)
        .map_err(|e| e.to_string())?
        .len();
    if std::fs::read_to_string(&stamp).ok() == Some(archive_len.to_string()) {
        return Ok(root);
    }
    // Unpack beside the cache and rename, so a concurrent test binary never sees half a kit.
    let tmp = cache.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let st = super::status_within(
        Command::new("tar")
            .arg("-xJf")
            .arg(&archive)
            .arg("-C")
            .arg(&tmp),
        super::BUILD,
    );
    if !st.success() {
        return Err(format!("tar -xJf {} failed", archive.display()));
    }
    std::fs::write(tmp.join(".unpacked"), archive_len.to_string()).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&cache);
    if std::fs::rename(&tmp, &cache).is_err() {
        // Another binary won the race; use its copy.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(root)
}

impl Kit {
    pub fn lib_dir(&self) -> PathBuf {
        self.root.join("lib")
    }

    pub fn lib(&self) -> PathBuf {
        self.lib_dir().join("libdcgm.so.4")
    }

    pub fn bin(&self, name: &str) -> PathBuf {
        self.root.join("bin").join(name)
    }

    /// The runtime packages (README of the kit) are installed: `ldd` finds every library.
    fn runnable(&self, f: &Path) -> Result<(), String> {
        let out = super::output_within(
            Command::new("ldd")
                .arg(f)
                .env("LD_LIBRARY_PATH", self.lib_dir()),
            super::QUICK,
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let missing: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("not found"))
            .map(str::trim)
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} needs runtime packages that are not installed ({}); see .ci/run",
                f.display(),
                missing.join(", ")
            ))
        }
    }

    /// The environment that makes DCGM read NVML's answers from `yaml`.
    pub fn env(&self, yaml: &Path) -> Vec<(String, String)> {
        vec![
            ("NVML_INJECTION_MODE".into(), "True".into()),
            ("NVML_YAML_FILE".into(), yaml.display().to_string()),
            (
                "LD_LIBRARY_PATH".into(),
                self.lib_dir().display().to_string(),
            ),
        ]
    }

    /// An exporter builder running embedded on the real library over `yaml`.
    pub fn embedded(&self, yaml: &Path) -> ExporterBuilder {
        let mut b = super::exporter()
            .arg("--dcgm-library")
            .arg(self.lib().to_str().expect("utf-8 path"));
        for (k, v) in self.env(yaml) {
            b = b.env(&k, &v);
        }
        b
    }

    /// An exporter builder connecting to a real host engine on `port`.
    pub fn remote(&self, port: u16) -> ExporterBuilder {
        super::exporter()
            .arg("--dcgm-library")
            .arg(self.lib().to_str().expect("utf-8 path"))
            .args(&["-r", &format!("127.0.0.1:{port}")])
            .env(
                "LD_LIBRARY_PATH",
                self.lib_dir().to_str().expect("utf-8 path"),
            )
    }

    /// Injects a field value into a host engine's cache (`dcgmi test --inject`), the way
    /// DCGM's own tests raise an XID on a GPU that has none.
    pub fn inject(&self, port: u16, gpu: u32, field: u16, value: i64) {
        let mut out = Command::new(self.bin("dcgmi"));
        out.args([
            "test",
            "--host",
            &format!("127.0.0.1:{port}"),
            "--inject",
            "--gpuid",
            &gpu.to_string(),
            "-f",
            &field.to_string(),
            "-v",
            &value.to_string(),
        ])
        .env("LD_LIBRARY_PATH", self.lib_dir());
        super::run::succeed_within(&mut out, super::QUICK, "dcgmi test --inject");
    }
}

/// A directory for one test's YAML and host-engine files, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "dcgm-exporter-real-{name}-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    /// A new scratch folder `name` holding the NVML injection YAML for `gpus`, and the YAML.
    pub fn with_yaml(name: &str, gpus: &[super::nvml_yaml::Gpu]) -> (Scratch, PathBuf) {
        let dir = Scratch::new(name);
        let yaml = dir.yaml(gpus);
        (dir, yaml)
    }

    /// Writes the NVML injection YAML for `gpus`.
    pub fn yaml(&self, gpus: &[super::nvml_yaml::Gpu]) -> PathBuf {
        let p = self.0.join("nvml.yaml");
        std::fs::write(&p, super::nvml_yaml::render(gpus)).expect("write NVML YAML");
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The real `nv-hostengine` in the foreground on a loopback port; killed on drop.
pub struct RealHostEngine {
    pub child: Child,
    pub port: u16,
    dir: PathBuf,
    yaml: PathBuf,
}

impl RealHostEngine {
    pub fn start(kit: &Kit, yaml: &Path, dir: &Path, port: u16) -> RealHostEngine {
        let mut cmd = Command::new(kit.bin("nv-hostengine"));
        cmd.args(["-n", "-p", &port.to_string(), "-b", "127.0.0.1"])
            .arg("--pid")
            .arg(dir.join(format!("he-{port}.pid")))
            .args(["--log-level", "WARN", "-f"])
            .arg(dir.join(format!("he-{port}.log")))
            .arg("--home-dir")
            .arg(dir)
            // NVML prints "not injected" lines for keys the YAML lacks.
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        super::hermetic(&mut cmd);
        for (k, v) in kit.env(yaml) {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start nv-hostengine");
        let mut he = RealHostEngine {
            child,
            port,
            dir: dir.to_path_buf(),
            yaml: yaml.to_path_buf(),
        };
        he.wait_listening();
        he
    }

    fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("nv-hostengine exited ({st}): {}", self.log());
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nv-hostengine did not listen on {} in 30 s: {}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("he-{}.log", self.port))).unwrap_or_default()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills the engine and starts a new one on the same port and YAML.
    pub fn restart(&mut self, kit: &Kit) {
        self.kill();
        let (yaml, dir, port) = (self.yaml.clone(), self.dir.clone(), self.port);
        *self = RealHostEngine::start(kit, &yaml, &dir, port);
    }

    pub fn signal(&self, sig: &str) {
        super::signal(self.child.id(), sig);
    }
}

impl Drop for RealHostEngine {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The kit's host engine on a free port, serving `gpus` from an NVML injection YAML in a
/// scratch folder named after `name`: (the kit, the folder, the YAML, the port, the
/// engine); `None` after the skip line where the kit cannot run here.
pub fn real_engine(
    name: &str,
    gpus: &[super::nvml_yaml::Gpu],
) -> Option<(&'static Kit, Scratch, PathBuf, u16, RealHostEngine)> {
    let kit = kit()?;
    let dir = Scratch::new(name);
    let yaml = dir.yaml(gpus);
    let port = super::free_port();
    let engine = RealHostEngine::start(kit, &yaml, &dir.0, port);
    Some((kit, dir, yaml, port, engine))
}

/// The kit's host engine over two GPUs, GPU 0 35 % busy and GPU 1 idle, with an HPC job
/// folder in the scratch folder naming `jobs[i]` the job on GPU `i`: (the kit, the folder,
/// the job folder, the port, the engine); `None` after the skip line where the kit cannot
/// run here.
pub fn busy_and_idle_with_jobs(
    name: &str,
    jobs: &[&str],
) -> Option<(&'static Kit, Scratch, PathBuf, u16, RealHostEngine)> {
    let busy = super::nvml_yaml::Gpu {
        gpu_util: 35,
        ..Default::default()
    };
    let (kit, dir, _yaml, port, engine) = real_engine(name, &[busy, Default::default()])?;
    let folder = dir.0.join("jobs");
    std::fs::create_dir_all(&folder).unwrap();
    for (gpu, job) in jobs.iter().enumerate() {
        std::fs::write(folder.join(gpu.to_string()), format!("{job}\n")).unwrap();
    }
    Some((kit, dir, folder, port, engine))
}
