//! Values over time: the generators a profile can name, their evaluation, and the default
//! generator of every field.
//!
//! Every generator is a pure function of (key, time): no state is carried between samples,
//! so a value never depends on who read what before, a skipped stretch of history costs
//! nothing, and two engines with the same seed agree.

use crate::Value;
use serde::Deserialize;

/// DCGM's blank sentinels by field type (dcgm_structs.h:41-156).
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

    /// The payload DCGM stores for this sentinel in a field of `field_type`.
    pub fn value(self, field_type: u8) -> Value {
        let off = self as i64;
        match field_type {
            b'd' => Value::Double(FP64_BLANK + off as f64),
            b's' => Value::Str(
                match self {
                    Sentinel::Blank => "<<<NULL>>>",
                    Sentinel::NotFound => "<<<NOT_FOUND>>>",
                    Sentinel::NotSupported => "<<<NOT_SUPPORTED>>>",
                    Sentinel::NotPermissioned => "<<<NOT_PERM>>>",
                }
                .to_string(),
            ),
            // DcgmFvBuffer writes a one-byte blob for a blank binary value.
            b'b' => Value::Blob(vec![0]),
            _ => Value::Int64(INT64_BLANK + off),
        }
    }
}

/// How a field's value moves over time. `kind` selects the variant in TOML.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Generator {
    Constant {
        value: f64,
    },
    /// `start + per_s * t`, clamped at `max` (or wrapping back to `start` with `wrap`).
    Ramp {
        start: f64,
        per_s: f64,
        max: f64,
        #[serde(default)]
        wrap: bool,
    },
    /// `mid + amplitude * sin(2πt/period + phase)`; the phase differs per entity.
    Sine {
        mid: f64,
        amplitude: f64,
        period_s: f64,
    },
    /// A random walk reflected into [min, max]: one step (normal, standard deviation
    /// `step`) every `interval_s`. Its value at step n is a function of the seed, the entity
    /// and n alone.
    RandomWalk {
        start: f64,
        step: f64,
        min: f64,
        max: f64,
        #[serde(default)]
        seed: Option<u64>,
        #[serde(default = "d_interval")]
        interval_s: f64,
    },
    /// Monotonic: `per_s` on average, with a rate that wobbles by ±`jitter` (0..=1) when
    /// given. Starts as if the node had been up for a while (`start`, default up to an hour
    /// of counting).
    Counter {
        per_s: f64,
        #[serde(default)]
        start: Option<f64>,
        #[serde(default)]
        jitter: f64,
        #[serde(default)]
        seed: Option<u64>,
    },
    /// A fixed string (`text` is the older name).
    #[serde(alias = "text")]
    String {
        value: String,
    },
    /// blank, not_found, not_supported or not_permissioned, in the payload with status OK
    /// (how the cache stores NVML's NOT_SUPPORTED etc.).
    Sentinel {
        which: String,
    },
    /// A dcgmReturn_t status with a blank payload.
    Error {
        status: i32,
    },
}

/// `Err(message)` unless `ok`.
fn require(ok: bool, message: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(message.to_string())
    }
}

fn d_interval() -> f64 {
    1.0
}

impl Generator {
    pub fn validate(&self) -> Result<(), String> {
        let finite =
            |name: &str, v: f64| require(v.is_finite(), &format!("{name} must be a finite number"));
        let positive = |name: &str, v: f64| {
            require(
                v.is_finite() && v > 0.0,
                &format!("{name} must be positive"),
            )
        };
        match self {
            Generator::Constant { value } => finite("value", *value),
            Generator::Ramp {
                start,
                per_s,
                max,
                wrap,
            } => {
                finite("start", *start)?;
                finite("per_s", *per_s)?;
                finite("max", *max)?;
                require(
                    !(*wrap && max <= start),
                    "a wrapping ramp needs max > start",
                )
            }
            Generator::Sine {
                mid,
                amplitude,
                period_s,
            } => {
                finite("mid", *mid)?;
                finite("amplitude", *amplitude)?;
                positive("period_s", *period_s)
            }
            Generator::RandomWalk {
                start,
                step,
                min,
                max,
                interval_s,
                ..
            } => {
                for (n, v) in [("start", start), ("step", step), ("min", min), ("max", max)] {
                    finite(n, *v)?;
                }
                // All finite by now: `<` and `>=` are each other's negation.
                require(min < max, "random_walk needs min < max")?;
                require(*step >= 0.0, "random_walk step must not be negative")?;
                positive("interval_s", *interval_s)
            }
            Generator::Counter {
                per_s,
                start,
                jitter,
                ..
            } => {
                let per_s_ok = per_s.is_finite() && *per_s >= 0.0;
                require(per_s_ok, "counter per_s must be a non-negative number")?;
                if let Some(s) = start {
                    finite("start", *s)?;
                }
                let jitter_ok = (0.0..=1.0).contains(jitter);
                require(
                    jitter_ok,
                    "counter jitter must be within 0..=1 (it must never count down)",
                )
            }
            Generator::String { .. } => Ok(()),
            Generator::Sentinel { which } => Sentinel::parse(which).map(|_| ()).ok_or_else(|| {
                format!(
                    "sentinel '{which}' is not blank, not_found, not_supported or not_permissioned"
                )
            }),
            Generator::Error { status } => {
                if *status < 0 {
                    Ok(())
                } else {
                    Err(format!(
                        "error status must be a negative dcgmReturn_t, not {status}"
                    ))
                }
            }
        }
    }

