//! `--help` and the flag table of docs/configuration.md describe the same flags: every flag of one is in
//! the other, with the same environment variable and default.

use std::collections::BTreeMap;

#[derive(Debug, Default, PartialEq)]
struct Flag {
    env: Option<String>,
    default: Option<String>,
}

/// `--long` → env and default, from `dcgm-exporter --help`.
fn from_help() -> BTreeMap<String, Flag> {
    // Without this process's environment: a set variable shows in --help as its value.
    let out = crate::support::output_within(
        std::process::Command::new(env!("CARGO_BIN_EXE_dcgm-exporter"))
            .env_clear()
            .arg("--help"),
        crate::support::QUICK,
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let t = line.trim_start();
        // Option lines are indented 2 or 6 spaces, their descriptions 10.
        if t.starts_with('-') && line.len() - t.len() <= 6 {
            let long = t.split_whitespace().find(|w| w.starts_with("--")).map(|w| {
                w.trim_start_matches("--")
                    .split(['[', '=', ' '])
                    .next()
                    .unwrap()
                    .to_string()
            });
            current = long;
            if let Some(l) = &current {
                flags.insert(l.clone(), Flag::default());
            }
            continue;
        }
        let Some(l) = &current else { continue };
        let f = flags.get_mut(l).unwrap();
        if let Some(env) = t.split("[env: ").nth(1) {
            f.env = Some(env.split('=').next().unwrap().to_string());
        }
        if let Some(d) = t.split("[default: ").nth(1) {
            let d = d.split(']').next().unwrap();
            f.default = Some(if d == "\"\"" {
                String::new()
            } else {
                d.to_string()
            });
        }
    }
    flags.remove("help");
    flags
}

/// The flag table of docs/configuration.md: each `--long` in the first column; env and default when the
/// row has a single flag.
fn from_readme() -> BTreeMap<String, Option<Flag>> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    let table = text
        .split("\n## Flags\n")
        .nth(1)
        .expect("a Flags section")
        .split("\n## ")
        .next()
        .unwrap();
    let mut flags = BTreeMap::new();
    for row in table.lines().filter(|l| l.starts_with("| `--")) {
        let cols: Vec<&str> = row.split('|').skip(1).map(str::trim).collect();
        let names: Vec<String> = cols[0]
            .split('`')
            .filter(|p| p.starts_with("--"))
            .map(|p| p.trim_start_matches("--").to_string())
            .collect();
        let code = |c: &str| c.trim().trim_matches('`').to_string();
        let single = names.len() == 1 && cols[2] != "as dcgm-exporter";
        for n in &names {
            let entry = single.then(|| Flag {
                env: Some(code(cols[2])).filter(|e| !e.is_empty()),
                default: Some(code(cols[3])),
            });
            flags.insert(n.clone(), entry);
        }
    }
    flags
}

#[test]
fn help_and_readme_list_the_same_flags_with_the_same_env_and_defaults() {
    let help = from_help();
    let readme = from_readme();
    assert!(help.len() > 40, "{help:?}");
    let help_names: Vec<&String> = help.keys().collect();
    let readme_names: Vec<&String> = readme.keys().collect();
    assert_eq!(
        help_names, readme_names,
        "flags in --help vs the table in docs/configuration.md"
    );
    let mut wrong = Vec::new();
    for (name, doc) in &readme {
        let Some(doc) = doc else { continue };
        let h = &help[name];
        if doc.env != h.env {
            wrong.push(format!(
                "--{name}: env {:?} in docs/configuration.md, {:?} in --help",
                doc.env, h.env
            ));
        }
        let (rd, hd) = (
            doc.default.clone().unwrap_or_default(),
            h.default.clone().unwrap_or_default(),
        );
        if rd != hd {
            wrong.push(format!(
                "--{name}: default {rd:?} in docs/configuration.md, {hd:?} in --help"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
