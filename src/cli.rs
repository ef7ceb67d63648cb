//! Command line and environment: every dcgm-exporter flag with the same long name, short
//! alias, environment variable and default, plus Go-flag spellings normalised before clap
//! sees them (`-collectors x`, `--f=x`, `-rbmn`, `--debug=false`).

use clap::{ArgAction, Parser};
use std::ffi::OsString;
use std::path::PathBuf;

/// Go's strconv.ParseBool spellings.
fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        o => Err(format!("'{o}' is not a boolean (use true or false)")),
    }
}

const LOG_LEVELS: [&str; 7] = ["NONE", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "VERB"];

macro_rules! go_bool {
    () => {
        clap::builder::ValueParser::new(parse_go_bool)
    };
}

#[derive(Parser, Debug, Clone)]
#[command(
    name = "dcgm-exporter",
    about = "Exports NVIDIA DCGM GPU metrics for Prometheus (a drop-in replacement for NVIDIA's dcgm-exporter)",
    disable_version_flag = true
)]
pub struct Config {
    /// Path to the counters CSV listing the DCGM fields to export.
    #[arg(
        short = 'f',
        long,
        env = "DCGM_EXPORTER_COLLECTORS",
        default_value = "/etc/dcgm-exporter/default-counters.csv"
    )]
    pub collectors: PathBuf,
    /// Address to listen on (`:9400`, `host:port`, `[::1]:9400`).
    #[arg(
        short = 'a',
        long,
        env = "DCGM_EXPORTER_LISTEN",
        default_value = ":9400"
    )]
    pub address: String,
    /// Collection interval in milliseconds (also DCGM's sampling interval).
    #[arg(
        short = 'c',
        long,
        env = "DCGM_EXPORTER_INTERVAL",
        default_value_t = 30000,
        allow_negative_numbers = true
    )]
    pub collect_interval: i64,
    /// Map GPUs to Kubernetes pods (not supported yet).
    #[arg(short = 'k', long, env = "DCGM_EXPORTER_KUBERNETES", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub kubernetes: bool,
    /// Use the 1.x label names (`uuid`, `pod_name`, ...).
    #[arg(short = 'o', long, env = "DCGM_EXPORTER_USE_OLD_NAMESPACE", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub use_old_namespace: bool,
    /// CPUs and cores to monitor: f, g[:ids], i[:ids], g[:ids]+i[:ids].
    #[arg(
        short = 'p',
        long,
        env = "DCGM_EXPORTER_CPU_DEVICES_STR",
        default_value = "f"
    )]
    pub cpu_devices: String,
    /// ConfigMap with the counters, as <namespace>:<name> (not supported yet).
    #[arg(
        short = 'm',
        long,
        env = "DCGM_EXPORTER_CONFIGMAP_DATA",
        default_value = "none"
    )]
    pub configmap_data: String,
    /// Connect to a remote nv-hostengine: host:port, [v6]:port, tcp://..., unix:///path.
    #[arg(
        short = 'r',
        long,
        env = "DCGM_REMOTE_HOSTENGINE_INFO",
        default_value = "localhost:5555"
    )]
    pub remote_hostengine_info: String,
    /// Add pod labels to series (not supported yet).
    #[arg(long, env = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub kubernetes_enable_pod_labels: bool,
    /// Add a pod_uid label (not supported yet).
    #[arg(long, env = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub kubernetes_enable_pod_uid: bool,
    /// How kubelet device ids are matched: uid or device-name.
    #[arg(long, env = "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", default_value = "uid", value_parser = ["uid", "device-name"])]
    pub kubernetes_gpu_id_type: String,
    /// Regexes of pod labels to keep (not supported yet).
    #[arg(
        long,
        env = "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
        value_delimiter = ','
    )]
    pub kubernetes_pod_label_allowlist_regex: Vec<String>,
    /// GPUs to monitor: f (flex: MIG instances or whole GPUs), g[:ids], i[:ids], g[:ids]+i[:ids].
    #[arg(
        short = 'd',
        long,
        env = "DCGM_EXPORTER_DEVICES_STR",
        default_value = "f"
    )]
    pub devices: String,
    /// Do not add the Hostname label.
    #[arg(short = 'n', long, env = "DCGM_EXPORTER_NO_HOSTNAME", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub no_hostname: bool,
    /// NvSwitches and NvLinks to monitor: f, g[:ids], i[:ids], g[:ids]+i[:ids].
    #[arg(
        short = 's',
        long,
        env = "DCGM_EXPORTER_OTHER_DEVICES_STR",
        default_value = "f"
    )]
    pub switch_devices: String,
    /// Use fake GPUs when device info fails (not supported yet).
    #[arg(long, env = "DCGM_EXPORTER_USE_FAKE_GPUS", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub fake_gpus: bool,
    /// exporter-toolkit web config for TLS and basic auth (not supported yet).
    #[arg(long, env = "DCGM_EXPORTER_WEB_CONFIG_FILE", default_value = "")]
    pub web_config_file: String,
    /// systemd socket activation (not supported yet).
    #[arg(long, env = "DCGM_EXPORTER_SYSTEMD_SOCKET", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub web_systemd_socket: bool,
    /// Window of DCGM_EXP_XID_ERRORS_COUNT in milliseconds.
    #[arg(
        short = 'x',
        long,
        env = "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",
        default_value_t = 300000,
        allow_negative_numbers = true
    )]
    pub xid_count_window_size: i64,
    /// Replace runs of blanks in the model name with '-'.
    #[arg(long, env = "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub replace_blanks_in_model_name: bool,
    /// Debug logging.
    #[arg(long, env = "DCGM_EXPORTER_DEBUG", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub debug: bool,
    /// Window of DCGM_EXP_CLOCK_EVENTS_COUNT in milliseconds.
    #[arg(
        long,
        env = "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",
        default_value_t = 300000,
        allow_negative_numbers = true
    )]
    pub clock_events_count_window_size: i64,
    /// Send the embedded host engine's log to stdout.
    #[arg(long, env = "DCGM_EXPORTER_ENABLE_DCGM_LOG", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub enable_dcgm_log: bool,
    /// Embedded host engine log level.
    #[arg(long, env = "DCGM_EXPORTER_DCGM_LOG_LEVEL", default_value = "NONE", value_parser = LOG_LEVELS)]
    pub dcgm_log_level: String,
    /// Log format: text or json.
    #[arg(long, env = "DCGM_EXPORTER_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// kubelet pod-resources socket.
    #[arg(
        long,
        env = "DCGM_POD_RESOURCES_KUBELET_SOCKET",
        default_value = "/var/lib/kubelet/pod-resources/kubelet.sock"
    )]
    pub pod_resources_kubelet_socket: PathBuf,
    /// Directory of HPC job mapping files (not supported yet).
    #[arg(long, env = "DCGM_HPC_JOB_MAPPING_DIR", default_value = "")]
    pub hpc_job_mapping_dir: String,
    /// Extra Kubernetes resource names that are GPUs (not supported yet).
    #[arg(long, env = "NVIDIA_RESOURCE_NAMES", value_delimiter = ',')]
    pub nvidia_resource_names: Vec<String>,
    /// Shared GPUs: one series per sharing pod (not supported yet).
    #[arg(long, env = "KUBERNETES_VIRTUAL_GPUS", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub kubernetes_virtual_gpus: bool,
    /// Write debug dumps (not supported yet).
    #[arg(long, env = "DCGM_EXPORTER_DUMP_ENABLED", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub dump_enabled: bool,
    /// Directory of debug dumps.
    #[arg(
        long,
        env = "DCGM_EXPORTER_DUMP_DIRECTORY",
        default_value = "/tmp/dcgm-exporter-debug"
    )]
    pub dump_directory: PathBuf,
    /// Hours to keep debug dumps.
    #[arg(long, env = "DCGM_EXPORTER_DUMP_RETENTION", default_value_t = 24)]
    pub dump_retention: i64,
    /// Compress debug dumps.
    #[arg(long, env = "DCGM_EXPORTER_DUMP_COMPRESSION", action = ArgAction::Set, num_args = 0..=1, default_value = "true", default_missing_value = "true", value_parser = go_bool!())]
    pub dump_compression: bool,
    /// Map DRA claims (not supported yet).
    #[arg(long, env = "KUBERNETES_ENABLE_DRA", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub kubernetes_enable_dra: bool,
    /// Skip startup validation (accepted; our library lookup needs none).
    #[arg(long, env = "DISABLE_STARTUP_VALIDATE", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub disable_startup_validate: bool,
    /// Rebuild on GPU bind/unbind events (not supported yet).
    #[arg(long, env = "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub enable_gpu_bind_unbind_watch: bool,
    /// Poll interval of the bind/unbind watch.
    #[arg(
        long,
        env = "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL",
        default_value = "1s"
    )]
    pub gpu_bind_unbind_poll_interval: String,
    /// Serve /debug/pprof (not supported yet).
    #[arg(long, env = "DCGM_EXPORTER_ENABLE_PPROF", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub enable_pprof: bool,
    /// YAML configuration file (not supported yet).
    #[arg(long, env = "DCGM_EXPORTER_CONFIG_FILE", default_value = "")]
    pub config_file: String,
    /// HTTP read timeout.
    #[arg(long, env = "DCGM_EXPORTER_WEB_READ_TIMEOUT", default_value = "10s")]
    pub web_read_timeout: String,
    /// HTTP write timeout.
    #[arg(long, env = "DCGM_EXPORTER_WEB_WRITE_TIMEOUT", default_value = "10s")]
    pub web_write_timeout: String,
    /// Container labels to add (not supported yet).
    #[arg(long, env = "DCGM_EXPORTER_CONTAINER_LABELS", default_value = "")]
    pub container_labels: String,
    /// Container runtime socket.
    #[arg(long, env = "DCGM_CONTAINER_RUNTIME_SOCKET", default_value = "")]
    pub container_runtime_socket: String,
    /// Load this libdcgm instead of searching for libdcgm.so.4.
    #[arg(long, env = "DCGM_EXPORTER_DCGM_LIBRARY")]
    pub dcgm_library: Option<PathBuf>,
    /// Print every DCGM field (name, id, type, unit, entity level) and exit.
    #[arg(long)]
    pub list_fields: bool,
    /// Also export MIG compute-instance series (label GPU_CI_ID).
    #[arg(long, env = "DCGM_EXPORTER_COMPUTE_INSTANCES", action = ArgAction::Set, num_args = 0..=1, default_value = "false", default_missing_value = "true", value_parser = go_bool!())]
    pub compute_instances: bool,
    /// Print the version and exit.
    #[arg(short = 'v', long, action = ArgAction::Version)]
    version: Option<bool>,

    /// Whether -r/--remote-hostengine-info or its env var was given (IsSet semantics).
    #[arg(skip)]
    remote_set: bool,
}

