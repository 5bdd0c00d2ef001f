//! The range chain: a lock-free queue of committed ID ranges that many
//! processes take IDs from at once.
//!
//! A tag's slot in shared memory holds one `RangeChain`. The refill worker
//! appends ranges it has durably committed in `id_segment` (the *publisher*,
//! one at a time); every backend takes IDs from the front (the *takers*).
//! Nothing here knows about PostgreSQL: the struct is `repr(C)` plain atomics,
//! so it can live in shared memory, and it is tested with threads.
//!
//! # Protocol: tickets
//!
//! * Every take is one `fetch_add` on `tickets`, a 64-bit counter that only
//!   grows. The ticket it returns is the taker's alone: no two takes, ever,
//!   get the same ticket.
//! * Every published range owns a half-open interval of tickets,
//!   `[start, start + len)`; ticket `start + k` means ID `first + k`. The
//!   intervals of different ranges never overlap: a new range starts at
//!   `max(end of the previous range, tickets issued so far)`.
//! * A taker looks for the ring entry whose interval holds its ticket. An
//!   entry is read under a sequence lock (`seq = BUSY` while it is being
//!   rewritten), so the taker sees its fields whole or not at all.
//!
//! A ticket belongs to at most one range and is held by exactly one taker,
//! so an ID is handed out at most once — by construction, with no window of
//! "improbable" interleavings: a taker stalled for any number of refills
//! finds its ticket in no entry (its range was overwritten) and takes
//! again, leaving a gap. A take on an empty chain also spends its ticket;
//! the next range simply starts above it. The counter is 64 bits wide and
//! takes refuse to go past 2^63 tickets: at one take per nanosecond that is
//! 292 years of continuous use per tag.
//!
//! * The publisher writes range `n` into `ring[n % RING]` only once the
//!   range it replaces (`n - RING`) is used up (`tickets` past its end).
//! * Within one taker, IDs strictly increase: its tickets increase, and
//!   ranges are published with strictly increasing IDs (`publish` refuses
//!   anything else) at strictly increasing tickets.

use std::sync::atomic::{fence, AtomicI64, AtomicU64, Ordering};

/// Ranges the ring can hold: the current one and up to `RING - 1` ahead.
pub const RING: usize = 8;

/// Longest range one publish may carry.
pub const MAX_RANGE_LEN: u64 = 1 << 40;

/// Tickets past this are never issued (see the module header).
const TICKET_LIMIT: u64 = 1 << 63;

/// `seq` of a ring entry whose fields are being rewritten.
const BUSY: u64 = u64::MAX;

#[repr(C)]
struct RangeEntry {
    /// Range number (from 1), 0 for never used, `BUSY` while rewritten.
    seq: AtomicU64,
    /// First ticket of the range.
    start: AtomicU64,
    first: AtomicI64,
    len: AtomicU64,
    /// Offset whose taker asks for the next refill (see `Taken::hit_mark`).
    mark: AtomicU64,
}

/// A ring entry read whole.
#[derive(Debug, Clone, Copy)]
struct Range {
    start: u64,
    first: i64,
    len: u64,
    mark: u64,
}

impl Range {
    fn end(&self) -> u64 {
        self.start + self.len
    }

    fn holds(&self, ticket: u64) -> bool {
        self.start <= ticket && ticket < self.end()
    }
}

/// One ID handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub id: i64,
    /// This taker crossed the range's prefetch mark: exactly one taker per
    /// range sees `true`, and should wake the refill worker.
    pub hit_mark: bool,
}

/// IDs taken in one go (`take_block`): up to `RING` runs of consecutive
/// IDs, increasing, one per range the block's tickets fell in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakenBlock {
    runs: [(i64, u64); RING],
    count: usize,
    /// The block crossed a range's prefetch mark (see `Taken::hit_mark`).
    pub hit_mark: bool,
}

impl TakenBlock {
    /// The runs: `(first ID, number of IDs)`, in increasing order.
    pub fn runs(&self) -> &[(i64, u64)] {
        &self.runs[..self.count]
    }

