//! Generated inputs for every parser of what reaches the exporter from outside (issue 30,
//! item 8), beside `tests/it/fuzz.rs` (counters CSV, selectors, flags): the YAML configuration
//! file (versions 1 and 2), the web configuration, the kubelet's PodResources reply, the API
//! server's pod and ResourceSlice objects, the container runtime's JSON and HTTP answers,
//! cgroup files, HPC job files, and HTTP request heads sent to the running server. Each gives
//! a value or an error naming its source, never a panic or a hang; each run prints
//! `fuzz: <parser>: <N> cases` (`support/fuzzing.rs`).

use crate::support;
use crate::support::fuzzing::fuzz;
use dcgm_exporter::attribution::container::docker::{Inspect, Listed};
use dcgm_exporter::attribution::container::http as runtime_http;
use dcgm_exporter::attribution::dra::SliceCache;
use dcgm_exporter::attribution::hpc::HpcDir;
use dcgm_exporter::attribution::kubelet::{self, proto};
use dcgm_exporter::attribution::pids;
use dcgm_exporter::attribution::podmeta::{Allowlist, Options, PodCache};
use dcgm_exporter::config::file as config_file;
use dcgm_exporter::output::http::webconfig;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Printable text with the characters that break parsers: quotes, separators, newlines.
fn junk(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[ -~\t\n\r\u{e9}\u{1F600}]{{0,{max}}}")).unwrap()
}

/// `text` cut at any byte and with any junk appended: a file read while being written.
fn truncated(text: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    (text, any::<prop::sample::Index>(), junk(8)).prop_map(|(t, cut, tail)| {
        let mut at = cut.index(t.len() + 1);
        while !t.is_char_boundary(at) {
            at -= 1;
        }
        format!("{}{tail}", &t[..at])
    })
}

// ----------------------------------------------------------------- YAML configuration

fn yaml_scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "30s",
            "1s",
            "0s",
            "-1s",
            "500",
            "0",
            "-5",
            "10m",
            "1h",
            "20000000000000000",
            "99999999999999999999",
            "1.5",
            "true",
            "false",
            "null",
            "~",
            "\"\"",
            "[]",
            "{}",
            "DCGM_FI_DEV_GPU_TEMP",
            "\"DCGM_FI_DEV_POWER_*\"",
            "\"*\"",
            "4.9.0",
            "4.8.2",
            "x",
        ])
        .prop_map(String::from),
        "[a-zA-Z0-9_*:. -]{0,12}",
    ]
}

fn yaml_key() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(vec![
            "version", "metrics", "file", "fields", "name", "prometheusType", "help",
            "collection", "interval", "watchGroups", "sources", "dcgm", "watch",
            "maxKeepAge", "maxKeepSamples", "server", "maxConcurrentScrapes", "collections",
            "every", "include", "exclude", "emulateVersion", "lowCardinality", "detect",
        ])
        .prop_map(String::from),
        1 => "[a-zA-Z]{1,8}",
    ]
}

/// YAML values nested a few levels, in flow style.
fn yaml_value() -> impl Strategy<Value = String> {
    yaml_scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec((yaml_key(), inner), 0..4).prop_map(|kv| {
                let body: Vec<String> = kv.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                format!("{{{}}}", body.join(", "))
            }),
        ]
    })
}

fn yaml_document() -> impl Strategy<Value = String> {
    let version = prop::sample::select(vec!["1", "2", "3", "0", "\"2\"", "x", ""]);
    let body = prop::collection::vec((yaml_key(), yaml_value()), 0..6);
    truncated((version, body).prop_map(|(v, body)| {
        let mut text = format!("version: {v}\n");
        for (k, val) in body {
            text.push_str(&format!("{k}: {val}\n"));
        }
        text
    }))
}

#[test]
fn yaml_configuration_gives_settings_or_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    fuzz("config_file_yaml", yaml_document(), |text| {
        std::fs::write(&path, &text).unwrap();
        if let Err(e) = config_file::read(&path) {
            prop_assert!(
                e.to_string().contains("config.yaml"),
                "{e}\n--- input:\n{text}"
            );
        }
        Ok(())
    });
}

