//! `--pin CPUS` for `bench serving`: the servers (every exporter, every static server, in
//! its own process or as threads of the bench's) on CPUS, the bench's clients on the CPUs
//! left. Unpinned, the 64 clients and the server share every core, so a request's rate is
//! what the clients and the server cost together, and a few per cent of the server's cost
//! vanish in the scheduler's noise. With the server kept on CPUS and the clients given
//! more cores than it (a many-core machine: `--pin 0-1` of 16), the server is the limit and
//! the rates compare what each server costs a request. On 2 cores (`--pin 1`) the clients
//! are the limit: the comparison then shows only a server that falls behind its core.
//!
//! Affinity is set with util-linux's `taskset`, on threads that exist: the exporter's and
//! the static servers' after they start (their later threads inherit it), the bench's
//! main thread before it spawns a client.

use std::collections::BTreeSet;
use std::process::Command;

/// Which CPUs the servers and the clients run on.
pub struct Pinning {
    pub server: String,
    pub clients: String,
}

impl Pinning {
    /// `cpus` (a `taskset` list: `1`, `8-15`, `0,2`) for the servers, the others this
    /// process may use for the clients.
    pub fn new(cpus: &str) -> Result<Pinning, String> {
        let server = parse(cpus).map_err(|e| format!("--pin {cpus:?}: {e}"))?;
        let status = std::fs::read_to_string("/proc/self/status")
            .map_err(|e| format!("--pin: /proc/self/status: {e}"))?;
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .ok_or("--pin: /proc/self/status names no Cpus_allowed_list")?;
        let allowed =
            parse(allowed.trim()).map_err(|e| format!("--pin: this process's CPUs: {e}"))?;
        if let Some(c) = server.iter().find(|c| !allowed.contains(c)) {
            return Err(format!(
                "--pin {cpus:?}: CPU {c} is not one this process may use ({allowed:?})"
            ));
        }
        let clients: BTreeSet<u32> = allowed.difference(&server).copied().collect();
        if clients.is_empty() {
            return Err(format!("--pin {cpus:?}: no CPU is left for the clients"));
        }
        Ok(Pinning {
            server: list(&server),
            clients: list(&clients),
        })
    }

    /// Every thread of process `pid` onto the servers' CPUs.
    pub fn server_process(&self, pid: u32) -> Result<(), String> {
        taskset(&["-a", "-p", "-c", &self.server, &pid.to_string()])
    }

    /// Threads `tids` (of this process) onto the servers' CPUs.
    pub fn server_threads(&self, tids: &[u32]) -> Result<(), String> {
        tids.iter()
            .try_for_each(|t| taskset(&["-p", "-c", &self.server, &t.to_string()]))
    }

    /// This process's main thread (which spawns the clients) onto the clients' CPUs.
    pub fn clients(&self) -> Result<(), String> {
        taskset(&["-p", "-c", &self.clients, &std::process::id().to_string()])
    }
}

fn taskset(args: &[&str]) -> Result<(), String> {
    let out = Command::new("taskset")
        .args(args)
        .output()
        .map_err(|e| format!("--pin needs util-linux's taskset: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "taskset {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// A CPU list as the kernel and `taskset` write it: `0-3,8,10-11`.
fn parse(s: &str) -> Result<BTreeSet<u32>, String> {
    let mut cpus = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |n: &str| {
            n.trim()
                .parse::<u32>()
                .map_err(|_| format!("{part:?} is not a CPU or a range of CPUs"))
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if lo > hi {
            return Err(format!("{part:?}: the range runs backwards"));
        }
        cpus.extend(lo..=hi);
    }
    match cpus.is_empty() {
        true => Err("no CPU named".into()),
        false => Ok(cpus),
    }
}

fn list(cpus: &BTreeSet<u32>) -> String {
    cpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_list_reads_as_the_kernel_writes_it() {
        assert_eq!(
            parse("0-3,8, 10-11").unwrap(),
            [0, 1, 2, 3, 8, 10, 11].into()
        );
        assert_eq!(list(&parse("5,1-2").unwrap()), "1,2,5");
        assert!(parse("").is_err());
        assert!(parse("3-1").unwrap_err().contains("backwards"));
        assert!(parse("a").unwrap_err().contains("\"a\""));
    }
}
