//! From a parsed configuration to a running exporter: load DCGM, start the collection
//! thread, serve HTTP until a signal arrives.

use crate::attribution::kubeapi::KubeApi;
use crate::attribution::{self, Attribution};
use crate::collect;
use crate::config::hostname;
use crate::config::{cli, configmap, selector};
use crate::lifecycle::app::{self, Engine, Runner, Shared};
use crate::lifecycle::operations;
use crate::output::http;
use std::sync::Arc;
use std::time::Duration;

/// How a run ended: the result for the exit code, and whether DCGM was shut down in time.
pub struct Outcome {
    pub result: Result<(), String>,
    /// `TimedOut` when a DCGM call was still stuck at exit: the process must then end
    /// without running libdcgm's destructors (see `dcgm_sys::exit_now`).
    pub dcgm: dcgm_sys::Shutdown,
}

/// How long the sessions still open at exit may take to end by themselves.
const SESSIONS_GRACE: Duration = Duration::from_secs(2);
/// How long DCGM may take to shut down at exit, sessions included; past it the process
/// exits anyway (a host engine that stopped answering holds a call for 60 s).
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// Runs the exporter until a signal (or a fatal error), then shuts DCGM down in order:
/// the collection loop stops its engine or disconnects, then `dcgmShutdown` ends DCGM's
/// own threads, within [`SHUTDOWN_DEADLINE`].
pub fn run(config: cli::Config) -> Outcome {
    let mut library = None;
    let result = serve(config, &mut library);
    let dcgm = match library {
        Some(lib) => shut_down_dcgm(&lib),
        None => dcgm_sys::Shutdown::Done,
    };
    Outcome { result, dcgm }
}

