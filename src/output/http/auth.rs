//! HTTP basic auth against exporter-toolkit's `basic_auth_users` (bcrypt hashes).
//!
//! bcrypt is slow by design, which makes every check a way to spend the server's CPU. So:
//! - at most one check per core runs at a time (on the blocking pool); a bounded number
//!   wait for a slot, and past that a request is answered "overloaded" (503) at once;
//! - answers are cached, keyed on an HMAC (per-process random key) of the user, the stored
//!   hash and the password, never the plaintext; successes and failures live in separate
//!   least-recently-used caches, so a flood of wrong passwords cannot push out the entry of
//!   a client that knows its password;
//! - an unknown user is checked against a dummy hash of the cost the configured users' hashes
//!   have, so timing does not tell which user names exist.
//!
//! The limits are process-wide (one [`Gate`], shared across web-config reloads) and show in
//! the self-metrics `dcgm_exporter_auth_*`.

use base64::Engine;
use prometheus::{IntCounter, IntGauge, Opts};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What a request's credentials get it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    /// No, wrong or malformed credentials: 401.
    Denied,
    /// Too many checks running and waiting: 503, try again later.
    Overloaded,
}

/// Checks that may wait for a slot, per slot.
const QUEUE_PER_SLOT: usize = 16;
/// Cached successes: one per (user, password) pair clients use, so few.
const ALLOWED_CACHE: usize = 256;
/// Cached failures: repeated wrong passwords (a misconfigured scraper) cost one check each.
const DENIED_CACHE: usize = 1024;

/// The process-wide bound on bcrypt checks and its self-metrics.
pub(crate) struct Gate {
    /// One permit per check allowed to run.
    slots: Arc<Semaphore>,
    /// One permit per check running or waiting; none left means overloaded.
    admitted: Arc<Semaphore>,
    /// The most checks seen running at once; the gauge is set under this lock, so two
    /// checks starting together cannot leave the lower of their counts behind.
    high_water: Mutex<i64>,
    in_flight: IntGauge,
    in_flight_max: IntGauge,
    waiting: IntGauge,
    limit: IntGauge,
    queue_limit: IntGauge,
    overloaded: IntCounter,
}

impl Gate {
    pub(crate) fn new(slots: usize, queue: usize) -> Gate {
        let slots = slots.max(1);
        let gauge = |n: &str, help: &str| {
            IntGauge::with_opts(Opts::new(format!("dcgm_exporter_auth_{n}"), help))
                .expect("static metric options are valid")
        };
        let gate = Gate {
            slots: Arc::new(Semaphore::new(slots)),
            admitted: Arc::new(Semaphore::new(slots + queue)),
            high_water: Mutex::new(0),
            in_flight: gauge(
                "checks_in_flight",
                "Basic-auth password (bcrypt) checks running now.",
            ),
            in_flight_max: gauge(
                "checks_in_flight_max",
                "The most basic-auth password checks that ran at once since start-up.",
            ),
            waiting: gauge(
                "checks_waiting",
                "Basic-auth password checks waiting for a free slot.",
            ),
            limit: gauge(
                "checks_limit",
                "The most basic-auth password checks that may run at once (one per core).",
            ),
            queue_limit: gauge(
                "checks_queue_limit",
                "The most basic-auth password checks that may wait; past it requests get 503.",
            ),
            overloaded: IntCounter::with_opts(Opts::new(
                "dcgm_exporter_auth_rejected_overload_total",
                "Requests answered 503 because too many password checks were running and waiting.",
            ))
            .expect("static metric options are valid"),
        };
        gate.limit.set(slots as i64);
        gate.queue_limit.set(queue as i64);
        gate
    }

