//! What each DCGM 4 release knows, for a library and a host engine of another release than
//! the 4.6.0 headers these bindings are built from.
//!
//! The tables are read off NVIDIA's published headers (`dcgmlib/dcgm_fields.h`,
//! `dcgm_structs.h`, `dcgm_agent.h`) of each tag of github.com/NVIDIA/DCGM from v4.0.0 to
//! v4.6.0: a field id is known from the first release whose `dcgm_fields.h` defines it (and
//! every later one; 1216, dropped in 4.1 and defined again in 4.2.3, counts from 4.2.3). A
//! host engine refuses a field group holding an id it does not know (`BadParam`), and a
//! library refuses to read one through `dcgmGetValuesSince_v2` (`UnknownField`), so the
//! exporter leaves such fields out where either side predates them.

use std::fmt;

/// A DCGM release, `major.minor.patch` (`4.5.3`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    pub major: u16,
    pub minor: u16,
    pub patch: u16,
}

impl Release {
    pub const fn new(major: u16, minor: u16, patch: u16) -> Release {
        Release {
            major,
            minor,
            patch,
        }
    }

    /// Parses `4.5.3` (also `4.5.3.0` and `4.5`, as build strings write them); `None` for
    /// anything else (`unknown`).
    pub fn parse(s: &str) -> Option<Release> {
        let mut parts = s.trim().split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = match parts.next() {
            Some(p) => p.parse().ok()?,
            None => 0,
        };
        Some(Release::new(major, minor, patch))
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The DCGM releases on the two sides of a session, as they report them (`4.5.3`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    /// The loaded library's (`dcgmVersionInfo`); `None` when it does not say.
    pub library: Option<String>,
    /// The host engine's: the library's own for an embedded engine, else what the engine
    /// answers to `dcgmHostengineVersionInfo`; `None` when it does not say.
    pub engine: Option<String>,
}

impl Versions {
    /// An embedded engine runs inside the library: one release on both sides.
    pub fn embedded(lib: &crate::Library) -> Versions {
        let release = lib.version().ok();
        Versions {
            library: release.clone(),
            engine: release,
        }
    }

    /// The older of the two releases, the one whose fields and structs both sides know;
    /// `None` when neither side names a release.
    pub fn common(&self) -> Option<Release> {
        let l = self.library.as_deref().and_then(Release::parse);
        let e = self.engine.as_deref().and_then(Release::parse);
        match (l, e) {
            (Some(l), Some(e)) => Some(l.min(e)),
            (l, e) => l.or(e),
        }
    }

    /// `library 4.4.2, host engine 4.6.0` (or `DCGM 4.5.3` when both are one release).
    pub fn describe(&self) -> String {
        let name = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
        if self.library == self.engine {
            format!("DCGM {}", name(&self.library))
        } else {
            format!(
                "DCGM library {}, host engine {}",
                name(&self.library),
                name(&self.engine)
            )
        }
    }
}

/// The release whose headers these bindings are generated from.
pub const BINDINGS: Release = Release::new(4, 6, 0);

/// `dcgmNvLinkStatus_v5` (36 links per GPU) is known from 4.6.0; older libraries answer
/// `VerMismatch` to it and know `dcgmNvLinkStatus_v4` (18 links per GPU).
pub const NVLINK_STATUS_V5: Release = Release::new(4, 6, 0);

/// `dcgmConnect_v3` (connection strings, the only way to vsock) is exported from 4.5.0.
pub const CONNECT_V3: Release = Release::new(4, 5, 0);

/// Field ids defined after DCGM 4.0.0, by the release that first defines them (inclusive
/// ranges). Ids of 4.0.0 itself are not listed: every DCGM 4 knows them. (Markers such as
/// `DCGM_FI_DEV_LAST_CONNECTX_FIELD_ID`, 1399 since 4.1.0, name no field and are left out.)
const FIELDS_SINCE: &[(Release, &[(u16, u16)])] = &[
    (
        Release::new(4, 1, 0),
        &[
            (153, 153),
            (334, 345),
            (571, 577),
            (825, 843),
            (879, 897),
            (1076, 1079),
            (1300, 1310),
        ],
    ),
    (
        Release::new(4, 2, 3),
        &[(346, 346), (1216, 1219), (1400, 1425)],
    ),
    (Release::new(4, 3, 1), &[(64, 64)]),
    (
        Release::new(4, 4, 1),
        &[(580, 592), (1080, 1083), (1426, 1442)],
    ),
    (Release::new(4, 4, 2), &[(174, 174), (1501, 1503)]),
    (
        Release::new(4, 5, 0),
        &[(6, 6), (363, 363), (1220, 1220), (1507, 1509), (1523, 1523)],
    ),
    (
        Release::new(4, 6, 0),
        &[(175, 175), (1084, 1096), (1524, 1533)],
    ),
];

/// The first release that defines field `id`, for ids of the 4.6.0 table; `None` for an id
/// every DCGM 4 has (or one these tables do not cover, such as the base-unit fields of
/// releases after 4.6.0, which the exporter asks the library about instead).
pub fn field_since(id: u16) -> Option<Release> {
    FIELDS_SINCE
        .iter()
        .find(|(_, ranges)| ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&id)))
        .map(|(r, _)| *r)
}

/// Whether DCGM `release` knows field `id` (as far as the tables tell: ids they do not
/// cover count as known).
pub fn knows_field(release: Release, id: u16) -> bool {
    field_since(id).is_none_or(|since| release >= since)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_and_order() {
        assert_eq!(Release::parse("4.5.3"), Some(Release::new(4, 5, 3)));
        assert_eq!(Release::parse("4.6.0.0"), Some(Release::new(4, 6, 0)));
        assert_eq!(Release::parse(" 4.4 "), Some(Release::new(4, 4, 0)));
        assert_eq!(Release::parse("unknown"), None);
        assert_eq!(Release::parse("4"), None);
        assert!(Release::new(4, 4, 2) < Release::new(4, 5, 0));
        assert!(Release::new(4, 10, 0) > Release::new(4, 6, 0));
        assert_eq!(Release::new(4, 5, 3).to_string(), "4.5.3");
    }

    #[test]
    fn fields_are_known_from_the_release_that_defines_them() {
        let r442 = Release::new(4, 4, 2);
        let r453 = Release::new(4, 5, 3);
        // DCGM_FI_DEV_GPU_TEMP: every DCGM 4.
        assert!(knows_field(Release::new(4, 0, 0), 150));
        // DCGM_FI_DEV_GPU_RECOVERY_ACTION and DCGM_FI_BIND_UNBIND_EVENT: 4.5.0.
        for id in [1523, 6] {
            assert!(!knows_field(r442, id), "{id}");
            assert!(knows_field(r453, id), "{id}");
        }
        // DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY, the per-link NVLink totals: 4.6.0.
        for id in [175, 1526] {
            assert!(!knows_field(r453, id), "{id}");
            assert!(knows_field(BINDINGS, id), "{id}");
        }
        // Base-unit fields of 4.6.1+ are not covered here.
        assert_eq!(field_since(1611), None);
        // Every listed id is a field of the 4.6.0 table these bindings carry.
        for (_, ranges) in FIELDS_SINCE {
            for &(lo, hi) in *ranges {
                assert!(lo <= hi);
                for id in lo..=hi {
                    assert!(crate::fields::by_id(id).is_some(), "{id}");
                }
            }
        }
    }
}
