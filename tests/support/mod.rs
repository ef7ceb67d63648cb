//! Shared helpers for the exporter's integration tests: build the simulator, start the
//! real `dcgm-exporter` binary against it, scrape and parse what it serves.
#![allow(dead_code)]

pub mod certs;
pub mod events;
pub mod fake_apiserver;
pub mod fuzzing;
pub mod kubelet;
pub mod nvml_yaml;
pub mod otlp_receiver;
pub mod prom;
pub mod real_dcgm;
pub mod skip;
pub mod spikes;

#[allow(unused_imports)]
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

/// Builds dcgm-sim (library and host engine) and nvml-sim once per test binary; `cargo
/// test` on a clean clone does not build another package's cdylib for us.
pub fn sim_built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = bin_dir();
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-q"]);
        // Built alone, the simulators get their dependencies' features resolved for them
        // only (resolver 2 resolves per selection, dev-dependencies' features only when
        // tests are built), so under `cargo test --workspace` some 30 crates would compile
        // a second time. `.ci/run` says it runs the whole workspace: then the same
        // selection finds every unit fresh.
        if std::env::var_os("DCGM_TEST_WORKSPACE_BUILD").is_some_and(|v| v == "1") {
            cmd.args(["--workspace", "--lib", "--bins", "--tests"]);
        } else {
            cmd.args(["-p", "dcgm-sim", "-p", "nvml-sim", "--lib", "--bins"]);
        }
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build -p dcgm-sim");
        assert!(status.success(), "building dcgm-sim failed");
        dir
    })
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
}

pub fn exporter() -> ExporterBuilder {
    ExporterBuilder {
        args: Vec::new(),
        env: Vec::new(),
        profile: None,
        listen_env: false,
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
    /// A simulator profile file under etc/sim/.
    pub fn profile(mut self, name: &str) -> Self {
        self.profile = Some(repo(&format!("etc/sim/{name}")));
        self
    }

    fn command(&self, port: u16) -> Command {
        let mut cmd = exporter_command();
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
        let out = self
            .command(free_port())
            .stdout(Stdio::null())
            .output()
            .expect("run dcgm-exporter");
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
            if let Ok(Some(st)) = self.child_status() {
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

    pub fn child_status(&self) -> std::io::Result<Option<std::process::ExitStatus>> {
        // try_wait needs &mut; poll /proc instead to keep &self.
        let alive = Path::new(&format!("/proc/{}", self.child.id())).exists();
        let zombie = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .map(|s| s.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')))
            .unwrap_or(true);
        if !alive || zombie {
            return Ok(Some(std::process::ExitStatus::default()));
        }
        Ok(None)
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
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
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.scrape();
            if pred(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "condition not met within {secs}s; last page:\n{}",
                dump(&s)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Sends a signal and waits for the exit code.
    pub fn signal_and_wait(&mut self, sig: &str) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "exporter did not exit after SIG{sig}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
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
                let mut v = String::new();
                while let Some((_, c)) = chars.next() {
                    match c {
                        '\\' => match chars.next() {
                            Some((_, 'n')) => v.push('\n'),
                            Some((_, o)) => v.push(o),
                            None => break,
                        },
                        '"' => break,
                        o => v.push(o),
                    }
                }
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
