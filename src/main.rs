//! The `dcgm-exporter` binary: parse flags, set up logging, run. See ARCHITECTURE.md.

use dcgm_exporter::config::cli;
use dcgm_exporter::logging;
use dcgm_exporter::startup;
use std::process::ExitCode;

fn main() -> ExitCode {
    let config = match cli::parse_from(std::env::args_os()) {
        Ok(c) => c,
        Err(e) => {
            // --help and --version also arrive here, with exit code 0.
            let code = e.exit_code();
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    if config.list_fields {
        print_fields();
        return ExitCode::SUCCESS;
    }
    let format = logging::Format::from_flag(&config.log_format);
    logging::init(format, config.debug);
    match startup::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            logging::fatal(format, &msg);
            ExitCode::FAILURE
        }
    }
}

fn print_fields() {
    println!(
        "{:<58} {:>5} {:<4} {:<9} {:<6} TAG",
        "NAME", "ID", "TYPE", "LEVEL", "UNIT"
    );
    for f in dcgm_sys::fields::FIELDS {
        println!(
            "{:<58} {:>5} {:<4} {:<9} {:<6} {}",
            f.name,
            f.id,
            f.field_type as char,
            dcgm_sys::fields::entity_group_name(f.entity_level),
            f.unit.trim(),
            f.tag
        );
    }
}