/// Rewrites Go-flag spellings into what clap parses.
pub fn normalize_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let cmd = <Config as clap::CommandFactory>::command();
    let longs: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    let mut out = Vec::new();
    let mut rest_verbatim = false;
    for (i, arg) in args.into_iter().enumerate() {
        let Some(s) = arg.to_str().map(str::to_string) else {
            out.push(arg);
            continue;
        };
        if i == 0 || rest_verbatim || !s.starts_with('-') || s == "-" {
            out.push(arg);
            continue;
        }
        if s == "--" {
            rest_verbatim = true;
            out.push(arg);
            continue;
        }
        let body = s.trim_start_matches('-');
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (body.to_string(), None),
        };
        let long = if name == "rbmn" {
            Some("replace-blanks-in-model-name".to_string())
        } else if name.len() > 1 && longs.contains(&name) {
            Some(name.clone())
        } else {
            None
        };
        match (long, value) {
            (Some(l), Some(v)) => {
                out.push(format!("--{l}").into());
                out.push(v.into());
            }
            (Some(l), None) => out.push(format!("--{l}").into()),
            (None, Some(v)) if name.len() == 1 => {
                out.push(format!("-{name}").into());
                out.push(v.into());
            }
            _ => out.push(arg),
        }
    }
    out
}