    /// IDs in all runs.
    pub fn len(&self) -> u64 {
        self.runs().iter().map(|&(_, n)| n).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The largest ID of the block (`None`: empty).
    pub fn last_id(&self) -> Option<i64> {
        self.runs()
            .last()
            .map(|&(first, len)| first + (len as i64 - 1))
    }
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
    /// IDs handed out (or lost to a stalled taker) since start.
    pub ids_taken: u64,
}

impl ChainStatus {
    pub fn remaining(&self) -> u64 {
        self.current_len - self.current_used + self.ids_ahead
    }
}

#[repr(C)]
pub struct RangeChain {
    tickets: AtomicU64,
    /// Ranges published; range `n` is in `ring[n % RING]`.
    published: AtomicU64,
    /// End ticket of the last published range.
    end: AtomicU64,
    /// The range takers found their ticket in last: where to look first.
    current: AtomicU64,
    high_water: AtomicI64,
    /// Tickets that map to no ID: spent on an empty chain, or discarded.
    lost_tickets: AtomicU64,
    ring: [RangeEntry; RING],
}

/// Outcome of looking a ticket up.
enum Lookup {
    Found(Range),
    /// The ticket is past every published range: the chain is empty.
    Empty,
    /// The ticket's range is gone (a stalled taker): take again.
    Stale,
}

impl Default for RangeChain {
    fn default() -> Self {
        Self::new()
    }
}

impl RangeChain {
    /// An empty chain.
    pub fn new() -> Self {
        RangeChain {
            tickets: AtomicU64::new(0),
            published: AtomicU64::new(0),
            end: AtomicU64::new(0),
            current: AtomicU64::new(0),
            high_water: AtomicI64::new(i64::MIN),
            lost_tickets: AtomicU64::new(0),
            ring: std::array::from_fn(|_| RangeEntry {
                seq: AtomicU64::new(0),
                start: AtomicU64::new(0),
                first: AtomicI64::new(0),
                len: AtomicU64::new(0),
                mark: AtomicU64::new(u64::MAX),
            }),
        }
    }

    /// Reads range `range_no`'s entry, or `None` if the ring slot holds
    /// another range (never used, reused, or being rewritten).
    #[inline]
    fn read_entry(&self, range_no: u64) -> Option<Range> {
        let entry = &self.ring[(range_no as usize) % RING];
        let seq_before = entry.seq.load(Ordering::Acquire);
        if seq_before != range_no || range_no == 0 {
            return None;
        }
        let range = Range {
            start: entry.start.load(Ordering::Relaxed),
            first: entry.first.load(Ordering::Relaxed),
            len: entry.len.load(Ordering::Relaxed),
            mark: entry.mark.load(Ordering::Relaxed),
        };
        fence(Ordering::Acquire);
        (entry.seq.load(Ordering::Relaxed) == seq_before).then_some(range)
    }

    /// The range that holds `ticket`.
    #[inline(always)]
    fn lookup(&self, ticket: u64) -> Lookup {
        let hint = self.current.load(Ordering::Relaxed);
        if let Some(range) = self.read_entry(hint) {
            if range.holds(ticket) {
                return Lookup::Found(range);
            }
        }
        self.lookup_slow(ticket, hint)
    }

    #[cold]
    fn lookup_slow(&self, ticket: u64, hint: u64) -> Lookup {
        let published = self.published.load(Ordering::Acquire);
        let oldest = published.saturating_sub(RING as u64 - 1).max(1);
        for range_no in hint.clamp(oldest, published.max(1))..=published {
            if let Some(range) = self.read_entry(range_no) {
                if range.holds(ticket) {
                    self.current.fetch_max(range_no, Ordering::Relaxed);
                    return Lookup::Found(range);
                }
            }
        }
        if ticket >= self.end.load(Ordering::Acquire) {
            Lookup::Empty
        } else {
            Lookup::Stale
        }
    }

    /// Takes the next ID, or `None` when every published range is used up.
    /// Inlined always: it is most of `segment_nextval`'s common call.
    #[inline(always)]
    pub fn take(&self) -> Option<Taken> {
        loop {
            let ticket = self.tickets.fetch_add(1, Ordering::AcqRel);
            if ticket >= TICKET_LIMIT {
                return None;
            }
            match self.lookup(ticket) {
                Lookup::Found(range) => {
                    let offset = ticket - range.start;
                    return Some(Taken {
                        id: range.first + offset as i64,
                        hit_mark: offset == range.mark,
                    });
                }
                Lookup::Empty => return None,
                Lookup::Stale => continue,
            }
        }
    }

