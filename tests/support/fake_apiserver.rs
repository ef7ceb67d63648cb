//! A Kubernetes API server double on loopback HTTP that speaks the real JSON and watch
//! protocol for the resources the exporter reads (core/v1 pods and configmaps, and DRA's
//! cluster-scoped `resource.k8s.io` ResourceSlices in whichever versions the test says are
//! served): GET of one object, LIST with `metadata.resourceVersion`, WATCH
//! (`?watch=true&resourceVersion=N`) as a chunked stream of
//! `{"type":"ADDED|MODIFIED|DELETED|BOOKMARK","object":...}` lines replaying what happened
//! after N, and group discovery at `/apis`. Field selectors `a.b=value` are applied as the
//! real server does for `spec.nodeName`, `spec.driver` and `metadata.name`. RBAC can refuse
//! a whole resource (`forbid`) or grant only some verbs on it (`allow_only`), answered 403
//! as a real server does. Every request line is recorded.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// One change: (resourceVersion, resource, event type, object).
type Change = (u64, String, &'static str, Value);

#[derive(Default)]
struct State {
    rv: u64,
    /// (resource, namespace, name) -> object.
    objects: BTreeMap<(String, String, String), Value>,
    /// Every change: (resourceVersion, resource, event type, object).
    log: Vec<Change>,
    requests: Vec<String>,
    /// API groups served under /apis: (group, versions, preferred first).
    groups: Vec<(String, Vec<String>)>,
    /// Resources the exporter's service account may not read (answered 403).
    forbidden: Vec<String>,
    /// Resource -> the only verbs (`get`, `list`, `watch`) its RBAC grants; the others are
    /// answered 403. A resource not here grants every verb.
    verbs: BTreeMap<String, Vec<String>>,
}

pub struct FakeApiServer {
    state: Arc<(Mutex<State>, Condvar)>,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl FakeApiServer {
    pub fn start() -> FakeApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake API server");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let st = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().map_while(Result::ok) {
                let st = st.clone();
                std::thread::spawn(move || serve(conn, st));
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: exporter\n  user:\n    token: fake-token\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: exporter\ncurrent-context: fake\n"
            ),
        )
        .unwrap();
        FakeApiServer {
            state,
            _dir: dir,
            kubeconfig,
        }
    }

    /// A kubeconfig file pointing at this server (for KUBECONFIG).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Creates or replaces an object (`kind` Pod or ConfigMap) and tells the watchers.
    pub fn apply(&self, mut obj: Value) {
        let resource = resource_of(obj["kind"].as_str().expect("kind"));
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = obj["metadata"]["name"].as_str().expect("name").to_string();
        let (lock, cv) = &*self.state;
        let mut s = lock.lock().unwrap();
        s.rv += 1;
        let rv = s.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let key = (resource.clone(), ns, name);
        let kind = if s.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        s.objects.insert(key, obj.clone());
        s.log.push((rv, resource, kind, obj));
        cv.notify_all();
    }

    pub fn delete(&self, kind: &str, ns: &str, name: &str) {
        let resource = resource_of(kind);
        let (lock, cv) = &*self.state;
        let mut s = lock.lock().unwrap();
        let Some(mut obj) = s
            .objects
            .remove(&(resource.clone(), ns.to_string(), name.to_string()))
        else {
            return;
        };
        s.rv += 1;
        let rv = s.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        s.log.push((rv, resource, "DELETED", obj));
        cv.notify_all();
    }

    /// Serves an API group in these versions (listed at /apis; its resources answer in
    /// each). Objects are stored once: as a real server converts, every version shows them.
    pub fn serve_group(&self, group: &str, versions: &[&str]) {
        self.state.0.lock().unwrap().groups.push((
            group.to_string(),
            versions.iter().map(|v| v.to_string()).collect(),
        ));
    }

    /// Answers requests for `resource` (e.g. "resourceslices") with 403 Forbidden, as a
    /// server whose RBAC lacks the rule does, or serves it again.
    pub fn forbid(&self, resource: &str, forbidden: bool) {
        let mut s = self.state.0.lock().unwrap();
        s.forbidden.retain(|r| r != resource);
        if forbidden {
            s.forbidden.push(resource.to_string());
        }
    }

    /// Grants only these verbs on `resource` (`get` one object, `list`, `watch`), as a Role
    /// with that rule does: NVIDIA's chart grants configmaps `get`, the GPU operator `get`
    /// and `list`. The other verbs are answered 403 Forbidden, naming the verb.
    pub fn allow_only(&self, resource: &str, verbs: &[&str]) {
        let verbs = verbs.iter().map(|v| v.to_string()).collect();
        self.state
            .0
            .lock()
            .unwrap()
            .verbs
            .insert(resource.to_string(), verbs);
    }

    pub fn requests(&self) -> Vec<String> {
        self.state.0.lock().unwrap().requests.clone()
    }

    /// Waits until a request line containing every one of `parts` arrived. (The bench
    /// includes this file alone, so it cannot lean on `support::poll`.)
    pub fn wait_for_request(&self, parts: &[&str], secs: u64) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let requests = self.requests();
            if let Some(r) = requests
                .iter()
                .find(|r| parts.iter().all(|p| r.contains(p)))
            {
                return r.clone();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no request with {parts:?} within {secs}s: {requests:#?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn resource_of(kind: &str) -> String {
    match kind {
        "Pod" => "pods".into(),
        "ConfigMap" => "configmaps".into(),
        "ResourceSlice" => "resourceslices".into(),
        other => panic!("the fake API server does not serve {other}"),
    }
}

/// A JSON object of string values.
fn string_map(pairs: &[(&str, &str)]) -> serde_json::Map<String, Value> {
    let pairs = pairs.iter().map(|(k, v)| (k.to_string(), json!(v)));
    pairs.collect()
}

/// A pod object as the API server returns it.
pub fn pod(ns: &str, name: &str, uid: &str, node: &str, labels: &[(&str, &str)]) -> Value {
    let labels = string_map(labels);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": ns, "name": name, "uid": uid, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "cuda:12"}]},
        "status": {"phase": "Running"}
    })
}

