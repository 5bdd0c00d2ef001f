//! The range chain: a lock-free queue of committed ID ranges that many
//! processes take IDs from at once.
//!
//! A tag's slot in shared memory holds one `RangeChain`. The refill worker
//! appends ranges it has durably committed in `id_segment` (the *publisher*,
//! one at a time); every backend takes IDs from the front (the *takers*).
//! Nothing here knows about PostgreSQL: the struct is `repr(C)` plain atomics,
//! so it can live in shared memory, and it is tested with threads.
//!
//! # Protocol
//!
//! * `cursor` packs `(range number mod 2^24, offset)` into one `u64`. A take
//!   is one `fetch_add(1)` on it: the offset it returns is the taker's own,
//!   so no two takers ever get the same `(range, offset)`, hence the same ID.
//! * Range `n` lives in `ring[n % RING]` as `(seq = n, first, len, mark)`,
//!   written under a sequence lock (`seq = BUSY` while the fields change), so
//!   a taker that reads a ring entry that is being reused sees `seq`
//!   mismatch, drops its offset (a gap, never a duplicate) and retries.
//! * A taker whose offset is past its range's `len` tries to move `cursor`
//!   to `(n + 1, 0)` with a compare-and-swap, if range `n + 1` is published.
//!   If not, the chain is empty and the caller must wait for a refill.
//! * The publisher writes range `p + 1` only while `p + 1 < current + RING`,
//!   so the entry it overwrites belongs to a range that is already used up.
//!
//! Within one taker, IDs strictly increase: offsets grow within a range and
//! published ranges strictly increase (`publish` refuses anything else).
//!
//! The 24-bit range number in `cursor` wraps after 16,777,216 refills; a
//! taker would have to stall between its `fetch_add` and its read of the
//! ring for that many refills to be confused, and even then the sequence
//! lock's full 64-bit `seq` comparison would reject the entry.

use std::sync::atomic::{fence, AtomicI64, AtomicU64, Ordering};

/// Ranges the ring can hold: the current one and up to `RING - 1` ahead.
pub const RING: usize = 8;

const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
const RANGE_NO_MASK: u64 = (1 << (64 - OFFSET_BITS)) - 1;

/// Longest range one publish may carry. Half the offset space, so that the
/// offsets handed to takers racing past the end of a range never carry into
/// the range-number bits.
pub const MAX_RANGE_LEN: u64 = 1 << (OFFSET_BITS - 1);

/// `seq` of a ring entry whose fields are being rewritten.
const BUSY: u64 = u64::MAX;

#[inline]
fn pack(range_no: u64, offset: u64) -> u64 {
    ((range_no & RANGE_NO_MASK) << OFFSET_BITS) | offset
}

#[inline]
fn unpack(cursor: u64) -> (u64, u64) {
    (cursor >> OFFSET_BITS, cursor & OFFSET_MASK)
}

/// Recover the full range number from its 24-bit image in `cursor`, given
/// the number of ranges published (the current range is never ahead of it).
#[inline]
fn widen(range_no_bits: u64, published: u64) -> u64 {
    published.wrapping_sub(published.wrapping_sub(range_no_bits) & RANGE_NO_MASK)
}

#[repr(C)]
struct RangeEntry {
    seq: AtomicU64,
    first: AtomicI64,
    len: AtomicU64,
    /// Offset whose taker asks for the next refill (see `Taken::hit_mark`).
    mark: AtomicU64,
}

/// One ID handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub id: i64,
    /// This taker crossed the range's prefetch mark: exactly one taker per
    /// range sees `true`, and should wake the refill worker.
    pub hit_mark: bool,
}

/// Why a range could not be published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishError {
    /// `RING - 1` ranges are already waiting behind the current one.
    Full,
    /// The range does not lie strictly above every ID already published.
    NotAbove { high_water: i64 },
    /// Empty, longer than `MAX_RANGE_LEN`, or past `i64::MAX`.
    BadLength,
}

/// What the chain holds, for the status view and the refill policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChainStatus {
    /// First ID and length of the range IDs are taken from now (0, 0: none).
    pub current_first: i64,
    pub current_len: u64,
    /// IDs of the current range already handed out (at most `current_len`).
    pub current_used: u64,
    /// Ranges published behind the current one, and the IDs they hold.
    pub ranges_ahead: u64,
    pub ids_ahead: u64,
    /// Ranges published since start.
    pub published: u64,
    /// Largest ID any published range holds (0 before the first publish).
    pub high_water: i64,
    /// IDs handed out or skipped in ranges already left behind.
    pub retired_ids: u64,
}

impl ChainStatus {
    pub fn remaining(&self) -> u64 {
        self.current_len - self.current_used + self.ids_ahead
    }
}

