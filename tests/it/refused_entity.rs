//! One entity DCGM refuses in a group costs only itself (issue 28): the exporter's
//! `watch_all` against the simulated library in this process, with a GPU unbound after the
//! node was discovered (DCGM 4.6 lists it as Detached and refuses it in a group with
//! BADPARAM). Alone in a child process: the simulator reads its profile and control file
//! from the environment, set here before the library starts.

use crate::support::*;
use dcgm_sys::{Entity, Library, Reading, Session};
use std::sync::Arc;

#[test]
fn a_gpu_refused_in_a_group_leaves_only_itself_out_of_the_watch() {
    crate::support::alone!(a_gpu_refused_in_a_group_leaves_only_itself_out_of_the_watch);
    let (_dir, ctl) = temp_file("ctl", "");
    std::env::set_var("DCGM_SIM_PROFILE", repo("etc/sim/h100-8gpu-nvswitch.toml"));
    std::env::set_var("DCGM_SIM_CONTROL", &ctl);
    let lib = Arc::new(Library::load(Some(&sim_library())).expect("load the simulator"));
    let session = Session::embedded(lib.clone()).expect("start the embedded engine");
    let gpus: Vec<Entity> = session
        .gpus(false)
        .unwrap()
        .into_iter()
        .map(Entity::gpu)
        .collect();
    assert_eq!(gpus.len(), 8);
    control(&ctl, "gpu_unbind 3");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while session.gpu_is_unusable(3).unwrap() != Some("detached") {
        assert!(std::time::Instant::now() < deadline, "GPU 3 never detached");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A group of all eight, as a build that discovered the node a moment before makes.
    assert!(session.create_group("all", &gpus).is_err());
    let w = dcgm_exporter::collect::watch::watch_all(&session, "t", &gpus, &[150], 1000, 0.0, 4)
        .expect("the other GPUs are watched");
    let refused: Vec<Entity> = w.refused_entities.iter().map(|r| r.0).collect();
    assert_eq!(refused, [Entity::gpu(3)]);
    assert!(w.refused.is_empty());
    assert_eq!(w.watches.len(), 1);
    session.update_all_fields(true).unwrap();
    let others: Vec<Entity> = gpus.iter().copied().filter(|e| e.id != 3).collect();
    let values = session.latest_values(&others, &[150], false).unwrap();
    assert_eq!(
        values
            .iter()
            .filter(|r| matches!(r.reading, Reading::Value(_)))
            .count(),
        7,
        "{values:?}"
    );
    drop(w);
    drop(session);
    let _ = lib.shutdown(
        std::time::Duration::from_secs(2),
        std::time::Duration::from_secs(10),
    );
}
