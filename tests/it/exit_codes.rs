//! Exit codes over many start/stop cycles, several exporters at once: SIGTERM after the first
//! page exits 0, a start that cannot reach DCGM exits 1, and nothing dies by a signal. The
//! real library faulted on exit (SIGSEGV, 139) in a few percent of runs while it was unloaded
//! under its own threads; the simulator, with `DCGM_SIM_STRICT_EXIT=1`, faults every time
//! DCGM is left initialised with live threads at exit, so the sim tier is deterministic and
//! the real tier counts. `bench/` runs the long version (`bench exit-codes`).

use crate::support::nvml_yaml::Gpu;
use crate::support::real_dcgm::{kit, Scratch};
use crate::support::*;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Cycles per mode on the real library (the issue's figure: ≥ 40, several at once).
const REAL_CYCLES: usize = 40;
/// Cycles per mode on the simulator: its check is deterministic, a few suffice.
const SIM_CYCLES: usize = 8;
/// Exporters running at once for SIGTERM cycles (each starts DCGM: CPU-bound).
const PARALLEL: usize = 4;
/// Exporters at once for failed connects: each waits out DCGM's 5 s connect timeout.
const PARALLEL_WAITING: usize = 8;

/// "exit N" or "signal N".
fn outcome(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => format!("{st}"),
    }
}

/// Runs `n` cycles of `one` on `parallel` threads: the histogram of outcomes and the stderr
/// of the first cycle whose outcome was not `expected`.
fn run_cycles(
    n: usize,
    parallel: usize,
    expected: &str,
    one: impl Fn() -> (ExitStatus, String) + Sync,
) -> (BTreeMap<String, usize>, Option<String>) {
    let next = AtomicUsize::new(0);
    let hist = Mutex::new(BTreeMap::<String, usize>::new());
    let odd = Mutex::new(None::<String>);
    std::thread::scope(|s| {
        for _ in 0..parallel {
            s.spawn(|| {
                while next.fetch_add(1, Ordering::SeqCst) < n {
                    let (st, stderr) = one();
                    let o = outcome(st);
                    if o != expected {
                        odd.lock().unwrap().get_or_insert(stderr);
                    }
                    *hist.lock().unwrap().entry(o).or_default() += 1;
                }
            });
        }
    });
    (hist.into_inner().unwrap(), odd.into_inner().unwrap())
}

fn assert_all(
    what: &str,
    n: usize,
    expected: &str,
    (hist, odd): (BTreeMap<String, usize>, Option<String>),
) {
    eprintln!("{what}: {n} cycles: {hist:?}");
    assert_eq!(
        hist,
        BTreeMap::from([(expected.to_string(), n)]),
        "{what}: every cycle should end with {expected}; first other one's stderr:\n{}",
        odd.unwrap_or_default()
    );
}

/// Starts, waits for the first page (polling), SIGTERM, waits for the exit.
fn sigterm_cycle(b: ExporterBuilder) -> (ExitStatus, String) {
    let mut e = b.start();
    let st = e.signal_and_wait("TERM");
    (st, e.stderr())
}

