//! A test that changes this process itself (its environment, a simulator loaded into it
//! that reads that environment once) runs in a child process of this binary, alone: every
//! topic shares the binary's process, and another test would see the change.

use std::io::Write;
use std::process::Command;

/// Set in the child: the test it runs.
const CHILD: &str = "DCGM_TEST_ALONE";

/// `alone!(the_test)`, first in such a test: returns from it unless it runs alone.
macro_rules! alone {
    ($test:ident) => {
        if !$crate::support::alone::run_alone(module_path!(), stringify!($test)) {
            return;
        }
    };
}
pub(crate) use alone;

/// Whether the test `test` of `module` (its `module_path!()`) runs alone: in the test run
/// it starts the test again in a child process of this binary and checks that it passed
/// there (false); in that child it is true, and the test's body then runs. `SKIPPED:`
/// lines of the child reach this process's log (`.ci/run` counts them).
pub fn run_alone(module: &str, test: &str) -> bool {
    // The test's name in this binary: its path less the crate's own name.
    let topic = module.split_once("::").map_or("", |(_, t)| t);
    let name = format!("{topic}::{test}");
    if std::env::var_os(CHILD).is_some_and(|v| v == name.as_str()) {
        return true;
    }
    // This very binary, even where a build has since replaced the file it was run from
    // (the path `current_exe` gives then names a deleted file).
    let out = super::run::output_within(
        Command::new("/proc/self/exe")
            .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, &name),
        super::BUILD,
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    for line in stderr
        .lines()
        .filter(|l| l.starts_with(super::skip::SKIPPED))
    {
        let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
    }
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name}, alone in a child process ({}):\n{stdout}\n{stderr}",
        out.status
    );
    false
}