    /// Takes up to `n` IDs with one `fetch_add` of `n` tickets: the IDs of
    /// those tickets that fall in published ranges, as runs of consecutive
    /// IDs. Tickets past the last published range are spent (the next
    /// range starts above them), as are those of a range overwritten while
    /// the taker looked (a stalled taker): gaps, never another taker's IDs,
    /// since the tickets are this taker's alone. Returns `None` when no
    /// ticket mapped to an ID.
    pub fn take_block(&self, n: u64) -> Option<TakenBlock> {
        let n = n.clamp(1, MAX_RANGE_LEN);
        let first_ticket = self.tickets.fetch_add(n, Ordering::AcqRel);
        if first_ticket >= TICKET_LIMIT {
            return None;
        }
        let end_ticket = first_ticket + n;
        let mut block = TakenBlock {
            runs: [(0, 0); RING],
            count: 0,
            hit_mark: false,
        };
        let mut ticket = first_ticket;
        while ticket < end_ticket && block.count < RING {
            let Some(range) = self.range_from(ticket) else {
                break;
            };
            let start = ticket.max(range.start);
            if start >= end_ticket {
                break;
            }
            let stop = end_ticket.min(range.end());
            let offset = start - range.start;
            block.runs[block.count] = (range.first + offset as i64, stop - start);
            block.count += 1;
            block.hit_mark |= offset <= range.mark && range.mark < offset + (stop - start);
            ticket = stop;
        }
        (!block.is_empty()).then_some(block)
    }

    /// The published range holding `ticket`, or else the first one that
    /// starts after it, read whole.
    fn range_from(&self, ticket: u64) -> Option<Range> {
        if let Lookup::Found(range) = self.lookup(ticket) {
            return Some(range);
        }
        let published = self.published.load(Ordering::Acquire);
        let oldest = published.saturating_sub(RING as u64 - 1).max(1);
        (oldest..=published)
            .filter_map(|range_no| self.read_entry(range_no))
            .filter(|range| range.end() > ticket)
            .min_by_key(|range| range.start)
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
        let range_no = self.published.load(Ordering::Relaxed) + 1;
        let entry = &self.ring[(range_no as usize) % RING];
        let tickets = self.tickets.load(Ordering::Acquire);
        if entry.seq.load(Ordering::Relaxed) != 0 {
            // Only the publisher writes entries, so a relaxed read is whole.
            let replaced_end =
                entry.start.load(Ordering::Relaxed) + entry.len.load(Ordering::Relaxed);
            if tickets < replaced_end {
                return Err(PublishError::Full);
            }
        }
        let end = self.end.load(Ordering::Relaxed);
        let start = end.max(tickets);
        if start >= TICKET_LIMIT {
            return Err(PublishError::BadLength);
        }
        self.lost_tickets.fetch_add(start - end, Ordering::Relaxed);
        entry.seq.store(BUSY, Ordering::Relaxed);
        fence(Ordering::Release);
        entry.start.store(start, Ordering::Relaxed);
        entry.first.store(first, Ordering::Relaxed);
        entry.len.store(len, Ordering::Relaxed);
        entry.mark.store(mark.min(len - 1), Ordering::Relaxed);
        entry.seq.store(range_no, Ordering::Release);
        self.high_water
            .store(first + (len as i64 - 1), Ordering::Relaxed);
        self.end.store(start + len, Ordering::Release);
        self.published.store(range_no, Ordering::Release);
        Ok(())
    }

    /// Throws away the current range and every range ahead (their IDs become
    /// a gap); the next take finds the chain empty. Used when the row the
    /// ranges came from is gone, or the slot goes to another tag: the next
    /// publish may start below the old ranges (a new row, or a new table).
    ///
    /// Serialised with `publish` by the caller. A taker that drew its ticket
    /// before the call may still get its ID: the take happened first.
    pub fn discard(&self) {
        let end = self.end.load(Ordering::Acquire);
        let before = self.tickets.fetch_max(end, Ordering::AcqRel);
        self.lost_tickets
            .fetch_add(end.saturating_sub(before), Ordering::Relaxed);
        self.high_water.store(i64::MIN, Ordering::Relaxed);
    }

