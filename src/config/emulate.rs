//! `--emulate-version`: which dcgm-exporter release the page, flags and files follow.
//!
//! Upstream changed what a user sees between releases (label names, metric types and help
//! texts, the default counter set, the config-file schemas, timeout defaults): a fleet
//! swapping us in for one release must get that release's page. Our own improvements
//! (docs/differences.md) hold in every mode.

use std::fmt;
use std::str::FromStr;

/// The upstream dcgm-exporter release emulated. Ordered: `V4_8_2 < V4_8_4 < V4_9_0 <
/// V4_10_0`, so a change that upstream made in 4.8.3 is `version >= V4_8_4` here (4.8.3 is
/// not offered: 4.8.4 replaced it within weeks and differs from it only by additions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UpstreamVersion {
    /// 4.5.3-4.8.2: `Hostname`, a fixed 10 s write timeout, YAML config version 1 only.
    V4_8_2,
    /// 4.6.1-4.8.4 (the default): `hostname`, YAML config v1 and v2, 30 s write timeout.
    #[default]
    V4_8_4,
    /// 4.7.x-4.9.0: 4.8.4 plus the canonical field names and base units.
    V4_9_0,
    /// 4.10.0 (on DCGM 4.8.0): 4.9.0 plus the `DCGM_FI_PROF_{PCIE,NVLINK}_{TX,RX}_BYTES`
    /// profiling fields named `..._BYTES_PER_SECOND` (same fields, same unit).
    V4_10_0,
}

impl UpstreamVersion {
    pub const ALL: [UpstreamVersion; 4] = [Self::V4_8_2, Self::V4_8_4, Self::V4_9_0, Self::V4_10_0];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::V4_8_2 => "4.8.2",
            Self::V4_8_4 => "4.8.4",
            Self::V4_9_0 => "4.9.0",
            Self::V4_10_0 => "4.10.0",
        }
    }

    /// Upstream 4.8.3 and later: `hostname`, the loopback hostname rule, the new types.
    pub(crate) fn at_least_4_8_3(self) -> bool {
        self >= Self::V4_8_4
    }
}

impl fmt::Display for UpstreamVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for UpstreamVersion {
    type Err = String;

    /// `4.8.4`, also with upstream's full tag (`4.6.1-4.8.4`) or a leading `v`. Upstream
    /// tags 4.10.0 plainly (`4.10.0`); its DCGM-prefixed form (`4.8.0-4.10.0`) is read too.
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        // A full release tag names the DCGM version first: `4.6.1-4.8.4`.
        let t = t.rsplit_once('-').map_or(t, |(_, exporter)| exporter);
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == t)
            .ok_or_else(|| {
                format!(
                    "'{s}' is not an emulated dcgm-exporter version (use 4.8.2, 4.8.4, 4.9.0 \
                     or 4.10.0)"
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::UpstreamVersion::{self, *};

    #[test]
    fn parses_versions_and_full_tags() {
        for (s, v) in [
            ("4.8.2", V4_8_2),
            ("4.8.4", V4_8_4),
            ("4.9.0", V4_9_0),
            ("v4.8.4", V4_8_4),
            ("4.5.3-4.8.2", V4_8_2),
            ("4.6.1-4.8.4", V4_8_4),
            (" 4.9.0 ", V4_9_0),
            ("4.10.0", V4_10_0),
            ("v4.10.0", V4_10_0),
            ("4.8.0-4.10.0", V4_10_0),
            ("v4.8.0-4.10.0", V4_10_0),
        ] {
            assert_eq!(s.parse::<UpstreamVersion>(), Ok(v), "{s}");
        }
        assert_eq!(UpstreamVersion::default(), V4_8_4);
    }

    #[test]
    fn refuses_other_versions_naming_the_accepted_ones() {
        for s in [
            "4.8.3", "4.8", "", "latest", "4.8.4-", "4.10", "4.10.1", "4.1.0",
        ] {
            let e = s.parse::<UpstreamVersion>().unwrap_err();
            assert!(e.contains("use 4.8.2, 4.8.4, 4.9.0 or 4.10.0"), "{s}: {e}");
        }
    }

    #[test]
    fn orders_by_release() {
        assert!(V4_8_2 < V4_8_4 && V4_8_4 < V4_9_0 && V4_9_0 < V4_10_0);
        assert!(!V4_8_2.at_least_4_8_3() && V4_8_4.at_least_4_8_3() && V4_9_0.at_least_4_8_3());
        assert!(V4_10_0.at_least_4_8_3());
        assert_eq!(
            UpstreamVersion::ALL.map(UpstreamVersion::as_str),
            ["4.8.2", "4.8.4", "4.9.0", "4.10.0"]
        );
    }
}
