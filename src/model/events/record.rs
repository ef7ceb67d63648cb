//! The producers' side: one call at the place each happening is logged. The free
//! functions record into the process's history ([`super::global`]); the same calls on a
//! [`Recorder`] of its own serve tests. A state seen at every collection (a GPU's presence,
//! its health action, a health watch's result, the MIG layout) is recorded when it changes.

use super::track::{Node, Presence};
use super::{Detail, Event, Kind, Recorder, Severity, TimeSource};
use crate::model::clock::now_us;
use crate::model::node::Topology;
use dcgm_sys::{Entity, HealthResponse};

/// One event before the history numbers it.
struct Draft {
    kind: Kind,
    severity: Severity,
    entity: String,
    message: String,
    details: Vec<(&'static str, Detail)>,
    /// The happening's own time, where a clock other than ours has it.
    at: Option<(i64, TimeSource)>,
}

impl Draft {
    fn new(kind: Kind, severity: Severity, entity: String, message: String) -> Draft {
        Draft {
            kind,
            severity,
            entity,
            message,
            details: Vec::new(),
            at: None,
        }
    }

    fn with(mut self, key: &'static str, v: impl Into<Detail>) -> Draft {
        self.details.push((key, v.into()));
        self
    }
}

/// `health` (0 pass, 10 warn, 20 fail) by name.
fn result_name(health: u32) -> &'static str {
    match health {
        0 => "pass",
        h if h < 20 => "warn",
        _ => "fail",
    }
}

/// DCGM's health systems (`dcgmHealthSystems_t`) by bit.
fn system_name(bit: u32) -> String {
    const NAMES: &[(u32, &str)] = &[
        (0x1, "PCIE"),
        (0x2, "NVLINK"),
        (0x4, "PMU"),
        (0x8, "MCU"),
        (0x10, "MEM"),
        (0x20, "SM"),
        (0x40, "INFOROM"),
        (0x80, "THERMAL"),
        (0x100, "POWER"),
        (0x200, "DRIVER"),
        (0x400, "NVSWITCH_NONFATAL"),
        (0x800, "NVSWITCH_FATAL"),
        (0x1000, "CONNECTX"),
        (0xFFFF_FFFF, "ALL"),
    ];
    NAMES
        .iter()
        .find(|(b, _)| *b == bit)
        .map_or_else(|| format!("0x{bit:x}"), |(_, n)| n.to_string())
}

/// The severity of a health action (`collect::health::Action`'s labels).
fn action_severity(action: &str) -> Severity {
    match action {
        "none" => Severity::Info,
        "restart_workload" | "drain" => Severity::Warning,
        _ => Severity::Error,
    }
}

impl Recorder {
    fn add(&self, n: Draft) {
        let recorded_us = now_us();
        let (time_us, source) = n.at.unwrap_or((recorded_us, TimeSource::Exporter));
        self.push(Event {
            seq: 0,
            time_us,
            source,
            recorded_us,
            kind: n.kind,
            severity: n.severity,
            entity: n.entity,
            engine: crate::logging::thread_engine(),
            message: super::cut(&n.message),
            details: n.details,
        });
    }

    /// Runs `f` on this thread's engine's node, then records what it made.
    fn on_node(&self, f: impl FnOnce(&mut Node) -> Vec<Draft>) {
        let engine = crate::logging::thread_engine();
        let made = f(self.tracker().node(&engine));
        for n in made {
            self.add(n);
        }
    }

    /// An XID sample DCGM stored on `entity` at `ts_us` (its own timestamp); one read
    /// again is not a new event.
    pub(crate) fn dcgm_xid(&self, entity: Entity, xid: i64, ts_us: i64, description: &str) {
        self.on_node(|node| {
            let newest = node.xid_ts.entry(entity).or_insert(i64::MIN);
            if ts_us <= *newest {
                return Vec::new();
            }
            *newest = ts_us;
            let name = node.name(entity);
            let mut n = xid_event(&name, xid, description, "dcgm");
            if let Some(g) = node.gpu_of(entity) {
                n = n.with("gpu", g);
            }
            n.at = Some((ts_us, TimeSource::Dcgm));
            vec![n]
        });
    }