/// Starts an exporter that cannot reach DCGM and waits for it to give up.
fn failed_start_cycle(b: ExporterBuilder) -> (ExitStatus, String) {
    let mut e = b.spawn();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = e.child.try_wait().expect("wait for the exporter") {
            return (st, e.stderr());
        }
        assert!(
            Instant::now() < deadline,
            "the exporter did not give up on a closed port in 60 s: {}",
            e.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A loopback port nothing listens on, and nothing else can take while the socket lives:
/// bound, never listening, so a connection to it is refused. (A port found free and let go
/// could be taken by another test's host engine meanwhile.)
fn closed_port() -> (u16, socket2::Socket) {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bind");
    let port = s
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .expect("bound address")
        .port();
    (port, s)
}

fn strict(b: ExporterBuilder) -> ExporterBuilder {
    b.env("DCGM_SIM_STRICT_EXIT", "1")
}

#[test]
fn sim_embedded_sigterm_exits_0_every_time() {
    let r = run_cycles(SIM_CYCLES, PARALLEL, "exit 0", || {
        sigterm_cycle(strict(exporter()))
    });
    assert_all("sim embedded SIGTERM", SIM_CYCLES, "exit 0", r);
}

#[test]
fn sim_remote_sigterm_exits_0_every_time() {
    let port = free_port();
    let _engine = HostEngine::start(port, None);
    let r = run_cycles(SIM_CYCLES, PARALLEL, "exit 0", || {
        sigterm_cycle(strict(exporter()).args(&["-r", &format!("127.0.0.1:{port}")]))
    });
    assert_all("sim remote SIGTERM", SIM_CYCLES, "exit 0", r);
}

#[test]
fn sim_failed_connect_exits_1_every_time() {
    let r = run_cycles(SIM_CYCLES, PARALLEL_WAITING, "exit 1", || {
        let (port, _held) = closed_port();
        failed_start_cycle(strict(exporter()).args(&[
            "-r",
            &format!("127.0.0.1:{port}"),
            "--exit-if-hostengine-unreachable",
        ]))
    });
    assert_all("sim failed connect", SIM_CYCLES, "exit 1", r);
}

fn one_gpu() -> Vec<Gpu> {
    vec![Gpu::default()]
}

#[test]
fn real_embedded_sigterm_exits_0_over_40_cycles() {
    let Some(kit) = kit() else { return };
    let dir = Scratch::new("exit-embedded");
    let yaml = dir.yaml(&one_gpu());
    let r = run_cycles(REAL_CYCLES, PARALLEL, "exit 0", || {
        sigterm_cycle(kit.embedded(&yaml))
    });
    assert_all("real embedded SIGTERM", REAL_CYCLES, "exit 0", r);
}

#[test]
fn real_remote_sigterm_exits_0_over_40_cycles() {
    let Some((kit, _dir, _yaml, port, _engine)) = real_engine("exit-remote", &one_gpu()) else {
        return;
    };
    let r = run_cycles(REAL_CYCLES, PARALLEL, "exit 0", || {
        sigterm_cycle(kit.remote(port))
    });
    assert_all("real remote SIGTERM", REAL_CYCLES, "exit 0", r);
}

#[test]
fn real_failed_connect_exits_1_over_40_cycles() {
    let Some(kit) = kit() else { return };
    let r = run_cycles(REAL_CYCLES, PARALLEL_WAITING, "exit 1", || {
        let (port, _held) = closed_port();
        failed_start_cycle(kit.remote(port).arg("--exit-if-hostengine-unreachable"))
    });
    assert_all("real failed connect", REAL_CYCLES, "exit 1", r);
}

/// `--textfile-directory`: a missing directory is created, and a clean exit removes
/// `dcgm.prom` (node-exporter would go on serving its last values as current); a crash
/// leaves it, for the staleness alert on `node_textfile_mtime_seconds` to see.
#[test]
fn sigterm_removes_the_textfile_and_a_missing_directory_is_created() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("textfile/collector");
    let prom = dir.join("dcgm.prom");
    let textfile = |e: &Exporter| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(&prom).is_ok_and(|t| t.contains("DCGM_FI_DEV_GPU_TEMP")) {
            assert!(
                Instant::now() < deadline,
                "no dcgm.prom with series in 30 s: {}",
                e.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let start = || {
        strict(exporter())
            .args(&["-a", "", "--textfile-directory", dir.to_str().unwrap()])
            .spawn()
    };
    let mut e = start();
    textfile(&e);
    let st = e.signal_and_wait("TERM");
    assert_eq!(outcome(st), "exit 0", "{}", e.stderr());
    assert!(!prom.exists(), "dcgm.prom outlived a clean exit");
    assert!(dir.is_dir());

    let mut e = start();
    textfile(&e);
    let st = e.signal_and_wait("KILL");
    assert_eq!(outcome(st), "signal 9");
    assert!(
        prom.exists(),
        "a crash cannot clean up; the staleness alert covers it"
    );
}

/// SIGTERM while the host engine is stopped (SIGSTOP): a DCGM call stays stuck, and
/// dcgmShutdown waits for it (the real one for up to 60 s). The exporter gives DCGM its
/// shutdown deadline, then exits 0 without running libdcgm's destructors under the stuck
/// thread (which would fault: the simulator's strict check).
fn sigterm_with_a_stopped_engine(e: &mut Exporter, engine_pid: u32) {
    signal(engine_pid, "STOP");
    e.wait_until(30, |e| {
        e.get("/ready").0 == 503 && e.stderr().contains("no answer from DCGM")
    });
    signal(e.child.id(), "TERM");
    let st = e.exit_within(60, "no exit 60 s after SIGTERM");
    assert_eq!(outcome(st), "exit 0", "{}", e.stderr());
    e.assert_logged("DCGM did not shut down within");
}

#[test]
fn sim_sigterm_with_a_stopped_host_engine_exits_0_after_the_shutdown_deadline() {
    let port = free_port();
    let engine = HostEngine::start(port, None);
    let mut e = strict(exporter())
        .args(&["-r", &format!("127.0.0.1:{port}"), "-c", "300"])
        .start();
    sigterm_with_a_stopped_engine(&mut e, engine.child.id());
}

#[test]
fn real_sigterm_with_a_stopped_host_engine_exits_0_after_the_shutdown_deadline() {
    let Some((kit, _dir, _yaml, port, engine)) = real_engine("exit-stopped", &one_gpu()) else {
        return;
    };
    let mut e = kit.remote(port).args(&["-c", "300"]).start();
    sigterm_with_a_stopped_engine(&mut e, engine.child.id());
}

/// The harness tells how an exporter ended: its own exit status (a counters file that is
/// not there: 1), not a made-up success.
#[test]
fn an_exporter_that_ended_is_reported_with_its_own_exit_status() {
    let e = exporter()
        .args(&["-f", "/nonexistent/counters.csv"])
        .spawn();
    let st = poll(20, Duration::from_millis(50), || {
        e.child_status()
            .map_err(|err| err.to_string())?
            .ok_or_else(|| "still running".to_string())
    });
    assert_eq!(st.code(), Some(1), "{st}: {}", e.stderr());
}
