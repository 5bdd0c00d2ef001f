//! A backend's own block of a hot tag's IDs, as a sequence's `CACHE` gives
//! each backend a block — but only while backends contend. Pure: a
//! `BackendBlock` holds IDs a `RangeChain::take_block` gave, hands them out
//! one at a time, and decides how many to take next; `sql.rs` keeps one per
//! slot in backend-local memory.
//!
//! Why: every take from a tag's chain is a `fetch_add` on one shared cache
//! line (`chain.rs`). Two backends drawing one tag at full speed bounce that
//! line between their cores at every ID, and lose a third of their
//! throughput to each other; more cores lose more. Taking `size` IDs per
//! `fetch_add` divides that cost by `size`, so the call stays one
//! backend-local increment — a hot tag scales with backends as the bare
//! query does, up to the core count, because the shared line is touched
//! once per block.
//!
//! # Rules
//!
//! * **Adapts to contention.** A block starts at one ID. A take whose first
//!   ID is not the one after this backend's last (another backend took in
//!   between — or, rarely, the chain moved to a range that is not
//!   contiguous) doubles the next block, up to `MAX_BLOCK`; a take with no
//!   one in between halves it. A backend drawing alone keeps taking single
//!   IDs, so it sees no gap that it would not see without blocks.
//! * **Order.** Within a backend, IDs strictly increase: a block's IDs are
//!   above every ID the backend took before (its tickets are later), and
//!   `sql.rs` gives up (a gap) a backend's block whenever it takes from the
//!   chain by another path (a batch, a reservation, a block of another call
//!   site shares the same block since it is per slot). Across backends IDs
//!   are trend-increasing, as they already were.
//! * **Never twice.** A block holds IDs the chain handed to this backend
//!   alone; `sql.rs` hands one out only while the slot's generation is the
//!   one the block was taken under (a `segment_setval`, a drop, a slot
//!   taken over discard it).
//! * **Bounded loss.** What a backend's exit or crash loses is the rest of
//!   its block: at most `MAX_BLOCK - 1` IDs, and only while backends
//!   contend — a sequence with `CACHE 256` loses as much at every exit.

use super::chain::TakenBlock;

/// The largest block a backend takes: its exit loses at most this many
/// IDs less one, as a sequence's `CACHE` of this size would.
pub const MAX_BLOCK: u64 = 256;

/// IDs of one slot held by this backend (`sql.rs` keeps one per slot).
/// `repr(C, align(64))`: the fields every call reads come first, in one
/// cache line of their own; the runs a block holds come last.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub struct BackendBlock {
    /// The slot and generation the IDs were taken under.
    pub index: usize,
    pub generation: u64,
    /// The ID after the last one this backend took, if `has_last` (a
    /// plain pair rather than an `Option`: `took_single` reads one word).
    after_last: i64,
    has_last: bool,
    /// True only while the size is one, the block holds no ID and a last
    /// ID is known (it may lag false until the next take settles it): what
    /// `takes_single` reads instead of the five fields.
    single: bool,
    /// How many IDs the next take asks for.
    size: u64,
    /// The run handed out from, and the next ID of it with how many left.
    left: u64,
    next: i64,
    run: usize,
    count: usize,
    /// The size `sql.rs` last wrote to the slot's `block_size` statistic.
    pub reported_size: u64,
    runs: [(i64, u64); super::chain::RING],
}

impl Default for BackendBlock {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl BackendBlock {
    /// No IDs, of no slot.
    pub const EMPTY: BackendBlock = BackendBlock {
        index: usize::MAX,
        generation: 0,
        runs: [(0, 0); super::chain::RING],
        count: 0,
        run: 0,
        next: 0,
        left: 0,
        size: 1,
        after_last: 0,
        has_last: false,
        single: false,
        reported_size: 1,
    };

    /// Whether it holds IDs taken under slot `index`, `generation`.
    pub fn is_for(&self, index: usize, generation: u64) -> bool {
        self.index == index && self.generation == generation
    }

    /// The next ID of the block, if one is left.
    #[inline]
    pub fn next_id(&mut self) -> Option<i64> {
        loop {
            if self.left > 0 {
                let id = self.next;
                self.next += 1;
                self.left -= 1;
                return Some(id);
            }
            if self.run + 1 >= self.count {
                return None;
            }
            self.run += 1;
            (self.next, self.left) = self.runs[self.run];
        }
    }

