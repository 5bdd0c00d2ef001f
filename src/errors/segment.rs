//! Errors about segment tags and their `id_segment` rows: a tag that does
//! not exist or already does, one still in use, no slot for it in shared
//! memory, a row changed in a way that would repeat IDs, `segment_currval`
//! and `segment_setval` out of turn, a tag used up. Each arm declares one
//! error: SQLSTATE, message, hint.

use pgrx::pg_sys::errcodes::PgSqlErrorCode::*;

use super::{
    misrouted, quote_identifier, quote_literal, truncate_utf8, IdgenError, Report, TAG_MAX_BYTES,
};

/// The hint of a tag whose IDs ran out (`TagExhausted`, and a refill's
/// `RefillProblem::Exhausted`).
pub(super) const NO_MORE_IDS: &str =
    "No more IDs can be handed out for this tag; move the table to a new tag.";

/// `UnknownTag`, and a refill's `RefillProblem::NoRow`: no row for `tag`.
pub(super) fn unknown_tag(tag: &str) -> Report {
    Report::new(
        ERRCODE_UNDEFINED_OBJECT,
        format!("segment tag \"{tag}\" does not exist"),
        format!(
            "Create it first: SELECT segment_create({});",
            quote_literal(tag)
        ),
    )
}

/// The report of an error about a tag or its row.
pub(super) fn report(error: &IdgenError) -> Report {
    use IdgenError::*;
    match error {
        UnknownTag { tag } => unknown_tag(tag),
        UnknownTagOfColumn { tag, table, column } => Report::new(
            ERRCODE_UNDEFINED_OBJECT,
            format!(
                "segment tag \"{tag}\" does not exist, and the default of column \"{column}\" of table {table} draws from it"
            ),
            format!(
                "Create it above every ID the column holds: SELECT segment_create({}, start => (SELECT coalesce(max({}), 0) + 1 FROM {table})); — or set another default on the column.",
                quote_literal(tag),
                quote_identifier(column)
            ),
        ),
        TagExists { tag } => Report::new(
            ERRCODE_DUPLICATE_OBJECT,
            format!("segment tag \"{tag}\" already exists"),
            "Use the existing tag, or remove it first with segment_drop().",
        ),
        TagInUse { tag, user, undo, others } => Report::new(
            ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST,
            format!(
                "cannot drop segment tag \"{tag}\" because {user} uses it{}",
                match others {
                    0 => String::new(),
                    1 => " (and 1 more expression)".to_string(),
                    n => format!(" (and {n} more expressions)"),
                }
            ),
            format!(
                "Change it first ({undo}), or drop the tag anyway with SELECT segment_drop({}, force => true) (INSERTs that take the default then fail until the tag exists again).",
                quote_literal(tag)
            ),
        ),
        DefaultOfUnknownTag { user, tag } if tag.is_empty() || tag.len() > TAG_MAX_BYTES => Report::new(
            ERRCODE_WARNING,
            format!(
                "{user} draws from segment tag \"{}...\", which cannot exist: a tag is 1 to {TAG_MAX_BYTES} bytes, and this one is {}",
                truncate_utf8(tag, 20),
                tag.len()
            ),
            format!("INSERTs that take the default fail: give the default a tag of 1 to {TAG_MAX_BYTES} bytes (ALTER TABLE ... ALTER COLUMN ... SET DEFAULT segment_nextval('<tag>')), and create that tag with segment_create."),
        ),
        DefaultOfUnknownTag { user, tag } => Report::new(
            ERRCODE_WARNING,
            format!("{user} draws from segment tag \"{tag}\", which does not exist"),
            format!(
                "INSERTs that take the default fail until the tag exists: create it with SELECT segment_create({}); or fix the default's tag.",
                quote_literal(tag)
            ),
        ),
        TooManyTags { max_tags, holders } => Report::new(
            ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!(
                "too many segment tags in use: shared memory holds pg_idgen.max_tags = {max_tags}, all drawn from in the last minute ({})",
                holders
                    .iter()
                    .map(|(db, n)| format!("database \"{db}\": {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "Raise pg_idgen.max_tags in postgresql.conf and restart the server, remove unused tags with segment_drop(), or try again once a tag has gone a minute undrawn (its slot is then given to a new tag).",
        ),
        TagQuotaReached { tag, database, held } => Report::new(
            ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!(
                "segment tag \"{tag}\" gets no slot in shared memory: database \"{database}\" holds {held}, its share (pg_idgen.max_tags_per_database), each drawn from in the last minute"
            ),
            "Raise pg_idgen.max_tags_per_database (a reload) or pg_idgen.max_tags (a restart) in postgresql.conf, remove unused tags of this database with segment_drop(), or try again once one of its tags has gone a minute undrawn.",
        ),
        MaxIdDecrease { tag, from, to } => Report::new(
            ERRCODE_CHECK_VIOLATION,
            format!(
                "id_segment.max_id of segment tag \"{tag}\" cannot move back from {from} to {to}: IDs up to {from} may have been handed out"
            ),
            format!(
                "Keep max_id at {from} or above. To lower it on purpose, knowing that IDs above the new value will be handed out again, a superuser runs the UPDATE (or segment_setval) after SET LOCAL pg_idgen.allow_max_id_decrease = on in the same transaction."
            ),
        ),
        RenameAttached { .. }
        | RenameUsedByGenerated { .. }
        | AdoptNoColumn { .. }
        | AdoptNotATable { .. }
        | AdoptGenerated { .. }
        | AdoptWrongType { .. }
        | AdoptAlreadyDrawing { .. } => reshape_report(error),
        TagRenamed { from, to } => Report::new(
            ERRCODE_CHECK_VIOLATION,
            format!(
                "id_segment.biz_tag cannot change from \"{from}\" to \"{to}\": the row would hand out IDs \"{to}\" may already have handed out"
            ),
            format!(
                "To give a table a new tag, create it with segment_create({}, start => <above every ID in use>) and drop the old one with segment_drop(). A superuser who means it runs the UPDATE after SET LOCAL pg_idgen.allow_max_id_decrease = on.",
                quote_literal(to)
            ),
        ),
        MaxIdNotRaised { tag, high_water, why } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "this transaction handed out IDs of segment tag \"{tag}\" up to {high_water}, but could not raise its id_segment.max_id to that before committing: {why}"
            ),
            "The transaction is rolled back so that no ID can come out twice. Remove what blocks the UPDATE of the row (a trigger, rule or row-level security policy on id_segment, or READ ONLY), or draw the tag's IDs after the transaction that creates it has committed.",
        ),
        CurrvalNotYetDefined { tag, recovery } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("currval of segment tag \"{tag}\" is not yet defined in this session"),
            if *recovery {
                format!(
                    "IDs can only be handed out on the primary server: connect to it, and call segment_nextval({}) there first, in the session that calls segment_currval.",
                    quote_literal(tag)
                )
            } else {
                format!(
                    "Call segment_nextval({}) in this session first.",
                    quote_literal(tag)
                )
            },
        ),
        SetvalOfAttachedTag { tag, server } => Report::new(
            ERRCODE_FEATURE_NOT_SUPPORTED,
            format!(
                "segment tag \"{tag}\" takes its ranges from central server \"{server}\": segment_setval cannot move it here"
            ),
            format!(
                "Run SELECT segment_setval({}, <value>) on the central server, in the database the tag is attached to. This server hands out the IDs it has cached first (up to pg_idgen.remote_cache_ahead of its demand); to drop them at once, run segment_drop({}) and segment_attach again here.",
                quote_literal(tag),
                quote_literal(tag)
            ),
        ),
        DeclarationOutdated { function, column } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "{function} of this database's pg_idgen declares column {column} with another type than the server's pg_idgen library returns there: the database's pg_idgen is older than the library"
            ),
            "Run ALTER EXTENSION pg_idgen UPDATE in this database.",
        ),
        DrawAfterRemovedHere { tag } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "segment tag \"{tag}\" was created again by this transaction after it dropped, renamed or detached the committed tag of that name (or deleted its row, or moved its table away): if the transaction rolled back, that tag would come back and hand out the IDs drawn here again"
            ),
            "Commit the segment_drop(), segment_rename(), DELETE, TRUNCATE, ALTER TABLE or DROP EXTENSION in a transaction of its own, then create the tag and draw from it.",
        ),
        SetvalOfNewTag { tag } => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "segment tag \"{tag}\" was created by this transaction, which has not committed"
            ),
            format!(
                "Commit the transaction that ran segment_create, or pass the start to segment_create({}, start => <value + 1>) instead.",
                quote_literal(tag)
            ),
        ),
        ExtensionDropped => Report::new(
            ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "extension \"pg_idgen\" was dropped while this statement was running",
            "Run the statement again; IDs cached before the drop are never handed out.",
        ),
        TagExhausted { tag } => Report::new(
            ERRCODE_SEQUENCE_GENERATOR_LIMIT_EXCEEDED,
            format!("segment tag \"{tag}\" is exhausted: its last ID is the largest bigint"),
            NO_MORE_IDS,
        ),
        other => misrouted(other),
    }
}

