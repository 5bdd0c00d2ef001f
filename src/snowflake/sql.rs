//! The SQL functions of snowflake IDs: the generators and the helpers that
//! take IDs apart, format them and bound them by time. They need the
//! preloaded library (the layout comes from the server's settings), except
//! the `IMMUTABLE` helpers that take the layout as arguments
//! (`snowflake_timestamp(id, epoch, machine_bits, sequence_bits)` and its
//! siblings), which read no setting and no shared memory.

use super::clock::{to_timestamptz, PG_EPOCH_UNIX_MICROS};
use super::generator::Generator;
use super::layout::{Layout, LayoutError};
use super::shared::{snowflake_or_raise, Snowflake};
use crate::errors::IdgenError;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use std::sync::atomic::Ordering;

/// No snowflake ID without a machine id set on this server.
fn refuse_without_machine_id(function: &'static str) {
    if !super::config::machine_id_is_set() {
        IdgenError::MachineIdNotSet { function }.raise();
    }
}

fn refuse_during_recovery(function: &'static str) {
    // SAFETY: a plain query of this backend's recovery state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        IdgenError::DuringRecovery { function }.raise();
    }
}

fn javascript(state: &'static Snowflake) -> &'static Generator {
    // With a leased machine id and none held yet (or any more), the call
    // waits for a lease like `snowflake_nextval()`, and says why there is
    // none; only a held id that does not fit is refused here.
    // The common call pays one relaxed load.
    let fits_or_awaits_lease = state.javascript_ok.load(Ordering::Relaxed)
        || (state.javascript.leased() && state.lease.machine.load(Ordering::Acquire) < 0);
    if !fits_or_awaits_lease {
        IdgenError::SnowflakeMachineTooLarge {
            machine: state.main.machine(),
            machine_bits: state.javascript.layout().machine_bits,
        }
        .raise();
    }
    &state.javascript
}

fn raise_layout_error(e: LayoutError, id: i64) -> ! {
    match e {
        LayoutError::NegativeId(_) => IdgenError::BadSnowflakeId {
            id,
            problem: "it is negative".into(),
        }
        .raise(),
        LayoutError::TooWide { bits, .. } => IdgenError::BadSnowflakeId {
            id,
            problem: format!("it has bits set above the layout's {bits}"),
        }
        .raise(),
        LayoutError::BeforeEpoch { .. } => IdgenError::TimestampOutOfRange {
            problem: "it is before pg_idgen.snowflake_epoch".into(),
        }
        .raise(),
        LayoutError::PastEnd { last_ms, .. } => IdgenError::TimestampOutOfRange {
            problem: format!(
                "it is after the layout's last millisecond ({})",
                to_timestamptz(last_ms)
            ),
        }
        .raise(),
        other => IdgenError::Internal {
            context: "snowflake layout",
            message: format!("{other:?}"),
        }
        .raise(),
    }
}

/// The machine id and sequence are `bigint`: a layout may give either up
/// to 62 bits.
type ParsedRow = (
    name!(ts, TimestampWithTimeZone),
    name!(machine_id, i64),
    name!(sequence, i64),
);

fn parse_with(layout: &Layout, id: i64) -> TableIterator<'static, ParsedRow> {
    let parts = layout
        .decompose(id)
        .unwrap_or_else(|e| raise_layout_error(e, id));
    TableIterator::once((
        to_timestamptz(layout.epoch_ms + parts.time_ms),
        parts.machine,
        parts.sequence,
    ))
}

/// `snowflake_nextval()`: the next time-ordered ID of this server.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_nextval() -> i64 {
    let state = snowflake_or_raise();
    refuse_without_machine_id("snowflake_nextval()");
    refuse_during_recovery("snowflake_nextval()");
    state.refuse_if_machine_shared();
    state.next_id(&state.main)
}

/// `snowflake_js_nextval()`: like `snowflake_nextval()`, in 53 bits, so
/// JavaScript numbers hold it exactly.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_js_nextval() -> i64 {
    let state = snowflake_or_raise();
    refuse_without_machine_id("snowflake_js_nextval()");
    refuse_during_recovery("snowflake_js_nextval()");
    state.refuse_if_machine_shared();
    state.next_id(javascript(state))
}

/// `snowflake_parse(id) → (ts, machine_id, sequence)`.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_parse(
    id: i64,
) -> TableIterator<
    'static,
    (
        name!(ts, TimestampWithTimeZone),
        name!(machine_id, i64),
        name!(sequence, i64),
    ),
> {
    parse_with(snowflake_or_raise().main.layout(), id)
}

/// `snowflake_js_parse(id)`: `snowflake_parse` for JavaScript-safe IDs.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_js_parse(
    id: i64,
) -> TableIterator<
    'static,
    (
        name!(ts, TimestampWithTimeZone),
        name!(machine_id, i64),
        name!(sequence, i64),
    ),
> {
    parse_with(snowflake_or_raise().javascript.layout(), id)
}

/// The parts of `id` under `layout`, or the error that names what is wrong.
fn parts_of(layout: &Layout, id: i64) -> (TimestampWithTimeZone, i64, i64) {
    let parts = layout
        .decompose(id)
        .unwrap_or_else(|e| raise_layout_error(e, id));
    (
        to_timestamptz(layout.epoch_ms + parts.time_ms),
        parts.machine,
        parts.sequence,
    )
}

/// `snowflake_timestamp(id)`: when an ID of this server's layout was
/// made. STABLE: it reads the layout settings (for a generated column or
/// an index, use the form that takes the layout).
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_timestamp(id: i64) -> TimestampWithTimeZone {
    parts_of(snowflake_or_raise().main.layout(), id).0
}