fn shut_down_dcgm(library: &dcgm_sys::Library) -> dcgm_sys::Shutdown {
    let open = library.live_sessions();
    let done = library.shutdown(SESSIONS_GRACE, SHUTDOWN_DEADLINE);
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
pub fn dcgm_log_env(config: &cli::Config) -> Vec<(&'static str, String)> {
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
pub fn set_dcgm_log_env(config: &cli::Config) -> Result<(), String> {
    let vars = dcgm_log_env(config);
    if vars.is_empty() {
        return Ok(());
    }
    match threads() {
        Some(n) if n > 1 => Err(format!(
            "internal error: DCGM's log settings must be set before any thread starts \
             ({n} threads run already)"
        )),
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
    mut config: cli::Config,
    library_out: &mut Option<Arc<dcgm_sys::Library>>,
) -> Result<(), String> {
    let file_settings = crate::config::file::apply(&mut config)?;
    let (control_tx, control_rx) = std::sync::mpsc::channel::<app::Control>();
    let kube_api = kube_api_for(&config)?;
    let collectors = counters_source(&config, kube_api.as_ref(), &control_tx)?;
    let counters = Arc::new(collectors.load_for(config.emulate_version)?);
    let (keep_age_s, keep_samples, keep_explicit) = operations::keep_limits(&config)?;
    let settings = collect::Settings {
        gpus: selector::parse("-d", &config.devices)?,
        switches: selector::parse("-s", &config.switch_devices)?,
        cpus: selector::parse("-p", &config.cpu_devices)?,
        compute_instances: config.compute_instances,
        use_old_namespace: config.use_old_namespace,
        replace_blanks_in_model_name: config.replace_blanks_in_model_name,
        hostname: None,
        interval_ms: millis("-c", config.collect_interval, false)?,
        xid_window_ms: millis("-x", config.xid_count_window_size, true)?,
        clock_events_window_ms: millis(
            "--clock-events-count-window-size",
            config.clock_events_count_window_size,
            true,
        )?,
        keep_age_s,
        keep_samples,
        keep_explicit,
        fake_gpus: config.fake_gpus,
        watch_groups: file_settings.watch_groups,
        emulate: config.emulate_version,
    };
    let engine = match config.remote_hostengine() {
        Some(addr) => Engine::Remote(
            dcgm_sys::ConnectTarget::parse(addr)
                .map_err(|e| format!("-r/--remote-hostengine-info: {e}"))?,
        ),
        None => Engine::Embedded,
    };
    let remote_host = match &engine {
        Engine::Remote(t) => t.host(),
        Engine::Embedded => None,
    };
    let settings = collect::Settings {
        hostname: hostname::resolve(
            config.no_hostname,
            config.kubernetes,
            remote_host.as_deref(),
            std::env::var("NODE_NAME").ok().as_deref(),
        ),
        ..settings
    };
    // `-a ""`: no HTTP listener (textfile mode). Otherwise bound before DCGM starts: a port
    // in use or a broken web config is reported at once.
    let server = if config.address.is_empty() {
        if config.textfile_directory.is_empty() {
            return Err(
                "-a \"\" turns the HTTP listener off; it needs --textfile-directory".into(),
            );
        }
        None
    } else {
        Some(start_http(&config)?)
    };
    let sinks = operations::sinks(&config)?;
    // DCGM's log variables (--enable-dcgm-log) were set by main, before any thread.

    let library = Arc::new(
        dcgm_sys::Library::load(config.dcgm_library.as_deref()).map_err(|e| e.to_string())?,
    );
    *library_out = Some(library.clone());
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
    match &engine {
        Engine::Embedded => tracing::info!("mode: embedded DCGM host engine"),
        Engine::Remote(t) => tracing::info!("mode: remote DCGM host engine at {t}"),
    }
    let shared = Arc::new(Shared::with_openmetrics(
        Duration::from_millis(settings.interval_ms),
        server.as_ref().is_some_and(|s| s.options.openmetrics),
    ));
    shared.require_gpus.store(
        config.health_require_gpus,
        std::sync::atomic::Ordering::SeqCst,
    );
    if config.enable_exporter_metrics {
        shared.metrics.enable_exporter_metrics();
    }
    let attribution = attribution_stage(&config, &settings)?;
    let attribution =
        attribution.with_metrics(attribution::metrics::Metrics::register(&shared.metrics));
    let attribution = match pod_metadata(&config, kube_api.as_ref()) {
        Some(cache) => attribution.with_metadata(cache),
        None => attribution,
    };
    let attribution = match dra_devices(&config, kube_api.as_ref()) {
        Some(slices) => attribution.with_dra(slices),
        None => attribution,
    };
    let runner = Arc::new(Runner {
        library,
        engine: engine.clone(),
        collectors,
        counters: std::sync::RwLock::new(counters),
        settings,
        shared: shared.clone(),
        current: Default::default(),
        bind_unbind: config.enable_gpu_bind_unbind_watch.then(|| {
            crate::lifecycle::watchers::bind_unbind::poll_interval(
                &config.gpu_bind_unbind_poll_interval,
            )
        }),
        sinks,
        attribution: std::sync::Mutex::new(attribution),
    });
    let worker = match runner.start() {
        Ok(w) => Some(w),
        // A selector naming an entity this node lacks: the flag's error, not DCGM's.
        Err(app::StartupError::Config(msg)) => return Err(msg),
        Err(app::StartupError::Dcgm(e)) => match &engine {
            Engine::Remote(t) if !config.exit_if_hostengine_unreachable => {
                // In a sidecar set-up the exporter often starts before the engine: retried
                // like an engine lost later, with /health 503 meanwhile.
                let why = format!("cannot use the DCGM host engine at {t}: {e}");
                tracing::warn!(
                    "{why}; retrying with backoff (--exit-if-hostengine-unreachable exits instead)"
                );
                runner.unreachable_at_start(&why);
                None
            }
            Engine::Remote(t) => return Err(format!("cannot use the DCGM host engine at {t}: {e} (is nv-hostengine running and reachable? IPv6 addresses go in brackets: [::1]:5555)")),
            Engine::Embedded => return Err(format!("cannot start the embedded DCGM host engine: {e}")),
        },
    };

    // One worker per core (tokio's default).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    operations::start_watchers(&runner, &control_tx)?;
    let loop_runner = runner.clone();
    let (collection, ended_rx) =
        spawn_watched("collector", move || loop_runner.run(worker, control_rx))
            .map_err(|e| format!("cannot start the collection thread: {e}"))?;

    let reload_tx = control_tx.clone();
    let served = rt.block_on(async move {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(mut hup) => {
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        tracing::info!("SIGHUP: reloading the counters");
                        let _ = reload_tx.send(app::Control::Reload);
                    }
                });
            }
            Err(e) => tracing::warn!("cannot handle SIGHUP: {e}"),
        }
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
            _ = wait_for_signal() => Ok(()),
            _ = ended_rx => Err("the collection thread ended unexpectedly".to_string()),
        };
        tracing::info!("shutting down");
        let _ = tx.send(true);
        let served = match serving {
            Some(s) => s
                .await
                .map_err(|e| format!("the HTTP server failed: {e}"))
                .and_then(|r| r),
            None => Ok(()),
        };
        result.and(served)
    });
    let _ = control_tx.send(app::Control::Stop);
    collection.join().map_err(thread_panic)?;
    if served.is_ok() {
        // A clean stop: a textfile left behind would read as current values.
        for sink in &runner.sinks {
            sink.close();
        }
    }
    served
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

