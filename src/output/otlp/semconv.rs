//! `--otlp-metric-names semconv`: which DCGM fields become which metric of OpenTelemetry's
//! hardware semantic conventions (semconv `model/hardware/`: `hw.gpu.*`, `hw.power`,
//! `hw.energy`, `hw.errors`, `hw.temperature`), in that metric's unit and instrument. A
//! family is found by the DCGM field it holds (`FamilyRef::field`), never by its exported
//! name, so every emulated release's names (and 4.9.0's base-unit fields) map alike. The
//! table is docs/otlp.md's; a field without a row is pushed under its page name.

/// The instrument a semconv metric is (what OTLP type it is pushed as).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Instrument {
    Gauge,
    /// A monotonic cumulative sum.
    Counter,
    /// A non-monotonic cumulative sum.
    UpDownCounter,
}

/// One row: DCGM field -> semconv metric.
#[derive(Debug)]
pub(crate) struct Mapping {
    pub field: u16,
    pub metric: &'static str,
    pub unit: &'static str,
    pub instrument: Instrument,
    pub description: &'static str,
    /// The page's value to the value in `unit`.
    pub scale: Scale,
    /// Attributes that tell this field's points from the others of the metric.
    pub attributes: &'static [(&'static str, &'static str)],
}

/// A unit conversion, done as DCGM's base-unit fields are (a division by 100, not a
/// multiplication by 0.01, so the results are the same floats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scale {
    One,
    /// % -> ratio.
    Percent,
    /// MiB -> bytes.
    Mebi,
    /// mJ -> J.
    Milli,
}

impl Scale {
    pub(crate) fn apply(self, v: f64) -> f64 {
        match self {
            Scale::One => v,
            Scale::Percent => v / 100.0,
            Scale::Mebi => v * 1_048_576.0,
            Scale::Milli => v / 1000.0,
        }
    }
}

macro_rules! row {
    ($field:literal, $metric:literal, $unit:literal, $inst:ident, $desc:literal, $scale:ident,
     [$(($k:literal, $v:literal)),*]) => {
        Mapping {
            field: $field,
            metric: $metric,
            unit: $unit,
            instrument: Instrument::$inst,
            description: $desc,
            scale: Scale::$scale,
            attributes: &[$(($k, $v)),*],
        }
    };
}

/// Every mapping. Ids below 1600 hold DCGM's legacy units (%, MiB, mJ); 1611-1627 are the
/// base-unit fields of dcgm-exporter 4.9.0 (ratio, bytes, J), already in semconv's units.
pub(crate) static MAPPINGS: &[Mapping] = &[
    row!(
        203,
        "hw.gpu.utilization",
        "1",
        Gauge,
        "Fraction of time spent in a specific task.",
        Percent,
        [("hw.gpu.task", "general")]
    ),
    row!(
        1613,
        "hw.gpu.utilization",
        "1",
        Gauge,
        "Fraction of time spent in a specific task.",
        One,
        [("hw.gpu.task", "general")]
    ),
    row!(
        206,
        "hw.gpu.utilization",
        "1",
        Gauge,
        "Fraction of time spent in a specific task.",
        Percent,
        [("hw.gpu.task", "encoder")]
    ),
    row!(
        1615,
        "hw.gpu.utilization",
        "1",
        Gauge,
        "Fraction of time spent in a specific task.",
        One,
        [("hw.gpu.task", "encoder")]
    ),
    row!(
        207,
        "hw.gpu.utilization",
        "1",
        Gauge,
        "Fraction of time spent in a specific task.",
        Percent,
        [("hw.gpu.task", "decoder")]
    ),
    row!(
        1616,
        "hw.gpu.utilization",
        "1",
        Gauge,
        "Fraction of time spent in a specific task.",
        One,
        [("hw.gpu.task", "decoder")]
    ),
    row!(
        252,
        "hw.gpu.memory.usage",
        "By",
        UpDownCounter,
        "GPU memory used.",
        Mebi,
        []
    ),
    row!(
        1627,
        "hw.gpu.memory.usage",
        "By",
        UpDownCounter,
        "GPU memory used.",
        One,
        []
    ),
    row!(
        250,
        "hw.gpu.memory.limit",
        "By",
        UpDownCounter,
        "Size of the GPU memory.",
        Mebi,
        []
    ),
    row!(
        1625,
        "hw.gpu.memory.limit",
        "By",
        UpDownCounter,
        "Size of the GPU memory.",
        One,
        []
    ),
    row!(
        254,
        "hw.gpu.memory.utilization",
        "1",
        Gauge,
        "Fraction of GPU memory used.",
        One,
        []
    ),
    row!(
        155,
        "hw.power",
        "W",
        Gauge,
        "Instantaneous power consumed by the component",
        One,
        [("hw.type", "gpu")]
    ),
    row!(
        156,
        "hw.energy",
        "J",
        Counter,
        "Energy consumed by the component",
        Milli,
        [("hw.type", "gpu")]
    ),
    row!(
        1611,
        "hw.energy",
        "J",
        Counter,
        "Energy consumed by the component",
        One,
        [("hw.type", "gpu")]
    ),
    row!(
        150,
        "hw.temperature",
        "Cel",
        Gauge,
        "Temperature in degrees Celsius.",
        One,
        [("hw.type", "temperature"), ("hw.sensor_location", "gpu")]
    ),
    row!(
        140,
        "hw.temperature",
        "Cel",
        Gauge,
        "Temperature in degrees Celsius.",
        One,
        [("hw.type", "temperature"), ("hw.sensor_location", "memory")]
    ),
    row!(
        310,
        "hw.errors",
        "{error}",
        Counter,
        "Number of errors encountered by the component",
        One,
        [("hw.type", "gpu"), ("error.type", "ecc_corrected")]
    ),
    row!(
        311,
        "hw.errors",
        "{error}",
        Counter,
        "Number of errors encountered by the component",
        One,
        [("hw.type", "gpu"), ("error.type", "ecc_uncorrected")]
    ),
    row!(
        202,
        "hw.errors",
        "{error}",
        Counter,
        "Number of errors encountered by the component",
        One,
        [("hw.type", "gpu"), ("error.type", "pcie_replay")]
    ),
    row!(
        409,
        "hw.errors",
        "{error}",
        Counter,
        "Number of errors encountered by the component",
        One,
        [("hw.type", "gpu"), ("error.type", "nvlink_crc_flit")]
    ),
];

