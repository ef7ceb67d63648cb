//! The C-level differential suite: `tests/c/watch_semantics.c` makes the same DCGM calls
//! against dcgm-sim's `libdcgm.so.4` and against NVIDIA's real one (the kit), embedded and
//! remote, and prints what it observes; the observations must agree but for
//! `KNOWN_DIFFERENCES` (kept exact by `super::check_lines`). Without the kit, the
//! simulator's observations are checked against the real library's, recorded below.

use super::Lines;
use crate::support::nvml_yaml::{uuid, Gpu};
use crate::support::real_dcgm::{kit, Kit, RealHostEngine, Scratch};
use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// What the real DCGM 4.6 answered (embedded and remote alike) to the watch-model run.
pub const REAL_WATCH_MODEL: &str = "\
identity: 155 watched by A and B: advancing
identity: unwatch A: 0
identity: 155 after unwatching A (B still holds it): frozen
identity: 150 after unwatching A (its last watch): frozen
identity: unwatch B: 0
identity: 155 after unwatching B too: frozen
update: 140 in 1.5 s after a second watch at 5 s: 0, few samples
destroy: field group: 0
destroy: 100 after its field group was destroyed: advancing
destroy: group: 0
destroy: 101 on GPU 1 after its group was destroyed: advancing
destroy: unwatch through the destroyed group: -5
failed: watch holding a profiling field: -33
failed: 252, watched before through another field group: frozen
since: only an unwatched pair with samples: 0, values yes, next advanced
since: then a pair never watched: -16, values yes, next kept
unwatch: a field group holding a pair never watched: -16
done: yes
";

/// What the real DCGM 4.6 answered to the unbind run on four GPUs (GPU 1 unbound).
pub const REAL_UNBIND: &str = "\
before unbind: dcgmGetAllDevices: 0,1,2,3
before unbind: dcgmGetAllSupportedDevices: 0,1,2,3
before unbind: GPU entities: 0,1,2,3
before unbind: supported GPU entities: 0,1,2,3
unbind: requested
after unbind: status of GPU 1: 7
after unbind: dcgmGetAllDevices: 0,1,2,3
after unbind: dcgmGetAllSupportedDevices: 0,2,3
after unbind: GPU entities: 0,1,2,3
after unbind: supported GPU entities: 0,2,3
after unbind: status of GPU 0: 1
after unbind: adding GPU 1 to a group: -1
after unbind: adding GPU 0 to a group: 0
after unbind: the group of GPUs 0 and 1 holds: 0
after unbind: 204 on GPU 1 reads status: -16
after unbind: 204 on GPU 0: advancing
done: yes
";

pub fn parse_lines(text: &str) -> Lines {
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `tests/c/<name>.c` compiled once per test binary; `None` (after a note) without a C
/// compiler.
fn compiled(name: &'static str, slot: &'static OnceLock<Option<PathBuf>>) -> Option<&'static Path> {
    slot.get_or_init(|| {
        let out = std::env::temp_dir().join(format!("dcgm-{name}-{}", std::process::id()));
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        if !have_tool(&cc) {
            skip(&format!("no C compiler ({cc})"));
            return None;
        }
        let st = status_within(
            Command::new(&cc)
                .args(["-std=c11", "-Wall", "-Werror", "-I"])
                .arg(repo("dcgm-sys/include"))
                .arg(repo(&format!("tests/c/{name}.c")))
                .arg("-ldl")
                .arg("-o")
                .arg(&out),
            BUILD,
        );
        assert!(st.success(), "compiling tests/c/{name}.c failed");
        Some(out)
    })
    .as_deref()
}

/// The differential client (`tests/c/watch_semantics.c`).
fn client() -> Option<&'static Path> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    compiled("watch_semantics", &BIN)
}

/// Runs `tests/c/inject_gpu.c` against the real host engine at `port` with `args`.
fn inject_real(kit: &Kit, yaml: &Path, port: u16, args: &[&str]) {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    let bin = compiled("inject_gpu", &BIN).expect("a C compiler (the kit's tests need one)");
    let mut cmd = Command::new(bin);
    cmd.arg(format!("127.0.0.1:{port}")).args(args);
    hermetic(&mut cmd);
    for (k, v) in kit.env(yaml) {
        cmd.env(k, v);
    }
    succeed_within(&mut cmd, QUICK, &format!("inject_gpu {args:?}"));
}

/// Makes the real host engine at `port` lose GPU `uuid` (or find it again) through DCGM's
/// NVML-injection API: the injected NVML stops listing it and DCGM marks it Lost, as when a
/// GPU falls off the bus.
pub fn lose_real(kit: &Kit, yaml: &Path, port: u16, uuid: &str, lost: bool) {
    inject_real(
        kit,
        yaml,
        port,
        &[if lost { "remove" } else { "restore" }, uuid],
    );
}

/// Splits GPU `gpu` of the real host engine at `port` into a GPU instance with one compute
/// instance while it runs (`dcgmCreateFakeEntities`, how DCGM's own tests change the MIG
/// hierarchy without MIG hardware): a client sees a re-partition.
pub fn partition_real(kit: &Kit, yaml: &Path, port: u16, gpu: u32) {
    inject_real(kit, yaml, port, &["add-instance", &gpu.to_string()]);
}

