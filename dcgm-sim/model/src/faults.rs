//! Faults a test causes while a client runs. They reach the engine through
//! `dcgm_sim::engine::Engine::inject`, a profile's `[[faults]]` schedule, or a control file (env
//! `DCGM_SIM_CONTROL`) that tests append lines to:
//!
//! | line | effect |
//! |---|---|
//! | `gpu_lost G` | GPU G falls off the bus: blank values, status Lost, a PCIe health failure |
//! | `gpu_recovered G` | undoes `gpu_lost` |
//! | `xid G N` | XID N on GPU G: one DCGM_FI_DEV_XID_ERRORS sample, a health incident for the XIDs DCGM's health module knows |
//! | `xid G/GI N`, `xid G/GI/CI N` | XID N attributed (as NVML does) to the GPU instance GI of GPU G, or to its compute instance CI (NVML ids, as `GPU_I_ID` / `GPU_CI_ID` show them): one DCGM_FI_DEV_XID_ERRORS sample on that instance's entity only, no health incident |
//! | `clock_event G MASK` | the next DCGM_FI_DEV_CLOCKS_EVENT_REASONS sample of GPU G has MASK set |
//! | `not_supported G F` | field F of GPU G reads DCGM_*_NOT_SUPPORTED (`*`: every entity) |
//! | `restored G F` | undoes `not_supported` (and `set`) |
//! | `set G F VALUE` | field F of GPU G (`*`: every entity) reads VALUE from now on (a number or a string) |
//! | `spike G F VALUE MS [AFTER_MS]` | field F of GPU G (`*`: every entity) reads VALUE in the samples taken in the MS milliseconds that start AFTER_MS (default 0) after the line is read, and its usual values before and after: a short excursion between two collections, which a gauge read at a collection does not show and sub-interval aggregation's max does (DCGM's samples and NVML's `nvmlDeviceGetSamples` alike) |
//! | `sentinel G F WHICH` | field F of GPU G (`*`: every entity) reads DCGM's `blank`, `not_found`, `not_supported` or `not_permissioned` sentinel of its type, status OK, until `restored` |
//! | `mig G P1,P2,...` | reconfigures GPU G's MIG instances (`P:N` for N compute instances; `mig G none`: MIG off) |
//! | `link_state G L up\|down\|disabled` | changes NVLink L of GPU G |
//! | `switch_port S P up\|down\|disabled` | changes port P of NvSwitch S |
//! | `health G SYSTEM RESULT CODE [MESSAGE]` | a health incident on GPU G (system bit, 10 warn / 20 fail, DCGM_FR_* code) |
//! | `health_clear G` | forgets GPU G's incidents and XID history |
//! | `unwatch_fails F STATUS` | every later unwatch of a field group holding field F answers STATUS (a negative `DCGM_ST_*`) after removing all its pairs, as DcgmHostEngineHandler::UnwatchFieldGroup keeps going past a failing pair and reports the error at the end (real DCGM 4.6 answers NOT_WATCHED (-16) for profiling fields on GPUs it samples through GPM); `unwatch_fails F 0` undoes it |
//! | `prof_stuck G [STATUS] [restart]` | DCGM#303 (profiling stuck after an XID 31): every DCGM_FI_PROF_* field of GPU G (and of its MIG instances) reads 0, or fails with STATUS (a negative `DCGM_ST_*`, e.g. -37 PROFILING_LIBRARY_ERROR), while every other field, DCGM_FI_DEV_GPU_UTIL included, reads on, until the GPU's profiling watches are re-armed (a `dcgmUnwatchFields` then a `dcgmWatchFields` of a profiling field on the GPU); with `restart` only a new engine heals it. An engine that starts with the line already in the file comes up healthy (the state is the running engine's). The simulated NVML's GPM is not affected |
//! | `fail_reads N` | the next N reads of latest values (`dcgmEntitiesGetLatestValues`) fail with DCGM_ST_GENERIC_ERROR while the session stays up: a collection that fails without losing the engine |
//! | `fail_values_since N F` | the next N `dcgmGetValuesSince_v2` calls on a field group holding field F fail with DCGM_ST_GENERIC_ERROR, no sample read, while the session and every other read stay up: sub-interval aggregation's read of one collection fails alone |
//! | `sampling_stop` / `sampling_resume` | the engine stops taking samples of polled fields (each keeps its last, which grows old, as when DCGM stops sampling) / takes them again from now on |
//! | `health node SYSTEM RESULT CODE [MESSAGE]` | a node-level health incident (entity NONE, as DCGM reports the IMEX daemon not ready on GB200/GB300), in every health check |
//! | `health_clear node` | forgets the node-level incidents |
//! | `recovery_action G N` | DCGM_FI_DEV_GPU_RECOVERY_ACTION of GPU G reads N (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset, 5-7 newer drivers' values) until `restored G 1523` |
//! | `gpu_unbind G` | GPU G's driver is unbound: as in DCGM 4.6 it stays listed with status Detached (7), leaves the supported-only lists, the MIG hierarchy and every group, loses its watches and samples, and a group refuses it (BADPARAM); DCGM_FI_BIND_UNBIND_EVENT records 1 (reinitializing) then 2 (completed) |
//! | `gpu_bind G` | undoes `gpu_unbind`, with the same two events |
//! | `attributes_fail G` / `attributes_ok G` | dcgmGetDeviceAttributes of GPU G fails with NOT_SUPPORTED / works again |
//! | `library_gone` | the library is gone for good: every later call answers `DCGM_ST_UNINITIALIZED`, as after `dcgmShutdown` (a driver unload, a crashed engine). An embedded engine started afterwards replays the control file and is gone too |
//! | `library_restored` | undoes `library_gone` for an engine that has not answered since it went: an embedded engine started afterwards (the exporter reconnecting after the loss) works again; one that answered UNINITIALIZED stays gone, as a shut-down libdcgm does |
//! | `embedded_start_fail` / `embedded_start_ok` | from now on `dcgmStartEmbedded*` fails with `DCGM_ST_INIT_ERROR`, as the real library does when its host engine cannot initialise (no driver, NVML failing) / starts again; an engine already running is not affected |
//! | `process_start PID GPU [KEY=VALUE...]` | (NVML) a process starts on GPU G; keys as in `[[processes]]`: `gpu_instance`, `compute_instance`, `used_memory_mib`, `sm_util`, `mem_util`, `name`, `kind` |
//! | `process_stop PID [GPU]` | (NVML) process PID exits (on every GPU, or only on GPU G) |
//! | `process_util PID SM [MEM]` | (NVML) process PID's SM (and memory) utilisation in percent from now on (replaces a `sm_util_gen`) |
//! | `process_memory PID MIB` | (NVML) process PID holds MIB MiB of GPU memory from now on |
//!
//! Numbers may be written in hex (`0x48`). Blank lines and `#` comments are skipped.

