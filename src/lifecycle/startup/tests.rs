use super::settings::{millis, Error as SettingsError};
use super::{dcgm_log_env, set_dcgm_log_env, spawn_watched, thread_panic, Error};
use crate::config::cli;

fn config(args: &[&str]) -> cli::Config {
    cli::parse_from(std::iter::once("dcgm-exporter").chain(args.iter().copied())).unwrap()
}

#[test]
fn dcgm_log_settings_are_for_the_embedded_engine_only() {
    let c = config(&["--enable-dcgm-log", "--dcgm-log-level", "DEBUG"]);
    assert_eq!(
        dcgm_log_env(&c),
        [
            ("__DCGM_DBG_FILE", "-".to_string()),
            ("__DCGM_DBG_LVL", "DEBUG".to_string())
        ]
    );
    assert!(dcgm_log_env(&config(&["--enable-dcgm-log", "-r", "h:5555"])).is_empty());
    assert!(dcgm_log_env(&config(&[])).is_empty());
    // Nothing to set: fine whatever the threads.
    assert!(matches!(set_dcgm_log_env(&config(&[])), Ok(())));
}

#[test]
fn dcgm_log_settings_are_refused_once_another_thread_runs() {
    // A test runs beside the harness's main thread: the state main must never be in
    // when it sets DCGM's environment.
    let c = config(&["--enable-dcgm-log", "--dcgm-log-level", "WARN"]);
    let e = set_dcgm_log_env(&c).unwrap_err();
    assert!(
        matches!(e, Error::LogEnvTooLate { threads } if threads > 1),
        "{e}"
    );
    assert_ne!(std::env::var("__DCGM_DBG_LVL").as_deref(), Ok("WARN"));
}

#[test]
fn a_panicking_collection_thread_is_noticed_and_reported() {
    let (handle, ended) = spawn_watched("t", || panic!("frozen")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(std::time::Duration::from_secs(5), ended)
            .await
            .expect("the end of the thread is signalled")
            .expect_err("by dropping the sender");
    });
    let e = handle.join().map_err(thread_panic).unwrap_err();
    assert!(matches!(&e, Error::CollectionPanicked(what) if what == "frozen"));
    assert_eq!(e.to_string(), "the collection thread panicked: frozen");
}

#[test]
fn duration_flags_must_fit_dcgm_microseconds() {
    assert_eq!(millis("-c", 30000, false).ok(), Some(30000));
    assert_eq!(millis("-x", 0, true).ok(), Some(0));
    assert_eq!(
        millis("-c", i64::MAX / 1000, false).ok(),
        Some((i64::MAX / 1000) as u64)
    );
    let e = millis("-c", i64::MAX / 1000 + 1, false).unwrap_err();
    assert!(
        matches!(&e, SettingsError::TooLarge { flag, ms: 9223372036854776 } if flag == "-c"),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "-c 9223372036854776: too large (at most 9223372036854775 milliseconds)"
    );
    let e = millis("--clock-events-count-window-size", i64::MAX, true).unwrap_err();
    assert!(
        matches!(&e, SettingsError::TooLarge { flag, .. } if flag == "--clock-events-count-window-size"),
        "{e}"
    );
    assert!(matches!(
        millis("-x", -1, true),
        Err(SettingsError::Negative { ms: -1, .. })
    ));
    assert!(matches!(
        millis("-c", -5, false),
        Err(SettingsError::NotPositive { ms: -5, .. })
    ));
    assert!(matches!(
        millis("-c", 0, false),
        Err(SettingsError::NotPositive { ms: 0, .. })
    ));
}
