//! From a parsed configuration to a running exporter: load DCGM, start the collection
//! thread, serve HTTP until a signal arrives.

mod error;
mod settings;

pub use error::Error;
pub use settings::Error as SettingsError;

use crate::attribution::{self, Attribution};
use crate::config::counters::Counters;
use crate::config::{cli, configmap};
use crate::lifecycle::app::{self, Dcgm, Engine, Runner};
use crate::lifecycle::control::{Control, Trigger};
use crate::lifecycle::watchers;
use crate::output::published::Shared;
use crate::output::{self, http};
use crate::runtime::kubeapi::KubeApi;
use crate::runtime::worker::Worker;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a run ended: the result for the exit code, and whether DCGM was shut down in time.
pub struct Outcome {
    pub result: Result<(), Error>,
    /// `TimedOut` when a DCGM call was still stuck at exit: the process must then end
    /// without running libdcgm's destructors (see `dcgm_sys::exit_now`).
    pub dcgm: dcgm_sys::Shutdown,
}

/// How long the sessions still open at exit may take to end by themselves.
const SESSIONS_GRACE: Duration = Duration::from_secs(2);
/// How long the exit may take from the stop (a signal), the watches' removal included
/// (every engine's at once, however many), then DCGM's shutdown with what is left; past it
/// the process exits anyway (a host engine that stopped answering holds a call for 60 s).
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// Runs the exporter until a signal (or a fatal error), then shuts DCGM down in order:
/// the collection loop stops its engine or disconnects, then `dcgmShutdown` ends DCGM's
/// own threads, within [`SHUTDOWN_DEADLINE`].
pub fn run(config: cli::Config) -> Outcome {
    super::know_derived_metrics();
    let mut library = None;
    let mut stopped_at = None;
    let result = serve(config, &mut library, &mut stopped_at);
    let dcgm = match library {
        Some(lib) => shut_down_dcgm(&lib, stopped_at.unwrap_or_else(Instant::now)),
        None => dcgm_sys::Shutdown::Done,
    };
    Outcome { result, dcgm }
}

/// One deadline from `stopped_at` for the whole exit: with several engines a stuck one's
/// watches' removal, and the shutdown after it, must not add up past one engine's bound.
fn shut_down_dcgm(library: &dcgm_sys::Library, stopped_at: Instant) -> dcgm_sys::Shutdown {
    let open = library.live_sessions();
    let left = SHUTDOWN_DEADLINE.saturating_sub(stopped_at.elapsed());
    let done = library.shutdown(SESSIONS_GRACE.min(left), left);
    match done {
        dcgm_sys::Shutdown::Done => tracing::debug!("DCGM shut down"),
        dcgm_sys::Shutdown::TimedOut => tracing::warn!(
            "DCGM did not shut down within {SHUTDOWN_DEADLINE:?}: a DCGM call is still stuck \
             ({open} session(s) were open); exiting without its clean-up"
        ),
    }
    done
}

/// The environment DCGM's embedded engine reads its own log settings from at start
/// (`--enable-dcgm-log`), empty when they are not asked for.
pub(crate) fn dcgm_log_env(config: &cli::Config) -> Vec<(&'static str, String)> {
    if config.enable_dcgm_log && config.remote_hostengine().is_none() {
        vec![
            ("__DCGM_DBG_FILE", "-".to_string()),
            ("__DCGM_DBG_LVL", config.dcgm_log_level.clone()),
        ]
    } else {
        Vec::new()
    }
}

/// Sets DCGM's log variables. setenv races with any thread reading the environment (the
/// Kubernetes client's runtime, tokio's workers, DCGM's own threads all do), so this is
/// refused unless the process still has a single thread: main calls it before anything
/// spawns one.
pub fn set_dcgm_log_env(config: &cli::Config) -> Result<(), Error> {
    let vars = dcgm_log_env(config);
    if vars.is_empty() {
        return Ok(());
    }
    match threads() {
        Some(threads) if threads > 1 => Err(Error::LogEnvTooLate { threads }),
        _ => {
            for (k, v) in vars {
                std::env::set_var(k, v);
            }
            Ok(())
        }
    }
}

/// Threads of this process (Linux), `None` where that cannot be told.
fn threads() -> Option<usize> {
    std::fs::read_dir("/proc/self/task").ok().map(|d| d.count())
}

