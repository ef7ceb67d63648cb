use super::*;

fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.yaml");
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

#[test]
fn globs() {
    assert!(glob_match("DCGM_FI_DEV_POWER_*", "DCGM_FI_DEV_POWER_USAGE"));
    assert!(glob_match("*", "X"));
    assert!(glob_match("DCGM_FI_DEV_?PU_TEMP", "DCGM_FI_DEV_GPU_TEMP"));
    assert!(glob_match("*TEMP*", "DCGM_FI_DEV_GPU_TEMP"));
    assert!(!glob_match("DCGM_FI_DEV_POWER_*", "DCGM_FI_DEV_GPU_TEMP"));
    assert!(!glob_match("DCGM", "DCGM_FI"));
}

#[test]
fn a_full_file() {
    let (_d, p) = write(
        "version: 1\nmetrics:\n  file: c.csv\ncollection:\n  interval: 2s\n  watchGroups:\n    - name: power\n      interval: 250ms\n      fields: [\"DCGM_FI_DEV_POWER_*\"]\n    - name: temp\n      interval: 100\n      fields: [DCGM_FI_DEV_GPU_TEMP]\n",
    );
    let fs = read(&p).unwrap();
    assert_eq!(fs.counters_file, Some(p.parent().unwrap().join("c.csv")));
    assert_eq!(fs.interval_ms, Some(2000));
    assert_eq!(
        fs.watch_groups
            .iter()
            .map(|g| (g.name.as_str(), g.interval_ms))
            .collect::<Vec<_>>(),
        [("power", 250), ("temp", 100)]
    );
}

#[test]
fn the_backend_comes_from_the_file_unless_given_explicitly() {
    use crate::config::cli::Backend;
    for schema in [1, 2] {
        let (_d, p) = write(&format!("version: {schema}\nbackend: nvml\n"));
        let path = p.display().to_string();
        let mut c = crate::config::cli::parse_from(["x", "--config-file", &path]).unwrap();
        assert_eq!(c.backend, Backend::Auto);
        apply(&mut c).unwrap();
        assert_eq!(c.backend, Backend::Nvml);
        let mut c =
            crate::config::cli::parse_from(["x", "--config-file", &path, "--backend", "dcgm"])
                .unwrap();
        apply(&mut c).unwrap();
        assert_eq!(c.backend, Backend::Dcgm);
    }
    let (_d, p) = write("version: 2\nbackend: nvlm\n");
    let e = read(&p).unwrap_err();
    assert!(
        matches!(e.problem(), Some(Problem::Value { key, why }) if key == "backend" && why.contains("nvlm")),
        "{e}"
    );
}

#[test]
fn low_cardinality_comes_from_the_file_unless_given_explicitly() {
    for schema in [1, 2] {
        let (_d, p) = write(&format!("version: {schema}\nlowCardinality: true\n"));
        let path = p.display().to_string();
        let mut c = crate::config::cli::parse_from(["x", "--config-file", &path]).unwrap();
        assert!(!c.low_cardinality);
        apply(&mut c).unwrap();
        assert!(c.low_cardinality);
        let mut c = crate::config::cli::parse_from([
            "x",
            "--config-file",
            &path,
            "--low-cardinality=false",
        ])
        .unwrap();
        apply(&mut c).unwrap();
        assert!(!c.low_cardinality);
    }
    let (_d, p) = write("version: 2\nlowCardinality: often\n");
    let e = read(&p).unwrap_err();
    assert!(matches!(e.problem(), Some(Problem::Yaml(_))), "{e}");
    assert!(e.to_string().contains("lowCardinality"), "{e}");
}

#[test]
fn the_emulated_version_comes_from_the_file_unless_given_explicitly() {
    let (_d, p) = write("version: 1\nemulateVersion: 4.8.2\n");
    assert_eq!(read(&p).unwrap().emulate, Some(UpstreamVersion::V4_8_2));
    let path = p.display().to_string();
    let mut c = crate::config::cli::parse_from(["x", "--config-file", &path]).unwrap();
    apply(&mut c).unwrap();
    assert_eq!(c.emulate_version, UpstreamVersion::V4_8_2);
    let mut c =
        crate::config::cli::parse_from(["x", "--config-file", &path, "--emulate-version=4.9.0"])
            .unwrap();
    apply(&mut c).unwrap();
    assert_eq!(c.emulate_version, UpstreamVersion::V4_9_0);
}