/// The reports of `segment_rename` and `segment_adopt`: a tag or a column
/// reshaped.
fn reshape_report(error: &IdgenError) -> Report {
    use IdgenError::*;
    match error {
        RenameAttached { tag } => Report::new(
            ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("segment tag \"{tag}\" is attached to a central server, where its row is"),
            "Rename it on the central server, then attach the new name here in place of the old (segment_drop, then segment_attach with the new name).",
        ),
        RenameUsedByGenerated { tag, user } => Report::new(
            ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("segment tag \"{tag}\" cannot be renamed: {user} draws from it, and a generation expression cannot be changed in place"),
            "Drop or change that generated column first, or keep the name.",
        ),
        AdoptNoColumn { table, column } => Report::new(
            ERRCODE_UNDEFINED_COLUMN,
            format!("column \"{column}\" of table {table} does not exist"),
            "Name the column that holds the table's IDs (see \\d of the table).",
        ),
        AdoptNotATable { table } => Report::new(
            ERRCODE_WRONG_OBJECT_TYPE,
            format!("{table} is not a table: segment_adopt switches a column of a table"),
            "Name the table whose column defaults should draw from a tag.",
        ),
        AdoptGenerated { table, column } => Report::new(
            ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("column \"{column}\" of table {table} is a generated column: its value comes from its expression, not a default"),
            "Adopt the column that holds the table's IDs; a generated column cannot draw from a tag.",
        ),
        AdoptWrongType { table, column, type_name } => Report::new(
            ERRCODE_DATATYPE_MISMATCH,
            format!("column \"{column}\" of table {table} is {type_name}: segment IDs are bigint"),
            "Adopt a bigint column (an integer one works while its IDs stay below 2^31); to change the type first: ALTER TABLE ... ALTER COLUMN ... TYPE bigint.",
        ),
        AdoptAlreadyDrawing { table, column, tag } => Report::new(
            ERRCODE_DUPLICATE_OBJECT,
            format!("column \"{column}\" of table {table} draws from segment tag \"{tag}\" already"),
            "Nothing to do: its default is segment_nextval already.",
        ),
        other => misrouted(other),
    }
}
