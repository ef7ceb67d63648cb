//! The one place the command line becomes each stage's own settings: collection
//! (`collect::Settings`), attribution (`attribution::Options` and which sources run), output
//! (`http::HttpSettings`, `output::SinkSettings`), and what start-up itself wires (the engine,
//! the counters source, the Kubernetes API, health). No stage sees `cli::Config`.

use crate::attribution;
use crate::collect;
use crate::collect::engines::RemoteEngine;
use crate::config::{cli, hostname, selector};
use crate::lifecycle::app::Engine;
use crate::output::http::HttpSettings;
use crate::output::SinkSettings;
use std::path::PathBuf;
use std::time::Duration;

/// Why the flags (and the config file they name) make no settings.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config file.
    #[error(transparent)]
    File(#[from] crate::config::file::Error),
    /// The OTLP push's flags and environment.
    #[error(transparent)]
    Otlp(#[from] crate::config::otlp::Error),
    /// A flag whose own parser refused it (healing, aggregation, ID type...).
    #[error("{0}")]
    Flag(String),
    /// `-d`, `-s` or `-p`.
    #[error(transparent)]
    Selector(#[from] crate::config::selector::Error),
    /// The event history's bounds, profiling healing, the DCGM module denylist.
    #[error(transparent)]
    CliFlag(#[from] crate::config::cli::FlagError),
    #[error(transparent)]
    IdType(#[from] crate::attribution::UnknownIdType),
    /// A host engine address that does not parse (`whence`: the flag, element or key).
    #[error("{whence}: {why}")]
    EngineAddress { whence: String, why: String },
    #[error("{whence}: the host engine {target} is listed twice")]
    EngineTwice {
        whence: String,
        target: dcgm_sys::ConnectTarget,
    },
    #[error(
        "-a \"\" turns the HTTP listener off; it needs --textfile-directory or an OTLP \
         endpoint (--otlp-endpoint)"
    )]
    NoOutput,
    #[error("{flag} {ms}: the collect interval must be a positive number of milliseconds")]
    NotPositive { flag: String, ms: i64 },
    #[error("{flag} {ms}: must not be negative")]
    Negative { flag: String, ms: i64 },
    #[error("{flag} {ms}: too large (at most {MAX_MS} milliseconds)")]
    TooLarge { flag: String, ms: i64 },
    /// A duration flag that is no duration.
    #[error("{flag}: {why}")]
    Duration {
        flag: &'static str,
        why: crate::config::duration::Error,
    },
    #[error("--usage-idle-window {0}: must be longer than 0")]
    ZeroIdleWindow(String),
    #[error("--usage-max-consumers-per-gpu {0}: must be a positive number")]
    MaxConsumers(i64),
    #[error(
        "--usage-accounting needs consumers to account for: -k (pods), --container-labels \
         (containers) or --hpc-job-mapping-dir (HPC jobs)"
    )]
    NoConsumers,
    #[error("--watch-max-keep-samples {0}: must be between 0 and {max}", max = i32::MAX)]
    KeepSamples(i64),
    #[error("--watch-max-keep-age 0s keeps samples forever: set --watch-max-keep-samples too")]
    KeepForever,
}

/// The longest duration flag, in milliseconds: DCGM's microseconds as an i64.
const MAX_MS: i64 = i64::MAX / 1000;