fn thread_panic(panic: Box<dyn std::any::Any + Send>) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    format!("the collection thread panicked: {what}")
}

/// A duration flag in milliseconds. DCGM takes durations in microseconds as an i64, so a
/// value that overflows that is refused here rather than wrapped.
fn millis(flag: &str, ms: i64, zero_ok: bool) -> Result<u64, String> {
    const MAX_MS: i64 = i64::MAX / 1000;
    match ms {
        m if m <= 0 && !zero_ok => Err(format!(
            "{flag} {ms}: the collect interval must be a positive number of milliseconds"
        )),
        m if m < 0 => Err(format!("{flag} {ms}: must not be negative")),
        m if m > MAX_MS => Err(format!(
            "{flag} {ms}: too large (at most {MAX_MS} milliseconds)"
        )),
        m => Ok(m as u64),
    }
}

/// Whether `-k` asks for what only the API server knows (pod UIDs and labels).
fn wants_pod_metadata(config: &cli::Config) -> bool {
    config.kubernetes && (config.kubernetes_enable_pod_labels || config.kubernetes_enable_pod_uid)
}

/// Whether `-k` asks for DRA claims (the driver's ResourceSlices are in the API server).
fn wants_dra(config: &cli::Config) -> bool {
    config.kubernetes && config.kubernetes_enable_dra
}

/// What the API server would have given, for the line saying it is off.
fn api_features(config: &cli::Config) -> String {
    let mut off = Vec::new();
    if wants_pod_metadata(config) {
        off.push("pod UIDs and labels");
    }
    if wants_dra(config) {
        off.push("DRA labels");
    }
    off.join(" and ")
}

/// A Kubernetes API client when a feature needs one; None when none is needed or no
/// configuration exists (in-cluster or KUBECONFIG). A broken configuration is fatal only
/// for `-m`: pod metadata and DRA are then off with a warning, as dcgm-exporter does.
fn kube_api_for(config: &cli::Config) -> Result<Option<KubeApi>, String> {
    if config.configmap_data != "none" {
        return KubeApi::connect();
    }
    if !wants_pod_metadata(config) && !wants_dra(config) {
        return Ok(None);
    }
    let api = KubeApi::connect().or_else(|e| {
        tracing::warn!("{e}; {} are off", api_features(config));
        Ok(None)
    });
    if let Ok(None) = &api {
        tracing::warn!(
            "no Kubernetes API configuration (not in a pod, and KUBECONFIG is not set): {} are off",
            api_features(config)
        );
    }
    api
}

/// The pod watch feeding pod UIDs and labels to the attribution stage, when asked for.
fn pod_metadata(
    config: &cli::Config,
    api: Option<&KubeApi>,
) -> Option<Arc<dyn attribution::PodMetadata>> {
    if !wants_pod_metadata(config) {
        return None;
    }
    let api = api?;
    let cache = attribution::podmeta::watch(
        api,
        std::env::var("NODE_NAME").ok().as_deref(),
        attribution::podmeta::Options {
            labels: config.kubernetes_enable_pod_labels,
            allowlist: attribution::podmeta::Allowlist::new(
                &config.kubernetes_pod_label_allowlist_regex,
            ),
        },
    );
    Some(cache)
}

