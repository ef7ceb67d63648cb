//! Command line and environment: every dcgm-exporter flag with the same long name, short
//! alias, environment variable and default, plus Go-flag spellings (`-collectors x`,
//! `--f=x`, `-rbmn`, `--debug=false`) rewritten by [`normalize_args`] before clap sees them.

use crate::config::emulate::UpstreamVersion;
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches, Parser};
use std::ffi::OsString;
use std::path::PathBuf;

/// `--backend`: where GPU values come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// DCGM only (libdcgm must load).
    Dcgm,
    /// NVML only: libdcgm is never loaded.
    Nvml,
    /// DCGM when libdcgm loads, else NVML.
    Auto,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Dcgm => "dcgm",
            Backend::Nvml => "nvml",
            Backend::Auto => "auto",
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Backend, String> {
        match s {
            "dcgm" => Ok(Backend::Dcgm),
            "nvml" => Ok(Backend::Nvml),
            "auto" => Ok(Backend::Auto),
            _ => Err(format!("{s:?} is not a backend: dcgm, nvml or auto")),
        }
    }
}

/// Go's strconv.ParseBool spellings.
fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        o => Err(format!(
            "'{o}' is not a boolean (use true or false, as --flag=false)"
        )),
    }
}

/// Go's flag package parses ints with strconv.ParseInt(s, 0, 64): an optional sign, then
/// decimal, `0x` hex, `0o` or leading-`0` octal, or `0b` binary.
fn parse_go_int(s: &str) -> Result<i64, String> {
    let bad = || format!("'{s}' is not an integer");
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = rest.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    // from_str_radix would accept a second sign.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(bad());
    }
    let magnitude = i128::from_str_radix(digits, radix).map_err(|_| bad())?;
    i64::try_from(if neg { -magnitude } else { magnitude })
        .map_err(|_| format!("'{s}' is out of range for a 64-bit integer"))
}

const LOG_LEVELS: [&str; 7] = ["NONE", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "VERB"];

const VERSION: &str = concat!(
    "version ",
    env!("CARGO_PKG_VERSION"),
    " (Rust; DCGM API 4.6)"
);

macro_rules! go_int {
    () => {
        clap::builder::ValueParser::new(parse_go_int)
    };
}