fn parse_text(text: &str) -> Result<FileSettings, Error> {
    let (_d, p) = write(text);
    read(&p)
}

/// The cases of upstream 4.8.4's `internal/pkg/appconfig/yaml_config_test.go`
/// (TestParseYAMLConfig, TestParseYAMLConfigRejectsInvalidMaxConcurrentScrapes,
/// TestParseYAMLConfigRejects{V1CollectionInV2,V2CollectionsInV1,V2WatchSettingsInV1}),
/// with the part of upstream's message each error must contain.
#[test]
fn upstreams_parse_cases() {
    let ok = [
        "version: 2\nsources:\n  dcgm:\n    detectBindUnbind:\n      enabled: true\n      pollInterval: 250ms\n",
        "version: 2\nmetrics:\n  file: /etc/dcgm-exporter/default-counters.csv\ncollections:\n  - name: scrape\n    every: 45s\n    metrics:\n      include: [\"*\"]\n",
        "version: 2\nmetrics:\n  enableExporterMetrics: false\n",
        "version: 2\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: GPU temperature.\n",
        "version: 1\ncollection:\n  interval: 30s\n  retention:\n    maxAge: 10m\n    maxSamples: 0\n  watchGroups:\n    - name: fast-thermals\n      interval: 5s\n      retention:\n        maxAge: 0s\n        maxSamples: 2\n      fields:\n        - DCGM_FI_DEV_GPU_TEMP\n",
        "version: 1\nsources:\n  dcgm:\n    detectBindUnbind: {}\n",
        "version: 2\nserver:\n  maxConcurrentScrapes: 8\n",
    ];
    for text in ok {
        parse_text(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    }
    let bad = [
        ("version: 2\nmetrics:\n  configMap:\n    namespace: default\n", "unknown field `configMap`"),
        ("version: 1\nsources:\n  dcgm:\n    enableBindUnbindWatch: true\n", "unknown field `enableBindUnbindWatch`"),
        ("version: 1\nserver:\n  gpu:\n    detectBindUnbind: true\n", "unknown field `gpu`"),
        ("version: 1\nsources:\n  dcgm:\n    detectBindUnbind:\n      pollInterval: 0s\n", "sources.dcgm.detectBindUnbind.pollInterval must be greater than 0"),
        ("version: 2\nunknown: true\n", "unknown field `unknown`"),
        ("metrics:\n  file: /tmp/counters.csv\n", "1 or 2"),
        ("version: 2\nmetrics:\n  file: /tmp/counters.csv\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: GPU temperature.\n", "exactly one"),
        ("version: 2\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: GPU temperature.\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: counter\n      help: Duplicate.\n", "duplicates metrics.fields"),
        ("version: 2\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: GPU temperature.\n    - name: \"  DCGM_FI_DEV_GPU_TEMP  \"\n      prometheusType: counter\n      help: Duplicate.\n", "duplicates metrics.fields"),
        ("version: 2\nmetrics:\n  file: /tmp/counters.csv\n  file: /tmp/other-counters.csv\n", "duplicate"),
        ("version: 2\n? [metrics]\n: value\n", "line 2"),
        ("version: 2\ncollections:\n  - name: scrape\n    every: 30000\n    metrics:\n      include: [\"*\"]\n", "missing unit"),
        ("version: 2\ncollections:\n  - name: scrape\n    every: 500us\n    metrics:\n      include: [\"*\"]\n", "whole milliseconds"),
        ("version: 2\ncollections:\n  - name: scrape\n    every: 1s\n    metrics:\n      include: [\"*\"]\n  - name: slow\n    every: 20000000000000000ms\n    metrics:\n      include: [DCGM_FI_DEV_GPU_TEMP]\n", "collections[1].every: '20000000000000000ms' is out of range"),
        ("version: 1\ncollection:\n  watchGroups:\n    - {name: g, interval: 20000000000000000, fields: [DCGM_FI_DEV_GPU_TEMP]}\n", "collection.watchGroups[0].interval: 20000000000000000 ms is too large"),
        ("version: 1\ncollection:\n  interval: 9223372036854776\n", "collection.interval: 9223372036854776 ms is too large (at most 9223372036854775 milliseconds)"),
        ("version: 2\ncollections:\n  - name: scrape\n    every: 30s\n    metrics: {}\n", "collections[0].metrics.include must not be empty"),
        ("version: 2\ncollections:\n  - name: scrape\n    every: 30s\n    metrics:\n      include: []\n", "collections[0].metrics.include must not be empty"),
        ("version: 2\nserver:\n  maxConcurrentScrapes: 0\n", "server.maxConcurrentScrapes must be greater than 0"),
        ("version: 2\nserver:\n  maxConcurrentScrapes: -1\n", "server.maxConcurrentScrapes must be greater than 0"),
        // Mixing the schemas is refused both ways.
        ("version: 2\ncollection:\n  interval: 30s\n", "unknown field `collection`"),
        ("version: 1\ncollections:\n  - name: scrape\n    every: 30s\n    metrics:\n      include: [\"*\"]\n", "unknown field `collections`"),
        ("version: 1\nsources:\n  dcgm:\n    watch:\n      maxKeepAge: 10m\n", "unknown field `watch`"),
        // FuzzParseYAMLConfig's seed: several documents.
        ("version: 2\n---\nversion: 2\n", "multiple YAML documents"),
    ];
    for (text, needle) in bad {
        let e = parse_text(text).expect_err(text).to_string();
        assert!(e.contains(needle), "{text}\n=> {e}\n(want {needle:?})");
    }
}

/// The rest of yaml_config.go's rules: names, retention limits, the one all-fields
/// collection, detectBindUnbind only exporter-wide.
#[test]
fn collection_and_retention_rules() {
    type Is = fn(&Problem) -> bool;
    let bad: [(&str, Is); 15] = [
        ("version: 2\ncollections: []\n", |p| matches!(p, Problem::NoCollections)),
        ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: [\"*\"]}}\n  - {name: b, every: 2s, metrics: {include: [\"*\"]}}\n", |p| matches!(p, Problem::DuplicateDefault { key, first } if key == "collections[1].metrics.include" && first == "a")),
        ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: [DCGM_FI_DEV_GPU_TEMP]}}\n  - {name: a, every: 2s, metrics: {include: [DCGM_FI_DEV_POWER_USAGE]}}\n", |p| matches!(p, Problem::DuplicateGroup { key, name } if key == "collections[1]" && name == "a")),
        ("version: 2\ncollections:\n  - {every: 1s, metrics: {include: [\"*\"]}}\n", |p| matches!(p, Problem::Required { key } if key == "collections[0].name")),
        ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: [\" \"]}}\n", |p| matches!(p, Problem::Required { key } if key == "collections[0].metrics.include[0]")),
        ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: [X]}, sources: {dcgm: {watch: {maxKeepAge: 0s, maxKeepSamples: 0}}}}\n", |p| matches!(p, Problem::NoSuchField { pattern, .. } if pattern == "X")),
        ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: [\"*\"]}, sources: {dcgm: {watch: {maxKeepAge: 0s, maxKeepSamples: 0}}}}\n", |p| matches!(p, Problem::KeepsNothing { .. })),
        ("version: 2\ncollections:\n  - {name: a, every: 1s, metrics: {include: [\"*\"]}, sources: {dcgm: {detectBindUnbind: {enabled: true}}}}\n", |p| matches!(p, Problem::Yaml(e) if e.to_string().contains("unknown field `detectBindUnbind`"))),
        ("version: 2\nsources:\n  dcgm:\n    watch: {maxKeepAge: -1s}\n", |p| matches!(p, Problem::Value { key, .. } if key == "sources.dcgm.watch.maxKeepAge")),
        ("version: 2\nsources:\n  dcgm:\n    watch: {maxKeepSamples: -1}\n", |p| matches!(p, Problem::Negative { key } if key == "sources.dcgm.watch.maxKeepSamples")),
        ("version: 2\nsources:\n  dcgm:\n    watch: {maxKeepSamples: 2147483648}\n", |p| matches!(p, Problem::TooMany { key } if key == "sources.dcgm.watch.maxKeepSamples")),
        ("version: 1\ncollection:\n  watchGroups:\n    - {name: g, interval: 1s, fields: [DCGM_FI_DEV_GPU_TEMP], retention: {maxAge: 0s, maxSamples: 0}}\n", |p| matches!(p, Problem::KeepsNothing { key, age: "maxAge", samples: "maxSamples" } if key == "collection.watchGroups[0].retention")),
        ("version: 1\ncollection:\n  watchGroups:\n    - {name: g, interval: 1s, fields: [DCGM_FI_DEV_GPU_TEMP]}\n    - {name: g, interval: 2s, fields: [DCGM_FI_DEV_POWER_USAGE]}\n", |p| matches!(p, Problem::DuplicateGroup { key, name } if key == "collection.watchGroups[1]" && name == "g")),
        ("version: 2\nmetrics: {}\n", |p| matches!(p, Problem::NoMetrics)),
        ("version: 2\nmetrics:\n  fields:\n    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge}\n", |p| matches!(p, Problem::Required { key } if key == "metrics.fields[0].help")),
    ];
    for (text, is) in bad {
        let e = parse_text(text).expect_err(text);
        assert!(e.problem().is_some_and(is), "{text}\n=> {e:?}");
    }
    // TestYAMLConfigApplyToCollections / TestYAMLConfigApplyToWatchRetention: the
    // all-fields collection sets the interval and (over sources.dcgm.watch) the
    // retention; the others become watch groups with their own retention.
    let fs = parse_text(
        "version: 2\nsources:\n  dcgm:\n    watch:\n      maxKeepAge: 2m\n      maxKeepSamples: 5\ncollections:\n  - name: scrape\n    every: 45s\n    sources: {dcgm: {watch: {maxKeepSamples: 4}}}\n    metrics:\n      include: [\"*\"]\n  - name: fast-thermals\n    every: 5s\n    sources:\n      dcgm:\n        watch:\n          maxKeepAge: 0s\n          maxKeepSamples: 2\n    metrics:\n      include:\n        - DCGM_FI_DEV_GPU_TEMP\n        - DCGM_FI_DEV_POWER_USAGE\n",
    )
    .unwrap();
    assert_eq!((fs.schema, fs.interval_ms), (2, Some(45_000)));
    assert_eq!(
        fs.retention,
        Retention {
            age_s: Some(120.0),
            samples: Some(4)
        }
    );
    assert_eq!(
        fs.watch_groups,
        [WatchGroup {
            name: "fast-thermals".into(),
            interval_ms: 5000,
            fields: vec![
                "DCGM_FI_DEV_GPU_TEMP".into(),
                "DCGM_FI_DEV_POWER_USAGE".into()
            ],
            keep_age_s: Some(0.0),
            keep_samples: Some(2),
        }]
    );
}

