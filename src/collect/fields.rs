//! Field ids the exporter itself depends on (beyond those named in the counters CSV).

/// `DCGM_FI_DEV_NAME`: model name of a GPU, MIG profile name of a GPU instance.
pub(crate) const DEV_NAME: u16 = 50;
/// `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` (legacy `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`).
pub(crate) const CLOCKS_EVENT_REASONS: u16 = 112;
/// `DCGM_FI_DEV_XID_ERRORS`: the last XID raised.
pub(crate) const XID_ERRORS: u16 = 230;
/// `DCGM_FI_DEV_GPU_RECOVERY_ACTION` (`DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION` in older
/// headers): the driver's `nvmlDeviceGpuRecoveryAction_t`.
pub(crate) const GPU_RECOVERY_ACTION: u16 = 1523;

/// `dcgm_field_entity_group_t` values of field entity levels.
pub(crate) mod level {
    pub(crate) const NONE: u32 = 0;
    pub(crate) const GPU: u32 = 1;
    pub(crate) const VGPU: u32 = 2;
    pub(crate) const SWITCH: u32 = 3;
    pub(crate) const GPU_I: u32 = 4;
    pub(crate) const GPU_CI: u32 = 5;
    pub(crate) const LINK: u32 = 6;
    pub(crate) const CPU: u32 = 7;
    pub(crate) const CPU_CORE: u32 = 8;
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_match_the_generated_field_table() {
        let by = |id| dcgm_sys::fields::by_id(id).map(|f| f.name);
        assert_eq!(by(super::DEV_NAME), Some("DCGM_FI_DEV_GPU_NAME"));
        assert_eq!(
            by(super::CLOCKS_EVENT_REASONS),
            Some("DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
        );
        assert_eq!(by(super::XID_ERRORS), Some("DCGM_FI_DEV_XID_ERROR"));
    }
}
