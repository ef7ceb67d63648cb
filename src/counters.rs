//! The counters CSV, in dcgm-exporter's format: `<field>, <type>, <help>` per line, `#`
//! comments at the start of a line, RFC 4180 quotes, columns trimmed of spaces only.

use dcgm_sys::fields::{self, FieldMeta};
use std::fmt;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromType {
    Gauge,
    Counter,
    Histogram,
    Summary,
    /// The field's value becomes a label on every series of the entity.
    Label,
}

impl PromType {
    fn parse(s: &str) -> Option<PromType> {
        Some(match s {
            "gauge" => PromType::Gauge,
            "counter" => PromType::Counter,
            "histogram" => PromType::Histogram,
            "summary" => PromType::Summary,
            "label" => PromType::Label,
            _ => return None,
        })
    }
}

impl fmt::Display for PromType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PromType::Gauge => "gauge",
            PromType::Counter => "counter",
            PromType::Histogram => "histogram",
            PromType::Summary => "summary",
            PromType::Label => "label",
        })
    }
}

/// Metrics the exporter synthesises (dcgm-exporter's `DCGM_EXP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpField {
    XidErrorsCount,
    ClockEventsCount,
    GpuHealthStatus,
    P2PStatus,
    XidErrorsTotal,
    ClockEventsTotal,
}

