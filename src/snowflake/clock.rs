//! The clocks the snowflake side reads — the wall clock (`CLOCK_REALTIME`,
//! exact or coarse) and the monotonic clock (`CLOCK_MONOTONIC`, which lease
//! deadlines and every interval are measured on) — and the conversion of a
//! Unix time in ms into a `timestamptz`.
//!
//! The generators take the wall clock through `generator::WallClock`
//! (`SystemClock` here), so their rules are tested with fake clocks.

use super::generator::WallClock;
use super::layout::UnixMs;
use crate::errors::IdgenError;
use pgrx::datum::TimestampWithTimeZone;
use std::sync::atomic::{AtomicI64, Ordering};

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
pub const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

fn read_clock(clock: libc::clockid_t) -> UnixMs {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec; the clocks used here
    // always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// The wall clock in ms since 1970 (`CLOCK_REALTIME`).
pub fn now_unix_ms() -> UnixMs {
    read_clock(libc::CLOCK_REALTIME)
}

/// The monotonic clock in ms (`CLOCK_MONOTONIC`: NTP slews its rate, never
/// steps it; the same clock in every process of the machine), which lease
/// deadlines and every interval are measured on.
pub fn mono_now_ms() -> i64 {
    read_clock(libc::CLOCK_MONOTONIC)
}

/// The system clock: `CLOCK_REALTIME` exactly (about 25 ns through the
/// vDSO here), or `CLOCK_REALTIME_COARSE` (about 5 ns), which lags the
/// exact clock by less than its resolution (one kernel tick).
pub struct SystemClock;

/// Twice the coarse clock's resolution in ms, plus one: how far the exact
/// clock may be ahead of a coarse reading.
fn coarse_slack_ms() -> i64 {
    static SLACK: AtomicI64 = AtomicI64::new(0);
    let known = SLACK.load(Ordering::Relaxed);
    if known > 0 {
        return known;
    }
    let mut res = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_getres writes one timespec.
    unsafe { libc::clock_getres(libc::CLOCK_REALTIME_COARSE, &mut res) };
    let slack = 2 * (res.tv_sec * 1000 + res.tv_nsec / 1_000_000) + 1;
    SLACK.store(slack, Ordering::Relaxed);
    slack
}

impl WallClock for SystemClock {
    #[inline]
    fn now_ms(&self) -> i64 {
        now_unix_ms()
    }

    #[inline]
    fn bounds_ms(&self) -> Option<(i64, i64)> {
        let coarse = read_clock(libc::CLOCK_REALTIME_COARSE);
        Some((coarse, coarse + coarse_slack_ms()))
    }

    #[inline]
    fn mono_ms(&self) -> i64 {
        mono_now_ms()
    }
}

/// A Unix time in ms as `timestamptz` text for a message, or as ms since
/// 1970 when out of its range: a message about a garbage time must not
/// itself fail.
pub fn timestamptz_text(unix_ms: UnixMs) -> String {
    let converted = unix_ms
        .checked_mul(1000)
        .and_then(|micros| micros.checked_sub(PG_EPOCH_UNIX_MICROS))
        .and_then(|pg_micros| TimestampWithTimeZone::try_from(pg_micros).ok());
    match converted {
        Some(timestamp) => timestamp.to_string(),
        None => format!("{unix_ms} ms since 1970"),
    }
}

/// A Unix time in ms as a `timestamptz`; out of its range (or of i64
/// microseconds) is an error, never a wrapped value.
#[track_caller]
pub fn to_timestamptz(unix_ms: UnixMs) -> TimestampWithTimeZone {
    let converted = unix_ms
        .checked_mul(1000)
        .and_then(|micros| micros.checked_sub(PG_EPOCH_UNIX_MICROS))
        .and_then(|pg_micros| TimestampWithTimeZone::try_from(pg_micros).ok());
    let Some(timestamp) = converted else {
        IdgenError::TimestampOutOfRange {
            problem: format!("{unix_ms} ms since 1970 is beyond timestamptz"),
        }
        .raise()
    };
    timestamp
}