// Every `bool` field is a Go bool flag, declared once by `go_bool_flag` (see there).
#[derive(Parser, Debug, Clone)]
#[command(
    name = "dcgm-exporter",
    display_name = "DCGM Exporter",
    version = VERSION,
    about = "Exports NVIDIA DCGM GPU metrics for Prometheus (a drop-in replacement for NVIDIA's dcgm-exporter)",
    after_help = "Flags also take Go spellings: -name or --name, -name=value or -name value; \
                  bools are turned off with --name=false.",
    disable_version_flag = true,
    args_override_self = true
)]
pub struct Config {
    /// Counters CSV: the DCGM fields to export (`<field>, <type>, <help>` per line).
    #[arg(
        short = 'f',
        long,
        env = "DCGM_EXPORTER_COLLECTORS",
        value_name = "PATH",
        default_value = "/etc/dcgm-exporter/default-counters.csv"
    )]
    pub collectors: PathBuf,
    /// Address to listen on: `:9400`, `host:port`, `[::1]:9400`; `""` turns HTTP off (with
    /// --textfile-directory).
    #[arg(
        short = 'a',
        long,
        env = "DCGM_EXPORTER_LISTEN",
        value_name = "ADDR",
        default_value = ":9400"
    )]
    pub address: String,
    /// DCGM sampling interval in milliseconds.
    #[arg(short = 'c', long, env = "DCGM_EXPORTER_INTERVAL", value_name = "MS", default_value = "30000", value_parser = go_int!())]
    pub collect_interval: i64,
    /// Map GPUs to Kubernetes pods through the kubelet PodResources API.
    #[arg(short = 'k', long, env = "DCGM_EXPORTER_KUBERNETES")]
    pub kubernetes: bool,
    /// Use the 1.x label names (`uuid`, `pod_name`, ...).
    #[arg(short = 'o', long, env = "DCGM_EXPORTER_USE_OLD_NAMESPACE")]
    pub use_old_namespace: bool,
    /// CPUs and cores to monitor: f (all), g[:ids], i[:ids], g[:ids]+i[:ids]; ids like 0,2-4.
    #[arg(
        short = 'p',
        long,
        env = "DCGM_EXPORTER_CPU_DEVICES_STR",
        value_name = "SELECTOR",
        default_value = "f"
    )]
    pub cpu_devices: String,
    /// ConfigMap holding the counters (key `metrics`), as <namespace>:<name>; read through the
    /// Kubernetes API instead of -f and watched: a change reloads the counters.
    #[arg(
        short = 'm',
        long,
        env = "DCGM_EXPORTER_CONFIGMAP_DATA",
        value_name = "NS:NAME",
        default_value = "none"
    )]
    pub configmap_data: String,
    /// Use this nv-hostengine instead of an embedded one: host:port, [v6]:port, tcp://...,
    /// unix:///path, vsock://CID:PORT; a comma-separated list for several host engines (each
    /// series then labelled `engine`). Setting the env var alone also selects remote mode.
    #[arg(
        short = 'r',
        long,
        env = "DCGM_REMOTE_HOSTENGINE_INFO",
        value_name = "ADDR",
        default_value = "localhost:5555"
    )]
    pub remote_hostengine_info: String,
    /// With -k: add the labels of the pod using a GPU (read from the Kubernetes API).
    #[arg(long, env = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS")]
    pub kubernetes_enable_pod_labels: bool,
    /// With -k: add a pod_uid label (read from the Kubernetes API).
    #[arg(long, env = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID")]
    pub kubernetes_enable_pod_uid: bool,
    /// How kubelet device ids are matched to GPUs: uid or device-name (with --kubernetes).
    #[arg(long, env = "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", value_name = "TYPE", default_value = "uid", value_parser = ["uid", "device-name"])]
    pub kubernetes_gpu_id_type: String,
    /// Regexes of pod label names to keep (unanchored, any may match), comma-separated.
    #[arg(
        long,
        env = "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
        value_name = "REGEX",
        value_delimiter = ','
    )]
    pub kubernetes_pod_label_allowlist_regex: Vec<String>,
    /// GPUs to monitor: f (flex: MIG GPUs as their instances, others whole), g[:ids] (whole
    /// GPUs), i[:ids] (GPU instances), g[:ids]+i[:ids]; ids like 0,2-4.
    #[arg(
        short = 'd',
        long,
        env = "DCGM_EXPORTER_DEVICES_STR",
        value_name = "SELECTOR",
        default_value = "f"
    )]
    pub devices: String,
    /// Do not add the Hostname label.
    #[arg(short = 'n', long, env = "DCGM_EXPORTER_NO_HOSTNAME")]
    pub no_hostname: bool,
    /// NvSwitches and NvLinks to monitor: f (all), g[:ids] (switches), i[:ids] (links),
    /// g[:ids]+i[:ids].
    #[arg(
        short = 's',
        long,
        env = "DCGM_EXPORTER_OTHER_DEVICES_STR",
        value_name = "SELECTOR",
        default_value = "f"
    )]
    pub switch_devices: String,
    /// Use a stub GPU (UUID fake<N>) for a GPU whose device attributes cannot be read.
    #[arg(long, env = "DCGM_EXPORTER_USE_FAKE_GPUS")]
    pub fake_gpus: bool,
    /// exporter-toolkit web config (YAML): TLS, client certificates, basic auth, headers.
    #[arg(
        long,
        env = "DCGM_EXPORTER_WEB_CONFIG_FILE",
        value_name = "PATH",
        default_value = ""
    )]
    pub web_config_file: String,
    /// Listen on the sockets systemd passes (socket activation) instead of -a.
    #[arg(long, env = "DCGM_EXPORTER_SYSTEMD_SOCKET")]
    pub web_systemd_socket: bool,
    /// Window of DCGM_EXP_XID_ERRORS_COUNT, in milliseconds.
    #[arg(short = 'x', long, env = "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE", value_name = "MS", default_value = "300000", value_parser = go_int!())]
    pub xid_count_window_size: i64,
    /// Replace runs of blanks in the modelName label with '-' (short: -rbmn).
    #[arg(long, env = "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME")]
    pub replace_blanks_in_model_name: bool,
    /// Log at debug level (ours; the HTTP libraries stay at info).
    #[arg(long, env = "DCGM_EXPORTER_DEBUG")]
    pub debug: bool,
    /// Window of DCGM_EXP_CLOCK_EVENTS_COUNT, in milliseconds.
    #[arg(long, env = "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE", value_name = "MS", default_value = "300000", value_parser = go_int!())]
    pub clock_events_count_window_size: i64,
    /// Send the embedded host engine's log to stdout (embedded mode only).
    #[arg(long, env = "DCGM_EXPORTER_ENABLE_DCGM_LOG")]
    pub enable_dcgm_log: bool,
    /// Log level of the embedded host engine (with --enable-dcgm-log).
    #[arg(long, env = "DCGM_EXPORTER_DCGM_LOG_LEVEL", value_name = "LEVEL", default_value = "NONE", value_parser = LOG_LEVELS)]
    pub dcgm_log_level: String,
    /// Log format on stderr: logrus-style text, or one JSON object per line.
    #[arg(long, env = "DCGM_EXPORTER_LOG_FORMAT", value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// kubelet PodResources socket (with --kubernetes).
    #[arg(
        long,
        env = "DCGM_POD_RESOURCES_KUBELET_SOCKET",
        value_name = "PATH",
        default_value = "/var/lib/kubelet/pod-resources/kubelet.sock"
    )]
    pub pod_resources_kubelet_socket: PathBuf,
    /// Directory of HPC job mapping files (`<gpu>` or `<gpu>.<gi>`, one job id a line).
    #[arg(
        long,
        env = "DCGM_HPC_JOB_MAPPING_DIR",
        value_name = "DIR",
        default_value = ""
    )]
    pub hpc_job_mapping_dir: String,
    /// Extra Kubernetes resource names that are GPUs, comma-separated (with --kubernetes).
    #[arg(
        long,
        env = "NVIDIA_RESOURCE_NAMES",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub nvidia_resource_names: Vec<String>,
    /// Shared GPUs: one series per sharing pod, with a vgpu label (with --kubernetes).
    #[arg(long, env = "KUBERNETES_VIRTUAL_GPUS")]
    pub kubernetes_virtual_gpus: bool,
    /// Write JSON debug dumps (series and device info) after every collection.
    #[arg(long, env = "DCGM_EXPORTER_DUMP_ENABLED")]
    pub dump_enabled: bool,
    /// Directory of debug dumps.
    #[arg(
        long,
        env = "DCGM_EXPORTER_DUMP_DIRECTORY",
        value_name = "DIR",
        default_value = "/tmp/dcgm-exporter-debug"
    )]
    pub dump_directory: PathBuf,
    /// Hours to keep debug dumps (checked at start and hourly; 0 keeps them).
    #[arg(long, env = "DCGM_EXPORTER_DUMP_RETENTION", value_name = "HOURS", default_value = "24", value_parser = go_int!())]
    pub dump_retention: i64,
    /// Gzip debug dumps (`.json.gz`).
    #[arg(long, env = "DCGM_EXPORTER_DUMP_COMPRESSION", default_value = "true")]
    pub dump_compression: bool,
    /// With -k, copy a GPU's series per DRA claim on it (dra_* labels), through the kubelet and the gpu.nvidia.com ResourceSlices.
    #[arg(long, env = "KUBERNETES_ENABLE_DRA")]
    pub kubernetes_enable_dra: bool,
    /// Skip the startup check for libdcgm.so.4 (accepted; loading the library checks it).
    #[arg(long, env = "DISABLE_STARTUP_VALIDATE")]
    pub disable_startup_validate: bool,
    /// Rebuild topology and watches on GPU bind/unbind events (DCGM_FI_BIND_UNBIND_EVENT).
    #[arg(long, env = "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH")]
    pub enable_gpu_bind_unbind_watch: bool,
    /// Poll interval of the bind/unbind watch (Go duration).
    #[arg(
        long,
        env = "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL",
        value_name = "DURATION",
        default_value = "1s"
    )]
    pub gpu_bind_unbind_poll_interval: String,
    /// Serve a CPU profile at /debug/pprof/profile (needs --web-config-file).
    #[arg(long, env = "DCGM_EXPORTER_ENABLE_PPROF")]
    pub enable_pprof: bool,
    /// YAML configuration (version 1: metrics, collection interval, watch groups); flags and
    /// env vars given explicitly win over it.
    #[arg(
        long,
        env = "DCGM_EXPORTER_CONFIG_FILE",
        value_name = "PATH",
        default_value = ""
    )]
    pub config_file: String,
    /// HTTP read timeout (Go duration): slow requests and idle keep-alive connections.
    #[arg(
        long,
        env = "DCGM_EXPORTER_WEB_READ_TIMEOUT",
        value_name = "DURATION",
        default_value = "10s"
    )]
    pub web_read_timeout: String,
    /// HTTP write timeout (Go duration): a response the client does not read (10s with
    /// --emulate-version=4.8.2).
    #[arg(
        long,
        env = "DCGM_EXPORTER_WEB_WRITE_TIMEOUT",
        value_name = "DURATION",
        default_value = "30s"
    )]
    pub web_write_timeout: String,
    /// Scrapes served at once; excess requests get 503.
    #[arg(long, env = "DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES", value_name = "N", default_value = "16", value_parser = go_int!())]
    pub max_concurrent_scrapes: i64,
    /// Path of the metrics endpoint (the Pod GPU Metrics Exporter served /gpu/metrics).
    #[arg(
        long,
        env = "DCGM_EXPORTER_WEB_TELEMETRY_PATH",
        value_name = "PATH",
        default_value = "/metrics"
    )]
    pub web_telemetry_path: String,
    /// Answer in OpenMetrics 1.0 when the scrape's Accept header prefers it. Counters then
    /// carry the `_total` suffix OpenMetrics requires, which renames them in Prometheus.
    #[arg(long, env = "DCGM_EXPORTER_WEB_ENABLE_OPENMETRICS")]
    pub web_enable_openmetrics: bool,
    /// Outside Kubernetes: a `container` label on GPUs explicitly assigned to a Docker or
    /// podman container, from the runtime's API.
    #[arg(long, env = "DCGM_EXPORTER_CONTAINER_LABELS")]
    pub container_labels: bool,
    /// Container runtime API socket for --container-labels (default: /var/run/docker.sock,
    /// else /run/podman/podman.sock, whichever exists).
    #[arg(
        long,
        env = "DCGM_CONTAINER_RUNTIME_SOCKET",
        value_name = "PATH",
        default_value = ""
    )]
    pub container_runtime_socket: String,
    /// Per-consumer GPU accounting: energy counters, utilisation shares and allocated-but-idle
    /// gauges per pod (-k), container (--container-labels) or HPC job (--hpc-job-mapping-dir).
    #[arg(long, env = "DCGM_EXPORTER_USAGE_ACCOUNTING")]
    pub usage_accounting: bool,
    /// How long a consumer must hold a device with no utilisation and no memory in use before
    /// DCGM_EXP_ALLOCATED_IDLE is 1 (Go duration).
    #[arg(
        long,
        env = "DCGM_EXPORTER_USAGE_IDLE_WINDOW",
        value_name = "DURATION",
        default_value = "10m"
    )]
    pub usage_idle_window: String,
    /// Consumers with usage series per GPU (all its MIG instances together); the rest are
    /// counted in dcgm_exporter_usage_consumers_dropped_total.
    #[arg(long, env = "DCGM_EXPORTER_USAGE_MAX_CONSUMERS_PER_GPU", value_name = "N", default_value = "64", value_parser = go_int!())]
    pub usage_max_consumers_per_gpu: i64,
    /// Where the host's /proc is mounted (a container may see it at /host/proc): processes
    /// are mapped to pods, containers and jobs through <proc-root>/<pid>/cgroup.
    #[arg(
        long,
        env = "DCGM_EXPORTER_PROC_ROOT",
        value_name = "DIR",
        default_value = "/proc"
    )]
    pub proc_root: PathBuf,
    /// Load this libdcgm instead of searching for libdcgm.so.4.
    #[arg(long, env = "DCGM_EXPORTER_DCGM_LIBRARY", value_name = "PATH")]
    pub dcgm_library: Option<PathBuf>,
    /// Where GPU values come from: dcgm, nvml (the driver's NVML alone: the core GPU
    /// series under DCGM's names, libdcgm never loaded) or auto (DCGM when libdcgm loads,
    /// else NVML).
    #[arg(
        long,
        env = "DCGM_EXPORTER_BACKEND",
        value_name = "BACKEND",
        default_value = "auto"
    )]
    pub backend: Backend,
    /// Load this NVML instead of searching for libnvidia-ml.so.1 (the NVML backend, and
    /// pod attribution's MIG and process queries).
    #[arg(long, env = "DCGM_EXPORTER_NVML_LIBRARY", value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,
    /// Print every DCGM field (name, id, type, entity level, unit) and exit.
    #[arg(long)]
    pub list_fields: bool,
    /// Also export MIG compute-instance series (label GPU_CI_ID).
    #[arg(long, env = "DCGM_EXPORTER_COMPUTE_INSTANCES")]
    pub compute_instances: bool,
    /// Also write the page to DIR/dcgm.prom after every collection, for node-exporter's
    /// textfile collector (`-a ""` then turns the HTTP listener off).
    #[arg(
        long,
        env = "DCGM_EXPORTER_TEXTFILE_DIRECTORY",
        value_name = "DIR",
        default_value = ""
    )]
    pub textfile_directory: String,
    /// How long DCGM keeps watched samples (Go duration; 0s: no age limit, with
    /// --watch-max-keep-samples).
    #[arg(
        long,
        env = "DCGM_EXPORTER_WATCH_MAX_KEEP_AGE",
        value_name = "DURATION",
        default_value = "600s"
    )]
    pub watch_max_keep_age: String,
    /// How many samples DCGM keeps per watched field (0: no limit).
    #[arg(long, env = "DCGM_EXPORTER_WATCH_MAX_KEEP_SAMPLES", value_name = "N", default_value = "0", value_parser = go_int!())]
    pub watch_max_keep_samples: i64,
    /// Report /health as unhealthy while no GPU is being collected.
    #[arg(long, env = "DCGM_EXPORTER_HEALTH_REQUIRE_GPUS")]
    pub health_require_gpus: bool,
    /// Exit at start when the remote host engine (-r) cannot be reached, as dcgm-exporter
    /// does (also under --backend auto); by default the exporter serves /health 503 and
    /// retries with backoff, and under --backend auto with NVML loaded NVML serves meanwhile.
    #[arg(long, env = "DCGM_EXPORTER_EXIT_IF_HOSTENGINE_UNREACHABLE")]
    pub exit_if_hostengine_unreachable: bool,
    /// Also export the exporter's process and HTTP handler metrics.
    #[arg(long, env = "DCGM_EXPORTER_ENABLE_EXPORTER_METRICS")]
    pub enable_exporter_metrics: bool,
    /// Low-cardinality output: one DCGM_EXP_*_INFO series per GPU, MIG instance, NVSwitch
    /// and CPU carries the static labels (UUID, PCI bus id, model, device, MIG profile,
    /// label fields), which every other series drops.
    #[arg(long, env = "DCGM_EXPORTER_LOW_CARDINALITY")]
    pub low_cardinality: bool,
    /// The dcgm-exporter release to emulate: 4.8.4, 4.8.2, 4.9.0 or 4.10.0 (label names,
    /// metric names, types and help, default counters, config-file schemas, timeouts).
    #[arg(long, env = "DCGM_EXPORTER_EMULATE_VERSION", value_name = "VERSION", default_value = "4.8.4", value_parser = clap::builder::ValueParser::new(str::parse::<UpstreamVersion>))]
    pub emulate_version: UpstreamVersion,
    /// Push every collection as OTLP metrics to this URL (http:// or https://; unset:
    /// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, then OTEL_EXPORTER_OTLP_ENDPOINT; docs/otlp.md).
    #[arg(
        long,
        env = "DCGM_EXPORTER_OTLP_ENDPOINT",
        value_name = "URL",
        default_value = ""
    )]
    pub otlp_endpoint: String,
    /// OTLP transport, grpc or http/protobuf (unset: OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
    /// then OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf).
    #[arg(
        long,
        env = "DCGM_EXPORTER_OTLP_PROTOCOL",
        value_name = "PROTOCOL",
        default_value = ""
    )]
    pub otlp_protocol: String,
    /// Names of pushed metrics: dcgm (those of /metrics) or semconv (OpenTelemetry's
    /// hardware semantic conventions, hw.*, where a mapping exists).
    #[arg(
        long,
        env = "DCGM_EXPORTER_OTLP_METRIC_NAMES",
        value_name = "NAMES",
        default_value = "dcgm"
    )]
    pub otlp_metric_names: String,
    /// Pushes kept while the OTLP receiver is down or slow; past this the oldest is dropped.
    #[arg(long, env = "DCGM_EXPORTER_OTLP_QUEUE_SIZE", value_name = "N", default_value = "16", value_parser = go_int!())]
    pub otlp_queue_size: i64,
    /// Events the event history (/events, OTLP logs) keeps; past this the oldest is dropped
    /// and counted; 0 keeps no history.
    #[arg(long, env = "DCGM_EXPORTER_EVENTS_MAX_COUNT", value_name = "N", default_value = "10000", value_parser = go_int!())]
    pub events_max_count: i64,
    /// Bytes the event history may take (at least 16384); past this the oldest events are
    /// dropped and counted.
    #[arg(long, env = "DCGM_EXPORTER_EVENTS_MAX_BYTES", value_name = "BYTES", default_value = "4194304", value_parser = go_int!())]
    pub events_max_bytes: i64,
    /// DCGM modules the embedded host engine is started without, comma-separated names or
    /// ids (profiling or 8, health, policy, ...): with profiling denied, GPUs before Hopper
    /// lose their DCGM_FI_PROF_* rows and the exporter the profiling module's memory;
    /// Hopper and newer keep them (DCGM reads them through NVML's GPM).
    #[arg(
        long,
        env = "DCGM_EXPORTER_DCGM_DENYLIST_MODULES",
        value_name = "MODULES",
        default_value = ""
    )]
    pub dcgm_denylist_modules: String,
    /// Collections in a row a busy GPU (DCGM_FI_DEV_GPU_UTIL >= 50 %) may read 0 or fail in
    /// every profiling field before its profiling watches are re-armed (NVIDIA/DCGM#303);
    /// 0 turns this off.
    #[arg(long, env = "DCGM_EXPORTER_PROFILING_REARM_AFTER", value_name = "N", default_value = "3", value_parser = go_int!())]
    pub profiling_rearm_after: i64,
    /// In embedded mode, when three re-arms did not help, the embedded host engine is
    /// restarted, at most once per this period (Go duration; 0: never).
    #[arg(
        long,
        env = "DCGM_EXPORTER_PROFILING_RESTART_PERIOD",
        value_name = "DURATION",
        default_value = "1h"
    )]
    pub profiling_restart_period: String,
    /// Sub-interval aggregation: these DCGM fields (comma-separated names, globs or ids) are
    /// sampled every --aggregate-period, and each collection also exports the min, max and
    /// mean of their samples since the previous one and the sample count
    /// (<NAME>_interval_min, _interval_max, _interval_mean, _interval_samples).
    #[arg(
        long,
        env = "DCGM_EXPORTER_AGGREGATE",
        value_name = "FIELDS",
        default_value = ""
    )]
    pub aggregate: String,
    /// How often DCGM samples an --aggregate field (Go duration, at least 100ms and below
    /// the collection interval).
    #[arg(
        long,
        env = "DCGM_EXPORTER_AGGREGATE_PERIOD",
        value_name = "DURATION",
        default_value = "1s"
    )]
    pub aggregate_period: String,
    /// Print the version and exit.
    #[arg(short = 'v', long, action = ArgAction::Version)]
    version: Option<bool>,

    /// Whether -r/--remote-hostengine-info or its env var was given (Go's IsSet).
    #[arg(skip)]
    remote_set: bool,
    /// Long names of the options given on the command line or in the environment (these
    /// win over --config-file).
    #[arg(skip)]
    explicit: Vec<String>,
    /// Whether -f/--collectors or its env var was given (else the default path is used).
    #[arg(skip)]
    pub collectors_set: bool,
    /// Long names of the options --config-file set.
    #[arg(skip)]
    from_file: Vec<String>,
}

