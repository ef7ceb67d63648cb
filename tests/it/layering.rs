//! The source tree's data flow runs one way (ARCHITECTURE.md): configuration, the page
//! model, collection, attribution, output, with `lifecycle` wiring them; the page model,
//! `runtime` and `logging` lie beneath every stage. These tests read `src/` and fail, naming file and line,
//! when an import goes back up that chain, when two sibling modules import each other, or
//! when a module other than the configuration's own and start-up's sees the whole
//! command-line configuration (`config::cli`). Test code (`tests.rs` files and what follows
//! the first `#[cfg(test)]`) is left out: it may wire modules together to check one of them,
//! as `lifecycle` does.

use crate::support::rust_files;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What each top-level module of `src/` may import besides itself. A stage sees the stages
/// before it, never one after; a new top-level module must be placed here.
#[rustfmt::skip]
const MAY_IMPORT: &[(&str, &[&str])] = &[
    ("logging", &[]),
    ("model", &["logging"]),
    ("runtime", &["model", "logging"]),
    ("config", &["model", "logging"]),
    ("collect", &["config", "runtime", "model", "logging"]),
    ("attribution", &["collect", "config", "runtime", "model", "logging"]),
    ("output", &["attribution", "collect", "config", "runtime", "model", "logging"]),
    ("lifecycle", &["output", "attribution", "collect", "config", "runtime", "model", "logging"]),
];

/// The only places that may read `config::cli` (the whole command-line configuration):
/// the configuration stage itself, start-up (which turns it into each stage's settings)
/// and the binary.
fn may_see_cli(module: &[String]) -> bool {
    matches!(
        module.first().map(String::as_str),
        Some("config") | Some("main")
    ) || module.starts_with(&["lifecycle".to_string(), "startup".to_string()])
}

/// One `crate::`/`super::` path a source file names, resolved from the crate root.
struct Reference {
    line: usize,
    path: Vec<String>,
    /// In test code.
    test: bool,
}

struct SourceFile {
    rel: String,
    /// The module this file is (`src/output/http/routes.rs` -> output::http::routes).
    module: Vec<String>,
    refs: Vec<Reference>,
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// The line without its `//` comment (a `//` inside a string literal is kept).
fn strip_comment(line: &str) -> &str {
    let b = line.as_bytes();
    let mut in_str = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            b'/' if !in_str && b.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths of a use tree starting at `s` (`a::b`, `a::{b, c::d}`, `a::*`), each cut at
/// the first segment that is not a plain identifier.
fn use_tree(s: &str) -> (Vec<Vec<String>>, usize) {
    let t = s.trim_start();
    let mut pos = s.len() - t.len();
    if let Some(inner) = t.strip_prefix('{') {
        pos += 1;
        let mut all = Vec::new();
        let mut rest = inner;
        loop {
            let (paths, used) = use_tree(rest);
            all.extend(paths);
            pos += used;
            rest = &rest[used..];
            let r = rest.trim_start();
            pos += rest.len() - r.len();
            rest = r;
            if let Some(r) = rest.strip_prefix(',') {
                pos += 1;
                rest = r;
            } else {
                if rest.starts_with('}') {
                    pos += 1;
                }
                return (all, pos);
            }
        }
    }
    let ident: String = t.chars().take_while(|c| is_ident(*c)).collect();
    pos += ident.len();
    if ident.is_empty() {
        return (vec![vec![]], pos);
    }
    let after = &s[pos..];
    if let Some(rest) = after.strip_prefix("::") {
        let (paths, used) = use_tree(rest);
        let paths = paths
            .into_iter()
            .map(|mut p| {
                p.insert(0, ident.clone());
                p
            })
            .collect();
        return (paths, pos + 2 + used);
    }
    (vec![vec![ident]], pos)
}

/// Every `crate::` and `super::` path in `text`, resolved against `module`.
fn references(text: &str, module: &[String]) -> Vec<Reference> {
    let mut refs = Vec::new();
    let code: Vec<&str> = text.lines().map(strip_comment).collect();
    let mut test = module.last().is_some_and(|m| m == "tests");
    for (i, line) in code.iter().enumerate() {
        test |= line.trim() == "#[cfg(test)]";
        let mut from = 0;
        while let Some(found) = find_root(&line[from..]) {
            let (start, base, len) = (from + found.0, found.1, found.2);
            from = start + len;
            // `super::` inside an identifier-like word (`xsuper::`) is not a path.
            if start > 0 && line[..start].chars().last().is_some_and(is_ident) {
                continue;
            }
            // Continue onto the next lines for a multi-line `use crate::{...}`.
            let rest: String = std::iter::once(&line[from..])
                .chain(code[i + 1..].iter().take(40).copied())
                .collect::<Vec<_>>()
                .join("\n");
            let (paths, _) = use_tree(&rest);
            for p in paths.into_iter().filter(|p| !p.is_empty()) {
                let mut full = match &base {
                    Some(up) => module[..module.len().saturating_sub(*up)].to_vec(),
                    None => Vec::new(),
                };
                full.extend(p);
                refs.push(Reference {
                    line: i + 1,
                    path: full,
                    test,
                });
            }
        }
    }
    refs
}

/// The next `crate::` (base `None`) or run of `super::` (base `Some(n)`): (offset, base,
/// length of the prefix).
fn find_root(s: &str) -> Option<(usize, Option<usize>, usize)> {
    let c = s.find("crate::");
    let u = s.find("super::");
    match (c, u) {
        (Some(c), u) if u.is_none_or(|u| c < u) => Some((c, None, "crate::".len())),
        (_, Some(u)) => {
            let mut n = 0;
            let mut len = 0;
            while s[u + len..].starts_with("super::") {
                n += 1;
                len += "super::".len();
            }
            Some((u, Some(n), len))
        }
        _ => None,
    }
}

fn sources() -> Vec<SourceFile> {
    let root = src_dir();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&root).unwrap();
            let module = module_of(rel);
            let text = std::fs::read_to_string(&p).unwrap();
            SourceFile {
                rel: format!("src/{}", rel.display()),
                refs: references(&text, &module),
                module,
            }
        })
        .collect()
}

