//! `DCGM_EXP_P2P_STATUS`: the NVLink P2P status of each pair of GPUs.

use super::{exp_labels, CsvLabels, Derived, Pass, Registration, Start};
use crate::collect::targets::Target;
use crate::config::counters::Counter;
use crate::model::Page;
use std::any::Any;

const P2P_STATUS: &str = "DCGM_EXP_P2P_STATUS";

pub(super) const REGISTRATION: Registration = Registration {
    names: &[P2P_STATUS],
    start,
};

/// The P2P matrix of the whole GPUs, when the counters ask for it and there is a pair.
fn start(start: &mut Start<'_>) -> dcgm_sys::Result<Option<Box<dyn Derived>>> {
    let Some(row) = start.row(P2P_STATUS) else {
        return Ok(None);
    };
    if start.topology.gpus.len() < 2 {
        return Ok(None);
    }
    Ok(Some(Box::new(P2P {
        row,
        targets: start.whole_gpus.clone(),
    })))
}

struct P2P {
    row: Counter,
    targets: Vec<Target>,
}

impl Derived for P2P {
    fn source(&self) -> &str {
        &self.row.name
    }

    fn collect(&mut self, pass: &mut Pass<'_>, page: &mut Page) -> dcgm_sys::Result<()> {
        let m = pass.session.p2p_status()?;
        self.add(&m, pass.csv_labels, page);
        Ok(())
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl P2P {
    fn add(&self, m: &dcgm_sys::P2PMatrix, csv_labels: &CsvLabels, page: &mut Page) {
        for t in &self.targets {
            let Some(gpu) = t.gpu else { continue };
            let Some((_, row)) = m.gpus.iter().find(|(id, _)| *id == gpu) else {
                continue;
            };
            for (j, status) in row.iter().enumerate() {
                let Some((peer, _)) = m.gpus.get(j) else {
                    continue;
                };
                if *peer == gpu {
                    continue;
                }
                let peer_s = peer.to_string();
                let l = exp_labels(
                    t,
                    csv_labels,
                    &[("peer_gpu", &peer_s), ("link_status", status.label())],
                );
                let r = &self.row;
                page.add(&r.name, &r.help, r.prom_type, &l, f64::from(status.code()));
            }
        }
    }
}