/// Every stage's settings, made once at start.
pub(super) struct Stages {
    pub engine: Engine,
    /// Several host engines (`-r a,b`, `sources.dcgm.hostEngines`); empty with one, which
    /// is `engine` alone.
    pub engines: Vec<RemoteEngine>,
    /// `--dcgm-library`.
    pub dcgm_library: Option<PathBuf>,
    /// `--backend`.
    pub backend: cli::Backend,
    /// `--nvml-library`.
    pub nvml_library: Option<PathBuf>,
    /// `--config-file`, for errors about what it says.
    pub config_file: String,
    pub counters: CountersSettings,
    pub kube: KubeWants,
    pub collect: collect::Settings,
    pub attribution: AttributionSettings,
    /// `None`: `-a ""`, no HTTP listener (textfile mode).
    pub http: Option<HttpSettings>,
    pub sinks: SinkSettings,
    /// `--otlp-*` and `OTEL_EXPORTER_OTLP_*`: the OTLP push, when an endpoint is set.
    pub otlp: Option<crate::config::otlp::Settings>,
    /// `--health-require-gpus`.
    pub health_require_gpus: bool,
    /// `--enable-exporter-metrics`.
    pub exporter_metrics: bool,
    /// `--enable-gpu-bind-unbind-watch`'s poll interval.
    pub bind_unbind: Option<Duration>,
    /// `--exit-if-hostengine-unreachable`.
    pub exit_if_unreachable: bool,
}

/// Where the counters come from: `-f` (or the config file's), or the `-m` ConfigMap.
pub(super) struct CountersSettings {
    /// `-m namespace:name`; `None` for "none".
    pub configmap: Option<String>,
    pub path: PathBuf,
    /// `-f` was given (a missing file is then an error rather than the built-in list).
    pub given: bool,
    /// The emulated release, whose built-in counters apply without `-f`.
    pub emulate: crate::config::emulate::UpstreamVersion,
}

/// What needs the Kubernetes API.
pub(super) struct KubeWants {
    pub configmap: bool,
    /// `-k` with pod labels or UIDs.
    pub pod_metadata: bool,
    /// `-k --kubernetes-enable-dra`.
    pub dra: bool,
}

impl KubeWants {
    /// What the API server would have given, for the line saying it is off.
    pub(super) fn features(&self) -> String {
        let mut off = Vec::new();
        if self.pod_metadata {
            off.push("pod UIDs and labels");
        }
        if self.dra {
            off.push("DRA labels");
        }
        off.join(" and ")
    }
}