/// Go's bool flags, for every `bool` field (clap derives those as `SetTrue`): `--flag` is
/// true, `--flag=<ParseBool>` sets either way, and `require_equals` keeps a bool from
/// eating the next argument, as Go's flag package does (`-n false` is not
/// `--no-hostname=false` there). A field's own `default_value` stays (`true` for
/// --dump-compression); otherwise the default is false.
fn go_bool_flag(a: clap::Arg) -> clap::Arg {
    if !matches!(a.get_action(), ArgAction::SetTrue) {
        return a;
    }
    let a = if a.get_default_values().is_empty() {
        a.default_value("false")
    } else {
        a
    };
    a.action(ArgAction::Set)
        .num_args(0..=1)
        .require_equals(true)
        .default_missing_value("true")
        .value_name("BOOL")
        .value_parser(clap::builder::ValueParser::new(parse_go_bool))
}

/// The flags as declared: the derived command with Go's bool flags.
fn declared() -> clap::Command {
    Config::command().mut_args(go_bool_flag)
}

/// The clap command, with environment variables that are set but empty treated as unset
/// (urfave/cli skips empty values for bools and ints; a blank string means nothing either).
fn command() -> clap::Command {
    let mut cmd = declared();
    let empty: Vec<clap::Id> = cmd
        .get_arguments()
        .filter(|a| {
            a.get_env()
                .and_then(std::env::var_os)
                .is_some_and(|v| v.is_empty())
        })
        .map(|a| a.get_id().clone())
        .collect();
    for id in empty {
        cmd = cmd.mut_arg(id, |a| a.env(None::<&'static str>));
    }
    cmd
}

/// Rewrites Go-flag spellings into `--long` / `--long=value`, which is all clap then sees:
/// one or two dashes before any name, `-rbmn`, `--f=x`. A flag that takes a value takes
/// the next argument whatever it looks like (`-a -x` listens on "-x"), and a bool never
/// takes the next argument, both as in Go. Unknown flags are left for clap to report.
pub fn normalize_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    // Long name -> (long name, whether it needs a value), also under each short letter;
    // built once, as building the clap command is the slow part of a parse.
    static FLAGS: std::sync::OnceLock<std::collections::HashMap<String, (String, bool)>> =
        std::sync::OnceLock::new();
    let flags = FLAGS.get_or_init(|| {
        let mut cmd = declared();
        cmd.build();
        let mut m = std::collections::HashMap::new();
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let optional = arg.get_num_args().is_some_and(|r| r.min_values() == 0);
            let entry = (
                long.to_string(),
                arg.get_action().takes_values() && !optional,
            );
            if let Some(c) = arg.get_short() {
                m.insert(c.to_string(), entry.clone());
            }
            m.insert(long.to_string(), entry);
        }
        m
    });
    let lookup = |name: &str| -> Option<(String, bool)> {
        let name = if name == "rbmn" {
            "replace-blanks-in-model-name"
        } else {
            name
        };
        flags.get(name).cloned()
    };

    let mut out = Vec::new();
    let mut args = args.into_iter();
    out.extend(args.next()); // the program name
    while let Some(arg) = args.next() {
        let Some(s) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if s == "--" {
            out.push(arg);
            out.extend(args);
            break;
        }
        let body = s
            .strip_prefix("--")
            .or_else(|| s.strip_prefix('-'))
            .filter(|b| !b.is_empty() && !b.starts_with(['-', '=']));
        let Some(body) = body else {
            out.push(arg);
            continue;
        };
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        let Some((long, needs_value)) = lookup(name) else {
            out.push(arg);
            continue;
        };
        let mut flag = OsString::from(format!("--{long}"));
        match value {
            Some(v) => {
                flag.push("=");
                flag.push(v);
            }
            None if needs_value => {
                if let Some(next) = args.next() {
                    flag.push("=");
                    flag.push(next);
                }
            }
            None => {}
        }
        out.push(flag);
    }
    out
}

