//! The watch groups' field globs: what a pattern matches, and upstream's start-up rule over
//! the configured fields.

use super::{Problem, WatchGroup};
use crate::config::counters::{self, Counters};
use crate::model::naming::base_units::{BaseUnit, BASE_UNITS, RENAMED_4_10};

/// Upstream's start-up rule for the narrower collections (watch groups): each must match
/// a configured field, and no field may be matched by two of them.
pub fn check_watch_groups(groups: &[WatchGroup], counters: &Counters) -> Result<(), Problem> {
    // (field id, the name the counters file gives it).
    let ids: Vec<(u16, &str)> = counters
        .all
        .iter()
        .filter_map(|c| match &c.field {
            counters::CounterField::Dcgm(m) => Some((m.id, c.name.as_str())),
            counters::CounterField::Exp(_) => None,
        })
        .collect();
    let matched = |g: &WatchGroup, id: u16| g.fields.iter().any(|p| field_matches(p, id));
    for g in groups {
        if !ids.iter().any(|&(id, _)| matched(g, id)) {
            return Err(Problem::GroupMatchesNothing {
                group: g.name.clone(),
                patterns: g.fields.join(", "),
            });
        }
    }
    for &(id, field) in &ids {
        let mut by: Vec<&str> = groups
            .iter()
            .filter(|g| matched(g, id))
            .map(|g| g.name.as_str())
            .collect();
        by.dedup();
        if by.len() > 1 {
            return Err(Problem::FieldInTwoGroups {
                field: field.to_string(),
                first: by[0].to_string(),
                second: by[1].to_string(),
            });
        }
    }
    Ok(())
}

/// Whether a watch-group glob matches a field: its DCGM 4.6 name or any alias of it
/// (`DCGM_FI_DEV_GPU_TEMP` is an alias of `DCGM_FI_DEV_GPU_TEMP_CELSIUS`), or its
/// dcgm-exporter 4.10.0 name.
pub fn field_matches(pattern: &str, id: u16) -> bool {
    // A 4.9.0 base-unit metric is watched as its own field or as its legacy one: its name
    // matches both, and a base-unit field also matches by its legacy name.
    let base = |b: &&BaseUnit| b.id == id || b.legacy_id == id;
    if BASE_UNITS
        .iter()
        .filter(base)
        .any(|b| glob_match(pattern, b.name) || (b.id == id && field_matches(pattern, b.legacy_id)))
    {
        return true;
    }
    let Some(meta) = dcgm_sys::fields::by_id(id) else {
        return false;
    };
    glob_match(pattern, meta.name)
        || dcgm_sys::fields::ALIASES
            .iter()
            .any(|(alias, name)| *name == meta.name && glob_match(pattern, alias))
        || RENAMED_4_10
            .iter()
            .any(|r| r.id == id && glob_match(pattern, r.name))
}

/// `*` (any run) and `?` (one character) glob over ASCII names.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}