fn serve(
    config: cli::Config,
    library_out: &mut Option<Arc<dcgm_sys::Library>>,
    stopped_at: &mut Option<Instant>,
) -> Result<(), Error> {
    event_history_bounds(&config)?;
    let stages = settings::from_config(config)?;
    let (control_tx, control_rx) = std::sync::mpsc::channel::<Control>();
    // First: the signal handlers live in it, before anything slow (DCGM's start: 30 s).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let signals = Signals::install(&rt, control_tx.clone());
    let kube_api = kube_api_for(&stages.kube)?;
    let (collectors, counters) = load_counters(&stages, kube_api.as_ref(), &control_tx)?;
    check_before_dcgm(&stages, &counters)?;
    // Bound before DCGM starts: a port in use or a broken web config is reported at once.
    let server = match &stages.http {
        Some(h) => Some(http::Server::bind(h).map_err(Error::Http)?),
        None => None,
    };
    let mut sinks = output::open_sinks(&stages.sinks).map_err(Error::Output)?;
    // DCGM's log variables (--enable-dcgm-log) were set by main, before any thread.
    let source = load_source(&stages)?;
    *library_out = source.library.clone();
    let openmetrics = server.as_ref().is_some_and(|s| s.options.openmetrics);
    let shared = shared_state(&stages, openmetrics, &source, &mut sinks)?;
    let attribution = attribution_stage(&stages, &shared, kube_api.as_ref())?;
    let runner = Arc::new(Runner {
        library: source.library,
        nvml: source.nvml,
        failover_gpus: source.failover_gpus,
        engine_gpus: Default::default(),
        engine: stages.engine.clone(),
        collectors,
        counters: std::sync::RwLock::new(counters),
        settings: stages.collect.clone(),
        shared: shared.clone(),
        current: Default::default(),
        bind_unbind: bind_unbind_watch(&stages),
        sinks,
        attribution: Arc::new(std::sync::Mutex::new(attribution)),
        hand_off: None,
    });
    let engines = engine_runners(&stages, &runner)?;
    let worker = match start_engines(&runner, &engines, stages.exit_if_unreachable, &|| {
        signals.stopping()
    }) {
        Err(Started::Stopped) => {
            tracing::info!("stopped during start-up");
            return Ok(());
        }
        Err(Started::Failed(e)) => return Err(e),
        Ok(w) => w,
    };
    watchers::start(&runner, &control_tx).map_err(Error::Watch)?;
    let loop_runner = runner.clone();
    let (collection, ended_rx) = spawn_watched("collector", move || match worker {
        Workers::One(worker) => loop_runner.run(worker, control_rx),
        Workers::Engines(workers) => {
            app::engines::run(&loop_runner, engines.into_iter().zip(workers), control_rx)
        }
    })
    .map_err(Error::CollectionThread)?;
    let served = rt.block_on(serve_http(server, shared, &signals, ended_rx));
    *stopped_at = Some(Instant::now());
    let _ = control_tx.send(Control::Stop);
    collection.join().map_err(thread_panic)?;
    if served.is_ok() {
        // A clean stop: a textfile left behind would read as current values.
        for sink in &runner.sinks {
            sink.close();
        }
    }
    served
}

/// The counters' source, watched for changes from now on, and what it holds now.
fn load_counters(
    stages: &settings::Stages,
    api: Option<&KubeApi>,
    control: &std::sync::mpsc::Sender<Control>,
) -> Result<(configmap::CountersSource, Arc<Counters>), Error> {
    let interval = Duration::from_millis(stages.collect.interval_ms);
    let collectors = counters_source(&stages.counters, interval, api, control)?;
    watchers::watch_counters_file(&collectors, control).map_err(Error::CountersSource)?;
    let counters = collectors
        .load_for(stages.collect.emulate)
        .map_err(Error::Counters)?;
    Ok((collectors, Arc::new(counters)))
}

/// The event history's bounds, set before anything can happen on the node.
fn event_history_bounds(config: &cli::Config) -> Result<(), Error> {
    let (max_events, max_bytes) = config.events_bounds().map_err(settings::Error::from)?;
    crate::model::events::global().set_bounds(crate::model::events::Bounds {
        max_events,
        max_bytes,
    });
    Ok(())
}

