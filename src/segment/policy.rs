//! When to refill a tag and where to put the prefetch mark: pure decisions
//! on a `ChainStatus`, with no PostgreSQL in sight.
//!
//! Two rules decide when the worker refills a tag:
//!
//! * the double buffer of Leaf and the segment-caching article: a caller crossing the prefetch mark (by
//!   default 80% of the current range) wakes the worker, which fetches the
//!   next range if none is buffered yet;
//! * CosId's safe distance (`Prefetcher`): the worker keeps at least
//!   `distance` IDs cached ahead of the callers. The distance follows the
//!   demand — the IDs callers take in `HORIZON_MS` — doubles whenever a
//!   caller had to wait, and decays back toward one step when demand
//!   falls, so idle tags stop taking large ranges. One refill takes as
//!   many steps as the distance needs (`max_id + k * step`), so the number
//!   of `id_segment` updates stays low at any rate.
//!
//! `plan_range` checks a row read from `id_segment` and works out the range
//! a refill takes from it.

use super::chain::{ChainStatus, MAX_RANGE_LEN, RING};

/// Offset in a range of `len` IDs whose taker wakes the worker: the ID that
/// brings the range to `percent` used.
pub fn mark_offset(len: u64, percent: u32) -> u64 {
    let percent = u128::from(percent.clamp(1, 100));
    let used = (u128::from(len) * percent).div_ceil(100) as u64;
    used.saturating_sub(1).min(len.saturating_sub(1))
}

/// Whether the worker should fetch another range for a tag now.
pub fn needs_refill(status: &ChainStatus, percent: u32) -> bool {
    if status.ranges_ahead > 0 && status.ids_ahead > 0 {
        return false;
    }
    status.current_len == 0 || status.current_used >= mark_offset(status.current_len, percent)
}

/// How far ahead demand is covered: IDs the callers take in this time are
/// kept cached. Refills take about a millisecond; the rest is margin for a
/// worker busy with other tags, a slow disk, or a sudden jump.
pub const HORIZON_MS: u64 = 250;

/// How often the demand estimate is updated (and the distance may shrink).
pub const SAMPLE_MS: i64 = 100;

/// A tag's demand and safe distance, kept by the worker from the slot's
/// counters.
#[derive(Debug, Clone, PartialEq)]
pub struct Prefetcher {
    distance: u64,
    ids_per_second: f64,
    sampled_at_ms: Option<i64>,
    sampled_taken: u64,
    seen_waits: u64,
}

impl Prefetcher {
    pub fn new() -> Prefetcher {
        Prefetcher {
            distance: 0,
            ids_per_second: 0.0,
            sampled_at_ms: None,
            sampled_taken: 0,
            seen_waits: 0,
        }
    }

    /// IDs the worker tries to keep cached ahead of the callers.
    pub fn distance(&self) -> u64 {
        self.distance
    }

    /// Demand over the last sample windows.
    pub fn ids_per_second(&self) -> f64 {
        self.ids_per_second
    }

    /// Folds in the slot's counters at `now_ms`: IDs taken and calls that
    /// waited, both since the slot was created. `step` is the tag's step,
    /// `max_ahead` the cap on the distance.
    /// `horizon_ms` is how much demand to keep cached (`HORIZON_MS`, or
    /// more for a tag whose ranges come from another server).
    pub fn observe(
        &mut self,
        now_ms: i64,
        taken: u64,
        waits: u64,
        step: u64,
        max_ahead: u64,
        horizon_ms: u64,
    ) {
        let step = step.max(1);
        let hungry = waits > self.seen_waits;
        self.seen_waits = waits;
        let mut sampled = false;
        match self.sampled_at_ms {
            None => {
                self.sampled_at_ms = Some(now_ms);
                self.sampled_taken = taken;
            }
            Some(at) if now_ms - at >= SAMPLE_MS => {
                let rate =
                    taken.saturating_sub(self.sampled_taken) as f64 * 1000.0 / (now_ms - at) as f64;
                // Rise at once, fall gently: a burst is answered in one
                // sample, a pause does not throw the estimate away.
                self.ids_per_second = if rate >= self.ids_per_second {
                    rate
                } else {
                    0.5 * (rate + self.ids_per_second)
                };
                self.sampled_at_ms = Some(now_ms);
                self.sampled_taken = taken;
                sampled = true;
            }
            // A caller waited: the window so far, however short, is
            // evidence enough that demand rose.
            Some(at) if hungry && now_ms > at => {
                let rate =
                    taken.saturating_sub(self.sampled_taken) as f64 * 1000.0 / (now_ms - at) as f64;
                self.ids_per_second = self.ids_per_second.max(rate);
            }
            Some(_) => {}
        }
        let demand = (self.ids_per_second * horizon_ms as f64 / 1000.0) as u64;
        if hungry {
            self.distance = (self.distance.max(step) * 2).max(demand);
        } else if demand > self.distance {
            self.distance = demand;
        } else if sampled {
            self.distance = demand.max(self.distance - self.distance / 4);
        }
        self.distance = self.distance.max(step).min(max_ahead.max(step));
    }

