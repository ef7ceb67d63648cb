//! Shared helpers for the exporter's integration tests: build the simulator, start the
//! real `dcgm-exporter` binary against it, scrape and parse what it serves.

pub mod alone;
pub mod certs;
pub mod events;
pub mod fake_apiserver;
pub mod fuzzing;
pub mod kubelet;
pub mod nvml_yaml;
pub mod otlp_receiver;
pub mod prom;
pub mod real_dcgm;
pub mod run;
pub mod skip;
pub mod spikes;

pub(crate) use alone::alone;
pub use real_dcgm::real_engine;
pub use run::{
    child_output_within, output_within, read_lines_within, status_within, succeed_within, BUILD,
    QUICK,
};
pub use skip::{have_tool, require_tool, skip};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Directory holding the exporter binary, the sim library and the sim host engine.
pub fn bin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dcgm-exporter"))
        .parent()
        .expect("binary has a parent dir")
        .to_path_buf()
}

/// The simulators' artifacts next to the exporter binary: the files cargo writes when it
/// builds dcgm-sim (library and host engine) and nvml-sim.
const SIM_ARTIFACTS: [&str; 3] = ["libdcgm.so.4", "libnvidia-ml.so.1", "dcgm-sim-hostengine"];

/// The sources those artifacts are built from: the simulators' crates (model and NVML
/// included) and the crate they share with the exporter, less their own tests, and the
/// lock file.
const SIM_SOURCES: [&str; 3] = ["dcgm-sim", "dcgm-sys", "Cargo.lock"];

/// Builds dcgm-sim (library and host engine) and nvml-sim once per test process where they
/// are missing or older than their sources; `cargo test -p dcgm-exporter` does not build
/// another package's cdylib for us, `cargo test --workspace` does.
///
/// Where they are fresh no cargo runs at all: a build with another package selection would
/// resolve the dependencies' features for that selection alone (resolver 2 unifies
/// dev-dependencies' features only when tests are built), and compile some 30 crates again
/// that the `cargo test` running us has just built. Where they are stale the build selects
/// what `cargo test --workspace` (the README's test command) builds, so that command's own
/// units are found fresh.
pub fn sim_built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = bin_dir();
        if sims_fresh(&dir) {
            return dir;
        }
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-q", "--workspace", "--lib", "--bins", "--tests"]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = run::status_within(cmd.current_dir(env!("CARGO_MANIFEST_DIR")), run::BUILD);
        assert!(status.success(), "building dcgm-sim failed");
        mark_fresh(&dir);
        dir
    })
}

/// Cargo leaves an artifact that was up to date untouched, so one older than a change that
/// did not concern it (a new dependency in `Cargo.lock`) would look stale to every later
/// test run, each then building again: once cargo has built or confirmed them, they are
/// dated now.
fn mark_fresh(dir: &Path) {
    let now = std::time::SystemTime::now();
    for a in SIM_ARTIFACTS {
        // Read-only: a host engine may be running from it (writing would be ETXTBSY); the
        // owner may set its times through any descriptor.
        let file = std::fs::File::open(dir.join(a));
        if let Err(e) = file.and_then(|f| f.set_modified(now)) {
            eprintln!("cannot date {a} in {}: {e}", dir.display());
        }
    }
}

/// Whether every simulator artifact in `dir` is newer than every file of [`SIM_SOURCES`].
fn sims_fresh(dir: &Path) -> bool {
    let built = SIM_ARTIFACTS
        .iter()
        .map(|a| {
            std::fs::metadata(dir.join(a))
                .and_then(|m| m.modified())
                .ok()
        })
        .collect::<Option<Vec<_>>>()
        .and_then(|times| times.into_iter().min());
    let Some(built) = built else {
        return false;
    };
    SIM_SOURCES
        .iter()
        .all(|s| newest(&repo(s)).is_some_and(|t| t < built))
}

/// The newest modification time of `path` and the files under it, its `tests/` and
/// `target/` folders left out (None where one cannot be read).
fn newest(path: &Path) -> Option<std::time::SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    let mut t = meta.modified().ok()?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).ok()? {
            let entry = entry.ok()?;
            if matches!(entry.file_name().to_str(), Some("tests" | "target")) {
                continue;
            }
            t = t.max(newest(&entry.path())?);
        }
    }
    Some(t)
}