/// With several host engines: one runner per engine, each handing its pages to one
/// combiner that publishes through `main` (empty with one engine).
fn engine_runners(stages: &settings::Stages, main: &Runner) -> Result<Vec<Arc<Runner>>, Error> {
    if stages.engines.is_empty() {
        return Ok(Vec::new());
    }
    let interval = Duration::from_millis(stages.collect.interval_ms);
    let combiner = Arc::new(
        app::engines::Combiner::new(
            stages.engines.clone(),
            interval,
            &main.shared.metrics,
            !main.sinks.is_empty(),
        )
        .map_err(Error::Engines)?,
    );
    if main.library.is_none() {
        return Err(Error::EnginesNeedDcgm);
    }
    let counters = main.counters();
    let mut out = Vec::new();
    for (index, e) in stages.engines.iter().enumerate() {
        tracing::info!(
            "host engine {} at {} (label engine=\"{}\")",
            index + 1,
            e.target,
            e.label
        );
        let mut settings = stages.collect.clone();
        settings.hostname = e.hostname.clone();
        out.push(Arc::new(Runner {
            library: main.library.clone(),
            nvml: None,
            failover_gpus: Vec::new(),
            engine_gpus: Default::default(),
            engine: Engine::Remote(e.target.clone()),
            collectors: main.collectors.clone(),
            counters: std::sync::RwLock::new(counters.clone()),
            settings,
            shared: Arc::new(Shared::new(interval)),
            current: Default::default(),
            bind_unbind: None,
            sinks: Vec::new(),
            attribution: main.attribution.clone(),
            hand_off: Some(app::HandOff {
                combiner: combiner.clone(),
                index,
            }),
        }));
    }
    Ok(out)
}

/// `--enable-gpu-bind-unbind-watch`'s poll interval: its watch lives on one session, so
/// with several host engines it is off (said once).
fn bind_unbind_watch(stages: &settings::Stages) -> Option<Duration> {
    if stages.bind_unbind.is_some() && !stages.engines.is_empty() {
        tracing::warn!(
            "--enable-gpu-bind-unbind-watch has no effect with several host engines: \
             each engine's GPU changes are seen by its own rebuilds"
        );
        return None;
    }
    stages.bind_unbind
}