// ------------------------------------------------------------------ web configuration

fn web_value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "cert.pem",
            "key.pem",
            "/nonexistent",
            "RequireAndVerifyClientCert",
            "VerifyClientCertIfGiven",
            "NoClientCert",
            "VersionTLS13",
            "VersionTLS10",
            "true",
            "false",
            "\"$2y$10$abcdefghijklmnopqrstuv\"",
            "''",
            "[]",
            "{}",
            "x",
        ])
        .prop_map(String::from),
        "[a-zA-Z0-9$./-]{0,16}",
    ]
}

fn web_document() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "tls_server_config",
        "cert_file",
        "key_file",
        "client_auth_type",
        "client_ca_file",
        "min_version",
        "max_version",
        "cipher_suites",
        "http_server_config",
        "http2",
        "headers",
        "basic_auth_users",
        "alice",
        "X-Frame-Options",
        "Strict-Transport-Security",
    ]);
    let entry = (key.clone(), web_value())
        .prop_map(|(k, v)| format!("{k}: {v}"))
        .boxed();
    let nested = (key, prop::collection::vec(entry.clone(), 0..4))
        .prop_map(|(k, kv)| format!("{k}: {{{}}}", kv.join(", ")));
    truncated(prop::collection::vec(prop_oneof![entry, nested], 0..5).prop_map(|l| l.join("\n")))
}

#[test]
fn web_configuration_gives_settings_or_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    fuzz("web_config", web_document(), |text| {
        if let Err(e) = webconfig::parse(&text, &path) {
            prop_assert!(
                e.to_string()
                    .starts_with(&format!("--web-config-file {}: ", path.display())),
                "{e}\n--- input:\n{text}"
            );
        }
        Ok(())
    });
}

// ------------------------------------------------------------- kubelet PodResources

fn id_text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "GPU-8ab3c3de-0000-4000-8000-000000000000",
            "MIG-6f1c3e2a-1111-4111-8111-111111111111",
            "nvidia0",
            "nvidia0/vgpu3",
            "GPU-x::2",
            "nvidia1/gi2",
            "",
            "::",
            "/vgpu",
        ])
        .prop_map(String::from),
        junk(40),
    ]
}

fn pod_resources() -> impl Strategy<Value = proto::ListPodResourcesResponse> {
    let device = (id_text(), prop::collection::vec(id_text(), 0..4)).prop_map(|(r, ids)| {
        proto::ContainerDevices {
            resource_name: r,
            device_ids: ids,
        }
    });
    let claim = (
        id_text(),
        id_text(),
        prop::collection::vec((id_text(), id_text(), id_text()), 0..3),
    )
        .prop_map(|(name, ns, res)| proto::DynamicResource {
            claim_name: name,
            claim_namespace: ns,
            claim_resources: res
                .into_iter()
                .map(|(d, p, n)| proto::ClaimResource {
                    driver_name: d,
                    pool_name: p,
                    device_name: n,
                })
                .collect(),
        });
    let container = (
        id_text(),
        prop::collection::vec(device, 0..3),
        prop::collection::vec(claim, 0..2),
    )
        .prop_map(
            |(name, devices, dynamic_resources)| proto::ContainerResources {
                name,
                devices,
                dynamic_resources,
            },
        );
    let pod = (id_text(), id_text(), prop::collection::vec(container, 0..3)).prop_map(
        |(name, namespace, containers)| proto::PodResources {
            name,
            namespace,
            containers,
        },
    );
    prop::collection::vec(pod, 0..4)
        .prop_map(|pod_resources| proto::ListPodResourcesResponse { pod_resources })
}

