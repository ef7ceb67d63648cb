//! `bench -- exit-codes`: the long version of `tests/it/exit_codes.rs`. Starts the exporter
//! many times in each mode (embedded, remote, `-r` to a closed port), several at once, stops
//! each with SIGTERM after its first page (the closed-port ones give up by themselves), and
//! prints the histogram of exit codes per mode. Asserts nothing.

use crate::{free_port, get, Killed};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Options {
    pub cycles: usize,
    pub parallel: usize,
    /// An unpacked real DCGM kit (`lib/libdcgm.so.4`, `bin/nv-hostengine`); the simulator
    /// when `None`.
    pub real: Option<PathBuf>,
    pub root: PathBuf,
    /// Another exporter binary to count (an older build, for a before/after figure).
    pub exporter: Option<PathBuf>,
}

/// How the exporter is started in one mode.
struct Mode {
    name: &'static str,
    args: Vec<String>,
    /// Stop with SIGTERM after the first page (else wait for it to give up).
    sigterm: bool,
}

pub fn run(bin: &Path, o: &Options) -> Result<(), String> {
    let mut env: Vec<(String, String)> = Vec::new();
    let scratch = std::env::temp_dir().join(format!("bench-exit-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    let library = match &o.real {
        Some(kit) => {
            let (library, kit_env) = crate::real_kit(kit, 1, &scratch.join("nvml.yaml"))?;
            env.extend(kit_env);
            library
        }
        None => bin.join("libdcgm.so.4"),
    };
    let engine_port = free_port()?;
    let _engine = start_engine(bin, o.real.as_deref(), &env, &scratch, engine_port)?;
    let closed = free_port()?;
    let modes = [
        Mode {
            name: "embedded, SIGTERM",
            args: vec![],
            sigterm: true,
        },
        Mode {
            name: "remote, SIGTERM",
            args: vec!["-r".into(), format!("127.0.0.1:{engine_port}")],
            sigterm: true,
        },
        Mode {
            name: "-r to a closed port",
            // An engine unreachable at start is retried by default; this flag keeps
            // dcgm-exporter's exit at start, the failed start this mode counts.
            args: vec![
                "-r".into(),
                format!("127.0.0.1:{closed}"),
                "--exit-if-hostengine-unreachable".into(),
            ],
            sigterm: false,
        },
    ];
    let backend = if o.real.is_some() {
        "real DCGM 4.6"
    } else {
        "dcgm-sim"
    };
    println!(
        "{backend}: {} cycles per mode, {} at once",
        o.cycles, o.parallel
    );
    for mode in &modes {
        let t0 = Instant::now();
        let hist = cycles(o, mode, bin, &library, &env)?;
        println!(
            "{:<22} {:?}  ({:.0} s)",
            mode.name,
            hist,
            t0.elapsed().as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

fn start_engine(
    bin: &Path,
    real: Option<&Path>,
    env: &[(String, String)],
    dir: &Path,
    port: u16,
) -> Result<Killed, String> {
    let mut cmd = match real {
        Some(kit) => {
            let mut c = Command::new(kit.join("bin/nv-hostengine"));
            c.args(["-n", "-p", &port.to_string(), "-b", "127.0.0.1"])
                .arg("--pid")
                .arg(dir.join("he.pid"))
                .args(["--log-level", "WARN", "-f"])
                .arg(dir.join("he.log"))
                .arg("--home-dir")
                .arg(dir)
                .stdout(Stdio::null());
            c
        }
        None => {
            let mut c = Command::new(bin.join("dcgm-sim-hostengine"));
            c.args(["-n", "-p", &port.to_string()])
                .stdout(Stdio::piped());
            c
        }
    };
    let mut child = cmd
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start the host engine: {e}"))?;
    if let Some(out) = child.stdout.take() {
        let lines = BufReader::new(out).lines();
        std::thread::spawn(move || for _ in lines {});
    }
    let engine = Killed(child);
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(format!("the host engine did not listen on {port} in 30 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(engine)
}

fn outcome(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => format!("{st}"),
    }
}

fn cycles(
    o: &Options,
    mode: &Mode,
    bin: &Path,
    library: &Path,
    env: &[(String, String)],
) -> Result<BTreeMap<String, usize>, String> {
    let next = AtomicUsize::new(0);
    let hist = Mutex::new(BTreeMap::<String, usize>::new());
    let failure = Mutex::new(None::<String>);
    std::thread::scope(|s| {
        for _ in 0..o.parallel {
            s.spawn(|| {
                while next.fetch_add(1, Ordering::SeqCst) < o.cycles {
                    match one(o, mode, bin, library, env) {
                        Ok(out) => *hist.lock().unwrap().entry(out).or_default() += 1,
                        Err(e) => {
                            failure.lock().unwrap().get_or_insert(e);
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(format!("{}: {e}", mode.name));
    }
    Ok(hist.into_inner().unwrap())
}

/// One start/stop: the outcome ("exit 0", "signal 11"...).
fn one(
    o: &Options,
    mode: &Mode,
    bin: &Path,
    library: &Path,
    env: &[(String, String)],
) -> Result<String, String> {
    let port = free_port()?;
    let csv = o.root.join("etc/default-counters.csv");
    let exe = o
        .exporter
        .clone()
        .unwrap_or_else(|| bin.join("dcgm-exporter"));
    let child = Command::new(exe)
        .args(["-f", csv.to_str().ok_or("path")?])
        .args(["-a", &format!("127.0.0.1:{port}"), "-c", "500"])
        .args(["--dcgm-library", library.to_str().ok_or("path")?])
        .args(&mode.args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start exporter: {e}"))?;
    let mut child = Killed(child);
    let t0 = Instant::now();
    if mode.sigterm {
        let url = format!("http://127.0.0.1:{port}/metrics");
        loop {
            if let Some(st) = child.0.try_wait().map_err(|e| e.to_string())? {
                // Died before its first page: count what it died of.
                return Ok(format!("{} before ready", outcome(st)));
            }
            if get(&url).is_ok_and(|b| b.lines().any(|l| l.starts_with("DCGM_FI_"))) {
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                return Err("no first page within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Command::new("kill")
            .args(["-TERM", &child.0.id().to_string()])
            .status()
            .map_err(|e| format!("kill: {e}"))?;
    }
    let t1 = Instant::now();
    loop {
        if let Some(st) = child.0.try_wait().map_err(|e| e.to_string())? {
            return Ok(outcome(st));
        }
        if t1.elapsed() > Duration::from_secs(60) {
            return Ok("no exit within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