#[test]
fn imports_run_one_way_down_the_chain() {
    let table: BTreeMap<&str, &[&str]> = MAY_IMPORT.iter().copied().collect();
    let mut wrong = Vec::new();
    for f in sources() {
        let Some(stage) = f.module.first() else {
            continue; // lib.rs declares the modules
        };
        if stage == "main" {
            continue; // the binary, outside the library
        }
        let Some(allowed) = table.get(stage.as_str()) else {
            wrong.push(format!(
                "{}: module `{stage}` is not in MAY_IMPORT (place it in the chain)",
                f.rel
            ));
            continue;
        };
        for r in &f.refs {
            let Some(target) = r.path.first() else {
                continue;
            };
            if r.test || target == stage || !table.contains_key(target.as_str()) {
                continue; // test code, within the stage, or not a module (`super::*`)
            }
            if !allowed.contains(&target.as_str()) {
                wrong.push(format!(
                    "{}:{}: {stage} imports {} (up the chain)",
                    f.rel,
                    r.line,
                    r.path.join("::")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the data flow (MAY_IMPORT in tests/it/layering.rs):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn sibling_modules_do_not_import_each_other() {
    let files = sources();
    let known: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    // The file a path lands in: its longest prefix that is a module of its own.
    let file_of = |path: &[String]| -> Option<Vec<String>> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| known.contains(p))
    };
    let mut edges: BTreeMap<Vec<String>, BTreeMap<Vec<String>, usize>> = BTreeMap::new();
    let mut rel: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for f in &files {
        rel.insert(f.module.clone(), f.rel.clone());
        for r in f.refs.iter().filter(|r| !r.test) {
            if let Some(to) = file_of(&r.path) {
                edges
                    .entry(f.module.clone())
                    .or_default()
                    .entry(to)
                    .or_insert(r.line);
            }
        }
    }
    let mut wrong = Vec::new();
    for (a, outs) in &edges {
        for (b, line) in outs {
            // A parent and its child (`mod.rs` and `tests.rs`, say) belong together.
            if a >= b || a.starts_with(b) || b.starts_with(a) {
                continue;
            }
            if let Some(back) = edges.get(b).and_then(|o| o.get(a)) {
                wrong.push(format!(
                    "{}:{line} and {}:{back} import each other",
                    rel[a], rel[b]
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "modules that import each other:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn only_startup_sees_the_whole_configuration() {
    let mut wrong = Vec::new();
    for f in sources() {
        if may_see_cli(&f.module) {
            continue;
        }
        for r in f.refs.iter().filter(|r| !r.test) {
            if r.path
                .starts_with(&["config".to_string(), "cli".to_string()])
            {
                wrong.push(format!("{}:{}: {}", f.rel, r.line, r.path.join("::")));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the command-line configuration outside config/ and lifecycle/startup (each stage \
         gets its own settings from startup):\n{}",
        wrong.join("\n")
    );
}

/// The scanner itself: grouped, nested, multi-line and relative imports resolve.
#[test]
fn the_scanner_resolves_grouped_and_relative_paths() {
    let module: Vec<String> = ["output", "http", "routes"].map(String::from).to_vec();
    let text = "use crate::config::{cli, duration::{self, parse}};\n\
                use super::super::lifecycle::app::Shared; // crate::not::this\n\
                let s = \"// not a comment\"; crate::collect::now_us();\n\
                use crate::{\n    model::Page,\n    common::PREFIX,\n};\n\
                #[cfg(test)]\nuse crate::output::render;\n";
    let got: Vec<(usize, String, bool)> = references(text, &module)
        .into_iter()
        .map(|r| (r.line, r.path.join("::"), r.test))
        .collect();
    let want = [
        (1, "config::cli"),
        (1, "config::duration::self"),
        (1, "config::duration::parse"),
        (2, "output::lifecycle::app::Shared"),
        (3, "collect::now_us"),
        (4, "model::Page"),
        (4, "common::PREFIX"),
    ]
    .map(|(l, p)| (l, p.to_string(), false))
    .into_iter()
    .chain([(9, "output::render".to_string(), true)])
    .collect::<Vec<_>>();
    assert_eq!(got, want);
}
