//! `segment_adopt(tbl, col, tag, step)`: switches a live column — a
//! `bigserial`/`serial`, an identity column, or a plain default — to a
//! segment tag, in the calling transaction, without a failed write.
//!
//! In order, all in the caller's transaction, as the caller (who must own
//! the table, as `ALTER TABLE` requires, and may create tags):
//!
//! 1. `LOCK TABLE ... IN ACCESS EXCLUSIVE MODE`: writers wait (they do not
//!    fail) until the transaction ends, then take the new default — the
//!    relation cache is rebuilt when they get their lock.
//! 2. The start: above the column's largest value and above the position
//!    of every sequence the column draws from (its owned or identity
//!    sequence, and any its default names), so that a value drawn from a
//!    sequence but not inserted yet — a client that called `nextval()`
//!    itself, or cached a block — is below every ID of the tag too.
//! 3. An identity column loses its identity (`DROP IDENTITY`, which drops
//!    its sequence); a serial column keeps its owned sequence, unused.
//! 4. `segment_create(tag, start, step)`, then `ALTER TABLE ... ALTER
//!    COLUMN ... SET DEFAULT segment_nextval(tag)`.
//!
//! Refused, with nothing done: not a table, no such column, a column
//! neither `bigint` nor `integer` (or `smallint`), a generated column, a
//! column already drawing from a tag, a tag that exists.

use super::default_check::tag_uses;
use super::tag::{check_tag, current_table_oid};
use crate::catalog::{quote_identifier, quote_literal, table_schema};
use crate::errors::{required, IdgenError};
use crate::segment::registry::registry_or_raise;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// The column as the catalog has it.
struct Column {
    /// As `regclass` prints it (quoted, qualified where needed).
    table: String,
    /// Its name alone, for a tag's name.
    name: String,
    relkind: String,
    type_name: String,
    identity: bool,
    generated: bool,
}

/// `segment_adopt(tbl regclass, col name, tag => NULL, step => 1000)`:
/// see the module header. Returns the tag (named `<table>_<column>` when
/// not given). The SQL function of that signature (`sql/finalize.sql`)
/// calls this one: pgrx has no `regclass` or `name` argument types.
#[pg_extern(volatile, parallel_unsafe)]
fn segment_adopt_column(
    tbl: Option<pg_sys::Oid>,
    col: Option<&str>,
    tag: default!(Option<&str>, "NULL"),
    step: default!(Option<i32>, 1000),
    fcinfo: pg_sys::FunctionCallInfo,
) -> String {
    registry_or_raise();
    super::sql::check_writable("segment_adopt()");
    let relid = required(tbl, "table");
    let col = required(col, "column");
    let step = required(step, "step");
    let table_oid = current_table_oid(fcinfo);
    let schema = quote_identifier(&table_schema(table_oid).unwrap_or_default());
    let adopted = Spi::connect_mut(|client| adopt(client, &schema, relid, col, tag, step));
    match adopted {
        Ok(Ok(tag)) => tag,
        Ok(Err(e)) => e.raise(),
        Err(e) => IdgenError::Internal {
            context: "segment_adopt",
            message: e.to_string(),
        }
        .raise(),
    }
}

fn adopt(
    client: &mut SpiClient<'_>,
    schema: &str,
    relid: pg_sys::Oid,
    col: &str,
    tag: Option<&str>,
    step: i32,
) -> Result<Result<String, IdgenError>, pgrx::spi::Error> {
    let Some(column) = read_column(client, relid, col)? else {
        let table = regclass_text(client, relid)?;
        return Ok(Err(IdgenError::AdoptNoColumn {
            table,
            column: col.into(),
        }));
    };
    if !matches!(column.relkind.as_str(), "r" | "p") {
        return Ok(Err(IdgenError::AdoptNotATable {
            table: column.table,
        }));
    }
    let (table, column_name) = (column.table.clone(), col.to_string());
    if column.generated {
        return Ok(Err(IdgenError::AdoptGenerated {
            table,
            column: column_name,
        }));
    }
    if !matches!(column.type_name.as_str(), "bigint" | "integer" | "smallint") {
        return Ok(Err(IdgenError::AdoptWrongType {
            table,
            column: column_name,
            type_name: column.type_name,
        }));
    }
    let table_oid = u32::from(lookup_id_segment(client, schema)?);
    if let Some(used) = tag_uses(table_oid, Some(&[relid.to_u32()]))
        .into_iter()
        .find(|u| matches!(&u.user, super::default_check::User::Column { column, .. } if column == col))
    {
        return Ok(Err(IdgenError::AdoptAlreadyDrawing {
            table,
            column: column_name,
            tag: used.tag,
        }));
    }
    let tag = tag.map(str::to_string).unwrap_or_else(|| {
        let name = format!("{}_{col}", column.name);
        crate::errors::truncate_utf8(&name, crate::errors::TAG_MAX_BYTES).to_string()
    });
    check_tag(tag.as_bytes());
    let column_sql = quote_identifier(col);
    client.update(
        &format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"),
        None,
        &[],
    )?;
    let start = first_free(client, &table, &column_sql, relid, col)?;
    if column.identity {
        client.update(
            &format!("ALTER TABLE {table} ALTER COLUMN {column_sql} DROP IDENTITY"),
            None,
            &[],
        )?;
    }
    client.update(
        &format!("SELECT {schema}.segment_create($1, $2, $3)"),
        None,
        &[tag.as_str().into(), start.into(), step.into()],
    )?;
    client.update(
        &format!(
            "ALTER TABLE {table} ALTER COLUMN {column_sql} SET DEFAULT {schema}.segment_nextval({})",
            quote_literal(&tag)
        ),
        None,
        &[],
    )?;
    Ok(Ok(tag))
}

