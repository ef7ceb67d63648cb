//! The event history's events (`model::events`) as OTLP log records, pushed to the same
//! receiver as the metrics (OTLP/HTTP: the metrics path with `v1/metrics` replaced by
//! `v1/logs`; gRPC: `LogsService/Export`), with the same resource. A thread of its own
//! reads the events recorded since its last push, in the order recorded, and sends them
//! as one request through the metrics push's [`Sender`] (its retries, back-off hints and
//! exit deadline). The history is the buffer: nothing is queued besides it, and events it
//! dropped before they could be sent are counted, as are those of a push given up.

use super::proto::common::{any_value, AnyValue, InstrumentationScope, KeyValue};
use super::proto::logs::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use super::proto::logs_collector::ExportLogsServiceRequest;
use super::proto::resource::Resource;
use super::queue::{Batch, Queue};
use super::transport::Transport;
use super::{Metrics, Sender};
use crate::config::otlp::Settings;
use crate::model::events::{self, Detail, Event, Severity};
use crate::output::selfmetrics::{SelfMetrics, PREFIX};
use bytes::Bytes;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Log records per request at most; more wait for the next.
const MAX_PER_PUSH: usize = 1000;
/// After the first new event, how long the thread waits for the rest of a burst (the XIDs
/// of one collection) to send them as one request.
const GATHER: Duration = Duration::from_millis(100);
/// The longest the idle thread sleeps between looks at the history (new events and the
/// exit wake it at once).
const IDLE: Duration = Duration::from_secs(30);

/// The HTTP path of the logs signal for the metrics push's `path`.
pub(crate) fn logs_path(metrics_path: &str) -> String {
    match metrics_path.strip_suffix("v1/metrics") {
        Some(base) => format!("{base}v1/logs"),
        None => "/v1/logs".to_string(),
    }
}

/// The logs push: its thread and what stops it.
pub(crate) struct Logs {
    /// Holds no push: the [`Sender`]'s back-off sleeps and the exit's deadline live here.
    queue: Arc<Queue>,
    done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl Logs {
    pub(crate) fn start(
        settings: &Settings,
        self_metrics: &SelfMetrics,
    ) -> Result<Logs, super::Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(super::Error::LogsRuntime)?;
        let path = logs_path(&settings.path);
        let transport = {
            let _guard = runtime.enter();
            Transport::new(settings)?.for_logs(&path)
        };
        let queue = Arc::new(Queue::new(1, 0));
        let url = match settings.protocol {
            crate::config::otlp::Protocol::HttpProtobuf => {
                format!("{}{path}", settings.url.trim_end_matches(&settings.path))
            }
            crate::config::otlp::Protocol::Grpc => settings.url.clone(),
        };
        tracing::info!(endpoint = %url, "pushing the event history as OTLP log records");
        let sender = Sender {
            queue: queue.clone(),
            metrics: Arc::new(metrics(self_metrics)),
            url,
        };
        let resource = Resource {
            attributes: settings
                .resource
                .iter()
                .map(|(k, v)| string(k, v))
                .collect(),
            ..Default::default()
        };
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("otlp-logs".into())
            .spawn(move || {
                let _done = done_tx;
                run(sender, runtime, transport, resource)
            })
            .map_err(super::Error::LogsThread)?;
        Ok(Logs {
            queue,
            done: Mutex::new(Some(done_rx)),
        })
    }

    /// The exit has begun: what the history holds unsent is sent by `deadline`.
    pub(crate) fn finish(&self, deadline: Instant) {
        self.queue.finish(deadline);
        events::global().wake();
    }

    /// Waits for the thread to end (at most `wait`), then stops it.
    pub(crate) fn stop(&self, wait: Duration) {
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(rx) = done {
            let _ = rx.recv_timeout(wait);
        }
        self.queue.close();
        events::global().wake();
    }
}

/// The logs push's self-metrics, in the shape of the metrics push's.
fn metrics(m: &SelfMetrics) -> Metrics {
    let name = |n: &str| format!("{PREFIX}{n}");
    let vec = |n: &str, help: &str, label: &str, values: &[&str]| {
        let v = IntCounterVec::new(Opts::new(name(n), help), &[label]).expect("a valid metric");
        for l in values {
            v.with_label_values(&[l]);
        }
        m.register(Box::new(v.clone()));
        v
    };
    let dropped_points = IntCounter::new(
        name("otlp_log_records_dropped_total"),
        "Events not pushed as OTLP log records: those of the pushes given up, and those the \
         event history dropped before they could be sent.",
    )
    .expect("a valid metric");
    m.register(Box::new(dropped_points.clone()));
    let unexported = || IntGauge::new("unexported", "-").expect("a valid metric");
    Metrics {
        pushes: vec(
            "otlp_log_pushes_total",
            "OTLP log pushes (the event history's events) by result: sent or failed (each try).",
            "result",
            &["sent", "failed"],
        ),
        dropped: vec(
            "otlp_log_pushes_dropped_total",
            "OTLP log pushes given up, by reason: retries_exhausted, refused, shutdown.",
            "reason",
            &["retries_exhausted", "refused", "shutdown"],
        ),
        dropped_points,
        queue_length: unexported(),
        queue_bytes: unexported(),
    }
}

