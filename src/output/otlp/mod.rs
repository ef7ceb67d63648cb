//! OTLP push (`--otlp-endpoint`, OpenTelemetry's `OTEL_EXPORTER_OTLP_*`; docs/otlp.md): a
//! [`Sink`] that turns every published page into an OTLP metrics request (`convert`, with
//! `semconv`'s names on request), encodes it on the collection thread and hands it to a
//! bounded [`queue::Queue`]; a thread of its own sends it (`transport`: gRPC or HTTP, TLS
//! by `tls`), retrying with exponential back-off. The collection thread never waits on the
//! receiver: a receiver that is down, slow or hanging costs at most the queue's bound, and
//! each push dropped is counted in the self-metrics. A receiver's back-off hint (HTTP
//! `Retry-After`, gRPC `RetryInfo`) sets the wait before the retry, up to
//! [`MAX_RETRY_AFTER`]. A clean exit sends what is queued within [`FLUSH_DEADLINE`].

mod convert;
mod error;
pub(crate) mod logs;
pub mod proto;
mod queue;
pub(crate) mod semconv;
mod tls;
mod transport;

use crate::config::otlp::Settings;
use crate::model::clock::now_ns;
use crate::model::node::Topology;
use crate::model::Page;
use crate::output::selfmetrics::{SelfMetrics, PREFIX};
use crate::output::sink::Sink;
use bytes::Bytes;
use convert::Converter;
pub use error::Error;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};
use queue::{Batch, Queue};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use transport::Transport;

pub use convert::Converter as PageConverter;

/// Bytes the queue may hold, whatever its length: a page of a large node is some
/// megabytes as OTLP, so this bounds memory for a receiver that is away.
const MAX_QUEUE_BYTES: usize = 64 << 20;
/// First wait before a retry; doubled per failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Tries of one push before it is dropped.
const MAX_ATTEMPTS: u32 = 5;
/// The longest wait a receiver's back-off hint is followed for: a hint of hours would park
/// the sender while the queue drops the oldest pushes anyway, so a longer one is cut to it.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How long a clean exit waits for the queued pushes to be sent. A receiver that hangs
/// then costs this much, not a process that never ends.
const FLUSH_DEADLINE: Duration = Duration::from_secs(5);
/// Beyond the flush deadline, how long the exit waits for a push begun before it (bounded
/// by the push timeout) before leaving the sender behind.
const FLUSH_GRACE: Duration = Duration::from_millis(500);

/// The push's self-metrics.
struct Metrics {
    /// `otlp_pushes_total{result}`: `sent` (accepted) or `failed` (each failed try).
    pushes: IntCounterVec,
    /// `otlp_pushes_dropped_total{reason}`: `queue_full`, `retries_exhausted`, `refused`,
    /// `shutdown`.
    dropped: IntCounterVec,
    /// The data points of the pushes dropped.
    dropped_points: IntCounter,
    queue_length: IntGauge,
    queue_bytes: IntGauge,
}

impl Metrics {
    fn new(m: &SelfMetrics) -> Metrics {
        let name = |n: &str| format!("{PREFIX}{n}");
        let vec = |n: &str, help: &str, label: &str, values: &[&str]| {
            let v = IntCounterVec::new(Opts::new(name(n), help), &[label]).expect("a valid metric");
            for l in values {
                v.with_label_values(&[l]);
            }
            m.register(Box::new(v.clone()));
            v
        };
        let gauge = |n: &str, help: &str| {
            let g = IntGauge::new(name(n), help).expect("a valid metric");
            m.register(Box::new(g.clone()));
            g
        };
        let dropped_points = IntCounter::new(
            name("otlp_data_points_dropped_total"),
            "Data points of the OTLP pushes dropped.",
        )
        .expect("a valid metric");
        m.register(Box::new(dropped_points.clone()));
        Metrics {
            pushes: vec(
                "otlp_pushes_total",
                "OTLP pushes by result: sent (accepted by the receiver) or failed (each failed try).",
                "result",
                &["sent", "failed"],
            ),
            dropped: vec(
                "otlp_pushes_dropped_total",
                "OTLP pushes given up, by reason: queue_full (the oldest waiting push made room \
                 for a new one), retries_exhausted, refused (an answer a retry cannot change), \
                 shutdown (not sent by the flush deadline of a clean exit).",
                "reason",
                &["queue_full", "retries_exhausted", "refused", "shutdown"],
            ),
            dropped_points,
            queue_length: gauge(
                "otlp_queue_length",
                "OTLP pushes waiting to be sent.",
            ),
            queue_bytes: gauge(
                "otlp_queue_bytes",
                "Bytes of the OTLP pushes waiting to be sent.",
            ),
        }
    }