    /// Closes the chain at a clean stop: no ID is handed out from it any
    /// more, and the IDs nobody took at the top of it come back as
    /// `(lowest, highest)` — the run of consecutive untaken IDs that ends
    /// at the last published ID, which the worker may give back to the row
    /// — or `None` when nothing is left (or the chain never got a range).
    ///
    /// Like `discard`, every ticket up to the end is spent at once, so a
    /// taker after the call finds the chain empty, and one that drew its
    /// ticket before keeps its ID: every such ID is below `lowest`, since
    /// IDs grow with tickets. The high water goes down to `lowest - 1`, so
    /// that a later range may start right above what was handed out.
    ///
    /// Serialised with `publish` by the caller.
    pub fn close(&self) -> Option<(i64, i64)> {
        let end = self.end.load(Ordering::Acquire);
        let untaken = self.tickets.fetch_max(end, Ordering::AcqRel);
        if untaken >= end {
            return None;
        }
        self.lost_tickets
            .fetch_add(end - untaken, Ordering::Relaxed);
        let published = self.published.load(Ordering::Acquire);
        let oldest = published.saturating_sub(RING as u64 - 1).max(1);
        let mut top: Option<(i64, i64)> = None;
        for range_no in (oldest..=published).rev() {
            // Ranges not used up are never overwritten: each is readable.
            let Some(range) = self.read_entry(range_no) else {
                break;
            };
            if range.end() <= untaken {
                break;
            }
            let lowest = range.first + untaken.saturating_sub(range.start) as i64;
            let highest = range.first + (range.len as i64 - 1);
            top = match top {
                None => Some((lowest, highest)),
                Some((above, high)) if highest + 1 == above => Some((lowest, high)),
                Some(_) => break,
            };
            if range.start <= untaken {
                break;
            }
        }
        if let Some((lowest, _)) = top {
            self.high_water.store(lowest - 1, Ordering::Relaxed);
        }
        top
    }

    /// Tickets spent so far: moves whenever anyone takes (or tries to),
    /// so two readings that agree mean nobody took in between.
    pub fn tickets_spent(&self) -> u64 {
        self.tickets.load(Ordering::Relaxed)
    }

