//! Ops per second of pg_idgen's lock-free cores, outside PostgreSQL, with 1
//! and 2 threads, beside a bare `AtomicU64::fetch_add` on one shared
//! counter and the lock-based double buffer of Meituan Leaf and the
//! URL-shortener article (a `parking_lot::Mutex` around the current and the
//! next segment). Prints one line per measurement: `name threads
//! ops_per_second`.

#![allow(dead_code)]

// The modules are pg_idgen's own files; `generator` finds `layout` as its
// sibling (`super::layout`), as it does in the extension.
#[path = "../../../../src/segment/chain.rs"]
mod chain;
#[path = "../../../../src/snowflake/generator.rs"]
mod generator;
#[path = "../../../../src/snowflake/layout.rs"]
mod layout;

use chain::{RangeChain, MAX_RANGE_LEN};
use generator::{Generator, WallClock};
use layout::{Layout, DEFAULT_EPOCH_MS};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const RUN: Duration = Duration::from_millis(700);

/// The double buffer of Meituan Leaf and the URL-shortener article, done
/// with a lock as they do it: a `Mutex` guards the current segment and the
/// one fetched ahead; each ID is one lock, one increment and one unlock.
/// Segments come from a counter standing in for `id_segment` (no waiting:
/// the ceiling of the design).
struct LockedDoubleBuffer {
    segments: parking_lot::Mutex<Segments>,
    max_id: AtomicU64,
    step: u64,
}

struct Segments {
    next_id: u64,
    end: u64,
    ahead: Option<(u64, u64)>,
}

impl LockedDoubleBuffer {
    fn new(step: u64) -> Self {
        LockedDoubleBuffer {
            segments: parking_lot::Mutex::new(Segments {
                next_id: 1,
                end: 1,
                ahead: None,
            }),
            max_id: AtomicU64::new(0),
            step,
        }
    }

    fn fetch_segment(&self) -> (u64, u64) {
        let first = self.max_id.fetch_add(self.step, Ordering::Relaxed) + 1;
        (first, first + self.step)
    }

    fn take(&self) -> u64 {
        let mut s = self.segments.lock();
        if s.next_id == s.end {
            let (first, end) = s.ahead.take().unwrap_or_else(|| self.fetch_segment());
            s.next_id = first;
            s.end = end;
        }
        let id = s.next_id;
        s.next_id += 1;
        // Past 80% of the segment: fetch the next one ahead (the mark Leaf and
        // the URL-shortener article use).
        if s.ahead.is_none() && (s.end - s.next_id) * 5 < self.step {
            s.ahead = Some(self.fetch_segment());
        }
        id
    }
}

/// Runs `op` on `threads` threads for `RUN`; returns total ops per second.
fn measure(threads: usize, op: impl Fn() + Sync + Send + 'static) -> f64 {
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (op, stop, start) = (op.clone(), stop.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        op();
                    }
                    n += 256;
                }
                n
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    std::thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    let total: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    total as f64 / began.elapsed().as_secs_f64()
}

/// The real clock, read exactly every call (no coarse shortcut).
struct ExactClock;
impl WallClock for ExactClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    }
    fn bounds_ms(&self) -> Option<(i64, i64)> {
        None
    }
    fn mono_ms(&self) -> i64 {
        0 // never read: the machine id is fixed
    }
}

/// A clock stopped at one millisecond: the state machine alone.
struct StoppedClock(i64);
impl WallClock for StoppedClock {
    fn now_ms(&self) -> i64 {
        self.0
    }
    fn bounds_ms(&self) -> Option<(i64, i64)> {
        Some((self.0, self.0))
    }
    fn mono_ms(&self) -> i64 {
        0 // never read: the machine id is fixed
    }
}

fn main() {
    for threads in [1, 2] {
        let counter = Arc::new(AtomicU64::new(0));
        let c = counter.clone();
        println!(
            "atomic_fetch_add {threads} {:.0}",
            measure(threads, move || {
                std::hint::black_box(c.fetch_add(1, Ordering::Relaxed));
            })
        );

        let locked = Arc::new(LockedDoubleBuffer::new(1000));
        let l = locked.clone();
        println!(
            "locked_double_buffer {threads} {:.0}",
            measure(threads, move || {
                std::hint::black_box(l.take());
            })
        );

        // One endless range: the fast path alone, no refills.
        let chain = Arc::new(RangeChain::new());
        chain.publish(1, MAX_RANGE_LEN, u64::MAX).unwrap();
        let ch = chain.clone();
        println!(
            "segment_chain_take {threads} {:.0}",
            measure(threads, move || {
                std::hint::black_box(ch.take());
            })
        );

        let layout = Layout::new(DEFAULT_EPOCH_MS, 41, 10, 12, 63).unwrap();
        let generator = Arc::new(Generator::new(layout, 1, None));
        generator.persisted(layout.max_time_ms());
        let g = generator.clone();
        println!(
            "snowflake_exact_clock {threads} {:.0}",
            measure(threads, move || {
                std::hint::black_box(g.next(&ExactClock, i64::MAX).ok());
            })
        );

        let generator = Arc::new(Generator::new(layout, 1, None));
        generator.persisted(layout.max_time_ms());
        let g = generator.clone();
        let stopped = StoppedClock(DEFAULT_EPOCH_MS + 1000);
        println!(
            "snowflake_state_machine {threads} {:.0}",
            measure(threads, move || {
                std::hint::black_box(g.next(&stopped, i64::MAX).ok());
            })
        );
    }
}