    /// An XID event NVML raised (NVML's XID events carry no time: ours).
    pub(crate) fn nvml_xid(
        &self,
        gpu: u32,
        instance: (Option<u32>, Option<u32>),
        xid: i64,
        description: &str,
    ) {
        let entity = match instance {
            (Some(gi), Some(ci)) => format!("gpu:{gpu}/gi:{gi}/ci:{ci}"),
            (Some(gi), None) => format!("gpu:{gpu}/gi:{gi}"),
            _ => format!("gpu:{gpu}"),
        };
        self.add(xid_event(&entity, xid, description, "nvml").with("gpu", gpu));
    }

    /// GPU `gpu`'s health action (`DCGM_EXP_GPU_HEALTH_ACTION`) this collection; recorded
    /// when it changes (first seen: unless it is `none`).
    pub(crate) fn health_action(&self, gpu: u32, action: &str, reason: &str) {
        self.on_node(|node| {
            let now = (action.to_string(), reason.to_string());
            let before = node.actions.insert(gpu, now.clone());
            if before.as_ref() == Some(&now) || (before.is_none() && action == "none") {
                return Vec::new();
            }
            let was = before.map_or("unknown".to_string(), |(a, _)| a);
            let n = Draft::new(
                Kind::HealthAction,
                action_severity(action),
                format!("gpu:{gpu}"),
                format!("GPU {gpu} needs {action} now (reason {reason}; was {was})"),
            )
            .with("action", action)
            .with("reason", reason)
            .with("previous_action", was);
            vec![with_uuid(node, gpu, n)]
        });
    }

    /// A health check's answer: each (entity, health system) whose result changed.
    pub fn health(&self, resp: &HealthResponse) {
        self.on_node(|node| {
            let mut now = super::track::HealthState::new();
            for i in &resp.incidents {
                let slot = now
                    .entry((i.entity, i.system))
                    .or_insert((0, 0, String::new()));
                if i.health >= slot.0 {
                    *slot = (i.health, i.code, i.message.clone());
                }
            }
            let before = node.health.replace(now.clone()).unwrap_or_default();
            let mut out: Vec<Draft> = now
                .iter()
                .filter(|(k, v)| before.get(k) != Some(v))
                .map(|(k, v)| health_event(node, *k, v))
                .collect();
            out.extend(
                before
                    .keys()
                    .filter(|k| !now.contains_key(k))
                    .map(|k| health_event(node, *k, &(0, 0, String::new()))),
            );
            out.sort_by(|a, b| a.entity.cmp(&b.entity).then(a.message.cmp(&b.message)));
            out
        });
    }

    /// The GPUs the node started with (`expected`), those DCGM lists and those it says
    /// are lost, at one collection (on NVML: the GPUs asked, and those that answered
    /// GPU_IS_LOST).
    pub fn gpus(&self, expected: &[u32], listed: &[u32], lost: &[u32]) {
        self.on_node(|node| {
            expected
                .iter()
                .filter_map(|&g| {
                    let p = if lost.contains(&g) {
                        Presence::Lost
                    } else if !listed.contains(&g) {
                        Presence::Gone
                    } else {
                        Presence::Present
                    };
                    presence(node, g, p)
                })
                .collect()
        });
    }

    /// The node as a build of the watches discovered it: its names, MIG changes, and GPUs
    /// lost, back, unbound or bound since the last build.
    pub(crate) fn topology(&self, t: &Topology) {
        self.on_node(|node| {
            let mut out: Vec<Draft> = node
                .take_topology(t)
                .into_iter()
                .map(|(g, before, after)| {
                    let n = Draft::new(
                        Kind::MigChange,
                        Severity::Info,
                        format!("gpu:{g}"),
                        format!("GPU {g}'s MIG layout changed: {before} -> {after}"),
                    )
                    .with("before", before)
                    .with("after", after);
                    with_uuid(node, g, n)
                })
                .collect();
            let mut now: Vec<(u32, Presence)> =
                t.gpus.iter().map(|g| (g.id, Presence::Present)).collect();
            now.extend(t.lost_gpus.iter().map(|&g| (g, Presence::Lost)));
            let gone: Vec<u32> = node
                .gpus
                .keys()
                .copied()
                .filter(|g| !now.iter().any(|(n, _)| n == g))
                .collect();
            now.extend(gone.into_iter().map(|g| (g, Presence::Gone)));
            now.sort_by_key(|(g, _)| *g);
            out.extend(now.into_iter().filter_map(|(g, p)| presence(node, g, p)));
            out
        });
    }