    /// The value at `t_s` seconds after the engine started, for the entity and field that
    /// `key` stands for. Returns (payload, status).
    pub fn eval(&self, field_type: u8, t_s: f64, key: u64) -> (Value, i32) {
        let x = match self {
            Generator::Constant { value } => *value,
            Generator::Ramp {
                start,
                per_s,
                max,
                wrap,
            } => {
                let v = start + per_s * t_s.max(0.0);
                if *wrap {
                    start + (v - start).rem_euclid(max - start)
                } else {
                    v.min(*max)
                }
            }
            Generator::Sine {
                mid,
                amplitude,
                period_s,
            } => {
                let phase = unit(key) * std::f64::consts::TAU;
                mid + amplitude * ((t_s / period_s) * std::f64::consts::TAU + phase).sin()
            }
            Generator::RandomWalk {
                start,
                step,
                min,
                max,
                seed,
                interval_s,
            } => {
                let n = (t_s.max(0.0) / interval_s) as u64;
                let s = walk_sum(mix(key ^ seed.unwrap_or(0).rotate_left(17)), n);
                reflect(start + step * s, *min, *max)
            }
            Generator::Counter {
                per_s,
                start,
                jitter,
                seed,
            } => {
                let k = mix(key ^ seed.unwrap_or(0));
                let base = start.unwrap_or(per_s * unit(k) * 3600.0);
                let t = t_s.max(0.0);
                // d/dt = per_s * (1 + jitter*cos(..)) >= 0 for jitter <= 1: never decreases.
                let period = 20.0 + 100.0 * unit(k ^ 0x77);
                let phase = unit(k ^ 0x99) * std::f64::consts::TAU;
                let w = std::f64::consts::TAU / period;
                base + per_s * (t + jitter * ((w * t + phase).sin() - phase.sin()) / w)
            }
            // Real DCGM never carries text in a number: reading the text's bytes as one would
            // be a value no driver gives, so a numeric field set to text reads blank.
            Generator::String { value } if field_type == b's' => {
                return (Value::Str(value.clone()), 0)
            }
            Generator::String { .. } => return (Sentinel::Blank.value(field_type), 0),
            Generator::Sentinel { which } => {
                let s = Sentinel::parse(which).unwrap_or(Sentinel::Blank);
                return (s.value(field_type), 0);
            }
            Generator::Error { status } => return (Sentinel::Blank.value(field_type), *status),
        };
        (number(field_type, x), 0)
    }
}