fn matches_from<I, T>(args: I) -> Result<ArgMatches, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    command().try_get_matches_from(normalize_args(args.into_iter().map(Into::into)))
}

/// A flag value that does not parse, as the one-line start-up error every other bad value
/// gets (`-c abc: 'abc' is not a valid integer`, like `-c 0: ...`): main logs it at fatal
/// and exits 1, as dcgm-exporter does for any bad value. `None` for other clap errors
/// (an unknown flag, --help), which keep clap's usage text.
pub fn value_error(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation | ErrorKind::InvalidUtf8
    ) {
        return None;
    }
    let text = |k| match e.get(k) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    // "--collect-interval <MS>", "--collect-interval=<MS>", "--no-hostname[=<BOOL>]".
    let arg = text(ContextKind::InvalidArg)?;
    let long = arg
        .trim_start_matches('-')
        .split([' ', '=', '['])
        .next()
        .unwrap_or_default()
        .to_string();
    let short = declared()
        .get_arguments()
        .find(|a| a.get_long() == Some(long.as_str()))
        .and_then(|a| a.get_short());
    let flag = match short {
        Some(c) => format!("-{c}/--{long}"),
        None => format!("--{long}"),
    };
    let value = text(ContextKind::InvalidValue).unwrap_or_default();
    let why = match (e.kind(), e.get(ContextKind::ValidValue)) {
        (ErrorKind::InvalidValue, Some(ContextValue::Strings(valid))) if value.is_empty() => {
            format!("a value is required (one of {})", valid.join(", "))
        }
        (ErrorKind::InvalidValue, Some(ContextValue::Strings(valid))) => {
            format!("expected one of {}", valid.join(", "))
        }
        (ErrorKind::InvalidValue, _) => "a value is required".to_string(),
        (ErrorKind::InvalidUtf8, _) => "not valid UTF-8".to_string(),
        _ => std::error::Error::source(e)
            .map(|s| s.to_string())
            .unwrap_or_else(|| "invalid value".to_string()),
    };
    Some(if value.is_empty() {
        format!("{flag}: {why}")
    } else {
        format!("{flag} {value}: {why}")
    })
}

