use super::{from_config, Error};
use crate::config::cli;

fn stages(args: &[&str]) -> Result<super::Stages, Error> {
    // The cli tests set flags' environment variables meanwhile.
    let _env = cli::tests::lock();
    from_config(
        cli::parse_from(std::iter::once("dcgm-exporter").chain(args.iter().copied())).unwrap(),
    )
}

#[test]
fn each_stage_gets_what_its_flags_say() {
    let s = stages(&[
        "-a",
        "127.0.0.1:9500",
        "-c",
        "2000",
        "--web-telemetry-path",
        "/gpu/metrics",
        "--textfile-directory",
        "/tmp/tf",
        "--enable-gpu-bind-unbind-watch",
        "-o",
        "--container-labels",
    ])
    .unwrap();
    assert_eq!(s.collect.interval_ms, 2000);
    let http = s.http.expect("listening");
    assert_eq!(http.address, "127.0.0.1:9500");
    assert_eq!(http.telemetry_path, "/gpu/metrics");
    assert_eq!(s.sinks.textfile_directory, "/tmp/tf");
    assert_eq!(s.bind_unbind, Some(std::time::Duration::from_secs(1)));
    // -o names the container label as 1.x did.
    assert_eq!(
        s.attribution.container,
        Some((String::new(), "container_name"))
    );
    assert!(
        s.attribution.nvml,
        "container labels need NVML for MIG UUIDs"
    );
    assert!(!s.kube.configmap && !s.kube.pod_metadata && !s.kube.dra);
    assert!(matches!(s.engine, crate::lifecycle::app::Engine::Embedded));
}

#[test]
fn no_listener_needs_the_textfile() {
    let e = stages(&["-a", ""]).err().expect("refused");
    assert!(matches!(e, Error::NoOutput), "{e}");
    let s = stages(&["-a", "", "--otlp-endpoint", "http://127.0.0.1:4318"]).unwrap();
    assert!(s.http.is_none() && s.otlp.is_some());
    let s = stages(&["-a", "", "--textfile-directory", "/tmp/tf"]).unwrap();
    assert!(s.http.is_none());
}

#[test]
fn kubernetes_flags_without_k_are_named_and_do_nothing() {
    let s = stages(&["--kubernetes-virtual-gpus", "--kubernetes-enable-dra"]).unwrap();
    assert_eq!(
        s.attribution.ignored_without_k,
        ["--kubernetes-virtual-gpus", "--kubernetes-enable-dra"]
    );
    assert!(!s.kube.dra && !s.attribution.options.dra);
    let s = stages(&["-k", "--kubernetes-virtual-gpus", "--kubernetes-enable-dra"]).unwrap();
    assert!(s.attribution.ignored_without_k.is_empty());
    assert!(s.kube.dra && s.attribution.options.dra);
}

#[test]
fn usage_accounting_flags() {
    assert!(stages(&[]).unwrap().attribution.options.usage.is_none());
    let e = stages(&["--usage-accounting"]).err().expect("no consumers");
    assert!(matches!(e, Error::NoConsumers), "{e}");
    let s = stages(&[
        "-k",
        "--usage-accounting",
        "--usage-idle-window=90s",
        "--usage-max-consumers-per-gpu",
        "8",
        "--proc-root",
        "/host/proc",
    ])
    .unwrap();
    let u = s.attribution.options.usage.clone().expect("on");
    assert_eq!(u.idle_window, std::time::Duration::from_secs(90));
    assert_eq!(u.max_consumers_per_gpu, 8);
    assert_eq!(s.attribution.options.proc_root.to_str(), Some("/host/proc"));
    assert!(s.kube.pod_metadata && s.attribution.nvml);
    assert!(stages(&["--hpc-job-mapping-dir", "/x", "--usage-accounting"]).is_ok());
    type Is = fn(&Error) -> bool;
    let bad: [(&[&str], Is); 5] = [
        (
            &["--usage-idle-window", "0s"],
            |e| matches!(e, Error::ZeroIdleWindow(w) if w == "0s"),
        ),
        (&["--usage-idle-window=-5m"], |e| {
            matches!(
                e,
                Error::Duration {
                    flag: "--usage-idle-window",
                    ..
                }
            )
        }),
        (&["--usage-idle-window", "soon"], |e| {
            matches!(
                e,
                Error::Duration {
                    flag: "--usage-idle-window",
                    ..
                }
            )
        }),
        (&["--usage-max-consumers-per-gpu", "0"], |e| {
            matches!(e, Error::MaxConsumers(0))
        }),
        (&["--usage-max-consumers-per-gpu=-3"], |e| {
            matches!(e, Error::MaxConsumers(-3))
        }),
    ];
    for (args, is) in bad {
        let e = stages(args)
            .err()
            .unwrap_or_else(|| panic!("{args:?} accepted"));
        assert!(is(&e), "{args:?}: {e}");
    }
}