#[repr(C)]
pub struct RangeChain {
    cursor: AtomicU64,
    published: AtomicU64,
    high_water: AtomicI64,
    retired_ids: AtomicU64,
    ring: [RangeEntry; RING],
}

/// Outcome of trying to leave an exhausted range.
enum Advance {
    /// The cursor moved (by us or by someone else): take again.
    Retry,
    /// No range is published beyond the current one.
    Empty,
}

impl Default for RangeChain {
    fn default() -> Self {
        Self::new()
    }
}

impl RangeChain {
    /// An empty chain: the cursor points at range 0, which is empty.
    pub fn new() -> Self {
        RangeChain {
            cursor: AtomicU64::new(pack(0, 0)),
            published: AtomicU64::new(0),
            high_water: AtomicI64::new(i64::MIN),
            retired_ids: AtomicU64::new(0),
            ring: std::array::from_fn(|_| RangeEntry {
                seq: AtomicU64::new(0),
                first: AtomicI64::new(0),
                len: AtomicU64::new(0),
                mark: AtomicU64::new(u64::MAX),
            }),
        }
    }

    /// Reads range `range_no_bits`'s entry, or `None` if the ring slot holds
    /// another range (reused, or being rewritten).
    #[inline]
    fn read_entry(&self, range_no_bits: u64) -> Option<(i64, u64, u64)> {
        let entry = &self.ring[(range_no_bits as usize) % RING];
        let seq_before = entry.seq.load(Ordering::Acquire);
        if seq_before & RANGE_NO_MASK != range_no_bits || seq_before == BUSY {
            return None;
        }
        let first = entry.first.load(Ordering::Relaxed);
        let len = entry.len.load(Ordering::Relaxed);
        let mark = entry.mark.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let seq_after = entry.seq.load(Ordering::Relaxed);
        (seq_after == seq_before).then_some((first, len, mark))
    }

    /// Takes the next ID, or `None` when every published range is used up.
    #[inline]
    pub fn take(&self) -> Option<Taken> {
        loop {
            let (range_no_bits, offset) = unpack(self.cursor.fetch_add(1, Ordering::AcqRel));
            if let Some((first, len, mark)) = self.read_entry(range_no_bits) {
                if offset < len {
                    return Some(Taken {
                        id: first + offset as i64,
                        hit_mark: offset == mark,
                    });
                }
            }
            match self.advance(range_no_bits) {
                Advance::Retry => continue,
                Advance::Empty => return None,
            }
        }
    }

    /// Moves the cursor off the used-up range `range_no_bits` onto the next
    /// published one.
    #[cold]
    fn advance(&self, range_no_bits: u64) -> Advance {
        loop {
            let cursor = self.cursor.load(Ordering::Acquire);
            let (now_bits, _) = unpack(cursor);
            if now_bits != range_no_bits {
                return Advance::Retry;
            }
            let published = self.published.load(Ordering::Acquire);
            let current = widen(range_no_bits, published);
            if current >= published {
                return Advance::Empty;
            }
            let left_len = self.read_entry(range_no_bits).map_or(0, |(_, len, _)| len);
            if self
                .cursor
                .compare_exchange(
                    cursor,
                    pack(current + 1, 0),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                self.retired_ids.fetch_add(left_len, Ordering::Relaxed);
                return Advance::Retry;
            }
        }
    }

    /// Appends the committed range `[first, first + len)`, whose taker at
    /// offset `mark` will be told to ask for the next refill.
    ///
    /// Only one publisher may run at a time (the caller serialises).
    pub fn publish(&self, first: i64, len: u64, mark: u64) -> Result<(), PublishError> {
        if len == 0 || len > MAX_RANGE_LEN || first.checked_add(len as i64 - 1).is_none() {
            return Err(PublishError::BadLength);
        }
        let high_water = self.high_water.load(Ordering::Relaxed);
        if first <= high_water {
            return Err(PublishError::NotAbove { high_water });
        }
        let published = self.published.load(Ordering::Relaxed);
        let (current_bits, _) = unpack(self.cursor.load(Ordering::Acquire));
        let current = widen(current_bits, published);
        let next = published + 1;
        if next >= current + RING as u64 {
            return Err(PublishError::Full);
        }
        let entry = &self.ring[(next as usize) % RING];
        entry.seq.store(BUSY, Ordering::Relaxed);
        fence(Ordering::Release);
        entry.first.store(first, Ordering::Relaxed);
        entry.len.store(len, Ordering::Relaxed);
        entry.mark.store(mark.min(len - 1), Ordering::Relaxed);
        entry.seq.store(next, Ordering::Release);
        self.high_water
            .store(first + (len as i64 - 1), Ordering::Relaxed);
        self.published.store(next, Ordering::Release);
        Ok(())
    }