fn applied(text: &str, args: &[&str]) -> Result<(Config, FileSettings), Error> {
    let (_d, p) = write(text);
    let path = p.display().to_string();
    let argv: Vec<&str> = ["x", "--config-file", &path]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    let mut c = crate::config::cli::parse_from(argv).unwrap();
    let fs = apply(&mut c)?;
    Ok((c, fs))
}

/// TestYAMLConfigApplyTo{GPUBindUnbindDetection,MaxConcurrentScrapes,
/// EnableExporterMetrics} and TestContextToConfigGPUBindUnbindCLIOverridesYAML: the
/// file sets what no flag set explicitly.
#[test]
fn version_2_and_extended_version_1_apply_unless_a_flag_was_given() {
    for text in [
        "version: 2\nsources:\n  dcgm:\n    detectBindUnbind: {enabled: true, pollInterval: 250ms}\n    watch: {maxKeepAge: 2m, maxKeepSamples: 5}\nserver: {maxConcurrentScrapes: 8}\nmetrics: {enableExporterMetrics: true}\n",
        "version: 1\nsources:\n  dcgm:\n    detectBindUnbind: {enabled: true, pollInterval: 250ms}\nserver: {maxConcurrentScrapes: 8}\nmetrics: {enableExporterMetrics: true}\ncollection:\n  retention: {maxAge: 2m, maxSamples: 5}\n",
    ] {
        let (c, _) = applied(text, &[]).unwrap();
        assert!(c.enable_gpu_bind_unbind_watch && c.enable_exporter_metrics, "{text}");
        assert_eq!(c.gpu_bind_unbind_poll_interval, "250ms");
        assert_eq!(c.max_concurrent_scrapes, 8);
        assert_eq!((c.watch_max_keep_age.as_str(), c.watch_max_keep_samples), ("120s", 5));
        assert!(c.is_set("watch-max-keep-age") && !c.is_explicit("watch-max-keep-age"));
        let (c, _) = applied(
            text,
            &[
                "--enable-gpu-bind-unbind-watch=false",
                "--max-concurrent-scrapes=3",
                "--watch-max-keep-age=30s",
            ],
        )
        .unwrap();
        assert!(!c.enable_gpu_bind_unbind_watch);
        assert_eq!(c.max_concurrent_scrapes, 3);
        assert_eq!((c.watch_max_keep_age.as_str(), c.watch_max_keep_samples), ("30s", 5));
    }
}

