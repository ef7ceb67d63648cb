//! The two-way recording rules for dcgm-exporter 4.9.0's and 4.10.0's renames
//! (etc/prometheus/dcgm-rename.rules.yml): they pass the real `promtool check rules` and
//! `promtool test rules`, and they hold every rename of the exporter's own tables
//! (`config::rename`: 4.9.0's for the default counter set, with its conversion, and 4.10.0's
//! four renamed byte rates) in both directions.

use crate::support;
use dcgm_exporter::config::rename::{self, Rename};
use dcgm_exporter::model::naming::base_units::{Op, RENAMED_4_10};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
struct RuleFile {
    groups: Vec<Group>,
}

#[derive(Deserialize)]
struct Group {
    name: String,
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
struct Rule {
    record: String,
    expr: String,
    labels: BTreeMap<String, String>,
}

#[test]
fn the_rename_rules_pass_promtool_check_and_unit_tests() {
    if !support::promtool() {
        return;
    }
    support::prom::check_and_test_rules("dcgm-rename.rules.yml", 52, "dcgm-rename.rules.test.yml");
    let dir = support::repo("etc/prometheus");
    // Rules in 4.8.x names (the HPA recipe) over a 4.8.4 node and a 4.9.0 node.
    let out =
        support::prom::promtool_in(&dir, &["test", "rules", "dcgm-rename-hpa.rules.test.yml"]);
    assert!(out.contains("SUCCESS"), "{out}");
}

/// The conversion a rule applies to its source, as written after the selector.
fn op_of(expr: &str, source: &str) -> String {
    let sel = format!("{source}{{dcgm_renamed=\"\"}}");
    let rest = expr
        .split_once(&sel)
        .unwrap_or_else(|| panic!("{expr} does not read {sel}"))
        .1;
    rest.split(',').next().unwrap().trim().to_string()
}

#[test]
fn the_rules_hold_every_rename_of_the_default_set_both_ways() {
    let text = std::fs::read_to_string(support::repo("etc/prometheus/dcgm-rename.rules.yml"))
        .expect("read rules");
    let file: RuleFile = serde_norway::from_str(&text).expect("parse rules");
    assert_eq!(file.groups.len(), 4);
    let (to_new, to_old) = (&file.groups[0], &file.groups[1]);
    assert_eq!(to_new.name, "dcgm-exporter-4.9-names-from-4.8");
    let csv = std::fs::read_to_string(support::repo("etc/default-counters.csv")).unwrap();
    let mut expected = 0;
    for line in csv
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let mut cols = line.split(',').map(str::trim);
        let (old, ty) = (cols.next().unwrap(), cols.next().unwrap());
        if ty == "label" {
            continue;
        }
        let Some(r) = rename::renamed_in_4_9(old) else {
            continue;
        };
        expected += 1;
        let (new, fwd, back) = match r {
            Rename::Name(m) => (m.name, String::new(), String::new()),
            Rename::Unit(b) => {
                let (f, r) = match b.conv.op {
                    Op::Mega => ("* 1e6", "/ 1e6"),
                    Op::Milli => ("/ 1000", "* 1000"),
                    Op::Percent => ("/ 100", "* 100"),
                    Op::Mebi => ("* 1048576", "/ 1048576"),
                };
                (b.name, f.to_string(), r.to_string())
            }
        };
        let rule = to_new
            .rules
            .iter()
            .find(|r| r.record == new)
            .unwrap_or_else(|| panic!("no rule records {new} from {old}"));
        assert_eq!(op_of(&rule.expr, old), fwd, "{new}");
        assert_eq!(rule.labels["dcgm_renamed"], "from-4.8");
        assert!(rule
            .expr
            .contains("\"DCGM_FI_SYSTEM_DRIVER_VERSION\", \"$1\", \"DCGM_FI_DRIVER_VERSION\""));
        let rule = to_old
            .rules
            .iter()
            .find(|r| r.record == old)
            .unwrap_or_else(|| panic!("no rule records {old} from {new}"));
        assert_eq!(op_of(&rule.expr, new), back, "{old}");
        assert_eq!(rule.labels["dcgm_renamed"], "from-4.9");
    }
    // Every metric row the 4.9.0 notes rename: 11 that keep their field, 11 in base units.
    assert_eq!(expected, 22);
    assert_eq!(to_new.rules.len(), expected);
    assert_eq!(to_old.rules.len(), expected);
}

#[test]
fn the_rules_hold_4_10_0s_renames_both_ways_unconverted() {
    let text = std::fs::read_to_string(support::repo("etc/prometheus/dcgm-rename.rules.yml"))
        .expect("read rules");
    let file: RuleFile = serde_norway::from_str(&text).expect("parse rules");
    let (to_new, to_old) = (&file.groups[2], &file.groups[3]);
    assert_eq!(to_new.name, "dcgm-exporter-4.10-names-from-4.9");
    assert_eq!(to_old.name, "dcgm-exporter-4.9-names-from-4.10");
    for r in RENAMED_4_10 {
        let rule = to_new
            .rules
            .iter()
            .find(|x| x.record == r.name)
            .unwrap_or_else(|| panic!("no rule records {} from {}", r.name, r.legacy_name));
        assert_eq!(op_of(&rule.expr, r.legacy_name), "", "{}", r.name);
        assert_eq!(rule.labels["dcgm_renamed"], "from-4.9");
        // A 4.8.x node's driver label takes 4.9.0's (and 4.10.0's) name.
        assert!(rule
            .expr
            .contains("\"DCGM_FI_SYSTEM_DRIVER_VERSION\", \"$1\", \"DCGM_FI_DRIVER_VERSION\""));
        let rule = to_old
            .rules
            .iter()
            .find(|x| x.record == r.legacy_name)
            .unwrap_or_else(|| panic!("no rule records {} from {}", r.legacy_name, r.name));
        assert_eq!(rule.expr, format!("{}{{dcgm_renamed=\"\"}}", r.name));
        assert_eq!(rule.labels["dcgm_renamed"], "from-4.10");
    }
    assert_eq!(to_new.rules.len(), RENAMED_4_10.len());
    assert_eq!(to_old.rules.len(), RENAMED_4_10.len());
    // Both PCIe rates are in 4.10.0's default set under their new names.
    let csv = std::fs::read_to_string(support::repo("etc/default-counters-4.10.0.csv")).unwrap();
    for r in &RENAMED_4_10[..2] {
        assert!(csv.contains(&format!("\n{},", r.name)), "{}", r.name);
    }
}