/// A reply as it crosses the socket: well-formed, or with bytes flipped, cut or added.
fn reply_bytes() -> impl Strategy<Value = Vec<u8>> {
    use prost::Message;
    (
        pod_resources(),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        any::<prop::sample::Index>(),
        prop::collection::vec(any::<u8>(), 0..16),
    )
        .prop_map(|(reply, flips, cut, tail)| {
            let mut bytes = reply.encode_to_vec();
            if !bytes.is_empty() {
                for (at, b) in flips {
                    let i = at.index(bytes.len());
                    bytes[i] ^= b;
                }
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            bytes.extend(tail);
            bytes
        })
}

#[test]
fn kubelet_replies_decode_to_one_allocation_per_device_or_are_refused() {
    use prost::Message;
    fuzz("kubelet_podresources_reply", reply_bytes(), |bytes| {
        let Ok(reply) = proto::ListPodResourcesResponse::decode(bytes.as_slice()) else {
            return Ok(());
        };
        let ids: usize = reply
            .pod_resources
            .iter()
            .flat_map(|p| &p.containers)
            .flat_map(|c| &c.devices)
            .map(|d| d.device_ids.len())
            .sum();
        let claims: usize = reply
            .pod_resources
            .iter()
            .flat_map(|p| &p.containers)
            .flat_map(|c| &c.dynamic_resources)
            .map(|d| d.claim_resources.len())
            .sum();
        let listing = kubelet::listing(reply);
        prop_assert_eq!(listing.devices.len(), ids);
        prop_assert_eq!(listing.claims.len(), claims);
        Ok(())
    });
}

// ------------------------------------------------------------------- API server objects

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        id_text().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(id_text(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Label keys as Kubernetes allows them (prefix/name, leading digits, dots, dashes) and
/// some it would not.
fn label_key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "([a-z0-9]([a-z0-9.-]{0,10}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,10}[A-Za-z0-9])?",
        1 => prop::sample::select(vec!["3rd-party", "1password.com/managed", "__name__", "pod", "gpu", "UUID", "_", "a..b"]).prop_map(String::from),
        1 => junk(12),
    ]
}

fn pod_object() -> impl Strategy<Value = (Value, usize)> {
    (
        prop::option::of(id_text()),
        prop::option::of(id_text()),
        prop::option::of(id_text()),
        prop::collection::btree_map(label_key(), junk(12), 0..6),
        json_value(),
    )
        .prop_map(|(ns, name, uid, labels, extra)| {
            let n = labels.len();
            let mut meta = json!({ "labels": labels });
            for (k, v) in [("namespace", ns), ("name", name), ("uid", uid)] {
                if let Some(v) = v {
                    meta[k] = Value::from(v);
                }
            }
            (json!({ "metadata": meta, "spec": extra }), n)
        })
}

#[test]
fn pod_objects_give_metadata_with_label_names_a_page_can_carry() {
    let cache = PodCache::new(Options {
        labels: true,
        allowlist: Allowlist::new(&[]),
    });
    fuzz("apiserver_pod", pod_object(), |(obj, labels)| {
        // What the watch would hand over: anything not a Pod is refused by serde.
        let Ok(pod) = serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(obj) else {
            return Ok(());
        };
        if let Some((_, _, meta)) = cache.meta_of(&pod) {
            prop_assert!(meta.labels.len() <= labels);
            for (name, _) in &meta.labels {
                prop_assert!(!name.is_empty(), "an empty label name");
                prop_assert!(
                    name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "{name:?} is not a Prometheus label name"
                );
            }
        }
        Ok(())
    });
}

fn slice_object() -> impl Strategy<Value = Value> {
    let device =
        (id_text(), json_value(), prop::option::of(id_text())).prop_map(|(name, attrs, uuid)| {
            let mut attributes = json!({ "type": { "string": "gpu" }, "other": attrs });
            if let Some(u) = uuid {
                attributes["uuid"] = json!({ "string": u });
            }
            json!({ "name": name, "basic": { "attributes": attributes }, "attributes": attributes })
        });
    (
        prop::option::of(id_text()),
        prop::sample::select(vec!["gpu.nvidia.com", "other.example.com", ""]),
        id_text(),
        prop::collection::vec(device, 0..4),
        json_value(),
    )
        .prop_map(|(name, driver, pool, devices, extra)| {
            json!({
                "metadata": { "name": name },
                "spec": { "driver": driver, "pool": { "name": pool }, "devices": devices, "x": extra },
            })
        })
}

#[test]
fn resource_slices_of_any_shape_update_the_cache_without_a_panic() {
    let cache = SliceCache::default();
    fuzz(
        "apiserver_resourceslice",
        (slice_object(), json_value()),
        |(slice, junk)| {
            cache.apply(&slice);
            cache.apply(&junk);
            cache.delete(&junk);
            cache.replace(&[slice.clone(), junk]);
            cache.delete(&slice);
            Ok(())
        },
    );
}

// --------------------------------------------------------- container runtime answers

fn container_json() -> impl Strategy<Value = Value> {
    (id_text(), id_text(), json_value(), prop::collection::vec(id_text(), 0..3)).prop_map(
        |(id, name, extra, ids)| {
            json!({
                "Id": id, "Name": name, "Names": [name],
                "Config": { "Env": ids.iter().map(|i| format!("NVIDIA_VISIBLE_DEVICES={i}")).collect::<Vec<_>>(), "Labels": extra },
                "HostConfig": {
                    "Runtime": "nvidia",
                    "DeviceRequests": [{ "Driver": "nvidia", "Count": -1, "DeviceIDs": ids, "Capabilities": [["gpu"]] }],
                    "Devices": [{ "PathOnHost": "/dev/nvidia0", "PathInContainer": "/dev/nvidia0" }],
                    "CDIDevices": ids.iter().map(|i| format!("nvidia.com/gpu={i}")).collect::<Vec<_>>(),
                },
            })
        },
    )
}

#[test]
fn runtime_json_gives_containers_and_their_gpus_or_is_refused() {
    fuzz(
        "runtime_json",
        (container_json(), json_value(), any::<prop::sample::Index>()),
        |(container, junk, cut)| {
            for value in [&container, &junk] {
                let text = value.to_string();
                let mut at = cut.index(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                for bytes in [text.as_bytes(), &text.as_bytes()[..at]] {
                    if let Ok(c) = serde_json::from_slice::<Inspect>(bytes) {
                        let _ = (c.label(), c.gpus());
                    }
                    if let Ok(list) = serde_json::from_slice::<Vec<Listed>>(bytes) {
                        list.iter().for_each(|l| drop(l.label()));
                    }
                }
            }
            Ok(())
        },
    );
}

fn http_answer() -> impl Strategy<Value = Vec<u8>> {
    let status = prop::sample::select(vec![
        "HTTP/1.1 200 OK",
        "HTTP/1.0 404 Not Found",
        "HTTP/1.1 500 x",
        "HTTP/2 200",
        "SSH-2.0",
        "HTTP/1.1 99999 x",
        "",
    ]);
    let header = prop_oneof![
        prop::sample::select(vec![
            "Content-Length: 2",
            "Content-Length: 0",
            "Content-Length: -1",
            "Content-Length: 99999999999999999999",
            "Content-Length: 2, 3",
            "Transfer-Encoding: chunked",
            "Transfer-Encoding: gzip, chunked",
            "Connection: close",
            "Content-Type: application/json",
        ])
        .prop_map(String::from),
        junk(30),
    ];
    let body = prop_oneof![
        Just("[]".to_string()),
        Just("2\r\n[]\r\n0\r\n\r\n".to_string()),
        Just("ffffffffffffffffff\r\n".to_string()),
        junk(40),
    ];
    (
        status,
        prop::collection::vec(header, 0..4),
        body,
        any::<bool>(),
    )
        .prop_map(|(s, h, b, crlf)| {
            let sep = if crlf { "\r\n" } else { "\n" };
            format!("{s}{sep}{}{sep}{sep}{b}", h.join(sep)).into_bytes()
        })
}

#[test]
fn runtime_http_answers_give_a_body_or_an_error_before_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let (answers, next) = std::sync::mpsc::channel::<Vec<u8>>();
    // One connection per case: read the request, answer, close (so an answer without a
    // length ends at the close instead of the deadline).
    std::thread::spawn(move || {
        for answer in next {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let mut b = [0u8; 2048];
            let _ = s.read(&mut b);
            let _ = s.write_all(&answer);
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    });
    fuzz("runtime_http_answer", http_answer(), |answer| {
        answers.send(answer).unwrap();
        let asked = Instant::now();
        match runtime_http::get(&socket, "/containers/json", asked + Duration::from_secs(10)) {
            Ok((_, body)) => prop_assert!(body.len() <= 64 << 20),
            Err(e) => prop_assert!(e.to_string().starts_with("GET /containers/json on "), "{e}"),
        }
        prop_assert!(
            asked.elapsed() < Duration::from_secs(5),
            "waited for a closed peer"
        );
        Ok(())
    });
}

// --------------------------------------------------------------------- cgroup files

fn cgroup_path() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        prop::sample::select(vec![
            "kubepods",
            "kubepods.slice",
            "kubepods-besteffort.slice",
            "burstable",
            "pod8ab3c3de-0000-4000-8000-000000000000",
            "kubepods-pod8ab3c3de_0000_4000_8000_000000000000.slice",
            "cri-containerd-4f1c2b.scope",
            "docker-4f1c2b3d4e5f.scope",
            "libpod-4f1c.scope",
            "system.slice",
            "slurmstepd.scope",
            "job_4242",
            "step_0",
            "uid_0",
            "docker",
            "crio-abc",
            "pod",
            "pod_",
            "..",
            "",
        ])
        .prop_map(String::from),
        "[a-z0-9_.-]{0,70}",
    ];
    prop::collection::vec(part, 0..7).prop_map(|p| format!("/{}", p.join("/")))
}