/// Starts collecting: one engine connects here (see `start_collecting`), several each
/// in a thread of its own, so an engine that does not answer delays none of the others.
/// A flag that does not fit one engine's node (`-d g:5` where it lacks GPU 5) stops the
/// start as it does with one engine, naming that engine.
fn start_engines(
    main: &Runner,
    engines: &[Arc<Runner>],
    exit_if_unreachable: bool,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Workers, Started> {
    if engines.is_empty() {
        return start_collecting(main, exit_if_unreachable, stop).map(Workers::One);
    }
    let started: Vec<_> = std::thread::scope(|s| {
        let tries: Vec<_> = engines
            .iter()
            .map(|e| {
                let label = e.hand_off.as_ref().map(|h| {
                    let name: Arc<str> = h.combiner.engines()[h.index].label.as_str().into();
                    name
                });
                s.spawn(move || {
                    crate::logging::set_thread_engine(label);
                    start_collecting(e, exit_if_unreachable, stop)
                })
            })
            .collect();
        tries.into_iter().map(|t| t.join()).collect()
    });
    let mut workers = Vec::new();
    for (e, started) in engines.iter().zip(started) {
        let label = engine_label(e);
        match started {
            Ok(Ok(w)) => workers.push(w),
            Ok(Err(Started::Failed(why))) => {
                return Err(Started::Failed(Error::Engine {
                    label,
                    source: Box::new(why),
                }))
            }
            Ok(Err(Started::Stopped)) => return Err(Started::Stopped),
            Err(_) => return Err(Started::Failed(Error::EnginePanicked { label })),
        }
    }
    Ok(Workers::Engines(workers))
}

/// An engine runner's name in messages: its label and address.
fn engine_label(e: &Runner) -> String {
    let target = match &e.engine {
        Engine::Remote(t) => t.to_string(),
        Engine::Embedded => "embedded".into(),
    };
    match &e.hand_off {
        Some(h) if h.combiner.engines()[h.index].label != target => {
            format!("{} ({target})", h.combiner.engines()[h.index].label)
        }
        _ => target,
    }
}

/// The workers connected at start: the one engine's, or each of several engines'.
enum Workers {
    One(Option<Worker<Dcgm>>),
    Engines(Vec<Option<Worker<Dcgm>>>),
}

/// What the collection loop and the HTTP side share, with its self-metrics set up, and the
/// OTLP push (whose self-metrics live there) added to `sinks`.
fn shared_state(
    stages: &settings::Stages,
    openmetrics: bool,
    source: &Source,
    sinks: &mut Vec<Box<dyn output::sink::Sink>>,
) -> Result<Arc<Shared>, Error> {
    let shared = Arc::new(Shared::with_openmetrics(
        Duration::from_millis(stages.collect.interval_ms),
        openmetrics,
    ));
    shared.require_gpus.store(
        stages.health_require_gpus,
        std::sync::atomic::Ordering::SeqCst,
    );
    if stages.exporter_metrics {
        shared.metrics.enable_exporter_metrics();
    }
    source.describe(&shared, stages);
    if let Some(o) = &stages.otlp {
        let otlp = output::otlp::Otlp::start(o, &shared.metrics)
            .map_err(|e| Error::Output(output::Error::Otlp(e)))?;
        sinks.push(Box::new(otlp));
    }
    Ok(shared)
}

/// What can be refused before DCGM is loaded: the config file's watch groups against the
/// counters, and a `vsock://` engine on a kernel without vsock.
fn check_before_dcgm(stages: &settings::Stages, counters: &Counters) -> Result<(), Error> {
    if stages.collect.emulate.at_least_4_8_3() {
        crate::config::file::check_watch_groups(&stages.collect.watch_groups, counters).map_err(
            |problem| {
                Error::WatchGroups(crate::config::file::Error::at(&stages.config_file, problem))
            },
        )?;
    }
    let targets = match &stages.engine {
        _ if !stages.engines.is_empty() => stages.engines.iter().map(|e| &e.target).collect(),
        Engine::Remote(t) => vec![t],
        Engine::Embedded => Vec::new(),
    };
    for t in targets {
        let dcgm_sys::ConnectTarget::Vsock { cid, port } = t else {
            continue;
        };
        // A kernel without vsock is a set-up error, not an engine still starting.
        match dcgm_sys::vsock::probe(*cid, *port, Duration::from_secs(2)) {
            dcgm_sys::vsock::Probe::Unsupported(why) => {
                return Err(Error::NoVsock {
                    target: t.clone(),
                    why: why.to_string(),
                })
            }
            dcgm_sys::vsock::Probe::Unreachable(why) => {
                tracing::warn!("the host engine at {t} does not answer yet: {why}")
            }
            dcgm_sys::vsock::Probe::Reachable => {}
        }
    }
    Ok(())
}

/// The libraries the collection reads: libdcgm, or NVML alone.
struct Source {
    library: Option<Arc<dcgm_sys::Library>>,
    dcgm_version: String,
    nvml: Option<Arc<nvml_wrapper::Nvml>>,
    /// With libdcgm and NVML (`auto`): the GPUs NVML lists (UUIDs), which NVML may stand
    /// in for when a remote engine reports them too.
    failover_gpus: Vec<String>,
}

impl Source {
    /// `build_info` and the backend gauge, from what was loaded.
    fn describe(&self, shared: &Shared, stages: &settings::Stages) {
        let mode = if self.library.is_some() {
            stages.engine.mode()
        } else {
            "none"
        };
        shared
            .metrics
            .set_build_info(&self.dcgm_version, mode, stages.collect.emulate.as_str());
        shared.set_backend(self.backend());
    }

    fn backend(&self) -> &'static str {
        if self.library.is_some() {
            "dcgm"
        } else {
            "nvml"
        }
    }
}