pub fn configmap(ns: &str, name: &str, data: &[(&str, &str)]) -> Value {
    let data = string_map(data);
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": ns, "name": name, "uid": format!("cm-{ns}-{name}")},
        "data": data
    })
}

/// A DRA ResourceSlice of NVIDIA's GPU driver for one node's pool, with `devices` as given
/// (their shape differs between API versions: `attributes` in v1, `basic.attributes` in
/// v1beta1).
pub fn resource_slice(api_version: &str, name: &str, node: &str, devices: Value) -> Value {
    json!({
        "apiVersion": api_version, "kind": "ResourceSlice",
        "metadata": {"name": name, "uid": format!("rs-{name}")},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}
    })
}

/// A v1 [`resource_slice`] `name` of `node` with one GPU, `device`, whose UUID is `uuid`.
pub fn gpu_slice(name: &str, node: &str, device: &str, uuid: &str) -> Value {
    let gpu = json!({"name": device, "attributes": {
        "type": {"string": "gpu"}, "uuid": {"string": uuid}}});
    resource_slice("resource.k8s.io/v1", name, node, json!([gpu]))
}

struct Request {
    line: String,
    path: String,
    query: BTreeMap<String, String>,
}

fn read_request(r: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let line = line.trim_end().to_string();
    let mut length = 0;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).ok()?;
    let target = line.split_whitespace().nth(1)?.to_string();
    let (path, q) = target.split_once('?').unwrap_or((&target, ""));
    let query = q
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect();
    Some(Request {
        line: format!("{} {}", line.split_whitespace().next()?, decode(&target)),
        path: path.to_string(),
        query,
    })
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn field(obj: &Value, path: &str) -> String {
    let mut v = obj;
    for p in path.split('.') {
        v = &v[p];
    }
    v.as_str().unwrap_or("").to_string()
}

