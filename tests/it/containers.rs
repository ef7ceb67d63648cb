//! `--container-labels` against a fake Docker Engine API on a unix socket: a hyper server
//! answering `GET /containers/json` and `GET /containers/{id}/json` with the JSON shapes
//! Docker 24 sends, for containers started the ways users start GPU containers. Also a
//! runtime that never answers and a socket that does not exist: the exporter keeps serving.

use crate::support::*;
use dcgm_sim_model::node::Node;
use dcgm_sim_model::profile::Profile;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A Docker-compatible API on a unix socket, serving a fixed set of running containers.
struct FakeRuntime {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    requests: Arc<AtomicUsize>,
    paths: Arc<std::sync::Mutex<Vec<String>>>,
    _rt: tokio::runtime::Runtime,
}

/// How long the fake waits before answering each request.
#[derive(Clone, Copy)]
enum Pace {
    Prompt,
    Hang,
}

impl FakeRuntime {
    fn start(containers: Vec<Value>, pace: Pace) -> FakeRuntime {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("docker.sock");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let listener = {
            let _g = rt.enter();
            tokio::net::UnixListener::bind(&socket).expect("bind the fake runtime's socket")
        };
        let requests = Arc::new(AtomicUsize::new(0));
        let paths = Arc::new(std::sync::Mutex::new(Vec::new()));
        let containers = Arc::new(containers);
        let count = requests.clone();
        let log = paths.clone();
        rt.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let containers = containers.clone();
                let count = count.clone();
                let log = log.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<_>| {
                        count.fetch_add(1, Ordering::SeqCst);
                        if let Ok(mut l) = log.lock() {
                            l.push(req.uri().path().to_string());
                        }
                        answer(req, containers.clone(), pace)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FakeRuntime {
            _dir: dir,
            socket,
            requests,
            paths,
            _rt: rt,
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// How many times each path was asked for.
    fn asked(&self, path: &str) -> usize {
        self.paths
            .lock()
            .map(|p| p.iter().filter(|x| *x == path).count())
            .unwrap_or(0)
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn docker_response(status: StatusCode, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    for (k, v) in [
        ("Content-Type", "application/json"),
        ("Api-Version", "1.43"),
        ("Docker-Experimental", "false"),
        ("Ostype", "linux"),
        ("Server", "Docker/24.0.7 (linux)"),
    ] {
        h.insert(k, v.parse().expect("header value"));
    }
    r
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    containers: Arc<Vec<Value>>,
    pace: Pace,
) -> Result<Response<Body>, Infallible> {
    if let Pace::Hang = pace {
        tokio::time::sleep(Duration::from_secs(120)).await;
    }
    // Clients may prefix an API version (/v1.43/containers/json).
    let path = req.uri().path();
    let path = match path.strip_prefix("/v1.") {
        Some(rest) => rest.find('/').map_or(path, |i| &rest[i..]),
        None => path,
    };
    if path == "/containers/json" {
        let list: Vec<Value> = containers.iter().map(summary).collect();
        // Docker streams bigger answers chunked: do so here, one chunk per container.
        let mut chunks = vec!["[".to_string()];
        for (i, c) in list.iter().enumerate() {
            chunks.push(format!("{}{c}", if i > 0 { "," } else { "" }));
        }
        chunks.push("]\n".into());
        let frames = chunks
            .into_iter()
            .map(|c| Ok::<_, Infallible>(Frame::data(Bytes::from(c))));
        let body = StreamBody::new(tokio_stream::iter(frames)).boxed();
        return Ok(docker_response(StatusCode::OK, body));
    }
    let id = path
        .strip_prefix("/containers/")
        .and_then(|p| p.strip_suffix("/json"));
    let found = id.and_then(|id| containers.iter().find(|c| c["Id"] == id));
    Ok(match found {
        Some(c) => docker_response(
            StatusCode::OK,
            Full::new(Bytes::from(c.to_string())).boxed(),
        ),
        None => docker_response(
            StatusCode::NOT_FOUND,
            Full::new(Bytes::from(
                json!({"message": format!("No such container: {}", id.unwrap_or(path))})
                    .to_string(),
            ))
            .boxed(),
        ),
    })
}

/// The `/containers/json` row of a container, as Docker 24 writes it.
fn summary(c: &Value) -> Value {
    json!({
        "Id": c["Id"],
        "Names": [c["Name"]],
        "Image": c["Config"]["Image"],
        "ImageID": c["Image"],
        "Command": "python3 train.py",
        "Created": 1_700_000_000,
        "Ports": [],
        "Labels": {},
        "State": "running",
        "Status": "Up 5 minutes",
        "HostConfig": {"NetworkMode": "default"},
        "NetworkSettings": {"Networks": {"bridge": {"IPAddress": "172.17.0.2"}}},
        "Mounts": []
    })
}

/// A `/containers/{id}/json` document, as Docker 24 writes it (the parts that vary here
/// plus the usual surroundings).
fn inspect(id: &str, name: &str, runtime: &str, env: &[&str], device_requests: Value) -> Value {
    json!({
        "Id": id,
        "Created": "2024-05-01T10:00:00.000000000Z",
        "Path": "python3",
        "Args": ["train.py"],
        "State": {"Status": "running", "Running": true, "Paused": false, "Restarting": false,
                  "OOMKilled": false, "Dead": false, "Pid": 4242, "ExitCode": 0, "Error": "",
                  "StartedAt": "2024-05-01T10:00:01.000000000Z", "FinishedAt": "0001-01-01T00:00:00Z"},
        "Image": "sha256:5f3b1c6c0b1f",
        "Name": name,
        "RestartCount": 0,
        "Driver": "overlay2",
        "Platform": "linux",
        "HostConfig": {
            "Binds": null,
            "NetworkMode": "default",
            "RestartPolicy": {"Name": "no", "MaximumRetryCount": 0},
            "Runtime": runtime,
            "Devices": [],
            "DeviceRequests": device_requests,
            "Privileged": false,
            "ShmSize": 67108864
        },
        "Config": {
            "Hostname": &id[..12],
            "Env": env,
            "Cmd": ["python3", "train.py"],
            "Image": "nvcr.io/nvidia/pytorch:24.04-py3",
            "Labels": {}
        }
    })
}

fn gpu_request(ids: Value, count: i64) -> Value {
    json!([{"Driver": "", "Count": count, "DeviceIDs": ids, "Capabilities": [["gpu"]], "Options": {}}])
}

/// The node of a profile as both simulators build it.
fn node(profile: &str) -> Node {
    Node::build(&Profile::load(&repo(&format!("etc/sim/{profile}"))).expect("profile"))
}

/// A runtime with one container, `/job` (id 1, no environment), asking for the GPUs `ids`.
fn one_job(ids: Value, pace: Pace) -> FakeRuntime {
    let job = inspect(&id(1), "/job", "runc", &[], gpu_request(ids, 0));
    FakeRuntime::start(vec![job], pace)
}

fn id(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

fn with_runtime(socket: &Path) -> ExporterBuilder {
    exporter()
        .profile("a100-mixed-mig.toml")
        // The simulated NVML, for MIG UUIDs.
        .env("LD_LIBRARY_PATH", bin_dir().to_str().expect("utf-8 path"))
        .args(&[
            "--container-labels",
            &format!("--container-runtime-socket=unix://{}", socket.display()),
        ])
}

fn containers_of(samples: &[Sample], metric: &str) -> Vec<(String, String, String)> {
    let mut v: Vec<(String, String, String)> = series(samples, metric)
        .iter()
        .filter_map(|s| {
            Some((
                s.label("gpu")?.to_string(),
                s.label("GPU_I_ID").unwrap_or("-").to_string(),
                s.label("container")?.to_string(),
            ))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn gpus_assigned_to_containers_carry_their_names() {
    sim_built();
    let n = node("a100-mixed-mig.toml");
    let uuid = |g: usize| n.gpus[g].uuid.clone();
    // GPU instance 7 (1g.10gb) of GPU 0, by the MIG UUID NVML and DCGM both report.
    let mig = mig_uuid(&n, 0, 7);
    let cuda_env = [
        "PATH=/usr/local/cuda/bin:/usr/bin",
        "NVIDIA_VISIBLE_DEVICES=all",
    ];
    let unnamed = id(2);
    let fake = FakeRuntime::start(
        vec![
            // docker run --gpus '"device=4,GPU-…"' --name trainer
            inspect(
                &id(1),
                "/trainer",
                "runc",
                &cuda_env,
                gpu_request(json!(["4", uuid(5)]), 0),
            ),
            // docker run --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=GPU-… (no name)
            inspect(
                &unnamed,
                "",
                "nvidia",
                &[&format!("NVIDIA_VISIBLE_DEVICES={}", uuid(6))],
                Value::Null,
            ),
            // docker run --gpus 1: the runtime's choice, not labelled
            inspect(
                &id(3),
                "/counted",
                "nvidia",
                &cuda_env,
                gpu_request(Value::Null, 1),
            ),
            // a CUDA image under runc without GPUs: its NVIDIA_VISIBLE_DEVICES=all means nothing
            inspect(&id(4), "/plain", "runc", &cuda_env, Value::Null),
            // docker run --gpus '"device=MIG-…"'
            inspect(
                &id(5),
                "/mig-job",
                "runc",
                &cuda_env,
                gpu_request(json!([mig]), 0),
            ),
        ],
        Pace::Prompt,
    );
    let e = with_runtime(&fake.socket).start();
    let short = unnamed[..12].to_string();
    let want = vec![
        ("0".to_string(), "7".to_string(), "mig-job".to_string()),
        ("4".into(), "-".into(), "trainer".into()),
        ("5".into(), "-".into(), "trainer".into()),
        ("6".into(), "-".into(), short),
    ];
    let s = e.scrape_until(20, |s| containers_of(s, "DCGM_FI_DEV_FB_USED") == want);
    // Everything else stays unlabelled: GPU 7, the other instances of GPU 0, GPUs 1-3.
    assert!(
        s.iter()
            .filter(|x| x.label("container").is_some())
            .all(|x| x.label("gpu") != Some("7")),
        "{}",
        dump(&s)
    );
    let up = series(&s, "dcgm_exporter_attribution_source_up");
    assert!(
        up.iter()
            .any(|x| x.label("source") == Some("container-runtime") && x.value == 1.0),
        "{}",
        dump(&s)
    );
    // The runtime is listed every interval; each running container is inspected once
    // (what it was given cannot change while it runs).
    let listed = fake.asked("/containers/json");
    e.scrape_until(20, |_| fake.asked("/containers/json") >= listed + 3);
    for n in 1..=5 {
        assert_eq!(
            fake.asked(&format!("/containers/{}/json", id(n))),
            1,
            "container {n}"
        );
    }
}

#[test]
fn old_label_names_with_o() {
    sim_built();
    let uuid = node("a100-mixed-mig.toml").gpus[4].uuid.clone();
    let fake = one_job(json!([uuid]), Pace::Prompt);
    let e = with_runtime(&fake.socket).arg("-o").start();
    e.scrape_until(20, |s| {
        s.iter()
            .any(|x| x.label("container_name") == Some("job") && x.label("container").is_none())
    });
}

#[test]
fn a_runtime_that_never_answers_delays_nothing() {
    sim_built();
    let fake = one_job(json!(["4"]), Pace::Hang);
    // Each request to the fake hangs for two minutes; the exporter's HTTP client gives up
    // after 10 s, so a scrape that waited on the runtime would fail here.
    let e = with_runtime(&fake.socket).start();
    for _ in 0..3 {
        let s = e.scrape();
        assert!(!series(&s, "DCGM_FI_DEV_GPU_TEMP").is_empty());
        assert!(s.iter().all(|x| x.label("container").is_none()));
    }
    let (code, health) = e.get("/health");
    assert_eq!(code, 200, "{health}");
    // The refresher keeps trying, once per interval, each try cut off by its deadline.
    let s = e.scrape_until(20, |s| {
        series(s, "dcgm_exporter_attribution_source_errors_total")
            .iter()
            .any(|x| x.label("source") == Some("container-runtime") && x.value >= 2.0)
    });
    assert!(s.iter().all(|x| x.label("container").is_none()));
    assert!(fake.requests() >= 2);
    let (_, health) = e.get("/health");
    assert!(
        health.contains("degraded: container-runtime: GET /containers/json on "),
        "{health}"
    );
    assert!(health.contains("deadline"), "{health}");
}

#[test]
fn a_missing_socket_is_a_warning_once_and_a_health_note() {
    sim_built();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("absent.sock");
    let e = with_runtime(&socket).start();
    let s = e.scrape_until(20, |s| {
        series(s, "dcgm_exporter_attribution_source_errors_total")
            .iter()
            .any(|x| x.label("source") == Some("container-runtime") && x.value >= 3.0)
    });
    assert!(!series(&s, "DCGM_FI_DEV_GPU_TEMP").is_empty());
    assert!(s.iter().all(|x| x.label("container").is_none()));
    let (code, health) = e.get("/health");
    assert_eq!(code, 200);
    assert!(health.contains(&socket.display().to_string()), "{health}");
    let warnings = e
        .stderr()
        .lines()
        .filter(|l| l.contains("level=warning") && l.contains("absent.sock"))
        .count();
    assert_eq!(warnings, 1, "{}", e.stderr());
}

/// A runtime socket that answers each request with what `mode` says at that moment: a sane
/// Docker answer (mode 0), or an overflowing Content-Length (1) or chunk size (2).
fn hostile_runtime(socket: &Path, uuid: String, mode: Arc<AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::os::unix::net::UnixListener::bind(socket).expect("bind");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let req = crate::support::request_head(&mut s);
            let ok = |body: String| {
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            };
            let reply = match mode.load(Ordering::SeqCst) {
                1 => format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n[]", u64::MAX),
                2 => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n"
                    .to_string(),
                _ if req.starts_with(b"GET /containers/json ") => ok(json!([summary(&inspect(
                    &id(1),
                    "/trainer",
                    "runc",
                    &[],
                    Value::Null
                ))])
                .to_string()),
                _ => ok(inspect(
                    &id(1),
                    "/trainer",
                    "runc",
                    &[],
                    gpu_request(json!([uuid.clone()]), 0),
                )
                .to_string()),
            };
            let _ = s.write_all(reply.as_bytes());
            // Open until the exporter closes: only the answer itself can end its wait.
            let mut b = [0u8; 1024];
            while matches!(s.read(&mut b), Ok(n) if n > 0) {}
        }
    });
}

/// A runtime whose answers announce sizes that overflow (which used to panic the
/// refresher thread and leave its last labels served for good): the labels are
/// withdrawn, /health says why, the thread is not restarted because it never died, and
/// the labels come back when the runtime is sane again.
#[test]
fn a_runtime_announcing_overflowing_sizes_withdraws_labels_until_it_is_sane() {
    sim_built();
    let n = node("a100-mixed-mig.toml");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let mode = Arc::new(AtomicUsize::new(0));
    hostile_runtime(&socket, n.gpus[5].uuid.clone(), mode.clone());
    let e = with_runtime(&socket).args(&["-c", "200"]).start();
    let labelled = |s: &[Sample]| {
        containers_of(s, "DCGM_FI_DEV_GPU_TEMP") == [("5".into(), "-".into(), "trainer".into())]
    };
    e.scrape_until(20, labelled);
    for (hostile, says) in [
        // hyper's words, since the runtime is read with hyper's client.
        (1, "message head is too large"),
        (2, "invalid chunk size: overflow"),
    ] {
        mode.store(hostile, Ordering::SeqCst);
        let s = e.scrape_until(20, |s| {
            !series(s, "DCGM_FI_DEV_GPU_TEMP").is_empty()
                && s.iter().all(|x| x.label("container").is_none())
        });
        let restarts: Vec<f64> = series(&s, "dcgm_exporter_thread_restarts_total")
            .iter()
            .filter(|x| x.label("thread") == Some("container-labels"))
            .map(|x| x.value)
            .collect();
        assert_eq!(restarts, [0.0]);
        let (code, health) = e.get("/health");
        assert_eq!(code, 200, "{health}");
        assert!(
            health.contains("degraded: container-runtime: GET /containers/json on ")
                && health.contains(says),
            "{health}"
        );
        mode.store(0, Ordering::SeqCst);
        e.scrape_until(20, labelled);
    }
    let (_, health) = e.get("/health");
    assert!(!health.contains("container"), "{health}");
    assert!(!e.stderr().contains("panicked"), "{}", e.stderr());
}