    /// Throws away the current range and every range ahead (their IDs become
    /// a gap); the next take finds the chain empty. Used when the row the
    /// ranges came from is gone. `forget_high_water` also lets the next
    /// publish start below the old ranges (the table itself was replaced).
    ///
    /// Serialised with `publish` by the caller.
    pub fn discard(&self, forget_high_water: bool) {
        let published = self.published.load(Ordering::Acquire);
        let mut cursor = self.cursor.load(Ordering::Acquire);
        loop {
            let exhausted = pack(published, MAX_RANGE_LEN);
            match self.cursor.compare_exchange(
                cursor,
                exhausted,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => cursor = now,
            }
        }
        if forget_high_water {
            self.high_water.store(i64::MIN, Ordering::Relaxed);
        }
    }

    /// A consistent-enough snapshot for monitoring and the refill policy:
    /// each field is exact at some moment during the call.
    pub fn status(&self) -> ChainStatus {
        let published = self.published.load(Ordering::Acquire);
        let (current_bits, offset) = unpack(self.cursor.load(Ordering::Acquire));
        let current = widen(current_bits, published);
        let (current_first, current_len) = match self.read_entry(current_bits) {
            Some((first, len, _)) if current > 0 => (first, len),
            _ => (0, 0),
        };
        let mut ids_ahead = 0;
        for range_no in current + 1..=published {
            if let Some((_, len, _)) = self.read_entry(range_no & RANGE_NO_MASK) {
                ids_ahead += len;
            }
        }
        let high_water = self.high_water.load(Ordering::Relaxed);
        ChainStatus {
            current_first,
            current_len,
            current_used: offset.min(current_len),
            ranges_ahead: published.saturating_sub(current),
            ids_ahead,
            published,
            high_water: high_water.max(0),
            retired_ids: self.retired_ids.load(Ordering::Relaxed),
        }
    }

