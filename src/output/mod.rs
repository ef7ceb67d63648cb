//! Output: a collected page rendered to Prometheus text (`render`), its per-collection
//! variants (`exposition`: gzip, OpenMetrics via `openmetrics`), the exporter's own metrics
//! (`selfmetrics`) and the HTTP endpoints (`http`).

pub mod dump;
pub mod exposition;
pub mod http;
pub mod openmetrics;
pub mod published;
pub mod render;
pub mod selfmetrics;
pub mod sink;
pub mod textfile;