    /// The host engine (`engine`: its address or `embedded`) could not be used.
    pub fn engine_down(&self, engine: &str, why: &str) {
        self.add(
            Draft::new(
                Kind::EngineDown,
                Severity::Error,
                format!("engine:{engine}"),
                format!("lost the DCGM host engine {engine}: {why}"),
            )
            .with("reason", why),
        );
    }

    /// A session with the host engine opened (at start, and each time it is back).
    pub fn engine_up(&self, engine: &str) {
        self.add(Draft::new(
            Kind::EngineUp,
            Severity::Info,
            format!("engine:{engine}"),
            format!("the DCGM host engine {engine} answers"),
        ));
    }

    /// NVML serves the core GPU series while DCGM (`engine`) cannot (`--backend auto`).
    pub(crate) fn failover_engaged(&self, engine: &str, why: &str) {
        self.on_node(|node| {
            node.failover = Some(engine.to_string());
            let n = Draft::new(
                Kind::FailoverEngaged,
                Severity::Warning,
                format!("engine:{engine}"),
                format!("NVML serves the core GPU series while DCGM is unavailable: {why}"),
            );
            vec![n.with("reason", why)]
        });
    }

    /// DCGM serves again after NVML served for `served_s` seconds.
    pub(crate) fn failover_released(&self, served_s: f64) {
        self.on_node(|node| {
            let engine = node.failover.take().unwrap_or_else(|| "dcgm".into());
            let n = Draft::new(
                Kind::FailoverReleased,
                Severity::Info,
                format!("engine:{engine}"),
                format!("DCGM serves again (NVML served for {served_s:.1}s)"),
            );
            vec![n.with("served_ms", (served_s * 1000.0) as i64)]
        });
    }

    /// A reload of `what` (`counters`, ...) that `trigger` asked for (`sighup`,
    /// `counters-file`, `configmap`, `bind-unbind`; several comma-separated when they came
    /// together): `Ok(what was loaded)` or `Err(why it was refused)`, the previous set
    /// staying in force.
    pub fn reload(&self, what: &str, trigger: &str, outcome: Result<&str, &str>) {
        let n = match outcome {
            Ok(loaded) => Draft::new(
                Kind::Reload,
                Severity::Info,
                "exporter".into(),
                format!("reloaded {loaded}"),
            )
            .with("outcome", "ok"),
            Err(why) => Draft::new(
                Kind::Reload,
                Severity::Warning,
                "exporter".into(),
                format!("reload refused: {why}; the previous {what} stay in force"),
            )
            .with("outcome", "refused")
            .with("reason", why),
        };
        self.add(n.with("what", what).with("trigger", trigger));
    }

    /// Profiling of GPU `gpu` was re-armed, or the embedded engine restarted for it
    /// (`action`: `rearm`, `restart_engine`; NVIDIA/DCGM#303).
    pub(crate) fn profiling_rearm(&self, gpu: u32, uuid: &str, action: &str, why: &str) {
        self.add(
            Draft::new(
                Kind::ProfilingRearm,
                Severity::Warning,
                format!("gpu:{gpu}"),
                format!("{why}: {action}"),
            )
            .with("action", action)
            .with("uuid", uuid),
        );
    }

    /// A changed `--web-config-file` was not put in force (`reason`: `lowers_security`,
    /// `invalid`).
    pub fn web_config_refused(&self, reason: &str, why: &str) {
        self.add(
            Draft::new(
                Kind::WebConfigRefused,
                Severity::Error,
                "exporter".into(),
                why.to_string(),
            )
            .with("reason", reason),
        );
    }
}

fn xid_event(entity: &str, xid: i64, description: &str, from: &str) -> Draft {
    Draft::new(
        Kind::Xid,
        Severity::Warning,
        entity.to_string(),
        format!("XID {xid} ({description}) on {entity}"),
    )
    .with("xid", xid)
    .with("description", description)
    .with("from", from)
}

fn with_uuid(node: &Node, gpu: u32, n: Draft) -> Draft {
    match node.uuids.get(&gpu) {
        Some(u) => n.with("uuid", u.as_str()),
        None => n,
    }
}

