//! The operational options wired at start-up, kept out of `startup.rs`: DCGM sample
//! retention, where pages go besides HTTP (textfile, dumps), and the threads that trigger
//! rebuilds (counters file, GPU bind/unbind).

use crate::config::cli::Config;
use crate::lifecycle::app::{Control, Runner};
use crate::lifecycle::watchers;
use crate::output::dump::Dumper;
use crate::output::sink::Sink;
use crate::output::textfile::Textfile;
use std::path::Path;
use std::sync::mpsc::Sender;

/// dcgmWatchFields' (maxKeepAge seconds, maxKeepSamples) from --watch-max-keep-age and
/// --watch-max-keep-samples, and whether either was given (flag or environment; then every
/// watch keeps that, else each keeps what it reads). `0s` means no age limit, which DCGM
/// accepts only together with a sample limit.
pub fn keep_limits(config: &Config) -> Result<(f64, i32, bool), String> {
    let age = crate::config::duration::parse(&config.watch_max_keep_age)
        .map_err(|e| format!("--watch-max-keep-age: {e}"))?;
    let samples = i32::try_from(config.watch_max_keep_samples)
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| {
            format!(
                "--watch-max-keep-samples {}: must be between 0 and {}",
                config.watch_max_keep_samples,
                i32::MAX
            )
        })?;
    if age.is_zero() && samples == 0 {
        return Err(
            "--watch-max-keep-age 0s keeps samples forever: set --watch-max-keep-samples too"
                .into(),
        );
    }
    let explicit = config.is_set("watch-max-keep-age") || config.is_set("watch-max-keep-samples");
    Ok((age.as_secs_f64(), samples, explicit))
}

/// The sinks the options ask for; their directories are checked now.
pub fn sinks(config: &Config) -> Result<Vec<Box<dyn Sink>>, String> {
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
        let retention_hours = u64::try_from(config.dump_retention).map_err(|_| {
            format!(
                "--dump-retention {}: must not be negative",
                config.dump_retention
            )
        })?;
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

/// Starts the rebuild triggers: the counters file watch (always, as upstream) and, when
/// enabled, the GPU bind/unbind watch, polled through the worker that owns the session.
pub fn start_watchers(runner: &Runner, control: &Sender<Control>) -> Result<(), String> {
    // A ConfigMap (-m) has a watch of its own.
    if let Some(path) = runner.collectors.path() {
        watchers::counters_file::spawn(path.clone(), control.clone())
            .map_err(|e| format!("cannot start the counters file watch: {e}"))?;
    }
    if let Some(interval) = runner.bind_unbind {
        watchers::bind_unbind::spawn(runner.current.clone(), interval, control.clone())?;
    }
    Ok(())
}
