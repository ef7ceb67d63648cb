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

/// A selector value that does not parse: `<flag> <value>: <why>; <the grammar>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {value}: {why}; {GRAMMAR}")]
pub struct Error {
    pub flag: String,
    pub value: String,
    pub why: Why,
}

/// What is wrong in a selector value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Why {
    #[error("'f' (flex) takes no ids and cannot be combined with g or i")]
    FlexCombined,
    #[error("empty selector")]
    Empty,
    #[error("empty part next to '+'")]
    EmptyPart,
    /// A part (`:1`) without its letter.
    #[error("'{0}' has no letter before it")]
    NoLetter(String),
    #[error("'{0}' is not a selector letter (only f, g and i are)")]
    NotALetter(String),
    /// A part with two ranges (`g:0:1`).
    #[error("'{0}' has more than one ':' (there can only be one range per letter)")]
    TwoColons(String),
    #[error("'{0}' is given twice")]
    Twice(String),
    #[error("no ids after ':'")]
    NoIds,
    /// The id list with an empty item.
    #[error("empty id in '{0}'")]
    EmptyId(String),
    #[error("'{0}': ids cannot be negative")]
    Negative(String),
    #[error("'{0}' is not a number")]
    NotANumber(String),
    #[error("'{0}' is too large for an id")]
    IdTooLarge(String),
    #[error("'{0}' is not an id or a range a-b")]
    NotIdOrRange(String),
    #[error("range {0} ends before it starts")]
    Backwards(String),
    #[error("range {0} is too large (at most {MAX_RANGE_LEN} ids)")]
    RangeTooLarge(String),
}

/// Parses a selector value; errors start with `<flag> <value>:`.
pub fn parse(flag: &str, value: &str) -> Result<Selector, Error> {
    parse_value(value).map_err(|why| Error {
        flag: flag.to_string(),
        value: value.to_string(),
        why,
    })
}

fn parse_value(value: &str) -> Result<Selector, Why> {
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
            "f" => return Err(Why::FlexCombined),
            "" if v.is_empty() => return Err(Why::Empty),
            "" if part.trim().is_empty() => return Err(Why::EmptyPart),
            "" => return Err(Why::NoLetter(part.to_string())),
            o => return Err(Why::NotALetter(o.to_string())),
        };
        let ids = match range {
            None => IdSet::All,
            Some(r) if r.contains(':') => return Err(Why::TwoColons(part.to_string())),
            Some(r) => IdSet::Ids(parse_ids(r)?),
        };
        if slot.is_some() {
            return Err(Why::Twice(letter.to_string()));
        }
        *slot = Some(ids);
    }
    Ok(sel)
}

fn parse_ids(r: &str) -> Result<BTreeSet<u32>, Why> {
    if r.trim().is_empty() {
        return Err(Why::NoIds);
    }
    let mut out = BTreeSet::new();
    for item in r.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(Why::EmptyId(r.to_string()));
        }
        if item.starts_with('-') {
            return Err(Why::Negative(item.to_string()));
        }
        let num = |s: &str| {
            let s = s.trim();
            // Digits only: anything else (a sign, spaces, hex) is not an id.
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Why::NotANumber(s.to_string()));
            }
            s.parse::<u32>().map_err(|_| Why::IdTooLarge(s.to_string()))
        };
        match item.split_once('-') {
            Some((a, b)) => {
                if b.contains('-') {
                    return Err(Why::NotIdOrRange(item.to_string()));
                }
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(Why::Backwards(item.to_string()));
                }
                if u64::from(b - a) >= MAX_RANGE_LEN {
                    return Err(Why::RangeTooLarge(item.to_string()));
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

/// Ids a selector asks for that the node lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotOnNode {
    /// The flag, perhaps with its value (`"-d g:9"`).
    pub flag: String,
    /// Singular (`"GPU"`).
    pub what: String,
    pub missing: Vec<u32>,
    pub existing: Vec<u32>,
}

impl std::fmt::Display for NotOnNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (flag, what) = (&self.flag, &self.what);
        match &self.missing[..] {
            [one] => write!(f, "{flag}: {what} {one} does not exist")?,
            many => write!(f, "{flag}: {} {} do not exist", plural(what), ranges(many))?,
        }
        write!(
            f,
            " on this node ({}: {})",
            plural(what),
            ranges(&self.existing)
        )
    }
}

impl std::error::Error for NotOnNode {}

