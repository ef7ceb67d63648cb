//! Property-based fuzzing of the simulator's TOML profile parser: any text gives a profile
//! or an error, never a panic; a profile that parses also builds a node the engine can
//! answer about (discovery, MIG, links, values, scheduled faults). 10 000 cases per
//! property (`PROPTEST_CASES` overrides); findings become named tests.

#![forbid(unsafe_code)]

use dcgm_sim::engine::{Engine, ManualClock, Profile};
use dcgm_sim::proto::{Reply, Request};
use proptest::prelude::*;
use proptest::test_runner::Config;

fn cases() -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000),
        failure_persistence: None,
        ..Config::default()
    }
}

/// Mostly small valid numbers, then the limits the parser checks, then far outside.
fn small() -> impl Strategy<Value = i64> {
    prop_oneof![
        40 => 0i64..9,
        4 => prop::sample::select(vec![8i64, 12, 32, 33, 36, 37, 64, 256, 257]),
        1 => prop::sample::select(vec![-1i64, 1025, i64::from(u32::MAX) + 1]),
    ]
}

fn mig_name() -> impl Strategy<Value = String> {
    prop_oneof![
        20 => prop::sample::select(vec!["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"])
            .prop_map(String::from),
        1 => "[0-9]g\\.[0-9]{1,3}gb[+a-z-]{0,3}",
        1 => "[ -~]{0,8}",
    ]
}

fn generator() -> impl Strategy<Value = String> {
    let num = prop_oneof![
        10 => (0u32..1000).prop_map(|n| format!("{n}.0")),
        2 => prop::sample::select(vec!["0.0", "-1.5", "0.5"]).prop_map(String::from),
        1 => prop::sample::select(vec!["1e308", "nan", "inf", "-inf"]).prop_map(String::from),
    ];
    prop_oneof![
        num.clone().prop_map(|v| format!("{{ kind = \"constant\", value = {v} }}")),
        (num.clone(), num.clone(), num.clone(), any::<bool>())
            .prop_map(|(a, b, c, w)| format!("{{ kind = \"ramp\", start = {a}, per_s = {b}, max = {c}, wrap = {w} }}")),
        (num.clone(), num.clone(), num.clone())
            .prop_map(|(a, b, c)| format!("{{ kind = \"sine\", mid = {a}, amplitude = {b}, period_s = {c} }}")),
        (num.clone(), num.clone(), num.clone(), num.clone(), num.clone())
            .prop_map(|(a, b, c, d, e)| format!("{{ kind = \"random_walk\", start = {a}, step = {b}, min = {c}, max = {d}, interval_s = {e} }}")),
        (num.clone(), num.clone())
            .prop_map(|(a, j)| format!("{{ kind = \"counter\", per_s = {a}, jitter = {j} }}")),
        "[a-z ]{0,6}".prop_map(|s| format!("{{ kind = \"string\", value = \"{s}\" }}")),
        prop::sample::select(vec!["blank", "not_found", "not_supported", "not_permissioned", "bogus"])
            .prop_map(|w| format!("{{ kind = \"sentinel\", which = \"{w}\" }}")),
        (-50i32..5).prop_map(|s| format!("{{ kind = \"error\", status = {s} }}")),
        "[ -~]{0,12}".prop_map(|j| format!("{j:?}")),
        "[ -~]{0,12}",
    ]
}

fn fault_line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u32..10, 0u32..100).prop_map(|(g, x)| format!("xid {g} {x}")),
        2 => (0u32..10).prop_map(|g| format!("gpu_lost {g}")),
        2 => (0u32..10).prop_map(|g| format!("gpu_recovered {g}")),
        2 => (0u32..10, 0u32..0x200).prop_map(|(g, m)| format!("clock_event {g} {m:#x}")),
        2 => (0u32..1200).prop_map(|f| format!("not_supported {f}")),
        2 => (0u32..10, 0u32..1200, "[0-9a-z.]{1,5}").prop_map(|(g, f, v)| format!("set {g} {f} {v}")),
        2 => (0u32..10, prop::collection::vec(mig_name(), 0..4)).prop_map(|(g, n)| format!("mig {g} {}", n.join(","))),
        1 => (prop::sample::select(vec!["gpu_lost", "xid", "set", "mig", "explode"]), "[ 0-9a-z.,x-]{0,14}")
            .prop_map(|(v, rest)| format!("{v} {rest}")),
        1 => "[ -~]{0,16}",
    ]
}

/// Mostly `valid`, sometimes anything [`small`] gives.
fn mostly(valid: std::ops::Range<i64>) -> impl Strategy<Value = i64> {
    prop_oneof![30 => valid, 1 => small()]
}