/// Loads what `--backend` asks for: libdcgm (`dcgm`), NVML and never libdcgm (`nvml`), or
/// libdcgm and, where it does not load, NVML (`auto`).
fn load_source(stages: &settings::Stages) -> Result<Source, Error> {
    use crate::config::cli::Backend;
    let dcgm_error = match stages.backend {
        Backend::Nvml => None,
        Backend::Dcgm | Backend::Auto => match load_library(stages) {
            Ok((library, dcgm_version)) => {
                let (nvml, failover_gpus) = failover_nvml(stages).unzip();
                return Ok(Source {
                    library: Some(library),
                    dcgm_version,
                    nvml,
                    failover_gpus: failover_gpus.unwrap_or_default(),
                });
            }
            Err(e) if stages.backend == Backend::Dcgm => return Err(Error::LoadDcgm(e)),
            Err(e) => Some(e),
        },
    };
    let nvml = match crate::collect::nvml::load(stages.nvml_library.as_deref()) {
        Ok(nvml) => nvml,
        Err(nvml) => {
            return Err(match dcgm_error {
                Some(dcgm) => Error::NoSource { dcgm, nvml },
                None => Error::LoadNvml(nvml),
            })
        }
    };
    if let Some(e) = &dcgm_error {
        tracing::warn!("{e}: collecting the core GPU series from NVML (--backend auto)");
    }
    let driver = nvml
        .sys_driver_version()
        .unwrap_or_else(|_| "unknown".into());
    tracing::info!(
        "dcgm-exporter {} (commit {}), NVML backend (driver {driver}): libdcgm is not loaded",
        env!("CARGO_PKG_VERSION"),
        env!("DCGM_EXPORTER_COMMIT"),
    );
    Ok(Source {
        library: None,
        dcgm_version: "none".into(),
        nvml: Some(nvml),
        failover_gpus: Vec::new(),
    })
}

/// `--backend auto` with DCGM: NVML too, to serve the core series while DCGM cannot, and
/// the GPUs (UUIDs) it lists. Its absence only means no failover. NVML sees this machine's
/// GPUs: it stands in for the embedded engine, for a remote one only on the GPUs it reports
/// that are these (`app::fallback`), and for none of several engines.
fn failover_nvml(stages: &settings::Stages) -> Option<(Arc<nvml_wrapper::Nvml>, Vec<String>)> {
    if stages.backend != crate::config::cli::Backend::Auto {
        return None;
    }
    if !stages.engines.is_empty() {
        tracing::info!(
            "NVML failover is off with several host engines: NVML sees this machine's GPUs, \
             not the engines' (an engine down has its series withdrawn)"
        );
        return None;
    }
    let nvml = match crate::collect::nvml::load(stages.nvml_library.as_deref()) {
        Ok(n) => n,
        Err(e) => {
            tracing::info!("{e}: no NVML failover while DCGM is unavailable");
            return None;
        }
    };
    let gpus = crate::collect::nvml::gpu_uuids(&nvml).unwrap_or_else(|e| {
        tracing::warn!("NVML lists no GPU ({e}): it stands in for no remote engine's");
        Vec::new()
    });
    match &stages.engine {
        Engine::Embedded => tracing::info!(
            "NVML loaded: it serves the core GPU series while DCGM cannot (--backend auto)"
        ),
        Engine::Remote(t) => tracing::info!(
            "NVML loaded: it serves the core GPU series of the host engine at {t} while DCGM \
             cannot, for the engine's GPUs that are this machine's (the same UUIDs, checked each \
             time it connects) (--backend auto)"
        ),
    }
    Some((nvml, gpus))
}

/// Loads libdcgm and says what runs: the exporter's and the library's versions, the mode.
fn load_library(
    stages: &settings::Stages,
) -> Result<(Arc<dcgm_sys::Library>, String), dcgm_sys::Error> {
    let library = Arc::new(dcgm_sys::Library::load(stages.dcgm_library.as_deref())?);
    let embedded = matches!(stages.engine, Engine::Embedded) && stages.engines.is_empty();
    crate::collect::heal::apply_denylist(&library, &stages.collect.profiling, embedded);
    let dcgm_version = library.version().unwrap_or_else(|e| {
        tracing::debug!("cannot read the DCGM library's version: {e}");
        "unknown".into()
    });
    tracing::info!(
        "dcgm-exporter {} (commit {}), DCGM library {} ({})",
        env!("CARGO_PKG_VERSION"),
        env!("DCGM_EXPORTER_COMMIT"),
        dcgm_version,
        library.path().display()
    );
    match &stages.engine {
        _ if !stages.engines.is_empty() => {
            tracing::info!("mode: {} remote DCGM host engines", stages.engines.len())
        }
        Engine::Embedded => {
            tracing::info!("mode: embedded DCGM host engine");
            warn_without_profiling_rights();
        }
        Engine::Remote(t) => tracing::info!("mode: remote DCGM host engine at {t}"),
    }
    Ok((library, dcgm_version))
}