/// 4.8.2 had no configuration file; we read 4.8.3's version 1 there (ours), never 4.8.4's
/// additions.
#[test]
fn emulating_4_8_2_reads_only_the_original_version_1() {
    let v2 = "version: 2\nserver: {maxConcurrentScrapes: 8}\n";
    let e = applied(v2, &["--emulate-version=4.8.2"]).unwrap_err();
    assert!(
        matches!(
            e.problem(),
            Some(Problem::SchemaForRelease(UpstreamVersion::V4_8_2))
        ),
        "{e}"
    );
    let e = applied(
        "version: 1\nserver: {maxConcurrentScrapes: 8}\n",
        &["--emulate-version=4.8.2"],
    )
    .unwrap_err();
    assert!(
        matches!(
            e.problem(),
            Some(Problem::KeyForRelease {
                key: "server",
                release: UpstreamVersion::V4_8_2
            })
        ),
        "{e}"
    );
    // The file's own emulateVersion counts, as the flag does.
    let e = applied(
        "version: 2\nemulateVersion: 4.8.2\nserver: {maxConcurrentScrapes: 8}\n",
        &[],
    )
    .unwrap_err();
    assert!(
        matches!(e.problem(), Some(Problem::SchemaForRelease(_))),
        "{e}"
    );
    let (c, _) = applied(
        "version: 1\ncollection: {interval: 2s}\n",
        &["--emulate-version=4.8.2"],
    )
    .unwrap();
    assert_eq!(c.collect_interval, 2000);
    applied(v2, &[]).unwrap();
}