/// The column `col` of `relid`, if it exists (not dropped).
fn read_column(
    client: &SpiClient<'_>,
    relid: pg_sys::Oid,
    col: &str,
) -> Result<Option<Column>, pgrx::spi::Error> {
    let rows = client.select(
        "SELECT c.oid::pg_catalog.regclass::pg_catalog.text, c.relname::pg_catalog.text, \
                c.relkind::pg_catalog.text, \
                pg_catalog.format_type(a.atttypid, NULL), a.attidentity OPERATOR(pg_catalog.<>) '', \
                a.attgenerated OPERATOR(pg_catalog.<>) '' \
           FROM pg_catalog.pg_class c \
           JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid \
          WHERE c.oid OPERATOR(pg_catalog.=) $1 AND a.attname OPERATOR(pg_catalog.=) $2 \
            AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped",
        Some(1),
        &[relid.into(), col.into()],
    )?;
    if rows.is_empty() {
        return Ok(None);
    }
    let row = rows.first();
    Ok(Some(Column {
        table: row.get::<String>(1)?.unwrap_or_default(),
        name: row.get::<String>(2)?.unwrap_or_default(),
        relkind: row.get::<String>(3)?.unwrap_or_default(),
        type_name: row.get::<String>(4)?.unwrap_or_default(),
        identity: row.get::<bool>(5)?.unwrap_or(false),
        generated: row.get::<bool>(6)?.unwrap_or(false),
    }))
}

/// The first ID the tag may hand out: above the column's largest value
/// and above every sequence the column draws from (owned, identity, or
/// named by its default) as far as it was drawn.
fn first_free(
    client: &SpiClient<'_>,
    table: &str,
    column_sql: &str,
    relid: pg_sys::Oid,
    col: &str,
) -> Result<i64, pgrx::spi::Error> {
    let largest = client
        .select(
            &format!("SELECT pg_catalog.max({column_sql})::pg_catalog.int8 FROM {table}"),
            Some(1),
            &[],
        )?
        .first()
        .get::<i64>(1)?
        .unwrap_or(0);
    let drawn = client
        .select(
            "SELECT pg_catalog.max(pg_catalog.pg_sequence_last_value(s.seq)) \
               FROM (SELECT pg_catalog.pg_get_serial_sequence($1::pg_catalog.regclass::pg_catalog.text, $2)::pg_catalog.regclass AS seq \
                     UNION \
                     SELECT d.refobjid::pg_catalog.regclass \
                       FROM pg_catalog.pg_attrdef ad \
                       JOIN pg_catalog.pg_depend d \
                         ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_attrdef'::pg_catalog.regclass \
                        AND d.objid OPERATOR(pg_catalog.=) ad.oid \
                        AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
                       JOIN pg_catalog.pg_class sc ON sc.oid OPERATOR(pg_catalog.=) d.refobjid \
                                                   AND sc.relkind OPERATOR(pg_catalog.=) 'S' \
                       JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) ad.adrelid \
                                                     AND a.attnum OPERATOR(pg_catalog.=) ad.adnum \
                      WHERE ad.adrelid OPERATOR(pg_catalog.=) $1 \
                        AND a.attname OPERATOR(pg_catalog.=) $2) s \
              WHERE s.seq IS NOT NULL",
            Some(1),
            &[relid.into(), col.into()],
        )?
        .first()
        .get::<i64>(1)?
        .unwrap_or(0);
    Ok(largest.max(drawn).max(0).saturating_add(1))
}

/// The OID of `id_segment` in the extension's schema.
fn lookup_id_segment(
    client: &SpiClient<'_>,
    schema: &str,
) -> Result<pg_sys::Oid, pgrx::spi::Error> {
    Ok(client
        .select(
            &format!("SELECT '{schema}.id_segment'::pg_catalog.regclass::pg_catalog.oid"),
            Some(1),
            &[],
        )?
        .first()
        .get::<pg_sys::Oid>(1)?
        .unwrap_or(pg_sys::InvalidOid))
}

fn regclass_text(client: &SpiClient<'_>, relid: pg_sys::Oid) -> Result<String, pgrx::spi::Error> {
    Ok(client
        .select(
            "SELECT $1::pg_catalog.regclass::pg_catalog.text",
            Some(1),
            &[relid.into()],
        )?
        .first()
        .get::<String>(1)?
        .unwrap_or_default())
}