    /// Steps the next refill should take, or `None` when the chain holds
    /// enough: below the safe distance, or past the double buffer's mark.
    ///
    /// The chain holds at most `RING - 1` ranges ahead of the current one,
    /// so a refill is never planned when they are all there (its range
    /// could not be published: a gap, and a wasted update of the row), and
    /// each refill takes at least a quarter of the distance, so that a long
    /// horizon (a remote tag's) is met in a few ranges, not by topping up
    /// a little at every pass until the ring is full.
    pub fn plan(&self, status: &ChainStatus, step: u64, percent: u32) -> Option<u64> {
        let step = step.max(1);
        let remaining = status.remaining();
        if remaining >= self.distance && !needs_refill(status, percent) {
            return None;
        }
        if status.ranges_ahead >= RING as u64 - 1 {
            return None;
        }
        let wanted = self
            .distance
            .saturating_sub(remaining)
            .max(self.distance / 4)
            .max(step);
        Some(wanted.div_ceil(step))
    }
}

impl Default for Prefetcher {
    fn default() -> Self {
        Self::new()
    }
}

/// What can be wrong with a tag's row (or its table) at refill time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefillProblem {
    /// Not the row's problem: the tag's ranges come from the source of
    /// another of the database's workers (`lane`: 0 for the local table,
    /// else the postgres_fdw server's OID). The worker hands the slot to
    /// that worker; callers never see it.
    ServedByAnotherLane {
        lane: u32,
    },
    NoExtension,
    NoRow,
    /// A remote tag's row is missing on the central server.
    NoRemoteRow {
        foreign_table: String,
        /// The largest ID this server took from the row before it went.
        max_id_seen: Option<i64>,
        /// The row's step as the last refill read it (set by the worker,
        /// which keeps it), so the hint makes the row again as it was.
        step: Option<i64>,
    },
    /// A remote tag's foreign table was dropped.
    ForeignTableGone {
        server: String,
    },
    StepNotPositive {
        step: i64,
    },
    MaxIdBehind {
        max_id: i64,
        handed_out: i64,
    },
    Exhausted {
        max_id: i64,
    },
    CasContention {
        attempts: u64,
    },
    /// The CAS matched the row as it was read, but the row did not move
    /// up: a trigger (or rule) changed what the UPDATE wrote.
    WriteNotApplied {
        read_max_id: i64,
        written_max_id: i64,
    },
    /// A remote tag's central row is below what this server has already
    /// taken from it (`id_segment_remote.max_id_seen`, or the IDs it
    /// handed out): the central server went back.
    CentralWentBack {
        server: String,
        foreign_table: String,
        max_id: i64,
        seen: i64,
    },
    /// The central server is not where this server left it at its last
    /// refill from it (`fence.rs`): another cluster, another timeline, or
    /// its WAL went back.
    CentralMoved {
        server: String,
        moved: super::fence::Refusal,
    },
    /// On the Citus coordinator, for a worker's refill: the row is below
    /// what that worker already took from it (`seen`): the coordinator
    /// went back.
    CitusWentBack {
        max_id: i64,
        seen: i64,
    },
    /// On the Citus coordinator: its catch-up on a new timeline
    /// (`citus_catch_up.rs`) did not hear from every worker.
    CitusCatchUpUnanswered {
        nodes: String,
    },
    /// The postgres_fdw server does not pin the central session's settings
    /// a refill needs (`remote_session.rs`).
    RemoteSessionUnsafe {
        server: String,
        problem: String,
        options: Option<String>,
    },
    /// An enabled subscription (`subscription`) writes this database's
    /// `id_segment`: the row is the publisher's (`replication.rs`).
    RowReplicated {
        subscription: String,
    },
}

