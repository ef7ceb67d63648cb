//! No function of `src/` is longer than [`MAX_LINES`] lines, from its `fn` line to its
//! closing brace, outside test code (`tests.rs` files and what follows `#[cfg(test)]`). A
//! longer one is listed with file and line: split it into steps with names.

use crate::support::rust_files;
use std::path::Path;

const MAX_LINES: usize = 80;

/// The line with string and char literals emptied and its `//` comment cut, so that only
/// the code's own braces count.
fn code_only(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                while let Some(d) = chars.next() {
                    match d {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                out.push_str("\"\"");
            }
            // A char literal ('{', '\'', '\u{7b}'); a lifetime ('a) has no closing quote
            // right after its first character.
            '\'' => {
                let rest: Vec<char> = chars.clone().take(12).collect();
                let len = match rest.first() {
                    Some('\\') => rest.iter().skip(2).position(|&c| c == '\'').map(|i| i + 3),
                    Some(_) if rest.get(1) == Some(&'\'') => Some(2),
                    _ => None,
                };
                match len {
                    Some(n) => {
                        for _ in 0..n {
                            chars.next();
                        }
                        out.push_str("''");
                    }
                    None => out.push('\''),
                }
            }
            '/' if chars.peek() == Some(&'/') => break,
            c => out.push(c),
        }
    }
    out
}

/// The name of the function a line starts, if it does.
fn fn_name(code: &str) -> Option<&str> {
    let mut words = code.split_whitespace().peekable();
    while let Some(w) = words.next() {
        match w {
            "pub" | "const" | "async" | "unsafe" | "extern" | "default" => continue,
            w if w.starts_with("pub(") || w.starts_with('"') => continue,
            "fn" => {
                let name = words.next()?;
                let end = name
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(name.len());
                return Some(&name[..end]);
            }
            _ => return None,
        }
    }
    None
}

/// (first line, lines, name) of every function in `text` longer than `max`, up to its
/// first `#[cfg(test)]`.
fn long_functions(text: &str, max: usize) -> Vec<(usize, usize, String)> {
    let lines: Vec<String> = text.lines().map(code_only).collect();
    let end = lines
        .iter()
        .position(|l| l.trim() == "#[cfg(test)]")
        .unwrap_or(lines.len());
    let mut long = Vec::new();
    for (start, line) in lines[..end].iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        let mut depth = 0i32;
        let mut opened = false;
        for (i, l) in lines[start..end].iter().enumerate() {
            // A declaration without a body (a trait's method) ends at its `;`.
            if !opened && l.contains(';') && !l.contains('{') {
                break;
            }
            for c in l.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth == 0 {
                if i + 1 > max {
                    long.push((start + 1, i + 1, name.to_string()));
                }
                break;
            }
        }
    }
    long
}

#[test]
fn no_function_is_longer_than_80_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut long = Vec::new();
    for p in files {
        if p.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for (line, n, name) in long_functions(&text, MAX_LINES) {
            let rel = p.strip_prefix(&root).unwrap().display().to_string();
            long.push(format!("src/{rel}:{line}: fn {name} is {n} lines"));
        }
    }
    assert!(
        long.is_empty(),
        "functions longer than {MAX_LINES} lines (split them into named steps):\n{}",
        long.join("\n")
    );
}

/// The measure itself: braces in strings, chars and comments do not count, a trait's
/// declaration is no body, test code is left out.
#[test]
fn the_measure_counts_code_braces_only() {
    let body = |n: usize| "    let x = 1;\n".repeat(n);
    let text = format!(
        "trait T {{\n    fn declared(&self);\n}}\n\
         pub(crate) fn long() {{\n{}    let s = \"}}{{\"; let c = '{{'; let e = '\\''; let u = '\\u{{7b}}'; // }}\n}}\n\
         fn short<'a>(x: &'a str) -> &'a str {{\n    x\n}}\n\
         #[cfg(test)]\nfn in_tests() {{\n{}}}\n",
        body(4),
        body(10)
    );
    assert_eq!(
        long_functions(&text, 5),
        [(4, 7, "long".to_string())],
        "{text}"
    );
    assert!(long_functions(&text, 7).is_empty());
}