#[test]
fn inline_fields_resolve_like_csv_rows() {
    let (_d, p) = write(
        "version: 1\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: \"Temp, in C.\"\n    - {name: dcgm_power_usage, prometheusType: gauge, help: p}\n",
    );
    assert!(read(&p).unwrap().inline_fields);
    let c = load_counters(&p, true, UpstreamVersion::default()).unwrap();
    assert_eq!(c.all.len(), 2);
    assert_eq!(c.all[0].help, "Temp, in C.");
    assert_eq!(c.all[1].name, "dcgm_power_usage");
}

#[test]
fn errors_name_the_file_key_and_line() {
    let err = |text: &str| {
        let (_d, p) = write(text);
        let e = read(&p).unwrap_err();
        assert!(
            matches!(&e, Error::File { file, .. } if *file == p.display().to_string()),
            "{e}"
        );
        e
    };
    // The parser's own messages name the key and the line.
    let yaml = |e: &Error, needles: &[&str]| {
        let text = e.to_string();
        matches!(e.problem(), Some(Problem::Yaml(_))) && needles.iter().all(|n| text.contains(n))
    };
    let e = err("version: 1\nmetrics:\n  fiels: []\n");
    assert!(yaml(&e, &["unknown field `fiels`", "line 3"]), "{e}");
    let e = err("version: 1\ncollection:\n  interval: [1]\n");
    assert!(
        yaml(&e, &["collection.interval"]) || yaml(&e, &["line 3"]),
        "{e}"
    );
    let e = err("version: 1\ncollection:\n  interval: soon\n");
    assert!(
        matches!(e.problem(), Some(Problem::Value { key, why }) if key == "collection.interval" && why.contains("soon")),
        "{e}"
    );
    let e = err("version: 3\n");
    assert!(
        matches!(e.problem(), Some(Problem::Version(v)) if v == "3"),
        "{e}"
    );
    let e = err("metrics: {}\n");
    assert!(matches!(e.problem(), Some(Problem::NoVersion)), "{e}");
    let e = err(
        "version: 1\nmetrics:\n  fields:\n    - {name: DCGM_FI_NOPE, prometheusType: gauge, help: h}\n",
    );
    assert!(
        matches!(e.problem(), Some(Problem::Field { index: 0, name, .. }) if name == "DCGM_FI_NOPE"),
        "{e}"
    );
    let e = err("version: 1\nmetrics:\n  fields:\n    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: meter, help: h}\n");
    assert!(
        matches!(e.problem(), Some(Problem::Field { index: 0, message, .. }) if message.contains("meter")),
        "{e}"
    );
    let e = err("version: 1\ncollection:\n  watchGroups:\n    - {name: x, interval: 1s, fields: [NOPE_*]}\n");
    assert!(
        matches!(e.problem(), Some(Problem::NoSuchField { key, pattern }) if key == "collection.watchGroups[0].fields" && pattern == "NOPE_*"),
        "{e}"
    );
    let e = err("version: 1\nmetrics:\n  file: a.csv\n  fields: [{name: X, prometheusType: gauge, help: h}]\n");
    assert!(matches!(e.problem(), Some(Problem::FileAndFields)), "{e}");
    let e = err("version: 1\nemulateVersion: 4.8.3\n");
    assert!(
        matches!(e.problem(), Some(Problem::Value { key, why }) if key == "emulateVersion" && why.contains("4.8.2, 4.8.4, 4.9.0 or 4.10.0")),
        "{e}"
    );
    let e = err("version: 1\nextra: 1\n");
    assert!(yaml(&e, &["unknown field `extra`", "line 2"]), "{e}");
}

