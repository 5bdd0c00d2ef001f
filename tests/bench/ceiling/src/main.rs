//! Ops per second of pg_idgen's lock-free cores, outside PostgreSQL, with 1
//! and 2 threads, beside a bare `AtomicU64::fetch_add` on one shared
//! counter and the lock-based double buffer of Meituan Leaf and the
//! URL-shortener article (a `parking_lot::Mutex` around the current and the
//! next segment). The segment fast path twice: the range chain alone (one
//! `fetch_add` on the tag's shared ticket counter per ID), and each thread
//! with a `BackendBlock` of its own taking from the same kind of chain as
//! `segment_nextval` does (`sql.rs`'s `take_one`): single IDs while a thread
//! draws alone, a block of up to `MAX_BLOCK` while threads contend. Prints
//! one line per measurement: `name threads value` — ops per second, but for
//! `backend_block_ids_per_take`, the IDs each take from the chain gave on
//! average (1 while a thread draws alone).

#![allow(dead_code)]

// The modules are pg_idgen's own files; `generator` finds `layout` as its
// sibling (`super::layout`), as it does in the extension.
#[path = "../../../../src/segment/backend_block.rs"]
mod backend_block;
#[path = "../../../../src/segment/chain.rs"]
mod chain;
#[path = "../../../../src/snowflake/generator.rs"]
mod generator;
#[path = "../../../../src/snowflake/layout.rs"]
mod layout;

use backend_block::BackendBlock;
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
    measure_each(threads, || (), move |_| op()).0
}

/// Runs `op` on `threads` threads for `RUN`, each thread on a state of its
/// own made by `init` (a backend's memory); returns total ops per second
/// and the threads' states at the end.
fn measure_each<S: Send + 'static>(
    threads: usize,
    init: impl Fn() -> S + Sync + Send + 'static,
    op: impl Fn(&mut S) + Sync + Send + 'static,
) -> (f64, Vec<S>) {
    let (init, op) = (Arc::new(init), Arc::new(op));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (init, op, stop, start) = (init.clone(), op.clone(), stop.clone(), start.clone());
            std::thread::spawn(move || {
                let mut state = init();
                start.wait();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        op(&mut state);
                    }
                    n += 256;
                }
                (n, state)
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    std::thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    let (counts, states): (Vec<u64>, Vec<S>) =
        workers.into_iter().map(|w| w.join().unwrap()).unzip();
    let total: u64 = counts.into_iter().sum();
    (total as f64 / began.elapsed().as_secs_f64(), states)
}

/// A slot's generation, on a cache line of its own as in the registry's
/// `Slot` (where the tag's text lies between it and the chain).
#[repr(align(64))]
struct Generation(AtomicU64);

/// The generation the slot has throughout (`sql.rs` checks it per ID).
const GENERATION: u64 = 1;

/// A backend's memory: its block of the tag, and how many takes from the
/// chain it made.
#[derive(Default)]
struct Backend {
    block: BackendBlock,
    chain_takes: u64,
    ids: u64,
}

/// One ID the way `sql.rs`'s `take_one` (and the slot's `take_for` and
/// `take_block_for`) take it: from the backend's block while the slot keeps
/// its generation, else from the chain — one ID, or a block of the size the
/// `BackendBlock` asks for.
#[inline]
fn take_one(chain: &RangeChain, generation: &Generation, backend: &mut Backend) -> Option<i64> {
    backend.ids += 1;
    let block = &mut backend.block;
    if block.is_for(0, GENERATION) {
        if generation.0.load(Ordering::Acquire) != GENERATION {
            block.clear();
            return None;
        }
        if let Some(id) = block.next_id() {
            return Some(id);
        }
    }
    let size = if block.is_for(0, GENERATION) {
        block.size()
    } else {
        1
    };
    backend.chain_takes += 1;
    if size <= 1 {
        let taken = chain.take();
        if generation.0.load(Ordering::Acquire) != GENERATION {
            return None;
        }
        let id = taken?.id;
        block.took_one(0, GENERATION, id);
        Some(id)
    } else {
        let taken = chain.take_block(size);
        if generation.0.load(Ordering::Acquire) != GENERATION {
            return None;
        }
        block.took(0, GENERATION, &taken?)
    }
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

        // The same, each thread a backend with a block of its own.
        let chain = Arc::new(RangeChain::new());
        chain.publish(1, MAX_RANGE_LEN, u64::MAX).unwrap();
        let generation = Arc::new(Generation(AtomicU64::new(GENERATION)));
        let (ops, backends) = measure_each(threads, Backend::default, move |backend| {
            std::hint::black_box(take_one(&chain, &generation, backend));
        });
        println!("backend_block_take {threads} {ops:.0}");
        let (ids, takes) = backends
            .iter()
            .fold((0, 0), |(i, t), b| (i + b.ids, t + b.chain_takes));
        println!(
            "backend_block_ids_per_take {threads} {:.1}",
            ids as f64 / takes.max(1) as f64
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