fn cgroup_file() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        (
            0u32..14,
            prop::sample::select(vec!["", "cpu,cpuacct", "devices", "name=systemd", "memory"]),
            cgroup_path()
        )
            .prop_map(|(id, c, p)| format!("{id}:{c}:{p}")),
        junk(60),
    ];
    prop::collection::vec(line, 0..6).prop_map(|l| l.join("\n"))
}

#[test]
fn cgroup_files_give_a_well_formed_owner_or_none() {
    fuzz("proc_cgroup_file", cgroup_file(), |text| {
        if let Some(uid) = pids::pod_uid_of_cgroup_file(&text) {
            prop_assert!(uid.len() >= 32, "{uid:?}");
            prop_assert!(
                uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'),
                "{uid:?}"
            );
        }
        if let Some(owner) = pids::owner_of_cgroup_file(&text) {
            let id = match &owner {
                pids::Owner::Pod(id) | pids::Owner::Container(id) | pids::Owner::Job(id) => id,
            };
            prop_assert!(!id.is_empty(), "{owner:?}");
            prop_assert!(!id.contains('/') && !id.contains('\n'), "{owner:?}");
        }
        Ok(())
    });
}

// ----------------------------------------------------------------------- HPC job files

fn hpc_files() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    let name = prop_oneof![
        prop::sample::select(vec![
            "0",
            "1",
            "7",
            "0.1",
            "3.2",
            "01",
            "-1",
            "0.",
            ".1",
            "x",
            "0.1.2",
            "4294967296"
        ])
        .prop_map(String::from),
        "[0-9a-z.]{1,6}".prop_filter("a file name", |n| n != "." && n != ".."),
    ];
    let content = prop_oneof![
        prop::collection::vec("[a-zA-Z0-9_ -]{0,12}", 0..4).prop_map(|l| l.join("\n").into_bytes()),
        prop::collection::vec(any::<u8>(), 0..64),
    ];
    prop::collection::vec((name, content), 0..5)
}