use crate::generator::Generator;
use crate::node::{LINK_DISABLED, LINK_DOWN, LINK_UP};
use crate::profile::ProcessSpec;
use std::path::PathBuf;

/// DCGM_FI_DEV_GPU_RECOVERY_ACTION (`DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION` before 4.5).
const GPU_RECOVERY_ACTION: u16 = 1523;

#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    GpuLost {
        gpu: u32,
    },
    GpuRecovered {
        gpu: u32,
    },
    Xid {
        gpu: u32,
        xid: i64,
    },
    /// An XID on a GPU instance (`ci: None`) or compute instance, by NVML ids.
    InstanceXid {
        gpu: u32,
        gi: u32,
        ci: Option<u32>,
        xid: i64,
    },
    /// A node-level health incident (entity NONE).
    NodeHealthIncident {
        system: u32,
        health: u32,
        code: u32,
        msg: String,
    },
    NodeHealthClear,
    /// Unwatches of field groups holding `field` answer `status` (0: undone).
    UnwatchFails {
        field: u16,
        status: i32,
    },
    /// DCGM#303: the profiling fields of a GPU read 0 (`status` 0) or fail with `status`
    /// until re-armed (or, `restart_only`, until the engine restarts).
    ProfStuck {
        gpu: u32,
        status: i32,
        restart_only: bool,
    },
    /// The next `count` reads of latest values fail (the session stays up).
    FailReads {
        count: u32,
    },
    /// The next `count` dcgmGetValuesSince calls on a field group holding `field` fail
    /// (the session stays up).
    FailValuesSince {
        count: u32,
        field: u16,
    },
    /// The engine stops (or resumes) sampling polled fields.
    Sampling {
        stopped: bool,
    },
    ClockEvent {
        gpu: u32,
        reasons: i64,
    },
    /// `gpu: None` applies to every entity.
    FieldNotSupported {
        gpu: Option<u32>,
        field: u16,
    },
    FieldRestored {
        gpu: Option<u32>,
        field: u16,
    },
    /// The field reads `value` in the samples of (`after_ms`, `after_ms` + `ms`] after the
    /// line is read.
    Spike {
        gpu: Option<u32>,
        field: u16,
        value: f64,
        ms: u64,
        after_ms: u64,
    },
    /// The field reads from this generator until restored.
    SetField {
        gpu: Option<u32>,
        field: u16,
        gen: Generator,
    },
    /// New GPU instances by profile name, `"7g.80gb:2"` for two compute instances; an
    /// empty list turns MIG mode off.
    MigReconfigure {
        gpu: u32,
        instances: Vec<String>,
    },
    /// `state` is a dcgmNvLinkLinkState_t (3 Up, 2 Down, 1 Disabled).
    LinkState {
        gpu: u32,
        link: u32,
        state: u32,
    },
    SwitchPortState {
        switch: u32,
        port: u32,
        state: u32,
    },
    HealthIncident {
        gpu: u32,
        /// dcgmHealthSystems_t bit (or 0xFFFFFFFF for all).
        system: u32,
        /// 10 warn, 20 fail.
        health: u32,
        /// DCGM_FR_* code.
        code: u32,
        msg: String,
    },
    HealthClear {
        gpu: u32,
    },
    /// The driver of a GPU is unbound (`bound: false`) or bound again.
    GpuBind {
        gpu: u32,
        bound: bool,
    },
    /// dcgmGetDeviceAttributes of a GPU fails (`fail`) or works again.
    AttributesFail {
        gpu: u32,
        fail: bool,
    },
    LibraryGone,
    /// An embedded engine started afterwards works again (DCGM loaded anew).
    LibraryRestored,
    /// Whether a later `dcgmStartEmbedded*` fails (read by the C export before any
    /// engine exists: [`embedded_start_refused`]); nothing to a running engine.
    EmbeddedStart {
        fails: bool,
    },
    /// A process starts (the simulated NVML's business; DCGM does not see processes).
    ProcessStart {
        process: Box<ProcessSpec>,
    },
    /// A process exits, on every GPU (`gpu: None`) or one.
    ProcessStop {
        pid: u32,
        gpu: Option<u32>,
    },
    /// A process's utilisation from now on (a constant; `mem_util: None` keeps it).
    ProcessUtil {
        pid: u32,
        sm_util: u32,
        mem_util: Option<u32>,
    },
    /// The GPU memory a process holds from now on.
    ProcessMemory {
        pid: u32,
        mib: u64,
    },
}