impl ExpField {
    const ALL: [(&'static str, ExpField); 6] = [
        ("DCGM_EXP_XID_ERRORS_COUNT", ExpField::XidErrorsCount),
        ("DCGM_EXP_CLOCK_EVENTS_COUNT", ExpField::ClockEventsCount),
        ("DCGM_EXP_GPU_HEALTH_STATUS", ExpField::GpuHealthStatus),
        ("DCGM_EXP_P2P_STATUS", ExpField::P2PStatus),
        ("DCGM_EXP_XID_ERRORS_TOTAL", ExpField::XidErrorsTotal),
        ("DCGM_EXP_CLOCK_EVENTS_TOTAL", ExpField::ClockEventsTotal),
    ];

    fn by_name(name: &str) -> Option<ExpField> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum CounterField {
    Dcgm(&'static FieldMeta),
    Exp(ExpField),
}

/// One CSV row.
#[derive(Clone, Debug, PartialEq)]
pub struct Counter {
    pub field: CounterField,
    /// The metric name: column 1 as written, or the 4.6 name when column 1 is a field id.
    pub name: String,
    pub prom_type: PromType,
    pub help: String,
    /// 1-based line in the CSV.
    pub line: usize,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    /// Rows in file order.
    pub all: Vec<Counter>,
}

impl Counters {
    /// Exporter-synthesised rows.
    pub fn exp(&self) -> impl Iterator<Item = &Counter> {
        self.all
            .iter()
            .filter(|c| matches!(c.field, CounterField::Exp(_)))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CountersError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{file}:{line}: {message}")]
    Line {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}: no metrics: every line is empty or a comment")]
    Empty { file: String },
}

pub fn load(path: &Path) -> Result<Counters, CountersError> {
    let text = std::fs::read_to_string(path).map_err(|source| CountersError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_str(&path.display().to_string(), &text)
}

pub fn parse_str(file: &str, text: &str) -> Result<Counters, CountersError> {
    let err = |line: usize, message: String| CountersError::Line {
        file: file.to_string(),
        line,
        message,
    };
    let mut out = Counters::default();
    for (line, record) in logical_records(text) {
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::None)
            .from_reader(record.as_bytes());
        let rec = match rdr.records().next() {
            Some(Ok(r)) => r,
            Some(Err(e)) => return Err(err(line, format!("malformed CSV: {e}"))),
            None => continue,
        };
        // Only spaces are trimmed, as dcgm-exporter does (a tab stays part of the name).
        let cols: Vec<&str> = rec.iter().map(|c| c.trim_matches(' ')).collect();
        if cols.len() == 1 && cols[0].is_empty() {
            continue;
        }
        if cols.len() != 3 {
            return Err(err(
                line,
                format!(
                    "expected 3 columns (field, type, help), found {}",
                    cols.len()
                ),
            ));
        }
        let (name, ty, help) = (cols[0], cols[1], cols[2]);
        let prom_type = PromType::parse(ty).ok_or_else(|| {
            err(line, format!("unknown metric type '{ty}' for {name} (use gauge, counter, histogram, summary or label)"))
        })?;
        let (field, metric_name) = if let Some(m) = fields::by_name(name) {
            (CounterField::Dcgm(m), name.to_string())
        } else if let Some(x) = ExpField::by_name(name) {
            if !matches!(prom_type, PromType::Gauge | PromType::Counter) {
                return Err(err(
                    line,
                    format!("{name} must be a gauge or a counter, not {ty}"),
                ));
            }
            (CounterField::Exp(x), name.to_string())
        } else if let Ok(id) = name.parse::<u16>() {
            let m =
                fields::by_id(id).ok_or_else(|| err(line, format!("no DCGM field has id {id}")))?;
            (CounterField::Dcgm(m), m.name.to_string())
        } else {
            let hint = fields::closest_names(name, 3).join(", ");
            return Err(err(
                line,
                format!("unknown DCGM field '{name}' (did you mean {hint}?)"),
            ));
        };
        if let CounterField::Dcgm(m) = &field {
            if m.field_type == b'b' {
                return Err(err(
                    line,
                    format!("{name} is a binary field and cannot be exported"),
                ));
            }
        }
        if let Some(prev) = out.all.iter().find(|c| c.name == metric_name) {
            return Err(err(
                line,
                format!(
                    "duplicate metric {metric_name} (first defined on line {})",
                    prev.line
                ),
            ));
        }
        out.all.push(Counter {
            field,
            name: metric_name,
            prom_type,
            help: help.to_string(),
            line,
        });
    }
    if out.all.is_empty() {
        return Err(CountersError::Empty {
            file: file.to_string(),
        });
    }
    Ok(out)
}

/// Splits the text into (first line number, record text), skipping blank lines and lines
/// that start with '#', and joining lines while a quoted field is open (RFC 4180).
fn logical_records(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (i, l) in text.lines().enumerate() {
        match open.as_mut() {
            Some((_, buf)) => {
                buf.push('\n');
                buf.push_str(l);
            }
            None if l.is_empty() || l.starts_with('#') => continue,
            None => open = Some((i + 1, l.to_string())),
        }
        if open
            .as_ref()
            .is_some_and(|(_, b)| b.matches('"').count() % 2 == 0)
        {
            out.extend(open.take());
        }
    }
    out.extend(open);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<Counters, String> {
        parse_str("t.csv", t).map_err(|e| e.to_string())
    }

    #[test]
    fn shipped_csvs_parse() {
        for f in [
            "default-counters.csv",
            "dcp-metrics-included.csv",
            "1.x-compatibility-metrics.csv",
        ] {
            let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("etc").join(f);
            let c = load(&p).unwrap_or_else(|e| panic!("{e}"));
            assert!(c.all.len() >= 18, "{f}: {}", c.all.len());
        }
    }

    #[test]
    fn comments_quotes_and_trimming() {
        let c = parse("# comment\n\nDCGM_FI_DEV_GPU_TEMP ,  gauge ,\"temp, in C\"\n").unwrap();
        assert_eq!(c.all[0].help, "temp, in C");
        assert_eq!(c.all[0].line, 3);
        // '#' only starts a comment at the start of a line.
        assert!(parse(" # x, gauge, y\n")
            .unwrap_err()
            .contains("t.csv:1: unknown DCGM field '# x'"));
        let c = parse("DCGM_FI_DEV_GPU_TEMP, gauge, a # not a comment\n").unwrap();
        assert_eq!(c.all[0].help, "a # not a comment");
    }

    #[test]
    fn column_count_type_and_name_errors_name_the_line() {
        assert_eq!(
            parse("DCGM_FI_DEV_GPU_TEMP, gauge\n").unwrap_err(),
            "t.csv:1: expected 3 columns (field, type, help), found 2"
        );
        assert!(parse("DCGM_FI_DEV_GPU_TEMP, gauge, h, x\n")
            .unwrap_err()
            .contains("found 4"));
        assert!(parse("DCGM_FI_DEV_GPU_TEMP, gaugee, h\n")
            .unwrap_err()
            .contains("unknown metric type 'gaugee'"));
        let e = parse("\nDCGM_FI_DEV_GPU_TEMPP, gauge, h\n").unwrap_err();
        assert!(
            e.starts_with("t.csv:2: unknown DCGM field 'DCGM_FI_DEV_GPU_TEMPP'")
                && e.contains("DCGM_FI_DEV_GPU_TEMP"),
            "{e}"
        );
        assert!(
            parse("DCGM_FI_DEV_GPU_TEMP\t, gauge, h\n")
                .unwrap_err()
                .contains("unknown DCGM field"),
            "tabs are not trimmed"
        );
        assert!(
            parse("DCGM_FI_DEV_GPU_TEMP, gauge, h\nDCGM_FI_DEV_GPU_TEMP, gauge, h\n")
                .unwrap_err()
                .contains("t.csv:2: duplicate metric")
        );
        // The same field under two names is two metrics (e.g. while migrating dashboards).
        assert_eq!(
            parse("dcgm_gpu_temp, gauge, h\nDCGM_FI_DEV_GPU_TEMP, gauge, h\n")
                .unwrap()
                .all
                .len(),
            2
        );
        assert!(parse("DCGM_FI_DEV_MIG_GI_INFO, gauge, h\n")
            .unwrap_err()
            .contains("binary"));
        assert!(parse("9999, gauge, h\n")
            .unwrap_err()
            .contains("no DCGM field has id 9999"));
        assert!(parse("DCGM_EXP_XID_ERRORS_COUNT, label, h\n")
            .unwrap_err()
            .contains("gauge or a counter"));
        assert!(parse("# only comments\n")
            .unwrap_err()
            .contains("no metrics"));
    }

    #[test]
    fn legacy_alias_numeric_and_exp_names_resolve() {
        let c = parse(
            "dcgm_gpu_temp, gauge, a\nDCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, b\n155, gauge, c\n\
             DCGM_EXP_XID_ERRORS_COUNT, counter, d\nDCGM_FI_DRIVER_VERSION, label, e\n",
        )
        .unwrap();
        let ids: Vec<Option<u16>> = c
            .all
            .iter()
            .map(|r| match &r.field {
                CounterField::Dcgm(m) => Some(m.id),
                CounterField::Exp(_) => None,
            })
            .collect();
        assert_eq!(ids, vec![Some(150), Some(112), Some(155), None, Some(1)]);
        assert_eq!(c.all[2].name, "DCGM_FI_DEV_BOARD_POWER_WATTS");
        assert_eq!(c.all[0].name, "dcgm_gpu_temp");
        assert_eq!(c.exp().count(), 1);
        assert_eq!(c.all[4].prom_type, PromType::Label);
    }
}
