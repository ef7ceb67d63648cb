//! From a parsed configuration to a running exporter: load DCGM, start the collection
//! thread, serve HTTP until a signal arrives.

use crate::app::{self, Engine, Runner, Shared};
use crate::attribution::kubeapi::KubeApi;
use crate::attribution::{self, Attribution};
use crate::collect;
use crate::config::{cli, configmap, selector};
use crate::hostname;
use crate::output::server;
use std::sync::Arc;
use std::time::Duration;

pub fn run(config: cli::Config) -> Result<(), String> {
    let unsupported = config.unsupported_options();
    if !unsupported.is_empty() {
        return Err(unsupported
            .iter()
            .map(|o| format!("option --{o} is not supported yet by this exporter"))
            .collect::<Vec<_>>()
            .join("; "));
    }
    let (control_tx, control_rx) = std::sync::mpsc::channel::<app::Control>();
    let kube_api = kube_api_for(&config)?;
    let collectors = counters_source(&config, kube_api.as_ref(), &control_tx)?;
    let counters = Arc::new(collectors.load()?);
    let settings = collect::Settings {
        gpus: selector::parse("-d", &config.devices)?,
        switches: selector::parse("-s", &config.switch_devices)?,
        cpus: selector::parse("-p", &config.cpu_devices)?,
        compute_instances: config.compute_instances,
        use_old_namespace: config.use_old_namespace,
        replace_blanks_in_model_name: config.replace_blanks_in_model_name,
        hostname: None,
        interval_ms: u64::try_from(config.collect_interval)
            .ok()
            .filter(|&ms| ms > 0)
            .ok_or_else(|| {
                format!(
                    "-c {}: the collect interval must be a positive number of milliseconds",
                    config.collect_interval
                )
            })?,
        xid_window_ms: u64::try_from(config.xid_count_window_size)
            .map_err(|_| format!("-x {}: must not be negative", config.xid_count_window_size))?,
        clock_events_window_ms: u64::try_from(config.clock_events_count_window_size).map_err(
            |_| {
                format!(
                    "--clock-events-count-window-size {}: must not be negative",
                    config.clock_events_count_window_size
                )
            },
        )?,
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
    let addrs = server::listen_addrs(&config.address)?;
    if config.enable_dcgm_log && matches!(engine, Engine::Embedded) {
        // Read by the embedded host engine at dcgmInit; set before any thread exists.
        std::env::set_var("__DCGM_DBG_FILE", "-");
        std::env::set_var("__DCGM_DBG_LVL", &config.dcgm_log_level);
    }

    let library = Arc::new(
        dcgm_sys::Library::load(config.dcgm_library.as_deref()).map_err(|e| e.to_string())?,
    );
    tracing::info!("loaded {}", library.path().display());
    let shared = Arc::new(Shared::new(Duration::from_millis(settings.interval_ms)));
    let attribution = attribution_stage(&config, &settings)?;
    let attribution =
        attribution.with_metrics(attribution::metrics::Metrics::register(&shared.metrics));
    let attribution = match pod_metadata(&config, kube_api.as_ref()) {
        Some(cache) => attribution.with_metadata(cache),
        None => attribution,
    };
    let runner = Arc::new(Runner {
        library,
        engine: engine.clone(),
        collectors,
        counters: std::sync::RwLock::new(counters),
        settings,
        shared: shared.clone(),
        attribution: std::sync::Mutex::new(attribution),
    });
    let collector = runner.start().map_err(|e| match &engine {
        Engine::Remote(t) => format!("cannot use the DCGM host engine at {t}: {e} (is nv-hostengine running and reachable? IPv6 addresses go in brackets: [::1]:5555)"),
        Engine::Embedded => format!("cannot start the embedded DCGM host engine: {e}"),
    })?;
    runner.mark_started();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let loop_runner = runner.clone();
    let collection = std::thread::Builder::new()
        .name("collector".into())
        .spawn(move || loop_runner.run(Some(collector), control_rx))
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
        let mut servers = Vec::new();
        let mut bound = Vec::new();
        let mut errors = Vec::new();
        for addr in addrs {
            let mut rx = rx.clone();
            match warp::serve(server::routes(shared.clone())).try_bind_with_graceful_shutdown(
                addr,
                async move {
                    let _ = rx.changed().await;
                },
            ) {
                Ok((a, fut)) => {
                    bound.push(a);
                    servers.push(tokio::spawn(fut));
                }
                // ":port" tries [::] and 0.0.0.0; on dual-stack hosts the second is taken by the first.
                Err(e) => errors.push(format!("{addr}: {e}")),
            }
        }
        if bound.is_empty() {
            return Err(format!(
                "cannot listen on {}: {}",
                config.address,
                errors.join("; ")
            ));
        }
        tracing::info!(
            "listening on {}",
            bound
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        wait_for_signal().await;
        tracing::info!("shutting down");
        let _ = tx.send(true);
        for s in servers {
            let _ = tokio::time::timeout(Duration::from_secs(5), s).await;
        }
        Ok(())
    });
    let _ = control_tx.send(app::Control::Stop);
    if let Ok(Some(c)) = collection.join() {
        c.stop();
    }
    served
}

/// Whether `-k` asks for what only the API server knows (pod UIDs and labels).
fn wants_pod_metadata(config: &cli::Config) -> bool {
    config.kubernetes && (config.kubernetes_enable_pod_labels || config.kubernetes_enable_pod_uid)
}

/// A Kubernetes API client when a feature needs one; None when none is needed or no
/// configuration exists (in-cluster or KUBECONFIG). A broken configuration is fatal only
/// for `-m`: pod metadata is then off with a warning, as dcgm-exporter does.
fn kube_api_for(config: &cli::Config) -> Result<Option<KubeApi>, String> {
    if config.configmap_data != "none" {
        return KubeApi::connect();
    }
    if !wants_pod_metadata(config) {
        return Ok(None);
    }
    KubeApi::connect().or_else(|e| {
        tracing::warn!("{e}; pod UIDs and labels are off");
        Ok(None)
    })
}

/// The pod watch feeding pod UIDs and labels to the attribution stage, when asked for.
fn pod_metadata(
    config: &cli::Config,
    api: Option<&KubeApi>,
) -> Option<Arc<dyn attribution::PodMetadata>> {
    if !wants_pod_metadata(config) {
        return None;
    }
    let Some(api) = api else {
        tracing::warn!(
            "no Kubernetes API configuration (not in a pod, and KUBECONFIG is not set): pod UIDs and labels are off"
        );
        return None;
    };
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

/// `-f`, or with `-m` the ConfigMap, whose changes reload the counters.
fn counters_source(
    config: &cli::Config,
    api: Option<&KubeApi>,
    control: &std::sync::mpsc::Sender<app::Control>,
) -> Result<configmap::CountersSource, String> {
    if config.configmap_data == "none" {
        return Ok(configmap::CountersSource::File(config.collectors.clone()));
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
        hpc_dir: (!config.hpc_job_mapping_dir.is_empty())
            .then(|| config.hpc_job_mapping_dir.clone().into()),
        // dcgm-exporter's per-call timeout.
        kubelet_deadline: Duration::from_secs(10),
        // The collection waits this long at most; a later answer serves the next one.
        kubelet_wait: (interval / 2).clamp(Duration::from_millis(200), Duration::from_secs(5)),
        proc_root: "/proc".into(),
    };
    let nvml = config.kubernetes.then(|| {
        attribution::nvml::RealNvml::load()
            .map(|n| Box::new(n) as Box<dyn attribution::nvml::NvmlView>)
    });
    Ok(Attribution::new(opts, nvml))
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