/// The embedded engine runs with our rights, and DCGM's profiling fields need root with
/// `CAP_SYS_ADMIN` (capabilities a runtime adds reach uid 0 only): said once at start, as
/// upstream does, since DCGM itself only refuses the fields.
fn warn_without_profiling_rights() {
    use crate::runtime::process::{effective_uid, has_cap_sys_admin};
    match (effective_uid(), has_cap_sys_admin()) {
        (Ok(0), Ok(true)) => {}
        (Ok(uid), Ok(cap)) => tracing::warn!(
            "running as uid {uid} {} CAP_SYS_ADMIN: the embedded host engine cannot serve \
             profiling fields (DCGM_FI_PROF_*), which need root with CAP_SYS_ADMIN (NVIDIA's \
             image runs as root; add SYS_ADMIN to the container)",
            if cap { "with" } else { "without" }
        ),
        (Err(e), _) | (_, Err(e)) => tracing::debug!("cannot tell our rights: {e}"),
    }
}

/// Why the start did not lead to a collection loop.
enum Started {
    /// A signal asked to stop: a clean exit.
    Stopped,
    Failed(Error),
}

/// Connects and builds the watches once. A remote engine not reachable yet is retried by
/// the loop (`None`), unless `--exit-if-hostengine-unreachable`; under `--backend auto`
/// with NVML loaded, an embedded engine that does not start is retried the same way, and
/// NVML serves while either is retried.
fn start_collecting(
    runner: &Runner,
    exit_if_unreachable: bool,
    stop: &dyn Fn() -> bool,
) -> Result<Option<Worker<Dcgm>>, Started> {
    let e = match runner.start(stop) {
        Ok(w) => return Ok(Some(w)),
        Err(app::StartupError::Stopped) => return Err(Started::Stopped),
        // A selector naming an entity this node lacks: the flag's error, not DCGM's.
        Err(app::StartupError::Config(msg)) => return Err(Started::Failed(Error::Node(msg))),
        Err(e) => e,
    };
    // Nothing says yet which GPUs a remote engine has: NVML stands in once it did.
    let nvml_serves = runner.library.is_some()
        && runner.nvml.is_some()
        && matches!(runner.engine, Engine::Embedded);
    let skew = e.is_version_skew();
    let why = match &runner.engine {
        // The operator asked for dcgm-exporter's exit (the orchestrator restarts the pod),
        // NVML or not.
        Engine::Remote(t) if exit_if_unreachable => {
            return Err(Started::Failed(Error::Unreachable {
                target: t.clone(),
                source: e,
            }))
        }
        Engine::Remote(t) => Error::Remote {
            target: t.clone(),
            source: e,
        },
        Engine::Embedded => Error::Embedded { source: e },
    };
    match &runner.engine {
        // DCGM itself refuses this pair of releases (the message names both): no retry
        // helps until the library or the engine changes, so the start stops.
        Engine::Remote(_) if skew => return Err(Started::Failed(why)),
        _ if nvml_serves => tracing::warn!(
            "{why}; NVML serves the core GPU series while DCGM is retried with backoff (--backend auto)"
        ),
        // In a sidecar set-up the exporter often starts before the engine: retried like an
        // engine lost later, with /health 503 meanwhile.
        Engine::Remote(_) if runner.nvml.is_some() => tracing::warn!(
            "{why}; retrying with backoff (--exit-if-hostengine-unreachable exits \
             instead); NVML stands in for none of its GPUs until it has said which it has"
        ),
        Engine::Remote(_) => tracing::warn!(
            "{why}; retrying with backoff (--exit-if-hostengine-unreachable exits instead)"
        ),
        Engine::Embedded => return Err(Started::Failed(why)),
    }
    runner.unreachable_at_start(&why.to_string());
    Ok(None)
}

/// The process's signals, handled from the first moments of the start: SIGHUP reloads
/// (queued for the collection loop while it is not running yet), SIGINT, SIGTERM and
/// SIGQUIT stop (noticed by a start in progress, which then ends cleanly).
struct Signals {
    stop: Arc<std::sync::atomic::AtomicBool>,
    stopped: Arc<tokio::sync::Notify>,
}