    /// The process's gate: one check per core.
    pub(crate) fn global() -> &'static Arc<Gate> {
        static GATE: OnceLock<Arc<Gate>> = OnceLock::new();
        GATE.get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            Arc::new(Gate::new(cores, cores * QUEUE_PER_SLOT))
        })
    }

    pub(crate) fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.in_flight.clone()),
            Box::new(self.in_flight_max.clone()),
            Box::new(self.waiting.clone()),
            Box::new(self.limit.clone()),
            Box::new(self.queue_limit.clone()),
            Box::new(self.overloaded.clone()),
        ]
    }

    /// A slot to run one check, waiting in the queue for it; None when the queue is full.
    /// The request may go away while it waits (its future dropped): every count taken here
    /// is a guard, given back on that path as on the others.
    async fn slot(self: &Arc<Self>) -> Option<Running> {
        let Ok(admitted) = self.admitted.clone().try_acquire_owned() else {
            self.overloaded.inc();
            return None;
        };
        let waiting = Counted::new(&self.waiting);
        let slot = self.slots.clone().acquire_owned().await;
        drop(waiting);
        // The semaphore is never closed.
        let slot = slot.ok()?;
        let in_flight = Counted::new(&self.in_flight);
        self.note_high_water();
        Some(Running {
            _in_flight: in_flight,
            _permits: (slot, admitted),
        })
    }

    fn note_high_water(&self) {
        // A count that was true at one instant (each change is atomic), never above the
        // bound: a check counts itself only while it holds a slot.
        let now = self.in_flight.get();
        let mut max = self.high_water.lock().unwrap_or_else(|p| p.into_inner());
        if now > *max {
            *max = now;
            self.in_flight_max.set(now);
        }
    }
}

/// One count of a gauge, held for as long as this value lives (dropped on every way out,
/// a cancelled future's included): the gauge cannot drift from what it counts.
struct Counted(IntGauge);

