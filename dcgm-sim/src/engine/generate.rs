//! Values over time: the default generator of every field, and evaluation.

use super::profile::Generator;
use crate::proto::Value;

/// DCGM's blank sentinels by field type (dcgm_structs.h).
pub const INT64_BLANK: i64 = 0x7fff_ffff_ffff_fff0;
pub const FP64_BLANK: f64 = 140_737_488_355_328.0;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sentinel {
    Blank = 0,
    NotFound = 1,
    NotSupported = 2,
    NotPermissioned = 3,
}

impl Sentinel {
    pub fn parse(s: &str) -> Option<Sentinel> {
        Some(match s {
            "blank" => Sentinel::Blank,
            "not_found" => Sentinel::NotFound,
            "not_supported" => Sentinel::NotSupported,
            "not_permissioned" => Sentinel::NotPermissioned,
            _ => return None,
        })
    }

    pub fn value(self, field_type: u8) -> Value {
        let off = self as i64;
        match field_type {
            b'd' => Value::Double(FP64_BLANK + off as f64),
            b's' => Value::Str(
                [
                    "<<<NULL>>>",
                    "<<<NOT_FOUND>>>",
                    "<<<NOT_SUPPORTED>>>",
                    "<<<NOT_PERM>>>",
                ][off as usize]
                    .to_string(),
            ),
            b'b' => Value::Blob(vec![0]),
            _ => Value::Int64(INT64_BLANK + off),
        }
    }
}

/// splitmix64: a deterministic hash for seeded noise.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Uniform in [0, 1) from a key.
pub fn unit(key: u64) -> f64 {
    (mix(key) >> 11) as f64 / (1u64 << 53) as f64
}

/// The default generator of a field, chosen to look like a busy node.
pub fn default_for(field: u16, field_type: u8, power_limit_w: f64, memory_mib: i64) -> Generator {
    use Generator::*;
    let walk = |min: f64, max: f64| RandomWalk {
        start: (min + max) / 2.0,
        step: (max - min) / 20.0,
        min,
        max,
    };
    match field {
        100 => Sine {
            mid: 1900.0,
            amplitude: 80.0,
            period_s: 90.0,
        },
        101 => Constant { value: 2619.0 },
        140 => Sine {
            mid: 45.0,
            amplitude: 8.0,
            period_s: 150.0,
        },
        150 => Sine {
            mid: 55.0,
            amplitude: 15.0,
            period_s: 120.0,
        },
        155 | 157 => Sine {
            mid: 0.6 * power_limit_w,
            amplitude: 0.25 * power_limit_w,
            period_s: 60.0,
        },
        156 => Counter {
            per_s: power_limit_w * 600.0,
        },
        160 => Constant {
            value: power_limit_w,
        },
        190 => Constant { value: 0.0 },
        191 => walk(30.0, 80.0),
        202 => Counter { per_s: 0.05 },
        203 => walk(40.0, 95.0),
        204 => walk(10.0, 60.0),
        206 | 207 => walk(0.0, 20.0),
        240..=245 => Counter { per_s: 1000.0 },
        250 => Constant {
            value: memory_mib as f64,
        },
        252 => Sine {
            mid: memory_mib as f64 * 0.6,
            amplitude: memory_mib as f64 * 0.2,
            period_s: 300.0,
        },
        253 => Constant { value: 512.0 },
        310..=313 | 390..=396 => Constant { value: 0.0 },
        400..=439 | 451..=474 | 481..=493 | 1525..=1528 => Constant { value: 0.0 },
        440..=449 | 475..=480 | 494..=496 | 825..=860 | 863..=897 | 1529..=1531 => {
            walk(1_000.0, 50_000.0)
        }
        500 => Constant { value: 0.0 },
        1001..=1008 | 1013..=1032 => walk(0.1, 0.9),
        1009..=1012 | 1040..=1075 | 1532 | 1533 => walk(1.0e8, 2.0e10),
        1091 | 1092 => Counter { per_s: 5.0e9 },
        780 | 781 | 861 | 862 => walk(1.0e6, 1.0e9),
        1100..=1104 => walk(5.0, 95.0),
        1110 => Sine {
            mid: 60.0,
            amplitude: 10.0,
            period_s: 100.0,
        },
        1111 => Constant { value: 95.0 },
        1112 => Constant { value: 105.0 },
        1120 => Sine {
            mid: 3000.0,
            amplitude: 300.0,
            period_s: 45.0,
        },
        1130 => Sine {
            mid: 250.0,
            amplitude: 80.0,
            period_s: 70.0,
        },
        1131 => Constant { value: 500.0 },
        _ => match field_type {
            b'd' => walk(0.0, 100.0),
            b's' => Text {
                value: "sim".into(),
            },
            b'b' => Sentinel {
                which: "not_supported".into(),
            },
            _ => walk(0.0, 1000.0),
        },
    }
}

/// Evaluates a generator at `t_s` seconds after start. `walk` carries random-walk state
/// between samples of one watch; `key` seeds the noise and the phase.
pub fn eval(
    g: &Generator,
    field_type: u8,
    t_s: f64,
    key: u64,
    walk: &mut Option<f64>,
) -> (Value, i32) {
    let phase = unit(key) * std::f64::consts::TAU;
    let x = match g {
        Generator::Constant { value } => *value,
        Generator::Ramp { start, per_s, max } => (start + per_s * t_s).min(*max),
        Generator::Sine {
            mid,
            amplitude,
            period_s,
        } => mid + amplitude * ((t_s / period_s.max(1e-3)) * std::f64::consts::TAU + phase).sin(),
        Generator::RandomWalk {
            start,
            step,
            min,
            max,
        } => {
            let prev = walk.unwrap_or(*start + (unit(key ^ 0x5a5a) - 0.5) * (max - min) * 0.5);
            let next =
                (prev + step * (unit(key ^ (t_s * 1000.0) as u64) * 2.0 - 1.0)).clamp(*min, *max);
            *walk = Some(next);
            next
        }
        // As if the node had been up for up to an hour before the simulation started.
        Generator::Counter { per_s } => per_s * (t_s.max(0.0) + unit(key) * 3600.0),
        Generator::Text { value } => return (Value::Str(value.clone()), 0),
        Generator::Sentinel { which } => {
            return (
                Sentinel::parse(which)
                    .unwrap_or(Sentinel::Blank)
                    .value(field_type),
                0,
            );
        }
        Generator::Error { status } => return (Sentinel::Blank.value(field_type), *status),
    };
    let v = match field_type {
        b'd' => Value::Double(x),
        b's' => Value::Str(format!("{x}")),
        b'b' => Value::Blob(vec![0]),
        _ => Value::Int64(x.round() as i64),
    };
    (v, 0)
}