impl Signals {
    fn install(rt: &tokio::runtime::Runtime, control: std::sync::mpsc::Sender<Control>) -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        // Registered now, on this thread: a signal from here on is recorded, not fatal.
        let _in_runtime = rt.enter();
        match signal(SignalKind::hangup()) {
            Ok(mut hup) => {
                rt.spawn(async move {
                    while hup.recv().await.is_some() {
                        tracing::info!("SIGHUP: reloading the counters");
                        let _ = control.send(Control::Reload(Trigger::Sighup));
                    }
                });
            }
            Err(e) => tracing::warn!("cannot handle SIGHUP: {e}"),
        }
        let mut streams = Vec::new();
        for kind in [
            SignalKind::interrupt(),
            SignalKind::terminate(),
            SignalKind::quit(),
        ] {
            match signal(kind) {
                Ok(s) => streams.push(s),
                Err(e) => tracing::warn!("cannot handle signal {kind:?}: {e}"),
            }
        }
        let signals = Signals {
            stop: Default::default(),
            stopped: Default::default(),
        };
        let (stop, stopped) = (signals.stop.clone(), signals.stopped.clone());
        rt.spawn(async move {
            futures_select_all(streams.iter_mut().map(|s| Box::pin(s.recv()))).await;
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            // A permit is kept when nobody waits yet.
            stopped.notify_one();
        });
        signals
    }

    fn stopping(&self) -> bool {
        self.stop.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn wait(&self) {
        if !self.stopping() {
            self.stopped.notified().await;
        }
    }
}

/// Serves HTTP (when listening) until a signal or the collection thread's end.
async fn serve_http(
    server: Option<http::Server>,
    shared: Arc<Shared>,
    signals: &Signals,
    ended_rx: tokio::sync::oneshot::Receiver<()>,
) -> Result<(), Error> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let serving = match server {
        Some(server) => {
            tracing::info!("listening on {}", server.describe());
            Some(tokio::spawn(server.serve(shared.clone(), rx)))
        }
        None => {
            tracing::info!("HTTP listener off (-a \"\"): writing the textfile only");
            None
        }
    };
    let result = tokio::select! {
        _ = signals.wait() => Ok(()),
        _ = ended_rx => Err(Error::CollectionEnded),
    };
    tracing::info!("shutting down");
    let _ = tx.send(true);
    let served = match serving {
        Some(s) => s
            .await
            .map_err(Error::HttpTask)
            .and_then(|r| r.map_err(Error::Http)),
        None => Ok(()),
    };
    result.and(served)
}

/// Spawns a thread and a receiver that resolves when the thread ends, also by a panic:
/// the collection thread's end must end the process rather than leave the server up on a
/// page nobody refreshes.
fn spawn_watched(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> std::io::Result<(
    std::thread::JoinHandle<()>,
    tokio::sync::oneshot::Receiver<()>,
)> {
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<()>();
    let handle = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            // Dropped on return and on unwinding alike.
            let _ended = ended_tx;
            f()
        })?;
    Ok((handle, ended_rx))
}

fn thread_panic(panic: Box<dyn std::any::Any + Send>) -> Error {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    Error::CollectionPanicked(what)
}

/// A Kubernetes API client when a feature needs one; None when none is needed or no
/// configuration exists (in-cluster or KUBECONFIG). A broken configuration is fatal only
/// for `-m`: pod metadata and DRA are then off with a warning, as dcgm-exporter does.
fn kube_api_for(wants: &settings::KubeWants) -> Result<Option<KubeApi>, Error> {
    if wants.configmap {
        return KubeApi::connect().map_err(Error::KubeApi);
    }
    if !wants.pod_metadata && !wants.dra {
        return Ok(None);
    }
    let api = KubeApi::connect().or_else(|e| {
        tracing::warn!("{e}; {} are off", wants.features());
        Ok(None)
    });
    if let Ok(None) = &api {
        tracing::warn!(
            "no Kubernetes API configuration (not in a pod, and KUBECONFIG is not set): {} are off",
            wants.features()
        );
    }
    api
}

/// The pod watch feeding pod UIDs and labels to the attribution stage, when asked for.
fn pod_metadata(
    stages: &settings::Stages,
    api: Option<&KubeApi>,
) -> Option<Arc<dyn attribution::PodMetadata>> {
    if !stages.kube.pod_metadata {
        return None;
    }
    let api = api?;
    let cache = attribution::podmeta::watch(
        api,
        std::env::var("NODE_NAME").ok().as_deref(),
        attribution::podmeta::Options {
            labels: stages.attribution.options.pod_labels,
            allowlist: attribution::podmeta::Allowlist::new(
                &stages.attribution.pod_label_allowlist,
            ),
        },
    );
    Some(cache)
}

