//! The snowflake generator: one per cluster, shared by every backend, lock
//! free. Pure: the caller passes in the wall clock, so tests drive it with
//! a fake one.
//!
//! # Protocol
//!
//! * `last` holds the last ID issued, machine bits included. A call reads
//!   it, works out the next `(time, sequence)` under the same machine id
//!   and installs it with a compare-and-swap; the winner owns that ID. IDs
//!   therefore strictly increase across the whole cluster, in CAS order.
//!   A leased machine id (`take_lease`) is switched by a CAS on `last`
//!   too, so no call can combine one machine id with a time or sequence
//!   worked out for another.
//! * The next time is the wall clock if it is ahead of `last`; otherwise
//!   the logical clock carries on from `last` (next sequence, or the next
//!   millisecond when the sequence is used up). So a clock that steps back
//!   never makes an ID repeat or go backwards.
//! * Time may run ahead of the wall clock by at most `max_lead`; beyond
//!   that the call is refused (`Refusal::TooFarAhead`) and the caller waits
//!   for the wall clock.
//! * Reading the exact clock is the largest cost of a call, so while the
//!   logical clock is ahead of the wall clock (a burst beyond the layout's
//!   rate) a cheap coarse reading suffices: if even its latest possible
//!   time is behind `last`, the next sequence of `last` is the answer, and
//!   an ID's time is still never behind the wall clock when it is issued.
//! * No ID is issued with a time above `persisted_limit`, which a
//!   background worker raises only after writing it durably to disk. After
//!   a crash, the generator restarts above the persisted mark (its *floor*),
//!   so it never repeats an ID of the previous run, whatever the clock says.
//!   The coarse shortcut checks the limit too: on a first start `last` is 0
//!   but nothing is persisted yet.
//! * With a leased machine id (`lease.rs`) a call also checks, before its
//!   CAS, that the lease's monotonic deadline has not passed
//!   (`Refusal::NoLease`), and issues no time above the lease's ceiling
//!   (`Refusal::AboveCeiling`, until a renewal raises it). The ceiling
//!   alone keeps a successor's IDs apart from this server's, whatever the
//!   clocks do: a successor starts above every ceiling recorded.
//! * What the worker persists follows what is issued (`mark_to_persist`):
//!   nothing while no ID is issued and no call waits, so neither a moment of
//!   wrong time nor a series of quick restarts moves the mark; a window
//!   ahead of the clock while IDs are being issued, and for
//!   `KEEP_AHEAD_WHILE_IDLE_MS` after the last one while the wall clock
//!   keeps pace with the monotonic clock (`IdleWatch`), so calls do not
//!   wait, not even the first after a pause.
//!   A call refused for want of a persisted time records that time in
//!   `wanted` for the worker.

use super::layout::{Layout, Parts};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// The wall clock as the generator reads it; tests pass fake ones.
pub trait WallClock {
    /// Milliseconds since the Unix epoch, exact.
    fn now_ms(&self) -> i64;
    /// A monotonic clock in milliseconds (read only under a lease).
    fn mono_ms(&self) -> i64;
    /// A cheaper reading: `(earliest, latest)` milliseconds the exact time
    /// is known to lie within, if the clock offers one.
    fn bounds_ms(&self) -> Option<(i64, i64)>;
}

#[derive(Debug, Default)]
#[repr(C)]
pub struct GeneratorStats {
    pub issued: AtomicU64,
    /// Calls that found the wall clock more than 1 ms behind the latest
    /// wall time seen: the clock stepped back.
    pub clock_backwards: AtomicU64,
    /// Calls that waited because the logical clock was too far ahead, or
    /// because the next time was not persisted yet: one per call, however
    /// often it polled (`WaitsOfOneCall`).
    pub lead_waits: AtomicU64,
    pub persist_waits: AtomicU64,
}

#[repr(C)]
pub struct Generator {
    layout: Layout,
    last: AtomicU64,
    /// Under a lease: the monotonic ms from which no ID may be issued
    /// (`i64::MIN`: no lease held). `i64::MAX`: not leased (a fixed id).
    stop_at_mono_ms: AtomicI64,
    /// Under a lease: no time (ms since epoch) above it. `i64::MAX`: none.
    ceiling: AtomicI64,
    persisted_limit: AtomicI64,
    wall_high: AtomicI64,
    /// The largest time a call was refused for because it was not
    /// persisted yet (`i64::MIN`: none).
    wanted: AtomicI64,
    /// The floor this run started above (-1: a first start): the state
    /// file's, raised by the WAL-logged mark (`raise_floor`).
    floor: AtomicI64,
    /// Padding keeps the counters off the hot cache line of `last`.
    _pad: [u64; 8],
    pub stats: GeneratorStats,
}

/// How far above the time needed the keeper persists when time runs ahead
/// of the clock, in ms. Small, so that the first call after a restart (which
/// needs the floor plus one) does not move the mark beyond the window ahead
/// of the clock unless restarts come less than this apart — PostgreSQL's
/// start alone takes longer. In a burst more than a window ahead of the
/// clock the keeper writes once per this much snowflake time.
pub const BURST_HEADROOM_MS: i64 = 25;

/// How long after its last ID a generator still counts as in use, so that
/// the keeper keeps its mark a window ahead of the clock: an application
/// that inserts every few seconds (or minutes) never waits for a WAL flush
/// and an fsync on its first call after a pause. The cost is one small
/// commit per half window (1 s by default) for this long after the last
/// ID, and at most `IDLE_WRITES` of them (a short window keeps ahead for
/// less time); an idle server writes nothing after it.
pub const KEEP_AHEAD_WHILE_IDLE_MS: i64 = 300_000;

/// The most writes the keeper makes through one pause (see above).
pub const IDLE_WRITES: i64 = 300;

