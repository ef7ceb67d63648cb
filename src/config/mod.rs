//! Configuration: command-line flags and environment (`cli`), the counters CSV
//! (`counters`, read by `gocsv` as Go's encoding/csv reads it), the `-d`/`-s`/`-p` device
//! selectors (`selector`), the `Hostname` label's value (`hostname`) and the upstream
//! release emulated (`emulate`); where the counters come from (`configmap`) and the names
//! they are read under (`rename`). What a metric is (its type, base unit, names) is
//! `model::naming`'s: the configuration selects among those.

pub mod cli;
pub(crate) mod configmap;
pub mod counters;
pub(crate) mod duration;
pub(crate) mod emulate;
pub(crate) mod events_cmd;
pub mod file;
pub(crate) mod gocsv;
pub(crate) mod hostname;
pub mod otlp;
pub mod rename;
pub mod selector;