impl Counted {
    fn new(gauge: &IntGauge) -> Counted {
        gauge.inc();
        Counted(gauge.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// One check holding its slot. Dropped on the blocking thread once bcrypt is done (not when
/// the request goes away), so the bound counts the checks actually running.
struct Running {
    // Fields drop in order: the count goes before the permits, so the gauge never shows
    // more than the bound.
    _in_flight: Counted,
    _permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
}

/// A bounded map of keys, the least recently used one dropped when full.
struct Lru {
    capacity: usize,
    tick: u64,
    used: HashMap<[u8; 32], u64>,
    order: BTreeMap<u64, [u8; 32]>,
}

impl Lru {
    fn new(capacity: usize) -> Lru {
        Lru {
            capacity: capacity.max(1),
            tick: 0,
            used: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.used.len()
    }

    /// Whether `key` is present; a hit makes it the most recently used.
    fn hit(&mut self, key: &[u8; 32]) -> bool {
        self.tick += 1;
        let Some(t) = self.used.get_mut(key) else {
            return false;
        };
        self.order.remove(t);
        *t = self.tick;
        self.order.insert(self.tick, *key);
        true
    }

    fn insert(&mut self, key: [u8; 32]) {
        if self.hit(&key) {
            return;
        }
        if self.used.len() >= self.capacity {
            if let Some((_, oldest)) = self.order.pop_first() {
                self.used.remove(&oldest);
            }
        }
        self.used.insert(key, self.tick);
        self.order.insert(self.tick, key);
    }
}

struct Cache {
    allowed: Lru,
    denied: Lru,
}

pub(crate) struct BasicAuth {
    users: BTreeMap<String, String>,
    /// Checked for unknown users: the users' own cost (its password does not matter).
    dummy: String,
    key: ring::hmac::Key,
    cache: Mutex<Cache>,
    gate: Arc<Gate>,
}

impl BasicAuth {
    pub(crate) fn new(users: BTreeMap<String, String>) -> BasicAuth {
        Self::with_gate(users, Gate::global().clone())
    }

    pub(crate) fn with_gate(users: BTreeMap<String, String>, gate: Arc<Gate>) -> BasicAuth {
        BasicAuth {
            dummy: dummy_hash(usual_cost(users.values())),
            users,
            key: cache_key_key(),
            cache: Mutex::new(Cache {
                allowed: Lru::new(ALLOWED_CACHE),
                denied: Lru::new(DENIED_CACHE),
            }),
            gate,
        }
    }

    /// The configured user names.
    #[cfg(test)]
    pub(crate) fn users(&self) -> Vec<&str> {
        self.users.keys().map(String::as_str).collect()
    }

    /// What the `Authorization` header's value (None when absent) gets a request.
    pub(crate) async fn check_header(self: &Arc<Self>, value: Option<&[u8]>) -> Outcome {
        match value.and_then(credentials) {
            Some((user, password)) => self.check(&user, &password).await,
            None => Outcome::Denied,
        }
    }

    /// Whether `user` with `password` may in: from the cache, or one bcrypt check.
    pub(crate) async fn check(self: &Arc<Self>, user: &str, password: &str) -> Outcome {
        let (hash, known) = match self.users.get(user) {
            Some(h) => (h.clone(), true),
            None => (self.dummy.clone(), false),
        };
        let key = self.cache_key(user, &hash, password);
        {
            let mut c = self.cache();
            if c.allowed.hit(&key) {
                return Outcome::Allowed;
            }
            if c.denied.hit(&key) {
                return Outcome::Denied;
            }
        }
        let Some(running) = self.gate.slot().await else {
            return Outcome::Overloaded;
        };
        let password = password.as_bytes().to_vec();
        let ok = tokio::task::spawn_blocking(move || {
            let ok = bcrypt::verify(&password, &hash).unwrap_or(false);
            drop(running);
            known && ok
        })
        .await
        .unwrap_or(false);
        let mut c = self.cache();
        if ok {
            c.allowed.insert(key);
            Outcome::Allowed
        } else {
            c.denied.insert(key);
            Outcome::Denied
        }
    }

    fn cache_key(&self, user: &str, hash: &str, password: &str) -> [u8; 32] {
        let mut ctx = ring::hmac::Context::with_key(&self.key);
        // Length-prefixed, so no two (user, hash, password) triples read the same.
        for part in [user, hash, password] {
            ctx.update(&(part.len() as u64).to_le_bytes());
            ctx.update(part.as_bytes());
        }
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.sign().as_ref());
        out
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A random HMAC key for this process's cache keys.
fn cache_key_key() -> ring::hmac::Key {
    let rng = ring::rand::SystemRandom::new();
    ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng).unwrap_or_else(|_| {
        // No system randomness: std's per-process random hasher keys are the next best.
        use std::hash::BuildHasher;
        let s = std::collections::hash_map::RandomState::new();
        let mut bytes = Vec::with_capacity(32);
        for i in 0u64..4 {
            bytes.extend_from_slice(&s.hash_one(i).to_le_bytes());
        }
        ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes)
    })
}

/// The bcrypt cost most of `hashes` have (the higher one on a tie); 10 when there are none.
fn usual_cost<'a>(hashes: impl Iterator<Item = &'a String>) -> u32 {
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for h in hashes {
        if let Ok(p) = h.parse::<bcrypt::HashParts>() {
            *counts.entry(p.get_cost()).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by_key(|&(cost, n)| (n, cost))
        .map_or(10, |(cost, _)| cost)
}

/// A well-formed bcrypt hash of cost `cost`, made without paying that cost: a cost-4 hash
/// with its cost field rewritten (verifying against it costs `cost`; nothing matches it
/// that matters, unknown users are refused whatever bcrypt says).
fn dummy_hash(cost: u32) -> String {
    let cost = cost.clamp(4, 31);
    let cheap = bcrypt::hash_with_salt("unknown user", 4, [0x5a; 16])
        .map(|p| p.format_for_version(bcrypt::Version::TwoB))
        .unwrap_or_default();
    // "$2b$04$" + 53 characters of salt and digest.
    match cheap.get(7..) {
        Some(rest) => format!("$2b${cost:02}${rest}"),
        None => String::new(),
    }
}

/// `Basic base64(user:password)` -> (user, password).
fn credentials(h: &[u8]) -> Option<(String, String)> {
    let s = std::str::from_utf8(h).ok()?;
    let (scheme, b64) = s.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// From `htpasswd -nBC 10 alice` with the password "password".
    const ALICE: &str = "$2y$10$CWCEbs7mt8QFrToJR9OcG.tduEKpx9SROhWnaDHQgQX4Q6hqWNASa";

    fn header(user_pass: &str) -> Vec<u8> {
        let b = base64::engine::general_purpose::STANDARD.encode(user_pass);
        format!("Basic {b}").into_bytes()
    }

    fn alice(gate: Arc<Gate>) -> Arc<BasicAuth> {
        Arc::new(BasicAuth::with_gate(
            BTreeMap::from([("alice".to_string(), ALICE.to_string())]),
            gate,
        ))
    }

    #[tokio::test]
    async fn right_wrong_unknown_and_malformed() {
        let auth = alice(Arc::new(Gate::new(2, 4)));
        let check = |h: Option<Vec<u8>>| {
            let auth = auth.clone();
            async move { auth.check_header(h.as_deref()).await }
        };
        assert_eq!(
            check(Some(header("alice:password"))).await,
            Outcome::Allowed
        );
        // Cached answers stay the same.
        assert_eq!(
            check(Some(header("alice:password"))).await,
            Outcome::Allowed
        );
        assert_eq!(check(Some(header("alice:Password"))).await, Outcome::Denied);
        assert_eq!(check(Some(header("alice:Password"))).await, Outcome::Denied);
        assert_eq!(check(Some(header("bob:password"))).await, Outcome::Denied);
        assert_eq!(check(Some(header("alice"))).await, Outcome::Denied);
        assert_eq!(check(None).await, Outcome::Denied);
        assert_eq!(check(Some(b"Bearer abc".to_vec())).await, Outcome::Denied);
    }

    #[test]
    fn the_least_recently_used_key_goes_first() {
        let k = |i: u8| [i; 32];
        let mut lru = Lru::new(3);
        for i in 1..=3 {
            lru.insert(k(i));
        }
        // 1 is used again, so 2 is now the oldest.
        assert!(lru.hit(&k(1)));
        lru.insert(k(4));
        assert_eq!(lru.len(), 3);
        assert!(!lru.hit(&k(2)), "the least recently used key is evicted");
        assert!(lru.hit(&k(1)) && lru.hit(&k(3)) && lru.hit(&k(4)));
        // One at a time, never all at once.
        for i in 5..=20 {
            lru.insert(k(i));
            assert_eq!(lru.len(), 3);
            assert!(lru.hit(&k(i)));
        }
        assert!(lru.hit(&k(19)) && lru.hit(&k(18)));
    }

    #[test]
    fn cache_keys_are_keyed_hashes_not_the_password() {
        let auth = alice(Arc::new(Gate::new(1, 0)));
        let a = auth.cache_key("alice", ALICE, "password");
        assert!(!a
            .windows(b"password".len())
            .any(|w| w == b"password".as_slice()));
        assert_ne!(a, auth.cache_key("alice", ALICE, "passwore"));
        // Moving the user/password boundary changes the key.
        assert_ne!(
            auth.cache_key("ab", ALICE, "c"),
            auth.cache_key("a", ALICE, "bc")
        );
        // Another process (another key) cannot precompute this one's keys.
        let other = alice(Arc::new(Gate::new(1, 0)));
        assert_ne!(a, other.cache_key("alice", ALICE, "password"));
    }

    #[tokio::test]
    async fn a_flood_of_wrong_passwords_keeps_a_known_good_entry() {
        // Cost 4, the cheapest: the flood below runs a check per wrong password.
        let users = BTreeMap::from([("alice".to_string(), bcrypt::hash("password", 4).unwrap())]);
        let auth = Arc::new(BasicAuth::with_gate(
            users.clone(),
            Arc::new(Gate::new(2, 4096)),
        ));
        assert_eq!(auth.check("alice", "password").await, Outcome::Allowed);
        // More distinct wrong passwords than both caches hold together.
        for i in 0..(ALLOWED_CACHE + DENIED_CACHE + 10) {
            assert_eq!(
                auth.check("alice", &format!("guess{i}")).await,
                Outcome::Denied
            );
        }
        assert_eq!(auth.cache().denied.len(), DENIED_CACHE);
        let key = auth.cache_key("alice", &users["alice"], "password");
        assert!(
            auth.cache().allowed.hit(&key),
            "the right password is still cached"
        );
    }

    #[test]
    fn an_unknown_user_costs_what_the_users_do() {
        // htpasswd -B defaults to cost 5.
        let five = bcrypt::hash("x", 5).unwrap();
        let users = BTreeMap::from([
            ("a".to_string(), five.clone()),
            ("b".to_string(), five.clone()),
            ("c".to_string(), ALICE.to_string()),
        ]);
        let auth = BasicAuth::with_gate(users, Arc::new(Gate::new(1, 0)));
        let parts: bcrypt::HashParts = auth.dummy.parse().unwrap();
        assert_eq!(parts.get_cost(), 5, "the most common cost among the users'");
        // Verifying against the dummy runs bcrypt (a well-formed hash), it does not fail fast.
        assert_eq!(bcrypt::verify("anything", &auth.dummy).ok(), Some(false));

        let only_ten = BasicAuth::with_gate(
            BTreeMap::from([("alice".to_string(), ALICE.to_string())]),
            Arc::new(Gate::new(1, 0)),
        );
        let parts: bcrypt::HashParts = only_ten.dummy.parse().unwrap();
        assert_eq!(parts.get_cost(), 10);
        // A tie goes to the higher cost.
        assert_eq!(usual_cost([five, ALICE.to_string()].iter()), 10);
        for cost in [4, 5, 12, 31] {
            let p: bcrypt::HashParts = dummy_hash(cost).parse().unwrap();
            assert_eq!(p.get_cost(), cost);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checks_past_the_slots_wait_and_past_the_queue_are_refused() {
        let gate = Arc::new(Gate::new(2, 3));
        let auth = alice(gate.clone());
        // The test holds both slots, so the checks below can only wait.
        let held = [gate.slot().await.unwrap(), gate.slot().await.unwrap()];
        let tasks: Vec<_> = (0..3)
            .map(|i| {
                let auth = auth.clone();
                tokio::spawn(async move { auth.check("alice", &format!("wrong{i}")).await })
            })
            .collect();
        for _ in 0..5000 {
            if gate.waiting.get() == 3 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!((gate.in_flight.get(), gate.waiting.get()), (2, 3));
        // Two running, three waiting: the queue is full.
        assert_eq!(auth.check("alice", "another").await, Outcome::Overloaded);
        assert_eq!(auth.check("alice", "password").await, Outcome::Overloaded);
        assert_eq!(gate.overloaded.get(), 2);
        drop(held);
        for t in tasks {
            assert_eq!(t.await.unwrap(), Outcome::Denied);
        }
        assert_eq!(gate.in_flight_max.get(), 2, "never more than the slots");
        assert_eq!((gate.in_flight.get(), gate.waiting.get()), (0, 0));
        // Served again once the queue drains.
        assert_eq!(auth.check("alice", "password").await, Outcome::Allowed);
    }

    /// Requests that go away while they wait for a slot (the client hung up) give back
    /// their count in the waiting gauge and their place in the queue.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancelled_waiting_checks_leave_no_count_behind() {
        let gate = Arc::new(Gate::new(1, 8));
        let auth = alice(gate.clone());
        let held = gate.slot().await.unwrap();
        let tasks: Vec<_> = (0..6)
            .map(|i| {
                let auth = auth.clone();
                tokio::spawn(async move { auth.check("alice", &format!("wrong{i}")).await })
            })
            .collect();
        for _ in 0..5000 {
            if gate.waiting.get() == 6 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(gate.waiting.get(), 6);
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            assert!(t.await.unwrap_err().is_cancelled());
        }
        assert_eq!((gate.in_flight.get(), gate.waiting.get()), (1, 0));
        // Every place in the queue is free again: 1 slot + 8 waiting, the held one aside.
        assert_eq!(gate.admitted.available_permits(), 8);
        drop(held);
        assert_eq!((gate.in_flight.get(), gate.waiting.get()), (0, 0));
        assert_eq!(gate.in_flight_max.get(), 1);
    }
}