/// A number as the payload of a field of `field_type`.
pub fn number(field_type: u8, x: f64) -> Value {
    match field_type {
        b'd' => Value::Double(x),
        b's' => Value::Str(format!("{x}")),
        b'b' => Value::Blob(vec![0]),
        _ => Value::Int64(x.round() as i64),
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

/// Roughly standard normal from a key (Irwin-Hall of four 16-bit uniforms: cheap, bounded).
fn normal(key: u64) -> f64 {
    let h = mix(key);
    let sum: f64 = (0..4)
        .map(|i| ((h >> (16 * i)) & 0xffff) as f64 / 65535.0)
        .sum();
    (sum - 2.0) * 3f64.sqrt()
}

/// The sum of the first `n` unit-variance steps of a random walk, without summing them: a
/// Brownian bridge built top-down over 2^32 steps, so O(32) for any n and a pure function
/// of (key, n).
fn walk_sum(key: u64, n: u64) -> f64 {
    const LEVELS: u32 = 32;
    let n = n.min(1 << LEVELS);
    let (mut lo, mut hi) = (0u64, 1u64 << LEVELS);
    let (mut s_lo, mut s_hi) = (0.0, ((1u64 << LEVELS) as f64).sqrt() * normal(key));
    while hi - lo > 1 {
        if n == lo {
            return s_lo;
        }
        if n == hi {
            return s_hi;
        }
        let half = (hi - lo) / 2;
        let mid = lo + half;
        // The midpoint of a bridge over 2*half steps deviates with variance half/2.
        let s_mid = (s_lo + s_hi) / 2.0
            + (half as f64 / 2.0).sqrt() * normal(key ^ mid.wrapping_mul(0x2545_f491_4f6c_dd1d));
        if n < mid {
            hi = mid;
            s_hi = s_mid;
        } else {
            lo = mid;
            s_lo = s_mid;
        }
    }
    if n == lo {
        s_lo
    } else {
        s_hi
    }
}

/// Folds x into [min, max] as if it bounced off the ends.
fn reflect(x: f64, min: f64, max: f64) -> f64 {
    let range = max - min;
    let m = (x - min).rem_euclid(2.0 * range);
    min + if m > range { 2.0 * range - m } else { m }
}

/// Per-GPU numbers the defaults scale with.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub power_limit_w: f64,
    pub memory_mib: f64,
    pub sm_clock_mhz: f64,
    pub mem_clock_mhz: f64,
}

fn walk(min: f64, max: f64) -> Generator {
    Generator::RandomWalk {
        start: (min + max) / 2.0,
        step: (max - min) / 25.0,
        min,
        max,
        seed: None,
        interval_s: 1.0,
    }
}

fn sine(mid: f64, amplitude: f64, period_s: f64) -> Generator {
    Generator::Sine {
        mid,
        amplitude,
        period_s,
    }
}

fn constant(value: f64) -> Generator {
    Generator::Constant { value }
}

fn counter(per_s: f64) -> Generator {
    Generator::Counter {
        per_s,
        start: None,
        jitter: 0.3,
        seed: None,
    }
}

fn zero_counter() -> Generator {
    // Healthy hardware: error counters exist and stay at zero.
    constant(0.0)
}

/// Whether a field id is one of the per-link NVLink error counters (always 0 when healthy).
fn nvlink_error_counter(id: u16) -> bool {
    matches!(id, 400..=439 | 451..=474 | 481..=493 | 1525..=1528)
}

/// The default generator of a field, chosen to look like a busy node: utilisation 40-95 %,
/// temperatures 35-80 C, power 30-100 % of the limit, clocks near their maximum, error
/// counters at zero, traffic counters that only grow.
pub fn default_for(id: u16, name: &str, field_type: u8, s: &Scale) -> Generator {
    let pl = s.power_limit_w;
    match id {
        100 => sine(s.sm_clock_mhz - 60.0, 50.0, 90.0),
        101 => constant(s.mem_clock_mhz),
        102 => sine(1650.0, 50.0, 80.0),
        110 | 113 => constant(s.sm_clock_mhz),
        111 | 114 => constant(s.mem_clock_mhz),
        115 => constant(1950.0),
        140 => sine(50.0, 10.0, 150.0),
        150 => sine(57.0, 18.0, 120.0),
        151 => constant(95.0),
        152 => constant(87.0),
        153 => sine(30.0, 15.0, 120.0),
        155 | 157 => sine(0.62 * pl, 0.32 * pl, 60.0),
        // mJ since the driver loaded: the average board power, counted.
        156 => counter(0.62 * pl * 1000.0),
        158 => constant(87.0),
        159 => constant(92.0),
        160 | 163 | 164 => constant(pl),
        161 => constant((pl * 0.3).round()),
        162 => constant(pl),
        190 => constant(0.0),
        191 => walk(30.0, 80.0),
        200 | 201 => walk(2.0e5, 2.0e7),
        202 => counter(0.02),
        203 => walk(40.0, 95.0),
        204 => walk(20.0, 70.0),
        206 | 207 => walk(0.0, 15.0),
        240..=247 => counter(2.0e6),
        252 => sine(s.memory_mib * 0.6, s.memory_mib * 0.25, 300.0),
        253 => constant(512.0),
        300 => constant(1.0),
        301 => constant(0.0),
        310..=349 | 385..=396 => zero_counter(),
        id if nvlink_error_counter(id) => zero_counter(),
        // NVLink throughput (MiB/s): per link and totals.
        440..=448 | 475..=480 | 494..=496 | 825..=842 | 879..=896 | 1529..=1531 => {
            walk(2_000.0, 20_000.0)
        }
        449 | 843 | 897 => walk(40_000.0, 300_000.0),
        500 => constant(0.0),
        // DCP ratios.
        1001 => walk(0.55, 0.98),
        1002 => walk(0.45, 0.9),
        1003 => walk(0.2, 0.6),
        1004 => walk(0.1, 0.6),
        1005 => walk(0.2, 0.7),
        1006..=1008 | 1013..=1016 => walk(0.05, 0.5),
        1017..=1034 => walk(0.0, 0.1),
        // bytes/s.
        1009 | 1010 => walk(5.0e8, 2.0e10),
        1011 | 1012 => walk(5.0e9, 2.0e11),
        1040..=1075 | 1532 | 1533 => walk(2.0e8, 1.0e10),
        1076..=1083 => walk(1.0e8, 5.0e10),
        1084..=1090 | 1093..=1096 => counter(1.0e9),
        1091 | 1092 => counter(6.0e9),
        1501 => zero_counter(),
        // DCGM_FI_DEV_GPU_RECOVERY_ACTION: NVML's GPU_RECOVERY_ACTION_NONE on a healthy GPU
        // (`set G 1523 N` asks for another).
        1523 => constant(0.0),
        // NvSwitch.
        701 => sine(850.0, 10.0, 50.0),
        702..=704 => walk(100.0, 400.0),
        705..=707 => sine(45.0, 10.0, 70.0),
        780 | 781 => walk(1.0e8, 2.0e10),
        782..=788 | 809..=824 | 856 | 857 | 864 => zero_counter(),
        789..=804 => walk(200.0, 2_000.0),
        805..=808 => counter(1.0e5),
        858 => sine(45.0, 8.0, 140.0),
        859 => constant(105.0),
        860 => constant(115.0),
        861 | 862 => walk(1.0e10, 4.0e11),
        // CPUs (Grace).
        1100 => walk(40.0, 90.0),
        1101 => walk(30.0, 70.0),
        1102 => walk(0.0, 2.0),
        1103 => walk(3.0, 15.0),
        1104 => walk(0.0, 2.0),
        1110 => sine(62.0, 12.0, 100.0),
        1111 => constant(95.0),
        1112 => constant(105.0),
        1120 => sine(3_200_000.0, 200_000.0, 45.0),
        1130 => sine(250.0, 80.0, 70.0),
        1131 => constant(500.0),
        1132 | 1133 => walk(20.0, 80.0),
        _ => by_name(name, field_type, s),
    }
}

/// A plausible default from the field's name and type, for fields without a table entry.
fn by_name(name: &str, field_type: u8, s: &Scale) -> Generator {
    let has = |w: &str| name.contains(w);
    match field_type {
        b's' => Generator::String {
            value: "sim".into(),
        },
        // Binary fields are structures only the real driver fills in.
        b'b' => Generator::Sentinel {
            which: "not_supported".into(),
        },
        _ if has("ERROR") || has("ECC_") || has("RETIRED") || has("REMAP") || has("FAIL") => {
            zero_counter()
        }
        _ if has("TEMP") => sine(55.0, 15.0, 120.0),
        _ if has("VIOLATION") || has("_NS") || has("CYCLES") => counter(1.0e6),
        _ if has("CLOCK") => sine(s.sm_clock_mhz - 60.0, 50.0, 90.0),
        _ if has("POWER") => sine(0.62 * s.power_limit_w, 0.3 * s.power_limit_w, 60.0),
        _ if has("BYTES") || has("THROUGHPUT") || has("PACKET") => {
            if has("TOTAL") {
                counter(1.0e9)
            } else {
                walk(1.0e6, 1.0e9)
            }
        }
        _ if has("TOTAL") => counter(1.0),
        b'd' if has("RATIO") => walk(0.1, 0.9),
        _ if has("UTIL") => walk(40.0, 95.0),
        b'd' => walk(0.0, 100.0),
        _ => walk(0.0, 1000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jittery(per_s: f64, jitter: f64, seed: Option<u64>) -> Generator {
        Generator::Counter {
            per_s,
            start: None,
            jitter,
            seed,
        }
    }

    fn f(v: (Value, i32)) -> f64 {
        match v.0 {
            Value::Double(x) => x,
            Value::Int64(x) => x as f64,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn text_set_on_a_numeric_field_reads_blank_not_its_bytes() {
        let g = Generator::String {
            value: "hello".into(),
        };
        assert_eq!(g.eval(b's', 0.0, 1).0, Value::Str("hello".into()));
        assert_eq!(g.eval(b'i', 0.0, 1).0, Sentinel::Blank.value(b'i'));
        assert_eq!(g.eval(b'd', 0.0, 1).0, Sentinel::Blank.value(b'd'));
    }

    #[test]
    fn random_walks_are_pure_bounded_and_move_in_small_steps() {
        let g = Generator::RandomWalk {
            start: 50.0,
            step: 2.0,
            min: 0.0,
            max: 100.0,
            seed: Some(3),
            interval_s: 1.0,
        };
        let vals: Vec<f64> = (0..2000).map(|i| f(g.eval(b'd', i as f64, 77))).collect();
        assert_eq!(vals[0], 50.0, "the walk starts at start");
        assert!(vals.iter().all(|v| (0.0..=100.0).contains(v)));
        // Same inputs, same value: reading in any order gives the same series.
        assert_eq!(f(g.eval(b'd', 1234.0, 77)), vals[1234]);
        let max_jump = vals
            .windows(2)
            .map(|w| (w[1] - w[0]).abs())
            .fold(0.0, f64::max);
        assert!(max_jump < 2.0 * 8.0, "steps are about `step`: {max_jump}");
        let distinct = vals
            .iter()
            .map(|v| (v * 1000.0) as i64)
            .collect::<std::collections::HashSet<_>>();
        assert!(distinct.len() > 1000, "it moves");
        // Another key walks elsewhere.
        assert_ne!(f(g.eval(b'd', 500.0, 78)), vals[500]);
    }

    #[test]
    fn counters_never_decrease_even_with_jitter() {
        let g = jittery(10.0, 1.0, Some(9));
        let vals: Vec<f64> = (0..5000)
            .map(|i| f(g.eval(b'd', i as f64 * 0.1, 5)))
            .collect();
        assert!(vals.windows(2).all(|w| w[1] >= w[0] - 1e-9));
        assert!(vals[4999] > vals[0] + 4000.0);
    }

    #[test]
    fn ramps_clamp_or_wrap_and_sentinels_fill_the_payload() {
        let ramp = |wrap| Generator::Ramp {
            start: 0.0,
            per_s: 10.0,
            max: 100.0,
            wrap,
        };
        assert_eq!(f(ramp(false).eval(b'i', 50.0, 0)), 100.0);
        assert_eq!(f(ramp(true).eval(b'i', 12.0, 0)), 20.0);
        let s = Generator::Sentinel {
            which: "not_supported".into(),
        };
        assert_eq!(
            s.eval(b'i', 0.0, 0),
            (Value::Int64(9_223_372_036_854_775_794), 0)
        );
        assert_eq!(
            s.eval(b's', 0.0, 0),
            (Value::Str("<<<NOT_SUPPORTED>>>".into()), 0)
        );
        let e = Generator::Error { status: -6 };
        assert_eq!(e.eval(b'd', 0.0, 0), (Value::Double(FP64_BLANK), -6));
        assert!(Generator::Error { status: 1 }.validate().is_err());
        assert!(jittery(1.0, 1.5, None).validate().is_err());
    }

    #[test]
    fn every_field_has_a_valid_default() {
        let s = Scale {
            power_limit_w: 700.0,
            memory_mib: 81559.0,
            sm_clock_mhz: 1980.0,
            mem_clock_mhz: 2619.0,
        };
        for m in dcgm_sys::fields::FIELDS {
            let g = default_for(m.id, m.name, m.field_type, &s);
            assert_eq!(g.validate(), Ok(()), "field {}", m.id);
        }
        // A healthy GPU asks for no recovery action (the by-name default would walk).
        assert_eq!(
            default_for(1523, "DCGM_FI_DEV_GPU_RECOVERY_ACTION", b'i', &s),
            constant(0.0)
        );
    }
}
