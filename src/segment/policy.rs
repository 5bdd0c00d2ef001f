//! When to refill a tag and where to put the prefetch mark: pure decisions
//! on a `ChainStatus`, with no PostgreSQL in sight.
//!
//! The policy is the seeds' double buffer: a caller crossing the prefetch
//! mark (by default 80% of the current range) wakes the worker, which
//! fetches the next range if none is buffered yet, so the range is there
//! before the current one runs out. `plan_range` checks a row read from
//! `id_segment` and works out the range a refill takes from it.

use super::chain::{ChainStatus, MAX_RANGE_LEN};

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

/// What can be wrong with a tag's row (or its table) at refill time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefillProblem {
    NoExtension,
    NoRow,
    StepNotPositive { step: i64 },
    MaxIdBehind { max_id: i64, handed_out: i64 },
    Exhausted { max_id: i64 },
    CasContention { attempts: u64 },
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

#[cfg(test)]
mod tests {
    use super::*;

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
