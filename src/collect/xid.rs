//! XID error descriptions for the `err_msg` label of `DCGM_FI_DEV_XID_ERRORS` series, from
//! NVIDIA's XID documentation (etc/data/xid-descriptions.csv, the same texts dcgm-exporter
//! uses, so dashboards keep matching).

use std::collections::HashMap;
use std::sync::OnceLock;

const TABLE: &str = include_str!("../../etc/data/xid-descriptions.csv");

fn table() -> &'static HashMap<i64, String> {
    static T: OnceLock<HashMap<i64, String>> = OnceLock::new();
    T.get_or_init(|| {
        let mut r = csv::ReaderBuilder::new().from_reader(TABLE.as_bytes());
        r.records()
            .filter_map(Result::ok)
            .filter_map(|rec| Some((rec.get(0)?.parse().ok()?, rec.get(1)?.to_string())))
            .collect()
    })
}

/// The description of an XID, or "Unknown Error" outside the table (as dcgm-exporter).
pub fn describe(xid: i64) -> &'static str {
    table()
        .get(&xid)
        .map(String::as_str)
        .unwrap_or("Unknown Error")
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_and_unknown_xids() {
        assert_eq!(super::describe(0), "No Error");
        assert_eq!(super::describe(79), "GPU has fallen off the bus");
        assert_eq!(super::describe(172), "Uncorrectable SRAM Error");
        assert_eq!(super::describe(9999), "Unknown Error");
        assert_eq!(super::table().len(), 173);
    }
}
