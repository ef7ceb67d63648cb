//! Property-based fuzzing of the exporter's input parsers on the stable toolchain: the
//! counters CSV reader, the device selectors, the Go-style flag pre-processing. Every
//! input must give a value or an error that names its source, never a panic. 10 000
//! cases per property (`PROPTEST_CASES` overrides), each run printing its count
//! (`support/fuzzing.rs`); what a run finds becomes a named regression test. The other
//! parsers of outside input are in `tests/it/fuzz_inputs.rs`.

use crate::support::fuzzing::fuzz;
use dcgm_exporter::config::{cli, counters, selector};
use dcgm_exporter::model::naming::PromType;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::collections::BTreeSet;
use std::ffi::OsString;

// ------------------------------------------------------------------------- counters CSV

/// Field names: real ones (canonical, alias, 1.x, exporter), near misses, ids, junk.
fn field_name() -> impl Strategy<Value = String> {
    let names: Vec<&'static str> = dcgm_sys::fields::FIELDS
        .iter()
        .map(|f| f.name)
        .take(400)
        .collect();
    prop_oneof![
        4 => prop::sample::select(names).prop_map(String::from),
        1 => prop::sample::select(vec![
            "dcgm_gpu_temp", "DCGM_FI_DEV_GPU_TEMP", "DCGM_EXP_XID_ERRORS_COUNT",
            "DCGM_EXP_P2P_STATUS", "DCGM_FI_DRIVER_VERSION", "150", "99999999999999999999",
            "0", "-1", "", " ", "DCGM_FI_UNKNOWN",
        ]).prop_map(String::from),
        1 => "[A-Za-z0-9_ \t\"#]{0,24}",
    ]
}

fn prom_type() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["gauge", "counter", "histogram", "summary", "label"])
            .prop_map(String::from),
        1 => "[a-zA-Z \t\"]{0,10}",
    ]
}

fn help() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 ().%/-]{0,30}",
        // Quoted, with commas, doubled quotes and line breaks inside.
        "[a-zA-Z ,#\n]{0,20}".prop_map(|h| format!("\"{}\"", h.replace('"', "\"\""))),
        // Anything, quotes and separators included.
        "[ -~\t\r\n]{0,30}",
    ]
}

fn csv_line() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (field_name(), " {0,3}", prom_type(), " {0,3}", help())
            .prop_map(|(f, s1, t, s2, h)| format!("{f},{s1}{t},{s2}{h}")),
        1 => "#[ -~]{0,30}",
        1 => Just(String::new()),
        1 => " {1,3}",
        1 => "[ -~\t]{0,40}",
        1 => any::<String>(),
    ]
}

fn csv_text() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(csv_line(), 0..10),
        prop::sample::select(vec!["\n", "\r\n", "\r"]),
        any::<bool>(),
    )
        .prop_map(|(lines, nl, trailing)| {
            let mut t = lines.join(nl);
            if trailing {
                t.push_str(nl);
            }
            t
        })
}

#[test]
fn csv_reader_gives_counters_or_an_error_naming_file_and_line() {
    dcgm_exporter::lifecycle::know_derived_metrics();
    fuzz("counters_csv", csv_text(), |text| {
        let lines = text.split('\n').count();
        match counters::parse_str("f.csv", &text) {
            Ok(c) => {
                prop_assert!(!c.all.is_empty());
                for r in &c.all {
                    prop_assert!(
                        r.line >= 1 && r.line <= lines,
                        "line {} of {}",
                        r.line,
                        lines
                    );
                    prop_assert!(!r.name.is_empty());
                }
                // A label row and a metric row of one name are a label and a metric, both
                // kept (as dcgm-exporter); a row listed again is kept once.
                let names: BTreeSet<(&str, bool)> = c
                    .all
                    .iter()
                    .map(|r| (r.name.as_str(), r.prom_type == PromType::Label))
                    .collect();
                prop_assert_eq!(names.len(), c.all.len(), "each metric and label once");
                for w in &c.warnings {
                    prop_assert!(w.starts_with("f.csv:"), "{}", w);
                }
            }
            Err(e) => {
                let e = e.to_string();
                prop_assert!(e.starts_with("f.csv:"), "{}", e);
                // "file:line: ..." unless the whole file is empty of records.
                let line: Option<usize> = e["f.csv:".len()..]
                    .split(':')
                    .next()
                    .and_then(|n| n.parse().ok());
                prop_assert!(
                    line.is_some_and(|l| l >= 1 && l <= lines)
                        || e == "f.csv: no metrics: every line is empty or a comment",
                    "{}",
                    e
                );
            }
        }
        Ok(())
    });
}