pub fn sim_library() -> PathBuf {
    sim_built().join("libdcgm.so.4")
}

/// The simulated NVML, under the name NVML clients load (`libnvidia-ml.so.1`).
pub fn nvml_library() -> PathBuf {
    sim_built().join("libnvidia-ml.so.1")
}

/// The exporter with the simulated NVML (`libnvidia-ml.so.1`) on its library path.
pub fn with_sim_nvml(b: ExporterBuilder) -> ExporterBuilder {
    let dir = nvml_library();
    b.env("LD_LIBRARY_PATH", dir.parent().unwrap().to_str().unwrap())
}

/// The variables a spawned exporter or host engine keeps from this process: what finds
/// programs and libraries, temporary files, backtraces and coverage. Everything else (a
/// developer's own `DCGM_EXPORTER_*`, `KUBECONFIG`, `XDG_RUNTIME_DIR`, `DCGM_SIM_*`...)
/// stays out; a test sets what it means explicitly.
pub const ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    // Cargo's own (target/debug, the toolchain's libraries) when it runs the tests.
    "LD_LIBRARY_PATH",
    "RUST_BACKTRACE",
    "RUST_LIB_BACKTRACE",
    "LLVM_PROFILE_FILE",
    "LANG",
    "LC_ALL",
];

/// Clears `cmd`'s environment down to [`ENV_ALLOWLIST`].
pub fn hermetic(cmd: &mut Command) -> &mut Command {
    cmd.env_clear();
    for k in ENV_ALLOWLIST {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    cmd
}

/// The exporter binary with a [`hermetic`] environment.
pub fn exporter_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dcgm-exporter"));
    hermetic(&mut cmd);
    cmd
}

/// Hides `/etc/dcgm-exporter` behind an empty tmpfs, then runs the command it is given.
const HIDE_ETC: &str =
    "[ ! -d /etc/dcgm-exporter ] || mount -t tmpfs none /etc/dcgm-exporter || exit 97
exec \"$@\"";

/// The exporter on one simulated GPU with `--config-file cfg` alone (the builder's default
/// `-f` and `-c` would win over the file), listening on the port it comes with.
pub fn config_file_command(cfg: &Path) -> (Command, u16) {
    let port = free_port();
    let mut cmd = exporter_command();
    cmd.args(["--config-file", cfg.to_str().unwrap()])
        .args(["-a", &format!("127.0.0.1:{port}")])
        .arg("--dcgm-library")
        .arg(sim_library())
        .env("DCGM_SIM_PROFILE", repo("etc/sim/one-gpu.toml"));
    (cmd, port)
}

/// [`exporter_command`] where nothing is at the exporter's default paths under
/// `/etc/dcgm-exporter`, whatever this machine has there: it runs in a mount namespace of
/// its own (the process is the exporter's: unshare and the shell exec it).
pub fn exporter_without_etc() -> Command {
    use std::os::unix::fs::MetadataExt;
    let mut cmd = Command::new("unshare");
    hermetic(&mut cmd);
    cmd.args(["--mount", "--propagation", "private"]);
    if std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() != 0) {
        cmd.arg("--map-root-user");
    }
    cmd.args(["--", "/bin/sh", "-c", HIDE_ETC, "sh"])
        .arg(env!("CARGO_BIN_EXE_dcgm-exporter"));
    cmd
}

pub fn hostengine_binary() -> PathBuf {
    sim_built().join("dcgm-sim-hostengine")
}

pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .expect("local addr")
        .port()
}

/// The 26 active rows of etc/default-counters.csv minus the driver-version label and
/// DCGM_FI_DEV_XID_ERRORS, which has no sample (so no series) until an XID happens, as in
/// real DCGM.
pub const DEFAULT_METRICS: &[&str] = &[
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
];

