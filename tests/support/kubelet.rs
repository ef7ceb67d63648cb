//! A fake kubelet for the tests: the PodResources v1 gRPC service (a tonic server generated
//! from the same proto as the exporter's client) on a unix socket, answering `List` with
//! whatever the test sets.

use dcgm_exporter::attribution::kubelet::proto::{
    self, pod_resources_lister_server::PodResourcesLister,
    pod_resources_lister_server::PodResourcesListerServer,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct State {
    pods: Mutex<Vec<proto::PodResources>>,
    calls: AtomicU64,
}

struct Service(Arc<State>);

#[tonic::async_trait]
impl PodResourcesLister for Service {
    async fn list(
        &self,
        _: tonic::Request<proto::ListPodResourcesRequest>,
    ) -> Result<tonic::Response<proto::ListPodResourcesResponse>, tonic::Status> {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        let pods = self.0.pods.lock().unwrap().clone();
        Ok(tonic::Response::new(proto::ListPodResourcesResponse {
            pod_resources: pods,
        }))
    }
}

/// A running fake kubelet; stops (and removes its socket) on drop.
pub struct FakeKubelet {
    state: Arc<State>,
    socket: PathBuf,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// One pod with one container holding `devices` (resource name, device ids).
pub fn pod(
    ns: &str,
    name: &str,
    container: &str,
    devices: &[(&str, &[&str])],
) -> proto::PodResources {
    proto::PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers: vec![proto::ContainerResources {
            name: container.into(),
            devices: devices
                .iter()
                .map(|(r, ids)| proto::ContainerDevices {
                    resource_name: r.to_string(),
                    device_ids: ids.iter().map(|s| s.to_string()).collect(),
                })
                .collect(),
            dynamic_resources: Vec::new(),
        }],
    }
}

/// A training pod on the whole GPU `whole` (`ml/trainer-0`) and a serving pod on GPU 3's
/// instance `gi` (`inference/llm-0`, a `mig-4g.40gb`).
pub fn trainer_and_mig_server(whole: &str, gi: &str) -> Vec<proto::PodResources> {
    let instance = format!("nvidia3/gi{gi}");
    vec![
        pod("ml", "trainer-0", "main", &[("nvidia.com/gpu", &[whole])]),
        pod(
            "inference",
            "llm-0",
            "server",
            &[("nvidia.com/mig-4g.40gb", &[&instance])],
        ),
    ]
}

/// A DRA claim's devices on NVIDIA's GPU driver: (pool, device name) each.
pub fn claim(name: &str, namespace: &str, devices: &[(&str, &str)]) -> proto::DynamicResource {
    proto::DynamicResource {
        claim_name: name.into(),
        claim_namespace: namespace.into(),
        claim_resources: devices
            .iter()
            .map(|(pool, device)| proto::ClaimResource {
                driver_name: "gpu.nvidia.com".into(),
                pool_name: pool.to_string(),
                device_name: device.to_string(),
            })
            .collect(),
    }
}

/// One pod with one container holding DRA `claims` (and no device-plugin devices).
pub fn dra_pod(
    ns: &str,
    name: &str,
    container: &str,
    claims: Vec<proto::DynamicResource>,
) -> proto::PodResources {
    let mut p = pod(ns, name, container, &[]);
    p.containers[0].dynamic_resources = claims;
    p
}

impl FakeKubelet {
    pub fn start() -> FakeKubelet {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("kubelet.sock");
        Self::serve(dir, socket)
    }

    /// Serves on `socket` (e.g. a path the exporter was already told about).
    pub fn start_at(socket: &Path) -> FakeKubelet {
        Self::serve(tempfile::tempdir().expect("tempdir"), socket.to_path_buf())
    }

    fn serve(dir: tempfile::TempDir, socket: PathBuf) -> FakeKubelet {
        let state = Arc::new(State::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let svc = Service(state.clone());
        let path = socket.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::UnixListener::bind(&path).expect("bind kubelet socket");
                ready_tx.send(()).expect("signal ready");
                tonic::transport::Server::builder()
                    .add_service(
                        PodResourcesListerServer::new(svc).max_encoding_message_size(usize::MAX),
                    )
                    .serve_with_incoming_shutdown(
                        tokio_stream::wrappers::UnixListenerStream::new(listener),
                        async {
                            let _ = rx.await;
                        },
                    )
                    .await
                    .expect("fake kubelet serves");
            });
        });
        ready_rx.recv().expect("fake kubelet started");
        FakeKubelet {
            state,
            socket,
            _dir: dir,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn set_pods(&self, pods: Vec<proto::PodResources>) {
        *self.state.pods.lock().unwrap() = pods;
    }

    pub fn calls(&self) -> u64 {
        self.state.calls.load(Ordering::SeqCst)
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
