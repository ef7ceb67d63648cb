//! Turns the committed DCGM field table (fields/*.csv, generated from NVIDIA's
//! dcgm_fields.h by fields/gen_fields.py) into Rust statics.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    if let Err(e) = generate_field_table() {
        eprintln!("dcgm-sys build: {e}");
        std::process::exit(1);
    }
}

fn rows(path: &Path, columns: usize) -> Result<Vec<Vec<String>>, String> {
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        if line.is_empty() {
            continue;
        }
        let cols: Vec<String> = line.split(',').map(str::to_string).collect();
        if cols.len() != columns {
            return Err(format!(
                "{}:{}: expected {columns} columns, found {}",
                path.display(),
                n + 1,
                cols.len()
            ));
        }
        out.push(cols);
    }
    Ok(out)
}

fn generate_field_table() -> Result<(), String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fields");
    let fields = rows(&dir.join("fields-4.6.0.csv"), 11)?;
    let aliases = rows(&dir.join("aliases-4.6.0.csv"), 2)?;
    let mut s = String::from("pub static FIELDS: &[FieldMeta] = &[\n");
    let mut last_id = 0u32;
    for f in &fields {
        let id: u32 = f[0].parse().map_err(|_| format!("bad id {}", f[0]))?;
        if id <= last_id {
            return Err(format!("fields-4.6.0.csv is not sorted by id at {id}"));
        }
        last_id = id;
        let ty = f[2].bytes().next().ok_or("empty type")?;
        writeln!(
            s,
            "    FieldMeta {{ id: {id}, name: {:?}, field_type: b'{}', size: {}, tag: {:?}, scope: {}, nvml_field_id: {}, entity_level: {}, short_name: {:?}, unit: {:?}, width: {} }},",
            f[1], ty as char, f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10]
        )
        .map_err(|e| e.to_string())?;
    }
    s.push_str("];\n\npub static ALIASES: &[(&str, &str)] = &[\n");
    for a in &aliases {
        writeln!(s, "    ({:?}, {:?}),", a[0], a[1]).map_err(|e| e.to_string())?;
    }
    s.push_str("];\n");
    let out =
        Path::new(&std::env::var("OUT_DIR").map_err(|e| e.to_string())?).join("fields_table.rs");
    std::fs::write(&out, s).map_err(|e| format!("{}: {e}", out.display()))
}