#[test]
fn hpc_job_files_give_jobs_per_gpu_file_or_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let hpc = std::cell::RefCell::new(HpcDir::new(dir.path().to_path_buf()));
    fuzz("hpc_job_files", hpc_files(), |files| {
        for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
            std::fs::remove_file(e.path()).unwrap();
        }
        for (name, content) in &files {
            std::fs::write(dir.path().join(name), content).unwrap();
        }
        let dcgm_exporter::attribution::hpc::Read {
            jobs,
            unknown,
            errors,
        } = hpc.borrow_mut().read();
        // A file kept from a previous read failed this one, and says so.
        for file in &unknown {
            prop_assert!(jobs.contains_key(file), "{file}");
            prop_assert!(
                errors.iter().any(|e| e.contains(&format!("/{file}:"))),
                "{file}: {errors:?}"
            );
        }
        for file in jobs.keys() {
            prop_assert!(
                dcgm_exporter::attribution::hpc::is_gpu_file_name(file),
                "{file}"
            );
            prop_assert!(
                files.iter().any(|(n, _)| n == file),
                "{file} was not written"
            );
        }
        for e in &errors {
            prop_assert!(e.contains(&dir.path().display().to_string()), "{e}");
        }
        Ok(())
    });
}

// ----------------------------------------------------------------- HTTP request heads