fn int(s: Option<&str>, what: &str) -> Result<i64, String> {
    let s = s.ok_or_else(|| format!("missing {what}"))?;
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|_| format!("{what} '{s}' is not a number"))
}

fn num<T: TryFrom<i64>>(s: Option<&str>, what: &str) -> Result<T, String> {
    let v = int(s, what)?;
    T::try_from(v).map_err(|_| format!("{what} {v} is out of range"))
}

fn gpu_or_all(s: Option<&str>) -> Result<Option<u32>, String> {
    match s {
        Some("*") => Ok(None),
        other => num(other, "gpu").map(Some),
    }
}

fn link_state(s: Option<&str>) -> Result<u32, String> {
    match s {
        Some("up") => Ok(LINK_UP),
        Some("down") => Ok(LINK_DOWN),
        Some("disabled") => Ok(LINK_DISABLED),
        o => Err(format!(
            "expected up, down or disabled, got {}",
            o.unwrap_or("nothing")
        )),
    }
}

/// Checks one `mig` instance item: "3g.40gb" or "3g.40gb:2".
pub fn split_mig_item(item: &str) -> Result<(&str, u32), String> {
    let (name, n) = match item.split_once(':') {
        Some((name, n)) => (
            name,
            n.parse::<u32>()
                .map_err(|_| format!("'{n}' in '{item}' is not a compute-instance count"))?,
        ),
        None => (item, 1),
    };
    crate::profile::slices_of(name)
        .ok_or_else(|| format!("'{name}' is not a MIG profile like 1g.10gb"))?;
    Ok((name, n))
}

fn percent(s: Option<&str>, what: &str) -> Result<u32, String> {
    let v: u32 = num(s, what)?;
    if v > 100 {
        return Err(format!("{what} {v} is not a percentage (0..=100)"));
    }
    Ok(v)
}

/// `process_start PID GPU [KEY=VALUE...]`, the keys of a `[[processes]]` table.
fn process_start<'a>(w: &mut impl Iterator<Item = &'a str>) -> Result<Fault, String> {
    let mut p = ProcessSpec {
        pid: num(w.next(), "pid")?,
        gpu: num(w.next(), "gpu")?,
        name: "python3".into(),
        kind: "compute".into(),
        ..ProcessSpec::default()
    };
    for kv in w {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("expected KEY=VALUE, got '{kv}'"))?;
        match k {
            "gpu_instance" => p.gpu_instance = Some(num(Some(v), k)?),
            "compute_instance" => p.compute_instance = Some(num(Some(v), k)?),
            "used_memory_mib" => p.used_memory_mib = num(Some(v), k)?,
            "sm_util" => p.sm_util = Some(percent(Some(v), k)?),
            "mem_util" => p.mem_util = percent(Some(v), k)?,
            "name" => p.name = v.to_string(),
            "kind" => p.kind = v.to_string(),
            _ => return Err(format!("unknown process key '{k}'")),
        }
    }
    p.check()?;
    Ok(Fault::ProcessStart {
        process: Box::new(p),
    })
}

