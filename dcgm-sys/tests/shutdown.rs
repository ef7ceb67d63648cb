//! `Library::shutdown` against the simulated libdcgm.so.4, in a test binary of its own:
//! dcgmShutdown is process-wide and would end the sessions of tests running beside it.

mod support;

use dcgm_sys::*;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn shutdown_lets_sessions_end_then_ends_dcgm_and_refuses_later_calls() {
    std::env::remove_var("DCGM_SIM_PROFILE");
    let lib = Arc::new(
        Library::load(Some(&support::build_simulator(&[]).join("libdcgm.so.4")))
            .expect("load the sim"),
    );
    // Nothing started yet: nothing to shut down, and nothing is refused afterwards.
    assert_eq!(lib.live_sessions(), 0);

    let s = Session::embedded(lib.clone()).expect("start the embedded engine");
    assert_eq!(lib.live_sessions(), 1);
    // A connect that fails is not a live session.
    let closed = support::free_port();
    let target = ConnectTarget::parse(&format!("127.0.0.1:{closed}")).unwrap();
    assert!(Session::connect(lib.clone(), &target, 200).is_err());
    assert_eq!(lib.live_sessions(), 1);
    assert!(!s.gpus(false).unwrap().is_empty());

    // The session ends on another thread while shutdown waits for it.
    let ending = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(s);
    });
    assert_eq!(
        lib.shutdown(Duration::from_secs(20), Duration::from_secs(30)),
        Shutdown::Done
    );
    assert_eq!(lib.live_sessions(), 0, "shutdown waited for the session");
    ending.join().unwrap();
    assert!(lib.is_shut_down());
    assert!(matches!(
        Session::embedded(lib.clone()),
        Err(Error::ShutDown)
    ));
    // Twice is harmless.
    assert_eq!(
        lib.shutdown(Duration::ZERO, Duration::from_secs(1)),
        Shutdown::Done
    );

    // A session still open when the grace ends: dcgmShutdown closes it, and the session
    // refuses calls from then on. (Same test: DCGM's state is process-wide.)
    let lib = Arc::new(
        Library::load(Some(&support::build_simulator(&[]).join("libdcgm.so.4")))
            .expect("load the sim"),
    );
    let s = Session::embedded(lib.clone()).expect("DCGM starts again after dcgmShutdown");
    assert_eq!(
        lib.shutdown(Duration::ZERO, Duration::from_secs(30)),
        Shutdown::Done
    );
    assert!(matches!(s.gpus(false), Err(Error::ShutDown)));
    drop(s);
    assert_eq!(lib.live_sessions(), 0);
}
