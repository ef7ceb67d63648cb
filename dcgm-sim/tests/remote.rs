//! Remote mode end to end: `dcgm-sim-hostengine` processes serving the cdylib's
//! `dcgmConnect_v2` / `dcgmConnect_v3` over TCP and unix sockets, including an engine that
//! dies and comes back.

mod support;

use dcgm_sys::ffi::*;
use dcgm_sys::versions::*;
use std::ffi::{c_int, CString};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, MutexGuard};
use std::time::{Duration, Instant};
use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_dcgm-sim-hostengine");

/// A host engine process, killed when dropped.
struct HostEngine {
    child: Child,
    /// What it printed after "listening on ", e.g. `tcp://127.0.0.1:40123`.
    address: String,
}

impl HostEngine {
    fn start(args: &[&str]) -> HostEngine {
        let mut child = Command::new(BIN)
            .args(args)
            .env_remove("DCGM_SIM_PROFILE")
            .env_remove("DCGM_SIM_CONTROL")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start dcgm-sim-hostengine");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the engine prints its address");
        let address = line
            .trim()
            .strip_prefix("dcgm-sim-hostengine listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        HostEngine { child, address }
    }

    /// `host:port` of a TCP engine.
    fn tcp(&self) -> String {
        self.address
            .strip_prefix("tcp://")
            .expect("a TCP engine")
            .to_string()
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HostEngine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dcgm-sim-remote-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The test lock, held while the library is initialised afresh with no embedded engine.
fn remote_only() -> MutexGuard<'static, ()> {
    let guard = lock();
    // SAFETY: no arguments.
    unsafe {
        assert_eq!(dcgmShutdown(), DCGM_ST_OK);
        assert_eq!(dcgmInit(), DCGM_ST_OK);
    }
    guard
}

fn connect_v2(
    address: &str,
    unix: bool,
    timeout_ms: u32,
    persist: bool,
) -> Result<dcgmHandle_t, dcgmReturn_t> {
    let addr = CString::new(address).unwrap();
    let mut p = dcgmConnectV2Params_v2 {
        version: CONNECT_V2_PARAMS_V2,
        persistAfterDisconnect: persist.into(),
        timeoutMs: timeout_ms,
        addressIsUnixSocket: unix.into(),
    };
    let mut h = 0;
    // SAFETY: pointers to live locals.
    match unsafe { dcgmConnect_v2(addr.as_ptr(), &mut p, &mut h) } {
        DCGM_ST_OK => Ok(h),
        e => Err(e),
    }
}

fn connect_v3(uri: &str, version: u32) -> Result<dcgmHandle_t, dcgmReturn_t> {
    let addr = CString::new(uri).unwrap();
    let mut p = dcgmConnectV3Params_v1 {
        version,
        persistAfterDisconnect: 0,
        timeoutMs: 2000,
    };
    let mut h = 0;
    // SAFETY: pointers to live locals.
    match unsafe { dcgmConnect_v3(addr.as_ptr(), &mut p, &mut h) } {
        DCGM_ST_OK => Ok(h),
        e => Err(e),
    }
}

/// Creates a GPU group {0, 1} and a field group {150, 155}, and watches them.
fn watch(h: dcgmHandle_t, tag: &str) -> (dcgmGpuGrp_t, dcgmFieldGrp_t) {
    let name = CString::new(tag).unwrap();
    let fields = [150u16, 155];
    let (mut g, mut fg) = (0, 0);
    // SAFETY: pointers to live locals.
    unsafe {
        assert_eq!(
            dcgmGroupCreate(h, DCGM_GROUP_EMPTY, name.as_ptr(), &mut g),
            DCGM_ST_OK
        );
        assert_eq!(dcgmGroupAddDevice(h, g, 0), DCGM_ST_OK);
        assert_eq!(dcgmGroupAddDevice(h, g, 1), DCGM_ST_OK);
        assert_eq!(
            dcgmFieldGroupCreate(h, 2, fields.as_ptr(), name.as_ptr(), &mut fg),
            DCGM_ST_OK
        );
        assert_eq!(dcgmWatchFields(h, g, fg, 100_000, 60.0, 0), DCGM_ST_OK);
        assert_eq!(dcgmUpdateAllFields(h, 1), DCGM_ST_OK);
    }
    (g, fg)
}

/// dcgm-exporter's per-scrape call: the latest value of 150 and 155 on GPU 1.
fn latest(h: dcgmHandle_t) -> Result<[dcgmFieldValue_v1; 2], dcgmReturn_t> {
    let fields = [150u16, 155];
    let mut vals = [
        *boxed::<dcgmFieldValue_v1>(0),
        *boxed::<dcgmFieldValue_v1>(0),
    ];
    // SAFETY: `vals` holds the 2 values asked for.
    match unsafe {
        dcgmEntityGetLatestValues(h, DCGM_FE_GPU, 1, fields.as_ptr(), 2, vals.as_mut_ptr())
    } {
        DCGM_ST_OK => Ok(vals),
        e => Err(e),
    }
}

#[test]
fn tcp_engine_outage_and_restart() {
    let _g = remote_only();
    let engine = HostEngine::start(&["-n", "-p", "0"]);
    let addr = engine.tcp();
    let h = connect_v2(&addr, false, 5000, false).expect("connect over TCP");
    assert!(
        h != 0 && h != EMBEDDED,
        "remote handles are connection ids, got {h:#x}"
    );

    let (g, _) = watch(h, "remote");
    let vals = latest(h).expect("values over TCP");
    assert!(vals.iter().all(|v| v.status == DCGM_ST_OK && v.ts > 0));
    let mut ids = [0u32; 32];
    let mut n: c_int = 0;
    // SAFETY: `ids` has the 32 entries the API requires.
    assert_eq!(
        unsafe { dcgmGetAllDevices(h, ids.as_mut_ptr(), &mut n) },
        DCGM_ST_OK
    );
    assert_eq!(n, 8);

    // The engine dies: every call on the handle fails with CONNECTION_NOT_VALID, and keeps
    // failing (no silent reconnect), also once an engine is back on the same port.
    engine.kill();
    assert_eq!(latest(h).err(), Some(DCGM_ST_CONNECTION_NOT_VALID));
    assert_eq!(latest(h).err(), Some(DCGM_ST_CONNECTION_NOT_VALID));
    // SAFETY: as above.
    assert_eq!(
        unsafe { dcgmGetAllDevices(h, ids.as_mut_ptr(), &mut n) },
        DCGM_ST_CONNECTION_NOT_VALID
    );
    let engine = HostEngine::start(&["-n", "-p", addr.rsplit(':').next().unwrap()]);
    assert_eq!(engine.tcp(), addr);
    assert_eq!(latest(h).err(), Some(DCGM_ST_CONNECTION_NOT_VALID));

    // A new connection works; the old engine's groups and watches are gone.
    // SAFETY: plain handle argument.
    assert_eq!(unsafe { dcgmDisconnect(h) }, DCGM_ST_OK);
    let h2 = connect_v2(&addr, false, 5000, false).expect("reconnect");
    assert_ne!(h2, h, "handles are not reused");
    let mut info: Box<dcgmGroupInfo_v3> = boxed(GROUP_INFO_V3);
    // SAFETY: heap struct of the announced version.
    assert_eq!(
        unsafe { dcgmGroupGetInfo(h2, g, &mut *info) },
        DCGM_ST_NOT_CONFIGURED
    );
    let stale = latest(h2).expect("values can be asked for");
    assert!(
        stale
            .iter()
            .all(|v| v.status == DCGM_ST_NOT_WATCHED && v.ts == 0),
        "watches must be recreated"
    );
    watch(h2, "remote-again");
    assert!(latest(h2).unwrap().iter().all(|v| v.status == DCGM_ST_OK));
    // SAFETY: no arguments.
    assert_eq!(unsafe { dcgmShutdown() }, DCGM_ST_OK);
    drop(engine);
}

#[test]
fn unix_socket_engines_and_connection_scoped_state() {
    let _g = remote_only();
    let dir = temp_dir("unix");
    let sock = dir.join("he.sock");
    let engine = HostEngine::start(&["--no-daemon", "--domain-socket", sock.to_str().unwrap()]);
    assert_eq!(engine.address, format!("unix://{}", sock.display()));

    let a = connect_v2(sock.to_str().unwrap(), true, 2000, false)
        .expect("connect_v2 over a unix socket");
    let b = connect_v3(&format!("unix://{}", sock.display()), CONNECT_V3_PARAMS_V1)
        .expect("connect_v3 unix://");
    assert_ne!(a, b);
    assert_eq!(
        connect_v3("vsock://3:5555", CONNECT_V3_PARAMS_V1).err(),
        Some(DCGM_ST_NOT_SUPPORTED)
    );
    assert_eq!(
        connect_v3(
            &format!("unix://{}", sock.display()),
            CONNECT_V3_PARAMS_V1 + 1
        )
        .err(),
        Some(DCGM_ST_VER_MISMATCH)
    );

    // Groups and watches belong to their connection: gone when it closes...
    let (g, _) = watch(a, "conn-a");
    let mut info: Box<dcgmGroupInfo_v3> = boxed(GROUP_INFO_V3);
    // SAFETY: heap struct of the announced version; plain handles.
    unsafe {
        assert_eq!(
            dcgmGroupGetInfo(b, g, &mut *info),
            DCGM_ST_OK,
            "visible to other connections"
        );
        assert_eq!(dcgmDisconnect(a), DCGM_ST_OK);
    }
    assert!(wait_until(|| {
        // SAFETY: as above.
        unsafe { dcgmGroupGetInfo(b, g, &mut *info) == DCGM_ST_NOT_CONFIGURED }
    }));
    // ...unless the client asked them to persist.
    let p = connect_v2(sock.to_str().unwrap(), true, 2000, true).expect("persistent connection");
    let (pg, _) = watch(p, "persistent");
    let q = connect_v2(sock.to_str().unwrap(), true, 2000, false).expect("connect");
    let (qg, _) = watch(q, "not-persistent");
    // SAFETY: as above.
    unsafe {
        assert_eq!(dcgmDisconnect(p), DCGM_ST_OK);
        assert_eq!(dcgmDisconnect(q), DCGM_ST_OK);
    }
    // Once the engine has cleaned up after q, closed after p, it has handled p's close too.
    assert!(wait_until(|| {
        // SAFETY: as above.
        unsafe { dcgmGroupGetInfo(b, qg, &mut *info) == DCGM_ST_NOT_CONFIGURED }
    }));
    // SAFETY: as above.
    unsafe {
        assert_eq!(dcgmGroupGetInfo(b, pg, &mut *info), DCGM_ST_OK);
        assert_eq!(dcgmShutdown(), DCGM_ST_OK);
    }
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}

fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn connecting_to_nothing_times_out() {
    let _g = remote_only();
    // A port nobody listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let start = Instant::now();
    assert_eq!(
        connect_v2(&format!("127.0.0.1:{port}"), false, 300, false).err(),
        Some(DCGM_ST_CONNECTION_NOT_VALID)
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "took {took:?}"
    );
    assert_eq!(
        connect_v2("127.0.0.1:notaport", false, 300, false).err(),
        Some(DCGM_ST_BADPARAM)
    );
    assert_eq!(
        connect_v2("", false, 300, false).err(),
        Some(DCGM_ST_BADPARAM)
    );
    let missing = temp_dir("missing").join("none.sock");
    assert_eq!(
        connect_v2(missing.to_str().unwrap(), true, 100, false).err(),
        Some(DCGM_ST_CONNECTION_NOT_VALID)
    );
    // SAFETY: no arguments.
    assert_eq!(unsafe { dcgmShutdown() }, DCGM_ST_OK);
}

#[test]
fn bad_options_are_rejected_by_name() {
    for (args, needle) in [
        (&["-n", "--port", "x"][..], "--port"),
        (&["--frobnicate"][..], "--frobnicate"),
        (&["-b"][..], "-b"),
    ] {
        let out = Command::new(BIN)
            .args(args)
            .output()
            .expect("run dcgm-sim-hostengine");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let out = Command::new(BIN)
        .arg("-n")
        .env("DCGM_SIM_PROFILE", "/nonexistent/profile.toml")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/profile.toml"));
}

#[test]
fn sigterm_stops_the_engine_cleanly() {
    let dir = temp_dir("sigterm");
    let sock = dir.join("he.sock");
    let mut engine = HostEngine::start(&["-n", "-d", sock.to_str().unwrap()]);
    assert!(sock.exists());
    // SAFETY: signalling our own child process.
    assert_eq!(
        unsafe { libc::kill(engine.child.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    let status = wait_for_exit(&mut engine.child);
    assert!(status.success(), "{status:?}");
    assert!(!sock.exists(), "socket file removed on exit");
    let _ = std::fs::remove_dir_all(&dir);
}

fn wait_for_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        assert!(Instant::now() < deadline, "engine did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn daemon_mode_writes_a_pid_file_and_term_stops_it() {
    let _g = remote_only();
    let dir = temp_dir("daemon");
    let pid_file = dir.join("he.pid");
    let sock = dir.join("he.sock");
    let pid_arg = pid_file.to_str().unwrap();
    // Without -n the engine forks: the foreground process prints the line and exits.
    let mut fg = HostEngine::start(&["-d", sock.to_str().unwrap(), "--pid", pid_arg]);
    assert!(wait_for_exit(&mut fg.child).success());
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid");
    let _reaper = KillOnDrop(pid);
    let h = connect_v2(sock.to_str().unwrap(), true, 2000, false).expect("the daemon serves");
    assert!(latest(h).is_ok());

    let out = Command::new(BIN)
        .args(["-t", "--pid", pid_arg])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // SAFETY: signal 0 only checks whether the process exists.
    assert!(wait_until(|| !running(pid)), "daemon {pid} still running");
    assert_eq!(latest(h).err(), Some(DCGM_ST_CONNECTION_NOT_VALID));
    assert!(!Path::new(&sock).exists());
    assert!(!pid_file.exists(), "pid file removed on exit");
    // SAFETY: no arguments.
    assert_eq!(unsafe { dcgmShutdown() }, DCGM_ST_OK);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether `pid` runs (a zombie left for a missing init to reap does not count).
fn running(pid: i32) -> bool {
    // SAFETY: signal 0 only checks whether the process exists.
    let exists = unsafe { libc::kill(pid, 0) } == 0;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    exists && stat.rsplit_once(") ").and_then(|(_, s)| s.chars().next()) != Some('Z')
}

/// Kills a daemon the test started if the test fails before stopping it.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if running(self.0) {
            // SAFETY: signalling the daemon this test started.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
}