/// How far the wall clock may move against the monotonic clock after the
/// last ID before the keeper stops writing ahead of it while idle: NTP's
/// slewing moves it by at most 0.5 ms/s (150 ms in
/// `KEEP_AHEAD_WHILE_IDLE_MS`), a step of the clock by more. A clock stepped
/// while nobody calls is then not written down, as before.
pub const IDLE_CLOCK_STEP_MS: i64 = 500;

/// The keeper's watch on one generator between its passes: whether the
/// generator still counts as in use while no ID is issued.
#[derive(Debug, Default)]
pub struct IdleWatch {
    /// The generator's `issued` count at the previous pass.
    issued_seen: u64,
    /// Wall clock minus monotonic clock (ms) when the keeper last saw an ID
    /// issued; `None` before the first, or once the clock stepped since.
    clock_offset_at_last_id: Option<i64>,
}

impl IdleWatch {
    /// How long after its last ID the generator counts as in use
    /// (`mark_to_persist`'s `in_use_ms`): `KEEP_AHEAD_WHILE_IDLE_MS`, or
    /// `IDLE_WRITES` half windows if less, while the wall clock keeps pace
    /// with the monotonic clock since the last ID this watch saw, else only
    /// `window_ms`.
    pub fn in_use_ms(&mut self, issued: u64, wall_minus_mono_ms: i64, window_ms: i64) -> i64 {
        if issued != self.issued_seen {
            self.issued_seen = issued;
            self.clock_offset_at_last_id = Some(wall_minus_mono_ms);
        }
        match self.clock_offset_at_last_id {
            Some(offset) if (wall_minus_mono_ms - offset).abs() <= IDLE_CLOCK_STEP_MS => {
                KEEP_AHEAD_WHILE_IDLE_MS
                    .min(IDLE_WRITES * window_ms / 2)
                    .max(window_ms)
            }
            _ => {
                self.clock_offset_at_last_id = None;
                window_ms
            }
        }
    }
}

/// What one waiting call has counted in `GeneratorStats`: each kind of
/// wait once per call, not once per poll.
#[derive(Debug, Default)]
pub struct WaitsOfOneCall {
    lead_counted: bool,
    persist_counted: bool,
}