/// The DRA driver's ResourceSlices, watched for `--kubernetes-enable-dra`.
fn dra_devices(
    config: &cli::Config,
    api: Option<&KubeApi>,
) -> Option<Arc<dyn attribution::dra::DraDevices>> {
    if !wants_dra(config) {
        return None;
    }
    Some(attribution::dra::watch(api?))
}

/// `-f`, or with `-m` the ConfigMap, whose changes reload the counters.
fn counters_source(
    config: &cli::Config,
    api: Option<&KubeApi>,
    control: &std::sync::mpsc::Sender<app::Control>,
) -> Result<configmap::CountersSource, String> {
    if config.configmap_data == "none" {
        return Ok(configmap::CountersSource::File {
            path: config.collectors.clone(),
            given: config.collectors_set,
        });
    }
    let (namespace, name) = configmap::parse_ref(&config.configmap_data)?;
    let api = api.ok_or_else(|| {
        format!(
            "-m {}: no Kubernetes API configuration (not in a pod, and KUBECONFIG is not set)",
            config.configmap_data
        )
    })?;
    let control = std::sync::Mutex::new(control.clone());
    configmap::open(api, &namespace, &name, move || {
        let _ = control
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(app::Control::Reload);
    })
}

/// The attribution options from the flags; NVML is loaded only with `-k`, as dcgm-exporter
/// does, and its absence is not fatal.
fn attribution_stage(
    config: &cli::Config,
    settings: &collect::Settings,
) -> Result<Attribution, String> {
    let only_with_k = [
        (
            config.kubernetes_gpu_id_type != "uid",
            "--kubernetes-gpu-id-type",
        ),
        (config.kubernetes_virtual_gpus, "--kubernetes-virtual-gpus"),
        (config.kubernetes_enable_dra, "--kubernetes-enable-dra"),
        (
            !config.nvidia_resource_names.is_empty(),
            "--nvidia-resource-names",
        ),
        (
            config.pod_resources_kubelet_socket.as_os_str()
                != "/var/lib/kubelet/pod-resources/kubelet.sock",
            "--pod-resources-kubelet-socket",
        ),
    ];
    if !config.kubernetes {
        for (_, flag) in only_with_k.iter().filter(|(set, _)| *set) {
            tracing::warn!("{flag} has no effect without -k/--kubernetes");
        }
    }
    let interval = Duration::from_millis(settings.interval_ms);
    let opts = attribution::Options {
        kubernetes: config.kubernetes,
        kubelet_socket: config.pod_resources_kubelet_socket.clone(),
        id_type: attribution::IdType::parse(&config.kubernetes_gpu_id_type)?,
        resource_names: config.nvidia_resource_names.clone(),
        virtual_gpus: config.kubernetes_virtual_gpus,
        old_names: config.use_old_namespace,
        pod_uid: config.kubernetes_enable_pod_uid,
        pod_labels: config.kubernetes_enable_pod_labels,
        dra: wants_dra(config),
        hpc_dir: (!config.hpc_job_mapping_dir.is_empty())
            .then(|| config.hpc_job_mapping_dir.clone().into()),
        // dcgm-exporter's per-call timeout.
        kubelet_deadline: Duration::from_secs(10),
        // The collection waits this long at most; a later answer serves the next one.
        kubelet_wait: (interval / 2).clamp(Duration::from_millis(200), Duration::from_secs(5)),
        nvml_wait: (interval / 4).clamp(Duration::from_millis(100), Duration::from_secs(2)),
        proc_root: "/proc".into(),
    };
    // Container labels name MIG devices by MIG UUID too, which only NVML resolves.
    let nvml = (config.kubernetes || config.container_labels).then(|| {
        attribution::nvml::RealNvml::load()
            .map(|n| Box::new(n) as Box<dyn attribution::nvml::NvmlView>)
    });
    if config.container_labels && !config.kubernetes {
        if let Some(Err(e)) = &nvml {
            tracing::warn!("{e}: containers given MIG devices by MIG UUID get no container label");
        }
    }
    let mut stage = Attribution::new(opts, nvml);
    if config.container_labels {
        stage = stage.with_source(Box::new(container_source(config, interval)?));
    } else if !config.container_runtime_socket.is_empty() {
        tracing::warn!("--container-runtime-socket has no effect without --container-labels");
    }
    Ok(stage)
}