fn health_event(node: &Node, (entity, system): (Entity, u32), v: &(u32, u32, String)) -> Draft {
    let (health, code, message) = v;
    let result = result_name(*health);
    let name = node.name(entity);
    let system = system_name(system);
    let severity = match result {
        "pass" => Severity::Info,
        "warn" => Severity::Warning,
        _ => Severity::Error,
    };
    let text = if message.is_empty() {
        format!("health {system} on {name}: {result}")
    } else {
        format!("health {system} on {name}: {result}: {message}")
    };
    let mut n = Draft::new(Kind::HealthSystem, severity, name, text)
        .with("system", system)
        .with("result", result)
        .with("code", *code);
    if let Some(g) = node.gpu_of(entity) {
        n = n.with("gpu", g);
    }
    n
}

/// GPU `gpu` is now `p`: the event of the change, if it is one.
fn presence(node: &mut Node, gpu: u32, p: Presence) -> Option<Draft> {
    let before = node.gpus.insert(gpu, p);
    let (kind, severity, what) = match (before, p) {
        (b, now) if b == Some(now) => return None,
        (None, Presence::Present) => return None,
        (_, Presence::Lost) => (
            Kind::GpuLost,
            Severity::Error,
            "is lost (fallen off the bus)",
        ),
        (Some(Presence::Lost), Presence::Present) => {
            (Kind::GpuFound, Severity::Info, "answers again")
        }
        (_, Presence::Present) => (
            Kind::GpuBound,
            Severity::Info,
            "is bound to its driver again",
        ),
        (_, Presence::Gone) => (
            Kind::GpuUnbound,
            Severity::Warning,
            "is no longer listed (its driver was unbound)",
        ),
    };
    let n = Draft::new(
        kind,
        severity,
        format!("gpu:{gpu}"),
        format!("GPU {gpu} {what}"),
    );
    Some(with_uuid(node, gpu, n))
}

/// [`Recorder::dcgm_xid`] into the process's history.
pub(crate) fn dcgm_xid(entity: Entity, xid: i64, ts_us: i64, description: &str) {
    super::global().dcgm_xid(entity, xid, ts_us, description);
}

/// [`Recorder::nvml_xid`] into the process's history.
pub(crate) fn nvml_xid(
    gpu: u32,
    instance: (Option<u32>, Option<u32>),
    xid: i64,
    description: &str,
) {
    super::global().nvml_xid(gpu, instance, xid, description);
}

/// [`Recorder::health_action`] into the process's history.
pub(crate) fn health_action(gpu: u32, action: &str, reason: &str) {
    super::global().health_action(gpu, action, reason);
}

/// [`Recorder::health`] into the process's history.
pub fn health(resp: &HealthResponse) {
    super::global().health(resp);
}

/// [`Recorder::gpus`] into the process's history.
pub fn gpus(expected: &[u32], listed: &[u32], lost: &[u32]) {
    super::global().gpus(expected, listed, lost);
}

/// [`Recorder::topology`] into the process's history.
pub(crate) fn topology(t: &Topology) {
    super::global().topology(t);
}

/// [`Recorder::engine_down`] into the process's history.
pub fn engine_down(engine: &str, why: &str) {
    super::global().engine_down(engine, why);
}

/// [`Recorder::engine_up`] into the process's history.
pub fn engine_up(engine: &str) {
    super::global().engine_up(engine);
}

/// [`Recorder::failover_engaged`] into the process's history.
pub(crate) fn failover_engaged(engine: &str, why: &str) {
    super::global().failover_engaged(engine, why);
}

/// [`Recorder::failover_released`] into the process's history.
pub(crate) fn failover_released(served_s: f64) {
    super::global().failover_released(served_s);
}

/// [`Recorder::reload`] into the process's history.
pub fn reload(what: &str, trigger: &str, outcome: Result<&str, &str>) {
    super::global().reload(what, trigger, outcome);
}

/// [`Recorder::profiling_rearm`] into the process's history: the hook for profiling
/// re-arms and engine restarts (`collect/heal.rs` calls it where it logs them).
pub(crate) fn profiling_rearm(gpu: u32, uuid: &str, action: &str, why: &str) {
    super::global().profiling_rearm(gpu, uuid, action, why);
}

/// [`Recorder::web_config_refused`] into the process's history.
pub fn web_config_refused(reason: &str, why: &str) {
    super::global().web_config_refused(reason, why);
}