/// The attribution stage's options and the sources start-up plugs into it.
pub(super) struct AttributionSettings {
    pub options: attribution::Options,
    /// Load NVML (`-k` or `--container-labels`, as dcgm-exporter loads it only with `-k`).
    pub nvml: bool,
    /// `--container-labels`: the runtime's socket flag and the label's name.
    pub container: Option<(String, &'static str)>,
    /// `--kubernetes-pod-label-allowlist-regex`, for the pod watch.
    pub pod_label_allowlist: Vec<String>,
    /// Flags given that do nothing without `-k` (warned about when the stage is built).
    pub ignored_without_k: Vec<&'static str>,
    /// `--container-runtime-socket` given without `--container-labels`.
    pub socket_without_labels: bool,
}

/// Every stage's settings from the command line (and the config file it names).
pub(super) fn from_config(mut config: cli::Config) -> Result<Stages, Error> {
    let file_settings = crate::config::file::apply(&mut config)?;
    let listed = remote_engines(&config, &file_settings.host_engines)?;
    let engine = match listed.first() {
        Some((_, t)) => Engine::Remote(t.clone()),
        None => Engine::Embedded,
    };
    let engines = if listed.len() > 1 {
        engine_labels(&config, listed)
    } else {
        Vec::new()
    };
    let collect = collect_settings(&config, file_settings.watch_groups, &engine)?;
    let interval = Duration::from_millis(collect.interval_ms);
    let otlp = otlp_settings(&config, &|k| std::env::var(k).ok())?;
    Ok(Stages {
        dcgm_library: config.dcgm_library.clone(),
        backend: config.backend,
        nvml_library: config.nvml_library.clone(),
        config_file: config.config_file.clone(),
        counters: CountersSettings {
            configmap: (config.configmap_data != "none").then(|| config.configmap_data.clone()),
            path: config.collectors.clone(),
            given: config.collectors_set,
            emulate: config.emulate_version,
        },
        kube: KubeWants {
            configmap: config.configmap_data != "none",
            // Usage accounting maps processes to pods by UID.
            pod_metadata: config.kubernetes
                && (config.kubernetes_enable_pod_labels
                    || config.kubernetes_enable_pod_uid
                    || config.usage_accounting),
            dra: config.kubernetes && config.kubernetes_enable_dra,
        },
        attribution: attribution_settings(&config, interval)?,
        http: http_settings(&config, otlp.is_some())?,
        otlp,
        sinks: SinkSettings {
            textfile_directory: config.textfile_directory.clone(),
            dump_enabled: config.dump_enabled,
            dump_directory: config.dump_directory.clone(),
            dump_retention: config.dump_retention,
            dump_compression: config.dump_compression,
        },
        health_require_gpus: config.health_require_gpus,
        exporter_metrics: config.enable_exporter_metrics,
        bind_unbind: config.enable_gpu_bind_unbind_watch.then(|| {
            crate::lifecycle::watchers::bind_unbind::poll_interval(
                &config.gpu_bind_unbind_poll_interval,
            )
        }),
        exit_if_unreachable: config.exit_if_hostengine_unreachable,
        collect,
        engine,
        engines,
    })
}

/// The host engines to use: `-r`'s comma-separated list, else the config file's
/// `sources.dcgm.hostEngines` (with their names); each address as `-r` takes one, none
/// twice. Empty: the embedded engine.
fn remote_engines(
    config: &cli::Config,
    file: &[crate::config::file::HostEngine],
) -> Result<Vec<(Option<String>, dcgm_sys::ConnectTarget)>, Error> {
    const FLAG: &str = "-r/--remote-hostengine-info";
    let listed: Vec<(Option<String>, String, String)> = match config.remote_hostengine() {
        Some(list) if list.contains(',') => list
            .split(',')
            .enumerate()
            .map(|(i, a)| (None, a.to_string(), format!("{FLAG} (element {})", i + 1)))
            .collect(),
        Some(one) => vec![(None, one.to_string(), FLAG.to_string())],
        None => file
            .iter()
            .map(|e| {
                let whence = format!("{}: {}.address", config.config_file, e.key);
                (Some(e.name.clone()), e.address.clone(), whence)
            })
            .collect(),
    };
    let mut out: Vec<(Option<String>, dcgm_sys::ConnectTarget)> = Vec::new();
    for (name, address, whence) in listed {
        let t = match dcgm_sys::ConnectTarget::parse(&address) {
            Ok(t) => t,
            Err(why) => return Err(Error::EngineAddress { whence, why }),
        };
        if out.iter().any(|(_, o)| o.to_string() == t.to_string()) {
            return Err(Error::EngineTwice { whence, target: t });
        }
        out.push((name, t));
    }
    Ok(out)
}

/// Each engine's label value: its name, else its host as the hostname label's loopback
/// rule gives it; where two would be equal, the address itself (two engines on one host).
fn engine_labels(
    config: &cli::Config,
    listed: Vec<(Option<String>, dcgm_sys::ConnectTarget)>,
) -> Vec<RemoteEngine> {
    let node = std::env::var("NODE_NAME").ok();
    let host_label = |t: &dcgm_sys::ConnectTarget, kubernetes: bool, none: bool| {
        let host = t.host();
        hostname::resolve(
            none,
            kubernetes,
            host.as_deref(),
            node.as_deref(),
            config.emulate_version,
        )
    };
    let derived: Vec<String> = listed
        .iter()
        .map(|(name, t)| match name {
            Some(n) => n.clone(),
            None => host_label(t, false, false).unwrap_or_else(|| t.to_string()),
        })
        .collect();
    listed
        .iter()
        .enumerate()
        .map(|(i, (name, t))| {
            let shared = derived.iter().filter(|d| **d == derived[i]).count() > 1;
            RemoteEngine {
                label: if shared && name.is_none() {
                    t.to_string()
                } else {
                    derived[i].clone()
                },
                target: t.clone(),
                hostname: host_label(t, config.kubernetes, config.no_hostname),
            }
        })
        .collect()
}

fn collect_settings(
    config: &cli::Config,
    watch_groups: Vec<collect::WatchGroup>,
    engine: &Engine,
) -> Result<collect::Settings, Error> {
    let (keep_age_s, keep_samples, keep_explicit) = keep_limits(config)?;
    let remote_host = match engine {
        Engine::Remote(t) => t.host(),
        Engine::Embedded => None,
    };
    Ok(collect::Settings {
        gpus: selector::parse("-d", &config.devices)?,
        switches: selector::parse("-s", &config.switch_devices)?,
        cpus: selector::parse("-p", &config.cpu_devices)?,
        compute_instances: config.compute_instances,
        use_old_namespace: config.use_old_namespace,
        replace_blanks_in_model_name: config.replace_blanks_in_model_name,
        hostname: hostname::resolve(
            config.no_hostname,
            config.kubernetes,
            remote_host.as_deref(),
            std::env::var("NODE_NAME").ok().as_deref(),
            config.emulate_version,
        ),
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
        watch_groups,
        emulate: config.emulate_version,
        low_cardinality: config.low_cardinality,
        profiling: collect::heal::Options::from_flags(
            config.profiling_healing()?,
            config.dcgm_denylist()?,
        ),
        aggregate: collect::aggregate::Options::from_flags(
            &config.aggregate,
            &config.aggregate_period,
            millis("-c", config.collect_interval, false)?,
        )
        .map_err(Error::Flag)?,
    })
}

/// `-a ""` turns the listener off, which leaves the textfile or the OTLP push.
fn http_settings(config: &cli::Config, otlp: bool) -> Result<Option<HttpSettings>, Error> {
    if config.address.is_empty() {
        if config.textfile_directory.is_empty() && !otlp {
            return Err(Error::NoOutput);
        }
        return Ok(None);
    }
    Ok(Some(HttpSettings {
        address: config.address.clone(),
        systemd_socket: config.web_systemd_socket,
        web_config_file: config.web_config_file.clone(),
        telemetry_path: config.web_telemetry_path.clone(),
        max_concurrent_scrapes: config.max_concurrent_scrapes,
        read_timeout: config.web_read_timeout.clone(),
        write_timeout: config.web_write_timeout().to_string(),
        default_write_timeout: config.default_web_write_timeout(),
        pprof: config.enable_pprof,
        openmetrics: config.web_enable_openmetrics,
    }))
}

/// The OTLP push from its flags and `env` (the process environment).
fn otlp_settings(
    config: &cli::Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<crate::config::otlp::Settings>, Error> {
    Ok(crate::config::otlp::settings(
        &crate::config::otlp::Flags {
            endpoint: &config.otlp_endpoint,
            protocol: &config.otlp_protocol,
            metric_names: &config.otlp_metric_names,
            queue_size: config.otlp_queue_size,
        },
        env,
    )?)
}

fn attribution_settings(
    config: &cli::Config,
    interval: Duration,
) -> Result<AttributionSettings, Error> {
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
    let options = attribution::Options {
        kubernetes: config.kubernetes,
        kubelet_socket: config.pod_resources_kubelet_socket.clone(),
        id_type: attribution::IdType::parse(&config.kubernetes_gpu_id_type)?,
        resource_names: config.nvidia_resource_names.clone(),
        virtual_gpus: config.kubernetes_virtual_gpus,
        old_names: config.use_old_namespace,
        pod_uid: config.kubernetes_enable_pod_uid,
        pod_labels: config.kubernetes_enable_pod_labels,
        dra: config.kubernetes && config.kubernetes_enable_dra,
        hpc_dir: (!config.hpc_job_mapping_dir.is_empty())
            .then(|| config.hpc_job_mapping_dir.clone().into()),
        // dcgm-exporter's per-call timeout.
        kubelet_deadline: Duration::from_secs(10),
        // The collection waits this long at most; a later answer serves the next one.
        kubelet_wait: (interval / 2).clamp(Duration::from_millis(200), Duration::from_secs(5)),
        nvml_wait: (interval / 4).clamp(Duration::from_millis(100), Duration::from_secs(2)),
        proc_root: config.proc_root.clone(),
        usage: usage_settings(config)?,
    };
    let label = if config.use_old_namespace {
        "container_name"
    } else {
        "container"
    };
    Ok(AttributionSettings {
        options,
        nvml: config.kubernetes || config.container_labels || config.usage_accounting,
        container: config
            .container_labels
            .then(|| (config.container_runtime_socket.clone(), label)),
        pod_label_allowlist: config.kubernetes_pod_label_allowlist_regex.clone(),
        ignored_without_k: if config.kubernetes {
            Vec::new()
        } else {
            only_with_k
                .iter()
                .filter(|(set, _)| *set)
                .map(|(_, flag)| *flag)
                .collect()
        },
        socket_without_labels: !config.container_labels
            && !config.container_runtime_socket.is_empty(),
    })
}

/// `--usage-accounting` and its flags (checked whether it is on or not: a bad value is an
/// error either way). It needs consumers: pods, containers or HPC jobs.
fn usage_settings(config: &cli::Config) -> Result<Option<attribution::usage::Settings>, Error> {
    let window = crate::config::duration::parse(&config.usage_idle_window).map_err(|why| {
        Error::Duration {
            flag: "--usage-idle-window",
            why,
        }
    })?;
    if window.is_zero() {
        return Err(Error::ZeroIdleWindow(config.usage_idle_window.clone()));
    }
    let max = usize::try_from(config.usage_max_consumers_per_gpu)
        .ok()
        .filter(|n| *n > 0)
        .ok_or(Error::MaxConsumers(config.usage_max_consumers_per_gpu))?;
    if !config.usage_accounting {
        return Ok(None);
    }
    if !config.kubernetes && !config.container_labels && config.hpc_job_mapping_dir.is_empty() {
        return Err(Error::NoConsumers);
    }
    Ok(Some(attribution::usage::Settings {
        idle_window: window,
        max_consumers_per_gpu: max,
    }))
}

/// dcgmWatchFields' (maxKeepAge seconds, maxKeepSamples) from --watch-max-keep-age and
/// --watch-max-keep-samples, and whether either was given (flag or environment; then every
/// watch keeps that, else each keeps what it reads). `0s` means no age limit, which DCGM
/// accepts only together with a sample limit.
fn keep_limits(config: &cli::Config) -> Result<(f64, i32, bool), Error> {
    let age = crate::config::duration::parse(&config.watch_max_keep_age).map_err(|why| {
        Error::Duration {
            flag: "--watch-max-keep-age",
            why,
        }
    })?;
    let samples = i32::try_from(config.watch_max_keep_samples)
        .ok()
        .filter(|n| *n >= 0)
        .ok_or(Error::KeepSamples(config.watch_max_keep_samples))?;
    if age.is_zero() && samples == 0 {
        return Err(Error::KeepForever);
    }
    let explicit = config.is_set("watch-max-keep-age") || config.is_set("watch-max-keep-samples");
    Ok((age.as_secs_f64(), samples, explicit))
}

/// A duration flag in milliseconds. DCGM takes durations in microseconds as an i64, so a
/// value that overflows that is refused here rather than wrapped.
pub(super) fn millis(flag: &str, ms: i64, zero_ok: bool) -> Result<u64, Error> {
    let flag = flag.to_string();
    match ms {
        m if m <= 0 && !zero_ok => Err(Error::NotPositive { flag, ms }),
        m if m < 0 => Err(Error::Negative { flag, ms }),
        m if m > MAX_MS => Err(Error::TooLarge { flag, ms }),
        m => Ok(m as u64),
    }
}

#[cfg(test)]
mod tests;