/// A directory where `libdcgm.so.4` is `lib` (the client dlopens that name).
fn lib_dir(scratch: &Path, lib: &Path) -> PathBuf {
    let d = scratch.join("lib");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("library directory");
    let target = std::fs::canonicalize(lib).expect("library path");
    std::os::unix::fs::symlink(target, d.join("libdcgm.so.4")).expect("symlink");
    d
}

/// Runs the client with `env` against `target` ("embedded" or "host:port"); `unbind` is
/// called when it asks for GPU 1 to be unbound. Its observations, in order.
fn run(bin: &Path, env: &[(String, String)], target: &str, unbind: Option<&dyn Fn()>) -> Lines {
    let mut cmd = Command::new(bin);
    cmd.arg(target)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if unbind.is_some() {
        cmd.arg("unbind");
    }
    hermetic(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run the C client");
    let mut text = String::new();
    read_lines_within(&mut child, QUICK, "the C client", |line| {
        if line == "UNBIND GPU 1" {
            (unbind.expect("asked only with unbind"))();
        }
        text.push_str(line);
        text.push('\n');
    });
    let done = child_output_within(child, QUICK, "the C client");
    assert!(
        done.status.success() && text.contains("done: yes"),
        "the C client against {target} failed ({}):\n{text}{}",
        done.status,
        String::from_utf8_lossy(&done.stderr)
    );
    parse_lines(&text)
}

fn sim_env(scratch: &Path, control: Option<&Path>) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "LD_LIBRARY_PATH".to_string(),
            lib_dir(scratch, &sim_library()).display().to_string(),
        ),
        (
            "DCGM_SIM_PROFILE".to_string(),
            repo("etc/sim/real-kit.toml").display().to_string(),
        ),
    ];
    if let Some(c) = control {
        env.push(("DCGM_SIM_CONTROL".into(), c.display().to_string()));
    }
    env
}

fn real_env(yaml: &Path) -> Vec<(String, String)> {
    kit().expect("called with the kit").env(yaml)
}

/// The simulator's answers in `mode` ("embedded" or "remote"), with GPU 1 unbound through
/// its control file when `unbind`.
pub fn sim(mode: &str, unbind: bool) -> Option<Lines> {
    let bin = client()?;
    let dir = Scratch::new(&format!("c-api-sim-{mode}"));
    let ctl = dir.0.join("control");
    std::fs::write(&ctl, "").unwrap();
    let trigger = || control(&ctl, "gpu_unbind 1");
    let hook: Option<&dyn Fn()> = if unbind { Some(&trigger) } else { None };
    Some(if mode == "embedded" {
        run(bin, &sim_env(&dir.0, Some(&ctl)), "embedded", hook)
    } else {
        let port = free_port();
        let _engine = HostEngine::start_with(port, Some("real-kit.toml"), Some(&ctl));
        run(
            bin,
            &sim_env(&dir.0, None),
            &format!("127.0.0.1:{port}"),
            hook,
        )
    })
}

/// The real library's answers in `mode`, on four injected H100s. GPU 1 gets a UUID of its
/// own: the injection library's system-event file (`/run/nvml-injection/sys-event.yaml`) is
/// one for the whole machine, and an engine of another test that knew the UUID would take
/// the event.
pub fn real(mode: &str, unbind: bool) -> Option<Lines> {
    let bin = client()?;
    let kit = kit()?;
    let dir = Scratch::new(&format!("c-api-real-{mode}"));
    let yaml = dir.yaml(&vec![Gpu::default(); 4]);
    let own = format!(
        "GPU-{:08x}-3d2b-4e51-9a0c-7b1e2d3c4f01",
        std::process::id() ^ (u32::from(free_port()) << 16)
    );
    let text = std::fs::read_to_string(&yaml).unwrap();
    std::fs::write(&yaml, text.replace(&uuid(1), &own)).unwrap();
    let trigger = || unbind_real(&own);
    let hook: Option<&dyn Fn()> = if unbind { Some(&trigger) } else { None };
    let _lock = unbind.then(event_file_lock);
    Some(if mode == "embedded" {
        run(bin, &real_env(&yaml), "embedded", hook)
    } else {
        let port = free_port();
        let _engine = RealHostEngine::start(kit, &yaml, &dir.0, port);
        run(bin, &real_env(&yaml), &format!("127.0.0.1:{port}"), hook)
    })
}

const EVENT_DIR: &str = "/run/nvml-injection";

/// Serialises the tests of this binary and others that write the system-event file.
pub fn event_file_lock() -> std::fs::File {
    std::fs::create_dir_all(EVENT_DIR).expect("create /run/nvml-injection");
    let f = std::fs::File::create(format!("{EVENT_DIR}/.lock")).expect("lock file");
    f.lock().expect("lock /run/nvml-injection/.lock");
    f
}

/// Asks the injected NVML to report GPU `uuid`'s driver unbound: DCGM's system-event
/// thread reads the file, detaches and attaches the driver without that GPU.
pub fn unbind_real(uuid: &str) {
    let tmp = format!("{EVENT_DIR}/sys-event.yaml.tmp{}", std::process::id());
    std::fs::write(&tmp, format!("unbind:\n  - {uuid}\n")).expect("write the event");
    std::fs::rename(&tmp, format!("{EVENT_DIR}/sys-event.yaml")).expect("publish the event");
}