/// A profile assembled from parts that are mostly valid and sometimes just outside.
fn profile_text() -> impl Strategy<Value = String> {
    let gpus = (
        mostly(4..9),
        mostly(0..19),
        mostly(1..9),
        prop::option::of(prop_oneof![20 => 1i64..200_000, 1 => small()]),
        prop::collection::vec((mostly(0..4), mostly(0..36)), 0..3),
        prop_oneof![20 => prop::sample::select(vec!["auto", "nvlink", "pcie"]), 1 => Just("x")],
        any::<bool>(),
        prop_oneof![20 => prop::sample::select(vec![-33, -36]), 1 => prop::sample::select(vec![0, 5])],
    )
        .prop_map(|(count, nvlinks, max_mig, mem, down, p2p, dcp, dcp_err)| {
            let mut t = format!(
                "[gpus]\ncount = {count}\nmodel = \"NVIDIA A100-SXM4-80GB\"\nnvlinks = {nvlinks}\n\
                 max_mig_devices = {max_mig}\np2p = \"{p2p}\"\ndcp = {dcp}\ndcp_error = {dcp_err}\n"
            );
            if let Some(m) = mem {
                t.push_str(&format!("memory_mib = {m}\n"));
            }
            let pairs: Vec<String> = down.iter().map(|(g, l)| format!("[{g}, {l}]")).collect();
            t.push_str(&format!("down_links = [{}]\n", pairs.join(", ")));
            t
        });
    let gpu_overrides = prop::collection::vec(
        (
            mostly(0..4),
            prop::option::of(prop::collection::vec(0i64..5, 0..5)),
            any::<bool>(),
        ),
        0..3,
    )
    .prop_map(|v| {
        v.iter()
            .map(|(id, links, lost)| {
                let mut t = format!("[[gpu]]\nid = {id}\nlost = {lost}\n");
                if let Some(l) = links {
                    let l: Vec<String> = l.iter().map(i64::to_string).collect();
                    t.push_str(&format!("links = [{}]\n", l.join(", ")));
                }
                t
            })
            .collect::<String>()
    });
    let migs = prop::collection::vec(
        (
            mostly(0..4),
            prop::collection::vec(mig_name(), 0..4),
            prop::collection::vec(mostly(1..3), 0..3),
        ),
        0..3,
    )
    .prop_map(|v| {
        v.iter()
            .map(|(gpu, names, cis)| {
                let names: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
                let cis: Vec<String> = cis.iter().map(i64::to_string).collect();
                format!(
                    "[[mig]]\ngpu = {gpu}\ninstances = [{}]\ncompute_instances = [{}]\n",
                    names.join(", "),
                    cis.join(", ")
                )
            })
            .collect::<String>()
    });
    let switches = prop::option::of((mostly(1..5), mostly(1..65))).prop_map(|s| {
        s.map_or(String::new(), |(c, p)| {
            format!("[switches]\ncount = {c}\nports = {p}\n")
        })
    });
    let cpus = prop::option::of((mostly(1..3), mostly(1..9))).prop_map(|s| {
        s.map_or(String::new(), |(c, k)| {
            format!("[cpus]\ncount = {c}\ncores_per_cpu = {k}\n")
        })
    });
    let fields = prop::collection::vec((prop_oneof![8 => prop::sample::select(vec![150u32, 155, 100, 252, 1001, 1009, 50]), 1 => Just(9999), 1 => 0u32..1200], generator()), 0..3)
        .prop_map(|v| {
            v.iter()
                .map(|(id, g)| format!("[[fields]]\nid = {id}\ngen = {g}\n"))
                .collect::<String>()
        });
    let faults = prop::collection::vec(
        (
            prop_oneof![10 => Just(0.0f64), 10 => Just(1.0), 1 => Just(-1.0), 1 => Just(f64::NAN)],
            fault_line(),
        ),
        0..3,
    )
    .prop_map(|v| {
        v.iter()
            .map(|(at, a)| format!("[[faults]]\nat_s = {at:?}\naction = {a:?}\n"))
            .collect::<String>()
    });
    (gpus, gpu_overrides, migs, switches, cpus, fields, faults)
        .prop_map(|(a, b, c, d, e, f, g)| format!("{a}{b}{c}{d}{e}{f}{g}"))
}

/// Everything a client asks of a fresh engine, with time moving on so that the profile's
/// faults fire.
fn exercise(p: Profile) {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let mut e = Engine::with_clock(p, Box::new(clock.clone()));
    let mut entities = Vec::new();
    for group in [1u32, 3, 4, 5, 6, 7, 8] {
        if let Reply::Ids(ids) = e.handle(
            0,
            &Request::GetEntityGroupEntities {
                entity_group: group,
                only_supported: false,
            },
        ) {
            entities.extend(ids.into_iter().take(4).map(|id| (group, id)));
        }
    }
    for req in [
        Request::GetAllDevices {
            only_supported: true,
        },
        Request::GetGpuInstanceHierarchy,
        Request::GetNvLinkLinkStatus,
        Request::GetNvLinkP2PStatus,
        Request::GetCpuHierarchy,
        Request::ProfGetSupportedMetricGroups { gpu_id: 0 },
        Request::GetDeviceAttributes { gpu_id: 0 },
    ] {
        let _ = e.handle(0, &req);
    }
    for _ in 0..2 {
        clock.advance_ms(1500);
        let _ = e.handle(0, &Request::UpdateAllFields { wait: true });
        let _ = e.handle(
            0,
            &Request::EntitiesGetLatestValues {
                entities: entities.clone(),
                field_ids: vec![1, 50, 150, 155, 252, 1001, 1009, 230, 112],
                live: true,
            },
        );
    }
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn any_text_is_a_profile_or_an_error(text in prop_oneof![
        "[ -~\n]{0,80}",
        any::<String>(),
        "\\[gpus\\]\ncount = [0-9]{1,3}\nmodel = \"[ -~]{0,10}\"\n[ -~\n]{0,30}",
    ]) {
        match Profile::parse(&text) {
            Ok(p) => exercise(p),
            Err(e) => prop_assert!(!e.is_empty()),
        }
    }

    #[test]
    fn assembled_profiles_parse_and_run_or_say_which_table_is_wrong(text in profile_text()) {
        match Profile::parse(&text) {
            Ok(p) => exercise(p),
            Err(e) => prop_assert!(!e.is_empty(), "{}", text),
        }
    }
}
