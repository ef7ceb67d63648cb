//! Output: a collected page rendered to Prometheus text (`render`), the exporter's own
//! metrics (`selfmetrics`) and the HTTP endpoints (`server`).

pub mod render;
pub mod selfmetrics;
pub mod server;
