//! The event history (`/events`, `dcgm-exporter events`) as the tests read it.

use super::{exporter_command, Exporter};
use serde_json::Value;
use std::time::Duration;

/// The events `/events?<query>` answers (plain HTTP), in the order served.
pub fn events(e: &Exporter, query: &str) -> Vec<Value> {
    let (status, body) = e.get(&format!("/events?{query}"));
    assert_eq!(status, 200, "/events?{query}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|err| panic!("{err}: {body}"));
    v["events"].as_array().cloned().unwrap_or_default()
}

/// Waits until `/events?<query>` satisfies `done` (panics after `secs`, with the log).
pub fn wait_for_events(
    e: &Exporter,
    secs: u64,
    query: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    super::poll(secs, Duration::from_millis(50), || {
        let got = events(e, query);
        match done(&got) {
            true => Ok(got),
            false => Err(format!(
                "/events?{query} not as wanted within {secs} s: {got:#?}\n{}",
                e.stderr()
            )),
        }
    })
}

/// Whether `events` holds one of type `kind` on `entity`.
pub fn has(events: &[Value], kind: &str, entity: &str) -> bool {
    position(events, kind, entity).is_some()
}

/// Where the first event of type `kind` on `entity` is.
pub fn position(events: &[Value], kind: &str, entity: &str) -> Option<usize> {
    events
        .iter()
        .position(|e| e["type"] == kind && e["entity"] == entity)
}

/// `dcgm-exporter events <args>`: (exit code, stdout, stderr).
pub fn events_command(args: &[&str]) -> (i32, String, String) {
    let out = super::output_within(exporter_command().arg("events").args(args), super::QUICK);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