/// Parses one control-file line.
pub fn parse_line(line: &str) -> Result<Fault, String> {
    let mut w = line.split_whitespace();
    let verb = w.next().ok_or("empty line")?;
    let f = match verb {
        "gpu_lost" => Fault::GpuLost {
            gpu: num(w.next(), "gpu")?,
        },
        "gpu_recovered" => Fault::GpuRecovered {
            gpu: num(w.next(), "gpu")?,
        },
        "xid" => {
            let at = w.next().ok_or("missing gpu")?;
            let mut ids = at.split('/');
            let gpu = num(ids.next(), "gpu")?;
            let gi = ids
                .next()
                .map(|g| num(Some(g), "gpu instance"))
                .transpose()?;
            let ci = ids
                .next()
                .map(|c| num(Some(c), "compute instance"))
                .transpose()?;
            if ids.next().is_some() {
                return Err(format!("{at}: expected G, G/GI or G/GI/CI"));
            }
            let xid = int(w.next(), "xid")?;
            match gi {
                None => Fault::Xid { gpu, xid },
                Some(gi) => Fault::InstanceXid { gpu, gi, ci, xid },
            }
        }
        "clock_event" => Fault::ClockEvent {
            gpu: num(w.next(), "gpu")?,
            reasons: int(w.next(), "mask")?,
        },
        "not_supported" | "restored" => {
            let gpu = gpu_or_all(w.next())?;
            let field = num(w.next(), "field id")?;
            if verb == "restored" {
                Fault::FieldRestored { gpu, field }
            } else {
                Fault::FieldNotSupported { gpu, field }
            }
        }
        "spike" => spike(&mut w)?,
        "set" => {
            let gpu = gpu_or_all(w.next())?;
            let field = num(w.next(), "field id")?;
            let rest: Vec<&str> = w.by_ref().collect();
            if rest.is_empty() {
                return Err("missing value".into());
            }
            let text = rest.join(" ");
            let number = match int(Some(&text), "value") {
                Ok(v) => Some(v as f64),
                Err(_) => text.parse::<f64>().ok(),
            };
            let gen = match number {
                Some(value) if value.is_finite() => Generator::Constant { value },
                _ => Generator::String { value: text },
            };
            Fault::SetField { gpu, field, gen }
        }
        // The value DCGM's cache stores when the driver had nothing (blank) or refused
        // (NVML's NOT_SUPPORTED / NOT_FOUND / NO_PERMISSION), typed as the field.
        "sentinel" => {
            let gpu = gpu_or_all(w.next())?;
            let field = num(w.next(), "field id")?;
            let which = w.next().ok_or("missing sentinel")?;
            if crate::generator::Sentinel::parse(which).is_none() {
                return Err(format!(
                    "sentinel must be blank, not_found, not_supported or not_permissioned, not {which}"
                ));
            }
            Fault::SetField {
                gpu,
                field,
                gen: Generator::Sentinel {
                    which: which.into(),
                },
            }
        }
        "mig" => {
            let gpu = num(w.next(), "gpu")?;
            let spec = w.next().ok_or("missing instance list")?;
            let instances: Vec<String> = if spec == "none" {
                Vec::new()
            } else {
                spec.split(',').map(str::to_string).collect()
            };
            for item in &instances {
                split_mig_item(item)?;
            }
            Fault::MigReconfigure { gpu, instances }
        }
        "link_state" => Fault::LinkState {
            gpu: num(w.next(), "gpu")?,
            link: num(w.next(), "link")?,
            state: link_state(w.next())?,
        },
        "switch_port" => Fault::SwitchPortState {
            switch: num(w.next(), "switch")?,
            port: num(w.next(), "port")?,
            state: link_state(w.next())?,
        },
        "health" => {
            let at = w.next();
            let node = at == Some("node");
            let gpu = if node { 0 } else { num(at, "gpu")? };
            let system = int(w.next(), "system")?;
            let system = u32::try_from(system)
                .or_else(|_| i32::try_from(system).map(|s| s as u32))
                .map_err(|_| format!("system {system} is out of range"))?;
            let health = num(w.next(), "result")?;
            if !matches!(health, 0 | 10 | 20) {
                return Err(format!(
                    "result must be 0, 10 (warn) or 20 (fail), not {health}"
                ));
            }
            let code = num(w.next(), "code")?;
            let msg = w.by_ref().collect::<Vec<&str>>().join(" ");
            if node {
                Fault::NodeHealthIncident {
                    system,
                    health,
                    code,
                    msg,
                }
            } else {
                Fault::HealthIncident {
                    gpu,
                    system,
                    health,
                    code,
                    msg,
                }
            }
        }
        "unwatch_fails" => Fault::UnwatchFails {
            field: num(w.next(), "field")?,
            status: num(w.next(), "status")?,
        },
        "prof_stuck" => prof_stuck(&mut w)?,
        "fail_reads" => Fault::FailReads {
            count: num(w.next(), "count")?,
        },
        "fail_values_since" => Fault::FailValuesSince {
            count: num(w.next(), "count")?,
            field: num(w.next(), "field")?,
        },
        "sampling_stop" => Fault::Sampling { stopped: true },
        "sampling_resume" => Fault::Sampling { stopped: false },
        "health_clear" => match w.next() {
            Some("node") => Fault::NodeHealthClear,
            gpu => Fault::HealthClear {
                gpu: num(gpu, "gpu")?,
            },
        },
        // Shorthand for `set G 1523 N`, checked against NVML's enum.
        "recovery_action" => {
            let gpu = num(w.next(), "gpu")?;
            let action: u8 = num(w.next(), "action")?;
            if action > 7 {
                return Err(format!(
                    "action must be 0-7 (nvmlDeviceGpuRecoveryAction_t), not {action}"
                ));
            }
            Fault::SetField {
                gpu: Some(gpu),
                field: GPU_RECOVERY_ACTION,
                gen: Generator::Constant {
                    value: f64::from(action),
                },
            }
        }
        "gpu_unbind" | "gpu_bind" => Fault::GpuBind {
            gpu: num(w.next(), "gpu")?,
            bound: verb == "gpu_bind",
        },
        "attributes_fail" | "attributes_ok" => Fault::AttributesFail {
            gpu: num(w.next(), "gpu")?,
            fail: verb == "attributes_fail",
        },
        "library_gone" => Fault::LibraryGone,
        "library_restored" => Fault::LibraryRestored,
        "embedded_start_fail" | "embedded_start_ok" => Fault::EmbeddedStart {
            fails: verb == "embedded_start_fail",
        },
        // Takes the rest of the line.
        "process_start" => process_start(&mut w)?,
        "process_stop" => Fault::ProcessStop {
            pid: num(w.next(), "pid")?,
            gpu: w.next().map(|g| num(Some(g), "gpu")).transpose()?,
        },
        "process_util" => Fault::ProcessUtil {
            pid: num(w.next(), "pid")?,
            sm_util: percent(w.next(), "sm_util")?,
            mem_util: w.next().map(|m| percent(Some(m), "mem_util")).transpose()?,
        },
        "process_memory" => Fault::ProcessMemory {
            pid: num(w.next(), "pid")?,
            mib: num(w.next(), "MiB")?,
        },
        o => return Err(format!("unknown fault '{o}'")),
    };
    if let Some(extra) = w.next() {
        return Err(format!("unexpected '{extra}'"));
    }
    Ok(f)
}

