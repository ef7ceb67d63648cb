//! Logs the way dcgm-exporter's users parse them: logrus's text shape
//! (`time="2024-01-01T00:00:00Z" level=info msg="listening" addr=127.0.0.1:9400`) or, with
//! `--log-format json`, one JSON object per line (`{"level":"info","msg":"…","time":"…"}`),
//! fatal start-up errors included. Colour only when stderr is a terminal. `--debug` turns on
//! our own debug lines; the HTTP stack (hyper, warp, h2, tonic, rustls) stays at info.

pub(crate) mod utc;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use utc::Utc;

/// Libraries whose debug output is their internals, not ours.
const QUIET_TARGETS: [&str; 12] = [
    "hyper",
    "hyper_util",
    "warp",
    "h2",
    "tonic",
    "tower",
    "rustls",
    "tokio",
    "mio",
    "kube_client",
    "kube_runtime",
    "pprof",
];

thread_local! {
    /// The host engine this thread works for, with several (`-r a,b`): each line it logs
    /// carries `engine=NAME`, so a reader knows whose session was lost or rebuilt.
    static ENGINE: std::cell::RefCell<Option<std::sync::Arc<str>>> =
        const { std::cell::RefCell::new(None) };
}

/// Names the engine of the lines this thread logs from now on (`None`: no engine field).
pub(crate) fn set_thread_engine(engine: Option<std::sync::Arc<str>>) {
    ENGINE.with(|e| *e.borrow_mut() = engine);
}

/// The engine this thread's lines name; a thread it starts for that engine names it too.
pub(crate) fn thread_engine() -> Option<std::sync::Arc<str>> {
    ENGINE.with(|e| e.borrow().clone())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

impl Format {
    pub fn from_flag(s: &str) -> Format {
        if s == "json" {
            Format::Json
        } else {
            Format::Text
        }
    }
}

/// logrus's level names.
fn level_name(l: &Level) -> &'static str {
    match *l {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

/// The filter `--debug` selects: ours at debug, the HTTP stack at info. `RUST_LOG`, when
/// set, replaces it.
pub(crate) fn filter_directives(debug: bool) -> String {
    let mut d = String::from(if debug { "debug" } else { "info" });
    for t in QUIET_TARGETS {
        let _ = write!(d, ",{t}=info");
    }
    d
}

/// Installs the global subscriber on stderr.
pub fn init(format: Format, debug: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter_directives(debug)));
    let color = wants_color(
        format,
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(LogrusFormat { format, color })
        .try_init();
}

/// Colour only for text on a terminal, and never when `NO_COLOR` is set to anything but
/// the empty string (https://no-color.org).
pub(crate) fn wants_color(
    format: Format,
    terminal: bool,
    no_color: Option<&std::ffi::OsStr>,
) -> bool {
    format == Format::Text && terminal && !matches!(no_color, Some(v) if !v.is_empty())
}

/// Writes one line for an error that ends the process, in the chosen format; works before
/// (or without) [`init`].
pub fn fatal(format: Format, msg: &str) {
    let line = render(format, false, "fatal", &Utc::now(), msg, &Kv::new());
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

struct LogrusFormat {
    format: Format,
    color: bool,
}

/// Field values keep their type for JSON (numbers and booleans unquoted, as logrus).
type Kv = BTreeMap<String, serde_json::Value>;

#[derive(Default)]
struct Fields {
    msg: String,
    kv: Kv,
}

impl Fields {
    fn put(&mut self, field: &Field, v: serde_json::Value) {
        self.kv.insert(field.name().to_string(), v);
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.msg = value.to_string();
        } else {
            self.put(field, value.into());
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let v = format!("{value:?}");
        if field.name() == "message" {
            self.msg = v;
        } else {
            self.put(field, v.into());
        }
    }
}

impl<S, N> FormatEvent<S, N> for LogrusFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut f = Fields::default();
        event.record(&mut f);
        if let Some(e) = thread_engine() {
            f.kv.entry("engine".into()).or_insert_with(|| (*e).into());
        }
        let line = render(
            self.format,
            self.color,
            level_name(event.metadata().level()),
            &Utc::now(),
            &f.msg,
            &f.kv,
        );
        writeln!(writer, "{line}")
    }
}

/// logrus quotes a value unless it is made only of these characters (and is not empty).
fn needs_quoting(s: &str) -> bool {
    s.is_empty()
        || !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._/@^+".contains(c))
}

