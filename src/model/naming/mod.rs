//! What a metric is, whichever stage names it: its type ([`PromType`]), the exporter's
//! derived `DCGM_EXP_*` metrics ([`ExpField`]), the prefix of the exporter's own metrics
//! ([`PREFIX`]), and dcgm-exporter's base-unit and renamed DCGM fields (`base_units`). The
//! configuration selects among these; collection and output produce and render them.

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

/// Metrics the exporter synthesises (dcgm-exporter's `DCGM_EXP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpField {
    XidErrorsCount,
    ClockEventsCount,
    GpuHealthStatus,
    P2PStatus,
    XidErrorsTotal,
    ClockEventsTotal,
    /// Ours: what each GPU needs now (`collect::health`).
    GpuHealthAction,
    /// Ours: expected, present and lost GPUs of the node.
    GpuCount,
}

impl ExpField {
    pub const ALL: [ExpField; 8] = [
        ExpField::XidErrorsCount,
        ExpField::ClockEventsCount,
        ExpField::GpuHealthStatus,
        ExpField::P2PStatus,
        ExpField::XidErrorsTotal,
        ExpField::ClockEventsTotal,
        ExpField::GpuHealthAction,
        ExpField::GpuCount,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ExpField::XidErrorsCount => "DCGM_EXP_XID_ERRORS_COUNT",
            ExpField::ClockEventsCount => "DCGM_EXP_CLOCK_EVENTS_COUNT",
            ExpField::GpuHealthStatus => "DCGM_EXP_GPU_HEALTH_STATUS",
            ExpField::P2PStatus => "DCGM_EXP_P2P_STATUS",
            ExpField::XidErrorsTotal => "DCGM_EXP_XID_ERRORS_TOTAL",
            ExpField::ClockEventsTotal => "DCGM_EXP_CLOCK_EVENTS_TOTAL",
            ExpField::GpuHealthAction => "DCGM_EXP_GPU_HEALTH_ACTION",
            ExpField::GpuCount => "DCGM_EXP_GPU_COUNT",
        }
    }

    pub fn by_name(name: &str) -> Option<ExpField> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl fmt::Display for ExpField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
