//! Discovery: devices, their attributes and status, entity lists, the MIG hierarchy, NVLink, the CPU hierarchy and profiling metric groups, plus the connection's login.

use crate::engine::*;

impl Engine {
    /// A connection's login: the client library's release and whether its state outlives it.
    pub(in crate::engine) fn login(&mut self, conn: u64, persist: bool, library: Option<&str>) {
        match library.and_then(dcgm_sys::Release::parse) {
            Some(r) => self.client_releases.insert(conn, r),
            None => self.client_releases.remove(&conn),
        };
        if persist {
            self.persistent.insert(conn);
        } else {
            self.persistent.remove(&conn);
        }
    }

    pub(in crate::engine) fn discovery_request(
        &mut self,
        req: &Request,
        now: i64,
    ) -> Result<Reply, i32> {
        Ok(match req {
            Request::GetAllDevices { only_supported } => Reply::Ids(
                self.world
                    .node
                    .gpus
                    .iter()
                    // DcgmCacheManager::GetGpuIds: every GPU, or those with status Ok.
                    .filter(|g| !only_supported || (g.supported && !g.unbound && !g.lost))
                    .map(|g| g.id)
                    .collect(),
            ),
            Request::GetDeviceAttributes { gpu_id } => {
                Reply::DeviceAttributes(Box::new(self.device_attributes(*gpu_id, now)?))
            }
            Request::GetGpuStatus { gpu_id } => {
                let g = self.world.node.gpu(*gpu_id).ok_or(ST_BADPARAM)?;
                // DcgmEntityStatus_t: Ok 1, Unsupported 2, Lost 4, Detached 7.
                Reply::Status(if g.unbound {
                    7
                } else if g.lost {
                    4
                } else if g.supported {
                    1
                } else {
                    2
                })
            }
            Request::GetEntityGroupEntities {
                entity_group,
                only_supported,
            } => {
                if *entity_group >= FE_COUNT {
                    return Err(ST_NOT_SUPPORTED);
                }
                let node = &self.world.node;
                if matches!(*entity_group, FE_CPU | FE_CPU_CORE) && !node.sysmon_module {
                    return Err(ST_MODULE_NOT_LOADED);
                }
                // Link ids come from DCGM's NvSwitch module, which answers NotSupported
                // on a node without NvSwitches.
                if *entity_group == FE_LINK && node.switches.is_empty() {
                    return Err(ST_NOT_SUPPORTED);
                }
                Reply::Ids(
                    node.all_of(*entity_group)
                        .into_iter()
                        .filter(|e| !only_supported || node.supported(*e))
                        .map(|e| e.1)
                        .collect(),
                )
            }
            Request::GetGpuInstanceHierarchy => Reply::MigHierarchy(self.mig_hierarchy()),
            Request::GetNvLinkLinkStatus => {
                let node = &self.world.node;
                Reply::LinkStatus(LinkStatus {
                    gpus: node.gpus.iter().map(|g| (g.id, g.links.clone())).collect(),
                    switches: node
                        .switches
                        .iter()
                        .map(|s| (s.id, s.ports.clone()))
                        .collect(),
                })
            }
            Request::GetNvLinkP2PStatus => {
                let node = &self.world.node;
                if node.p2p_mode == "error" && node.gpus.len() > 1 {
                    return Err(ST_BADPARAM);
                }
                Reply::P2PStatus(
                    node.gpus
                        .iter()
                        .map(|a| (a.id, node.gpus.iter().map(|b| node.p2p(a, b)).collect()))
                        .collect(),
                )
            }
            Request::GetCpuHierarchy if !self.world.node.sysmon_module => {
                return Err(ST_MODULE_NOT_LOADED)
            }
            Request::GetCpuHierarchy => Reply::CpuHierarchy(
                self.world
                    .node
                    .cpus
                    .iter()
                    .map(|c| (c.id, c.cores.clone(), c.serial.clone()))
                    .collect(),
            ),
            Request::ProfGetSupportedMetricGroups { gpu_id } => {
                // DCGM's core answers a GPU it samples through GPM itself; any other GPU
                // (an unknown id too) is the profiling module's, loaded by this request
                // (DcgmModuleCore::ProcessProfGetMetricGroups).
                let gpm = self.world.node.gpu(*gpu_id).is_some_and(|g| g.gpm);
                if !gpm {
                    let available = self.world.node.profiling_module;
                    self.modules.load(modules::PROFILING, available)?;
                }
                let node = &self.world.node;
                let g = node.gpu(*gpu_id).ok_or(ST_BADPARAM)?;
                if !node.dcp {
                    return Err(node.dcp_error);
                }
                if g.lost {
                    return Err(ST_GPU_IS_LOST);
                }
                Reply::MetricGroups(node.metric_groups.clone())
            }
            // dispatch() routes only this family here.
            _ => return Err(ST_GENERIC_ERROR),
        })
    }
}
