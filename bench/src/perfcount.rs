//! Syscalls and context switches of a process or of some threads over a phase, counted by
//! `perf stat` (`raw_syscalls:sys_enter`, `context-switches`): per request they show where
//! one server does more work than another, which CPU time alone does not. Where `perf` is
//! missing or not allowed, nothing is counted and the figures read "n/a".

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What `perf stat` counted.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub syscalls: f64,
    pub switches: f64,
    /// The events named in `BENCH_PERF_EVENTS` (comma-separated), in that order.
    pub extra: Vec<(String, f64)>,
}

/// The events to count besides syscalls and context switches (to locate a difference).
pub fn extra_events() -> Vec<String> {
    std::env::var("BENCH_PERF_EVENTS")
        .unwrap_or_default()
        .split(',')
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect()
}

/// A `perf stat` attached to its targets, counting until [`Counting::stop`].
pub struct Counting(Option<Child>);

/// Which threads to count.
pub enum Target {
    Process(u32),
    Threads(Vec<u32>),
}

/// The threads of this process named `comm`.
pub fn threads_named(comm: &str) -> Vec<u32> {
    std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == comm)
        })
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect()
}

/// User and system CPU time of `target` so far, in seconds (`/proc/.../stat`, clock
/// ticks: 10 ms steps, fine over a phase of seconds).
pub fn user_sys_s(target: &Target) -> (f64, f64) {
    let stats: Vec<String> = match target {
        Target::Process(pid) => vec![format!("/proc/{pid}/stat")],
        Target::Threads(tids) => tids
            .iter()
            .map(|t| format!("/proc/self/task/{t}/stat"))
            .collect(),
    };
    let (mut user, mut sys) = (0u64, 0u64);
    for path in stats {
        let Ok(s) = std::fs::read_to_string(path) else {
            continue;
        };
        // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
        let Some((_, rest)) = s.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        user += f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
        sys += f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    }
    // USER_HZ is 100 on every Linux the bench runs on.
    (user as f64 / 100.0, sys as f64 / 100.0)
}

/// Starts counting; `None` inside when perf cannot run (then [`Counting::stop`] gives
/// `None`).
pub fn start(target: &Target) -> Counting {
    let mut perf = Command::new("perf");
    let mut events = vec![
        "raw_syscalls:sys_enter".to_string(),
        "context-switches".into(),
    ];
    events.extend(extra_events());
    perf.args(["stat", "-x", ",", "-e", &events.join(",")]);
    match target {
        Target::Process(pid) => perf.args(["-p", &pid.to_string()]),
        Target::Threads(tids) if tids.is_empty() => return Counting(None),
        Target::Threads(tids) => {
            let list: Vec<String> = tids.iter().map(u32::to_string).collect();
            perf.args(["-t", &list.join(",")])
        }
    };
    let child = perf
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok();
    // perf opens its counters right after it starts; what an idle server does meanwhile
    // is next to nothing.
    std::thread::sleep(Duration::from_millis(100));
    Counting(child)
}

impl Counting {
    /// Stops perf (SIGINT makes it print its counts) and reads them.
    pub fn stop(self) -> Option<Counts> {
        let child = self.0?;
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let out = child.wait_with_output().ok()?;
        parse(&String::from_utf8_lossy(&out.stderr))
    }
}

/// `perf stat -x,` lines: value,unit,event,...
fn parse(text: &str) -> Option<Counts> {
    let mut counts = Counts::default();
    let (mut syscalls, mut switches) = (false, false);
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').collect();
        let (Some(v), Some(event)) = (f.first(), f.get(2)) else {
            continue;
        };
        let Ok(v) = v.parse::<f64>() else { continue };
        match *event {
            "raw_syscalls:sys_enter" => (counts.syscalls, syscalls) = (v, true),
            "context-switches" => (counts.switches, switches) = (v, true),
            other => counts.extra.push((other.to_string(), v)),
        }
    }
    (syscalls && switches).then_some(counts)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_perf_stat_csv() {
        let c = super::parse(
            "1234,,raw_syscalls:sys_enter,2000,100.00,,\n56,,context-switches,2000,100.00,,\n",
        )
        .unwrap();
        assert_eq!((c.syscalls, c.switches), (1234.0, 56.0));
        assert!(super::parse("<not supported>,,context-switches,0,100.00,,\n").is_none());
    }
}
