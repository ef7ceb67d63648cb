//! Property runs that count: each parser's run prints `fuzz: <parser>: <N> cases` on the
//! log (`.ci/run`'s output), so CI shows how many generated inputs each parser took, not
//! only that a test passed. 10 000 cases a parser unless `PROPTEST_CASES` says otherwise.

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};

pub fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// Runs `check` on `cases()` inputs of `strategy` (no shrinking past what proptest does on a
/// failure), then prints the count for `parser`. Fails on the first input `check` rejects,
/// or if fewer inputs than asked for ran.
pub fn fuzz<S: Strategy>(
    parser: &str,
    strategy: S,
    check: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let ran = AtomicU32::new(0);
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |input| {
        ran.fetch_add(1, Ordering::Relaxed);
        check(input)
    });
    if let Err(e) = result {
        panic!("fuzz: {parser}: {e}");
    }
    let ran = ran.load(Ordering::Relaxed);
    assert!(
        ran >= cases(),
        "fuzz: {parser}: only {ran} of {} cases ran",
        cases()
    );
    // Straight to the stderr handle: libtest captures the print macros of passing tests.
    let _ = std::io::stderr().write_all(format!("fuzz: {parser}: {ran} cases\n").as_bytes());
}