    /// A snapshot for monitoring and the refill policy: `published` and the
    /// ranges are read before the ticket counter, so the current range is
    /// always one the ticket count has reached (or the last one, used up).
    pub fn status(&self) -> ChainStatus {
        let published = self.published.load(Ordering::Acquire);
        let end = self.end.load(Ordering::Acquire);
        let lost = self.lost_tickets.load(Ordering::Relaxed);
        let ranges: Vec<(u64, Range)> = (published.saturating_sub(RING as u64 - 1).max(1)
            ..=published)
            .filter_map(|n| self.read_entry(n).map(|r| (n, r)))
            .collect();
        let tickets = self.tickets.load(Ordering::Acquire).min(end);
        let current = ranges
            .iter()
            .find(|(_, r)| r.holds(tickets))
            .or_else(|| ranges.last().filter(|(_, r)| r.end() <= tickets));
        let (current_no, current_first, current_len, current_used) = match current {
            Some(&(n, r)) => (n, r.first, r.len, (tickets - r.start).min(r.len)),
            None => (published, 0, 0, 0),
        };
        let ids_ahead = ranges
            .iter()
            .filter(|(n, _)| *n > current_no)
            .map(|(_, r)| r.len)
            .sum();
        ChainStatus {
            current_first,
            current_len,
            current_used,
            ranges_ahead: published - current_no,
            ids_ahead,
            published,
            high_water: self.high_water.load(Ordering::Relaxed).max(0),
            ids_taken: tickets.saturating_sub(lost),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn drain(chain: &RangeChain) -> Vec<i64> {
        std::iter::from_fn(|| chain.take().map(|t| t.id)).collect()
    }

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
        assert_eq!(drain(&chain), [11, 12]);
    }

    #[test]
    fn moves_to_the_range_ahead_without_a_gap() {
        let chain = RangeChain::new();
        chain.publish(1, 2, 0).unwrap();
        chain.publish(100, 2, 0).unwrap();
        let status = chain.status();
        assert_eq!((status.current_first, status.ranges_ahead), (1, 1));
        assert_eq!(status.remaining(), 4);
        assert_eq!(drain(&chain), [1, 2, 100, 101]);
        assert_eq!(chain.status().ids_taken, 4);
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
    fn ring_fills_up_until_the_oldest_range_is_used_up() {
        let chain = RangeChain::new();
        for i in 0..RING as i64 {
            chain.publish(i * 10 + 1, 10, 5).unwrap();
        }
        assert_eq!(chain.publish(1000, 10, 5), Err(PublishError::Full));
        for _ in 0..9 {
            chain.take().unwrap();
        }
        // One ID of range 1 is left: still full.
        assert_eq!(chain.publish(1000, 10, 5), Err(PublishError::Full));
        assert_eq!(chain.take().unwrap().id, 10);
        chain.publish(1000, 10, 5).unwrap();
        let ids = drain(&chain);
        assert_eq!(ids.len(), 80);
        assert_eq!(ids.last(), Some(&1009));
    }

    #[test]
    fn close_gives_back_the_untaken_top_of_contiguous_ranges() {
        let chain = RangeChain::new();
        chain.publish(1, 10, 5).unwrap();
        chain.publish(11, 10, 5).unwrap();
        for _ in 0..3 {
            chain.take().unwrap();
        }
        assert_eq!(chain.close(), Some((4, 20)));
        assert_eq!(chain.take(), None, "closed: nothing more is handed out");
        assert_eq!(chain.status().ids_taken, 3);
        // A later range may start right above what was handed out.
        chain.publish(4, 5, 2).unwrap();
        assert_eq!(drain(&chain), [4, 5, 6, 7, 8]);
    }

    #[test]
    fn close_stops_at_a_gap_between_ranges() {
        let chain = RangeChain::new();
        chain.publish(1, 10, 5).unwrap();
        chain.publish(101, 10, 5).unwrap();
        chain.take().unwrap();
        // 2..10 are untaken too, but 11..100 belong to someone else.
        assert_eq!(chain.close(), Some((101, 110)));
        let used_up = RangeChain::new();
        used_up.publish(1, 2, 1).unwrap();
        drain(&used_up);
        assert_eq!(used_up.close(), None);
        assert_eq!(RangeChain::new().close(), None);
    }

    #[test]
    fn close_racing_with_takers_gives_back_only_ids_nobody_took() {
        for _ in 0..50 {
            let chain = Arc::new(RangeChain::new());
            chain.publish(1, 5_000, 2_500).unwrap();
            chain.publish(5_001, 5_000, 2_500).unwrap();
            let takers: Vec<_> = (0..3)
                .map(|_| {
                    let chain = Arc::clone(&chain);
                    std::thread::spawn(move || {
                        let mut ids = Vec::new();
                        while let Some(taken) = chain.take() {
                            ids.push(taken.id);
                        }
                        ids
                    })
                })
                .collect();
            std::thread::yield_now();
            let given_back = chain.close();
            let taken: Vec<i64> = takers.into_iter().flat_map(|t| t.join().unwrap()).collect();
            if let Some((lowest, highest)) = given_back {
                assert_eq!(highest, 10_000);
                assert!(
                    taken.iter().all(|&id| id < lowest),
                    "an ID given back was taken"
                );
            }
            // A taker stalled across a range boundary may skip its ID (a
            // gap), never take one twice.
            let distinct: HashSet<i64> = taken.iter().copied().collect();
            assert_eq!(distinct.len(), taken.len(), "an ID was taken twice");
            assert!(taken.iter().all(|&id| (1..=10_000).contains(&id)));
        }
    }

    #[test]
    fn discard_drops_everything_and_forgets_the_high_water() {
        let chain = RangeChain::new();
        chain.publish(1, 10, 5).unwrap();
        chain.publish(11, 10, 5).unwrap();
        assert_eq!(chain.take().unwrap().id, 1);
        // Below the high water: refused until the chain is discarded.
        assert!(chain.publish(5, 1, 0).is_err());
        chain.discard();
        assert_eq!(chain.take(), None);
        chain.publish(1, 3, 0).unwrap();
        assert_eq!(chain.take().unwrap().id, 1);
    }

    /// The hole of the old design: a taker that drew its place in the chain
    /// and stalled while the ring went round (it once compared only 24 bits
    /// of the range number, so after 2^24 refills it read a stranger's range).
    /// Its ticket now belongs to no range in the ring: it takes again.
    #[test]
    fn a_taker_stalled_across_2_pow_24_refills_never_gets_another_takers_id() {
        let chain = RangeChain::new();
        chain.publish(1, 1, 0).unwrap();
        let stalled_ticket = chain.tickets.fetch_add(1, Ordering::AcqRel);
        let mut handed_out = HashSet::new();
        for n in 1..=(1u64 << 24) + RING as u64 {
            chain.publish(10 * n as i64 + 1, 1, 0).unwrap();
            handed_out.insert(chain.take().unwrap().id);
        }
        assert!(matches!(chain.lookup(stalled_ticket), Lookup::Stale));
        chain.publish(i64::MAX - 1, 1, 0).unwrap();
        // Redeeming again takes a fresh ticket: the new range's one ID.
        let again = chain.take().unwrap().id;
        assert_eq!(again, i64::MAX - 1);
        assert!(!handed_out.contains(&again));
    }

    /// The other hole: every failed take on an empty chain moved the cursor,
    /// and after 2^39 of them the offset carried into the range number.
    /// Failed takes now only spend tickets; the next range starts above them.
    #[test]
    fn failed_takes_on_an_empty_chain_never_reach_old_ranges() {
        let chain = RangeChain::new();
        chain.publish(1, 5, 0).unwrap();
        assert_eq!(drain(&chain), [1, 2, 3, 4, 5]);
        // As if 2^40 takes had failed.
        chain.tickets.fetch_add(1 << 40, Ordering::AcqRel);
        assert_eq!(chain.take(), None);
        chain.publish(6, 5, 0).unwrap();
        assert_eq!(drain(&chain), [6, 7, 8, 9, 10]);
        assert_eq!(chain.status().ids_taken, 10);
        // At the ticket limit the chain stays empty instead of wrapping.
        chain.tickets.store(TICKET_LIMIT - 1, Ordering::Relaxed);
        assert_eq!(chain.take(), None);
        assert_eq!(chain.publish(11, 5, 0), Err(PublishError::BadLength));
        for _ in 0..3 {
            assert_eq!(chain.take(), None);
        }
    }

    /// A ticket drawn while a range is being published, for that very range,
    /// is either redeemed for its ID or lost; never both, never twice.
    #[test]
    fn a_ticket_drawn_before_its_range_is_published_is_a_gap() {
        let chain = RangeChain::new();
        let early = chain.tickets.fetch_add(1, Ordering::AcqRel);
        assert!(matches!(chain.lookup(early), Lookup::Empty));
        chain.publish(1, 3, 0).unwrap();
        // The range starts at the next ticket, above the one already spent.
        assert_eq!(drain(&chain), [1, 2, 3]);
        assert!(matches!(chain.lookup(early), Lookup::Stale));
    }

    #[test]
    fn a_block_takes_consecutive_ids_across_ranges_and_stops_at_the_end() {
        let chain = RangeChain::new();
        assert_eq!(chain.take_block(5), None);
        chain.publish(1, 10, 7).unwrap();
        chain.publish(101, 10, 7).unwrap();
        let first = chain.take_block(4).unwrap();
        assert_eq!(first.runs(), &[(1, 4)]);
        assert!(!first.hit_mark);
        let across = chain.take_block(10).unwrap();
        assert_eq!(across.runs(), &[(5, 6), (101, 4)]);
        assert!(
            across.hit_mark,
            "the first range's mark (offset 7) is in it"
        );
        assert_eq!(chain.take().unwrap().id, 105);
        // More than is published: what there is, the rest are gaps.
        let rest = chain.take_block(100).unwrap();
        assert_eq!(rest.runs(), &[(106, 5)]);
        assert!(rest.hit_mark);
        assert_eq!(chain.take_block(3), None);
        chain.publish(201, 5, 0).unwrap();
        assert_eq!(chain.take_block(2).unwrap().runs(), &[(201, 2)]);
    }

    /// The wrap-around holes of the old design, for blocks: a block taker
    /// that stalled while the ring went round, and a block after 2^40
    /// failed takes, never reach another taker's IDs; at the ticket limit
    /// blocks stop.
    #[test]
    fn blocks_never_reach_overwritten_ranges_or_pass_the_ticket_limit() {
        let chain = RangeChain::new();
        chain.publish(1, 4, 0).unwrap();
        // A block drawn its tickets, then stalls; the ring goes round.
        let stalled = chain.tickets.fetch_add(4, Ordering::AcqRel);
        let mut handed_out = HashSet::new();
        for n in 1..=(RING as i64 * 3) {
            chain.publish(100 * n + 1, 4, 0).unwrap();
            for run in chain.take_block(4).unwrap().runs() {
                handed_out.extend(run.0..run.0 + run.1 as i64);
            }
        }
        assert!(chain
            .range_from(stalled)
            .is_none_or(|r| r.start > stalled + 3));
        chain.tickets.fetch_add(1 << 40, Ordering::AcqRel);
        assert_eq!(chain.take_block(10), None);
        chain.publish(1_000_001, 10, 0).unwrap();
        let after = chain.take_block(10).unwrap();
        assert_eq!(after.runs(), &[(1_000_001, 10)]);
        assert!(!handed_out.contains(&1_000_001));
        chain.tickets.store(TICKET_LIMIT - 2, Ordering::Relaxed);
        assert_eq!(chain.take_block(5), None);
        assert_eq!(chain.take_block(5), None);
    }

    /// Takers of single IDs and of blocks, one publisher: every ID handed
    /// out once, each taker's IDs increasing.
    #[test]
    fn blocks_and_single_takes_never_share_an_id() {
        const RANGES: i64 = 20_000;
        let chain = Arc::new(RangeChain::new());
        let done = Arc::new(AtomicBool::new(false));
        let takers: Vec<_> = (0..4)
            .map(|t| {
                let chain = chain.clone();
                let done = done.clone();
                std::thread::spawn(move || {
                    let mut ids = Vec::new();
                    loop {
                        let got = if t % 2 == 0 {
                            chain.take_block(1 + (ids.len() as u64 % 13)).map(|b| {
                                for &(first, n) in b.runs() {
                                    ids.extend(first..first + n as i64);
                                }
                            })
                        } else {
                            chain.take().map(|x| ids.push(x.id))
                        };
                        if got.is_none() {
                            if done.load(Ordering::Acquire) {
                                break;
                            }
                            std::hint::spin_loop();
                        }
                    }
                    ids
                })
            })
            .collect();
        let mut published = 0;
        while published < RANGES {
            match chain.publish(published * 10, 7, 3) {
                Ok(()) => published += 1,
                Err(PublishError::Full) => std::hint::spin_loop(),
                Err(e) => panic!("{e:?}"),
            }
        }
        done.store(true, Ordering::Release);
        let mut all = HashSet::new();
        for taker in takers {
            let ids = taker.join().unwrap();
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "a taker's IDs went backwards"
            );
            for id in ids {
                assert!(id % 10 < 7, "{id} was never published");
                assert!(all.insert(id), "{id} handed out twice");
            }
        }
        assert!(!all.is_empty());
    }

    #[test]
    fn status_reads_the_current_range_and_what_is_ahead() {
        let chain = RangeChain::new();
        assert_eq!(chain.status(), ChainStatus::default());
        chain.publish(1, 10, 7).unwrap();
        chain.publish(101, 10, 7).unwrap();
        for _ in 0..3 {
            chain.take();
        }
        let s = chain.status();
        assert_eq!((s.current_first, s.current_len, s.current_used), (1, 10, 3));
        assert_eq!((s.ranges_ahead, s.ids_ahead, s.published), (1, 10, 2));
        assert_eq!((s.high_water, s.ids_taken, s.remaining()), (110, 3, 17));
        drain(&chain);
        let s = chain.status();
        assert_eq!(
            (s.current_first, s.current_used, s.remaining()),
            (101, 10, 0)
        );
    }

    /// Many takers, one publisher publishing tiny ranges as fast as it can:
    /// every ID handed out is distinct, each taker's IDs strictly increase,
    /// every handed-out ID lies in a published range, and each range's mark
    /// is hit at most once.
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
        assert!(marks <= RANGES as u64, "marks hit: {marks}");
        assert!(!all.is_empty());
    }
}
