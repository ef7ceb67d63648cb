//! The docs' shell examples run. Every ```sh block of the README, `docs/*.md` and
//! `etc/sim/README.md` is either `sh runnable` (run here against the simulator) or
//! `sh not-runnable: <reason>`; an unmarked block fails, so no example rots unnoticed.
//!
//! A runnable block runs under `bash -e -o pipefail` from the repository root with:
//! `target/release` and `target/debug` replaced by the directory of this test build's
//! binaries (the exporter, the simulated `libdcgm.so.4`, `libnvidia-ml.so.1` and host
//! engine); its `cargo build --release -p ...` step replaced by checking that the packages
//! it names are the workspace's and that the artifacts the block uses are built; every
//! port it names (94xx, 5555) replaced by a free one; `dcgm-exporter` on PATH as the test
//! build's binary, with `DCGM_EXPORTER_DCGM_LIBRARY` naming the simulated library (an
//! explicit flag still wins) and `DCGM_EXPORTER_LISTEN` the block's server port. Nothing
//! else of the caller's environment reaches it (no `LD_LIBRARY_PATH`: a block that needs
//! the simulated NVML must say so, as a user must).
//!
//! Info-string keys: `needs=TOOL` (skipped without it, a failure under CI);
//! `server=PORT`: the block keeps running, and must serve `/metrics` on PORT (with
//! `expect=TEXT` in the page) before it is stopped; `absent="TEXT"`: never in its stderr.
//! Without `server`, the block must exit 0 within two minutes.

use crate::support;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DOCS: &[&str] = &["README.md", "etc/sim/README.md"];
const SHELL_LANGS: &[&str] = &["sh", "bash", "shell", "console"];

#[derive(Debug)]
struct Block {
    at: String,
    runnable: bool,
    reason: String,
    keys: BTreeMap<String, String>,
    body: String,
}

fn doc_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = DOCS.iter().map(|d| support::repo(d)).collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(support::repo("docs"))
        .expect("a docs/ folder")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// Words of an info string; double quotes group words (`absent="cannot load NVML"`).
fn words(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for c in s.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Every shell block of `text` (the file `rel`), and the problems with their markings.
fn parse(rel: &str, text: &str, problems: &mut Vec<String>) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let t = line.trim_start();
        let Some(info) = t.strip_prefix("```") else {
            continue;
        };
        let indent = line.len() - t.len();
        let mut body = String::new();
        for (_, l) in lines.by_ref() {
            if l.trim_start().starts_with("```") {
                break;
            }
            body.push_str(l.get(indent..).unwrap_or(l.trim_start()));
            body.push('\n');
        }
        let lang = info.split_whitespace().next().unwrap_or("");
        if !SHELL_LANGS.contains(&lang) {
            continue;
        }
        let at = format!("{rel}:{}", n + 1);
        let rest = info[lang.len()..].trim();
        let mut block = Block {
            at: at.clone(),
            runnable: false,
            reason: String::new(),
            keys: BTreeMap::new(),
            body,
        };
        if let Some(reason) = rest.strip_prefix("not-runnable:") {
            block.reason = reason.trim().to_string();
            if block.reason.is_empty() {
                problems.push(format!("{at}: `not-runnable:` without a reason"));
            }
        } else if let Some(keys) = rest.strip_prefix("runnable") {
            block.runnable = true;
            for w in words(keys) {
                match w.split_once('=') {
                    Some((k, v)) if ["needs", "server", "expect", "absent"].contains(&k) => {
                        block.keys.insert(k.to_string(), v.to_string());
                    }
                    _ => problems.push(format!("{at}: unknown key {w:?}")),
                }
            }
        } else {
            problems.push(format!(
                "{at}: a ```{lang} block must be `{lang} runnable` or `{lang} not-runnable: <reason>`"
            ));
        }
        blocks.push(block);
    }
    blocks
}