/// Normalises, then parses with clap (which also reads the environment).
pub fn parse_from<I, T>(args: I) -> Result<Config, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let args = normalize_args(args.into_iter().map(Into::into));
    let cmd = <Config as clap::CommandFactory>::command().version(version_line());
    let matches = cmd.try_get_matches_from(args)?;
    let mut config = <Config as clap::FromArgMatches>::from_arg_matches(&matches)?;
    config.remote_set = matches!(
        matches.value_source("remote_hostengine_info"),
        Some(clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable)
    );
    Ok(config)
}

fn version_line() -> &'static str {
    concat!(env!("CARGO_PKG_VERSION"), " (Rust; DCGM API 4.6)")
}

impl Config {
    /// The remote host engine, when -r or DCGM_REMOTE_HOSTENGINE_INFO selects remote mode.
    pub fn remote_hostengine(&self) -> Option<&str> {
        self.remote_set
            .then_some(self.remote_hostengine_info.as_str())
    }

    /// Options set to a value whose feature this exporter does not have yet.
    pub fn unsupported_options(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut check = |set: bool, name: &'static str| {
            if set {
                v.push(name);
            }
        };
        check(self.kubernetes, "kubernetes");
        check(
            self.kubernetes_enable_pod_labels,
            "kubernetes-enable-pod-labels",
        );
        check(self.kubernetes_enable_pod_uid, "kubernetes-enable-pod-uid");
        check(
            !self.kubernetes_pod_label_allowlist_regex.is_empty(),
            "kubernetes-pod-label-allowlist-regex",
        );
        check(self.kubernetes_virtual_gpus, "kubernetes-virtual-gpus");
        check(self.kubernetes_enable_dra, "kubernetes-enable-dra");
        check(
            !self.nvidia_resource_names.is_empty(),
            "nvidia-resource-names",
        );
        check(self.configmap_data != "none", "configmap-data");
        check(!self.web_config_file.is_empty(), "web-config-file");
        check(self.web_systemd_socket, "web-systemd-socket");
        check(self.dump_enabled, "dump-enabled");
        check(!self.hpc_job_mapping_dir.is_empty(), "hpc-job-mapping-dir");
        check(
            self.enable_gpu_bind_unbind_watch,
            "enable-gpu-bind-unbind-watch",
        );
        check(self.enable_pprof, "enable-pprof");
        check(!self.config_file.is_empty(), "config-file");
        check(!self.container_labels.is_empty(), "container-labels");
        check(self.fake_gpus, "fake-gpus");
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Tests that read the process environment run one at a time.
    static ENV: Mutex<()> = Mutex::new(());

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        let mut v = vec!["dcgm-exporter"];
        v.extend_from_slice(args);
        parse_from(v)
    }

    #[test]
    fn defaults_match_dcgm_exporter() {
        let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
        let c = parse(&[]).unwrap();
        assert_eq!(
            c.collectors,
            PathBuf::from("/etc/dcgm-exporter/default-counters.csv")
        );
        assert_eq!(c.address, ":9400");
        assert_eq!(c.collect_interval, 30000);
        assert_eq!(
            (
                c.devices.as_str(),
                c.switch_devices.as_str(),
                c.cpu_devices.as_str()
            ),
            ("f", "f", "f")
        );
        assert_eq!(c.xid_count_window_size, 300000);
        assert_eq!(c.clock_events_count_window_size, 300000);
        assert_eq!(c.kubernetes_gpu_id_type, "uid");
        assert_eq!(
            c.pod_resources_kubelet_socket,
            PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock")
        );
        assert_eq!(c.remote_hostengine(), None);
        assert!(!c.debug && !c.no_hostname && c.dump_compression);
        assert!(c.unsupported_options().is_empty());
    }

    #[test]
    fn go_flag_spellings() {
        let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
        assert_eq!(
            parse(&["-collectors", "x.csv"]).unwrap().collectors,
            PathBuf::from("x.csv")
        );
        assert_eq!(
            parse(&["--collectors=x.csv"]).unwrap().collectors,
            PathBuf::from("x.csv")
        );
        assert_eq!(
            parse(&["-f=x.csv"]).unwrap().collectors,
            PathBuf::from("x.csv")
        );
        assert_eq!(
            parse(&["--f=x.csv"]).unwrap().collectors,
            PathBuf::from("x.csv")
        );
        assert_eq!(
            parse(&["-f", "x.csv"]).unwrap().collectors,
            PathBuf::from("x.csv")
        );
        assert!(parse(&["-rbmn"]).unwrap().replace_blanks_in_model_name);
        assert!(parse(&["-debug"]).unwrap().debug);
        assert!(!parse(&["--debug=false"]).unwrap().debug);
        assert!(parse(&["--no-hostname=true"]).unwrap().no_hostname);
        assert!(parse(&["-n"]).unwrap().no_hostname);
        assert!(
            !parse(&["--dump-compression=false"])
                .unwrap()
                .dump_compression
        );
        assert_eq!(
            parse(&["-c", "1000", "-x", "5000"])
                .unwrap()
                .collect_interval,
            1000
        );
        assert_eq!(
            parse(&["-collect-interval=2000"]).unwrap().collect_interval,
            2000
        );
        let c = parse(&["-r", "10.0.0.1:5555"]).unwrap();
        assert_eq!(c.remote_hostengine(), Some("10.0.0.1:5555"));
        assert_eq!(parse(&["-p", "g:0"]).unwrap().cpu_devices, "g:0");
    }

    #[test]
    fn bad_values_name_the_flag() {
        let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
        let e = parse(&["-c", "abc"]).unwrap_err().to_string();
        assert!(e.contains("collect-interval"), "{e}");
        let e = parse(&["--log-format", "xml"]).unwrap_err().to_string();
        assert!(e.contains("log-format"), "{e}");
        assert!(parse(&["--dcgm-log-level", "LOUD"]).is_err());
        assert_eq!(
            parse(&["--dcgm-log-level", "DEBUG"])
                .unwrap()
                .dcgm_log_level,
            "DEBUG"
        );
        let e = parse(&["--debug=maybe"]).unwrap_err().to_string();
        assert!(e.contains("not a boolean"), "{e}");
        assert!(parse(&["--no-such-flag"]).is_err());
    }

    #[test]
    fn environment_variables_and_remote_is_set_semantics() {
        let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
        std::env::set_var("DCGM_REMOTE_HOSTENGINE_INFO", "he:5555");
        std::env::set_var("DCGM_EXPORTER_DEBUG", "false");
        std::env::set_var("DCGM_EXPORTER_INTERVAL", "1234");
        std::env::set_var("NVIDIA_RESOURCE_NAMES", "nvidia.com/a100,nvidia.com/h100");
        let c = parse(&[]);
        std::env::remove_var("DCGM_REMOTE_HOSTENGINE_INFO");
        std::env::remove_var("DCGM_EXPORTER_DEBUG");
        std::env::remove_var("DCGM_EXPORTER_INTERVAL");
        std::env::remove_var("NVIDIA_RESOURCE_NAMES");
        let c = c.unwrap();
        assert_eq!(c.remote_hostengine(), Some("he:5555"));
        assert!(!c.debug);
        assert_eq!(c.collect_interval, 1234);
        assert_eq!(
            c.nvidia_resource_names,
            vec!["nvidia.com/a100", "nvidia.com/h100"]
        );
        assert_eq!(c.unsupported_options(), vec!["nvidia-resource-names"]);
    }

    #[test]
    fn unsupported_features_are_reported_when_set() {
        let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
        let c = parse(&["-k", "--web-config-file", "w.yml", "-m", "ns:cm"]).unwrap();
        assert_eq!(
            c.unsupported_options(),
            vec!["kubernetes", "configmap-data", "web-config-file"]
        );
    }
}