/// The DRA driver's ResourceSlices, watched for `--kubernetes-enable-dra`.
fn dra_devices(
    stages: &settings::Stages,
    api: Option<&KubeApi>,
) -> Option<Arc<dyn attribution::dra::DraDevices>> {
    if !stages.kube.dra {
        return None;
    }
    Some(attribution::dra::watch(api?))
}

/// `-f`, or with `-m` the ConfigMap, whose changes reload the counters (polled no more
/// often than every collection `interval` where RBAC refuses its watch).
fn counters_source(
    counters: &settings::CountersSettings,
    interval: Duration,
    api: Option<&KubeApi>,
    control: &std::sync::mpsc::Sender<Control>,
) -> Result<configmap::CountersSource, Error> {
    let Some(configmap_data) = &counters.configmap else {
        return Ok(configmap::CountersSource::File {
            path: counters.path.clone(),
            given: counters.given,
            emulate: counters.emulate,
        });
    };
    let (namespace, name) = configmap::parse_ref(configmap_data).map_err(Error::ConfigMap)?;
    let api = api.ok_or_else(|| Error::NoKubeApi {
        configmap: configmap_data.clone(),
    })?;
    let control = std::sync::Mutex::new(control.clone());
    watchers::counters_configmap::open(api, &namespace, &name, interval, move || {
        let _ = control
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(Control::Reload(Trigger::ConfigMap));
    })
    .map_err(|e| Error::CountersSource(e.into()))
}

/// The attribution stage with its sources and self-metrics; NVML is loaded only with `-k`
/// (or container labels), as dcgm-exporter does, and its absence is not fatal.
fn attribution_stage(
    stages: &settings::Stages,
    shared: &Shared,
    api: Option<&KubeApi>,
) -> Result<Attribution, Error> {
    let s = &stages.attribution;
    for flag in &s.ignored_without_k {
        tracing::warn!("{flag} has no effect without -k/--kubernetes");
    }
    let interval = Duration::from_millis(stages.collect.interval_ms);
    // Container labels name MIG devices by MIG UUID too, which only NVML resolves.
    let nvml = s.nvml.then(|| {
        let lib = stages.nvml_library.as_deref().map_or_else(
            || std::ffi::OsString::from(crate::collect::nvml::DEFAULT_LIBRARY),
            |p| p.as_os_str().to_owned(),
        );
        attribution::nvml::RealNvml::load_from(&lib)
            .map(|n| Box::new(n) as Box<dyn attribution::nvml::NvmlView>)
    });
    if s.container.is_some() && !s.options.kubernetes {
        if let Some(Err(e)) = &nvml {
            tracing::warn!("{e}: containers given MIG devices by MIG UUID get no container label");
        }
    }
    let mut stage = Attribution::new(s.options.clone(), nvml);
    if let Some((socket, label)) = &s.container {
        let source = container_source(socket, label, interval).map_err(Error::Attribution)?;
        stage = stage.with_source(Box::new(source));
    } else if s.socket_without_labels {
        tracing::warn!("--container-runtime-socket has no effect without --container-labels");
    }
    let metrics = attribution::metrics::Metrics::new();
    for c in metrics.collectors() {
        shared.metrics.register(c);
    }
    stage = stage.with_metrics(metrics);
    if let Some(cache) = pod_metadata(stages, api) {
        stage = stage.with_metadata(cache);
    }
    if let Some(slices) = dra_devices(stages, api) {
        stage = stage.with_dra(slices);
    }
    Ok(stage)
}

/// `--container-labels`: refreshed once per collection interval on its own thread, each
/// refresh bounded well inside the interval.
fn container_source(
    socket: &str,
    label: &'static str,
    interval: Duration,
) -> Result<attribution::container::ContainerSource, attribution::Error> {
    let socket = attribution::container::socket_path(socket);
    tracing::info!("container labels from {}", socket.display());
    attribution::container::ContainerSource::start(
        socket,
        interval,
        (interval / 2).clamp(Duration::from_millis(200), Duration::from_secs(5)),
        label,
    )
}

/// Resolves when any of the futures does.
async fn futures_select_all<F: std::future::Future + Unpin>(futs: impl Iterator<Item = F>) {
    let futs: Vec<F> = futs.collect();
    if futs.is_empty() {
        std::future::pending::<()>().await;
    }
    let mut futs = futs;
    std::future::poll_fn(move |cx| {
        for f in futs.iter_mut() {
            if std::pin::Pin::new(f).poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests;
