//! `dcgm-sim-hostengine`: a simulated `nv-hostengine`. It serves the node described by
//! `DCGM_SIM_PROFILE` (or the built-in 8-GPU node) to remote clients of the simulated
//! `libdcgm.so.4` (`dcgmConnect_v2` / `dcgmConnect_v3`), over TCP or a unix socket.
//!
//! Options follow nv-hostengine: `-p/--port`, `-b/--bind-interface`, `-d/--domain-socket`,
//! `-n/--no-daemon`, `--pid`, `-t/--term`, `-f/--log-filename`, `--log-level`,
//! `--denylist-modules` (module ids, comma-separated, as nv-hostengine takes them). Once
//! listening it prints one line `dcgm-sim-hostengine listening on <address>` to stdout.
//! SIGTERM and SIGINT stop it cleanly (socket file and pid file removed).

use dcgm_sim::engine::Engine;
use dcgm_sim::transport::{serve, EventLog, Listener, DEFAULT_PORT};
use std::fs::OpenOptions;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const NAME: &str = "dcgm-sim-hostengine";
const DEFAULT_SOCKET: &str = "/tmp/nv-hostengine";
const DEFAULT_PID_FILE: &str = "/var/run/nvhostengine.pid";
/// nv-hostengine's `--log-level` values.
const LOG_LEVELS: [&str; 7] = ["NONE", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "VERB"];

const USAGE: &str = "\
usage: dcgm-sim-hostengine [options]
  -n, --no-daemon              stay in the foreground
  -p, --port PORT              TCP port (default 5555; 0 picks a free one)
  -b, --bind-interface IP|ALL  address to listen on (default 127.0.0.1)
  -d, --domain-socket [PATH]   listen on a unix socket instead of TCP (default /tmp/nv-hostengine)
      --pid FILE               pid file of the daemon (default /var/run/nvhostengine.pid)
  -t, --term                   stop the daemon named by the pid file
  -f, --log-filename FILE      append connection events to FILE
      --log-level LEVEL        NONE, FATAL, ERROR, WARN, INFO, DEBUG or VERB
      --denylist-modules IDS   DCGM module ids never to load, comma-separated (8: profiling)
  -h, --help                   this text
The simulated node comes from DCGM_SIM_PROFILE (built-in 8-GPU node when unset).";

#[derive(Debug)]
struct Options {
    port: u16,
    bind: IpAddr,
    socket: Option<PathBuf>,
    daemon: bool,
    term: bool,
    pid_file: Option<PathBuf>,
    log_file: Option<PathBuf>,
    log_level: usize,
    denylist: Vec<u32>,
}

enum Parsed {
    Run(Options),
    Help,
}

fn parse_args(args: &[String]) -> Result<Parsed, String> {
    let mut o = Options {
        port: DEFAULT_PORT,
        bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
        socket: None,
        daemon: true,
        term: false,
        pid_file: None,
        log_file: None,
        // nv-hostengine logs errors by default.
        log_level: 2,
        denylist: Vec::new(),
    };
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        // `--opt=value` as well as `--opt value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = || -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = args
                .get(i)
                .ok_or_else(|| format!("option {flag} needs a value"))?;
            i += 1;
            Ok(v.clone())
        };
        match flag {
            "-p" | "--port" => {
                let v = value()?;
                o.port = v
                    .parse()
                    .map_err(|_| format!("option {flag}: '{v}' is not a port number (0-65535)"))?;
            }
            "-b" | "--bind-interface" => {
                let v = value()?;
                o.bind = if v.eq_ignore_ascii_case("ALL") {
                    IpAddr::V4(Ipv4Addr::UNSPECIFIED)
                } else {
                    v.parse()
                        .map_err(|_| format!("option {flag}: '{v}' is not an IP address or ALL"))?
                };
            }
            "-d" | "--domain-socket" => {
                // The path is optional: take the next argument only if it is not an option.
                let path = match inline.clone() {
                    Some(v) => v,
                    None => match args.get(i) {
                        Some(next) if !next.starts_with('-') => {
                            i += 1;
                            next.clone()
                        }
                        _ => DEFAULT_SOCKET.to_string(),
                    },
                };
                if path.is_empty() {
                    return Err(format!("option {flag}: empty socket path"));
                }
                o.socket = Some(PathBuf::from(path));
            }
            "-n" | "--no-daemon" => o.daemon = false,
            "-t" | "--term" => o.term = true,
            "--pid" => o.pid_file = Some(PathBuf::from(value()?)),
            "-f" | "--log-filename" => o.log_file = Some(PathBuf::from(value()?)),
            "--log-level" => {
                let v = value()?;
                o.log_level = LOG_LEVELS
                    .iter()
                    .position(|l| l.eq_ignore_ascii_case(&v))
                    .ok_or_else(|| {
                        format!(
                            "option {flag}: '{v}' is not one of {}",
                            LOG_LEVELS.join(", ")
                        )
                    })?;
            }
            "--denylist-modules" => {
                let v = value()?;
                for id in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    o.denylist.push(id.parse().map_err(|_| {
                        format!("option {flag}: '{id}' is not a module id (dcgmModuleId_t)")
                    })?);
                }
            }
            "-h" | "--help" => return Ok(Parsed::Help),
            _ => return Err(format!("unknown option '{arg}'")),
        }
    }
    Ok(Parsed::Run(o))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match parse_args(&args) {
        Ok(Parsed::Run(o)) => o,
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{NAME}: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = if opts.term {
        terminate(&opts)
    } else {
        run(&opts)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{NAME}: {e}");
            ExitCode::FAILURE
        }
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() -> Result<(), String> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler only
        // stores to an atomic, which is async-signal-safe; `sa` outlives the call.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(format!(
                "cannot install a signal handler: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// The pid file to use: the requested (or default) one if it can be written, else a file
/// of the same name in /tmp (the default /var/run is root-only).
fn writable_pid_file(o: &Options) -> PathBuf {
    let wanted = o
        .pid_file
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PID_FILE));
    if OpenOptions::new()
        .create(true)
        .append(true)
        .open(&wanted)
        .is_ok()
    {
        return wanted;
    }
    let name = wanted
        .file_name()
        .map_or_else(|| "nvhostengine.pid".into(), |n| n.to_os_string());
    std::env::temp_dir().join(name)
}