fn run(
    sender: Sender,
    runtime: tokio::runtime::Runtime,
    mut transport: Transport,
    resource: Resource,
) {
    let history = events::global();
    let (mut cursor, mut failing) = (0u64, false);
    // `sleep(ZERO)` answers whether the queue is still open.
    while sender.queue.sleep(Duration::ZERO) {
        let (batch, missed) = history.after(cursor, MAX_PER_PUSH);
        sender.metrics.dropped_points.inc_by(missed);
        let Some(last) = batch.last() else {
            if sender.queue.flush_by().is_some() {
                return;
            }
            // Finishing or closed: `finish` and `stop` change the queue, then wake.
            let stopping =
                || sender.queue.flush_by().is_some() || !sender.queue.sleep(Duration::ZERO);
            history.wait_after(cursor, IDLE, stopping);
            if sender.queue.flush_by().is_none() && history.after(cursor, 1).0.len() == 1 {
                sender.queue.sleep(GATHER);
            }
            continue;
        };
        cursor = last.seq;
        let body = Bytes::from(prost::Message::encode_to_vec(&request(&resource, &batch)));
        let push = Batch {
            body,
            points: batch.len(),
        };
        if !sender.deliver(&runtime, &mut transport, &push, &mut failing) {
            return;
        }
    }
}

/// One request of `events`, under `resource`.
pub(crate) fn request(resource: &Resource, events: &[Arc<Event>]) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(resource.clone()),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "dcgm-exporter".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                log_records: events.iter().map(|e| record(e)).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn ns(us: i64) -> u64 {
    u64::try_from(us).unwrap_or(0).saturating_mul(1000)
}

/// One event as a log record: its message the body, its type the event name, what it is
/// about the `dcgm.*` attributes.
fn record(e: &Event) -> LogRecord {
    let (number, text) = match e.severity {
        Severity::Info => (SeverityNumber::Info, "INFO"),
        Severity::Warning => (SeverityNumber::Warn, "WARN"),
        Severity::Error => (SeverityNumber::Error, "ERROR"),
    };
    let mut attributes = vec![
        string("dcgm.event.type", e.kind.name()),
        string("dcgm.entity", &e.entity),
        string("dcgm.time_source", e.source.name()),
        int("dcgm.event.seq", i64::try_from(e.seq).unwrap_or(i64::MAX)),
    ];
    if let Some(engine) = &e.engine {
        attributes.push(string("dcgm.engine", engine));
    }
    for (k, v) in &e.details {
        let key = format!("dcgm.{k}");
        attributes.push(match v {
            Detail::Int(i) => int(&key, *i),
            Detail::Str(s) => string(&key, s),
        });
    }
    LogRecord {
        time_unix_nano: ns(e.time_us),
        observed_time_unix_nano: ns(e.recorded_us),
        severity_number: number as i32,
        severity_text: text.into(),
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(e.message.clone())),
        }),
        attributes,
        event_name: format!("dcgm_exporter.{}", e.kind.name()),
        ..Default::default()
    }
}

fn string(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_string())),
        }),
        ..Default::default()
    }
}

fn int(k: &str, v: i64) -> KeyValue {
    KeyValue {
        key: k.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(v)),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::events::{Bounds, Filter, Recorder};

    #[test]
    fn the_logs_path_follows_the_metrics_path() {
        assert_eq!(logs_path("/v1/metrics"), "/v1/logs");
        assert_eq!(logs_path("/otlp/v1/metrics"), "/otlp/v1/logs");
        assert_eq!(logs_path("/custom"), "/v1/logs");
    }

    #[test]
    fn an_event_becomes_a_log_record() {
        let r = Recorder::new(Bounds::default());
        r.dcgm_xid(
            dcgm_sys::Entity::gpu(2),
            79,
            1_000_000,
            "GPU has fallen off the bus",
        );
        let events = r.query(&Filter::default()).events;
        let resource = Resource {
            attributes: vec![string("host.name", "node-1")],
            ..Default::default()
        };
        let req = request(&resource, &events);
        let rl = &req.resource_logs[0];
        assert_eq!(rl.resource.as_ref(), Some(&resource));
        let rec = &rl.scope_logs[0].log_records[0];
        assert_eq!(rec.time_unix_nano, 1_000_000_000);
        assert_eq!(rec.severity_number, SeverityNumber::Warn as i32);
        assert_eq!(rec.event_name, "dcgm_exporter.xid");
        let attr = |k: &str| {
            rec.attributes
                .iter()
                .find(|a| a.key == k)
                .and_then(|a| a.value.clone())
                .and_then(|v| v.value)
        };
        assert_eq!(
            attr("dcgm.entity"),
            Some(any_value::Value::StringValue("gpu:2".into()))
        );
        assert_eq!(attr("dcgm.xid"), Some(any_value::Value::IntValue(79)));
        assert_eq!(
            attr("dcgm.time_source"),
            Some(any_value::Value::StringValue("dcgm".into()))
        );
    }
}
