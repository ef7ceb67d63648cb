//! dcgm-sim-hostengine: a simulated nv-hostengine serving the node of DCGM_SIM_PROFILE.
//! Takes nv-hostengine's options: -p/--port, -b/--bind-interface, -d/--domain-socket,
//! -n/--no-daemon, --pid, -t/--term, -f/--log-filename, --log-level.

use dcgm_sim::engine::Engine;
use dcgm_sim::transport::{serve, Listener};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

struct Opts {
    port: u16,
    bind: String,
    socket: Option<PathBuf>,
    daemon: bool,
    pid_file: PathBuf,
    term: bool,
}

const USAGE: &str = "usage: dcgm-sim-hostengine [-n|--no-daemon] [-p|--port PORT] [-b|--bind-interface IP|ALL] \
[-d|--domain-socket [PATH]] [--pid FILE] [-t|--term] [-f|--log-filename FILE] [--log-level LEVEL]";

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        port: 5555,
        bind: "127.0.0.1".into(),
        socket: None,
        daemon: true,
        pid_file: PathBuf::from("/var/run/nvhostengine.pid"),
        term: false,
    };
    let mut i = 0;
    let value = |i: &mut usize, flag: &str| -> Result<String, String> {
        *i += 1;
        args.get(*i).cloned().ok_or_else(|| format!("option {flag} needs a value\n{USAGE}"))
    };
    while i < args.len() {
        let a = args[i].as_str();
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a, None),
        };
        let mut take = |i: &mut usize| inline.clone().map_or_else(|| value(i, flag), Ok);
        match flag {
            "-p" | "--port" => {
                let v = take(&mut i)?;
                o.port = v.parse().ok().filter(|&p| p > 0).ok_or_else(|| format!("option {flag}: invalid port '{v}'"))?;
            }
            "-b" | "--bind-interface" => {
                let v = take(&mut i)?;
                o.bind = if v.eq_ignore_ascii_case("ALL") { "0.0.0.0".into() } else { v };
            }
            "-d" | "--domain-socket" => {
                let next = inline.clone().or_else(|| args.get(i + 1).filter(|n| !n.starts_with('-')).cloned());
                if inline.is_none() && next.is_some() {
                    i += 1;
                }
                o.socket = Some(PathBuf::from(next.unwrap_or_else(|| "/tmp/nv-hostengine".into())));
            }
            "-n" | "--no-daemon" => o.daemon = false,
            "--pid" => o.pid_file = PathBuf::from(take(&mut i)?),
            "-t" | "--term" => o.term = true,
            "-f" | "--log-filename" | "--log-level" => {
                take(&mut i)?;
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown option '{other}'\n{USAGE}")),
        }
        i += 1;
    }
    Ok(o)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("dcgm-sim-hostengine: {e}");
            return ExitCode::from(2);
        }
    };
    match run(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dcgm-sim-hostengine: {e}");
            ExitCode::FAILURE
        }
    }
}

fn pid_path(o: &Opts) -> PathBuf {
    // The default /var/run is root-only; fall back to /tmp like a user-run engine would.
    if std::fs::OpenOptions::new().create(true).append(true).open(&o.pid_file).is_ok() {
        o.pid_file.clone()
    } else {
        std::env::temp_dir().join("nvhostengine.pid")
    }
}

fn run(o: Opts) -> Result<(), String> {
    if o.term {
        let path = pid_path(&o);
        let pid = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let pid = pid.trim();
        let st = std::process::Command::new("kill").arg(pid).status().map_err(|e| e.to_string())?;
        return if st.success() { Ok(()) } else { Err(format!("could not stop process {pid}")) };
    }
    let engine = Engine::from_env()?;
    let (listener, desc) = match &o.socket {
        Some(p) => {
            let _ = std::fs::remove_file(p);
            let l = UnixListener::bind(p).map_err(|e| format!("cannot listen on {}: {e}", p.display()))?;
            (Listener::Unix(l), format!("unix://{}", p.display()))
        }
        None => {
            let addr = if o.bind.contains(':') { format!("[{}]:{}", o.bind, o.port) } else { format!("{}:{}", o.bind, o.port) };
            let l = TcpListener::bind(&addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            (Listener::Tcp(l), addr)
        }
    };
    if o.daemon {
        // Like nv-hostengine: detach into the background once listening.
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        drop(listener);
        let mut args: Vec<String> = std::env::args().skip(1).filter(|a| a != "-n" && a != "--no-daemon").collect();
        args.push("--no-daemon".into());
        let child = std::process::Command::new(exe)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start the daemon: {e}"))?;
        let path = pid_path(&o);
        std::fs::write(&path, format!("{}\n", child.id())).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("dcgm-sim-hostengine started as process {} (listening on {desc})", child.id());
        return Ok(());
    }
    println!("dcgm-sim-hostengine listening on {desc}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    serve(listener, Arc::new(Mutex::new(engine)));
    Ok(())
}