/// `-r a,b`: each element checked as `-r` checks one, errors naming the flag and the
/// element; none twice; one element is today's single engine (no engine label).
#[test]
fn a_list_of_host_engines() {
    let s = stages(&["-r", "10.0.0.1:5555"]).unwrap();
    assert!(s.engines.is_empty(), "one engine is the one-engine path");
    let s = stages(&["-r", "10.0.0.1:5555,10.0.0.2:5555,unix:///run/e.sock"]).unwrap();
    let got: Vec<(String, String)> = s
        .engines
        .iter()
        .map(|e| (e.label.clone(), e.target.to_string()))
        .collect();
    assert_eq!(
        got,
        [
            ("10.0.0.1".to_string(), "10.0.0.1:5555".to_string()),
            ("10.0.0.2".into(), "10.0.0.2:5555".into()),
            // A socket is this node, whose name the other engines do not share.
            (
                crate::config::hostname::os_hostname().unwrap(),
                "unix:///run/e.sock".into()
            ),
        ]
    );
    assert_eq!(s.engines[1].hostname.as_deref(), Some("10.0.0.2"));
    // Two engines on one host: labelled by their addresses.
    let s = stages(&["-r", "h:1,h:2"]).unwrap();
    let labels: Vec<&str> = s.engines.iter().map(|e| e.label.as_str()).collect();
    assert_eq!(labels, ["h:1", "h:2"]);
    const SECOND: &str = "-r/--remote-hostengine-info (element 2)";
    let e = stages(&["-r", "h:1,h:1"]).err().expect("twice");
    assert!(
        matches!(&e, Error::EngineTwice { whence, target } if whence == SECOND && target.to_string() == "h:1"),
        "{e}"
    );
    for (list, why_starts) in [
        ("h:1,", "empty host engine address"),
        ("h:1,unix://", "'unix://': unix:// needs a socket path"),
    ] {
        let e = stages(&["-r", list]).err().expect(list);
        assert!(
            matches!(&e, Error::EngineAddress { whence, why } if whence == SECOND && why.starts_with(why_starts)),
            "{list}: {e}"
        );
    }
    // The words: the flag and the element, then what is wrong.
    assert_eq!(
        stages(&["-r", "h:1,unix://"]).err().unwrap().to_string(),
        "-r/--remote-hostengine-info (element 2): 'unix://': unix:// needs a socket path"
    );
}

/// `sources.dcgm.hostEngines`: the engines and their names, `-r` given wins, and a bad
/// or repeated address is an error naming the file and the key.
#[test]
fn host_engines_from_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = |engines: &str| {
        let p = dir.path().join("c.yaml");
        let text = format!("version: 2\nsources: {{dcgm: {{hostEngines: [{engines}]}}}}\n");
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let ok = file("{name: vm0, address: \"h:1\"}, {name: vm1, address: \"unix:///s\"}");
    let s = stages(&["--config-file", &ok]).unwrap();
    let got: Vec<(&str, String)> = s
        .engines
        .iter()
        .map(|e| (e.label.as_str(), e.target.to_string()))
        .collect();
    assert_eq!(
        got,
        [("vm0", "h:1".to_string()), ("vm1", "unix:///s".into())]
    );
    let s = stages(&["--config-file", &ok, "-r", "other:5555"]).unwrap();
    assert!(s.engines.is_empty(), "-r given wins");
    let bad = file("{name: a, address: \"h:1\"}, {name: b, address: \"unix://\"}");
    let e = stages(&["--config-file", &bad]).err().unwrap();
    let key = format!("{bad}: sources.dcgm.hostEngines[1].address");
    assert!(
        matches!(&e, Error::EngineAddress { whence, .. } if *whence == key),
        "{e}"
    );
    let twice = file("{name: a, address: \"h:1\"}, {name: b, address: \"h:1\"}");
    let e = stages(&["--config-file", &twice]).err().unwrap();
    assert!(
        matches!(&e, Error::EngineTwice { whence, target } if whence.ends_with("hostEngines[1].address") && target.to_string() == "h:1"),
        "{e}"
    );
}