/// A running exporter, killed on drop.
pub struct Exporter {
    pub child: Child,
    pub port: u16,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

pub struct ExporterBuilder {
    args: Vec<String>,
    env: Vec<(String, String)>,
    profile: Option<PathBuf>,
    listen_env: bool,
    without_etc: bool,
}

pub fn exporter() -> ExporterBuilder {
    ExporterBuilder {
        args: Vec::new(),
        env: Vec::new(),
        profile: None,
        listen_env: false,
        without_etc: false,
    }
}

impl ExporterBuilder {
    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_string());
        self
    }
    pub fn args(mut self, a: &[&str]) -> Self {
        self.args.extend(a.iter().map(|s| s.to_string()));
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
    /// Listen through `DCGM_EXPORTER_LISTEN=:<port>` (as NVIDIA's DaemonSet does) instead of -a.
    pub fn listen_env(mut self) -> Self {
        self.listen_env = true;
        self
    }
    /// The simulator's control file (faults at run time, [`control`]).
    pub fn control(self, path: &Path) -> Self {
        self.env("DCGM_SIM_CONTROL", path.to_str().expect("utf-8 path"))
    }
    /// Pods from `kubelet` (`-k` and its socket).
    pub fn kubelet(self, kubelet: &kubelet::FakeKubelet) -> Self {
        let socket = kubelet.socket();
        self.args(&[
            "-k",
            "--pod-resources-kubelet-socket",
            socket.to_str().expect("utf-8"),
        ])
    }
    /// A remote host engine on this machine's `port` (`-r`).
    pub fn engine_at(self, port: u16) -> Self {
        self.args(&["-r", &format!("127.0.0.1:{port}")])
    }
    /// `--backend auto`, failing over to the NVML library at `nvml`.
    pub fn nvml_fallback(self, nvml: &Path) -> Self {
        self.args(&[
            "--backend",
            "auto",
            "--nvml-library",
            nvml.to_str().expect("utf-8 path"),
        ])
    }
    /// Run by [`exporter_without_etc`].
    pub fn without_etc(mut self) -> Self {
        self.without_etc = true;
        self
    }
    /// A simulator profile file under etc/sim/.
    pub fn profile(mut self, name: &str) -> Self {
        self.profile = Some(repo(&format!("etc/sim/{name}")));
        self
    }

    fn command(&self, port: u16) -> Command {
        let mut cmd = match self.without_etc {
            true => exporter_without_etc(),
            false => exporter_command(),
        };
        let has = |f: &str| {
            self.args
                .iter()
                .any(|a| a == f || a.starts_with(&format!("{f}=")))
        };
        if !has("-f") && !has("--collectors") {
            cmd.args([
                "-f",
                repo("etc/default-counters.csv")
                    .to_str()
                    .expect("utf-8 path"),
            ]);
        }
        if self.listen_env {
            cmd.env("DCGM_EXPORTER_LISTEN", format!(":{port}"));
        } else if !has("-a") && !has("--address") {
            cmd.args(["-a", &format!("127.0.0.1:{port}")]);
        }
        if !has("-c") && !has("--collect-interval") {
            cmd.args(["-c", "500"]);
        }
        // The tests written for DCGM pin it: under the default `auto` the simulated NVML
        // on cargo's library path would serve the core series through every engine outage
        // they provoke. The NVML backend and the failover are tested with `--backend`.
        if !has("--backend") && !self.env.iter().any(|(k, _)| k == "DCGM_EXPORTER_BACKEND") {
            cmd.args(["--backend", "dcgm"]);
        }
        if !has("--dcgm-library") {
            cmd.args([
                "--dcgm-library",
                sim_library().to_str().expect("utf-8 path"),
            ]);
        }
        cmd.args(&self.args);
        if let Some(p) = &self.profile {
            cmd.env("DCGM_SIM_PROFILE", p);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs to completion (for startup errors): (exit code, stderr).
    pub fn run_to_exit(self) -> (i32, String) {
        sim_built();
        let out = output_within(&mut self.command(free_port()), QUICK);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Starts the exporter and waits until /metrics has DCGM series (or 30 s pass).
    pub fn start(self) -> Exporter {
        self.start_at("/metrics")
    }

    /// Starts the exporter and waits until `path` (plain HTTP) has DCGM series.
    pub fn start_at(self, path: &str) -> Exporter {
        let ready = |e: &Exporter| {
            e.try_get(path).is_ok_and(|body| {
                body.lines().any(|l| {
                    l.starts_with("DCGM_")
                        || l.starts_with("dcgm_") && !l.starts_with("dcgm_exporter_")
                })
            })
        };
        // A port found free can be taken before the exporter binds it (as the ephemeral
        // port of any connection on the machine): the exporter then exits at once saying
        // so, and starts again on another port.
        let mut tries = 3;
        loop {
            let e = self.spawn();
            match e.poll_until(30, ready) {
                Ok(()) => return e,
                Err(why) if tries > 1 && why.contains("Address already in use") => tries -= 1,
                Err(why) => panic!("{why}"),
            }
        }
    }

    /// Starts the exporter without waiting for it (`-a ""` has no HTTP to wait on).
    pub fn spawn(&self) -> Exporter {
        sim_built();
        let port = free_port();
        Exporter::spawn(self.command(port), port)
    }
}

impl Exporter {
    /// Starts the exporter from a prepared command listening on `port`, without waiting
    /// for it (see [`Exporter::wait_until`]).
    pub fn spawn(mut cmd: Command, port: u16) -> Exporter {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dcgm-exporter");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let pipe = child.stderr.take().expect("piped stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Ok(mut s) = sink.lock() {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
        });
        Exporter {
            child,
            port,
            stderr,
        }
    }
}

impl Exporter {
    /// Polls `ready` until it holds; panics after `secs` or when the exporter exits.
    pub fn wait_until(&self, secs: u64, ready: impl Fn(&Exporter) -> bool) {
        if let Err(why) = self.poll_until(secs, ready) {
            panic!("{why}");
        }
    }

    /// Polls `ready` until it holds; why not, after `secs` or when the exporter exits.
    fn poll_until(&self, secs: u64, ready: impl Fn(&Exporter) -> bool) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let ended = match self.child_status() {
                Ok(None) => None,
                Ok(Some(st)) => Some(st.to_string()),
                // Gone from /proc: reaped, its status unknown.
                Err(e) => Some(e.to_string()),
            };
            if let Some(st) = ended {
                // The reader thread may still hold the last lines.
                std::thread::sleep(Duration::from_millis(200));
                return Err(format!(
                    "dcgm-exporter exited early ({st}): {}",
                    self.stderr()
                ));
            }
            if ready(self) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "exporter was not ready in {secs} s: {}",
                    self.stderr()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// GET with request headers: (status, body), the body decoded if compressed; status 0
    /// and the error when no response came.
    pub fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let mut req = ureq::get(&self.url(path)).timeout(Duration::from_secs(10));
        for (k, v) in headers {
            req = req.set(k, v);
        }
        match req.call() {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
            Err(e) => (0, e.to_string()),
        }
    }

    /// The exporter's exit status once it has ended, read from /proc (try_wait needs
    /// `&mut`): an ended child not yet reaped is a zombie whose stat holds its wait status
    /// (field 52, `exit_code`).
    pub fn child_status(&self) -> std::io::Result<Option<std::process::ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))?;
        // The fields after the command name, from the state (field 3) on.
        let fields: Vec<&str> = stat
            .rsplit_once(") ")
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        if fields.first() != Some(&"Z") {
            return Ok(None);
        }
        let raw = fields.get(52 - 3).and_then(|f| f.parse::<i32>().ok());
        let raw = raw.ok_or_else(|| std::io::Error::other(format!("unreadable stat: {stat}")))?;
        Ok(Some(std::process::ExitStatus::from_raw(raw)))
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Fails the test, showing the log, unless the log holds `needle`.
    pub fn assert_logged(&self, needle: &str) {
        let log = self.stderr();
        assert!(log.contains(needle), "no {needle:?} in the log:\n{log}");
    }

    /// Fails the test, showing the log, where the log holds `needle`.
    pub fn assert_not_logged(&self, needle: &str) {
        let log = self.stderr();
        assert!(!log.contains(needle), "{needle:?} in the log:\n{log}");
    }

    /// Waits until stderr contains `needle` (or `secs` pass).
    pub fn wait_for_log(&self, secs: u64, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !self.stderr().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "no '{needle}' in the log within {secs}s:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn try_get(&self, path: &str) -> Result<String, String> {
        http_get(&self.url(path)).map(|(_, b)| b)
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(&self.url(path))
            .unwrap_or_else(|e| panic!("GET {path}: {e}; stderr: {}", self.stderr()))
    }

    pub fn scrape(&self) -> Vec<Sample> {
        parse(&self.get("/metrics").1)
    }

    /// Scrapes until `pred` holds for the parsed page (or `secs` pass).
    pub fn scrape_until(&self, secs: u64, pred: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
        poll(secs, Duration::from_millis(200), || {
            let s = self.scrape();
            match pred(&s) {
                true => Ok(s),
                false => Err(format!(
                    "condition not met within {secs}s; last page:\n{}",
                    dump(&s)
                )),
            }
        })
    }

    /// Sends a signal and waits for the exit code.
    pub fn signal_and_wait(&mut self, sig: &str) -> std::process::ExitStatus {
        let _ = status_within(
            Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]),
            QUICK,
        );
        self.exit_within(15, &format!("exporter did not exit after SIG{sig}"))
    }

    /// Waits for the exporter to exit; after `secs` fails the test with `why` and its log.
    pub fn exit_within(&mut self, secs: u64, why: &str) -> std::process::ExitStatus {
        let (child, log) = (&mut self.child, &self.stderr);
        poll(secs, Duration::from_millis(50), || match child.try_wait() {
            Ok(Some(st)) => Ok(st),
            _ => Err(format!(
                "{why}: {}",
                log.lock().map(|s| s.clone()).unwrap_or_default()
            )),
        })
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Minimal HTTP/1.0 GET over loopback: (status, body).
pub fn http_get(url: &str) -> Result<(u16, String), String> {
    let resp = ureq::get(url).timeout(Duration::from_secs(10)).call();
    match resp {
        Ok(r) => {
            let status = r.status();
            let mut body = String::new();
            r.into_reader()
                .read_to_string(&mut body)
                .map_err(|e| e.to_string())?;
            Ok((status, body))
        }
        Err(ureq::Error::Status(code, r)) => Ok((code, r.into_string().unwrap_or_default())),
        Err(e) => Err(e.to_string()),
    }
}

/// One sample of the text exposition format.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Label names in the order they were written.
    pub label_order: Vec<String>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels.get(k).map(String::as_str)
    }
}