    /// How many IDs to take next.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Gives up what is left (a gap), keeping the size and the position
    /// it adapts by.
    pub fn clear(&mut self) {
        self.count = 0;
        self.left = 0;
        self.settle();
    }

    /// Sets `single` from the fields it stands for.
    fn settle(&mut self) {
        self.single =
            self.size == 1 && self.left == 0 && self.run + 1 >= self.count && self.has_last;
    }

    /// Whether the next ID of slot `index`, `generation` is one taken
    /// alone from the chain: the block is of that slot, one ID, and holds
    /// none — a backend drawing the tag alone, the common case, which
    /// `took_single` keeps as cheap as a take without blocks.
    #[inline]
    pub fn takes_single(&self, index: usize, generation: u64) -> bool {
        self.single && self.is_for(index, generation)
    }

    /// The ID a `takes_single` block took from the chain: adapts, as
    /// `took_one` does (there is nothing to give up or retarget, and a
    /// size of one only changes when someone took in between).
    #[inline]
    pub fn took_single(&mut self, id: i64) {
        // `single` holds only with a last ID known.
        if id != self.after_last {
            self.adapt(id);
            self.single = false;
        }
        self.after_last = id.wrapping_add(1);
    }

    /// A single ID taken from the chain (the block is one ID): adapts.
    pub fn took_one(&mut self, index: usize, generation: u64, id: i64) {
        self.retarget(index, generation);
        self.adapt(id);
        self.took_last(id);
        self.clear();
    }

    /// IDs of slot `index`, `generation` up to `last` that this backend
    /// took by another path (a batch's chunk, a reservation), after giving
    /// the block up: its own, not another backend's, so the next take
    /// compares with the ID after them and sees no contention. (Without
    /// this, a backend alone that mixes the two would double its block at
    /// every take, and give each one up as a gap.)
    pub fn took_elsewhere(&mut self, index: usize, generation: u64, last: i64) {
        if self.is_for(index, generation) && self.has_last {
            self.after_last = last.wrapping_add(1);
        }
    }

    /// Records `last` as the last ID this backend took. After the largest
    /// ID there is none to take, so the wrap is never compared with one.
    fn took_last(&mut self, last: i64) {
        self.after_last = last.wrapping_add(1);
        self.has_last = true;
    }

    /// A block taken from the chain for slot `index`, `generation`:
    /// adapts, keeps it, and returns its first ID (`None`: empty).
    pub fn took(&mut self, index: usize, generation: u64, block: &TakenBlock) -> Option<i64> {
        let runs = block.runs();
        let (first, _) = *runs.first()?;
        self.retarget(index, generation);
        self.adapt(first);
        self.runs[..runs.len()].copy_from_slice(runs);
        self.count = runs.len();
        self.run = 0;
        (self.next, self.left) = self.runs[0];
        self.took_last(block.last_id()?);
        let first = self.next_id();
        self.settle();
        first
    }

    /// A block of another slot (or generation) starts its position anew.
    fn retarget(&mut self, index: usize, generation: u64) {
        if !self.is_for(index, generation) {
            self.index = index;
            self.generation = generation;
            self.has_last = false;
            self.size = 1;
        }
    }

