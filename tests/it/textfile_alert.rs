//! The staleness alert for textfile mode (etc/prometheus/dcgm-textfile.rules.yml) passes the
//! real `promtool check rules` and `promtool test rules`: a dcgm.prom left behind by a
//! crashed exporter fires, a fresh one and one removed by a clean stop do not.

use crate::support;
#[test]
fn the_textfile_staleness_alert_passes_promtool_check_and_unit_tests() {
    if !support::promtool() {
        return;
    }
    support::prom::check_and_test_rules(
        "dcgm-textfile.rules.yml",
        1,
        "dcgm-textfile.rules.test.yml",
    );
}
