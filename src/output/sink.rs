//! Where a collected page goes besides the HTTP endpoint: the collection loop hands every
//! published page to each sink (the node-exporter textfile, debug dumps).

use crate::model::node::Topology;
use crate::model::Page;

pub(crate) trait Sink: Send + Sync {
    /// A collection succeeded; `bytes` is the page as just published.
    fn published(&self, topology: &Topology, page: &Page, bytes: &[u8]);
    /// DCGM is unreachable and the published page is empty until it is back.
    fn outage(&self) {}
    /// The exporter is stopping cleanly (SIGTERM): withdraw what would read as current.
    fn close(&self) {}
}