    /// Doubles the next size when someone took between this backend's
    /// takes, halves it when no one did.
    #[inline]
    fn adapt(&mut self, first: i64) {
        let contended = self.has_last && first != self.after_last;
        self.size = match contended {
            true => (self.size * 2).min(MAX_BLOCK),
            false => (self.size / 2).max(1),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::chain::RangeChain;
    use std::sync::Arc;

    /// Takes one ID the way `sql.rs` does: from the block, else a new
    /// block (or a single ID when the size is one).
    fn take(chain: &RangeChain, block: &mut BackendBlock) -> Option<i64> {
        if block.takes_single(0, 1) {
            let taken = chain.take()?;
            block.took_single(taken.id);
            return Some(taken.id);
        }
        if let Some(id) = block.next_id() {
            return Some(id);
        }
        if block.size() <= 1 {
            let taken = chain.take()?;
            block.took_one(0, 1, taken.id);
            return Some(taken.id);
        }
        let taken = chain.take_block(block.size())?;
        block.took(0, 1, &taken)
    }

    #[test]
    fn a_backend_alone_takes_single_ids_and_leaves_no_gap() {
        let chain = RangeChain::new();
        chain.publish(1, 10_000, 9_000).unwrap();
        let mut block = BackendBlock::default();
        let ids: Vec<i64> = (0..5_000)
            .map(|_| take(&chain, &mut block).unwrap())
            .collect();
        assert_eq!(ids, (1..=5_000).collect::<Vec<_>>());
        assert_eq!(block.size(), 1);
    }

    /// Takes up to `n` IDs the way `sql.rs`'s `take_block` does for a
    /// batch or a reservation: the block given up first.
    fn take_batch(chain: &RangeChain, block: &mut BackendBlock, n: u64) -> Vec<i64> {
        block.clear();
        let Some(taken) = chain.take_block(n) else {
            return Vec::new();
        };
        if let Some(last) = taken.last_id() {
            block.took_elsewhere(0, 1, last);
        }
        taken
            .runs()
            .iter()
            .flat_map(|&(first, len)| first..first + len as i64)
            .collect()
    }

    #[test]
    fn a_backend_alone_mixing_batches_with_single_takes_leaves_no_gap() {
        let chain = RangeChain::new();
        chain.publish(1, 1_000_000, 900_000).unwrap();
        let mut block = BackendBlock::default();
        let mut ids = Vec::new();
        for round in 0..40 {
            ids.push(take(&chain, &mut block).unwrap());
            ids.extend(take_batch(&chain, &mut block, 1 + round % 3));
        }
        let expected: Vec<i64> = (1..=ids.len() as i64).collect();
        assert_eq!(
            ids, expected,
            "a gap: the backend's own batch read as contention"
        );
        assert_eq!(block.size(), 1);
    }

    #[test]
    fn contention_grows_the_block_and_its_end_shrinks_it() {
        let chain = RangeChain::new();
        chain.publish(1, 1_000_000, 900_000).unwrap();
        let (mut a, mut b) = (BackendBlock::default(), BackendBlock::default());
        for _ in 0..2_000 {
            take(&chain, &mut a).unwrap();
            take(&chain, &mut b).unwrap();
        }
        assert_eq!(a.size(), MAX_BLOCK);
        for _ in 0..5_000 {
            take(&chain, &mut a).unwrap();
        }
        assert_eq!(a.size(), 1, "alone again, the block shrank back to one ID");
        assert!(a.takes_single(0, 1), "alone again, takes go the single way");
        assert!(
            !a.takes_single(1, 1) && !a.takes_single(0, 2),
            "only for its slot"
        );
    }

    #[test]
    fn threads_with_blocks_take_every_id_once_in_order_losing_less_than_a_block_each() {
        let chain = Arc::new(RangeChain::new());
        let total: u64 = 400_000;
        chain.publish(1, total, total).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let chain = Arc::clone(&chain);
                std::thread::spawn(move || {
                    let mut block = BackendBlock::default();
                    let mut ids = Vec::new();
                    while let Some(id) = take(&chain, &mut block) {
                        ids.push(id);
                    }
                    ids
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in threads {
            let ids = t.join().unwrap();
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "a thread's IDs did not increase"
            );
            all.extend(ids);
        }
        let taken = all.len() as u64;
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len() as u64, taken, "an ID was handed out twice");
        // The chain ran dry: each thread lost at most the rest of its last
        // block, and a take on the empty chain spends no ID.
        assert!(total - taken < 4 * MAX_BLOCK, "{} IDs lost", total - taken);
    }

    #[test]
    fn a_block_of_several_runs_hands_them_out_in_order() {
        let chain = RangeChain::new();
        chain.publish(1, 3, 3).unwrap();
        chain.publish(100, 5, 5).unwrap();
        let taken = chain.take_block(8).unwrap();
        let mut block = BackendBlock::default();
        let first = block.took(0, 1, &taken);
        let mut ids = vec![first.unwrap()];
        while let Some(id) = block.next_id() {
            ids.push(id);
        }
        assert_eq!(ids, vec![1, 2, 3, 100, 101, 102, 103, 104]);
    }
}