impl RefillProblem {
    /// Whether the tag's source is gone (no extension, no row, no foreign
    /// table): nothing is left to refill the slot from, so it is freed.
    pub fn source_is_gone(&self) -> bool {
        matches!(
            self,
            RefillProblem::NoRow
                | RefillProblem::NoRemoteRow { .. }
                | RefillProblem::ForeignTableGone { .. }
                | RefillProblem::NoExtension
        )
    }
}

/// The new `max_id` and the range it grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangePlan {
    pub new_max_id: i64,
    pub first: i64,
    pub len: u64,
}

/// Checks a row and works out the range `steps` steps of it grant: the
/// range starts right above `max_id` and stops at `i64::MAX` at the latest.
pub fn plan_range(
    max_id: i64,
    step: i64,
    steps: u64,
    handed_out: Option<i64>,
) -> Result<RangePlan, RefillProblem> {
    if step <= 0 {
        return Err(RefillProblem::StepNotPositive { step });
    }
    if let Some(handed_out) = handed_out {
        if max_id < handed_out {
            return Err(RefillProblem::MaxIdBehind { max_id, handed_out });
        }
    }
    if max_id == i64::MAX {
        return Err(RefillProblem::Exhausted { max_id });
    }
    let wanted = (step as u64)
        .saturating_mul(steps.max(1))
        .min(MAX_RANGE_LEN);
    let room = (i128::from(i64::MAX) - i128::from(max_id)) as u64;
    let len = wanted.min(room);
    Ok(RangePlan {
        new_max_id: max_id + len as i64,
        first: max_id + 1,
        len,
    })
}