    /// IDs handed out (or skipped as gaps) since start.
    pub fn ids_taken(&self) -> u64 {
        let status = self.status();
        status.retired_ids + status.current_used
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn empty_chain_gives_nothing() {
        let chain = RangeChain::new();
        assert_eq!(chain.take(), None);
        assert_eq!(chain.take(), None);
        assert_eq!(chain.status().remaining(), 0);
    }

    #[test]
    fn takes_a_range_in_order_then_runs_dry() {
        let chain = RangeChain::new();
        chain.publish(1, 3, 1).unwrap();
        let ids: Vec<_> = (0..3).map(|_| chain.take().unwrap()).collect();
        assert_eq!(ids.iter().map(|t| t.id).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(
            ids.iter().map(|t| t.hit_mark).collect::<Vec<_>>(),
            [false, true, false]
        );
        assert_eq!(chain.take(), None);
        chain.publish(11, 2, 0).unwrap();
        assert_eq!(chain.take().unwrap().id, 11);
        assert_eq!(chain.take().unwrap().id, 12);
        assert_eq!(chain.take(), None);
    }

    #[test]
    fn moves_to_the_range_ahead_without_a_gap_in_the_ahead_range() {
        let chain = RangeChain::new();
        chain.publish(1, 2, 0).unwrap();
        chain.publish(100, 2, 0).unwrap();
        let status = chain.status();
        assert_eq!(
            status.ranges_ahead, 2,
            "range 0 is current until the first take"
        );
        assert_eq!(status.remaining(), 4);
        let ids: Vec<_> = std::iter::from_fn(|| chain.take().map(|t| t.id)).collect();
        assert_eq!(ids, [1, 2, 100, 101]);
        assert_eq!(chain.ids_taken(), 4);
    }

    #[test]
    fn refuses_ranges_that_do_not_climb() {
        let chain = RangeChain::new();
        chain.publish(10, 5, 0).unwrap();
        assert_eq!(
            chain.publish(14, 5, 0),
            Err(PublishError::NotAbove { high_water: 14 })
        );
        assert_eq!(
            chain.publish(1, 1, 0),
            Err(PublishError::NotAbove { high_water: 14 })
        );
        assert_eq!(chain.publish(15, 0, 0), Err(PublishError::BadLength));
        assert_eq!(chain.publish(i64::MAX, 2, 0), Err(PublishError::BadLength));
        assert_eq!(
            chain.publish(15, MAX_RANGE_LEN + 1, 0),
            Err(PublishError::BadLength)
        );
        chain.publish(15, 1, 0).unwrap();
    }

    #[test]
    fn ring_fills_up_until_the_current_range_moves() {
        let chain = RangeChain::new();
        assert_eq!(chain.take(), None);
        for i in 0..(RING as i64 - 1) {
            chain.publish(i * 10 + 1, 10, 5).unwrap();
        }
        // Range 0 (empty) is still current: it holds the eighth ring entry.
        assert_eq!(chain.publish(1000, 10, 5), Err(PublishError::Full));
        for _ in 0..10 {
            chain.take().unwrap();
        }
        chain.publish(1000, 10, 5).unwrap();
        // Range 1 is used up but not yet left.
        assert_eq!(chain.publish(2000, 10, 5), Err(PublishError::Full));
        assert_eq!(chain.take().unwrap().id, 11);
        chain.publish(2000, 10, 5).unwrap();
    }

    #[test]
    fn discard_drops_everything_and_can_forget_the_high_water() {
        let chain = RangeChain::new();
        chain.publish(1, 10, 5).unwrap();
        chain.publish(11, 10, 5).unwrap();
        assert_eq!(chain.take().unwrap().id, 1);
        chain.discard(false);
        assert_eq!(chain.take(), None);
        assert!(chain.publish(5, 1, 0).is_err());
        chain.publish(21, 1, 0).unwrap();
        assert_eq!(chain.take().unwrap().id, 21);
        chain.discard(true);
        chain.publish(1, 3, 0).unwrap();
        assert_eq!(chain.take().unwrap().id, 1);
    }

    #[test]
    fn widen_recovers_range_numbers_across_the_wrap() {
        let published = (RANGE_NO_MASK + 1) * 3 + 2;
        assert_eq!(widen(published & RANGE_NO_MASK, published), published);
        assert_eq!(
            widen((published - 5) & RANGE_NO_MASK, published),
            published - 5
        );
    }

    #[test]
    fn survives_the_range_number_wrap() {
        let chain = RangeChain::new();
        // Pretend 2^24 - 2 ranges came before.
        let start = RANGE_NO_MASK - 1;
        chain.published.store(start, Ordering::Relaxed);
        chain
            .cursor
            .store(pack(start, MAX_RANGE_LEN), Ordering::Relaxed);
        let mut expected = Vec::new();
        for i in 0..6i64 {
            chain.publish(i * 2 + 1, 2, 0).unwrap();
            expected.extend([i * 2 + 1, i * 2 + 2]);
        }
        let ids: Vec<_> = std::iter::from_fn(|| chain.take().map(|t| t.id)).collect();
        assert_eq!(ids, expected);
    }

    /// Many takers, one publisher publishing tiny ranges as fast as it can:
    /// every ID handed out is distinct, each taker's IDs strictly increase,
    /// every handed-out ID lies in a published range, and each range's mark
    /// is hit at most once (almost always exactly once).
    #[test]
    fn threads_never_get_the_same_id() {
        const TAKERS: usize = 4;
        const RANGES: i64 = 20_000;
        const LEN: u64 = 7;
        let chain = Arc::new(RangeChain::new());
        let done = Arc::new(AtomicBool::new(false));
        let takers: Vec<_> = (0..TAKERS)
            .map(|_| {
                let chain = chain.clone();
                let done = done.clone();
                std::thread::spawn(move || {
                    let mut ids = Vec::new();
                    let mut marks = 0u64;
                    loop {
                        match chain.take() {
                            Some(t) => {
                                ids.push(t.id);
                                marks += t.hit_mark as u64;
                            }
                            None if done.load(Ordering::Acquire) => {
                                if chain.take().is_none() {
                                    break;
                                }
                            }
                            None => std::hint::spin_loop(),
                        }
                    }
                    (ids, marks)
                })
            })
            .collect();
        let mut published = 0;
        while published < RANGES {
            // Ranges start at multiples of 10 and hold 7 IDs: an ID ending
            // in 7, 8 or 9 was never published.
            match chain.publish(published * 10, LEN, 3) {
                Ok(()) => published += 1,
                Err(PublishError::Full) => std::hint::spin_loop(),
                Err(e) => panic!("{e:?}"),
            }
        }
        done.store(true, Ordering::Release);
        let mut all = HashSet::new();
        let mut marks = 0;
        for taker in takers {
            let (ids, taker_marks) = taker.join().unwrap();
            marks += taker_marks;
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "a taker's IDs went backwards"
            );
            for id in ids {
                assert!(id % 10 < LEN as i64, "{id} was never published");
                assert!(all.insert(id), "{id} handed out twice");
            }
        }
        // A taker preempted between its fetch_add and its read of the ring
        // for RING ranges loses its ID (a gap): rare, never a duplicate.
        let total = RANGES as u64 * LEN;
        assert!(
            all.len() as u64 * 100 >= total * 99,
            "only {} of {total} IDs taken",
            all.len()
        );
        assert!(
            marks <= RANGES as u64 && marks * 100 >= RANGES as u64 * 99,
            "marks hit: {marks}"
        );
    }
}