/// Normalises, then parses with clap (which also reads the environment). `--help` and
/// `--version` come back as errors whose `exit_code()` is 0 and whose `print()` writes
/// to stdout.
pub fn parse_from<I, T>(args: I) -> Result<Config, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let matches = matches_from(args)?;
    let mut config = Config::from_arg_matches(&matches)?;
    config.remote_set = matches!(
        matches.value_source("remote_hostengine_info"),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    );
    config.explicit = declared()
        .get_arguments()
        .filter(|a| {
            matches!(
                matches.value_source(a.get_id().as_str()),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        })
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    config.collectors_set = config.is_explicit("collectors");
    Ok(config)
}

/// A flag whose value is refused once parsed: the flag and why.
#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    /// dcgm-sys's words for a module name or id it does not know.
    #[error("--dcgm-denylist-modules: {0}")]
    DenylistModule(String),
    #[error("--dcgm-denylist-modules: the core module cannot be denied")]
    DenyCore,
    #[error("--events-max-count: {0} is not 0 to 10000000 events")]
    EventsMaxCount(i64),
    #[error("--events-max-bytes: {0} is not 16384 to 1073741824 bytes")]
    EventsMaxBytes(i64),
    #[error("--profiling-rearm-after: {0} is not 0 to 1000 collections")]
    RearmAfter(i64),
    #[error("--profiling-restart-period: {0}")]
    RestartPeriod(#[source] crate::config::duration::Error),
}