pub fn dump(s: &[Sample]) -> String {
    s.iter()
        .take(400)
        .map(|x| format!("{} {:?} {}\n", x.name, x.labels, x.value))
        .collect()
}

/// Parses the text format (enough for our own output: escaped label values, no timestamps).
pub fn parse(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => continue,
        };
        let mut labels = BTreeMap::new();
        let mut order = Vec::new();
        let value_part;
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            let mut end = 0;
            loop {
                // name
                let mut k = String::new();
                while let Some(&(_, c)) = chars.peek() {
                    if c == '=' || c == '}' {
                        break;
                    }
                    if c != ',' {
                        k.push(c);
                    }
                    chars.next();
                }
                match chars.next() {
                    Some((i, '}')) => {
                        end = i;
                        break;
                    }
                    Some((_, '=')) => {}
                    _ => break,
                }
                chars.next(); // opening quote
                let v = quoted(&mut chars);
                order.push(k.clone());
                labels.insert(k, v);
            }
            value_part = body[end + 1..].trim();
        } else {
            value_part = rest.trim();
        }
        let value = match value_part.split_whitespace().next() {
            Some("+Inf") => f64::INFINITY,
            Some("-Inf") => f64::NEG_INFINITY,
            Some("NaN") => f64::NAN,
            Some(v) => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in line: {line}")),
            None => continue,
        };
        out.push(Sample {
            name: name.to_string(),
            labels,
            label_order: order,
            value,
        });
    }
    out
}