/// Go's `%q` for the characters log messages contain.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn text_value(s: &str) -> String {
    if needs_quoting(s) {
        go_quote(s)
    } else {
        s.to_string()
    }
}

fn render(format: Format, color: bool, level: &str, time: &Utc, msg: &str, kv: &Kv) -> String {
    match format {
        Format::Json => {
            // encoding/json of a map: keys sorted, fields beside level/msg/time.
            let mut obj = serde_json::Map::new();
            for (k, v) in kv {
                obj.insert(k.clone(), v.clone());
            }
            obj.insert("level".into(), level.into());
            obj.insert("msg".into(), msg.into());
            obj.insert("time".into(), time.rfc3339().into());
            let sorted: BTreeMap<_, _> = obj.into_iter().collect();
            serde_json::to_string(&sorted).unwrap_or_default()
        }
        Format::Text => {
            let level = if color {
                let code = match level {
                    "error" | "fatal" => 31,
                    "warning" => 33,
                    "info" => 36,
                    _ => 37,
                };
                format!("\x1b[{code}m{level}\x1b[0m")
            } else {
                level.to_string()
            };
            let mut line = format!(
                "time=\"{}\" level={level} msg={}",
                time.rfc3339(),
                text_value(msg)
            );
            for (k, v) in kv {
                let v = match v {
                    serde_json::Value::String(s) => text_value(s),
                    other => text_value(&other.to_string()),
                };
                let _ = write!(line, " {k}={v}");
            }
            line
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_turns_colour_off_on_a_terminal() {
        use std::ffi::OsStr;
        assert!(wants_color(Format::Text, true, None));
        // An empty NO_COLOR is as good as unset (no-color.org).
        assert!(wants_color(Format::Text, true, Some(OsStr::new(""))));
        assert!(!wants_color(Format::Text, true, Some(OsStr::new("1"))));
        assert!(!wants_color(Format::Text, false, None));
        assert!(!wants_color(Format::Json, true, None));
    }

    fn t() -> Utc {
        Utc::from_unix(1_704_067_200)
    }

    #[test]
    fn text_lines_have_logrus_shape() {
        let mut kv = Kv::new();
        kv.insert("file".to_string(), "/etc/x.csv".into());
        kv.insert("addr".to_string(), "127.0.0.1:9400".into());
        kv.insert("n".to_string(), 3.into());
        assert_eq!(
            render(Format::Text, false, "info", &t(), "reloaded counters", &kv),
            "time=\"2024-01-01T00:00:00Z\" level=info msg=\"reloaded counters\" addr=\"127.0.0.1:9400\" file=/etc/x.csv n=3"
        );
        assert_eq!(
            render(Format::Text, false, "warning", &t(), "ok", &Kv::new()),
            "time=\"2024-01-01T00:00:00Z\" level=warning msg=ok"
        );
        assert_eq!(
            render(
                Format::Text,
                false,
                "fatal",
                &t(),
                "say \"hi\"\n",
                &Kv::new()
            ),
            "time=\"2024-01-01T00:00:00Z\" level=fatal msg=\"say \\\"hi\\\"\\n\""
        );
        assert_eq!(
            render(Format::Text, false, "info", &t(), "", &Kv::new()),
            "time=\"2024-01-01T00:00:00Z\" level=info msg=\"\""
        );
        assert!(render(Format::Text, true, "info", &t(), "x", &Kv::new())
            .contains("level=\x1b[36minfo\x1b[0m"));
    }

    #[test]
    fn json_lines_sort_their_keys() {
        let mut kv = Kv::new();
        kv.insert("error".to_string(), "boom".into());
        kv.insert("event_state".to_string(), 2.into());
        assert_eq!(
            render(Format::Json, false, "error", &t(), "collection failed", &kv),
            r#"{"error":"boom","event_state":2,"level":"error","msg":"collection failed","time":"2024-01-01T00:00:00Z"}"#
        );
    }

    #[test]
    fn debug_keeps_the_http_stack_at_info() {
        let d = filter_directives(true);
        assert!(d.starts_with("debug,"));
        for t in ["hyper=info", "h2=info", "tonic=info", "kube_client=info"] {
            assert!(d.contains(t), "{d}");
        }
        assert!(filter_directives(false).starts_with("info,"));
    }
}