    fn drop_batches(&self, reason: &str, batches: &[Batch]) {
        for b in batches {
            self.dropped.with_label_values(&[reason]).inc();
            self.dropped_points.inc_by(b.points as u64);
        }
    }

    fn observe(&self, queue: &Queue) {
        let (n, bytes) = queue.len();
        self.queue_length.set(n as i64);
        self.queue_bytes.set(bytes as i64);
    }
}

/// The OTLP sink: converts and enqueues on the collection thread, sends on its own.
pub(crate) struct Otlp {
    converter: Mutex<Converter>,
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
    url: String,
    /// Disconnected once the sender thread has ended (taken by `close`).
    sender_done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    /// The event history's events as OTLP log records (`logs`).
    logs: logs::Logs,
}

impl Otlp {
    /// Reads the TLS files and starts the sender thread; nothing is dialled yet.
    pub(crate) fn start(settings: &Settings, self_metrics: &SelfMetrics) -> Result<Otlp, Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        let transport = {
            let _guard = runtime.enter();
            Transport::new(settings)?
        };
        let queue = Arc::new(Queue::new(settings.queue_batches, MAX_QUEUE_BYTES));
        let metrics = Arc::new(Metrics::new(self_metrics));
        let sender = Sender {
            queue: queue.clone(),
            metrics: metrics.clone(),
            url: settings.url.clone(),
        };
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("otlp".into())
            .spawn(move || {
                // Dropped when the thread ends, however it ends.
                let _done = done_tx;
                sender.run(runtime, transport)
            })
            .map_err(Error::Thread)?;
        tracing::info!(
            endpoint = %settings.url,
            protocol = settings.protocol.as_str(),
            "pushing every collection as OTLP metrics"
        );
        Ok(Otlp {
            converter: Mutex::new(Converter::new(
                settings.naming,
                &settings.resource,
                now_ns(),
            )),
            queue,
            metrics,
            url: settings.url.clone(),
            sender_done: Mutex::new(Some(done_rx)),
            logs: logs::Logs::start(settings, self_metrics)?,
        })
    }

    /// Sends what is queued within [`FLUSH_DEADLINE`], then stops the sender; what could
    /// not be sent is counted (`shutdown`) and logged.
    fn flush_and_stop(&self) {
        let (queued, _) = self.queue.len();
        let deadline = Instant::now() + FLUSH_DEADLINE;
        self.logs.finish(deadline);
        self.queue.finish(deadline);
        let done = self
            .sender_done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let ended = done.is_some_and(|rx| {
            matches!(
                rx.recv_timeout(FLUSH_DEADLINE + FLUSH_GRACE),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
            )
        });
        self.queue.close();
        self.logs
            .stop((deadline + FLUSH_GRACE).saturating_duration_since(Instant::now()));
        let left = self.queue.drain();
        self.metrics.drop_batches("shutdown", &left);
        // A push begun before the exit and still waiting for its timeout is lost too.
        let lost = self.metrics.dropped.with_label_values(&["shutdown"]).get() + u64::from(!ended);
        if lost > 0 {
            tracing::warn!(
                endpoint = %self.url,
                "{lost} queued OTLP push(es) not sent by the exit's {FLUSH_DEADLINE:?} flush deadline"
            );
        } else if queued > 0 {
            tracing::info!(endpoint = %self.url, "sent the {queued} queued OTLP push(es) before exiting");
        }
    }

    /// Converts and enqueues `page` (the work a collection pays for the push).
    pub(crate) fn enqueue(&self, page: &Page) {
        let req = self
            .converter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .request(page, now_ns());
        let body = Bytes::from(prost::Message::encode_to_vec(&req));
        let dropped = self.queue.push(Batch {
            body,
            points: page.series_count(),
        });
        if !dropped.is_empty() {
            tracing::debug!(endpoint = %self.url, n = dropped.len(), "OTLP queue full: oldest pushes dropped");
        }
        self.metrics.drop_batches("queue_full", &dropped);
        self.metrics.observe(&self.queue);
    }
}

