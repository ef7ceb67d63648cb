//! Who this process is: its effective uid and whether it holds `CAP_SYS_ADMIN`, read from
//! `/proc/self/status` (the exporter forbids unsafe code, so it calls neither `geteuid(2)`
//! nor `capget(2)` itself). Both decide what a deployment gets: the kubelet's pod-resources
//! directory is root's (0750), and DCGM's profiling fields need root with `CAP_SYS_ADMIN`.

/// `CAP_SYS_ADMIN`'s bit in the capability sets (`linux/capability.h`).
const CAP_SYS_ADMIN: u32 = 21;

/// Why `/proc/self/status` did not say (`field`: its name with the colon, `Uid:`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read /proc/self/status for {field}: {source}")]
    Read {
        field: &'static str,
        source: std::io::Error,
    },
    #[error("/proc/self/status has no {0}")]
    NoField(&'static str),
    #[error("/proc/self/status has no effective uid")]
    NoEffectiveUid,
    #[error("/proc/self/status CapEff {hex:?}: {source}")]
    CapEff {
        hex: String,
        source: std::num::ParseIntError,
    },
}

fn status_field(field: &'static str) -> Result<String, Error> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|source| Error::Read { field, source })?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .map(|v| v.trim().to_string())
        .ok_or(Error::NoField(field))
}

/// This process's effective uid.
pub(crate) fn effective_uid() -> Result<u32, Error> {
    status_field("Uid:")?
        .split_whitespace()
        .nth(1)
        .and_then(|id| id.parse().ok())
        .ok_or(Error::NoEffectiveUid)
}

/// Whether `CAP_SYS_ADMIN` is in this process's effective set.
pub(crate) fn has_cap_sys_admin() -> Result<bool, Error> {
    let hex = status_field("CapEff:")?;
    let set = u64::from_str_radix(&hex, 16).map_err(|source| Error::CapEff { hex, source })?;
    Ok(set & (1 << CAP_SYS_ADMIN) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_effective_uid_is_the_owner_of_what_we_create() {
        let base = tempfile::tempdir().unwrap();
        let f = base.path().join("f");
        std::fs::write(&f, "").unwrap();
        assert_eq!(
            effective_uid().unwrap(),
            std::fs::metadata(&f).unwrap().uid()
        );
    }

    #[test]
    fn root_with_every_capability_holds_cap_sys_admin_and_others_need_it_granted() {
        // uid 0 in CI holds the full set; elsewhere the answer must still be read.
        let cap = has_cap_sys_admin().unwrap();
        if effective_uid().unwrap() != 0 {
            assert!(
                !cap,
                "a non-root process holds no effective capability here"
            );
        }
    }
}