/// `--container-labels`: refreshed once per collection interval on its own thread, each
/// refresh bounded well inside the interval.
fn container_source(
    config: &cli::Config,
    interval: Duration,
) -> Result<attribution::container::ContainerSource, String> {
    let socket = attribution::container::socket_path(&config.container_runtime_socket);
    tracing::info!("container labels from {}", socket.display());
    attribution::container::ContainerSource::start(
        socket,
        interval,
        (interval / 2).clamp(Duration::from_millis(200), Duration::from_secs(5)),
        if config.use_old_namespace {
            "container_name"
        } else {
            "container"
        },
    )
}

/// The HTTP listener: options checked, web config read, sockets bound (or taken from systemd).
fn start_http(config: &cli::Config) -> Result<http::Server, String> {
    http::Server::bind(config)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
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
    let waits = streams.iter_mut().map(|s| Box::pin(s.recv()));
    futures_select_all(waits).await;
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
mod tests {
    use super::{dcgm_log_env, millis, set_dcgm_log_env, spawn_watched, thread_panic};
    use crate::config::cli;

    fn config(args: &[&str]) -> cli::Config {
        cli::parse_from(std::iter::once("dcgm-exporter").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn dcgm_log_settings_are_for_the_embedded_engine_only() {
        let c = config(&["--enable-dcgm-log", "--dcgm-log-level", "DEBUG"]);
        assert_eq!(
            dcgm_log_env(&c),
            [
                ("__DCGM_DBG_FILE", "-".to_string()),
                ("__DCGM_DBG_LVL", "DEBUG".to_string())
            ]
        );
        assert!(dcgm_log_env(&config(&["--enable-dcgm-log", "-r", "h:5555"])).is_empty());
        assert!(dcgm_log_env(&config(&[])).is_empty());
        // Nothing to set: fine whatever the threads.
        assert_eq!(set_dcgm_log_env(&config(&[])), Ok(()));
    }

    #[test]
    fn dcgm_log_settings_are_refused_once_another_thread_runs() {
        // A test runs beside the harness's main thread: the state main must never be in
        // when it sets DCGM's environment.
        let c = config(&["--enable-dcgm-log", "--dcgm-log-level", "WARN"]);
        let e = set_dcgm_log_env(&c).unwrap_err();
        assert!(e.contains("before any thread starts"), "{e}");
        assert_ne!(std::env::var("__DCGM_DBG_LVL").as_deref(), Ok("WARN"));
    }

    #[test]
    fn a_panicking_collection_thread_is_noticed_and_reported() {
        let (handle, ended) = spawn_watched("t", || panic!("frozen")).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(5), ended)
                .await
                .expect("the end of the thread is signalled")
                .expect_err("by dropping the sender");
        });
        let e = handle.join().map_err(thread_panic).unwrap_err();
        assert_eq!(e, "the collection thread panicked: frozen");
    }

    #[test]
    fn duration_flags_must_fit_dcgm_microseconds() {
        assert_eq!(millis("-c", 30000, false), Ok(30000));
        assert_eq!(millis("-x", 0, true), Ok(0));
        assert_eq!(
            millis("-c", i64::MAX / 1000, false),
            Ok((i64::MAX / 1000) as u64)
        );
        let e = millis("-c", i64::MAX / 1000 + 1, false).unwrap_err();
        assert!(
            e.starts_with("-c 9223372036854776:") && e.contains("too large"),
            "{e}"
        );
        let e = millis("--clock-events-count-window-size", i64::MAX, true).unwrap_err();
        assert!(e.starts_with("--clock-events-count-window-size "), "{e}");
        assert!(millis("-x", -1, true).unwrap_err().contains("negative"));
        assert!(millis("-c", -5, false).unwrap_err().contains("positive"));
        assert!(millis("-c", 0, false).unwrap_err().contains("positive"));
    }
}
