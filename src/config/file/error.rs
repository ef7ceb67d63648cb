//! What `--config-file` refuses: each problem names the file, then the key (its path in the
//! YAML, `collection.watchGroups[0].interval`) and what is wrong with its value.

use crate::config::counters::CountersError;
use crate::config::emulate::UpstreamVersion;

/// Why a configuration file (or the counters it names) cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A counters CSV (`-f` or `metrics.file`).
    #[error(transparent)]
    Counters(#[from] CountersError),
    /// Something in the configuration file itself.
    #[error("{file}: {problem}")]
    File { file: String, problem: Problem },
}

impl Error {
    pub fn at(file: &str, problem: Problem) -> Error {
        Error::File {
            file: file.to_string(),
            problem,
        }
    }

    /// The problem with the file itself, `None` for a counters CSV's.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Error::File { problem, .. } => Some(problem),
            Error::Counters(_) => None,
        }
    }
}

/// What is wrong in a configuration file.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    #[error("{0}")]
    Read(std::io::Error),
    /// Not YAML, or not the schema: the parser's message names the key and the line.
    #[error("{0}")]
    Yaml(serde_norway::Error),
    #[error("empty")]
    EmptyFile,
    #[error("multiple YAML documents are not supported")]
    Documents,
    #[error("version: missing (1 or 2)")]
    NoVersion,
    #[error("version: {0} is not supported (version must be 1 or 2)")]
    Version(String),
    /// `version: 2` under `--emulate-version 4.8.2`.
    #[error(
        "version 2 is dcgm-exporter 4.8.4's schema; with --emulate-version {0} only version 1 \
         is read"
    )]
    SchemaForRelease(UpstreamVersion),
    /// A key 4.8.4 added to version 1, under `--emulate-version 4.8.2`.
    #[error(
        "{key}: added to version 1 by dcgm-exporter 4.8.4; not read with --emulate-version \
         {release}"
    )]
    KeyForRelease {
        key: &'static str,
        release: UpstreamVersion,
    },
    /// A value its own parser refused (a release, a backend, a duration): `why` is its words.
    #[error("{key}: {why}")]
    Value { key: String, why: String },
    #[error("{key}: missing")]
    Missing { key: String },
    #[error("{key}: empty")]
    EmptyKey { key: String },
    #[error("{key} is required")]
    Required { key: String },
    #[error("{key} must not be empty")]
    EmptyList { key: String },
    /// A count or a poll interval of 0.
    #[error("{key} must be greater than 0")]
    NotPositive { key: String },
    /// An interval of 0.
    #[error("{key}: must be greater than 0")]
    ZeroInterval { key: String },
    /// A bare number where upstream takes a Go duration.
    #[error("{key}: time: missing unit in duration \"{value}\"")]
    MissingUnit { key: String, value: u64 },
    #[error("{key}: '{value}' must be expressed in whole milliseconds or larger")]
    SubMillisecond { key: String, value: String },
    #[error("{key}: {ms} ms is too large (at most {max} milliseconds)", max = crate::config::duration::MAX_MS)]
    TooLarge { key: String, ms: u64 },
    #[error("{key} must not be negative")]
    Negative { key: String },
    #[error("{key} must not exceed {max}", max = i32::MAX)]
    TooMany { key: String },
    /// A watch group's retention that keeps nothing.
    #[error("{key}: {age} and {samples} cannot both be zero")]
    KeepsNothing {
        key: String,
        age: &'static str,
        samples: &'static str,
    },
    #[error("metrics must specify exactly one of file or fields, not both")]
    FileAndFields,
    #[error("metrics must specify file, fields, or enableExporterMetrics")]
    NoMetrics,
    #[error("collections must contain at least one collection")]
    NoCollections,
    #[error("{key}: '{pattern}' matches no DCGM field")]
    NoSuchField { key: String, pattern: String },
    #[error("{key}.name \"{name}\" is duplicated")]
    DuplicateGroup { key: String, name: String },
    /// A second collection of every field (`metrics.include: ["*"]`).
    #[error("{key} duplicates the all-fields collection \"{first}\"")]
    DuplicateDefault { key: String, first: String },
    #[error("sources.dcgm.hostEngines: must list at least one host engine")]
    NoHostEngines,
    #[error("{key}.name: \"{name}\" is already the name of sources.dcgm.hostEngines[{first}]")]
    EngineNameTaken {
        key: String,
        name: String,
        first: usize,
    },
    #[error("metrics.fields[{index}].name duplicates metrics.fields[{first}].name \"{name}\"")]
    DuplicateField {
        index: usize,
        first: usize,
        name: String,
    },
    /// An inline field the counters' rules refuse (its line's message).
    #[error("metrics.fields[{index}] ({name}): {message}")]
    Field {
        index: usize,
        name: String,
        message: String,
    },
    /// An inline field refused otherwise.
    #[error("metrics.fields[{index}]: {source}")]
    Fields { index: usize, source: CountersError },
    #[error("aggregate.fields: \"{field}\" is not one field name, glob or id")]
    NotOneField { field: String },
    /// A watch group whose patterns match none of the counters' fields.
    #[error("watch group \"{group}\" ({patterns}) matches none of the configured fields")]
    GroupMatchesNothing { group: String, patterns: String },
    #[error(
        "{field} is matched by watch groups \"{first}\" and \"{second}\": a field may be in \
         one only"
    )]
    FieldInTwoGroups {
        field: String,
        first: String,
        second: String,
    },
}
