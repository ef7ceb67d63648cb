//! Names of DCGM health error codes (`dcgmError_t`, `DCGM_FR_*`) for the
//! `health_error_code` label, from the field table generator's output.

use std::collections::HashMap;
use std::sync::OnceLock;

const TABLE: &str = include_str!("../../dcgm-sys/fields/health-codes-4.6.0.csv");

pub(crate) fn names() -> &'static HashMap<u32, String> {
    static T: OnceLock<HashMap<u32, String>> = OnceLock::new();
    T.get_or_init(|| {
        TABLE
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(','))
            .filter_map(|(code, name)| Some((code.parse::<u32>().ok()?, name)))
            // Some codes have two names (e.g. DCGM_FR_OK and DCGM_FR_EC_NONE are 0): the
            // first, as dcgm_errors.h lists them, is the one dcgm-exporter prints.
            .fold(HashMap::new(), |mut m, (code, name)| {
                m.entry(code).or_insert_with(|| name.to_string());
                m
            })
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn codes_have_dcgm_names() {
        let n = super::names();
        assert_eq!(n[&0], "DCGM_FR_OK");
        assert_eq!(n[&101], "DCGM_FR_XID_ERROR");
    }
}
