//! The host engine's modules as DCGM 4.6 keeps them (`DcgmHostEngineHandler::m_modules`):
//! a denylist applied before any module can load (`ApplyModuleDenylist`, from
//! `dcgmStartEmbedded_v2`'s parameters or `nv-hostengine --denylist-modules`), and lazy
//! loading by the first request a module serves (`ProcessModuleCommand` -> `LoadModule`).
//!
//! Only the profiling module's load is driven by requests here; which requests load it, as
//! DCGM 4.6 does:
//! * `dcgmProfGetSupportedMetricGroups` of a GPU DCGM does not sample through GPM
//!   (`DcgmModuleCore::ProcessProfGetMetricGroups` answers a GPM GPU itself);
//! * `dcgmWatchFields` / `dcgmUnwatchFields` of a field group holding a `DCGM_FI_PROF_*`
//!   field on a group with an entity not sampled through GPM
//!   (`DcgmHostEngineHandler::WatchFieldGroup` / `UnwatchFieldGroup`,
//!   `DcgmCacheManager::GetProfModuleServicedEntities`).
//!
//! Reads of profiling values never load it (the cache manager answers them).

use super::{ST_BADPARAM, ST_MODULE_NOT_LOADED};
use std::collections::BTreeMap;

/// `DcgmModuleIdCore` .. `DcgmModuleIdMnDiag`.
const MODULE_COUNT: u32 = 11;
pub const CORE: u32 = 0;
pub const NVSWITCH: u32 = 1;
pub const PROFILING: u32 = 8;

/// `dcgmModuleStatus_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    NotLoaded = 0,
    Denylisted = 1,
    Failed = 2,
    Loaded = 3,
}

pub struct Modules {
    states: BTreeMap<u32, State>,
}

impl Default for Modules {
    /// A host engine just started: the core and NvSwitch modules are loaded (DCGM loads the
    /// NvSwitch module at start to discover switches), the others wait for a request.
    fn default() -> Self {
        let mut states: BTreeMap<u32, State> =
            (0..MODULE_COUNT).map(|id| (id, State::NotLoaded)).collect();
        states.insert(CORE, State::Loaded);
        states.insert(NVSWITCH, State::Loaded);
        Modules { states }
    }
}

impl Modules {
    /// `ApplyModuleDenylist`: the core module cannot be denied (ignored), an id past the
    /// last module is BADPARAM (which fails the engine's start).
    pub fn deny(&mut self, ids: &[u32]) -> Result<(), i32> {
        if ids.iter().any(|id| *id >= MODULE_COUNT) {
            return Err(ST_BADPARAM);
        }
        for &id in ids.iter().filter(|id| **id != CORE) {
            self.states.insert(id, State::Denylisted);
        }
        Ok(())
    }

    /// `LoadModule` for a request the module serves: `available` is whether its library is
    /// there (the profile's `profiling_module`). A denied or failed module answers
    /// MODULE_NOT_LOADED and is not tried again.
    pub fn load(&mut self, id: u32, available: bool) -> Result<(), i32> {
        let state = self.states.entry(id).or_insert(State::NotLoaded);
        match *state {
            State::Loaded => Ok(()),
            State::Denylisted | State::Failed => Err(ST_MODULE_NOT_LOADED),
            State::NotLoaded if available => {
                *state = State::Loaded;
                Ok(())
            }
            State::NotLoaded => {
                *state = State::Failed;
                Err(ST_MODULE_NOT_LOADED)
            }
        }
    }

    pub fn state(&self, id: u32) -> State {
        self.states.get(&id).copied().unwrap_or(State::NotLoaded)
    }

    /// (module id, `dcgmModuleStatus_t`) of every module, as `dcgmModuleGetStatuses`.
    pub fn statuses(&self) -> Vec<(u32, u32)> {
        self.states.iter().map(|(id, s)| (*id, *s as u32)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denied_module_never_loads_and_a_missing_one_fails_once() {
        let mut m = Modules::default();
        assert_eq!(m.state(PROFILING), State::NotLoaded);
        assert_eq!(m.deny(&[CORE, PROFILING]), Ok(()));
        assert_eq!(m.state(CORE), State::Loaded);
        assert_eq!(m.load(PROFILING, true), Err(ST_MODULE_NOT_LOADED));
        assert_eq!(m.state(PROFILING), State::Denylisted);
        assert_eq!(m.deny(&[11]), Err(ST_BADPARAM));
        let mut m = Modules::default();
        assert_eq!(m.load(PROFILING, false), Err(ST_MODULE_NOT_LOADED));
        assert_eq!(m.state(PROFILING), State::Failed);
        assert_eq!(m.load(PROFILING, true), Err(ST_MODULE_NOT_LOADED));
        let mut m = Modules::default();
        assert_eq!(m.load(PROFILING, true), Ok(()));
        assert!(m.statuses().contains(&(PROFILING, 3)));
    }
}
