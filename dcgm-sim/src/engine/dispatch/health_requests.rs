//! Health watches and checks.

use crate::engine::*;

/// DCGM_FI_DEV_ROW_REMAP_FAILED.
const FI_ROW_REMAP_FAILED: u16 = 395;
/// DCGM_INT64_BLANK, the smallest of the int64 sentinels.
const INT64_SENTINEL_MIN: i64 = 0x7fff_ffff_ffff_fff0;

impl Engine {
    pub(in crate::engine) fn health_request(
        &mut self,
        req: &Request,
        now: i64,
    ) -> Result<Reply, i32> {
        Ok(match req {
            Request::HealthSet { group_id, systems } => {
                self.group(*group_id).ok_or(ST_NOT_CONFIGURED)?;
                self.health_masks.insert(*group_id as u32, *systems);
                Reply::Ok
            }
            Request::HealthGet { group_id } => {
                self.group(*group_id).ok_or(ST_NOT_CONFIGURED)?;
                Reply::HealthSystems(
                    self.health_masks
                        .get(&(*group_id as u32))
                        .copied()
                        .unwrap_or(0),
                )
            }
            Request::HealthCheck { group_id } => {
                let (_, entities) = self.group(*group_id).ok_or(ST_NOT_CONFIGURED)?;
                let mask = self
                    .health_masks
                    .get(&(*group_id as u32))
                    .copied()
                    .unwrap_or(0);
                let (mut overall, mut incidents) =
                    self.health.check(&self.world.node, &entities, mask);
                if mask & health::SYS_MEM != 0 {
                    let meta = fields::by_id(FI_ROW_REMAP_FAILED).ok_or(ST_GENERIC_ERROR)?;
                    for &(group, gpu) in entities.iter().filter(|e| e.0 == FE_GPU) {
                        let (value, status) = self.world.read((group, gpu), meta, now, now);
                        // A blank or other sentinel (a lost GPU) is no reading.
                        let failed = match value {
                            Value::Int64(v) if status == ST_OK && v < INT64_SENTINEL_MIN => v,
                            _ => 0,
                        };
                        if let Some(i) = health::Health::row_remap_incident(gpu, failed) {
                            overall = overall.max(i.health);
                            incidents.push(i);
                        }
                    }
                }
                Reply::Health { overall, incidents }
            }
            // dispatch() routes only this family here.
            _ => return Err(ST_GENERIC_ERROR),
        })
    }
}