/// A label value up to its closing quote, unescaped (`\n` is a newline, `\x` is `x`).
fn quoted(chars: &mut impl Iterator<Item = (usize, char)>) -> String {
    let mut v = String::new();
    let mut escaped = false;
    for (_, c) in chars {
        match c {
            _ if escaped => {
                v.push(if c == 'n' { '\n' } else { c });
                escaped = false;
            }
            '\\' => escaped = true,
            '"' => break,
            _ => v.push(c),
        }
    }
    v
}

pub fn series<'a>(samples: &'a [Sample], name: &str) -> Vec<&'a Sample> {
    samples.iter().filter(|s| s.name == name).collect()
}

/// Runs the simulated host engine in the foreground on a port; killed on drop.
pub struct HostEngine {
    pub child: Child,
    pub port: u16,
}

impl HostEngine {
    pub fn start(port: u16, profile: Option<&str>) -> HostEngine {
        HostEngine::start_with(port, profile, None)
    }

    /// [`HostEngine::start`] taking its run-time faults from the control file `control`.
    pub fn start_with(port: u16, profile: Option<&str>, control: Option<&Path>) -> HostEngine {
        let mut cmd = Command::new(hostengine_binary());
        cmd.args(["-n", "-p", &port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        hermetic(&mut cmd);
        if let Some(c) = control {
            cmd.env("DCGM_SIM_CONTROL", c);
        }
        if let Some(p) = profile {
            // A name under etc/sim/, or a profile a test wrote (an absolute path).
            let path = match Path::new(p).is_absolute() {
                true => PathBuf::from(p),
                false => repo(&format!("etc/sim/{p}")),
            };
            cmd.env("DCGM_SIM_PROFILE", path);
        }
        let mut child = cmd.spawn().expect("start dcgm-sim-hostengine");
        let out = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(out).lines();
        match lines.next() {
            Some(Ok(l)) if l.contains("listening") => {}
            other => panic!("host engine did not report listening: {other:?}"),
        }
        std::thread::spawn(move || for _ in lines {});
        HostEngine { child, port }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HostEngine {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends signal `sig` (its name: `HUP`, `STOP`...) to process `pid`; fails the test where
/// it cannot be sent.
pub fn signal(pid: u32, sig: &str) {
    let kill = status_within(
        Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]),
        QUICK,
    );
    assert!(kill.success(), "kill -{sig} {pid}");
}

/// Appends a line to a simulator control file (faults at run time).
pub fn control(path: &Path, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open control file");
    writeln!(f, "{line}").expect("write control file");
}

/// Scrapes `e` every 50 ms until `done`, checking each page with `check` (a failover must
/// hold on every page, not only the last); the last page and how long it took.
pub fn watch_until(
    e: &Exporter,
    secs: u64,
    check: impl Fn(&[Sample]),
    done: impl Fn(&[Sample]) -> bool,
) -> (Vec<Sample>, Duration) {
    let t0 = Instant::now();
    loop {
        let p = e.scrape();
        check(&p);
        if done(&p) {
            return (p, t0.elapsed());
        }
        assert!(
            t0.elapsed().as_secs() < secs,
            "not done in {secs} s:\n{}",
            dump(&p)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Lines of the simulator's watch log: (freq_us, max_keep_age_s, max_keep_samples, fields).
pub fn watch_log(path: &Path) -> Vec<(i64, f64, i32, Vec<u16>)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let kv: std::collections::HashMap<&str, &str> =
                l.split(' ').filter_map(|p| p.split_once('=')).collect();
            (
                kv["freq_us"].parse().unwrap(),
                kv["max_keep_age_s"].parse().unwrap(),
                kv["max_keep_samples"].parse().unwrap(),
                kv["fields"]
                    .split(',')
                    .map(|f| f.parse().unwrap())
                    .collect(),
            )
        })
        .collect()
}

/// The value of the series `name` whose labels include `labels` on `page`, summed over
/// those that match; None where none does.
pub fn find_metric(page: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut matching = page
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .peekable();
    matching.peek()?;
    Some(matching.map(|s| s.value).sum())
}

/// [`find_metric`] for the exporter's own series, 0 where the page has none (a counter
/// not yet counted).
pub fn self_metric(page: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    find_metric(page, name, labels).unwrap_or(0.0)
}

/// Whether Prometheus's `promtool` is here; otherwise [`skip`]s (fails under CI).
pub fn promtool() -> bool {
    require_tool("promtool", "apt-get install prometheus; .ci/run does this")
}

/// The resident set of process `pid`, in KiB (0 where it cannot be read).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Calls `attempt` every `every` until it gives a value; after `secs` fails the test with
/// why the last attempt gave none.
pub fn poll<T>(secs: u64, every: Duration, mut attempt: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match attempt() {
            Ok(v) => return v,
            Err(why) => assert!(Instant::now() < deadline, "{why}"),
        }
        std::thread::sleep(every);
    }
}

/// A file `name` holding `text` in a new temporary folder, removed with the folder.
pub fn temp_file(name: &str, text: impl AsRef<[u8]>) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// Writes `text` to the file `name` in `dir`; its path.
pub fn write_in(dir: &Path, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// An empty control file for the simulator ([`control`]) in a new temporary folder, and
/// the exporter on the simulator profile `profile` following it.
pub fn controlled(profile: &str) -> (tempfile::TempDir, PathBuf, ExporterBuilder) {
    let (dir, ctl) = temp_file("control", "");
    let b = exporter().profile(profile).control(&ctl);
    (dir, ctl, b)
}

/// The lines of `text` that hold `needle`.
pub fn lines_with<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(needle)).collect()
}

/// What a client sent up to the end of its request's head (the blank line), or up to where
/// it stopped.
pub fn request_head(stream: &mut impl Read) -> Vec<u8> {
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        // The end of the stream (0) or an error ends the head too.
        let Ok(n @ 1..) = stream.read(&mut buf) else {
            break;
        };
        req.extend_from_slice(&buf[..n]);
    }
    req
}

