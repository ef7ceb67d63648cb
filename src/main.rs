//! The `dcgm-exporter` binary: parse flags, set up logging, run. See ARCHITECTURE.md.

use dcgm_exporter::config::cli;
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
    init_logging(&config);
    match startup::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("dcgm-exporter: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(config: &cli::Config) {
    let level = if config.debug { "debug" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if config.log_format == "json" {
        builder.json().init();
    } else {
        builder.init();
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