/// Where `--term` looks: the requested (or default) file, then its /tmp fallback.
fn existing_pid_file(o: &Options) -> Option<PathBuf> {
    let wanted = o
        .pid_file
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PID_FILE));
    let fallback = std::env::temp_dir().join(
        wanted
            .file_name()
            .unwrap_or_else(|| "nvhostengine.pid".as_ref()),
    );
    [wanted, fallback].into_iter().find(|p| p.is_file())
}

fn read_pid(path: &Path) -> Result<libc::pid_t, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.trim()
        .parse::<libc::pid_t>()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("{}: '{}' is not a process id", path.display(), text.trim()))
}

/// Whether `pid` still runs. A zombie does not count: a daemon whose parent is gone may
/// wait for a reaper that containers without an init never provide.
fn process_alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists; no signal is delivered.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    // /proc/<pid>/stat is "pid (comm) state ..."; comm may contain spaces but not ") ".
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        != Some('Z')
}

/// `-t/--term`: SIGTERM to the daemon named by the pid file, then wait for it to exit.
fn terminate(o: &Options) -> Result<(), String> {
    let path =
        existing_pid_file(o).ok_or("no pid file found: is the host engine running as a daemon?")?;
    let pid = read_pid(&path)?;
    // SAFETY: sending SIGTERM to a pid has no memory-safety implications.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        let e = std::io::Error::last_os_error();
        // A stale pid file: the engine is already gone.
        let _ = std::fs::remove_file(&path);
        return Err(format!("process {pid} from {}: {e}", path.display()));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_alive(pid) {
        if Instant::now() > deadline {
            return Err(format!("process {pid} did not stop within 10 s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("{NAME}: stopped process {pid}");
    Ok(())
}

fn event_log(o: &Options) -> Result<EventLog, String> {
    // Connection events are INFO; below that nothing is written.
    let Some(path) = o.log_file.clone().filter(|_| o.log_level >= 4) else {
        return Ok(Arc::new(|_: &str| {}));
    };
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("log file {}: {e}", path.display()))?;
    let file = Mutex::new(file);
    Ok(Arc::new(move |msg: &str| {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut f = file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Logging must never take the engine down.
        let _ = writeln!(f, "{secs} INFO [{}] {msg}", std::process::id());
    }))
}

/// Forks into the background like nv-hostengine. Returns in the child only; the parent
/// writes the child's pid file, prints the listening line, and exits.
fn daemonize(pid_file: &Path, listening: &str) -> Result<(), String> {
    // SAFETY: no other thread exists yet (nothing has been spawned), so the child gets a
    // consistent copy of the process.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork failed: {}", std::io::Error::last_os_error())),
        0 => {
            // SAFETY: setsid has no preconditions; it detaches from the controlling terminal.
            unsafe { libc::setsid() };
            let null = OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")
                .map_err(|e| e.to_string())?;
            use std::os::fd::AsRawFd;
            for fd in 0..=2 {
                // SAFETY: duplicating an open fd onto the standard descriptors; both are valid.
                unsafe { libc::dup2(null.as_raw_fd(), fd) };
            }
            Ok(())
        }
        child => {
            if let Err(e) = std::fs::write(pid_file, format!("{child}\n")) {
                eprintln!("{NAME}: cannot write {}: {e}", pid_file.display());
            }
            println!(
                "{NAME} listening on {listening} (daemon pid {child}, pid file {})",
                pid_file.display()
            );
            let _ = std::io::stdout().flush();
            std::process::exit(0);
        }
    }
}

fn run(o: &Options) -> Result<(), String> {
    // Before anything is announced, so that a client reacting to the listening line can
    // already stop us cleanly; the handlers survive the daemon's fork.
    install_signal_handlers()?;
    // Profile errors are reported before daemonising, while stderr is still visible.
    let mut engine = Engine::from_env()?;
    engine.deny_modules(&o.denylist).map_err(|_| {
        format!(
            "--denylist-modules: {:?} holds an unknown module id",
            o.denylist
        )
    })?;
    let log = event_log(o)?;
    let listener = match &o.socket {
        Some(path) => Listener::bind_unix(path)
            .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?,
        None => {
            let addr = SocketAddr::new(o.bind, o.port);
            Listener::bind_tcp(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?
        }
    };
    let listening = listener.address().map_err(|e| e.to_string())?.to_string();
    let mut own_pid_file = None;
    if o.daemon {
        let pid_file = writable_pid_file(o);
        daemonize(&pid_file, &listening)?;
        own_pid_file = Some(pid_file);
    } else {
        if let Some(p) = &o.pid_file {
            std::fs::write(p, format!("{}\n", std::process::id()))
                .map_err(|e| format!("{}: {e}", p.display()))?;
            own_pid_file = Some(p.clone());
        }
        println!("{NAME} listening on {listening}");
        let _ = std::io::stdout().flush();
    }
    log(&format!("listening on {listening}"));
    let result = serve(
        &listener,
        Arc::new(Mutex::new(engine)),
        &STOP,
        Arc::clone(&log),
    );
    log("stopping");
    drop(listener);
    if let Some(p) = own_pid_file {
        // Only remove it if it still names us (a newer daemon may have replaced it).
        if read_pid(&p).ok() == Some(std::process::id() as libc::pid_t) {
            let _ = std::fs::remove_file(&p);
        }
    }
    result.map_err(|e| format!("serving {listening}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        match parse_args(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())? {
            Parsed::Run(o) => Ok(o),
            Parsed::Help => Err("help".into()),
        }
    }

    #[test]
    fn options_follow_nv_hostengine() {
        let o = parse(&[]).unwrap();
        assert_eq!(
            (o.port, o.bind, o.daemon, o.socket),
            (5555, IpAddr::V4(Ipv4Addr::LOCALHOST), true, None)
        );
        let o = parse(&[
            "-n",
            "-p",
            "6000",
            "-b",
            "ALL",
            "--log-level",
            "debug",
            "-f",
            "/tmp/x.log",
        ])
        .unwrap();
        assert_eq!(
            (o.port, o.bind, o.daemon, o.log_level),
            (6000, IpAddr::V4(Ipv4Addr::UNSPECIFIED), false, 5)
        );
        assert_eq!(
            parse(&["-d"]).unwrap().socket,
            Some(PathBuf::from("/tmp/nv-hostengine"))
        );
        let o = parse(&["-d", "-n"]).unwrap();
        assert_eq!(
            (o.socket, o.daemon),
            (Some(PathBuf::from("/tmp/nv-hostengine")), false)
        );
        assert_eq!(
            parse(&["--domain-socket", "/tmp/s"]).unwrap().socket,
            Some(PathBuf::from("/tmp/s"))
        );
        assert_eq!(parse(&["--port=7000"]).unwrap().port, 7000);
        assert_eq!(
            parse(&["-b", "::1"]).unwrap().bind,
            "::1".parse::<IpAddr>().unwrap()
        );
        assert!(parse(&["-t", "--pid", "/tmp/p"]).unwrap().term);
    }

    #[test]
    fn bad_options_name_the_option() {
        assert!(parse(&["-p", "x"]).unwrap_err().contains("-p"));
        assert!(parse(&["--port"]).unwrap_err().contains("--port"));
        assert!(parse(&["-b", "nowhere"]).unwrap_err().contains("-b"));
        assert!(parse(&["--log-level", "LOUD"])
            .unwrap_err()
            .contains("--log-level"));
        assert!(parse(&["--frobnicate"])
            .unwrap_err()
            .contains("--frobnicate"));
        assert!(parse(&["-p", "70000"]).unwrap_err().contains("-p"));
    }
}