/// `a.b=x,c=y` (what the exporter sends); anything else is refused as the server would.
fn selector_matches(selector: Option<&String>, obj: &Value) -> bool {
    selector.is_none_or(|sel| {
        sel.split(',').filter(|t| !t.is_empty()).all(|term| {
            let (k, v) = term.split_once('=').expect("field selector term k=v");
            field(obj, k) == v.trim_start_matches('=')
        })
    })
}

fn respond(conn: &mut TcpStream, status: &str, body: &Value) -> std::io::Result<()> {
    let body = body.to_string();
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn not_found(what: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("{what} not found"), "reason": "NotFound", "code": 404})
}

/// Whether the verbs granted on `resource` (see `FakeApiServer::allow_only`) leave out `verb`.
fn refuses(state: &Arc<(Mutex<State>, Condvar)>, resource: &str, verb: &str) -> bool {
    let s = state.0.lock().unwrap();
    s.verbs
        .get(resource)
        .is_some_and(|granted| !granted.iter().any(|v| v == verb))
}

/// The Status a real API server answers when RBAC refuses `verb` on `resource`.
fn forbidden(resource: &str, verb: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "reason": "Forbidden", "code": 403, "details": {"kind": resource},
           "message": format!("{resource} is forbidden: User \"system:serviceaccount:gpu:dcgm-exporter\" cannot {verb} resource \"{resource}\" in API group \"\" in the namespace \"gpu\"")})
}

