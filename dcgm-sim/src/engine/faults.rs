//! Faults a test can cause while a client runs: a control-file line each.
//!
//! | line | effect |
//! |---|---|
//! | `gpu_lost G` | GPU G falls off the bus: its values turn blank, status Lost, a PCIe health failure |
//! | `gpu_recovered G` | undoes `gpu_lost` |
//! | `xid G N` | XID N on GPU G: a sample of DCGM_FI_DEV_XID_ERRORS and a health incident |
//! | `clock_event G MASK` | the next sample of DCGM_FI_DEV_CLOCKS_EVENT_REASONS on GPU G is MASK |
//! | `not_supported G F` | field F of GPU G reads DCGM_*_NOT_SUPPORTED (`*` for every GPU) |
//! | `restored G F` | undoes `not_supported` |
//! | `mig G P1,P2,...` | reconfigures GPU G's MIG instances (`mig G none` disables MIG) |
//! | `link_state G L up|down` | changes the state of NVLink L of GPU G |

use std::path::PathBuf;

#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    GpuLost { gpu: u32 },
    GpuRecovered { gpu: u32 },
    Xid { gpu: u32, xid: i64 },
    ClockEvent { gpu: u32, reasons: i64 },
    FieldNotSupported { gpu: Option<u32>, field: u16 },
    FieldRestored { gpu: Option<u32>, field: u16 },
    MigReconfigure { gpu: u32, instances: Vec<String> },
    LinkState { gpu: u32, link: u32, up: bool },
}

fn num<T: std::str::FromStr>(s: Option<&str>, what: &str) -> Result<T, String> {
    let s = s.ok_or_else(|| format!("missing {what}"))?;
    s.parse()
        .map_err(|_| format!("{what} '{s}' is not a number"))
}

fn int(s: Option<&str>, what: &str) -> Result<i64, String> {
    let s = s.ok_or_else(|| format!("missing {what}"))?;
    match s.strip_prefix("0x") {
        Some(h) => i64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|_| format!("{what} '{s}' is not a number"))
}

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
        "xid" => Fault::Xid {
            gpu: num(w.next(), "gpu")?,
            xid: int(w.next(), "xid")?,
        },
        "clock_event" => Fault::ClockEvent {
            gpu: num(w.next(), "gpu")?,
            reasons: int(w.next(), "mask")?,
        },
        "not_supported" | "restored" => {
            let g = w.next().ok_or("missing gpu")?;
            let gpu = if g == "*" {
                None
            } else {
                Some(num(Some(g), "gpu")?)
            };
            let field = num(w.next(), "field id")?;
            if verb == "restored" {
                Fault::FieldRestored { gpu, field }
            } else {
                Fault::FieldNotSupported { gpu, field }
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
            for p in &instances {
                super::profile::slices_of(p)
                    .ok_or_else(|| format!("'{p}' is not a MIG profile like 1g.10gb"))?;
            }
            Fault::MigReconfigure { gpu, instances }
        }
        "link_state" => {
            let gpu = num(w.next(), "gpu")?;
            let link = num(w.next(), "link")?;
            let up = match w.next() {
                Some("up") => true,
                Some("down") => false,
                o => return Err(format!("expected up or down, got {o:?}")),
            };
            Fault::LinkState { gpu, link, up }
        }
        o => return Err(format!("unknown fault '{o}'")),
    };
    if let Some(extra) = w.next() {
        return Err(format!("unexpected '{extra}'"));
    }
    Ok(f)
}

/// Follows an append-only control file: returns the faults of lines added since last time.
pub struct ControlFile {
    path: PathBuf,
    consumed: usize,
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
        let len = std::fs::metadata(&self.path)
            .map(|m| m.len() as usize)
            .unwrap_or(0);
        if len <= self.consumed {
            return Vec::new();
        }
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return Vec::new();
        };
        // Only whole lines are applied; a line being written is picked up next time.
        let Some(end) = text.rfind('\n').map(|i| i + 1) else {
            return Vec::new();
        };
        if end <= self.consumed {
            return Vec::new();
        }
        let new = &text[self.consumed..end];
        self.consumed = end;
        let mut out = Vec::new();
        for line in new.lines() {
            self.lines_seen += 1;
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            match parse_line(l) {
                Ok(f) => out.push(f),
                Err(e) => eprintln!("dcgm-sim: {}:{}: {e}", self.path.display(), self.lines_seen),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_lines() {
        assert_eq!(parse_line("xid 2 79"), Ok(Fault::Xid { gpu: 2, xid: 79 }));
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
            parse_line("mig 1 3g.40gb,3g.40gb"),
            Ok(Fault::MigReconfigure {
                gpu: 1,
                instances: vec!["3g.40gb".into(), "3g.40gb".into()]
            })
        );
        assert_eq!(
            parse_line("mig 1 none"),
            Ok(Fault::MigReconfigure {
                gpu: 1,
                instances: vec![]
            })
        );
        assert!(parse_line("xid two 79").is_err());
        assert!(parse_line("explode 1").is_err());
        assert!(parse_line("gpu_lost 1 2").is_err());
        assert!(parse_line("mig 1 big").is_err());
    }

    #[test]
    fn the_control_file_applies_each_new_whole_line_once() {
        let dir = std::env::temp_dir().join(format!("dcgm-sim-ctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c");
        std::fs::write(&p, "xid 0 13\nbogus\n").unwrap();
        let mut c = ControlFile::new(p.clone());
        assert_eq!(c.poll(), vec![Fault::Xid { gpu: 0, xid: 13 }]);
        assert_eq!(c.poll(), vec![]);
        std::fs::write(&p, "xid 0 13\nbogus\ngpu_lost 3\ngpu_rec").unwrap();
        assert_eq!(c.poll(), vec![Fault::GpuLost { gpu: 3 }]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
