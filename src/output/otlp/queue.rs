//! The bounded queue between the collection thread (which encodes each push and never
//! waits) and the sender thread: at most `capacity` pushes and `max_bytes` bytes; a push
//! that does not fit drops the oldest ones, which are counted. At a clean exit the queue is
//! finished: the sender empties it until a deadline, then it is closed.

use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// One encoded `ExportMetricsServiceRequest`.
#[derive(Clone, Debug)]
pub(super) struct Batch {
    pub body: Bytes,
    pub points: usize,
}

#[derive(Default)]
struct State {
    items: VecDeque<Batch>,
    bytes: usize,
    closed: bool,
    /// Set by [`Queue::finish`]: what is queued is sent by then, nothing is waited for.
    flush_by: Option<Instant>,
}

pub(super) struct Queue {
    state: Mutex<State>,
    wake: Condvar,
    capacity: usize,
    max_bytes: usize,
}

impl Queue {
    pub(super) fn new(capacity: usize, max_bytes: usize) -> Queue {
        Queue {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            capacity: capacity.max(1),
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `batch`, dropping the oldest until it fits (the newest is always kept); answers
    /// the dropped pushes.
    pub(super) fn push(&self, batch: Batch) -> Vec<Batch> {
        let mut s = self.lock();
        let mut dropped = Vec::new();
        while !s.items.is_empty()
            && (s.items.len() >= self.capacity || s.bytes + batch.body.len() > self.max_bytes)
        {
            if let Some(old) = s.items.pop_front() {
                s.bytes -= old.body.len();
                dropped.push(old);
            }
        }
        s.bytes += batch.body.len();
        s.items.push_back(batch);
        drop(s);
        self.wake.notify_all();
        dropped
    }

    /// The oldest push, waiting for one; `None` once closed, or once finished and empty.
    pub(super) fn pop(&self) -> Option<Batch> {
        let mut s = self.lock();
        loop {
            if s.closed {
                return None;
            }
            if let Some(b) = s.items.pop_front() {
                s.bytes -= b.body.len();
                return Some(b);
            }
            if s.flush_by.is_some() {
                return None;
            }
            s = self.wake.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits `d` (a back-off) unless the queue is closed or finished first (a flush does
    /// not wait out a back-off); `false` when closed.
    pub(super) fn sleep(&self, d: Duration) -> bool {
        let s = self.lock();
        let finished = s.flush_by.is_some();
        let (s, _) = self
            .wake
            .wait_timeout_while(s, d, |s| !s.closed && s.flush_by.is_some() == finished)
            .unwrap_or_else(|p| p.into_inner());
        !s.closed
    }

    /// The exit has begun: what is queued is to be sent by `deadline`; wakes the sender.
    pub(super) fn finish(&self, deadline: Instant) {
        self.lock().flush_by = Some(deadline);
        self.wake.notify_all();
    }

    /// The deadline set by [`Queue::finish`], once the exit has begun.
    pub(super) fn flush_by(&self) -> Option<Instant> {
        self.lock().flush_by
    }

    /// Takes every push still queued.
    pub(super) fn drain(&self) -> Vec<Batch> {
        let mut s = self.lock();
        s.bytes = 0;
        s.items.drain(..).collect()
    }

    /// Pushes and bytes waiting.
    pub(super) fn len(&self) -> (usize, usize) {
        let s = self.lock();
        (s.items.len(), s.bytes)
    }

    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize) -> Batch {
        Batch {
            body: Bytes::from(vec![0u8; n]),
            points: n,
        }
    }

    #[test]
    fn a_full_queue_drops_the_oldest_and_keeps_the_newest() {
        let q = Queue::new(3, 1000);
        for i in 1..=3 {
            assert!(q.push(batch(i)).is_empty());
        }
        let dropped = q.push(batch(4));
        assert_eq!(dropped.iter().map(|b| b.points).collect::<Vec<_>>(), [1]);
        assert_eq!(q.len(), (3, 2 + 3 + 4));
        assert_eq!(q.pop().unwrap().points, 2);
    }

    #[test]
    fn the_byte_bound_holds_and_a_huge_push_still_goes_alone() {
        let q = Queue::new(100, 10);
        q.push(batch(4));
        q.push(batch(4));
        let dropped = q.push(batch(4));
        assert_eq!(dropped.len(), 1);
        assert_eq!(q.len(), (2, 8));
        let dropped = q.push(batch(50));
        assert_eq!(dropped.len(), 2);
        assert_eq!(q.len(), (1, 50));
    }

    #[test]
    fn close_wakes_a_sleeper_and_a_waiting_pop() {
        let q = std::sync::Arc::new(Queue::new(1, 10));
        let q2 = q.clone();
        let t = std::thread::spawn(move || (q2.pop().is_none(), q2.sleep(Duration::from_secs(60))));
        std::thread::sleep(Duration::from_millis(50));
        q.close();
        assert_eq!(t.join().unwrap(), (true, false));
    }

    #[test]
    fn a_finished_queue_still_yields_its_pushes_then_ends_and_cuts_a_back_off_short() {
        let q = std::sync::Arc::new(Queue::new(4, 100));
        q.push(batch(1));
        q.push(batch(2));
        let q2 = q.clone();
        let sleeper = std::thread::spawn(move || {
            let t0 = Instant::now();
            (q2.sleep(Duration::from_secs(60)), t0.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        q.finish(Instant::now() + Duration::from_secs(5));
        let (open, slept) = sleeper.join().unwrap();
        assert!(open && slept < Duration::from_secs(60), "{slept:?}");
        assert!(q.flush_by().is_some());
        assert_eq!(q.pop().map(|b| b.points), Some(1));
        assert_eq!(q.pop().map(|b| b.points), Some(2));
        // Empty and finished: the sender ends instead of waiting for more.
        assert!(q.pop().is_none());
        q.push(batch(3));
        assert_eq!(q.drain().len(), 1);
        assert_eq!(q.len(), (0, 0));
    }
}