/// The words of the file's errors: the file, the key, then what is wrong with it.
#[test]
fn file_errors_read_file_key_then_problem() {
    let e = Error::at(
        "c.yaml",
        Problem::EngineNameTaken {
            key: "sources.dcgm.hostEngines[1]".into(),
            name: "a".into(),
            first: 0,
        },
    );
    assert_eq!(
        e.to_string(),
        "c.yaml: sources.dcgm.hostEngines[1].name: \"a\" is already the name of sources.dcgm.hostEngines[0]"
    );
    let key = "collection.interval".to_string();
    let e = Error::at(
        "c.yaml",
        Problem::TooLarge {
            key,
            ms: 9223372036854776,
        },
    );
    assert_eq!(
        e.to_string(),
        "c.yaml: collection.interval: 9223372036854776 ms is too large (at most 9223372036854775 milliseconds)"
    );
}

/// `sources.dcgm.hostEngines` (ours), in both schemas: each engine's name and address in
/// order; a missing name or address, a repeated name or an empty list is an error naming
/// the key.
#[test]
fn host_engines_are_listed_with_a_name_each() {
    for version in [1, 2] {
        let text = format!(
            "version: {version}\nsources:\n  dcgm:\n    hostEngines:\n      - {{name: vm0, address: \"10.0.0.1:5555\"}}\n      - {{name: vm1, address: unix:///run/vm1.sock}}\n"
        );
        let fs = parse_text(&text).unwrap();
        let got: Vec<(&str, &str, &str)> = fs
            .host_engines
            .iter()
            .map(|e| (e.name.as_str(), e.address.as_str(), e.key.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("vm0", "10.0.0.1:5555", "sources.dcgm.hostEngines[0]"),
                ("vm1", "unix:///run/vm1.sock", "sources.dcgm.hostEngines[1]")
            ]
        );
    }
    type Is = fn(&Problem) -> bool;
    let bad: [(&str, Is); 5] = [
        ("[]", |p| matches!(p, Problem::NoHostEngines)),
        (
            "[{name: a}]",
            |p| matches!(p, Problem::Missing { key } if key == "sources.dcgm.hostEngines[0].address"),
        ),
        (
            "[{address: \"h:1\"}]",
            |p| matches!(p, Problem::Missing { key } if key == "sources.dcgm.hostEngines[0].name"),
        ),
        (
            "[{name: a, address: \"h:1\"}, {name: a, address: \"h:2\"}]",
            |p| matches!(p, Problem::EngineNameTaken { key, name, first: 0 } if key == "sources.dcgm.hostEngines[1]" && name == "a"),
        ),
        (
            "[{name: a, address: \"h:1\", port: 2}]",
            |p| matches!(p, Problem::Yaml(e) if e.to_string().contains("unknown field `port`")),
        ),
    ];
    for (list, is) in bad {
        let text = format!("version: 2\nsources: {{dcgm: {{hostEngines: {list}}}}}\n");
        let e = parse_text(&text).unwrap_err();
        assert!(e.problem().is_some_and(is), "{list}: {e:?}");
    }
}