impl Config {
    /// `--dcgm-denylist-modules`: the modules, each once.
    pub(crate) fn dcgm_denylist(&self) -> Result<Vec<dcgm_sys::Module>, FlagError> {
        let mut out = Vec::new();
        for word in self.dcgm_denylist_modules.split(',').map(str::trim) {
            if word.is_empty() {
                continue;
            }
            let m = dcgm_sys::Module::parse(word).map_err(FlagError::DenylistModule)?;
            if m == dcgm_sys::Module::Core {
                return Err(FlagError::DenyCore);
            }
            if !out.contains(&m) {
                out.push(m);
            }
        }
        Ok(out)
    }

    /// `--events-max-count` and `--events-max-bytes`, checked: (events, bytes).
    pub(crate) fn events_bounds(&self) -> Result<(usize, usize), FlagError> {
        let count = usize::try_from(self.events_max_count)
            .ok()
            .filter(|n| *n <= 10_000_000)
            .ok_or(FlagError::EventsMaxCount(self.events_max_count))?;
        let bytes = usize::try_from(self.events_max_bytes)
            .ok()
            .filter(|n| (16 << 10..=1 << 30).contains(n))
            .ok_or(FlagError::EventsMaxBytes(self.events_max_bytes))?;
        Ok((count, bytes))
    }