/// `snowflake_machine_id(id)`: the machine id of an ID of this server's
/// layout.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_machine_id(id: i64) -> i64 {
    parts_of(snowflake_or_raise().main.layout(), id).1
}

/// `snowflake_sequence(id)`: the sequence of an ID of this server's
/// layout.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_sequence(id: i64) -> i64 {
    parts_of(snowflake_or_raise().main.layout(), id).2
}

/// The layout the arguments of the IMMUTABLE helpers name: the epoch, and
/// the machine and sequence bits (time takes the rest of the 63).
fn layout_given(epoch: TimestampWithTimeZone, machine_bits: i32, sequence_bits: i32) -> Layout {
    let bad = |problem: String| -> ! { IdgenError::BadLayoutArgument { problem }.raise() };
    if epoch.is_infinity() || epoch.is_neg_infinity() {
        bad(format!("the epoch {epoch} is not finite"));
    }
    let widths = u32::try_from(machine_bits)
        .ok()
        .zip(u32::try_from(sequence_bits).ok())
        .filter(|&(m, s)| m + s < 63);
    let Some((machine, sequence)) = widths else {
        bad(format!(
            "machine_bits {machine_bits} and sequence_bits {sequence_bits} must be at least 0 and 1, and leave time bits of the 63"
        ))
    };
    let epoch_ms =
        (i128::from(epoch.into_inner()) + i128::from(PG_EPOCH_UNIX_MICROS)).div_euclid(1000);
    let epoch_ms = i64::try_from(epoch_ms).unwrap_or(i64::MAX);
    Layout::new(epoch_ms, 63 - machine - sequence, machine, sequence, 63).unwrap_or_else(|_| {
        bad(format!(
            "machine_bits {machine_bits} and sequence_bits {sequence_bits} must be at least 0 and 1, and leave time bits of the 63"
        ))
    })
}

/// `snowflake_timestamp(id, epoch, machine_bits, sequence_bits)`: the same
/// with the layout as arguments. IMMUTABLE, so generated columns and
/// expression indexes may use it, and it keeps its meaning if the
/// settings change later. Needs no preloaded library.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_timestamp")]
fn snowflake_timestamp_in_layout(
    id: i64,
    epoch: TimestampWithTimeZone,
    machine_bits: i32,
    sequence_bits: i32,
) -> TimestampWithTimeZone {
    parts_of(&layout_given(epoch, machine_bits, sequence_bits), id).0
}

/// `snowflake_machine_id(id, epoch, machine_bits, sequence_bits)`.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_machine_id")]
fn snowflake_machine_id_in_layout(
    id: i64,
    epoch: TimestampWithTimeZone,
    machine_bits: i32,
    sequence_bits: i32,
) -> i64 {
    parts_of(&layout_given(epoch, machine_bits, sequence_bits), id).1
}

/// `snowflake_sequence(id, epoch, machine_bits, sequence_bits)`.
#[pg_extern(immutable, strict, parallel_safe, name = "snowflake_sequence")]
fn snowflake_sequence_in_layout(
    id: i64,
    epoch: TimestampWithTimeZone,
    machine_bits: i32,
    sequence_bits: i32,
) -> i64 {
    parts_of(&layout_given(epoch, machine_bits, sequence_bits), id).2
}

/// `snowflake_format(id)`: `20250623131730192-1-0` (UTC ms, machine, sequence).
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_format(id: i64) -> String {
    let layout = snowflake_or_raise().main.layout();
    layout
        .format(id)
        .unwrap_or_else(|e| raise_layout_error(e, id))
}

/// `snowflake_from_format(text)`: the inverse of `snowflake_format`.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_from_format(text: &str) -> i64 {
    let layout = snowflake_or_raise().main.layout();
    layout.parse_friendly(text).unwrap_or_else(|e| match e {
        LayoutError::BadText(_) => IdgenError::BadSnowflakeText {
            text: text.to_string(),
        }
        .raise(),
        LayoutError::MachineTooLarge {
            machine,
            machine_bits,
        } => IdgenError::SnowflakeFieldTooLarge {
            field: "machine id",
            value: machine,
            bits: machine_bits,
        }
        .raise(),
        LayoutError::SequenceTooLarge {
            sequence,
            sequence_bits,
        } => IdgenError::SnowflakeFieldTooLarge {
            field: "sequence",
            value: sequence,
            bits: sequence_bits,
        }
        .raise(),
        other => raise_layout_error(other, 0),
    })
}

/// `snowflake_from_timestamp(ts)`: the smallest ID at `ts` (truncated to
/// the millisecond), for range scans and partition bounds.
#[pg_extern(stable, strict, parallel_safe)]
fn snowflake_from_timestamp(ts: TimestampWithTimeZone) -> i64 {
    let layout = snowflake_or_raise().main.layout();
    if ts.is_infinity() || ts.is_neg_infinity() {
        IdgenError::TimestampOutOfRange {
            problem: format!("{ts} is not finite"),
        }
        .raise();
    }
    // i128: timestamps up to the year 294276 overflow i64 microseconds
    // once moved to the Unix epoch.
    let unix_ms = (i128::from(ts.into_inner()) + i128::from(PG_EPOCH_UNIX_MICROS)).div_euclid(1000);
    let unix_ms = i64::try_from(unix_ms).unwrap_or(i64::MAX);
    layout
        .smallest_id_at(unix_ms)
        .unwrap_or_else(|e| raise_layout_error(e, 0))
}