/// The range a CAS that matched the row at `plan.first - 1` (both its
/// `version` and its `max_id`) actually took, given the `max_id` the row
/// holds after it: what lies between the two, and never more than planned.
/// A trigger that caps or rewrites the update thus shortens the range
/// instead of shifting it below the `max_id` it was read from.
pub fn granted_range(plan: &RangePlan, written_max_id: i64) -> Result<(i64, u64), RefillProblem> {
    let read_max_id = plan.first - 1;
    if written_max_id <= read_max_id {
        return Err(RefillProblem::WriteNotApplied {
            read_max_id,
            written_max_id,
        });
    }
    let took = (i128::from(written_max_id) - i128::from(read_max_id)) as u64;
    Ok((plan.first, took.min(plan.len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_or_rewritten_update_shortens_the_range_and_never_shifts_it() {
        let plan = plan_range(100, 10, 5, None).unwrap();
        assert_eq!((plan.first, plan.len, plan.new_max_id), (101, 50, 150));
        assert_eq!(granted_range(&plan, 150), Ok((101, 50)));
        // A BEFORE UPDATE trigger allowing one step: 10 IDs, above 100.
        assert_eq!(granted_range(&plan, 110), Ok((101, 10)));
        // One raising it further: still only what was planned.
        assert_eq!(granted_range(&plan, 1_000), Ok((101, 50)));
        for kept in [100, 99, i64::MIN] {
            assert_eq!(
                granted_range(&plan, kept),
                Err(RefillProblem::WriteNotApplied {
                    read_max_id: 100,
                    written_max_id: kept
                })
            );
        }
        let top = plan_range(i64::MAX - 3, 10, 1, None).unwrap();
        assert_eq!(granted_range(&top, i64::MAX), Ok((i64::MAX - 2, 3)));
    }

    fn status(len: u64, used: u64, ahead: u64) -> ChainStatus {
        ChainStatus {
            current_first: 1,
            current_len: len,
            current_used: used,
            ranges_ahead: ahead,
            ids_ahead: ahead * len,
            ..Default::default()
        }
    }

    #[test]
    fn mark_is_the_id_that_reaches_the_percentage() {
        assert_eq!(mark_offset(10, 80), 7);
        assert_eq!(mark_offset(1000, 80), 799);
        assert_eq!(mark_offset(1, 80), 0);
        assert_eq!(mark_offset(10, 100), 9);
        assert_eq!(mark_offset(3, 1), 0);
        assert_eq!(mark_offset(u64::MAX / 2, 100), u64::MAX / 2 - 1);
    }

    /// The worker's view of a tag whose callers take `rate` IDs per second,
    /// refilled every time it is asked for, on a fake clock.
    struct Simulation {
        prefetcher: Prefetcher,
        taken: u64,
        buffered: u64,
        waits: u64,
        refills: u64,
        now_ms: i64,
        step: u64,
    }

    impl Simulation {
        fn new(step: u64) -> Simulation {
            Simulation {
                prefetcher: Prefetcher::new(),
                taken: 0,
                buffered: 0,
                waits: 0,
                refills: 0,
                now_ms: 0,
                step,
            }
        }

        /// One 10 ms pass at `rate` IDs/s; a refill arrives at the end of
        /// the pass, so callers that run dry within it wait.
        fn pass(&mut self, rate: u64) {
            self.now_ms += 10;
            let wanted = rate / 100;
            if wanted > self.buffered {
                self.waits += 1;
                self.taken += self.buffered;
                self.buffered = 0;
            } else {
                self.taken += wanted;
                self.buffered -= wanted;
            }
            self.prefetcher.observe(
                self.now_ms,
                self.taken,
                self.waits,
                self.step,
                10_000_000,
                HORIZON_MS,
            );
            let status = ChainStatus {
                current_len: self.buffered,
                ids_ahead: 0,
                ..Default::default()
            };
            if let Some(steps) = self.prefetcher.plan(&status, self.step, 80) {
                self.buffered += steps * self.step;
                self.refills += 1;
            }
        }
    }

    #[test]
    fn a_jump_in_demand_stops_causing_waits_within_a_second() {
        let mut sim = Simulation::new(100);
        for _ in 0..100 {
            sim.pass(1_000); // a trickle: 1,000 IDs/s
        }
        let waits_before = sim.waits;
        for _ in 0..20 {
            sim.pass(5_000_000); // a batch import
        }
        let waits_in_first_200ms = sim.waits - waits_before;
        for _ in 0..80 {
            sim.pass(5_000_000);
        }
        assert!(
            waits_in_first_200ms <= 5,
            "{waits_in_first_200ms} waits while adapting"
        );
        assert_eq!(
            sim.waits - waits_before,
            waits_in_first_200ms,
            "still waiting after 200 ms"
        );
        assert!(sim.prefetcher.distance() >= 5_000_000 * HORIZON_MS / 1000 / 2);
    }

    #[test]
    fn the_distance_shrinks_back_when_demand_falls() {
        let mut sim = Simulation::new(100);
        for _ in 0..100 {
            sim.pass(2_000_000);
        }
        let busy = sim.prefetcher.distance();
        for _ in 0..300 {
            sim.pass(1_000);
        }
        let idle = sim.prefetcher.distance();
        assert!(busy >= 400_000, "busy distance {busy}");
        assert!(
            idle <= 1_000,
            "idle distance {idle}: an idle tag keeps taking large ranges"
        );
    }

    #[test]
    fn table_updates_per_million_ids_fall_as_the_rate_rises() {
        let per_million = |rate: u64| {
            let mut sim = Simulation::new(100);
            for _ in 0..300 {
                sim.pass(rate);
            }
            sim.refills as f64 * 1e6 / sim.taken as f64
        };
        let slow = per_million(10_000);
        let fast = per_million(10_000_000);
        assert!(
            fast * 10.0 < slow,
            "{fast} updates per million IDs at 10M/s vs {slow} at 10k/s"
        );
    }

    /// A long horizon topped up at every pass (a remote tag whose callers
    /// take a little between passes) never asks for more ranges than the
    /// ring can hold: every range planned can be published.
    #[test]
    fn refills_never_outrun_the_ring() {
        let mut p = Prefetcher::new();
        p.observe(0, 0, 0, 100, 10_000_000, 60_000);
        p.observe(1000, 100_000, 0, 100, 10_000_000, 60_000);
        let chain = crate::segment::chain::RangeChain::new();
        let mut next_first = 1;
        for _ in 0..1000 {
            // Callers take a few IDs between passes.
            for _ in 0..50 {
                chain.take();
            }
            if let Some(steps) = p.plan(&chain.status(), 100, 80) {
                let len = steps * 100;
                chain
                    .publish(next_first, len, mark_offset(len, 80))
                    .expect("a planned range fits the ring");
                next_first += len as i64;
            }
        }
        assert!(chain.status().remaining() >= p.distance() / 2);
    }

    /// A tag whose ranges come from another server keeps a longer horizon
    /// of demand cached: an outage that short costs its callers nothing.
    #[test]
    fn a_longer_horizon_keeps_proportionally_more_cached() {
        let distance_at = |horizon_ms: u64, max_ahead: u64| {
            let mut p = Prefetcher::new();
            p.observe(0, 0, 0, 10, max_ahead, horizon_ms);
            p.observe(1000, 100_000, 0, 10, max_ahead, horizon_ms);
            p.distance()
        };
        // 100,000 IDs a second: 250 ms of it locally, 30 s of it remotely,
        // within the cap.
        assert_eq!(distance_at(HORIZON_MS, u64::MAX), 25_000);
        assert_eq!(distance_at(30_000, u64::MAX), 3_000_000);
        assert_eq!(distance_at(30_000, 1_000_000), 1_000_000);
    }

    #[test]
    fn the_distance_never_exceeds_its_cap_or_falls_below_a_step() {
        let mut p = Prefetcher::new();
        for i in 0..50 {
            p.observe(
                i * 200,
                i as u64 * 1_000_000_000,
                i as u64,
                100,
                50_000,
                HORIZON_MS,
            );
        }
        assert_eq!(p.distance(), 50_000);
        let mut idle = Prefetcher::new();
        idle.observe(0, 0, 0, 1000, 10_000_000, HORIZON_MS);
        assert_eq!(idle.distance(), 1000);
    }

    #[test]
    fn one_refill_takes_as_many_steps_as_the_distance_needs() {
        let mut p = Prefetcher::new();
        p.observe(0, 0, 0, 10, 1_000_000, HORIZON_MS);
        p.observe(1000, 400_000, 0, 10, 1_000_000, HORIZON_MS);
        assert_eq!(p.distance(), 100_000);
        let status = ChainStatus {
            current_len: 1000,
            current_used: 500,
            ..Default::default()
        };
        assert_eq!(p.plan(&status, 10, 80), Some((100_000 - 500) / 10));
        let full = ChainStatus {
            current_len: 200_000,
            ..Default::default()
        };
        assert_eq!(p.plan(&full, 10, 80), None);
    }

    #[test]
    fn refills_an_empty_chain_and_one_past_its_mark() {
        assert!(needs_refill(&ChainStatus::default(), 80));
        assert!(!needs_refill(&status(10, 6, 0), 80));
        assert!(needs_refill(&status(10, 7, 0), 80));
        assert!(needs_refill(&status(10, 10, 0), 80));
    }

    #[test]
    fn never_refills_while_a_range_waits_behind_the_current_one() {
        assert!(!needs_refill(&status(10, 10, 1), 80));
        assert!(!needs_refill(&status(10, 9, 2), 1));
    }

    #[test]
    fn a_range_starts_right_above_max_id() {
        assert_eq!(
            plan_range(0, 1000, 1, None),
            Ok(RangePlan {
                new_max_id: 1000,
                first: 1,
                len: 1000
            })
        );
        assert_eq!(
            plan_range(1000, 10, 3, Some(1000)),
            Ok(RangePlan {
                new_max_id: 1030,
                first: 1001,
                len: 30
            })
        );
        assert_eq!(
            plan_range(-5, 2, 0, None),
            Ok(RangePlan {
                new_max_id: -3,
                first: -4,
                len: 2
            })
        );
    }

    #[test]
    fn the_last_range_stops_at_the_largest_bigint() {
        let plan = plan_range(i64::MAX - 3, 1000, 1, None).unwrap();
        assert_eq!(
            plan,
            RangePlan {
                new_max_id: i64::MAX,
                first: i64::MAX - 2,
                len: 3
            }
        );
        assert_eq!(
            plan_range(i64::MAX, 1, 1, None),
            Err(RefillProblem::Exhausted { max_id: i64::MAX })
        );
    }

    #[test]
    fn refuses_bad_rows() {
        assert_eq!(
            plan_range(0, 0, 1, None),
            Err(RefillProblem::StepNotPositive { step: 0 })
        );
        assert_eq!(
            plan_range(0, -3, 1, None),
            Err(RefillProblem::StepNotPositive { step: -3 })
        );
        assert_eq!(
            plan_range(500, 10, 1, Some(900)),
            Err(RefillProblem::MaxIdBehind {
                max_id: 500,
                handed_out: 900
            })
        );
        assert!(plan_range(900, 10, 1, Some(900)).is_ok());
    }

    #[test]
    fn huge_requests_are_capped_to_what_a_chain_range_holds() {
        let plan = plan_range(0, i32::MAX as i64, u64::MAX, None).unwrap();
        assert_eq!(plan.len, MAX_RANGE_LEN);
    }
}