/// `prof_stuck G [STATUS] [restart]`.
/// `spike G F VALUE MS [AFTER_MS]`.
fn spike(w: &mut std::str::SplitWhitespace<'_>) -> Result<Fault, String> {
    let gpu = gpu_or_all(w.next())?;
    let field = num(w.next(), "field id")?;
    let text = w.next().ok_or("missing value")?;
    let value = match int(Some(text), "value") {
        Ok(v) => v as f64,
        Err(_) => text
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("value '{text}' is not a number"))?,
    };
    let ms = num(w.next(), "duration (ms)")?;
    let after_ms = w.next().map(|a| num(Some(a), "delay (ms)")).transpose()?;
    Ok(Fault::Spike {
        gpu,
        field,
        value,
        ms,
        after_ms: after_ms.unwrap_or(0),
    })
}

fn prof_stuck(w: &mut std::str::SplitWhitespace<'_>) -> Result<Fault, String> {
    let gpu = num(w.next(), "gpu")?;
    let mut status = 0;
    let mut restart_only = false;
    for word in w.by_ref() {
        match word {
            "restart" => restart_only = true,
            s if status == 0 && !restart_only => {
                status = num(Some(s), "status")?;
                if status > 0 {
                    return Err(format!("status {status}: a DCGM error status is negative"));
                }
            }
            other => return Err(format!("unexpected '{other}'")),
        }
    }
    Ok(Fault::ProfStuck {
        gpu,
        status,
        restart_only,
    })
}

