//! DCGM's host-engine modules (`dcgmModuleId_t`, `dcgmModuleStatus_t`): which ones an
//! embedded engine is started without (the denylist of `dcgmStartEmbedded_v2`) and what
//! `dcgmModuleGetStatuses` says of each.
//!
//! DCGM loads a module lazily, on the first request it serves
//! (`DcgmHostEngineHandler::ProcessModuleCommand` -> `LoadModule`); a module on the
//! denylist is never loaded and its requests answer `DCGM_ST_MODULE_NOT_LOADED`.

use crate::ffi;

/// A module of the host engine (`dcgmModuleId_t`, DCGM 4.6.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Module {
    Core,
    NvSwitch,
    Vgpu,
    Introspect,
    Health,
    Policy,
    Config,
    Diag,
    /// `libdcgmmoduleprofiling.so.4`: DCGM_FI_PROF_* on GPUs DCGM does not sample
    /// through NVML's GPM (before Hopper).
    Profiling,
    Sysmon,
    MnDiag,
}

/// Every module, in id order, with the name `dcgmi modules -l` gives it (lower case).
const MODULES: [(Module, u32, &str); 11] = [
    (Module::Core, ffi::DcgmModuleIdCore, "core"),
    (Module::NvSwitch, ffi::DcgmModuleIdNvSwitch, "nvswitch"),
    (Module::Vgpu, ffi::DcgmModuleIdVGPU, "vgpu"),
    (
        Module::Introspect,
        ffi::DcgmModuleIdIntrospect,
        "introspection",
    ),
    (Module::Health, ffi::DcgmModuleIdHealth, "health"),
    (Module::Policy, ffi::DcgmModuleIdPolicy, "policy"),
    (Module::Config, ffi::DcgmModuleIdConfig, "config"),
    (Module::Diag, ffi::DcgmModuleIdDiag, "diag"),
    (Module::Profiling, ffi::DcgmModuleIdProfiling, "profiling"),
    (Module::Sysmon, ffi::DcgmModuleIdSysmon, "sysmon"),
    (Module::MnDiag, ffi::DcgmModuleIdMnDiag, "mndiag"),
];

impl Module {
    /// `dcgmModuleId_t`.
    pub fn id(self) -> u32 {
        MODULES.iter().find(|m| m.0 == self).map_or(0, |m| m.1)
    }

    pub fn from_id(id: u32) -> Option<Module> {
        MODULES.iter().find(|m| m.1 == id).map(|m| m.0)
    }

    /// The lower-case name (`profiling`, `health`, ...).
    pub fn name(self) -> &'static str {
        MODULES.iter().find(|m| m.0 == self).map_or("?", |m| m.2)
    }

    /// A module by its name (any case; `introspect` and `introspection` both) or its
    /// numeric id, as `nv-hostengine --denylist-modules` takes ids.
    pub fn parse(s: &str) -> Result<Module, String> {
        let t = s.trim().to_ascii_lowercase();
        if let Ok(id) = t.parse::<u32>() {
            return Module::from_id(id).ok_or_else(|| format!("no DCGM module has id {id}"));
        }
        let t = if t == "introspect" {
            "introspection"
        } else {
            &t
        };
        MODULES
            .iter()
            .find(|m| m.2 == t)
            .map(|m| m.0)
            .ok_or_else(|| {
                let names: Vec<&str> = MODULES.iter().map(|m| m.2).collect();
                format!("unknown DCGM module '{s}' (one of {})", names.join(", "))
            })
    }
}

impl std::fmt::Display for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `dcgmModuleStatus_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleStatus {
    /// Not loaded yet: no request it serves has come.
    NotLoaded,
    Denylisted,
    /// A request needed it and loading it failed (the library is absent, or refused).
    Failed,
    Loaded,
    Unloaded,
    Paused,
    Reloadable,
    Other(u32),
}

impl ModuleStatus {
    pub fn from_raw(v: u32) -> ModuleStatus {
        match v {
            ffi::DcgmModuleStatusNotLoaded => ModuleStatus::NotLoaded,
            ffi::DcgmModuleStatusDenylisted => ModuleStatus::Denylisted,
            ffi::DcgmModuleStatusFailed => ModuleStatus::Failed,
            ffi::DcgmModuleStatusLoaded => ModuleStatus::Loaded,
            ffi::DcgmModuleStatusUnloaded => ModuleStatus::Unloaded,
            ffi::DcgmModuleStatusPaused => ModuleStatus::Paused,
            ffi::DcgmModuleStatusReloadable => ModuleStatus::Reloadable,
            o => ModuleStatus::Other(o),
        }
    }

    /// Whether the module's code is in the process (loaded, paused or reloadable).
    pub fn is_loaded(self) -> bool {
        matches!(
            self,
            ModuleStatus::Loaded | ModuleStatus::Paused | ModuleStatus::Reloadable
        )
    }

    /// As `dcgmi modules -l` words it.
    pub fn as_str(self) -> &'static str {
        match self {
            ModuleStatus::NotLoaded => "not loaded",
            ModuleStatus::Denylisted => "denylisted",
            ModuleStatus::Failed => "failed to load",
            ModuleStatus::Loaded => "loaded",
            ModuleStatus::Unloaded => "unloaded",
            ModuleStatus::Paused => "paused",
            ModuleStatus::Reloadable => "reloadable",
            ModuleStatus::Other(_) => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_parse_by_name_or_id_as_dcgm_numbers_them() {
        assert_eq!(Module::parse("profiling"), Ok(Module::Profiling));
        assert_eq!(Module::parse(" Profiling "), Ok(Module::Profiling));
        assert_eq!(Module::parse("8"), Ok(Module::Profiling));
        assert_eq!(Module::Profiling.id(), 8);
        assert_eq!(Module::parse("introspect"), Ok(Module::Introspect));
        assert_eq!(Module::parse("10"), Ok(Module::MnDiag));
        assert!(Module::parse("11").unwrap_err().contains("id 11"));
        assert!(Module::parse("dcp").unwrap_err().contains("profiling"));
        for (m, id, name) in MODULES {
            assert_eq!((Module::from_id(id), m.name()), (Some(m), name));
        }
        assert_eq!(ModuleStatus::from_raw(1), ModuleStatus::Denylisted);
        assert!(ModuleStatus::from_raw(3).is_loaded());
        assert!(!ModuleStatus::from_raw(2).is_loaded());
    }
}
