//! The `dcgm-exporter` binary: parse flags, set up logging, run. See ARCHITECTURE.md.

#![forbid(unsafe_code)]

use dcgm_exporter::config::cli;
use dcgm_exporter::lifecycle::startup;
use dcgm_exporter::logging;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `dcgm-exporter events ...` asks a running exporter; the exporter's own flags take no
    // positional argument, so this word never reached them.
    if std::env::args_os().nth(1).is_some_and(|a| a == "events") {
        let args = std::env::args_os().skip(1);
        return ExitCode::from(dcgm_exporter::lifecycle::events_cmd::main(args));
    }
    let config = match cli::parse_from(std::env::args_os()) {
        Ok(c) => c,
        Err(e) => {
            // --help and --version also arrive here, with exit code 0.
            let code = e.exit_code();
            if let Some(msg) = cli::value_error(&e) {
                // The same shape and exit code as a value refused after parsing (`-c 0`).
                logging::fatal(requested_format(), &msg);
                return ExitCode::FAILURE;
            }
            if code != 0 && requested_format() == logging::Format::Json {
                // A bad flag is a fatal start-up error too: one JSON line, clap's first.
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or_default();
                logging::fatal(
                    logging::Format::Json,
                    first.strip_prefix("error: ").unwrap_or(first),
                );
            } else {
                let _ = e.print();
            }
            return ExitCode::from(code as u8);
        }
    };
    if config.list_fields {
        return match print_fields(&mut std::io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            // `--list-fields | head`: the reader has all it wanted.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => {
                logging::fatal(
                    logging::Format::from_flag(&config.log_format),
                    &format!("--list-fields: cannot write to standard output: {e}"),
                );
                ExitCode::FAILURE
            }
        };
    }
    let format = logging::Format::from_flag(&config.log_format);
    // Still a single thread here (flag parsing spawns none): the only safe moment to
    // change the environment, which DCGM reads its log settings from. The function checks.
    if let Err(e) = startup::set_dcgm_log_env(&config) {
        return ExitCode::from(fatal(format, &e));
    }
    logging::init(format, config.debug);
    let outcome = startup::run(config);
    let code = match &outcome.result {
        Ok(()) => 0,
        Err(e) => fatal(format, e),
    };
    if outcome.dcgm == dcgm_sys::Shutdown::TimedOut {
        // A DCGM thread is still in a call: libdcgm's destructors must not run under it.
        dcgm_sys::exit_now(code);
    }
    ExitCode::from(code)
}

/// The one place a run's error becomes what the operator sees: the fatal log line and the
/// exit code.
fn fatal(format: logging::Format, e: &startup::Error) -> u8 {
    logging::fatal(format, &e.to_string());
    e.exit_code()
}

/// The log format asked for when the flags did not parse: the last `--log-format` on the
/// command line, else DCGM_EXPORTER_LOG_FORMAT.
fn requested_format() -> logging::Format {
    let args = cli::normalize_args(std::env::args_os());
    let from_args = args
        .iter()
        .rev()
        .filter_map(|a| a.to_str())
        .find_map(|a| a.strip_prefix("--log-format="));
    match from_args {
        Some(f) => logging::Format::from_flag(f),
        None => logging::Format::from_flag(
            &std::env::var("DCGM_EXPORTER_LOG_FORMAT").unwrap_or_default(),
        ),
    }
}

/// Written with `write!`, not `println!`: Rust ignores SIGPIPE, so a closed pipe is an
/// error to handle rather than a panic.
fn print_fields(out: &mut impl std::io::Write) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(out);
    writeln!(
        out,
        "{:<58} {:>5} {:<4} {:<9} {:<6} TAG",
        "NAME", "ID", "TYPE", "LEVEL", "UNIT"
    )?;
    for f in dcgm_sys::fields::FIELDS {
        writeln!(
            out,
            "{:<58} {:>5} {:<4} {:<9} {:<6} {}",
            f.name,
            f.id,
            f.field_type as char,
            dcgm_sys::fields::entity_group_name(f.entity_level),
            f.unit.trim(),
            f.tag
        )?;
    }
    // The 4.9.0 names DCGM 4.6.0 lacks: read from their field where the loaded library has
    // it, else converted from the legacy field (docs/metrics.md).
    for b in dcgm_exporter::model::naming::base_units::BASE_UNITS {
        let m = b.base_meta();
        writeln!(
            out,
            "{:<58} {:>5} {:<4} {:<9} {:<6} {} (DCGM {}; else field {} in {} {})",
            b.name,
            b.id,
            m.field_type as char,
            dcgm_sys::fields::entity_group_name(m.entity_level),
            b.conv.to,
            m.tag,
            b.since,
            b.legacy_id,
            b.conv.from,
            b.conv.op.describe()
        )?;
    }
    // dcgm-exporter 4.10.0's names of four DCGM 4.6 fields: the same field, unit and values.
    for r in dcgm_exporter::model::naming::base_units::RENAMED_4_10 {
        let m = r.meta();
        writeln!(
            out,
            "{:<58} {:>5} {:<4} {:<9} {:<6} {} (dcgm-exporter 4.10.0's name of {})",
            r.name,
            r.id,
            m.field_type as char,
            dcgm_sys::fields::entity_group_name(m.entity_level),
            m.unit.trim(),
            m.tag,
            r.legacy_name
        )?;
    }
    out.flush()
}