fn serve(conn: TcpStream, state: Arc<(Mutex<State>, Condvar)>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    while let Some(req) = read_request(&mut reader) {
        state.0.lock().unwrap().requests.push(req.line.clone());
        let parts: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        if parts[..] == ["apis"] {
            let groups: Vec<Value> = state
                .0
                .lock()
                .unwrap()
                .groups
                .iter()
                .map(|(g, vs)| {
                    let gv = |v: &String| json!({"groupVersion": format!("{g}/{v}"), "version": v});
                    json!({"name": g, "versions": vs.iter().map(gv).collect::<Vec<_>>(),
                       "preferredVersion": gv(&vs[0])})
                })
                .collect();
            let list = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups});
            if respond(&mut conn, "200 OK", &list).is_err() {
                return;
            }
            continue;
        }
        // api/v1/pods | api/v1/namespaces/NS/RES | api/v1/namespaces/NS/RES/NAME |
        // apis/GROUP/VERSION/RES (cluster-scoped, in a served version)
        let served = |g: &str, v: &str| {
            state
                .0
                .lock()
                .unwrap()
                .groups
                .iter()
                .any(|(sg, vs)| sg == g && vs.iter().any(|x| x == v))
        };
        let (resource, ns, name) = match parts[..] {
            ["apis", g, v, res] if served(g, v) => (res.to_string(), Some(String::new()), None),
            ["api", "v1", res] => (res.to_string(), None, None),
            ["api", "v1", "namespaces", ns, res] => (res.to_string(), Some(ns.to_string()), None),
            ["api", "v1", "namespaces", ns, res, name] => (
                res.to_string(),
                Some(ns.to_string()),
                Some(name.to_string()),
            ),
            _ => {
                let _ = respond(&mut conn, "404 Not Found", &not_found(&req.path));
                continue;
            }
        };
        if state.0.lock().unwrap().forbidden.contains(&resource) {
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "reason": "Forbidden", "code": 403,
                "message": format!("{resource} is forbidden: User \"system:serviceaccount:gpu:dcgm-exporter\" cannot list resource \"{resource}\"")});
            if respond(&mut conn, "403 Forbidden", &status).is_err() {
                return;
            }
            continue;
        }
        let verb = if name.is_some() {
            "get"
        } else if req
            .query
            .get("watch")
            .is_some_and(|w| w == "true" || w == "1")
        {
            "watch"
        } else {
            "list"
        };
        if refuses(&state, &resource, verb) {
            if respond(&mut conn, "403 Forbidden", &forbidden(&resource, verb)).is_err() {
                return;
            }
            continue;
        }
        let selector = req.query.get("fieldSelector");
        let in_scope = |(r, n, _): &(String, String, String), obj: &Value| {
            *r == resource
                && ns.as_ref().is_none_or(|ns| ns == n)
                && selector_matches(selector, obj)
        };
        if let Some(name) = name {
            let s = state.0.lock().unwrap();
            let key = (resource.clone(), ns.clone().unwrap(), name.clone());
            let r = match s.objects.get(&key) {
                Some(o) => respond(&mut conn, "200 OK", o),
                None => respond(&mut conn, "404 Not Found", &not_found(&name)),
            };
            drop(s);
            if r.is_err() {
                return;
            }
            continue;
        }
        if req
            .query
            .get("watch")
            .is_some_and(|w| w == "true" || w == "1")
        {
            let from: u64 = req
                .query
                .get("resourceVersion")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let kind = match resource.as_str() {
                "pods" => "Pod",
                "resourceslices" => "ResourceSlice",
                _ => "ConfigMap",
            };
            watch(conn, &state, from, kind, &|rv: &Change| {
                let key = (
                    rv.1.clone(),
                    field(&rv.3, "metadata.namespace"),
                    String::new(),
                );
                in_scope(&key, &rv.3)
            });
            return;
        }
        let s = state.0.lock().unwrap();
        let items: Vec<Value> = s
            .objects
            .iter()
            .filter(|(k, o)| in_scope(k, o))
            .map(|(_, o)| {
                let mut o = o.clone();
                // Items in a list carry no kind/apiVersion, as from a real server.
                o.as_object_mut().unwrap().remove("kind");
                o.as_object_mut().unwrap().remove("apiVersion");
                o
            })
            .collect();
        let kind = match resource.as_str() {
            "pods" => "PodList",
            "resourceslices" => "ResourceSliceList",
            _ => "ConfigMapList",
        };
        let list = json!({"kind": kind, "apiVersion": "v1",
                          "metadata": {"resourceVersion": s.rv.to_string()}, "items": items});
        drop(s);
        if respond(&mut conn, "200 OK", &list).is_err() {
            return;
        }
    }
}

/// Streams the events after `from` that `wanted` selects, as chunked JSON lines, until the
/// client goes away; a BOOKMARK every second keeps the stream's resourceVersion current.
fn watch(
    mut conn: TcpStream,
    state: &Arc<(Mutex<State>, Condvar)>,
    from: u64,
    kind: &str,
    wanted: &dyn Fn(&Change) -> bool,
) {
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    if conn.write_all(head.as_bytes()).is_err() {
        return;
    }
    let mut sent = from;
    let (lock, cv) = &**state;
    loop {
        let (lines, rv) = {
            let s = lock.lock().unwrap();
            let (s, _) = cv
                .wait_timeout_while(s, Duration::from_secs(1), |s| s.rv <= sent)
                .unwrap();
            let lines: Vec<String> = s
                .log
                .iter()
                .filter(|e| e.0 > sent && wanted(e))
                .map(|e| json!({"type": e.2, "object": e.3}).to_string())
                .collect();
            (lines, s.rv)
        };
        let mut lines = lines;
        if lines.is_empty() {
            lines.push(
                json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": "v1",
                        "metadata": {"resourceVersion": rv.to_string()}}})
                .to_string(),
            );
        }
        sent = rv;
        for l in lines {
            let chunk = format!("{l}\n");
            if write!(conn, "{:x}\r\n{chunk}\r\n", chunk.len()).is_err() {
                return;
            }
        }
        if conn.flush().is_err() {
            return;
        }
    }
}