impl Sink for Otlp {
    fn published(&self, _topology: &Topology, page: &Page, _bytes: &[u8]) {
        self.enqueue(page);
    }

    fn close(&self) {
        self.flush_and_stop();
    }
}

/// The sender thread's state.
struct Sender {
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
    url: String,
}

impl Sender {
    fn run(self, runtime: tokio::runtime::Runtime, mut transport: Transport) {
        let mut failing = false;
        while let Some(batch) = self.queue.pop() {
            self.metrics.observe(&self.queue);
            if !self.deliver(&runtime, &mut transport, &batch, &mut failing) {
                break;
            }
        }
    }

    /// Sends `batch`, retrying as its failure allows, after the receiver's back-off hint
    /// where it gave one. False when the sender must stop: closed, or the exit's flush
    /// deadline came before the push could be sent (it is then counted as `shutdown`).
    fn deliver(
        &self,
        runtime: &tokio::runtime::Runtime,
        transport: &mut Transport,
        batch: &Batch,
        failing: &mut bool,
    ) -> bool {
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=MAX_ATTEMPTS {
            let e = match self.try_fresh(runtime, transport, batch) {
                Ok(()) => {
                    self.metrics.pushes.with_label_values(&["sent"]).inc();
                    if std::mem::take(failing) {
                        tracing::info!(endpoint = %self.url, "OTLP pushes are accepted again");
                    }
                    return true;
                }
                Err(e) => e,
            };
            self.metrics.pushes.with_label_values(&["failed"]).inc();
            if !std::mem::replace(failing, true) {
                tracing::warn!(endpoint = %self.url, "OTLP push failed: {}", e.why);
            } else {
                tracing::debug!(endpoint = %self.url, attempt, "OTLP push failed: {}", e.why);
            }
            let give_up = if !e.retryable {
                Some("refused")
            } else if attempt == MAX_ATTEMPTS {
                Some("retries_exhausted")
            } else {
                None
            };
            if let Some(reason) = give_up {
                self.metrics
                    .drop_batches(reason, std::slice::from_ref(batch));
                return true;
            }
            let wait = retry_wait(e.retry_after, backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
            if self
                .queue
                .flush_by()
                .is_some_and(|by| Instant::now() + wait > by)
            {
                self.metrics
                    .drop_batches("shutdown", std::slice::from_ref(batch));
                return false;
            }
            // Woken early by the exit's flush: the retry is made at once.
            if !self.queue.sleep(wait) {
                return false;
            }
        }
        true
    }

    /// One try, and where it failed on a stale kept connection before any answer, one more
    /// at once on a new connection (not one of the [`MAX_ATTEMPTS`], no back-off: the
    /// receiver never saw the first). Each failed try is counted.
    fn try_fresh(
        &self,
        runtime: &tokio::runtime::Runtime,
        transport: &mut Transport,
        batch: &Batch,
    ) -> Result<(), transport::PushError> {
        match self.try_once(runtime, transport, batch) {
            Err(e) if e.stale => {
                self.metrics.pushes.with_label_values(&["failed"]).inc();
                tracing::debug!(endpoint = %self.url, "OTLP push failed on a kept connection, again on a new one: {}", e.why);
                self.try_once(runtime, transport, batch)
            }
            r => r,
        }
    }

    /// One try; during the exit's flush, cut at its deadline.
    fn try_once(
        &self,
        runtime: &tokio::runtime::Runtime,
        transport: &mut Transport,
        batch: &Batch,
    ) -> Result<(), transport::PushError> {
        let push = transport.push(batch.body.clone());
        match self.queue.flush_by() {
            None => runtime.block_on(push),
            Some(by) => runtime.block_on(async move {
                tokio::time::timeout(by.saturating_duration_since(Instant::now()), push)
                    .await
                    .unwrap_or_else(|_| {
                        Err(transport::PushError::retry(
                            "not answered before the exit's flush deadline",
                        ))
                    })
            }),
        }
    }
}

/// The wait before a retry: the receiver's hint where it gave one (at most
/// [`MAX_RETRY_AFTER`]), else the exponential back-off.
fn retry_wait(hint: Option<Duration>, backoff: Duration) -> Duration {
    hint.map_or(backoff, |h| h.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests;