/// The simulated NVML loaded into this process on the simulator profile `profile`, which
/// it reads from the environment at its first init: a test calling it runs [`alone!`].
pub fn sim_nvml(profile: &Path) -> nvml_wrapper::Nvml {
    std::env::set_var("DCGM_SIM_PROFILE", profile);
    nvml_wrapper::Nvml::builder()
        .lib_path(nvml_library().as_os_str())
        .init()
        .expect("simulated NVML")
}

/// The exporter's collections counted on `page`, whatever their result.
pub fn collections(page: &[Sample]) -> f64 {
    self_metric(page, "dcgm_exporter_collections_total", &[])
}

/// The exporter's successful collections counted on `page`.
pub fn successes(page: &[Sample]) -> f64 {
    self_metric(
        page,
        "dcgm_exporter_collections_total",
        &[("result", "success")],
    )
}

/// The value of GPU `gpu`'s one series `name` on `page` (fails the test where it has none
/// or several).
pub fn gpu_value(page: &[Sample], name: &str, gpu: &str) -> f64 {
    let s: Vec<&Sample> = series(page, name)
        .into_iter()
        .filter(|s| s.label("gpu") == Some(gpu))
        .collect();
    assert_eq!(s.len(), 1, "{name} gpu {gpu}:\n{}", dump(page));
    s[0].value
}