fn request_head() -> impl Strategy<Value = Vec<u8>> {
    let method = prop::sample::select(vec![
        "GET", "HEAD", "POST", "PRI", "get", "GET GET", "", "\u{1}",
    ]);
    let target = prop_oneof![
        prop::sample::select(vec![
            "/metrics",
            "/health",
            "/",
            "*",
            "/metrics?x=%zz",
            "http://h/metrics",
            "//",
            "/debug/pprof/"
        ])
        .prop_map(String::from),
        junk(40),
    ];
    let version = prop::sample::select(vec![
        "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", "", "http/1.1",
    ]);
    let header = prop_oneof![
        prop::sample::select(vec![
            "Host: x",
            "Accept-Encoding: gzip",
            "Accept: application/openmetrics-text; version=1.0.0",
            "Content-Length: 5",
            "Content-Length: -1",
            "Transfer-Encoding: chunked",
            "Authorization: Basic !!!",
            "Connection: close",
            "Expect: 100-continue",
            "X: \u{1}",
        ])
        .prop_map(String::from),
        junk(60),
    ];
    (method, target, version, prop::collection::vec(header, 0..5))
        .prop_map(|(m, t, v, h)| format!("{m} {t} {v}\r\n{}\r\n\r\n", h.join("\r\n")).into_bytes())
}

/// One connection, one head, our side shut for writing: the server answers or closes, and
/// must never hang up on the whole server.
fn send_head(port: u16, head: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(head)?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    Ok(answer)
}

#[test]
fn http_request_heads_get_an_answer_or_a_close_and_the_server_stays_up() {
    let e = support::exporter().start();
    fuzz("http_request_head", request_head(), |head| {
        let answer = match send_head(e.port, &head) {
            Ok(a) => a,
            // The server may reset a connection it refused; a read that timed out is a hang.
            Err(err) => {
                prop_assert!(
                    !matches!(
                        err.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                    "no answer and no close within 10 s"
                );
                return Ok(());
            }
        };
        if !answer.is_empty() {
            prop_assert!(
                answer.starts_with(b"HTTP/1."),
                "{:?}",
                String::from_utf8_lossy(&answer[..answer.len().min(80)])
            );
        }
        Ok(())
    });
    let (code, body) = e.get("/metrics");
    assert_eq!(code, 200);
    assert!(
        body.contains("DCGM_FI_DEV_GPU_TEMP"),
        "the server stopped serving"
    );
    assert!(!e.stderr().contains("panicked"), "{}", e.stderr());
}

/// Found by the run above: a target without a path (authority form) panicked a server
/// thread inside warp's path filters on every such request.
#[test]
fn a_request_target_without_a_path_is_refused_without_a_panic() {
    let e = support::exporter().start();
    for target in ["127.0.0.1:80", "x:1"] {
        // Our side stays open (a half-closed client may be dropped before its answer):
        // the server closes after answering `Connection: close`.
        let mut s = std::net::TcpStream::connect(("127.0.0.1", e.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let head = format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(head.as_bytes()).unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    }
    assert_eq!(e.get("/metrics").0, 200);
    assert!(!e.stderr().contains("panicked"), "{}", e.stderr());
}