/// The mapping of DCGM field `field`, if it has one.
pub(crate) fn mapping(field: u16) -> Option<&'static Mapping> {
    MAPPINGS.iter().find(|m| m.field == field)
}

/// The hardware attributes semconv asks of every GPU metric, from a series' labels: `hw.id`
/// (the GPU's UUID, or its index under --low-cardinality, which strips UUIDs; a MIG
/// instance is `<uuid>/gi<id>` with the GPU as `hw.parent`), `hw.vendor` and `hw.model`.
pub(crate) fn hardware_attributes(labels: &[(&str, &str)], out: &mut Vec<(&'static str, String)>) {
    let find = |names: &[&str]| {
        labels
            .iter()
            .find(|(k, v)| names.contains(k) && !v.is_empty())
            .map(|(_, v)| v.to_string())
    };
    let gpu = find(&["UUID", "uuid"]).or_else(|| find(&["gpu"]));
    if let Some(gpu) = gpu {
        match find(&["GPU_I_ID"]) {
            Some(gi) => {
                out.push(("hw.id", format!("{gpu}/gi{gi}")));
                out.push(("hw.parent", gpu));
            }
            None => out.push(("hw.id", gpu)),
        }
    }
    out.push(("hw.vendor", "NVIDIA".to_string()));
    if let Some(model) = find(&["modelName"]) {
        out.push(("hw.model", model));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_field_maps_once_and_each_metric_has_one_unit_and_instrument() {
        for (i, m) in MAPPINGS.iter().enumerate() {
            assert!(
                MAPPINGS[..i].iter().all(|o| o.field != m.field),
                "field {} twice",
                m.field
            );
            for o in MAPPINGS.iter().filter(|o| o.metric == m.metric) {
                assert_eq!(
                    (o.unit, o.instrument, o.description),
                    (m.unit, m.instrument, m.description),
                    "{}",
                    m.metric
                );
                // Points of one metric must differ by their own attributes.
                assert!(
                    o.field == m.field || o.attributes != m.attributes || o.scale != m.scale,
                    "{} and {} collide in {}",
                    o.field,
                    m.field,
                    m.metric
                );
            }
        }
    }

    #[test]
    fn hardware_ids_come_from_the_uuid_then_the_index() {
        let mut out = Vec::new();
        let labels = [("gpu", "3"), ("UUID", "GPU-a"), ("modelName", "H100")];
        hardware_attributes(&labels, &mut out);
        assert_eq!(out[0], ("hw.id", "GPU-a".to_string()));
        assert!(out.contains(&("hw.model", "H100".to_string())));
        out.clear();
        let labels = [("gpu", "3"), ("GPU_I_ID", "2")];
        hardware_attributes(&labels, &mut out);
        assert_eq!(out[0], ("hw.id", "3/gi2".to_string()));
        assert_eq!(out[1], ("hw.parent", "3".to_string()));
    }
}