#[test]
fn well_formed_rows_round_trip() {
    dcgm_exporter::lifecycle::know_derived_metrics();
    fuzz(
        "counters_csv_rows",
        prop::collection::vec(
            (
                prop::sample::select(vec![
                    "DCGM_FI_DEV_GPU_TEMP",
                    "DCGM_FI_DEV_SM_CLOCK",
                    "dcgm_power_usage",
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                    "DCGM_EXP_XID_ERRORS_COUNT",
                    "155",
                ]),
                prop::sample::select(vec!["gauge", "counter"]),
                "[a-zA-Z ,\"#\n]{0,20}",
                " {0,2}",
            ),
            1..8,
        ),
        |rows| {
            let mut text = String::new();
            for (f, t, h, pad) in &rows {
                text.push_str(&format!(
                    "{pad}{f}{pad},{pad}{t},\"{}\"\n",
                    h.replace('"', "\"\"")
                ));
            }
            let c = counters::parse_str("f.csv", &text)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut seen = BTreeSet::new();
            let firsts: Vec<&(&str, &str, String, String)> = rows
                .iter()
                .filter(|(f, ..)| {
                    seen.insert(if *f == "155" {
                        "DCGM_FI_DEV_BOARD_POWER_WATTS"
                    } else {
                        f
                    })
                })
                .collect();
            prop_assert_eq!(c.all.len(), firsts.len());
            prop_assert_eq!(c.warnings.len(), rows.len() - firsts.len());
            for (r, (_, t, h, _)) in c.all.iter().zip(firsts) {
                prop_assert_eq!(r.help.as_str(), h.trim_matches(' '));
                prop_assert_eq!(r.prom_type.to_string(), *t);
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------- device selectors

fn ids_text() -> impl Strategy<Value = (String, BTreeSet<u32>)> {
    prop::collection::vec((0u32..300, 0u32..6, any::<bool>()), 1..5).prop_map(|parts| {
        let mut set = BTreeSet::new();
        let text: Vec<String> = parts
            .iter()
            .map(|&(a, len, range)| {
                if range {
                    set.extend(a..=a + len);
                    format!("{a}-{}", a + len)
                } else {
                    set.insert(a);
                    a.to_string()
                }
            })
            .collect();
        (text.join(","), set)
    })
}

#[test]
fn selectors_give_a_selection_or_an_error_naming_flag_and_value() {
    fuzz(
        "device_selector",
        (
            prop::sample::select(vec!["-d", "-s", "-p"]),
            prop_oneof![
                "[fgi:+,0-9 -]{0,16}",
                "[fgi]((:[0-9,-]{0,12})?)(\\+[fgi](:[0-9,-]{0,12})?)?",
                "[ -~]{0,20}",
                any::<String>(),
            ],
        ),
        |(flag, value)| {
            match selector::parse(flag, &value) {
                Ok(s) => prop_assert!(s.flex || s.major.is_some() || s.minor.is_some()),
                Err(e) => prop_assert!(
                    e.to_string().starts_with(&format!("{flag} {value}: ")),
                    "{}",
                    e
                ),
            }
            Ok(())
        },
    );
}

#[test]
fn generated_selectors_select_exactly_their_ids() {
    fuzz(
        "device_selector_ids",
        (
            proptest::option::of(ids_text()),
            proptest::option::of(ids_text()),
            any::<bool>(),
            any::<bool>(),
        ),
        |(g, i, all_g, all_i)| {
            // An empty selector is not a selection: select all GPUs then.
            let all_g = all_g || (g.is_none() && i.is_none() && !all_i);
            let part = |letter: &str, ids: &Option<(String, BTreeSet<u32>)>, all: bool| match ids {
                Some((t, _)) => Some(format!("{letter}:{t}")),
                None if all => Some(letter.to_string()),
                None => None,
            };
            let text: Vec<String> = [part("g", &g, all_g), part("i", &i, all_i)]
                .into_iter()
                .flatten()
                .collect();
            let s = selector::parse("-d", &text.join("+"))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let expect = |ids: &Option<(String, BTreeSet<u32>)>, all: bool| match ids {
                Some((_, set)) => Some(selector::IdSet::Ids(set.clone())),
                None if all => Some(selector::IdSet::All),
                None => None,
            };
            prop_assert!(!s.flex);
            prop_assert_eq!(s.major, expect(&g, all_g));
            prop_assert_eq!(s.minor, expect(&i, all_i));
            Ok(())
        },
    );
}

// ---------------------------------------------------------------- flag pre-processing

/// Flags as users write them: Go spellings of real flags, values, junk.
fn arg() -> impl Strategy<Value = String> {
    let longs = vec![
        "collectors",
        "address",
        "collect-interval",
        "kubernetes",
        "use-old-namespace",
        "cpu-devices",
        "remote-hostengine-info",
        "devices",
        "no-hostname",
        "switch-devices",
        "xid-count-window-size",
        "replace-blanks-in-model-name",
        "debug",
        "clock-events-count-window-size",
        "log-format",
        "dcgm-log-level",
        "compute-instances",
        "rbmn",
        "f",
        "a",
        "c",
        "k",
        "o",
        "p",
        "r",
        "d",
        "n",
        "s",
        "x",
        "v",
        "h",
        "help",
    ];
    prop_oneof![
        3 => (prop::sample::select(vec!["-", "--"]), prop::sample::select(longs.clone()))
            .prop_map(|(d, n)| format!("{d}{n}")),
        3 => (
            prop::sample::select(vec!["-", "--"]),
            prop::sample::select(longs),
            prop::sample::select(vec!["true", "false", "1", "0", "x", "", "-1", "99999999999999999999", "g:0", ":9400", "json"]),
        )
            .prop_map(|(d, n, v)| format!("{d}{n}={v}")),
        2 => prop::sample::select(vec!["true", "false", "1", "x.csv", ":9400", "-", "--", "---", "-=", "--=x", "g+i", "f"])
            .prop_map(String::from),
        1 => "[ -~]{0,12}",
    ]
}

fn argv(args: &[String]) -> Vec<OsString> {
    std::iter::once(OsString::from("dcgm-exporter"))
        .chain(args.iter().map(OsString::from))
        .collect()
}

#[test]
fn any_command_line_parses_or_is_refused_without_a_panic() {
    fuzz("command_line", prop::collection::vec(arg(), 0..6), |args| {
        match cli::parse_from(argv(&args)) {
            Ok(_) => {}
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        Ok(())
    });
}

#[test]
fn normalising_twice_changes_nothing() {
    fuzz(
        "command_line_normalise",
        prop::collection::vec(arg(), 0..6),
        |args| {
            let once = cli::normalize_args(argv(&args));
            let twice = cli::normalize_args(once.clone());
            prop_assert_eq!(once, twice);
            Ok(())
        },
    );
}

#[test]
fn go_spellings_of_one_flag_parse_alike() {
    fuzz(
        "command_line_spellings",
        (
            prop::sample::select(vec![
                ("collectors", "f"),
                ("address", "a"),
                ("collect-interval", "c"),
                ("devices", "d"),
                ("switch-devices", "s"),
                ("cpu-devices", "p"),
                ("xid-count-window-size", "x"),
                ("remote-hostengine-info", "r"),
                ("log-format", ""),
                ("dcgm-log-level", ""),
            ]),
            prop_oneof!["[a-z0-9:.+,-]{1,10}", Just("-k".to_string())],
            (0usize..6, 0usize..5),
        ),
        |(name, value, pick)| {
            let (long, short) = name;
            let mut spellings = vec![
                vec![format!("--{long}"), value.clone()],
                vec![format!("-{long}"), value.clone()],
                vec![format!("--{long}={value}")],
                vec![format!("-{long}={value}")],
            ];
            if !short.is_empty() {
                spellings.push(vec![format!("-{short}"), value.clone()]);
                spellings.push(vec![format!("-{short}={value}")]);
            }
            let n = spellings.len();
            let a = pick.0 % n;
            let b = (a + 1 + pick.1 % (n - 1)) % n;
            let parsed = |args: &[String]| match cli::parse_from(argv(args)) {
                Ok(c) => format!("{c:?}"),
                Err(e) => format!("error: {e}"),
            };
            prop_assert_eq!(parsed(&spellings[a]), parsed(&spellings[b]));
            Ok(())
        },
    );
}
