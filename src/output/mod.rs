//! Output: a collected page rendered to Prometheus text (`render`), its per-collection
//! variants (`exposition`: gzip, OpenMetrics via `openmetrics`), the exporter's own metrics
//! (`selfmetrics`), what the HTTP side reads (`published`), the HTTP endpoints (`http`) and
//! the sinks every published page also goes to (`sink`: `textfile`, `dump`, their directories
//! made safe by `dirs`, opened here; `otlp`, the OTLP push, started by `lifecycle` once the
//! self-metrics exist).

pub(crate) mod dirs;
pub(crate) mod dump;
mod error;
pub mod exposition;
pub mod http;
pub mod openmetrics;
pub mod otlp;
pub(crate) mod published;
pub mod render;
pub(crate) mod selfmetrics;
pub(crate) mod sink;
pub(crate) mod textfile;

pub use error::{DirError, DirWhy, Error};

use dump::Dumper;
use sink::Sink;
use std::path::{Path, PathBuf};
use textfile::Textfile;

/// Where pages go besides HTTP, from the flags (start-up fills it in).
#[derive(Clone, Debug, Default)]
pub(crate) struct SinkSettings {
    /// `--textfile-directory`; empty: no textfile.
    pub textfile_directory: String,
    pub dump_enabled: bool,
    pub dump_directory: PathBuf,
    /// Hours; checked by [`open_sinks`].
    pub dump_retention: i64,
    pub dump_compression: bool,
}

/// The sinks the options ask for; their directories are checked now.
pub(crate) fn open_sinks(config: &SinkSettings) -> Result<Vec<Box<dyn Sink>>, Error> {
    let mut out: Vec<Box<dyn Sink>> = Vec::new();
    if !config.textfile_directory.is_empty() {
        let t = Textfile::new(Path::new(&config.textfile_directory))?;
        tracing::info!(
            file = %t.path().display(),
            "writing the textfile after every collection"
        );
        out.push(Box::new(t));
    }
    if config.dump_enabled {
        let retention_hours = u64::try_from(config.dump_retention)
            .map_err(|_| Error::NegativeDumpRetention(config.dump_retention))?;
        let d = Dumper::new(
            config.dump_directory.clone(),
            retention_hours,
            config.dump_compression,
        )
        .start()?;
        tracing::info!("writing debug dumps to {}", d.dir.display());
        out.push(Box::new(d));
    }
    Ok(out)
}
