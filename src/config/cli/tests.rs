use super::*;
use std::ffi::OsStr;
use std::sync::{Mutex, MutexGuard};

/// Every parse reads the process environment, so the tests that parse run one at a
/// time (also those of other modules: start-up's settings).
static ENV: Mutex<()> = Mutex::new(());

pub(crate) fn lock() -> MutexGuard<'static, ()> {
    ENV.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sets environment variables for the guard's lifetime (callers hold the lock).
struct EnvVars(Vec<&'static str>);

impl EnvVars {
    fn set(vars: &[(&'static str, &str)]) -> EnvVars {
        for (k, v) in vars {
            std::env::set_var(k, v);
        }
        EnvVars(vars.iter().map(|(k, _)| *k).collect())
    }
}

impl Drop for EnvVars {
    fn drop(&mut self) {
        for k in &self.0 {
            std::env::remove_var(k);
        }
    }
}

fn argv(args: &[&str]) -> Vec<String> {
    std::iter::once("dcgm-exporter")
        .chain(args.iter().copied())
        .map(str::to_string)
        .collect()
}

fn parse(args: &[&str]) -> Result<Config, clap::Error> {
    parse_from(argv(args))
}

fn raw(m: &ArgMatches, id: &str) -> Vec<String> {
    m.get_raw(id)
        .into_iter()
        .flatten()
        .map(|v| v.to_string_lossy().into_owned())
        .collect()
}

/// §1 of the reference, plus §7 and ours: (long, short, env, default, kind).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Bool,
    Int,
    Str,
    List,
}
use Kind::*;

type Row = (
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
    Kind,
);

#[rustfmt::skip]
const FLAGS: &[Row] = &[
    ("collectors", Some("f"), Some("DCGM_EXPORTER_COLLECTORS"), Some("/etc/dcgm-exporter/default-counters.csv"), Str),
    ("address", Some("a"), Some("DCGM_EXPORTER_LISTEN"), Some(":9400"), Str),
    ("collect-interval", Some("c"), Some("DCGM_EXPORTER_INTERVAL"), Some("30000"), Int),
    ("kubernetes", Some("k"), Some("DCGM_EXPORTER_KUBERNETES"), Some("false"), Bool),
    ("use-old-namespace", Some("o"), Some("DCGM_EXPORTER_USE_OLD_NAMESPACE"), Some("false"), Bool),
    ("cpu-devices", Some("p"), Some("DCGM_EXPORTER_CPU_DEVICES_STR"), Some("f"), Str),
    ("configmap-data", Some("m"), Some("DCGM_EXPORTER_CONFIGMAP_DATA"), Some("none"), Str),
    ("remote-hostengine-info", Some("r"), Some("DCGM_REMOTE_HOSTENGINE_INFO"), Some("localhost:5555"), Str),
    ("kubernetes-enable-pod-labels", None, Some("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"), Some("false"), Bool),
    ("kubernetes-enable-pod-uid", None, Some("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"), Some("false"), Bool),
    ("kubernetes-gpu-id-type", None, Some("DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"), Some("uid"), Str),
    ("kubernetes-pod-label-allowlist-regex", None, Some("DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"), None, List),
    ("devices", Some("d"), Some("DCGM_EXPORTER_DEVICES_STR"), Some("f"), Str),
    ("no-hostname", Some("n"), Some("DCGM_EXPORTER_NO_HOSTNAME"), Some("false"), Bool),
    ("switch-devices", Some("s"), Some("DCGM_EXPORTER_OTHER_DEVICES_STR"), Some("f"), Str),
    ("fake-gpus", None, Some("DCGM_EXPORTER_USE_FAKE_GPUS"), Some("false"), Bool),
    ("web-config-file", None, Some("DCGM_EXPORTER_WEB_CONFIG_FILE"), Some(""), Str),
    ("web-systemd-socket", None, Some("DCGM_EXPORTER_SYSTEMD_SOCKET"), Some("false"), Bool),
    ("xid-count-window-size", Some("x"), Some("DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE"), Some("300000"), Int),
    ("replace-blanks-in-model-name", Some("rbmn"), Some("DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME"), Some("false"), Bool),
    ("debug", None, Some("DCGM_EXPORTER_DEBUG"), Some("false"), Bool),
    ("clock-events-count-window-size", None, Some("DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE"), Some("300000"), Int),
    ("enable-dcgm-log", None, Some("DCGM_EXPORTER_ENABLE_DCGM_LOG"), Some("false"), Bool),
    ("dcgm-log-level", None, Some("DCGM_EXPORTER_DCGM_LOG_LEVEL"), Some("NONE"), Str),
    ("log-format", None, Some("DCGM_EXPORTER_LOG_FORMAT"), Some("text"), Str),
    ("pod-resources-kubelet-socket", None, Some("DCGM_POD_RESOURCES_KUBELET_SOCKET"), Some("/var/lib/kubelet/pod-resources/kubelet.sock"), Str),
    ("hpc-job-mapping-dir", None, Some("DCGM_HPC_JOB_MAPPING_DIR"), Some(""), Str),
    ("nvidia-resource-names", None, Some("NVIDIA_RESOURCE_NAMES"), None, List),
    ("kubernetes-virtual-gpus", None, Some("KUBERNETES_VIRTUAL_GPUS"), Some("false"), Bool),
    ("dump-enabled", None, Some("DCGM_EXPORTER_DUMP_ENABLED"), Some("false"), Bool),
    ("dump-directory", None, Some("DCGM_EXPORTER_DUMP_DIRECTORY"), Some("/tmp/dcgm-exporter-debug"), Str),
    ("dump-retention", None, Some("DCGM_EXPORTER_DUMP_RETENTION"), Some("24"), Int),
    ("dump-compression", None, Some("DCGM_EXPORTER_DUMP_COMPRESSION"), Some("true"), Bool),
    ("kubernetes-enable-dra", None, Some("KUBERNETES_ENABLE_DRA"), Some("false"), Bool),
    ("disable-startup-validate", None, Some("DISABLE_STARTUP_VALIDATE"), Some("false"), Bool),
    ("enable-gpu-bind-unbind-watch", None, Some("DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH"), Some("false"), Bool),
    ("gpu-bind-unbind-poll-interval", None, Some("DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL"), Some("1s"), Str),
    ("enable-pprof", None, Some("DCGM_EXPORTER_ENABLE_PPROF"), Some("false"), Bool),
    // §7 (newer upstream)
    ("config-file", None, Some("DCGM_EXPORTER_CONFIG_FILE"), Some(""), Str),
    ("web-read-timeout", None, Some("DCGM_EXPORTER_WEB_READ_TIMEOUT"), Some("10s"), Str),
    ("web-write-timeout", None, Some("DCGM_EXPORTER_WEB_WRITE_TIMEOUT"), Some("30s"), Str),
    ("container-labels", None, Some("DCGM_EXPORTER_CONTAINER_LABELS"), Some("false"), Bool),
    ("max-concurrent-scrapes", None, Some("DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES"), Some("16"), Int),
    ("container-runtime-socket", None, Some("DCGM_CONTAINER_RUNTIME_SOCKET"), Some(""), Str),
    // ours
    ("dcgm-library", None, Some("DCGM_EXPORTER_DCGM_LIBRARY"), None, Str),
    // ours (issue 31: the NVML backend)
    ("backend", None, Some("DCGM_EXPORTER_BACKEND"), Some("auto"), Str),
    ("nvml-library", None, Some("DCGM_EXPORTER_NVML_LIBRARY"), None, Str),
    ("list-fields", None, None, Some("false"), Bool),
    ("compute-instances", None, Some("DCGM_EXPORTER_COMPUTE_INSTANCES"), Some("false"), Bool),
    ("textfile-directory", None, Some("DCGM_EXPORTER_TEXTFILE_DIRECTORY"), Some(""), Str),
    // newer upstream (k8s-newest §1.2)
    ("watch-max-keep-age", None, Some("DCGM_EXPORTER_WATCH_MAX_KEEP_AGE"), Some("600s"), Str),
    ("watch-max-keep-samples", None, Some("DCGM_EXPORTER_WATCH_MAX_KEEP_SAMPLES"), Some("0"), Int),
    ("health-require-gpus", None, Some("DCGM_EXPORTER_HEALTH_REQUIRE_GPUS"), Some("false"), Bool),
    ("exit-if-hostengine-unreachable", None, Some("DCGM_EXPORTER_EXIT_IF_HOSTENGINE_UNREACHABLE"), Some("false"), Bool),
    ("enable-exporter-metrics", None, Some("DCGM_EXPORTER_ENABLE_EXPORTER_METRICS"), Some("false"), Bool),
    ("emulate-version", None, Some("DCGM_EXPORTER_EMULATE_VERSION"), Some("4.8.4"), Str),
    ("low-cardinality", None, Some("DCGM_EXPORTER_LOW_CARDINALITY"), Some("false"), Bool),
    ("web-telemetry-path", None, Some("DCGM_EXPORTER_WEB_TELEMETRY_PATH"), Some("/metrics"), Str),
    ("web-enable-openmetrics", None, Some("DCGM_EXPORTER_WEB_ENABLE_OPENMETRICS"), Some("false"), Bool),
    // ours (issue 23: usage accounting)
    ("usage-accounting", None, Some("DCGM_EXPORTER_USAGE_ACCOUNTING"), Some("false"), Bool),
    ("usage-idle-window", None, Some("DCGM_EXPORTER_USAGE_IDLE_WINDOW"), Some("10m"), Str),
    ("usage-max-consumers-per-gpu", None, Some("DCGM_EXPORTER_USAGE_MAX_CONSUMERS_PER_GPU"), Some("64"), Int),
    ("proc-root", None, Some("DCGM_EXPORTER_PROC_ROOT"), Some("/proc"), Str),
    // ours (issue 47: sub-interval aggregation)
    ("aggregate", None, Some("DCGM_EXPORTER_AGGREGATE"), Some(""), Str),
    ("aggregate-period", None, Some("DCGM_EXPORTER_AGGREGATE_PERIOD"), Some("1s"), Str),
    // ours (issue 32: OTLP push)
    ("otlp-endpoint", None, Some("DCGM_EXPORTER_OTLP_ENDPOINT"), Some(""), Str),
    ("otlp-protocol", None, Some("DCGM_EXPORTER_OTLP_PROTOCOL"), Some(""), Str),
    ("otlp-metric-names", None, Some("DCGM_EXPORTER_OTLP_METRIC_NAMES"), Some("dcgm"), Str),
    ("otlp-queue-size", None, Some("DCGM_EXPORTER_OTLP_QUEUE_SIZE"), Some("16"), Int),
    // ours (issue 47: the event history)
    ("events-max-count", None, Some("DCGM_EXPORTER_EVENTS_MAX_COUNT"), Some("10000"), Int),
    ("events-max-bytes", None, Some("DCGM_EXPORTER_EVENTS_MAX_BYTES"), Some("4194304"), Int),
    // ours (issue 44: the profiling module under the operator's control, profiling that heals)
    ("dcgm-denylist-modules", None, Some("DCGM_EXPORTER_DCGM_DENYLIST_MODULES"), Some(""), Str),
    ("profiling-rearm-after", None, Some("DCGM_EXPORTER_PROFILING_REARM_AFTER"), Some("3"), Int),
    ("profiling-restart-period", None, Some("DCGM_EXPORTER_PROFILING_RESTART_PERIOD"), Some("1h"), Str),
];

/// A value that parses and differs from the default.
fn sample(long: &str, kind: Kind) -> &'static str {
    match (long, kind) {
        ("dcgm-log-level", _) => "DEBUG",
        ("log-format", _) => "json",
        ("kubernetes-gpu-id-type", _) => "device-name",
        ("emulate-version", _) => "4.8.2",
        ("backend", _) => "nvml",
        ("dump-compression", _) => "false",
        (_, Bool) => "true",
        (_, Int) => "1234",
        _ => "some-value",
    }
}

#[test]
fn every_flag_is_declared_with_its_long_short_env_and_default() {
    let mut cmd = declared();
    cmd.build();
    for &(long, short, env, default, kind) in FLAGS {
        let a = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .unwrap_or_else(|| panic!("--{long} is missing"));
        let one_letter = short.filter(|s| s.len() == 1);
        assert_eq!(
            a.get_short().map(String::from),
            one_letter.map(String::from),
            "{long}"
        );
        assert_eq!(a.get_env().and_then(OsStr::to_str), env, "{long}");
        let d: Vec<&str> = a
            .get_default_values()
            .iter()
            .filter_map(|v| v.to_str())
            .collect();
        assert_eq!(d, default.map_or(vec![], |d| vec![d]), "{long}");
        let optional = a.get_num_args().is_some_and(|r| r.min_values() == 0);
        assert_eq!(
            kind == Bool,
            optional,
            "{long}: bools take an optional =value"
        );
    }
    // ... and nothing else, apart from clap's help and our version.
    for a in cmd.get_arguments() {
        let long = a.get_long().unwrap_or_default();
        assert!(
            FLAGS.iter().any(|f| f.0 == long) || ["help", "version"].contains(&long),
            "--{long} is not in the table"
        );
    }
}

#[test]
fn every_flag_parses_from_long_short_go_spelling_and_env() {
    let _g = lock();
    let cmd = declared();
    for &(long, short, env, default, kind) in FLAGS {
        let id = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .map(|a| a.get_id().to_string())
            .unwrap_or_default();
        let v = sample(long, kind);
        let mut spellings = vec![
            argv(&[&format!("--{long}={v}")]),
            argv(&[&format!("-{long}={v}")]),
        ];
        if kind != Bool {
            spellings.push(argv(&[&format!("--{long}"), v]));
            spellings.push(argv(&[&format!("-{long}"), v]));
        }
        if let Some(s) = short {
            spellings.push(argv(&[&format!("-{s}={v}")]));
            spellings.push(argv(&[&format!("--{s}={v}")]));
            if kind != Bool {
                spellings.push(argv(&[&format!("-{s}"), v]));
            }
        }
        for args in spellings {
            let m = matches_from(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(raw(&m, &id), [v], "{args:?}");
            assert_eq!(m.value_source(&id), Some(ValueSource::CommandLine));
        }
        if kind == Bool {
            for flag in [format!("--{long}"), format!("-{}", short.unwrap_or(long))] {
                let m = matches_from(argv(&[&flag])).unwrap();
                assert_eq!(m.get_one::<bool>(&id), Some(&true), "{flag}");
            }
        }
        // Absent: the default, from the default source.
        let m = matches_from(argv(&[])).unwrap();
        assert_eq!(
            raw(&m, &id),
            default.map_or(vec![], |d| vec![d.to_string()])
        );
        assert_ne!(m.value_source(&id), Some(ValueSource::CommandLine));
        if let Some(env) = env {
            let _e = EnvVars::set(&[(env, v)]);
            let m = matches_from(argv(&[])).unwrap_or_else(|e| panic!("{env}: {e}"));
            assert_eq!(raw(&m, &id), [v], "{env}");
            assert_eq!(m.value_source(&id), Some(ValueSource::EnvVariable), "{env}");
            // The command line wins over the environment.
            if kind == Int {
                let m = matches_from(argv(&[&format!("--{long}=7")])).unwrap();
                assert_eq!(raw(&m, &id), ["7"]);
            }
        }
    }
}

/// 4.8.3 added --web-write-timeout with a 30 s default; 4.8.2 wrote with a fixed 10 s.
#[test]
fn the_write_timeout_default_follows_the_emulated_release() {
    let _g = lock();
    let c = parse(&[]).unwrap();
    assert_eq!(
        (
            c.web_write_timeout(),
            c.default_web_write_timeout().as_secs()
        ),
        ("30s", 30)
    );
    let c = parse(&["--emulate-version=4.8.2"]).unwrap();
    assert_eq!(
        (
            c.web_write_timeout(),
            c.default_web_write_timeout().as_secs()
        ),
        ("10s", 10)
    );
    let c = parse(&["--emulate-version=4.8.2", "--web-write-timeout=45s"]).unwrap();
    assert_eq!(c.web_write_timeout(), "45s");
    let _e = EnvVars::set(&[("DCGM_EXPORTER_EMULATE_VERSION", "4.8.2")]);
    assert_eq!(parse(&[]).unwrap().web_write_timeout(), "10s");
}

#[test]
fn defaults_match_dcgm_exporter() {
    let _g = lock();
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
    assert_eq!(c.remote_hostengine_info, "localhost:5555");
    assert_eq!(
        (c.dcgm_log_level.as_str(), c.log_format.as_str()),
        ("NONE", "text")
    );
    assert_eq!(c.dump_retention, 24);
    assert!(!c.debug && !c.no_hostname && c.dump_compression && !c.list_fields);
    assert!(c.nvidia_resource_names.is_empty() && c.dcgm_library.is_none());
}

#[test]
fn go_flag_spellings() {
    let _g = lock();
    for args in [
        &["-collectors", "x.csv"][..],
        &["--collectors", "x.csv"],
        &["-collectors=x.csv"],
        &["--collectors=x.csv"],
        &["-f", "x.csv"],
        &["-f=x.csv"],
        &["--f=x.csv"],
        &["--f", "x.csv"],
    ] {
        let c = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(c.collectors, PathBuf::from("x.csv"), "{args:?}");
    }
    assert!(parse(&["-rbmn"]).unwrap().replace_blanks_in_model_name);
    assert!(parse(&["--rbmn"]).unwrap().replace_blanks_in_model_name);
    assert!(
        !parse(&["-rbmn=false"])
            .unwrap()
            .replace_blanks_in_model_name
    );
    assert!(parse(&["-debug"]).unwrap().debug);
    assert!(parse(&["--debug"]).unwrap().debug);
    for f in ["false", "0", "f", "F", "FALSE", "False"] {
        assert!(!parse(&[&format!("--debug={f}")]).unwrap().debug, "{f}");
    }
    for t in ["true", "1", "t", "T", "TRUE", "True"] {
        assert!(
            parse(&[&format!("--no-hostname={t}")]).unwrap().no_hostname,
            "{t}"
        );
    }
    assert!(parse(&["-n"]).unwrap().no_hostname);
    assert!(
        !parse(&["--dump-compression=false"])
            .unwrap()
            .dump_compression
    );
    // The last occurrence wins, as in Go.
    assert!(!parse(&["--debug", "--debug=false"]).unwrap().debug);
    assert_eq!(parse(&["-a", ":1", "-a", ":2"]).unwrap().address, ":2");
    // A value flag takes the next argument whatever it is; negative numbers too.
    assert_eq!(parse(&["-a", "-k"]).unwrap().address, "-k");
    assert_eq!(parse(&["-c", "-5"]).unwrap().collect_interval, -5);
    let c = parse(&["-c", "1000", "-x", "5000", "-k", "-o"]).unwrap();
    assert_eq!((c.collect_interval, c.xid_count_window_size), (1000, 5000));
    assert!(c.kubernetes && c.use_old_namespace);
    // Go's base-0 integers.
    assert_eq!(parse(&["-c=0x10"]).unwrap().collect_interval, 16);
    assert_eq!(parse(&["-c=010"]).unwrap().collect_interval, 8);
    assert_eq!(parse(&["-c=0b11"]).unwrap().collect_interval, 3);
    assert_eq!(parse(&["-c=+7"]).unwrap().collect_interval, 7);
    assert_eq!(parse(&["-p", "g:0"]).unwrap().cpu_devices, "g:0");
    assert_eq!(
        parse(&[
            "--nvidia-resource-names=a,b",
            "--nvidia-resource-names",
            "c"
        ])
        .unwrap()
        .nvidia_resource_names,
        ["a", "b", "c"]
    );
    let c = parse(&["-r", "10.0.0.1:5555"]).unwrap();
    assert_eq!(c.remote_hostengine(), Some("10.0.0.1:5555"));
    let c = parse(&["--remote-hostengine-info=localhost:5555"]).unwrap();
    assert_eq!(c.remote_hostengine(), Some("localhost:5555"), "given = set");
    assert_eq!(
        parse(&["--dcgm-library", "/x/libdcgm.so.4"])
            .unwrap()
            .dcgm_library,
        Some(PathBuf::from("/x/libdcgm.so.4"))
    );
    assert!(parse(&["-list-fields"]).unwrap().list_fields);
    assert!(parse(&["--compute-instances"]).unwrap().compute_instances);
}

#[test]
fn normalize_args_rewrites_only_what_it_knows() {
    let n = |args: &[&str]| -> Vec<String> {
        normalize_args(argv(args).into_iter().map(OsString::from))
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        n(&[
            "-collectors",
            "x",
            "-rbmn",
            "--f=y",
            "-k",
            "-debug=false",
            "-a",
            "-c"
        ]),
        argv(&[
            "--collectors=x",
            "--replace-blanks-in-model-name",
            "--collectors=y",
            "--kubernetes",
            "--debug=false",
            "--address=-c"
        ])
    );
    assert_eq!(n(&["-v"]), argv(&["--version"]));
    assert_eq!(n(&["-help"]), argv(&["--help"]));
    // A missing value is left for clap to report.
    assert_eq!(n(&["-f"]), argv(&["--collectors"]));
    // Unknown flags, positionals, "-", "---x" and everything after "--" stay as they are.
    assert_eq!(
        n(&["-kn", "-nope", "x", "-", "---k", "--", "-k"]),
        argv(&["-kn", "-nope", "x", "-", "---k", "--", "-k"])
    );
}

#[test]
fn version_line() {
    let _g = lock();
    let e = parse(&["-v"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::DisplayVersion);
    assert_eq!(e.exit_code(), 0);
    assert_eq!(
        e.to_string(),
        format!(
            "DCGM Exporter version {} (Rust; DCGM API 4.6)\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert_eq!(
        parse(&["--version"]).unwrap_err().kind(),
        clap::error::ErrorKind::DisplayVersion
    );
    let e = parse(&["-h"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
    let help = e.to_string();
    assert!(
        help.contains("--collectors <PATH>") && help.contains("DCGM_EXPORTER_COLLECTORS"),
        "{help}"
    );
}

#[test]
fn bad_values_name_the_flag() {
    let _g = lock();
    let err = |args: &[&str]| match parse(args) {
        Ok(c) => panic!("{args:?} parsed: {c:?}"),
        Err(e) => e.to_string(),
    };
    let e = err(&["-c", "abc"]);
    assert!(
        e.contains("--collect-interval") && e.contains("'abc' is not an integer"),
        "{e}"
    );
    let e = err(&["-x=1.5"]);
    assert!(e.contains("--xid-count-window-size"), "{e}");
    let e = err(&["-c=99999999999999999999"]);
    assert!(e.contains("out of range"), "{e}");
    let e = err(&["--log-format", "xml"]);
    assert!(e.contains("--log-format") && e.contains("xml"), "{e}");
    for bad in ["LOUD", "debug", ""] {
        let e = err(&[&format!("--dcgm-log-level={bad}")]);
        assert!(e.contains("--dcgm-log-level"), "{e}");
    }
    for ok in LOG_LEVELS {
        assert_eq!(parse(&["--dcgm-log-level", ok]).unwrap().dcgm_log_level, ok);
    }
    let e = err(&["--kubernetes-gpu-id-type=gpu"]);
    assert!(e.contains("--kubernetes-gpu-id-type"), "{e}");
    let e = err(&["--debug=maybe"]);
    assert!(e.contains("--debug") && e.contains("not a boolean"), "{e}");
    let e = err(&["-f"]);
    assert!(e.contains("--collectors"), "{e}");
    assert!(err(&["--no-such-flag"]).contains("--no-such-flag"));
    // A bool does not take the next argument; the stray one is an error, not ignored.
    assert!(err(&["-n", "false"]).contains("'false'"));
}

#[test]
fn environment_variables_and_remote_is_set_semantics() {
    let _g = lock();
    {
        let _e = EnvVars::set(&[
            ("DCGM_REMOTE_HOSTENGINE_INFO", "he:5555"),
            ("DCGM_EXPORTER_DEBUG", "false"),
            ("DCGM_EXPORTER_NO_HOSTNAME", "T"),
            ("DCGM_EXPORTER_INTERVAL", "1234"),
            ("NVIDIA_RESOURCE_NAMES", "nvidia.com/a100,nvidia.com/h100"),
            (
                "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
                "^app$,^team",
            ),
        ]);
        let c = parse(&[]).unwrap();
        assert_eq!(c.remote_hostengine(), Some("he:5555"));
        assert!(!c.debug && c.no_hostname);
        assert_eq!(c.collect_interval, 1234);
        assert_eq!(
            c.nvidia_resource_names,
            vec!["nvidia.com/a100", "nvidia.com/h100"]
        );
        assert_eq!(c.kubernetes_pod_label_allowlist_regex, ["^app$", "^team"]);
        // The command line wins.
        let c = parse(&["-r", "other:1", "--debug", "-c", "5"]).unwrap();
        assert_eq!(c.remote_hostengine(), Some("other:1"));
        assert!(c.debug);
        assert_eq!(c.collect_interval, 5);
    }
    {
        let _e = EnvVars::set(&[("DCGM_EXPORTER_DEBUG", "yes")]);
        let e = parse(&[]).unwrap_err().to_string();
        assert!(e.contains("--debug") && e.contains("'yes'"), "{e}");
    }
    {
        // Empty values count as unset.
        let _e = EnvVars::set(&[
            ("DCGM_REMOTE_HOSTENGINE_INFO", ""),
            ("DCGM_EXPORTER_DEBUG", ""),
            ("DCGM_EXPORTER_INTERVAL", ""),
            ("DCGM_EXPORTER_DUMP_COMPRESSION", ""),
        ]);
        let c = parse(&[]).unwrap();
        assert_eq!(c.remote_hostengine(), None);
        assert!(!c.debug && c.dump_compression);
        assert_eq!(c.collect_interval, 30000);
    }
    assert_eq!(parse(&[]).unwrap().remote_hostengine(), None);
}

#[test]
fn go_ints() {
    for (s, v) in [
        ("0", 0),
        ("42", 42),
        ("-42", -42),
        ("+42", 42),
        ("0x1F", 31),
        ("0X1f", 31),
        ("0o17", 15),
        ("017", 15),
        ("0b101", 5),
        ("-0x10", -16),
        ("9223372036854775807", i64::MAX),
        ("-9223372036854775808", i64::MIN),
    ] {
        assert_eq!(parse_go_int(s), Ok(v), "{s}");
    }
    for s in [
        "", "-", "+", "abc", "1.5", "0x", "08", "1e3", "--1", "+-1", " 1", "1_000",
    ] {
        assert!(parse_go_int(s).is_err(), "{s}");
    }
    assert!(parse_go_int("9223372036854775808")
        .unwrap_err()
        .contains("out of range"));
}

#[test]
fn checked_flag_values_are_typed_errors() {
    let c = |args: &[&str]| parse(args).unwrap();
    assert!(matches!(
        c(&["--events-max-count=-1"]).events_bounds(),
        Err(FlagError::EventsMaxCount(-1))
    ));
    assert!(matches!(
        c(&["--events-max-bytes", "100"]).events_bounds(),
        Err(FlagError::EventsMaxBytes(100))
    ));
    assert!(matches!(
        c(&["--profiling-rearm-after", "1001"]).profiling_healing(),
        Err(FlagError::RearmAfter(1001))
    ));
    assert!(matches!(
        c(&["--profiling-restart-period", "soon"]).profiling_healing(),
        Err(FlagError::RestartPeriod(
            crate::config::duration::Error::NotADuration(_)
        ))
    ));
    assert!(matches!(
        c(&["--dcgm-denylist-modules", "core"]).dcgm_denylist(),
        Err(FlagError::DenyCore)
    ));
    assert!(matches!(
        c(&["--dcgm-denylist-modules", "nope"]).dcgm_denylist(),
        Err(FlagError::DenylistModule(_))
    ));
    assert_eq!(
        crate::attribution::IdType::parse("gpu"),
        Err(crate::attribution::UnknownIdType("gpu".into()))
    );
}