fn all_blocks() -> Vec<Block> {
    let mut problems = Vec::new();
    let blocks: Vec<Block> = doc_files()
        .iter()
        .flat_map(|f| {
            let rel = f.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap();
            let text = std::fs::read_to_string(f).unwrap();
            parse(&rel.display().to_string(), &text, &mut problems)
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    blocks
}

#[test]
fn every_shell_block_is_runnable_or_says_why_not() {
    let blocks = all_blocks();
    let runnable = blocks.iter().filter(|b| b.runnable).count();
    // The README's set-up command, remote mode, the simulated NVML, a fault, the
    // textfile, OpenMetrics, Kubernetes without an API, the HPA rules: at least these.
    assert!(
        runnable >= 8,
        "only {runnable} runnable blocks: {blocks:#?}"
    );
    let setup = &blocks
        .iter()
        .find(|b| b.at.starts_with("README.md:"))
        .expect("a shell block in the README");
    assert!(
        setup.runnable && setup.body.contains("target/release/dcgm-exporter"),
        "the README's first command runs the exporter: {setup:#?}"
    );
}

#[test]
fn the_marker_check_refuses_an_unmarked_block() {
    let text = "```sh\nls\n```\n```sh not-runnable:\nls\n```\n```sh runnable bogus=1\nls\n```\n\
                ```yaml\na: 1\n```\n  ```bash runnable needs=curl\n  curl -V\n  ```\n";
    let mut problems = Vec::new();
    let blocks = parse("x.md", text, &mut problems);
    assert_eq!(blocks.len(), 4, "{blocks:#?}");
    assert_eq!(
        problems,
        [
            "x.md:1: a ```sh block must be `sh runnable` or `sh not-runnable: <reason>`",
            "x.md:4: `not-runnable:` without a reason",
            "x.md:7: unknown key \"bogus=1\"",
        ]
    );
    assert!(
        blocks[3].runnable && blocks[3].body == "curl -V\n",
        "{:?}",
        blocks[3]
    );
}

/// The block's text with the test build's paths and free ports; the port map.
fn prepare(b: &Block, bin: &Path) -> (String, BTreeMap<u16, u16>) {
    let bin = bin.to_str().unwrap();
    let mut s = String::new();
    for line in b.body.lines() {
        // The set-up command's build step: the test build made the same artifacts.
        let line = match line.split_once("&&") {
            Some((build, rest)) if build.trim_start().starts_with("cargo build --release") => {
                check_build(build, &b.body, Path::new(bin));
                format!("true &&{rest}")
            }
            _ => line.to_string(),
        };
        s.push_str(&line);
        s.push('\n');
    }
    // (Through a placeholder: `bin` itself holds `target/debug` or `target/release`.)
    let s = s
        .replace("target/release", "\0BIN\0")
        .replace("target/debug", "\0BIN\0")
        .replace("\0BIN\0", bin);
    let mut ports = BTreeMap::new();
    let mut want: Vec<u16> = b
        .keys
        .get("server")
        .map(|p| p.parse().expect("server=PORT"))
        .into_iter()
        .collect();
    let is_port = |p: u16| (9400..9500).contains(&p) || p == 5555;
    for (i, j) in numbers(&s) {
        if let Ok(p) = s[i..j].parse::<u16>() {
            if is_port(p) {
                want.push(p);
            }
        }
    }
    for p in want {
        ports.entry(p).or_insert_with(support::free_port);
    }
    let mut out = String::new();
    let mut last = 0;
    for (i, j) in numbers(&s) {
        if let Some(to) = s[i..j].parse::<u16>().ok().and_then(|p| ports.get(&p)) {
            out.push_str(&s[last..i]);
            out.push_str(&to.to_string());
            last = j;
        }
    }
    out.push_str(&s[last..]);
    (out, ports)
}

/// The runs of digits in `s` that stand alone (not inside a word): (start, end).
fn numbers(s: &str) -> Vec<(usize, usize)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
            let j = (i..b.len())
                .find(|&j| !b[j].is_ascii_digit())
                .unwrap_or(b.len());
            if j == b.len() || !b[j].is_ascii_alphabetic() {
                out.push((i, j));
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// The documented build names workspace packages only, and every `target/release/X` the
/// block then uses is among what those packages build (here: built by the test build).
fn check_build(build: &str, body: &str, bin: &Path) {
    let pkgs: Vec<&str> = build
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "-p")
        .map(|w| w[1])
        .collect();
    let builds = |p: &str| -> &[&str] {
        match p {
            "dcgm-exporter" => &["dcgm-exporter"],
            "dcgm-sim" => &["libdcgm.so.4", "dcgm-sim-hostengine"],
            "nvml-sim" => &["libnvidia-ml.so.1"],
            other => panic!("the set-up build names {other}, not a package it needs"),
        }
    };
    let made: Vec<&str> = pkgs
        .iter()
        .flat_map(|p| builds(p).iter().copied())
        .collect();
    for used in body.split("target/release/").skip(1) {
        let name: String = used.chars().take_while(|c| !c.is_whitespace()).collect();
        assert!(
            made.contains(&name.as_str()),
            "the set-up command uses target/release/{name}, which `{build}` does not build"
        );
        assert!(bin.join(&name).exists(), "{name} is not built");
    }
    if body.contains("LD_LIBRARY_PATH=target/release") {
        assert!(
            pkgs.contains(&"nvml-sim"),
            "the NVML on LD_LIBRARY_PATH is not built"
        );
    }
}

struct Running {
    child: Child,
    stderr: PathBuf,
}

impl Running {
    fn kill(&mut self) {
        // The whole process group: the block's background servers too.
        let pgid = self.child.id() as i32;
        let _ = support::status_within(
            Command::new("kill")
                .args(["-s", "TERM", "--", &format!("-{pgid}")])
                .stderr(Stdio::null()),
            support::QUICK,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            // (Reaped first: a zombie leader still counts as a member of its group.)
            let _ = self.child.try_wait();
            if !group_alive(pgid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = support::status_within(
            Command::new("kill")
                .args(["-s", "KILL", "--", &format!("-{pgid}")])
                .stderr(Stdio::null()),
            support::QUICK,
        );
        let _ = self.child.wait();
    }
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

fn group_alive(pgid: i32) -> bool {
    support::status_within(
        Command::new("kill")
            .args(["-0", "--", &format!("-{pgid}")])
            .stderr(Stdio::null()),
        support::QUICK,
    )
    .success()
}

fn start(script: &str, b: &Block, work: &Path, bin: &Path, ports: &BTreeMap<u16, u16>) -> Running {
    // `dcgm-exporter` on PATH is the test build's binary.
    let path_dir = work.join("path");
    std::fs::create_dir_all(&path_dir).unwrap();
    let link = path_dir.join("dcgm-exporter");
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_dcgm-exporter"), &link).unwrap();
    }
    let stderr = work.join(format!("stderr-{}", b.at.replace(['/', ':'], "_")));
    let mut cmd = Command::new("bash");
    cmd.args(["-e", "-o", "pipefail", "-c", script])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_clear()
        .env(
            "PATH",
            format!(
                "{}:{}",
                path_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("HOME", work)
        .env("TMPDIR", work)
        .env("DCGM_EXPORTER_DCGM_LIBRARY", bin.join("libdcgm.so.4"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .process_group(0);
    // A plain `dcgm-exporter` listens where the block's server, or its 9400, was moved.
    let server = b.keys.get("server").map(|p| p.parse::<u16>().unwrap());
    if let Some(port) = server.or(Some(9400)).and_then(|p| ports.get(&p)) {
        cmd.env("DCGM_EXPORTER_LISTEN", format!(":{port}"));
    }
    Running {
        child: cmd.spawn().expect("run bash"),
        stderr,
    }
}

/// Runs one block; the failure, if any.
fn run(b: &Block, work: &Path, bin: &Path) -> Result<(), String> {
    let (script, ports) = prepare(b, bin);
    let script = script.replace(
        "/tmp/dcgm-doc-example",
        &work.join("dcgm-doc-example").display().to_string(),
    );
    let mut r = start(&script, b, work, bin, &ports);
    let fail = |r: &Running, why: String| {
        Err(format!(
            "{}: {why}\n--- script\n{script}--- stderr\n{}",
            b.at,
            r.stderr()
        ))
    };
    if let Some(p) = b.keys.get("server") {
        let port = ports[&p.parse::<u16>().unwrap()];
        let url = format!("http://127.0.0.1:{port}/metrics");
        let expect = b
            .keys
            .get("expect")
            .map(String::as_str)
            .unwrap_or("DCGM_FI_");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(st)) = r.child.try_wait() {
                return fail(&r, format!("exited ({st}) before serving {url}"));
            }
            if let Ok((200, body)) = support::http_get(&url) {
                if body.contains(expect) {
                    break;
                }
            }
            if Instant::now() > deadline {
                return fail(&r, format!("{url} did not serve {expect:?} in 60 s"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    } else {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match r.child.try_wait() {
                Ok(Some(st)) if st.success() => break,
                Ok(Some(st)) => return fail(&r, format!("exited with {st}")),
                _ if Instant::now() > deadline => {
                    return fail(&r, "still running after 120 s".into())
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
    if let Some(absent) = b.keys.get("absent") {
        if r.stderr().contains(absent.as_str()) {
            return fail(&r, format!("logged {absent:?}"));
        }
    }
    r.kill();
    Ok(())
}

#[test]
fn runnable_blocks_run_against_the_simulator() {
    let bin = support::sim_built().to_path_buf();
    let work = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut ran = 0;
    for b in all_blocks().iter().filter(|b| b.runnable) {
        if let Some(tool) = b.keys.get("needs") {
            if !support::require_tool(tool, &format!("for the example at {}", b.at)) {
                continue;
            }
        }
        ran += 1;
        eprintln!("doc example {}", b.at);
        if let Err(e) = run(b, work.path(), &bin) {
            failures.push(e);
        }
    }
    eprintln!("doc examples: {ran} runnable blocks ran");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn docs_and_help_name_systems_not_seed_files() {
    let mut texts: Vec<(String, String)> = doc_files()
        .iter()
        .map(|f| (f.display().to_string(), std::fs::read_to_string(f).unwrap()))
        .collect();
    let help = support::output_within(support::exporter_command().arg("--help"), support::QUICK);
    texts.push((
        "--help".into(),
        String::from_utf8_lossy(&help.stdout).into_owned(),
    ));
    for (what, text) in texts {
        for (n, line) in text.lines().enumerate() {
            assert!(
                !line.to_lowercase().contains("seed 00"),
                "{what}:{}: names a seed file, not the system: {line}",
                n + 1
            );
        }
    }
}

#[test]
fn the_documented_listening_line_is_the_one_printed() {
    let doc = std::fs::read_to_string(support::repo("docs/troubleshooting.md")).unwrap();
    let shown = "listening on [::]:9400 (http)";
    assert!(
        doc.contains(shown),
        "docs/troubleshooting.md shows another listening line"
    );
    let port = support::free_port();
    let mut cmd = support::exporter_command();
    cmd.args(["-a", &format!(":{port}"), "--dcgm-library"])
        .arg(support::sim_library())
        .args(["-f"])
        .arg(support::repo("etc/default-counters.csv"));
    let e = support::Exporter::spawn(cmd, port);
    e.wait_for_log(30, &shown.replace("9400", &port.to_string()));
}

#[test]
fn ports_are_replaced_where_they_stand_alone() {
    let b = Block {
        at: "x".into(),
        runnable: true,
        reason: String::new(),
        keys: BTreeMap::from([("server".into(), "9401".into())]),
        body: "x -a :9401 -r localhost:5555 -c 19401 v9400 94012 9400ms\n".into(),
    };
    let (s, ports) = prepare(&b, Path::new("/bin"));
    let (p1, p2) = (ports[&9401], ports[&5555]);
    assert_eq!(
        s,
        format!("x -a :{p1} -r localhost:{p2} -c 19401 v9400 94012 9400ms\n")
    );
}