/// Whether the control file at `path` last said `embedded_start_fail` (and not
/// `embedded_start_ok` after it): the embedded engine's start is refused. Read whole at
/// each start, since no engine (which follows the file) exists yet; an unreadable file
/// refuses nothing.
pub fn embedded_start_refused(path: &std::path::Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    text.lines()
        .rev()
        .find_map(|l| match parse_line(l.trim()) {
            Ok(Fault::EmbeddedStart { fails }) => Some(fails),
            _ => None,
        })
        .unwrap_or(false)
}

/// Follows an append-only control file: returns the faults of whole lines added since the
/// last call. Checking costs one `stat` when nothing changed.
pub struct ControlFile {
    path: PathBuf,
    consumed: u64,
    lines_seen: usize,
}

impl ControlFile {
    pub fn new(path: PathBuf) -> ControlFile {
        ControlFile {
            path,
            consumed: 0,
            lines_seen: 0,
        }
    }

    pub fn poll(&mut self) -> Vec<Fault> {
        let len = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        if len < self.consumed {
            // Truncated or replaced: start over.
            self.consumed = 0;
            self.lines_seen = 0;
        }
        if len == self.consumed {
            return Vec::new();
        }
        let Ok(bytes) = std::fs::read(&self.path) else {
            return Vec::new();
        };
        let start = (self.consumed as usize).min(bytes.len());
        // Only whole lines are applied; a line being written is picked up next time.
        let Some(end) = bytes[start..]
            .iter()
            .rposition(|b| *b == b'\n')
            .map(|i| start + i + 1)
        else {
            return Vec::new();
        };
        self.consumed = end as u64;
        let text = String::from_utf8_lossy(&bytes[start..end]);
        let mut out = Vec::new();
        for line in text.lines() {
            self.lines_seen += 1;
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            match parse_line(l) {
                Ok(f) => out.push(f),
                Err(e) => eprintln!(
                    "dcgm-sim: {}:{}: {e} (line ignored)",
                    self.path.display(),
                    self.lines_seen
                ),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// XIDs on MIG instances and node-level incidents, and their malformed forms.
    #[test]
    fn instance_xids_and_node_incidents() {
        assert_eq!(
            parse_line("xid 0/9 13"),
            Ok(Fault::InstanceXid {
                gpu: 0,
                gi: 9,
                ci: None,
                xid: 13
            })
        );
        assert_eq!(
            parse_line("xid 2/0/1 95"),
            Ok(Fault::InstanceXid {
                gpu: 2,
                gi: 0,
                ci: Some(1),
                xid: 95
            })
        );
        assert_eq!(
            parse_line("health node 0x2 20 0 IMEX daemon not ready"),
            Ok(Fault::NodeHealthIncident {
                system: 2,
                health: 20,
                code: 0,
                msg: "IMEX daemon not ready".into()
            })
        );
        assert_eq!(parse_line("health_clear node"), Ok(Fault::NodeHealthClear));
        assert_eq!(
            parse_line("sampling_stop"),
            Ok(Fault::Sampling { stopped: true })
        );
        assert_eq!(
            parse_line("fail_reads 2"),
            Ok(Fault::FailReads { count: 2 })
        );
        assert!(parse_line("fail_reads").is_err());
        assert_eq!(
            parse_line("fail_values_since 1 155"),
            Ok(Fault::FailValuesSince {
                count: 1,
                field: 155
            })
        );
        assert!(parse_line("fail_values_since 1").is_err());
        assert!(parse_line("fail_values_since x 155").is_err());
        assert_eq!(
            parse_line("prof_stuck 1"),
            Ok(Fault::ProfStuck {
                gpu: 1,
                status: 0,
                restart_only: false
            })
        );
        assert_eq!(
            parse_line("prof_stuck 0 -37 restart"),
            Ok(Fault::ProfStuck {
                gpu: 0,
                status: -37,
                restart_only: true
            })
        );
        assert!(parse_line("prof_stuck").is_err());
        assert!(parse_line("prof_stuck 0 37").is_err());
        assert!(parse_line("prof_stuck 0 restart -37").is_err());
        assert_eq!(
            parse_line("unwatch_fails 1001 -16"),
            Ok(Fault::UnwatchFails {
                field: 1001,
                status: -16
            })
        );
        assert!(parse_line("unwatch_fails 1001").is_err());
        assert_eq!(
            parse_line("health_clear 3"),
            Ok(Fault::HealthClear { gpu: 3 })
        );
        for bad in [
            "xid 0/1/2/3 13",
            "xid 0/x 13",
            "xid 0/1",
            "health nodes 2 20 0",
            "health_clear",
        ] {
            assert!(parse_line(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn control_lines() {
        assert_eq!(parse_line("xid 2 79"), Ok(Fault::Xid { gpu: 2, xid: 79 }));
        assert_eq!(
            parse_line("spike 0 155 900.5 300"),
            Ok(Fault::Spike {
                gpu: Some(0),
                field: 155,
                value: 900.5,
                ms: 300,
                after_ms: 0
            })
        );
        assert_eq!(
            parse_line("spike * 100 0x10 50 1000"),
            Ok(Fault::Spike {
                gpu: None,
                field: 100,
                value: 16.0,
                ms: 50,
                after_ms: 1000
            })
        );
        assert!(parse_line("spike 0 155 high 300").is_err());
        assert!(parse_line("spike 0 155 900").is_err());
        assert_eq!(
            parse_line("clock_event 1 0x48"),
            Ok(Fault::ClockEvent {
                gpu: 1,
                reasons: 0x48
            })
        );
        assert_eq!(
            parse_line("not_supported * 150"),
            Ok(Fault::FieldNotSupported {
                gpu: None,
                field: 150
            })
        );
        assert_eq!(
            parse_line("  restored 0   150 "),
            Ok(Fault::FieldRestored {
                gpu: Some(0),
                field: 150
            })
        );
        assert_eq!(
            parse_line("mig 1 3g.40gb,3g.40gb:2"),
            Ok(Fault::MigReconfigure {
                gpu: 1,
                instances: vec!["3g.40gb".into(), "3g.40gb:2".into()]
            })
        );
        assert_eq!(
            parse_line("mig 1 none"),
            Ok(Fault::MigReconfigure {
                gpu: 1,
                instances: vec![]
            })
        );
        assert_eq!(
            parse_line("link_state 7 17 up"),
            Ok(Fault::LinkState {
                gpu: 7,
                link: 17,
                state: 3
            })
        );
        assert_eq!(
            parse_line("switch_port 3 63 disabled"),
            Ok(Fault::SwitchPortState {
                switch: 3,
                port: 63,
                state: 1
            })
        );
        assert_eq!(
            parse_line("set 0 150 91"),
            Ok(Fault::SetField {
                gpu: Some(0),
                field: 150,
                gen: Generator::Constant { value: 91.0 }
            })
        );
        assert_eq!(
            parse_line("set * 50 Tesla X"),
            Ok(Fault::SetField {
                gpu: None,
                field: 50,
                gen: Generator::String {
                    value: "Tesla X".into()
                }
            })
        );
        assert_eq!(
            parse_line("sentinel 2 150 blank"),
            Ok(Fault::SetField {
                gpu: Some(2),
                field: 150,
                gen: Generator::Sentinel {
                    which: "blank".into()
                }
            })
        );
        assert_eq!(
            parse_line("sentinel * 155 not_permissioned"),
            Ok(Fault::SetField {
                gpu: None,
                field: 155,
                gen: Generator::Sentinel {
                    which: "not_permissioned".into()
                }
            })
        );
        assert!(parse_line("sentinel 2 150 nothing")
            .unwrap_err()
            .contains("blank, not_found"));
        assert!(parse_line("sentinel 2 150").is_err());
        assert_eq!(
            parse_line("health 0 0x10 20 80 row remap failed"),
            Ok(Fault::HealthIncident {
                gpu: 0,
                system: 0x10,
                health: 20,
                code: 80,
                msg: "row remap failed".into()
            })
        );
        assert_eq!(
            parse_line("health_clear 4"),
            Ok(Fault::HealthClear { gpu: 4 })
        );
        assert_eq!(
            parse_line("gpu_unbind 1"),
            Ok(Fault::GpuBind {
                gpu: 1,
                bound: false
            })
        );
        assert_eq!(
            parse_line("attributes_fail 2"),
            Ok(Fault::AttributesFail { gpu: 2, fail: true })
        );
        assert_eq!(
            parse_line("gpu_bind 1"),
            Ok(Fault::GpuBind {
                gpu: 1,
                bound: true
            })
        );
        assert_eq!(
            parse_line("recovery_action 2 4"),
            Ok(Fault::SetField {
                gpu: Some(2),
                field: 1523,
                gen: Generator::Constant { value: 4.0 }
            })
        );
        assert_eq!(
            parse_line("recovery_action 2 8"),
            Err("action must be 0-7 (nvmlDeviceGpuRecoveryAction_t), not 8".to_string())
        );
        assert_eq!(parse_line("library_gone"), Ok(Fault::LibraryGone));
        assert_eq!(parse_line("library_restored"), Ok(Fault::LibraryRestored));
        assert_eq!(
            parse_line("embedded_start_fail"),
            Ok(Fault::EmbeddedStart { fails: true })
        );
        assert_eq!(
            parse_line("embedded_start_ok"),
            Ok(Fault::EmbeddedStart { fails: false })
        );
        assert!(parse_line("embedded_start_fail now").is_err());
        assert_eq!(
            parse_line("library_gone 1"),
            Err("unexpected '1'".to_string())
        );
        assert_eq!(
            parse_line("process_start 77 3 used_memory_mib=2048 sm_util=60 name=train.py"),
            Ok(Fault::ProcessStart {
                process: Box::new(ProcessSpec {
                    pid: 77,
                    gpu: 3,
                    used_memory_mib: 2048,
                    sm_util: Some(60),
                    name: "train.py".into(),
                    kind: "compute".into(),
                    ..ProcessSpec::default()
                })
            })
        );
        let Ok(Fault::ProcessStart { process }) =
            parse_line("process_start 8 1 gpu_instance=7 compute_instance=1 kind=graphics")
        else {
            panic!("process_start on a MIG instance");
        };
        assert_eq!(
            (
                process.gpu_instance,
                process.compute_instance,
                process.is_graphics()
            ),
            (Some(7), Some(1), true)
        );
        assert_eq!(
            parse_line("process_stop 77"),
            Ok(Fault::ProcessStop { pid: 77, gpu: None })
        );
        assert_eq!(
            parse_line("process_stop 77 2"),
            Ok(Fault::ProcessStop {
                pid: 77,
                gpu: Some(2)
            })
        );
        assert_eq!(
            parse_line("process_util 77 45"),
            Ok(Fault::ProcessUtil {
                pid: 77,
                sm_util: 45,
                mem_util: None
            })
        );
        assert_eq!(
            parse_line("process_util 77 45 9"),
            Ok(Fault::ProcessUtil {
                pid: 77,
                sm_util: 45,
                mem_util: Some(9)
            })
        );
        assert_eq!(
            parse_line("process_memory 77 0x400"),
            Ok(Fault::ProcessMemory { pid: 77, mib: 1024 })
        );
        assert_eq!(
            parse_line("process_util 77 101"),
            Err("sm_util 101 is not a percentage (0..=100)".to_string())
        );
        for bad in [
            "process_start",
            "process_start 0 1",
            "process_start 5 1 sm_util=300",
            "process_start 5 1 colour=red",
            "process_start 5 1 sm_util",
            "process_start 5 1 kind=gfx",
            "process_stop",
            "process_stop 5 1 2",
            "process_util 5",
            "process_util 5 50 50 50",
            "process_memory 5",
            "process_memory 5 -1",
            "xid two 79",
            "explode 1",
            "gpu_lost 1 2",
            "gpu_lost -1",
            "mig 1 big",
            "mig 1 3g.40gb:x",
            "link_state 0 1 sideways",
            "health 0 1 15 3",
            "set 0 150",
            "gpu_unbind",
            "attributes_fail x",
            "recovery_action 1",
            "recovery_action 1 -1",
            "",
        ] {
            assert!(parse_line(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_control_file_applies_each_new_whole_line_once() {
        let p = std::env::temp_dir().join(format!("dcgm-sim-ctl-{}", std::process::id()));
        std::fs::write(&p, "xid 0 13\nbogus\n# comment\n\n").unwrap();
        let mut c = ControlFile::new(p.clone());
        assert_eq!(c.poll(), vec![Fault::Xid { gpu: 0, xid: 13 }]);
        assert_eq!(c.poll(), vec![]);
        std::fs::write(&p, "xid 0 13\nbogus\n# comment\n\ngpu_lost 3\ngpu_rec").unwrap();
        assert_eq!(c.poll(), vec![Fault::GpuLost { gpu: 3 }]);
        std::fs::write(
            &p,
            "xid 0 13\nbogus\n# comment\n\ngpu_lost 3\ngpu_recovered 3\n",
        )
        .unwrap();
        assert_eq!(c.poll(), vec![Fault::GpuRecovered { gpu: 3 }]);
        // Truncated and rewritten: read from the top again.
        std::fs::write(&p, "xid 1 48\n").unwrap();
        assert_eq!(c.poll(), vec![Fault::Xid { gpu: 1, xid: 48 }]);
        // A missing file is simply quiet.
        std::fs::remove_file(&p).unwrap();
        assert_eq!(c.poll(), vec![]);
    }
}
