//! The device selector grammar of `-d`, `-s` and `-p`: `f` (flex), `g`, `g:0,1`, `i`,
//! `i:0,2-4`, and both at once as `g[:ids]+i[:ids]` (newer upstream; `i…+g…` too).

use std::collections::BTreeSet;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdSet {
    All,
    Ids(BTreeSet<u32>),
}

/// `flex`: everything, MIG-aware for GPUs (then `major` and `minor` are both `None`).
/// Otherwise `major` (GPUs, switches, CPUs) and/or `minor` (GPU instances, links, cores).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    pub flex: bool,
    pub major: Option<IdSet>,
    pub minor: Option<IdSet>,
}

const GRAMMAR: &str = "expected f, g, i, g:<ids>, i:<ids> or g[:<ids>]+i[:<ids>], \
     where <ids> is a comma-separated list of ids and inclusive ranges, like 0,2-4";

/// No node has this many entities of one kind; the cap keeps a typo such as
/// `g:0-4000000000` from allocating billions of ids.
const MAX_RANGE_LEN: u64 = 65_536;

/// Parses a selector value; errors start with `<flag> <value>:`.
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
    let mut sel = Selector {
        flex: false,
        major: None,
        minor: None,
    };
    for part in v.split('+') {
        let (letter, range) = match part.split_once(':') {
            Some((l, r)) => (l.trim(), Some(r)),
            None => (part.trim(), None),
        };
        let slot = match letter {
            "g" => &mut sel.major,
            "i" => &mut sel.minor,
            "f" => {
                return Err(err(format!(
                    "'f' (flex) takes no ids and cannot be combined with g or i; {GRAMMAR}"
                )))
            }
            "" if v.is_empty() => return Err(err(format!("empty selector; {GRAMMAR}"))),
            "" if part.trim().is_empty() => {
                return Err(err(format!("empty part next to '+'; {GRAMMAR}")))
            }
            "" => return Err(err(format!("'{part}' has no letter before it; {GRAMMAR}"))),
            o => {
                return Err(err(format!(
                    "'{o}' is not a selector letter (only f, g and i are); {GRAMMAR}"
                )))
            }
        };
        let ids = match range {
            None => IdSet::All,
            Some(r) if r.contains(':') => {
                return Err(err(format!(
                    "'{part}' has more than one ':' (there can only be one range per letter); {GRAMMAR}"
                )))
            }
            Some(r) => IdSet::Ids(parse_ids(r).map_err(|why| err(format!("{why}; {GRAMMAR}")))?),
        };
        if slot.is_some() {
            return Err(err(format!("'{letter}' is given twice; {GRAMMAR}")));
        }
        *slot = Some(ids);
    }
    Ok(sel)
}

