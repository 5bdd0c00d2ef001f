//! What a SQL call itself gets wrong: a NULL, empty or out-of-range
//! argument, a base62 code that is none, a call in a read-only transaction
//! or on a standby. Each arm declares one error: SQLSTATE, message, hint.

use pgrx::pg_sys::errcodes::PgSqlErrorCode::*;

use super::{misrouted, truncate_utf8, IdgenError, Report, TAG_MAX_BYTES};
use crate::base62::Base62Error;

/// The report of an error about a call's arguments or transaction.
pub(super) fn report(error: &IdgenError) -> Report {
    use IdgenError::*;
    match error {
        NullArgument { what } => Report::new(
            ERRCODE_NULL_VALUE_NOT_ALLOWED,
            format!("{what} must not be NULL"),
            format!("Pass a non-NULL {what}."),
        ),
        EmptyTag => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            "segment tag must not be empty",
            tag_size_hint(),
        ),
        TagTooLong { tag } => Report::new(
            ERRCODE_NAME_TOO_LONG,
            format!(
                "segment tag \"{}...\" is {} bytes long, more than the {TAG_MAX_BYTES} allowed",
                truncate_utf8(tag, 20),
                tag.len()
            ),
            tag_size_hint(),
        ),
        BadStep { step } => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!("step must be positive, got {step}"),
            "Pass step => a positive integer; the default is 1000.",
        ),
        BadStart { start } => Report::new(
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("start must be between 1 and 9223372036854775807, got {start}"),
            "Pass start => a positive bigint; the default is 1.",
        ),
        BadCount { n } => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!("number of IDs must not be negative, got {n}"),
            "Ask for 0 or more IDs.",
        ),
        BadReserveCount { n, max } => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!("number of IDs to reserve must be from 1 to {max}, got {n}"),
            format!("Reserve 1 to {max} IDs per call, and call again for more."),
        ),
        BadSetvalValue { value } => Report::new(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!("segment_setval value must be 0 or more, got {value}"),
            "Pass the largest ID in use, or 0: the next ID is above it.",
        ),
        BadBase62 { input, problem } => bad_base62(truncate_utf8(input, 40), problem),
        ReadOnly { function } => Report::new(
            ERRCODE_READ_ONLY_SQL_TRANSACTION,
            format!("cannot execute {function} in a read-only transaction"),
            "Call it in a read-write transaction (SET TRANSACTION READ WRITE).",
        ),
        DuringRecovery { function } => Report::new(
            ERRCODE_READ_ONLY_SQL_TRANSACTION,
            format!("cannot execute {function} during recovery"),
            "IDs are handed out, and tags changed, on the primary server only; connect to it instead.",
        ),
        other => misrouted(other),
    }
}

/// The hint of an empty or too long tag.
fn tag_size_hint() -> String {
    format!(
        "Use the biz_tag of a row in id_segment: 1 to {TAG_MAX_BYTES} bytes, e.g. segment_nextval('orders')."
    )
}

/// `BadBase62`: `input` (its first 40 bytes) is not the code of a bigint.
fn bad_base62(input: &str, problem: &Base62Error) -> Report {
    const CODE_FORM: &str = "A code is made of 0-9, A-Z and a-z (case matters), at most AzL8n0Y58m7 (leading zeros aside), as idgen_base62() writes them.";
    match problem {
        Base62Error::Negative(n) => Report::new(
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("{n} has no base62 code: it is negative"),
            "Only IDs of 0 and above have a code; segment and snowflake IDs always are.",
        ),
        Base62Error::Empty => Report::new(
            ERRCODE_INVALID_TEXT_REPRESENTATION,
            "an empty string is not a base62 code",
            CODE_FORM,
        ),
        Base62Error::BadCharacter { character, position } => Report::new(
            ERRCODE_INVALID_TEXT_REPRESENTATION,
            format!(
                "invalid base62 code \"{input}\": character \"{character}\" at position {position} is not one of 0-9, A-Z, a-z"
            ),
            CODE_FORM,
        ),
        Base62Error::Overflow => Report::new(
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "base62 code \"{input}\" stands for a number larger than the largest bigint (AzL8n0Y58m7)"
            ),
            CODE_FORM,
        ),
    }
}