    /// `--profiling-rearm-after` and `--profiling-restart-period`.
    pub(crate) fn profiling_healing(&self) -> Result<(u32, std::time::Duration), FlagError> {
        let n = u32::try_from(self.profiling_rearm_after)
            .ok()
            .filter(|n| *n <= 1000)
            .ok_or(FlagError::RearmAfter(self.profiling_rearm_after))?;
        let period = crate::config::duration::parse(&self.profiling_restart_period)
            .map_err(FlagError::RestartPeriod)?;
        Ok((n, period))
    }

    /// The remote host engine, when -r or DCGM_REMOTE_HOSTENGINE_INFO selects remote mode.
    /// Whether `--<long>` was given on the command line or through its env var.
    pub(crate) fn is_explicit(&self, long: &str) -> bool {
        self.explicit.iter().any(|l| l == long)
    }

    /// Records that --config-file set `--<long>` (it applies only where `is_explicit` is
    /// false).
    pub(crate) fn set_by_file(&mut self, long: &str) {
        self.from_file.push(long.to_string());
    }

    /// Whether `--<long>` was set by the user: flag, env var or configuration file.
    pub(crate) fn is_set(&self, long: &str) -> bool {
        self.is_explicit(long) || self.from_file.iter().any(|l| l == long)
    }

    /// The write timeout's default: 30 s from upstream 4.8.3, the fixed 10 s of 4.8.2.
    pub(crate) fn default_web_write_timeout(&self) -> std::time::Duration {
        if self.emulate_version.at_least_4_8_3() {
            std::time::Duration::from_secs(30)
        } else {
            std::time::Duration::from_secs(10)
        }
    }

    /// `--web-write-timeout` as given, else the emulated release's default.
    pub(crate) fn web_write_timeout(&self) -> &str {
        if self.is_explicit("web-write-timeout") || self.emulate_version.at_least_4_8_3() {
            &self.web_write_timeout
        } else {
            "10s"
        }
    }

    pub(crate) fn remote_hostengine(&self) -> Option<&str> {
        self.remote_set
            .then_some(self.remote_hostengine_info.as_str())
    }
}

#[cfg(test)]
pub(crate) mod tests;