/// The DCGM series (`DCGM_FI_*`) of a page, by name and GPU.
pub type Series = std::collections::BTreeSet<(String, Option<String>)>;

/// [`Series`] of `page` (the kit's values are static: what changes after a rebuild is
/// whether a series is there at all).
pub fn dcgm_series(page: &[Sample]) -> Series {
    page.iter()
        .filter(|s| s.name.starts_with("DCGM_FI_"))
        .map(|s| (s.name.clone(), s.label("gpu").map(str::to_string)))
        .collect()
}

/// The profiling rows of etc/default-counters.csv.
pub const PROFILING_ROWS: [&str; 5] = [
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
];

/// Each of [`PROFILING_ROWS`] is skipped with one line in `log`.
pub fn assert_profiling_rows_skipped_once(log: &str) {
    for row in PROFILING_ROWS {
        assert_eq!(
            log.matches(&format!("skipping {row}:")).count(),
            1,
            "{row}: {log}"
        );
    }
}

/// An empty simulator control file ([`control`]) and a file `name` holding `text` beside
/// it, in a new temporary folder: (the folder, the control file, the file).
pub fn control_and_file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (dir, ctl) = temp_file("control", "");
    let file = write_in(dir.path(), name, text);
    (dir, ctl, file)
}

/// The MIG UUID of GPU instance `gi` (NVML's id) of GPU `gpu` of a simulated node.
pub fn mig_uuid(n: &dcgm_sim_model::node::Node, gpu: usize, gi: u32) -> String {
    let instance = n.gpus[gpu].instances().iter().find(|i| i.nvml_id == gi);
    let instance = instance.unwrap_or_else(|| panic!("GPU {gpu} has GPU instance {gi}"));
    instance.uuid.clone()
}

/// The labels naming a MIG instance's series, in the order of the page.
pub const MIG_LABELS: [&str; 7] = [
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "GPU_I_PROFILE",
    "GPU_I_ID",
];

/// Label `label` of the first series of `page` that `pick` accepts; fails the test, saying
/// `what` was wanted, where there is none.
pub fn label_where(
    page: &[Sample],
    label: &str,
    what: &str,
    pick: impl Fn(&Sample) -> bool,
) -> String {
    let found = page.iter().find(|s| pick(s)).and_then(|s| s.label(label));
    found.unwrap_or_else(|| panic!("{what}")).to_string()
}

/// The exporter started on the simulator profile `profile` with `args`.
pub fn started(profile: &str, args: &[&str]) -> Exporter {
    exporter().profile(profile).args(args).start()
}
