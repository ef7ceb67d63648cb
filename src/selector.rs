//! The device selector grammar of `-d`, `-s` and `-p`: `f` (flex), `g`, `g:0,1`, `i`,
//! `i:0,2-4`, and both at once as `g[:ids]+i[:ids]`.

use std::collections::BTreeSet;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdSet {
    All,
    Ids(BTreeSet<u32>),
}

/// `flex`: everything, MIG-aware for GPUs. Otherwise `major` (GPUs, switches, CPUs) and/or
/// `minor` (GPU instances, links, cores).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    pub flex: bool,
    pub major: Option<IdSet>,
    pub minor: Option<IdSet>,
}

const GRAMMAR: &str =
    "expected f, g, i, g:<ids>, i:<ids> or g[:<ids>]+i[:<ids>], where <ids> is like 0,2-4";

pub fn parse(flag: &str, value: &str) -> Result<Selector, String> {
    let err = |why: String| format!("{flag} {value}: {why}");
    let v = value.trim();
    if v == "f" {
        return Ok(Selector {
            flex: true,
            major: None,
            minor: None,
        });
    }
    if v.starts_with('f') {
        return Err(err(format!(
            "'f' (flex) takes no range and cannot be combined; {GRAMMAR}"
        )));
    }
    let mut sel = Selector {
        flex: false,
        major: None,
        minor: None,
    };
    for part in v.split('+') {
        let (letter, range) = match part.split_once(':') {
            Some((l, r)) => (l, Some(r)),
            None => (part, None),
        };
        let ids = match range {
            None => IdSet::All,
            Some(r) if r.contains(':') => {
                return Err(err("there can only be one ':<range>' per letter".into()))
            }
            Some(r) => IdSet::Ids(parse_ids(r).map_err(err)?),
        };
        let slot = match letter {
            "g" => &mut sel.major,
            "i" => &mut sel.minor,
            "" => return Err(err(format!("empty selector; {GRAMMAR}"))),
            o => return Err(err(format!("'{o}' is not a selector letter; {GRAMMAR}"))),
        };
        if slot.is_some() {
            return Err(err(format!("'{letter}' given twice")));
        }
        *slot = Some(ids);
    }
    Ok(sel)
}

fn parse_ids(r: &str) -> Result<BTreeSet<u32>, String> {
    let mut out = BTreeSet::new();
    for item in r.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("empty id in '{r}'"));
        }
        let num = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("'{s}' is not a non-negative integer"))
        };
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("range {item} ends before it starts"));
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(num(item)?);
            }
        }
    }
    Ok(out)
}

/// Compresses ids into `0-3,5`.
fn ranges(ids: &[u32]) -> String {
    let mut v = ids.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(",")
    }
}

/// Every explicitly requested id must exist on the node.
pub fn check_exists(
    flag: &str,
    what: &str,
    requested: &IdSet,
    existing: &[u32],
) -> Result<(), String> {
    let IdSet::Ids(ids) = requested else {
        return Ok(());
    };
    let missing: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|i| !existing.contains(i))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{flag}: {what} {} does not exist on this node ({what}s: {})",
        ranges(&missing),
        ranges(existing)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u32]) -> Option<IdSet> {
        Some(IdSet::Ids(v.iter().copied().collect()))
    }

    #[test]
    fn the_whole_grammar() {
        assert_eq!(
            parse("-d", "f").unwrap(),
            Selector {
                flex: true,
                major: None,
                minor: None
            }
        );
        assert_eq!(parse("-d", "g").unwrap().major, Some(IdSet::All));
        assert_eq!(parse("-d", "i").unwrap().minor, Some(IdSet::All));
        assert_eq!(parse("-d", "g:0,1").unwrap().major, ids(&[0, 1]));
        assert_eq!(parse("-d", "i:0,2-4").unwrap().minor, ids(&[0, 2, 3, 4]));
        let both = parse("-s", "g:1+i:0-1").unwrap();
        assert_eq!((both.major, both.minor), (ids(&[1]), ids(&[0, 1])));
        let both = parse("-p", "g+i").unwrap();
        assert_eq!(
            (both.major, both.minor),
            (Some(IdSet::All), Some(IdSet::All))
        );
    }

    #[test]
    fn every_error_names_the_flag_and_value() {
        for bad in [
            "f:1", "f+g", "x", "g:", "g:a", "g:1,,2", "g:-1", "g:3-1", "g:0:1", "g+g", "", "g:1-",
            "q:1",
        ] {
            let e = parse("-d", bad).unwrap_err();
            assert!(e.starts_with(&format!("-d {bad}:")), "{bad}: {e}");
        }
    }

    #[test]
    fn requested_ids_must_exist() {
        assert!(check_exists("-d", "GPU", &IdSet::All, &[]).is_ok());
        assert!(check_exists("-d", "GPU", &IdSet::Ids([1].into()), &[0, 1]).is_ok());
        let e =
            check_exists("-d", "GPU", &IdSet::Ids([8, 9].into()), &[0, 1, 2, 3, 5]).unwrap_err();
        assert_eq!(e, "-d: GPU 8-9 does not exist on this node (GPUs: 0-3,5)");
    }
}
