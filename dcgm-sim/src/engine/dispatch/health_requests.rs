//! Health watches and checks.

use crate::engine::*;

impl Engine {
    pub(in crate::engine) fn health_request(
        &mut self,
        _conn: u64,
        req: &Request,
        _now: i64,
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
                let (overall, incidents) = self.health.check(&self.world.node, &entities, mask);
                Reply::Health { overall, incidents }
            }
            // dispatch() routes only this family here.
            _ => return Err(ST_GENERIC_ERROR),
        })
    }
}
