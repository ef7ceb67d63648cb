//! `-r vsock://CID:PORT` (upstream 4.8.3): parsed, and where the kernel cannot reach the CID
//! (no AF_VSOCK, no transport) the start stops with one line saying so instead of retrying
//! a connection that cannot happen.

use crate::support::*;
use std::time::Duration;

#[test]
fn a_malformed_vsock_address_is_refused_at_start() {
    for bad in ["vsock://3", "vsock://cid:5555", "vsock://3:port"] {
        let (code, err) = exporter().args(&["-r", bad]).run_to_exit();
        assert_eq!(code, 1, "{bad}");
        assert!(
            err.contains("-r/--remote-hostengine-info") && err.contains("vsock://CID:PORT"),
            "{bad}: {err}"
        );
        assert!(!err.contains("panicked"));
    }
}

#[test]
fn a_vsock_engine_this_kernel_cannot_reach_stops_the_start_with_the_reason() {
    // What this machine's kernel says about CID 3 decides which failure is right.
    let probe = dcgm_sys::vsock::probe(3, 5555, Duration::from_secs(2));
    let (code, err) = exporter()
        .args(&["-r", "vsock://3:5555", "--exit-if-hostengine-unreachable"])
        .run_to_exit();
    assert_eq!(code, 1, "{err}");
    match probe {
        dcgm_sys::vsock::Probe::Unsupported(why) => {
            assert!(
                err.contains("-r/--remote-hostengine-info vsock://3:5555") && err.contains(&why),
                "{err}"
            );
        }
        // A kernel with a vsock transport for CID 3 (a hypervisor): the engine is not there;
        // the simulated libdcgm does not do vsock, so dcgmConnect_v3 refuses.
        _ => assert!(
            err.contains("cannot use the DCGM host engine at vsock://3:5555"),
            "{err}"
        ),
    }
}