#[test]
fn aggregation_comes_from_the_file_unless_given_explicitly() {
    for schema in [1, 2] {
        let (_d, p) = write(&format!(
            "version: {schema}\naggregate:\n  fields: [DCGM_FI_DEV_POWER_USAGE, \"DCGM_FI_DEV_*_TEMP\", \"100\"]\n  period: 250ms\n"
        ));
        let path = p.display().to_string();
        let mut c = crate::config::cli::parse_from(["x", "--config-file", &path]).unwrap();
        assert_eq!(
            (c.aggregate.as_str(), c.aggregate_period.as_str()),
            ("", "1s")
        );
        apply(&mut c).unwrap();
        assert_eq!(
            c.aggregate,
            "DCGM_FI_DEV_POWER_USAGE,DCGM_FI_DEV_*_TEMP,100"
        );
        assert_eq!(c.aggregate_period, "250ms");
        let mut c = crate::config::cli::parse_from([
            "x",
            "--config-file",
            &path,
            "--aggregate",
            "DCGM_FI_DEV_SM_CLOCK",
        ])
        .unwrap();
        apply(&mut c).unwrap();
        assert_eq!(c.aggregate, "DCGM_FI_DEV_SM_CLOCK");
        assert_eq!(c.aggregate_period, "250ms");
    }
    type Is = fn(&Problem) -> bool;
    let bad: [(&str, Is); 3] = [
        (
            "aggregate:\n  fields: [\"a,b\"]\n",
            |p| matches!(p, Problem::NotOneField { field } if field == "a,b"),
        ),
        (
            "aggregate:\n  fields: [x]\n  period: soon\n",
            |p| matches!(p, Problem::Value { key, .. } if key == "aggregate.period"),
        ),
        (
            "aggregate:\n  field: [x]\n",
            |p| matches!(p, Problem::Yaml(e) if e.to_string().contains("field")),
        ),
    ];
    for (text, is) in bad {
        let (_d, p) = write(&format!("version: 2\n{text}"));
        let e = read(&p).unwrap_err();
        assert!(e.problem().is_some_and(is), "{e:?}");
    }
}

/// Upstream's start-up rule for watch groups: each matches a configured field, no field is
/// in two.
#[test]
fn watch_groups_must_fit_the_counters() {
    let counters = counters::parse_str(
        "t.csv",
        "DCGM_FI_DEV_GPU_TEMP, gauge, h\nDCGM_FI_DEV_POWER_USAGE, gauge, h\n",
    )
    .unwrap();
    let group = |name: &str, fields: &[&str]| WatchGroup {
        name: name.into(),
        interval_ms: 1000,
        fields: fields.iter().map(|f| f.to_string()).collect(),
        keep_age_s: None,
        keep_samples: None,
    };
    assert!(check_watch_groups(&[group("t", &["DCGM_FI_DEV_GPU_TEMP"])], &counters).is_ok());
    let e = check_watch_groups(&[group("c", &["DCGM_FI_DEV_SM_CLOCK"])], &counters).unwrap_err();
    assert!(
        matches!(&e, Problem::GroupMatchesNothing { group, patterns } if group == "c" && patterns == "DCGM_FI_DEV_SM_CLOCK"),
        "{e}"
    );
    let both = [group("a", &["DCGM_FI_DEV_*"]), group("b", &["*_TEMP"])];
    let e = check_watch_groups(&both, &counters).unwrap_err();
    assert!(
        matches!(&e, Problem::FieldInTwoGroups { field, first, second } if field == "DCGM_FI_DEV_GPU_TEMP" && first == "a" && second == "b"),
        "{e}"
    );
}