fn parse_ids(r: &str) -> Result<BTreeSet<u32>, String> {
    if r.trim().is_empty() {
        return Err("no ids after ':'".into());
    }
    let mut out = BTreeSet::new();
    for item in r.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("empty id in '{r}'"));
        }
        if item.starts_with('-') {
            return Err(format!("'{item}': ids cannot be negative"));
        }
        let num = |s: &str| {
            let s = s.trim();
            // Digits only: anything else (a sign, spaces, hex) is not an id.
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("'{s}' is not a number"));
            }
            s.parse::<u32>()
                .map_err(|_| format!("'{s}' is too large for an id"))
        };
        match item.split_once('-') {
            Some((a, b)) => {
                if b.contains('-') {
                    return Err(format!("'{item}' is not an id or a range a-b"));
                }
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("range {item} ends before it starts"));
                }
                if u64::from(b - a) >= MAX_RANGE_LEN {
                    return Err(format!(
                        "range {item} is too large (at most {MAX_RANGE_LEN} ids)"
                    ));
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

/// Compresses ids into `0-3,5`; `none` when there are none.
fn ranges(ids: &[u32]) -> String {
    let mut v = ids.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j].checked_add(1) == Some(v[j + 1]) {
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

fn plural(what: &str) -> String {
    if what.ends_with("ch") || what.ends_with('s') || what.ends_with('x') {
        format!("{what}es")
    } else {
        format!("{what}s")
    }
}

/// Every explicitly requested id must exist on the node. `flag` leads the message, so
/// callers may pass the value too (`"-d g:9"`); `what` is singular (`"GPU"`).
pub(crate) fn check_exists(
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
    let subject = match missing.len() {
        0 => return Ok(()),
        1 => format!("{what} {} does not exist", missing[0]),
        _ => format!("{} {} do not exist", plural(what), ranges(&missing)),
    };
    Err(format!(
        "{flag}: {subject} on this node ({}: {})",
        plural(what),
        ranges(existing)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u32]) -> Option<IdSet> {
        Some(IdSet::Ids(v.iter().copied().collect()))
    }

    fn sel(major: Option<IdSet>, minor: Option<IdSet>) -> Selector {
        Selector {
            flex: false,
            major,
            minor,
        }
    }

    #[test]
    fn the_whole_grammar() {
        let flex = Selector {
            flex: true,
            major: None,
            minor: None,
        };
        assert_eq!(parse("-d", "f").unwrap(), flex);
        assert_eq!(parse("-d", " f ").unwrap(), flex);
        assert_eq!(parse("-d", "g").unwrap(), sel(Some(IdSet::All), None));
        assert_eq!(parse("-d", "i").unwrap(), sel(None, Some(IdSet::All)));
        assert_eq!(parse("-d", "g:0,1").unwrap(), sel(ids(&[0, 1]), None));
        assert_eq!(parse("-d", "g:3").unwrap(), sel(ids(&[3]), None));
        assert_eq!(
            parse("-d", "g:0-3,5").unwrap(),
            sel(ids(&[0, 1, 2, 3, 5]), None)
        );
        assert_eq!(
            parse("-d", "i:0,2-4").unwrap(),
            sel(None, ids(&[0, 2, 3, 4]))
        );
        assert_eq!(parse("-d", "i:2-2").unwrap(), sel(None, ids(&[2])));
        assert_eq!(parse("-d", "g:1,1,0-1").unwrap(), sel(ids(&[0, 1]), None));
        assert_eq!(parse("-d", "g:0, 1").unwrap(), sel(ids(&[0, 1]), None));
        assert_eq!(
            parse("-s", "g:1+i:0-1").unwrap(),
            sel(ids(&[1]), ids(&[0, 1]))
        );
        assert_eq!(
            parse("-p", "g+i").unwrap(),
            sel(Some(IdSet::All), Some(IdSet::All))
        );
        assert_eq!(
            parse("-p", "g:0+i").unwrap(),
            sel(ids(&[0]), Some(IdSet::All))
        );
        assert_eq!(
            parse("-d", "i:4+g").unwrap(),
            sel(Some(IdSet::All), ids(&[4]))
        );
        assert_eq!(
            parse("-d", "g:4294967295").unwrap(),
            sel(ids(&[u32::MAX]), None)
        );
    }

    #[track_caller]
    fn bad(value: &str, why: &str) {
        let e = parse("-d", value).unwrap_err();
        assert!(e.starts_with(&format!("-d {value}: ")), "{value}: {e}");
        assert!(e.contains(why), "{value}: {e}");
        assert!(e.contains("expected f, g, i"), "explains the grammar: {e}");
    }

    #[test]
    fn every_error_names_the_flag_and_value_and_explains() {
        bad("", "empty selector");
        bad("f:1", "'f' (flex) takes no ids");
        bad("f+g", "cannot be combined");
        bad("g+f", "cannot be combined");
        bad("x", "'x' is not a selector letter");
        bad("q:1", "'q' is not a selector letter");
        bad("G", "'G' is not a selector letter");
        bad("gi", "'gi' is not a selector letter");
        bad("g+", "empty part next to '+'");
        bad(":1", "':1' has no letter");
        bad("g:", "no ids after ':'");
        bad("g:a", "'a' is not a number");
        bad("g:0,x", "'x' is not a number");
        bad("g:0x1", "'0x1' is not a number");
        bad("g:1.5", "'1.5' is not a number");
        bad("g:1,,2", "empty id in '1,,2'");
        bad("g:1,", "empty id");
        bad("g:-1", "'-1': ids cannot be negative");
        bad("g:3-1", "range 3-1 ends before it starts");
        bad("g:1-", "'' is not a number");
        bad("g:1-2-3", "'1-2-3' is not an id or a range");
        bad("g:0-4294967295", "too large");
        bad("g:4294967296", "too large for an id");
        bad("g:0:1", "more than one ':'");
        bad("g+g", "'g' is given twice");
        bad("i:1+i:2", "'i' is given twice");
    }

    #[test]
    fn requested_ids_must_exist() {
        assert!(check_exists("-d", "GPU", &IdSet::All, &[]).is_ok());
        assert!(check_exists("-d", "GPU", &IdSet::Ids([1].into()), &[0, 1]).is_ok());
        assert_eq!(
            check_exists(
                "-d g:9",
                "GPU",
                &IdSet::Ids([1, 9].into()),
                &[7, 0, 1, 2, 3, 4, 5, 6]
            )
            .unwrap_err(),
            "-d g:9: GPU 9 does not exist on this node (GPUs: 0-7)"
        );
        assert_eq!(
            check_exists(
                "-d",
                "GPU",
                &IdSet::Ids([8, 9, 11].into()),
                &[0, 1, 2, 3, 5]
            )
            .unwrap_err(),
            "-d: GPUs 8-9,11 do not exist on this node (GPUs: 0-3,5)"
        );
        assert_eq!(
            check_exists("-s", "NvSwitch", &IdSet::Ids([0].into()), &[]).unwrap_err(),
            "-s: NvSwitch 0 does not exist on this node (NvSwitches: none)"
        );
        assert_eq!(
            check_exists(
                "-p",
                "CPU core",
                &IdSet::Ids([u32::MAX].into()),
                &[u32::MAX - 1]
            )
            .unwrap_err(),
            "-p: CPU core 4294967295 does not exist on this node (CPU cores: 4294967294)"
        );
    }
}
