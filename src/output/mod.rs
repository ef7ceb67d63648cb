//! Output: a collected page rendered to Prometheus text (`render`), the exporter's own
//! metrics (`selfmetrics`) and the HTTP endpoints (`server`).

pub mod dump;
pub mod render;
pub mod selfmetrics;
pub mod server;
pub mod sink;
pub mod textfile;
