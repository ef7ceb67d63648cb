//! Basic auth under a flood of wrong passwords (issue 18): bcrypt checks never run more than
//! the exporter's bound at once, the excess past the queue gets 503 at once, and a client
//! that knows its password is still served throughout. Loopback only; every loop is bounded.

use crate::support;
use crate::support::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// From `htpasswd -nBC 10 alice`, password "password" (upstream's own test fixture).
const ALICE: &str = "$2y$10$CWCEbs7mt8QFrToJR9OcG.tduEKpx9SROhWnaDHQgQX4Q6hqWNASa";

fn basic(user_pass: &str) -> String {
    format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, user_pass)
    )
}

fn value(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn a_flood_of_wrong_passwords_stays_within_the_bound_and_a_right_client_is_served() {
    let (_dir, cfg) = temp_file("web.yml", format!("basic_auth_users:\n  alice: {ALICE}\n"));
    let e = Arc::new(
        exporter()
            .args(&["--web-config-file", cfg.to_str().unwrap()])
            .spawn(),
    );
    let right = basic("alice:password");
    let metrics = |e: &support::Exporter| e.get_with("/metrics", &[("Authorization", &right)]);
    // The right password is checked (and cached) before the flood, as a scraper's would be.
    e.wait_until(30, |e| metrics(e).0 == 200);
    let page = metrics(&e).1;
    let limit = value(&page, "dcgm_exporter_auth_checks_limit").expect("checks limit") as u64;
    let queue = value(&page, "dcgm_exporter_auth_checks_queue_limit").expect("queue") as u64;
    assert!(limit >= 1, "{page}");

    // More clients than may run and wait together, each with its own wrong passwords.
    let clients = limit + queue + 16;
    let stop = Arc::new(AtomicBool::new(false));
    let (denied, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let flood: Vec<_> = (0..clients)
        .map(|c| {
            let (e, stop) = (e.clone(), stop.clone());
            let (denied, refused) = (denied.clone(), refused.clone());
            std::thread::spawn(move || {
                for i in 0..400 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let auth = basic(&format!("alice:wrong-{c}-{i}"));
                    match e.get_with("/metrics", &[("Authorization", &auth)]).0 {
                        401 => {
                            denied.fetch_add(1, Ordering::Relaxed);
                        }
                        503 => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            // As Retry-After asks, if not for as long.
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        other => panic!("a wrong password got {other}"),
                    }
                }
            })
        })
        .collect();

    // The right client scrapes throughout and reads the counters; bounded by a deadline.
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut served, mut saw_full, mut saw_overload) = (0u32, false, false);
    while !(served >= 20 && saw_full && saw_overload) {
        assert!(
            Instant::now() < deadline,
            "flood did not reach the bound: served {served}, full {saw_full}, overload \
             {saw_overload}, 401s {}, 503s {}",
            denied.load(Ordering::Relaxed),
            refused.load(Ordering::Relaxed)
        );
        let (status, page) = metrics(&e);
        assert_eq!(status, 200, "the right password during the flood: {page}");
        served += 1;
        let in_flight = value(&page, "dcgm_exporter_auth_checks_in_flight").unwrap();
        let max = value(&page, "dcgm_exporter_auth_checks_in_flight_max").unwrap();
        let waiting = value(&page, "dcgm_exporter_auth_checks_waiting").unwrap();
        let overload = value(&page, "dcgm_exporter_auth_rejected_overload_total").unwrap();
        assert!(
            in_flight <= limit as f64 && max <= limit as f64,
            "checks in flight {in_flight}, max {max}, bound {limit}"
        );
        assert!(waiting <= queue as f64, "waiting {waiting} > {queue}");
        saw_full |= max == limit as f64;
        saw_overload |= overload > 0.0;
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for t in flood {
        t.join().expect("a flood client panicked");
    }
    assert!(
        denied.load(Ordering::Relaxed) > 0,
        "no wrong password was checked"
    );
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "the queue never overflowed"
    );
    // After the flood: the bound held over the whole run, and the right client still gets in.
    let (status, page) = metrics(&e);
    assert_eq!(status, 200);
    assert_eq!(
        value(&page, "dcgm_exporter_auth_checks_in_flight_max"),
        Some(limit as f64),
        "{page}"
    );
}

/// Issue 30: clients that hang up while their password check waits for a slot give their
/// place back: `dcgm_exporter_auth_checks_waiting` and `..._in_flight` return to 0, and the
/// queue admits as many as before. Before, each check cancelled while waiting left its count
/// in the waiting gauge for good.
#[test]
fn checks_cancelled_while_queued_leave_no_count_behind() {
    use std::io::Write;
    let (_dir, cfg) = temp_file("web.yml", format!("basic_auth_users:\n  alice: {ALICE}\n"));
    let e = exporter()
        .args(&["--web-config-file", cfg.to_str().unwrap()])
        .spawn();
    let right = basic("alice:password");
    let page = |e: &support::Exporter| {
        let (status, page) = e.get_with("/metrics", &[("Authorization", &right)]);
        assert_eq!(status, 200, "{page}");
        page
    };
    e.wait_until(30, |e| {
        e.get_with("/metrics", &[("Authorization", &right)]).0 == 200
    });
    let first = page(&e);
    let queue = value(&first, "dcgm_exporter_auth_checks_queue_limit").unwrap() as usize;
    let limit = value(&first, "dcgm_exporter_auth_checks_limit").unwrap() as usize;

    for round in 0..3 {
        // Every place to run and to wait taken by a wrong password (one bcrypt check each),
        // then every client hangs up while most of them still wait.
        let clients: Vec<std::net::TcpStream> = (0..limit + queue)
            .map(|i| {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", e.port)).unwrap();
                let auth = basic(&format!("alice:wrong-{round}-{i}"));
                write!(
                    s,
                    "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\r\n"
                )
                .unwrap();
                s
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        while value(&page(&e), "dcgm_exporter_auth_checks_waiting").unwrap() < 1.0 {
            assert!(Instant::now() < deadline, "no check ever waited");
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(clients);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let p = page(&e);
            let waiting = value(&p, "dcgm_exporter_auth_checks_waiting").unwrap();
            let in_flight = value(&p, "dcgm_exporter_auth_checks_in_flight").unwrap();
            if (waiting, in_flight) == (0.0, 0.0) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: {waiting} waiting and {in_flight} in flight 30 s after every \
                 client hung up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // The queue still admits a wrong password (checked, 401), not 503.
    let wrong = basic("alice:wrong-after");
    assert_eq!(e.get_with("/metrics", &[("Authorization", &wrong)]).0, 401);
}