impl WaitsOfOneCall {
    pub fn note(&mut self, stats: &GeneratorStats, refusal: &Refusal) {
        let (counted, counter) = match refusal {
            Refusal::TooFarAhead { .. } => (&mut self.lead_counted, &stats.lead_waits),
            Refusal::NotPersisted => (&mut self.persist_counted, &stats.persist_waits),
            _ => return,
        };
        if !*counted {
            *counted = true;
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// How long a call refused because time is `lead_ms` ahead of the clock
/// should sleep before it tries again, or `None` when the clock cannot
/// catch up within `remaining_ms` — then the call fails at once instead of
/// sleeping with its transaction open.
pub fn lead_sleep_ms(lead_ms: i64, max_lead_ms: i64, remaining_ms: i64) -> Option<i64> {
    let needed = lead_ms.saturating_sub(max_lead_ms);
    (needed <= remaining_ms).then(|| needed.clamp(1, 100))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Issued {
    pub id: i64,
    /// How far the ID's time is ahead of the wall clock, in ms.
    pub lead_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The next time would be more than `max_lead` ahead of the wall clock.
    TooFarAhead { lead_ms: i64 },
    /// The next time is not yet persisted; wake the worker and wait.
    NotPersisted,
    /// The layout's time bits are used up.
    Exhausted,
    /// The machine id is leased and no lease is held now.
    NoLease,
    /// The next time is above the lease's ceiling; wait for a renewal.
    AboveCeiling,
}

impl Generator {
    /// A generator that will only issue times above `floor` (from the
    /// high-water mark of a previous run, in ms since the layout's epoch, or
    /// `None` on a first start), and none until the worker has persisted a
    /// limit.
    pub fn new(layout: Layout, machine: i64, floor: Option<i64>) -> Generator {
        let floor = floor.map(|f| f.clamp(0, layout.max_time_ms()));
        let start = floor.map_or(
            layout.compose(Parts {
                time_ms: 0,
                machine,
                sequence: 0,
            }),
            |mark| {
                layout.compose(Parts {
                    time_ms: mark,
                    machine,
                    sequence: layout.max_sequence(),
                })
            },
        );
        Generator {
            layout,
            last: AtomicU64::new(start as u64),
            stop_at_mono_ms: AtomicI64::new(i64::MAX),
            ceiling: AtomicI64::new(i64::MAX),
            persisted_limit: AtomicI64::new(floor.unwrap_or(-1)),
            wall_high: AtomicI64::new(i64::MIN),
            wanted: AtomicI64::new(i64::MIN),
            floor: AtomicI64::new(floor.unwrap_or(-1)),
            _pad: [0; 8],
            stats: GeneratorStats::default(),
        }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The machine id of the last ID issued (or to be issued next).
    pub fn machine(&self) -> i64 {
        self.machine_of(self.last.load(Ordering::Acquire))
    }

    /// Lease mode: nothing is issued until `take_lease`.
    pub fn await_lease(&self) {
        self.stop_at_mono_ms.store(i64::MIN, Ordering::Release);
    }

    /// Whether the machine id is leased (rather than fixed).
    pub fn leased(&self) -> bool {
        self.stop_at_mono_ms.load(Ordering::Acquire) != i64::MAX
    }

    /// Starts issuing under a lease of `machine`: only times above
    /// `floor` (ms since epoch) and none above `ceiling`, until the
    /// monotonic `stop_at_mono_ms`. The switch of machine id is one CAS on
    /// `last`, after issuing has stopped.
    pub fn take_lease(&self, machine: i64, floor: Option<i64>, ceiling: i64, stop_at_mono_ms: i64) {
        // INVARIANT: unique IDs — the version CAS and the restore fence
        // (lease.rs): under the new machine id only times above `floor`
        // (the row's floor the winning claim read, and the fence); the
        // switch is one CAS on `last`, with issuing stopped meanwhile.
        self.stop_at_mono_ms.store(i64::MIN, Ordering::SeqCst);
        let max_time = self.layout.max_time_ms();
        let mut current = self.last.load(Ordering::Acquire);
        loop {
            let (time, _) = self.split(current);
            let start = time.max(floor.unwrap_or(i64::MIN).min(max_time));
            let packed = self.layout.compose(Parts {
                time_ms: start,
                machine,
                sequence: self.layout.max_sequence(),
            }) as u64;
            match self
                .last
                .compare_exchange(current, packed, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now_last) => current = now_last,
            }
        }
        // INVARIANT: unique IDs — the ceiling (lease.rs): in force before
        // the deadline lets any call issue again.
        self.ceiling.store(ceiling, Ordering::SeqCst);
        // INVARIANT: no two live holders — the clock-rate margin
        // (lease.rs): nothing from `stop_at_mono_ms` on.
        self.stop_at_mono_ms
            .store(stop_at_mono_ms, Ordering::SeqCst);
    }

    /// A renewal: a later deadline and a higher ceiling (never lower).
    pub fn renew_lease(&self, ceiling: i64, stop_at_mono_ms: i64) {
        // INVARIANT: unique IDs — the ceiling (lease.rs): only one a
        // successful write put in the row's floor, and never lowered. No
        // two live holders — the clock-rate margin: the deadline only
        // from a reply in time (`Held::renewed`), never lowered either.
        self.ceiling.fetch_max(ceiling, Ordering::SeqCst);
        self.stop_at_mono_ms
            .fetch_max(stop_at_mono_ms, Ordering::SeqCst);
    }

    /// The lease is lost or given up: nothing more is issued. Returns the
    /// time (ms since epoch) of the last ID handed out under it, or of any
    /// before it: no call returns an ID above it from now on.
    pub fn drop_lease(&self) -> i64 {
        // INVARIANT: unique IDs — what it returns bounds every ID handed
        // out under the lease (`dropped_meanwhile`): the floor a give-up
        // leaves in the row.
        self.stop_at_mono_ms.store(i64::MIN, Ordering::SeqCst);
        self.split(self.last.load(Ordering::SeqCst)).0
    }

    /// The machine id in a packed `last`.
    #[inline]
    fn machine_of(&self, packed: u64) -> i64 {
        (packed as i64 >> self.layout.sequence_bits) & self.layout.max_machine()
    }

    #[inline]
    fn split(&self, packed: u64) -> (i64, i64) {
        let shift = self.layout.machine_bits + self.layout.sequence_bits;
        (
            (packed >> shift) as i64,
            packed as i64 & self.layout.max_sequence(),
        )
    }

    /// Issues the next ID.
    #[inline]
    pub fn next(&self, clock: &impl WallClock, max_lead_ms: i64) -> Result<Issued, Refusal> {
        let stop_at = self.stop_at_mono_ms.load(Ordering::Acquire);
        let leased = stop_at != i64::MAX;
        // INVARIANT: no two live holders — the clock-rate margin
        // (lease.rs): nothing from the lease's monotonic deadline on.
        if leased && clock.mono_ms() >= stop_at {
            return Err(Refusal::NoLease);
        }
        if let Some((earliest, latest)) = clock.bounds_ms() {
            let (earliest, latest) = (
                earliest - self.layout.epoch_ms,
                latest - self.layout.epoch_ms,
            );
            let current = self.last.load(Ordering::Acquire);
            let (time, sequence) = self.split(current);
            // The wall clock cannot have reached `time`; the lead is at most
            // `time - earliest`. `time` is persisted if it was issued, but
            // on a first start `last` is 0 and nothing is: check.
            if time >= latest
                && sequence < self.layout.max_sequence()
                && time - earliest <= max_lead_ms
                && time <= self.persisted_limit.load(Ordering::Acquire)
                // INVARIANT: unique IDs — the ceiling (lease.rs).
                && time <= self.ceiling.load(Ordering::Acquire)
            {
                let packed = current + 1;
                if self
                    .last
                    .compare_exchange(current, packed, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    if self.dropped_meanwhile(leased) {
                        return Err(Refusal::NoLease);
                    }
                    return Ok(self.issue(packed, time - earliest));
                }
            }
        }
        let issued = self.next_exact(clock.now_ms(), max_lead_ms)?;
        if self.dropped_meanwhile(leased) {
            return Err(Refusal::NoLease);
        }
        Ok(issued)
    }

    /// After a successful CAS under a lease: whether the lease was dropped
    /// meanwhile. Then the ID is not handed out (a gap): whoever dropped
    /// the lease reads `last` after dropping it, so every ID that *is*
    /// handed out is below what it reads (`drop_lease` and this load are
    /// both sequentially consistent).
    #[inline]
    fn dropped_meanwhile(&self, leased: bool) -> bool {
        // INVARIANT: unique IDs — no ID above what `drop_lease` returned
        // (the give-up's floor) is handed out.
        leased && self.stop_at_mono_ms.load(Ordering::SeqCst) == i64::MIN
    }

    fn issue(&self, packed: u64, lead_ms: i64) -> Issued {
        self.stats.issued.fetch_add(1, Ordering::Relaxed);
        Issued {
            id: packed as i64,
            lead_ms,
        }
    }

    /// Issues the next ID, given the exact wall clock in ms since the Unix
    /// epoch.
    pub fn next_exact(&self, now_unix_ms: i64, max_lead_ms: i64) -> Result<Issued, Refusal> {
        let now = now_unix_ms - self.layout.epoch_ms;
        let wall_high = self.wall_high.load(Ordering::Relaxed);
        if now > wall_high {
            self.wall_high.fetch_max(now, Ordering::Relaxed);
        } else if now + 1 < wall_high {
            self.stats.clock_backwards.fetch_add(1, Ordering::Relaxed);
        }
        let max_sequence = self.layout.max_sequence();
        let mut current = self.last.load(Ordering::Acquire);
        loop {
            let (time, sequence) = self.split(current);
            let (next_time, next_sequence) = if now > time {
                (now, 0)
            } else if sequence < max_sequence {
                (time, sequence + 1)
            } else {
                (time + 1, 0)
            };
            if next_time > self.layout.max_time_ms() {
                return Err(Refusal::Exhausted);
            }
            let lead_ms = next_time - now;
            if lead_ms > max_lead_ms {
                return Err(Refusal::TooFarAhead { lead_ms });
            }
            // INVARIANT: unique IDs — the ceiling (lease.rs): no time
            // above it, and the lease's row records it in its floor.
            if next_time > self.ceiling.load(Ordering::Acquire) {
                return Err(Refusal::AboveCeiling);
            }
            if next_time > self.persisted_limit.load(Ordering::Acquire) {
                self.wanted.fetch_max(next_time, Ordering::AcqRel);
                return Err(Refusal::NotPersisted);
            }
            let machine = self.machine_of(current);
            let packed = self.layout.compose(Parts {
                time_ms: next_time,
                machine,
                sequence: next_sequence,
            }) as u64;
            match self.last.compare_exchange_weak(
                current,
                packed,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(self.issue(packed, lead_ms)),
                Err(now_last) => current = now_last,
            }
        }
    }

    /// Time (ms since epoch) of the last ID issued.
    pub fn last_time(&self) -> i64 {
        self.split(self.last.load(Ordering::Acquire)).0
    }

    pub fn persisted_limit(&self) -> i64 {
        self.persisted_limit.load(Ordering::Acquire)
    }

    /// The floor this run started above (-1 on a first start).
    pub fn floor(&self) -> i64 {
        self.floor.load(Ordering::Acquire)
    }

    /// Raises the floor to `floor` (ms since epoch, clamped to the layout):
    /// from now on no ID has a time at or below it. The keeper calls it with
    /// the WAL-logged mark before it persists anything in a run, so before
    /// any ID of the run is issued; `last` moves up by a CAS, never down, so
    /// a call racing with it either issued below the old `last` or issues
    /// above the new one.
    ///
    /// `last` moves up *before* the persisted limit does: a call that saw
    /// the new limit with the old `last` would issue at the wall clock,
    /// below the floor, up to the new limit.
    pub fn raise_floor(&self, floor: i64) {
        let floor = floor.clamp(0, self.layout.max_time_ms());
        if self.floor.fetch_max(floor, Ordering::AcqRel) >= floor {
            return;
        }
        let mut current = self.last.load(Ordering::Acquire);
        loop {
            let (time, _) = self.split(current);
            if time >= floor {
                break;
            }
            let raised = self.layout.compose(Parts {
                time_ms: floor,
                machine: self.machine_of(current),
                sequence: self.layout.max_sequence(),
            }) as u64;
            match self
                .last
                .compare_exchange(current, raised, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now_last) => current = now_last,
            }
        }
        self.persisted_limit.fetch_max(floor, Ordering::AcqRel);
    }

    /// The limit the keeper should persist now, if any (ms since epoch).
    ///
    /// * Nothing while no ID was issued in this run and no call waits: an
    ///   idle server writes nothing, so a clock briefly in the future, or a
    ///   run of quick restarts, moves no mark.
    /// * While IDs are being issued (the last one, or a waiting call's
    ///   time, is within `in_use_ms` of the clock; `IdleWatch` gives it):
    ///   `window` ahead of the clock, rewritten when less than half of it
    ///   is left. So a limit is never more than `in_use_ms` plus about two
    ///   windows above the last ID issued.
    /// * When time runs ahead of the clock (a burst, a clock set back) or a
    ///   call waits: `BURST_HEADROOM_MS` above what is needed.
    ///
    /// After a restart the first call needs `floor + 1`, about `window`
    /// minus the restart's duration ahead of the clock; the mark written
    /// for it is `window` ahead of the clock, so restarts more than
    /// `BURST_HEADROOM_MS` apart never ratchet it.
    pub fn mark_to_persist(&self, now_unix_ms: i64, window_ms: i64, in_use_ms: i64) -> Option<i64> {
        let now = now_unix_ms - self.layout.epoch_ms;
        let limit = self.persisted_limit();
        let wanted = self.wanted.load(Ordering::Acquire);
        let waiting = wanted > limit;
        let issued = self.stats.issued.load(Ordering::Relaxed) > 0;
        let need = match (issued, waiting) {
            (false, false) => return None,
            (true, false) => self.last_time(),
            (false, true) => wanted,
            (true, true) => self.last_time().max(wanted),
        };
        let active = need >= now - in_use_ms.max(window_ms);
        let due = waiting
            || limit < need + BURST_HEADROOM_MS / 2
            || (active && limit < now + window_ms / 2);
        if !due {
            return None;
        }
        let mut target = need + BURST_HEADROOM_MS;
        if active {
            target = target.max(now + window_ms);
        }
        let target = target.min(self.layout.max_time_ms());
        (target > limit).then_some(target)
    }

    /// Called once `mark` is durably on disk: times up to it may be issued.
    pub fn persisted(&self, mark: i64) {
        self.persisted_limit.fetch_max(mark, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::layout::DEFAULT_EPOCH_MS;
    use std::collections::HashSet;
    use std::sync::Arc;

    const E: i64 = DEFAULT_EPOCH_MS;

    fn layout() -> Layout {
        Layout::new(E, 41, 10, 12, 63).unwrap()
    }

    fn ready(machine: i64) -> Generator {
        let g = Generator::new(layout(), machine, None);
        g.persisted(i64::MAX / 4);
        g
    }

    fn parts(g: &Generator, id: i64) -> Parts {
        g.layout().decompose(id).unwrap()
    }

    #[test]
    fn a_raised_floor_keeps_every_later_id_above_it_and_never_lowers() {
        let layout = Layout::new(DEFAULT_EPOCH_MS, 41, 10, 12, 63).unwrap();
        let g = Generator::new(layout, 3, Some(1_000));
        let clock_ms = DEFAULT_EPOCH_MS + 500;
        g.raise_floor(5_000);
        assert_eq!(g.floor(), 5_000);
        assert_eq!(g.persisted_limit(), 5_000);
        // Nothing at or below the floor, and nothing until a limit above it
        // is persisted.
        assert_eq!(g.next_exact(clock_ms, i64::MAX), Err(Refusal::NotPersisted));
        g.persisted(6_000);
        let issued = g.next_exact(clock_ms, i64::MAX).unwrap();
        let parts = parts(&g, issued.id);
        assert_eq!(
            (parts.time_ms, parts.machine, parts.sequence),
            (5_001, 3, 0)
        );
        // A lower floor changes nothing.
        g.raise_floor(2_000);
        assert_eq!(g.floor(), 5_000);
        let next = g.next_exact(clock_ms, i64::MAX).unwrap();
        assert!(next.id > issued.id);
    }

    #[test]
    fn a_call_racing_with_a_raised_floor_never_issues_at_or_below_it() {
        // The keeper raises the floor (a promotion) while a caller, whose
        // clock is far below it, waits for a limit: any ID the caller gets
        // under the raised limit lies above the floor. Raising the limit
        // before `last` let it issue at its clock, up to the new limit.
        let g = Arc::new(Generator::new(layout(), 1, Some(0)));
        g.persisted(10);
        let rounds = 50_000;
        let last_floor = (rounds + 1) * 1_000;
        let caller = {
            let g = Arc::clone(&g);
            std::thread::spawn(move || {
                let mut limit = 0;
                while limit < last_floor {
                    // A limit of k * 1000 or more is seen only once the
                    // floor of k * 1000 has been raised.
                    limit = g.persisted_limit();
                    let floor = limit / 1_000 * 1_000;
                    if let Ok(issued) = g.next_exact(E + 5, i64::MAX) {
                        let time = g.layout().decompose(issued.id).unwrap().time_ms;
                        assert!(
                            time > floor,
                            "ID at {time} ms, above a limit raised with the floor {floor}"
                        );
                    }
                }
            })
        };
        for round in 1..=rounds {
            g.raise_floor(round * 1_000);
            g.persisted(round * 1_000 + 500);
        }
        g.raise_floor(last_floor);
        caller.join().unwrap();
    }

    #[test]
    fn ids_carry_time_machine_and_sequence() {
        let g = ready(5);
        let a = g.next_exact(E + 1000, 0).unwrap();
        let b = g.next_exact(E + 1000, 0).unwrap();
        let c = g.next_exact(E + 1001, 0).unwrap();
        assert_eq!(
            parts(&g, a.id),
            Parts {
                time_ms: 1000,
                machine: 5,
                sequence: 0
            }
        );
        assert_eq!(
            parts(&g, b.id),
            Parts {
                time_ms: 1000,
                machine: 5,
                sequence: 1
            }
        );
        assert_eq!(
            parts(&g, c.id),
            Parts {
                time_ms: 1001,
                machine: 5,
                sequence: 0
            }
        );
    }

    #[test]
    fn a_full_millisecond_borrows_the_next_within_the_lead() {
        let g = ready(0);
        let mut last = 0;
        for _ in 0..4096 {
            last = g.next_exact(E + 50, 10).unwrap().id;
        }
        assert_eq!(parts(&g, last).sequence, 4095);
        let borrowed = g.next_exact(E + 50, 10).unwrap();
        assert_eq!(
            parts(&g, borrowed.id),
            Parts {
                time_ms: 51,
                machine: 0,
                sequence: 0
            }
        );
        assert_eq!(borrowed.lead_ms, 1);
        // With no lead allowed, the 4097th ID of a millisecond must wait.
        let strict = ready(0);
        for _ in 0..4096 {
            strict.next_exact(E + 50, 0).unwrap();
        }
        assert_eq!(
            strict.next_exact(E + 50, 0),
            Err(Refusal::TooFarAhead { lead_ms: 1 })
        );
        assert!(strict.next_exact(E + 51, 0).is_ok());
    }

    #[test]
    fn a_waiting_call_counts_once_however_often_it_polls() {
        let g = ready(0);
        let mut first = WaitsOfOneCall::default();
        for _ in 0..5 {
            first.note(&g.stats, &Refusal::TooFarAhead { lead_ms: 1 });
            first.note(&g.stats, &Refusal::NotPersisted);
            first.note(&g.stats, &Refusal::NoLease);
        }
        WaitsOfOneCall::default().note(&g.stats, &Refusal::NotPersisted);
        assert_eq!(g.stats.lead_waits.load(Ordering::Relaxed), 1);
        assert_eq!(g.stats.persist_waits.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_clock_stepping_back_never_repeats_or_goes_backwards() {
        let g = ready(1);
        let before = g.next_exact(E + 10_000, 1000).unwrap().id;
        // The clock jumps 500 ms back: IDs carry on from the last time.
        let after = g.next_exact(E + 9_500, 1000).unwrap();
        assert!(after.id > before);
        assert_eq!(parts(&g, after.id).time_ms, 10_000);
        assert_eq!(after.lead_ms, 500);
        assert_eq!(g.stats.clock_backwards.load(Ordering::Relaxed), 1);
        // 10 s back is beyond a 1 s lead: refused until the clock catches up.
        assert_eq!(
            g.next_exact(E, 1000),
            Err(Refusal::TooFarAhead { lead_ms: 10_000 })
        );
        assert!(g.next_exact(E + 9_000, 1000).unwrap().id > after.id);
    }

    #[test]
    fn nothing_is_issued_beyond_the_persisted_limit() {
        let g = Generator::new(layout(), 0, None);
        assert_eq!(g.next_exact(E + 100, 1000), Err(Refusal::NotPersisted));
        assert_eq!(g.mark_to_persist(E + 100, 2000, 2000), Some(2100));
        g.persisted(2100);
        assert!(g.next_exact(E + 100, 1000).is_ok());
        assert!(g.next_exact(E + 2100, 1000).is_ok());
        assert_eq!(g.next_exact(E + 2101, 1000), Err(Refusal::NotPersisted));
        // Time issued up to 2100 is ahead of the clock (1000): the mark
        // keeps the window ahead of the clock, and headroom above 2100.
        assert_eq!(g.mark_to_persist(E + 1000, 2000, 2000), Some(3000));
        assert_eq!(g.mark_to_persist(E + 1000, 20_000, 20_000), Some(21_000));
        assert_eq!(
            g.mark_to_persist(E - 5000, 2000, 2000),
            Some(2101 + BURST_HEADROOM_MS),
            "the clock far behind: headroom above the time needed"
        );
    }

    #[test]
    fn the_worker_persists_only_when_the_margin_runs_low() {
        let g = Generator::new(layout(), 0, None);
        g.persisted(3000);
        assert_eq!(
            g.mark_to_persist(E + 1500, 2000, 2000),
            None,
            "nothing issued"
        );
        g.next_exact(E + 1500, 0).unwrap();
        assert_eq!(g.mark_to_persist(E + 1500, 2000, 2000), None, "margin left");
        assert_eq!(g.mark_to_persist(E + 2001, 2000, 2000), Some(4001));
        g.persisted(1000);
        assert_eq!(g.persisted_limit(), 3000, "the limit never moves back");
    }

    #[test]
    fn a_moment_of_wrong_time_while_idle_is_not_persisted() {
        let g = Generator::new(layout(), 0, None);
        g.persisted(3000);
        g.next_exact(E + 1000, 0).unwrap();
        // The clock jumps a day ahead while no ID is issued: nothing is
        // written, so a restart does not inherit the wrong time.
        assert_eq!(g.mark_to_persist(E + 86_400_000, 2000, 2000), None);
        assert_eq!(g.mark_to_persist(E + 2_000_000_000, 2000, 2000), None);
        // Back on the right clock, the keeper carries on as before.
        assert_eq!(g.mark_to_persist(E + 2500, 2000, 2000), Some(4500));
    }

    #[test]
    fn a_restart_with_nothing_issued_writes_nothing() {
        let g = Generator::new(layout(), 0, Some(1_000_000));
        assert_eq!(g.floor(), 1_000_000);
        assert_eq!(g.mark_to_persist(E + 999_000, 2000, 2000), None);
        assert_eq!(g.mark_to_persist(E + 5_000_000, 2000, 2000), None);
    }

    #[test]
    fn a_pause_keeps_the_mark_ahead_so_the_next_call_does_not_wait() {
        let g = Generator::new(layout(), 0, None);
        let mut watch = IdleWatch::default();
        let in_use = |watch: &mut IdleWatch, wall_minus_mono: i64| {
            watch.in_use_ms(
                g.stats.issued.load(Ordering::Relaxed),
                wall_minus_mono,
                2000,
            )
        };
        g.persisted(3000);
        g.next_exact(E + 1000, 0).unwrap();
        assert_eq!(in_use(&mut watch, 7), KEEP_AHEAD_WHILE_IDLE_MS);
        // Nobody calls for a minute: the keeper still writes ahead, each time
        // half the window is left, and the next call needs no write.
        let mut limit = g.persisted_limit();
        for now in (E + 2000..E + 62_000).step_by(100) {
            let wanted = g.mark_to_persist(now, 2000, in_use(&mut watch, 7 + 40));
            if let Some(mark) = wanted {
                assert!(mark <= now - E + 2000 && limit < now - E + 1000);
                g.persisted(mark);
                limit = mark;
            }
            assert!(limit > now - E + 900, "at {now} the mark fell behind");
        }
        assert!(g.next_exact(E + 62_000, 0).is_ok());
        // Past KEEP_AHEAD_WHILE_IDLE_MS after the last ID nothing is written.
        let late = E + 62_000 + KEEP_AHEAD_WHILE_IDLE_MS + 2000;
        assert_eq!(g.mark_to_persist(late, 2000, in_use(&mut watch, 7)), None);
    }

    #[test]
    fn a_clock_stepped_during_a_pause_is_not_written_down() {
        let g = Generator::new(layout(), 0, None);
        let mut watch = IdleWatch::default();
        g.persisted(3000);
        g.next_exact(E + 1000, 0).unwrap();
        let issued = || g.stats.issued.load(Ordering::Relaxed);
        assert_eq!(watch.in_use_ms(issued(), 0, 2000), KEEP_AHEAD_WHILE_IDLE_MS);
        // The wall clock steps a minute ahead of the monotonic clock.
        let stepped = watch.in_use_ms(issued(), 60_000, 2000);
        assert_eq!(stepped, 2000);
        assert_eq!(g.mark_to_persist(E + 61_000, 2000, stepped), None);
        // Stepped back again, the watch stays off until the next ID.
        assert_eq!(watch.in_use_ms(issued(), 0, 2000), 2000);
        g.next_exact(E + 1500, 0).unwrap();
        assert_eq!(watch.in_use_ms(issued(), 0, 2000), KEEP_AHEAD_WHILE_IDLE_MS);
        // Slewing by NTP is not a step.
        assert_eq!(
            watch.in_use_ms(issued(), IDLE_CLOCK_STEP_MS, 2000),
            KEEP_AHEAD_WHILE_IDLE_MS
        );
        // A short window keeps ahead for IDLE_WRITES writes, not 5 minutes.
        assert_eq!(watch.in_use_ms(issued(), 0, 100), IDLE_WRITES * 50);
        assert_eq!(watch.in_use_ms(issued(), 0, 1_000_000), 1_000_000);
    }

    #[test]
    fn the_coarse_shortcut_never_skips_the_persistence_check_on_a_first_start() {
        // The epoch is ahead of the clock: the coarse reading is below 0,
        // `last` is 0 and nothing is persisted.
        let g = Generator::new(layout(), 0, None);
        let clock = FakeClock {
            exact: E - 10_000,
            coarse: Some((E - 10_004, E - 9_996)),
            exact_reads: Default::default(),
        };
        assert_eq!(g.next(&clock, i64::MAX / 4), Err(Refusal::NotPersisted));
        assert_eq!(g.stats.issued.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_call_that_cannot_succeed_in_time_fails_at_once() {
        // 10 s ahead with 5 s allowed: 5 s to wait.
        assert_eq!(lead_sleep_ms(10_000, 5_000, 10_000), Some(100));
        assert_eq!(lead_sleep_ms(10_000, 5_000, 4_999), None);
        assert_eq!(lead_sleep_ms(5_003, 5_000, 0), None);
        assert_eq!(lead_sleep_ms(5_003, 5_000, 3), Some(3));
        assert_eq!(lead_sleep_ms(i64::MAX, 0, i64::MAX), Some(100));
    }

    #[test]
    fn a_restart_issues_only_times_above_the_persisted_mark_even_with_the_clock_back() {
        let first = ready(3);
        let mut last = 0;
        for ms in 0..50 {
            last = first.next_exact(E + 3_600_000 + ms, 10).unwrap().id;
        }
        // What the keeper had persisted: a mark ahead of the last time.
        let mark = first.last_time() + 2000;
        // The server restarts with the clock an hour back.
        let second = Generator::new(layout(), 3, Some(mark));
        assert_eq!(
            second.next_exact(E + 49, i64::MAX),
            Err(Refusal::NotPersisted)
        );
        second.persisted(second.mark_to_persist(E + 49, 2000, 2000).unwrap());
        let next = second.next_exact(E + 49, i64::MAX).unwrap();
        assert!(next.id > last);
        assert_eq!(parts(&second, next.id).time_ms, mark + 1);
        // With a bounded lead it refuses instead of waiting an hour.
        let third = Generator::new(layout(), 3, Some(mark));
        third.persisted(mark + 10);
        assert!(matches!(
            third.next_exact(E + 49, 10_000),
            Err(Refusal::TooFarAhead { .. })
        ));
    }

    /// A fake clock: exact time, and optionally a coarse window around it.
    struct FakeClock {
        exact: i64,
        coarse: Option<(i64, i64)>,
        exact_reads: std::cell::Cell<u32>,
    }

    impl WallClock for FakeClock {
        fn now_ms(&self) -> i64 {
            self.exact_reads.set(self.exact_reads.get() + 1);
            self.exact
        }
        fn bounds_ms(&self) -> Option<(i64, i64)> {
            self.coarse
        }
        fn mono_ms(&self) -> i64 {
            self.exact
        }
    }

    /// A clock whose monotonic reading the test sets.
    struct LeaseClock {
        wall: i64,
        mono: i64,
    }

    impl WallClock for LeaseClock {
        fn now_ms(&self) -> i64 {
            self.wall
        }
        fn bounds_ms(&self) -> Option<(i64, i64)> {
            None
        }
        fn mono_ms(&self) -> i64 {
            self.mono
        }
    }

    #[test]
    fn under_a_lease_nothing_is_issued_before_a_claim_or_after_the_deadline() {
        let g = ready(0);
        g.await_lease();
        let at = |mono| LeaseClock {
            wall: E + 10_000,
            mono,
        };
        assert_eq!(g.next(&at(0), 1000), Err(Refusal::NoLease));
        g.take_lease(7, Some(9_000), 12_000, 500);
        let id = g.next(&at(499), 1000).unwrap().id;
        assert_eq!(parts(&g, id).machine, 7);
        assert_eq!(parts(&g, id).time_ms, 10_000);
        assert_eq!(g.next(&at(500), 1000), Err(Refusal::NoLease));
        g.renew_lease(13_000, 900);
        assert!(g.next(&at(500), 1000).is_ok());
        g.drop_lease();
        assert_eq!(g.next(&at(501), 1000), Err(Refusal::NoLease));
        assert!(!ready(0).leased() && g.leased());
    }

    #[test]
    fn a_lease_starts_above_its_floor_and_stays_below_its_ceiling() {
        let g = ready(1);
        g.next_exact(E + 1_000, 0).unwrap();
        g.await_lease();
        // The previous holder of machine 4 may have issued up to time 5000.
        g.take_lease(4, Some(5_000), 5_002, i64::MAX - 1);
        let clock = LeaseClock {
            wall: E + 1_000,
            mono: 0,
        };
        let first = g.next(&clock, 10_000).unwrap().id;
        assert_eq!(
            parts(&g, first),
            Parts {
                time_ms: 5_001,
                machine: 4,
                sequence: 0
            }
        );
        for _ in 0..4095 {
            g.next(&clock, 10_000).unwrap();
        }
        g.next(&clock, 10_000).unwrap(); // 5002, sequence 0
        for _ in 0..4095 {
            g.next(&clock, 10_000).unwrap();
        }
        assert_eq!(g.next(&clock, 10_000), Err(Refusal::AboveCeiling));
        g.renew_lease(6_000, i64::MAX - 1);
        assert_eq!(parts(&g, g.next(&clock, 10_000).unwrap().id).time_ms, 5_003);
    }

    /// Threads issue while the machine id is switched under them: every
    /// ID of the new machine id is above the new floor, none repeats.
    #[test]
    fn switching_the_machine_id_never_mixes_ids_across_the_switch() {
        let g = Arc::new(ready(2));
        g.await_lease();
        g.take_lease(2, None, i64::MAX / 4, i64::MAX - 1);
        let floor = 50_000;
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || {
                    let clock = LeaseClock {
                        wall: E + 1_000,
                        mono: 0,
                    };
                    let mut ids = Vec::new();
                    while ids.len() < 200_000 {
                        match g.next(&clock, i64::MAX / 4) {
                            Ok(issued) => ids.push(issued.id),
                            Err(Refusal::NoLease) => std::hint::spin_loop(),
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                    ids
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(5));
        g.take_lease(9, Some(floor), i64::MAX / 4, i64::MAX - 1);
        let mut seen = HashSet::new();
        let mut switched = 0;
        for t in threads {
            let ids = t.join().unwrap();
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
            for id in ids {
                assert!(seen.insert(id), "{id} twice");
                let p = parts(&g, id);
                if p.machine == 9 {
                    switched += 1;
                    assert!(p.time_ms > floor, "{p:?} not above the floor");
                } else {
                    assert_eq!(p.machine, 2);
                }
            }
        }
        assert!(switched > 0);
    }

    #[test]
    fn a_coarse_clock_reading_suffices_only_while_time_runs_ahead() {
        let g = ready(0);
        let clock = |exact: i64, coarse: Option<(i64, i64)>| FakeClock {
            exact,
            coarse,
            exact_reads: Default::default(),
        };
        // Not ahead: the exact clock is read.
        let c = clock(E + 100, Some((E + 96, E + 104)));
        let first = g.next(&c, 1000).unwrap();
        assert_eq!(c.exact_reads.get(), 1);
        assert_eq!(parts(&g, first.id).time_ms, 100);
        // Push the logical clock ahead with a full millisecond's sequence.
        for _ in 0..8 * 4096 {
            g.next_exact(E + 100, 1000).unwrap();
        }
        assert_eq!(g.last_time(), 108);
        // Ahead of even the latest possible time: no exact read needed, and
        // the ID's time is not behind the wall clock.
        let c = clock(E + 101, Some((E + 100, E + 105)));
        let fast = g.next(&c, 1000).unwrap();
        assert_eq!(c.exact_reads.get(), 0);
        assert_eq!(parts(&g, fast.id).time_ms, 108);
        assert_eq!(fast.lead_ms, 8);
        // The latest possible time reaches `last`: exact read again.
        let c = clock(E + 109, Some((E + 105, E + 110)));
        let exact = g.next(&c, 1000).unwrap();
        assert_eq!(c.exact_reads.get(), 1);
        assert_eq!(parts(&g, exact.id).time_ms, 109);
        // A lead beyond the bound is never granted on a coarse reading: the
        // exact clock decides, and here refuses.
        let c = clock(E + 55, Some((E + 50, E + 60)));
        assert_eq!(g.next(&c, 20), Err(Refusal::TooFarAhead { lead_ms: 54 }));
        assert_eq!(c.exact_reads.get(), 1);
    }

    /// A crash every `gap_ms`, each run issuing `ids` IDs (as soon as the
    /// keeper lets it) before the next crash; returns how far the last
    /// mark is ahead of the clock.
    fn crash_every(gap_ms: i64, ids: usize) -> i64 {
        const WINDOW: i64 = 2000;
        let mut now = E + 3_600_000;
        let mut mark: Option<i64> = None;
        let mut last_id = -1;
        for _ in 0..100 {
            let run = Generator::new(layout(), 0, mark);
            for _ in 0..ids {
                let id = loop {
                    match run.next_exact(now, 5000) {
                        Ok(issued) => break issued.id,
                        Err(Refusal::NotPersisted) => {
                            let m = run.mark_to_persist(now, WINDOW, WINDOW).unwrap();
                            run.persisted(m);
                            mark = Some(m);
                        }
                        Err(other) => panic!("{other:?}"),
                    }
                };
                assert!(id > last_id, "an ID repeated after a restart");
                last_id = id;
            }
            if let Some(m) = run.mark_to_persist(now, WINDOW, WINDOW) {
                run.persisted(m);
                mark = Some(m);
            }
            now += gap_ms;
        }
        mark.map_or(0, |m| m - (now - E))
    }

    #[test]
    fn rapid_restarts_do_not_ratchet_time_ahead_of_the_clock() {
        // With no ID issued, restarts write nothing at all.
        assert_eq!(crash_every(100, 0), 0);
        // With IDs issued in each run, the mark stays a window ahead.
        for gap in [100, 300, 1000] {
            let lead = crash_every(gap, 3);
            assert!(
                lead <= 2000,
                "after 100 crashes {gap} ms apart the mark is {lead} ms ahead"
            );
        }
    }

    #[test]
    fn the_end_of_the_time_bits_is_refused() {
        let g = ready(0);
        let end = E + g.layout().max_time_ms();
        g.persisted(g.layout().max_time_ms());
        assert!(g.next_exact(end, 0).is_ok());
        assert_eq!(g.next_exact(end + 1, 10), Err(Refusal::Exhausted));
    }

    #[test]
    fn threads_get_distinct_ids_that_each_strictly_increase() {
        const THREADS: usize = 4;
        const PER_THREAD: usize = 250_000;
        let g = Arc::new(ready(9));
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || {
                    let mut ids = Vec::with_capacity(PER_THREAD);
                    let start = std::time::Instant::now();
                    while ids.len() < PER_THREAD {
                        // A coarse fake clock: many IDs share a millisecond,
                        // so sequences run out and time is borrowed.
                        let now = E + start.elapsed().as_millis() as i64 / 4;
                        match g.next_exact(now, i64::MAX / 8) {
                            Ok(issued) => ids.push(issued.id),
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                    ids
                })
            })
            .collect();
        let mut all = HashSet::new();
        for w in workers {
            let ids = w.join().unwrap();
            assert!(
                ids.windows(2).all(|p| p[0] < p[1]),
                "a thread's IDs went backwards"
            );
            for id in ids {
                assert_eq!(g.layout().decompose(id).unwrap().machine, 9);
                assert!(all.insert(id), "{id} issued twice");
            }
        }
        assert_eq!(all.len(), THREADS * PER_THREAD);
        assert_eq!(
            g.stats.issued.load(Ordering::Relaxed),
            (THREADS * PER_THREAD) as u64
        );
    }
}