/// Every explicitly requested id must exist on the node. `flag` leads the message, so
/// callers may pass the value too (`"-d g:9"`); `what` is singular (`"GPU"`).
pub(crate) fn check_exists(
    flag: &str,
    what: &str,
    requested: &IdSet,
    existing: &[u32],
) -> Result<(), NotOnNode> {
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
    Err(NotOnNode {
        flag: flag.to_string(),
        what: what.to_string(),
        missing,
        existing: existing.to_vec(),
    })
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
    fn bad(value: &str, why: Why) {
        assert_eq!(
            parse("-d", value),
            Err(Error {
                flag: "-d".into(),
                value: value.into(),
                why
            }),
            "{value}"
        );
    }

    #[test]
    fn every_error_names_the_flag_and_value_and_explains() {
        use Why::*;
        let s = |t: &str| t.to_string();
        bad("", Empty);
        bad("f:1", FlexCombined);
        bad("f+g", FlexCombined);
        bad("g+f", FlexCombined);
        bad("x", NotALetter(s("x")));
        bad("q:1", NotALetter(s("q")));
        bad("G", NotALetter(s("G")));
        bad("gi", NotALetter(s("gi")));
        bad("g+", EmptyPart);
        bad(":1", NoLetter(s(":1")));
        bad("g:", NoIds);
        bad("g:a", NotANumber(s("a")));
        bad("g:0,x", NotANumber(s("x")));
        bad("g:0x1", NotANumber(s("0x1")));
        bad("g:1.5", NotANumber(s("1.5")));
        bad("g:1,,2", EmptyId(s("1,,2")));
        bad("g:1,", EmptyId(s("1,")));
        bad("g:-1", Negative(s("-1")));
        bad("g:3-1", Backwards(s("3-1")));
        bad("g:1-", NotANumber(s("")));
        bad("g:1-2-3", NotIdOrRange(s("1-2-3")));
        bad("g:0-4294967295", RangeTooLarge(s("0-4294967295")));
        bad("g:4294967296", IdTooLarge(s("4294967296")));
        bad("g:0:1", TwoColons(s("g:0:1")));
        bad("g+g", Twice(s("g")));
        bad("i:1+i:2", Twice(s("i")));
        // Pins the text a user reads: the flag and value, why, then the whole grammar.
        assert_eq!(
            parse("-d", "x").unwrap_err().to_string(),
            format!("-d x: 'x' is not a selector letter (only f, g and i are); {GRAMMAR}")
        );
    }

    #[test]
    fn requested_ids_must_exist() {
        assert!(check_exists("-d", "GPU", &IdSet::All, &[]).is_ok());
        assert!(check_exists("-d", "GPU", &IdSet::Ids([1].into()), &[0, 1]).is_ok());
        let e = check_exists(
            "-d g:9",
            "GPU",
            &IdSet::Ids([1, 9].into()),
            &[7, 0, 1, 2, 3, 4, 5, 6],
        )
        .unwrap_err();
        assert_eq!(
            (e.flag.as_str(), e.missing.as_slice()),
            ("-d g:9", &[9][..])
        );
        // Pins the text docs/remote.md quotes.
        assert_eq!(
            e.to_string(),
            "-d g:9: GPU 9 does not exist on this node (GPUs: 0-7)"
        );
        let e = check_exists(
            "-d",
            "GPU",
            &IdSet::Ids([8, 9, 11].into()),
            &[0, 1, 2, 3, 5],
        )
        .unwrap_err();
        assert_eq!(e.missing, [8, 9, 11]);
        assert_eq!(
            (ranges(&e.missing), ranges(&e.existing)),
            (s("8-9,11"), s("0-3,5"))
        );
        assert_eq!(
            (plural("GPU"), plural("NvSwitch"), plural("CPU core")),
            (s("GPUs"), s("NvSwitches"), s("CPU cores"))
        );
        let e = check_exists("-s", "NvSwitch", &IdSet::Ids([0].into()), &[]).unwrap_err();
        assert_eq!((e.missing, ranges(&e.existing)), (vec![0], s("none")));
        let e = check_exists(
            "-p",
            "CPU core",
            &IdSet::Ids([u32::MAX].into()),
            &[u32::MAX - 1],
        )
        .unwrap_err();
        assert_eq!(
            (e.missing, ranges(&e.existing)),
            (vec![u32::MAX], s("4294967294"))
        );
    }

    fn s(t: &str) -> String {
        t.to_string()
    }
}
