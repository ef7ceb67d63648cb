//! What a metric is, whichever stage names it: its type ([`PromType`]), the prefix of the
//! exporter's own metrics ([`PREFIX`]), and dcgm-exporter's base-unit and renamed DCGM
//! fields (`base_units`). The configuration selects among these; collection and output
//! produce and render them. The derived `DCGM_EXP_*` names are their collectors' own
//! (`collect::exp`), handed to the counters reader at start-up.

pub mod base_units;

use std::fmt;

/// The exporter's own metrics' prefix. Lower-case, and no DCGM field name or 1.x legacy name
/// starts with it, so a self-metric cannot collide with an exported field.
pub const PREFIX: &str = "dcgm_exporter_";

/// A metric's type: the counters CSV's second column, and what `# TYPE` shows.
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
    pub const ALL: [PromType; 5] = [
        PromType::Gauge,
        PromType::Counter,
        PromType::Histogram,
        PromType::Summary,
        PromType::Label,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PromType::Gauge => "gauge",
            PromType::Counter => "counter",
            PromType::Histogram => "histogram",
            PromType::Summary => "summary",
            PromType::Label => "label",
        }
    }

    /// Case-sensitive, as dcgm-exporter matches it.
    pub fn parse(s: &str) -> Option<PromType> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// The CSV word, which is also what `# TYPE` shows.
impl fmt::Display for PromType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
