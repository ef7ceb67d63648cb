//! Per-piece failure isolation: a derived metric, a watch set or a field that DCGM refuses
//! costs only its own series. Each failure is counted on the page (the
//! `dcgm_exporter_collection_errors_total{source,reason}` self metric) on every collection it
//! happens in, and logged once when it starts (and once when it clears), not on every tick.

use crate::model::Page;
use dcgm_sys::{Error, Status};
use std::collections::HashMap;

/// The `reason` label of a failure: DCGM's status name (`ModuleNotLoaded`, `BadParam`...).
pub(crate) fn reason(e: &Error) -> String {
    match e {
        Error::Dcgm {
            status: Status::Other(code),
            ..
        } => format!("DCGM_ST_{code}"),
        Error::Dcgm { status, .. } => format!("{status:?}"),
        Error::MissingSymbol { .. } => "MissingSymbol".into(),
        Error::InvalidArgument(_) => "InvalidArgument".into(),
        Error::Load(_) => "Load".into(),
        Error::ShutDown => "ShutDown".into(),
        Error::VersionSkew { .. } => "VersionSkew".into(),
    }
}

/// A copy of `e` (the error type is not `Clone`), for reporting one refusal per field.
pub(crate) fn copy(e: &Error) -> Error {
    match e {
        Error::Dcgm {
            function,
            status,
            message,
        } => Error::Dcgm {
            function,
            status: *status,
            message: message.clone(),
        },
        other => Error::InvalidArgument(other.to_string()),
    }
}

/// An error the whole collection must stop for: the session itself is gone.
pub(crate) fn is_fatal(e: &Error) -> bool {
    e.is_connection_lost()
}

#[derive(Default)]
pub(crate) struct Failures {
    /// Source -> reason of the pieces failing at the last attempt.
    failing: HashMap<String, String>,
    /// Failures found while setting up the watches, counted on the next page.
    at_start: Vec<(String, String)>,
}

impl Failures {
    /// A piece refused while setting up: logged now, counted once on the first page.
    pub(crate) fn refused_at_start(&mut self, source: &str, e: &Error) {
        tracing::warn!("not collecting {source}: {e}");
        self.at_start.push((source.to_string(), reason(e)));
    }

    /// Moves the set-up failures onto the first page.
    pub(crate) fn flush_start(&mut self, page: &mut Page) {
        for (s, r) in self.at_start.drain(..) {
            page.piece_failed(&s, &r);
        }
    }

    /// One collection of `source` failed: counted on `page`, logged when it starts failing
    /// (or fails differently).
    pub(crate) fn failed(&mut self, source: &str, e: &Error, page: &mut Page) {
        let r = reason(e);
        page.piece_failed(source, &r);
        if self.failing.get(source) != Some(&r) {
            tracing::warn!("{source}: {e}; its series are left out until it recovers");
            self.failing.insert(source.to_string(), r);
        }
    }

    /// One collection of `source` worked.
    pub(crate) fn ok(&mut self, source: &str) {
        if self.failing.remove(source).is_some() {
            tracing::info!("{source}: collected again");
        }
    }

    #[cfg(test)]
    pub(crate) fn is_failing(&self, source: &str) -> bool {
        self.failing.contains_key(source)
    }
}

/// Whether anything of one collection worked: a collection whose every piece failed is a
/// failed collection (its error is the first piece's).
#[derive(Default)]
pub(crate) struct Outcome {
    any_ok: bool,
    first_error: Option<Error>,
}

impl Outcome {
    /// The result of one piece: its value, or `None` after counting and logging its
    /// failure. A lost session is returned as the error of the whole collection.
    pub(crate) fn piece<T>(
        &mut self,
        source: &str,
        r: dcgm_sys::Result<T>,
        failures: &mut Failures,
        page: &mut Page,
    ) -> dcgm_sys::Result<Option<T>> {
        match r {
            Ok(v) => {
                failures.ok(source);
                self.any_ok = true;
                Ok(Some(v))
            }
            Err(e) if is_fatal(&e) => Err(e),
            Err(e) => {
                failures.failed(source, &e, page);
                self.first_error.get_or_insert(e);
                Ok(None)
            }
        }
    }

    pub(crate) fn finish(self) -> dcgm_sys::Result<()> {
        match self.first_error {
            Some(e) if !self.any_ok => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(status: Status) -> Error {
        Error::Dcgm {
            function: "dcgmGetNvLinkP2PStatus",
            status,
            message: "x".into(),
        }
    }

    #[test]
    fn every_failure_is_counted_and_recovery_clears_it() {
        let mut f = Failures::default();
        let mut page = Page::default();
        f.failed("DCGM_EXP_P2P_STATUS", &err(Status::BadParam), &mut page);
        f.failed("DCGM_EXP_P2P_STATUS", &err(Status::BadParam), &mut page);
        assert_eq!(
            page.failures[&("DCGM_EXP_P2P_STATUS".into(), "BadParam".into())],
            2
        );
        assert!(f.is_failing("DCGM_EXP_P2P_STATUS"));
        f.ok("DCGM_EXP_P2P_STATUS");
        assert!(!f.is_failing("DCGM_EXP_P2P_STATUS"));
    }

    #[test]
    fn start_failures_reach_the_first_page_only() {
        let mut f = Failures::default();
        f.refused_at_start("DCGM_FI_PROF_DRAM_ACTIVE", &err(Status::ModuleNotLoaded));
        let mut first = Page::default();
        f.flush_start(&mut first);
        assert_eq!(
            first.failures[&("DCGM_FI_PROF_DRAM_ACTIVE".into(), "ModuleNotLoaded".into())],
            1
        );
        let mut second = Page::default();
        f.flush_start(&mut second);
        assert!(second.failures.is_empty());
    }

    #[test]
    fn unknown_codes_keep_their_number() {
        assert_eq!(reason(&err(Status::Other(-99))), "DCGM_ST_-99");
        assert_eq!(reason(&err(Status::ModuleNotLoaded)), "ModuleNotLoaded");
    }
}
