//! Machine-id leases: several servers take their snowflake machine ids from
//! one table on a central PostgreSQL server (reached through
//! `postgres_fdw`), so two live servers never hold the same id. This module
//! owns the table's layout, the SQL of the protocol, and its pure rules:
//! which id to claim, when to renew, when to stop issuing, the floor a
//! successor starts above. Pure: no PostgreSQL, no clock — the caller
//! passes monotonic and wall-clock readings in milliseconds, so tests drive
//! it with fake clocks (the rules' tests below; the simulation of servers,
//! clocks and the table in `lease_sim.rs`). Running the statements, and
//! telling the generator what it may do, is the glue's business
//! (`lease_keeper.rs`, `generator.rs`).
//!
//! # What buys what
//!
//! 1. **Every ID is unique**, with any wall clocks, also when the table
//!    forgets writes: a holder issues only times above every time an
//!    earlier holder of its machine id could issue. It takes all three
//!    (proofs: "Why a successor's IDs ..." and "The restore fence"):
//!    * *the ceiling* — `LeaseSettings::ceiling_unix_ms`, recorded in the
//!      row's floor by `claim_sql`/`renew_sql` (`GREATEST`), sent by
//!      `Keeper::write`, handed by `Keeper::apply` to
//!      `Generator::take_lease`/`renew_lease`; `Generator::next` and
//!      `next_exact` refuse any time above it (`Refusal::AboveCeiling`);
//!    * *the version CAS* — `claim_sql`/`renew_sql` (`version = $2`): the
//!      floor a claim read covers every earlier ceiling, and a holder
//!      taken over raises none; the claimer starts above that floor
//!      (`Held::claimed`, `Generator::take_lease`);
//!    * *the restore fence*, on the central server's clock — `clock_sql`,
//!      read by `Keeper::write` before the CAS (for the ceiling) and after
//!      it (for the fence); `CentralClock`, `fence_floor_unix_ms`,
//!      `Held::claimed`, `Held::renewed` (a renewal that `lapses`),
//!      `check_central_reading`;
//!
//!    and the `layout` check (`LeaseWatch::choose`).
//! 2. **No two live holders of one machine id**: the holder has stopped
//!    issuing before a takeover commits. It takes both (proof: "Why the
//!    holder has stopped ..."):
//!    * *expiry by observation* — `LeaseWatch::observe` and `choose`
//!      (`trusted_lease_ms`): a version seen standing still for the
//!      holder's `lease_ms` on the claimer's monotonic clock, read by
//!      `Keeper::claim` after the read returned; no wall clock, no `now()`;
//!    * *the clock-rate margin* — `LeaseSettings::new` (`min_margin_ms`),
//!      `grant`/`reply_in_time` (`Held::stop_at_mono_ms`, counted from
//!      before the write was sent), `Generator::next` (`Refusal::NoLease`),
//!      and `Keeper::step`/`renew`, which stop the generators at the
//!      deadline and on a lost lease.
//!
//! 1 leans on 2 once: a renewal whose CAS lands on a row a restore brought
//! back is harmless if its reply came before the deadline, as no takeover
//! comes before it (`Held::lapses`). Every place that enforces one of these
//! says which in an `// INVARIANT:` comment.
//!
//! # The table
//!
//! ```sql
//! CREATE TABLE idgen_machine_lease (      -- on the central server
//!     machine_id    int4 PRIMARY KEY,     -- one row per id, 0 ..= max (seeded)
//!     holder        text,                 -- NULL: free (never held, or given up)
//!     version       int8 NOT NULL,        -- +1 on every write: the CAS
//!     lease_ms      int8 NOT NULL,        -- the holder's lease duration
//!     floor_unix_ms int8,                 -- no ID with this id has a time above it
//!     layout        text,                 -- epoch and bit widths of the last holder
//!     lease_until   timestamptz           -- for people only: see below
//! );
//! ```
//!
//! No wall clock decides anything, and no statement calls `now()`:
//!
//! * `postgres_fdw` never sends a mutable function to the remote server. In
//!   `UPDATE ... SET lease_until = now() + ...` or `WHERE lease_until <
//!   now()` on a foreign table, `now()` is the *local* server's: every
//!   server would judge expiry by its own clock, which is exactly the
//!   window the lease must not have.
//! * Even the central server's clock can step (NTP, an operator), and would
//!   end every lease early at once.
//!
//! Hence expiry by observation, `lease_ms` in the row (a claimer waits the
//! holder's duration, not its own), and no `updated_at` (it would be the
//! writer's clock). `lease_until` is the holder's own wall-clock estimate
//! of when it stops, written for people reading the table; no rule reads
//! it. `layout` makes servers that disagree on the epoch or bit widths
//! fail clearly instead of sharing machine ids whose IDs overlap.
//!
//! # The protocol
//!
//! Every write is a single-row version CAS (`WHERE machine_id = $1 AND
//! version = $2`), as in `id_segment`: no advisory locks, no `ctid`, no
//! `FOR UPDATE` in the statements, so they run unchanged on the central
//! table or through a foreign table over it.
//!
//! 1. **Read** all rows (`read_sql`); `LeaseWatch::observe` notes, per row,
//!    the monotonic instant its current version was first seen.
//! 2. **Choose** (`LeaseWatch::choose`): the previous id if it is free,
//!    this start's own, or expired; else a row this start holds (a reply
//!    that was lost); else the lowest free or expired id; else wait. A
//!    holder is the server's name and a token of the keeper's start: a
//!    crashed start's row is waited out, a live namesake's left alone and
//!    reported (`holder_of_this_start`, `LeaseWatch::namesakes`).
//! 3. **Claim** (`claim_sql`): CAS on the version read. 0 rows: someone
//!    else won — read again. The claimer starts above the row's
//!    `floor_unix_ms` as read (the CAS proves the row did not change since).
//! 4. **Renew** (`renew_sql`) from a third of the duration on, while the
//!    lease is held: CAS on the version of the last write, and the holder.
//!    0 rows: the lease is lost — stop at once, and claim again.
//! 5. **Give up** (`give_up_sql`) at a clean shutdown, after the generator
//!    has stopped: the row becomes free, its floor the exact last time
//!    issued, so a restart (or anyone) claims it at once without watching
//!    it expire. It matches the row by this start's holder alone, not
//!    the version (`give_up_sql` says why).
//!
//! A reply is used only if it arrived before the deadline it grants
//! (`reply_in_time`); a late one still updates the version, so the next
//! renewal's CAS can succeed.
//!
//! # Why the holder has stopped before anyone takes over
//!
//! The holder reads its monotonic clock *before sending* a claim or
//! renewal (`s`), and issues no ID from `s + lease_ms - margin` on. The
//! write commits after it was sent; a claimer's read that shows the new
//! version took its snapshot after that commit, and the claimer notes the
//! instant *after the read returned* (`r`), so `s < r` in real time
//! whatever the network delays: they only push `s` earlier or `r` later.
//! The claimer claims no sooner than `r + lease_ms` on its clock, and its
//! CAS succeeds only if the holder wrote nothing since. So the holder's
//! last ID comes before the takeover if `(D - m) / (1 - ρ) <= D / (1 + ρ)`
//! for monotonic clocks whose rates are off by at most `ρ`, i.e.
//! `m >= 2ρD/(1 + ρ)`: with `ρ = MAX_CLOCK_RATE_ERROR_PPM`, the smallest
//! margin `LeaseSettings::new` accepts. No wall clock appears in the
//! argument.
//!
//! # Why a successor's IDs are above every ID of the previous holder
//!
//! The ceiling `c` a claim or renewal records is the holder's wall clock
//! when it sent the request plus `lease_ms - margin` plus its `max_lead`:
//! the latest time it could give an ID before its deadline with a clock
//! that runs true (or less: the restore fence below caps it). The holder
//! issues no ID whose time is above the ceiling its last successful write
//! returned, so a clock stepping forward makes it wait, never overshoot. A
//! claimer's CAS succeeds only on the version it read, so the floor it
//! read covers every ceiling any earlier holder used, and it issues only
//! times above it. This holds with any wall clocks, and even when two live
//! servers wrongly share a holder name (their tokens differ, so each keeps
//! to its own rows). The floor is a Unix time; the `layout` check makes
//! all servers sharing the table use one epoch and one set of bit widths,
//! without which one machine id could give the same ID at two different
//! times.
//!
//! The price: a successor whose clock is behind the old holder's issues
//! nothing until its clock is within its `max_lead` of the floor.
//!
//! # The restore fence
//!
//! The argument above trusts the table to remember every write. A table
//! that forgets — restored from a dump or a copy, its server failed over
//! to a standby that lost commits, a row edited by hand — can show a row
//! free, or at an older version with a lower floor, while its last holder
//! is still issuing (it stops only when its next renewal's CAS fails). No
//! marker in the table can warn a claimer that never read it before, so
//! every claim fences by the one clock every server sharing the table
//! reads: the central server's (`clock_sql`, a view of `clock_timestamp()`
//! there; `postgres_fdw` never ships a volatile function, so the view must
//! live on the central server). Each claim and renewal reads it in its own
//! remote transaction, before the version CAS: `C`.
//!
//! * **A holder** records and keeps to a ceiling of at most `C +
//!   usable + CENTRAL_CLOCK_SLACK_MS` (`LeaseSettings::ceiling_unix_ms`),
//!   with `C` read before its write committed.
//! * **A claimer** starts above `C + max(its duration, a held row's
//!   lease_ms) + CENTRAL_CLOCK_SLACK_MS` (`fence_floor_unix_ms`), with `C`
//!   read after the read that showed it the row — whatever the row looks
//!   like: free, its own, or expired. An expired row gets no credit for
//!   the time its version stood still: a restore can bring back the very
//!   version a claimer watched, after renewals it never saw.
//!
//! Every write a claimer cannot see committed before it read the row (a
//! lost write committed before the restore that lost it), so its holder's
//! `C` is below the claimer's, and its ceiling below the claimer's floor
//! as long as the central clock does not step back (a failover's standby
//! included) and every server sharing the table has one
//! `pg_idgen.lease_duration`. The keeper warns when it sees either broken
//! (`CentralClock`, `LeaseWatch::other_durations`), claims above the
//! highest central time it has seen, and refuses a central reading more
//! than `MAX_CENTRAL_CLOCK_GAP_MS` from its own clock.
//!
//! **A renewal** whose reply comes at or after the deadline in force
//! (`Held::lapses`) counts as a claim: its floor is fenced anew with the
//! `C` it read, and the generators wait for it again. Its CAS may have
//! landed after the row was taken over (a takeover comes only after the
//! deadline: see above) and then brought back to this holder's version by
//! a restore; a reply before the deadline proves the CAS committed before
//! any takeover could. The holder's monotonic clock orders the two.
//!
//! The cost: the first ID after any claim — a first start, a clean
//! restart, a takeover — waits until the claimer's clock plus its
//! `max_lead` passes that floor, and the holder's ceiling is above it
//! (`Held::wait_before_issuing_ms`): `duration + CENTRAL_CLOCK_SLACK_MS -
//! max_lead` with clocks in step, and at least the first renewal.
//!
//! # What the glue must do
//!
//! * Read the monotonic clock (and the wall clock, for the ceiling) before
//!   the *first* remote statement of a claim's or renewal's transaction,
//!   and the monotonic clock again after its COMMIT returns: through
//!   `postgres_fdw` the remote transaction commits with the local one, and
//!   `RETURNING` arrives before that.
//! * Read the central clock (`clock_sql`) in that transaction, before the
//!   CAS, through the lease table's own foreign server.
//! * Through `postgres_fdw` each UPDATE runs as a remote `SELECT ... FOR
//!   UPDATE` and an `UPDATE ... WHERE ctid`, in a REPEATABLE READ remote
//!   transaction: a CAS that loses to a concurrent writer fails with
//!   SQLSTATE 40001 (could not serialize access) instead of returning no
//!   row. Both mean "lost": read again (claim), or the lease is lost
//!   (renew). Tested against PostgreSQL 15, as are the statements.
//! * Give the generator `Held` once `Held::wait_before_issuing_ms` says so:
//!   no ID from `stop_at_mono_ms` on, or once a renewal finds the lease
//!   lost; no time above `ceiling_unix_ms` (the generator's own ceiling,
//!   `Generator::take_lease`); only times above `floor_unix_ms`.
//! * Seed the rows `0 ..= leased_max_machine_id(layout)` before the first
//!   claim, and again whenever a read finds fewer (rows deleted by hand).
//! * Name each server (`holder`) uniquely among live servers, and the same
//!   across its restarts (so it finds its row again).

use std::collections::BTreeMap;
use std::fmt;

/// How many machine ids a lease can hand out at most, whatever the layout:
/// the ids `0 ..= 1023`. Each claim reads them all, and the first seeds
/// them one by one through postgres_fdw, so a layout with 20 machine bits
/// (a million ids) must not mean a million rows; 1,024 servers are more
/// than one lease table serves.
pub const MAX_LEASED_IDS: i32 = 1024;

/// The highest machine id leased with a layout whose highest is
/// `layout_max_machine_id`: the lower of it and `MAX_LEASED_IDS - 1`.
pub fn leased_max_machine_id(layout_max_machine_id: i64) -> i32 {
    layout_max_machine_id.clamp(0, i64::from(MAX_LEASED_IDS - 1)) as i32
}

/// Whether a read that returned `rows_read` rows of `0 ..= max_machine_id`
/// found some missing: seed again before the next read.
pub fn needs_seeding(rows_read: usize, max_machine_id: i32) -> bool {
    (rows_read as i64) <= i64::from(max_machine_id)
}

/// Creates the rows `0 ..= $1` (int4) that do not exist yet.
pub fn seed_sql(table: &str) -> String {
    format!(
        "INSERT INTO {table} (machine_id, version, lease_ms) \
         SELECT g, 0, 0 FROM pg_catalog.generate_series(0, $1) AS g ON CONFLICT DO NOTHING"
    )
}

/// Reads the rows `0 ..= $1` (int4), in the column order of `LeaseRow`.
pub fn read_sql(table: &str) -> String {
    format!(
        "SELECT machine_id, holder, version, lease_ms, floor_unix_ms, layout FROM {table} \
          WHERE machine_id OPERATOR(pg_catalog.<=) $1 ORDER BY machine_id"
    )
}

/// Claims a row: `$1` machine id (int4), `$2` the version read (int8), `$3`
/// holder (text), `$4` lease_ms (int8), `$5` ceiling (int8, Unix ms), `$6`
/// lease_until for people (int8, Unix ms), `$7` layout (text). Returns the
/// new version and the ceiling recorded; no row: someone else won.
pub fn claim_sql(table: &str) -> String {
    // INVARIANT: unique IDs — the version CAS (`version = $2`), the ceiling (`GREATEST`).
    format!(
        "UPDATE {table} SET holder = $3, version = version OPERATOR(pg_catalog.+) 1, \
                lease_ms = $4, floor_unix_ms = GREATEST(floor_unix_ms, $5), \
                lease_until = {LEASE_UNTIL_PARAM}, layout = $7 \
          WHERE machine_id OPERATOR(pg_catalog.=) $1 AND version OPERATOR(pg_catalog.=) $2 \
      RETURNING version, floor_unix_ms"
    )
}

/// Renews a lease: `$1` .. `$6` as in `claim_sql` (`$2` the version of this
/// holder's last write). Returns the new version and the ceiling recorded;
/// no row: the lease is lost.
pub fn renew_sql(table: &str) -> String {
    // INVARIANT: unique IDs — the version CAS and the ceiling; a row taken over refuses it.
    format!(
        "UPDATE {table} SET version = version OPERATOR(pg_catalog.+) 1, lease_ms = $4, \
                floor_unix_ms = GREATEST(floor_unix_ms, $5), lease_until = {LEASE_UNTIL_PARAM} \
          WHERE machine_id OPERATOR(pg_catalog.=) $1 AND version OPERATOR(pg_catalog.=) $2 \
            AND holder OPERATOR(pg_catalog.=) $3 \
      RETURNING version, floor_unix_ms"
    )
}

/// Gives a lease up: `$1` the machine id (int4), `$2` this start's holder
/// (text), `$3` the floor to leave (int8, Unix ms, or NULL;
/// `Held::give_up_floor_unix_ms`). Run it only after the generator has
/// stopped for good. It matches on the holder, not the version: a renewal
/// that committed while the shutdown cut its reply off moved the version
/// this keeper knows, and only this start writes under its token (a
/// holder's floor never goes below what it issued, so the exact floor is
/// right whichever of its versions the row is at). Returns the new
/// version; no row: the lease was lost already, and the row keeps its
/// higher floor.
pub fn give_up_sql(table: &str) -> String {
    format!(
        "UPDATE {table} SET holder = NULL, version = version OPERATOR(pg_catalog.+) 1, \
                floor_unix_ms = $3, lease_until = NULL \
          WHERE machine_id OPERATOR(pg_catalog.=) $1 AND holder OPERATOR(pg_catalog.=) $2 \
      RETURNING version"
    )
}

/// Reads the central server's clock (`$1`-free): one row, Unix ms, from
/// `clock_table`, the foreign table over the central view
/// `CLOCK_VIEW_SQL`. Run it in a claim's or renewal's transaction, before
/// the CAS, through the lease table's foreign server (the restore fence).
pub fn clock_sql(clock_table: &str) -> String {
    format!("SELECT unix_ms FROM {clock_table}")
}

/// The view to create on the central server, beside the lease table: its
/// clock, in Unix ms. `clock_timestamp()`, not `now()`: the time of the
/// read, not of the transaction's start.
pub const CLOCK_VIEW_SQL: &str = "CREATE VIEW idgen_lease_clock AS \
     SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8 AS unix_ms";

/// The foreign table over it, on each server, in the lease table's
/// foreign server (`{server}`) and named `{table}`.
pub fn clock_foreign_table_sql(table: &str, server: &str) -> String {
    format!(
        "CREATE FOREIGN TABLE {table} (unix_ms int8) SERVER {server} \
         OPTIONS (table_name 'idgen_lease_clock')"
    )
}

/// `lease_until` from `$6`, Unix ms. `to_timestamp(float8)` is immutable,
/// so through `postgres_fdw` it means the same on either side.
const LEASE_UNTIL_PARAM: &str =
    "pg_catalog.to_timestamp($6::pg_catalog.float8 OPERATOR(pg_catalog./) 1000::pg_catalog.float8)";

/// The default lease duration.
pub const DEFAULT_DURATION_MS: i64 = 20_000;
/// The default safety margin: the holder stops this long before a claimer
/// may take over.
pub const DEFAULT_MARGIN_MS: i64 = 1_000;
/// Shorter leases would renew too often for a round trip to a central
/// server.
pub const MIN_DURATION_MS: i64 = 1_000;
/// Longer leases would keep a dead server's id (and its successors' floor)
/// unusable for too long.
pub const MAX_DURATION_MS: i64 = 600_000;
/// The smallest margin, whatever the duration: covers a coarse monotonic
/// clock and a check just before a (lock-free, instant) issue.
pub const MIN_MARGIN_MS: i64 = 100;
/// How far any monotonic clock's rate may be off real time, in parts per
/// million: NTP slews `CLOCK_MONOTONIC` by at most 500 ppm, crystals are
/// off by well under 100 ppm.
pub const MAX_CLOCK_RATE_ERROR_PPM: i64 = 1_000;
/// `pg_idgen.snowflake_max_lead`'s upper bound (24 days).
pub const MAX_LEAD_LIMIT_MS: i64 = 24 * 86_400_000;
/// A holder renews once `1 / RENEW_DIVISOR` of its duration has passed
/// since it sent its last claim or renewal: two more tries fit before its
/// deadline.
pub const RENEW_DIVISOR: i64 = 3;
/// The restore fence's allowance for a holder's clock running ahead of the
/// central server's: a holder's ceiling is at most the central clock plus
/// its usable time plus this, and a claim starts above the central clock
/// plus a duration plus this. It costs every claim this much more wait;
/// servers kept in step by NTP are milliseconds apart, and a holder
/// further ahead issues only less far ahead of its own clock (and is
/// warned).
pub const CENTRAL_CLOCK_SLACK_MS: i64 = 1_000;
/// How far the central clock may go back between two readings before the
/// keeper warns: less than the smallest margin, which the fence's proof
/// has to spare (a claimer waits a whole duration, a holder's ceiling is
/// a margin less).
pub const CENTRAL_CLOCK_BACK_TOLERANCE_MS: i64 = MIN_MARGIN_MS;

/// Why a setting, a row or a choice is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseError {
    BadDuration {
        duration_ms: i64,
    },
    BadMargin {
        margin_ms: i64,
        min_ms: i64,
        max_ms: i64,
    },
    BadMaxLead {
        max_lead_ms: i64,
    },
    BadHolder {
        holder: String,
    },
    /// The table has no row for any id `0 ..= max_machine_id`: not seeded.
    NoRows {
        max_machine_id: i32,
    },
    /// Every id is held by a server seen renewing its lease. The claimer
    /// keeps watching: read the table again at `retry_at_mono_ms`, when
    /// the first of them could expire.
    AllHeld {
        count: usize,
        max_machine_id: i32,
        retry_at_mono_ms: i64,
    },
    /// Every id not held is passed over: its row was locked on the central
    /// server at this server's last try.
    AllLocked {
        max_machine_id: i32,
    },
    /// The central clock reads more than `MAX_CENTRAL_CLOCK_GAP_MS` from
    /// this server's.
    CentralClockFar {
        central_unix_ms: i64,
        local_unix_ms: i64,
    },
    /// A row was last held under another epoch or bit widths.
    LayoutMismatch {
        machine_id: i32,
        holder: Option<String>,
        theirs: String,
        ours: String,
    },
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::BadDuration { duration_ms } => write!(
                f,
                "the lease duration must be between {MIN_DURATION_MS} and {MAX_DURATION_MS} ms, not {duration_ms}"
            ),
            LeaseError::BadMargin {
                margin_ms,
                min_ms,
                max_ms,
            } => write!(
                f,
                "the lease margin must be between {min_ms} and {max_ms} ms for this duration \
                 (at least {MIN_MARGIN_MS} ms and {}/1000 of it for clock rates {MAX_CLOCK_RATE_ERROR_PPM} ppm off, \
                 at most half of it), not {margin_ms}",
                2 * MAX_CLOCK_RATE_ERROR_PPM / 1000
            ),
            LeaseError::BadMaxLead { max_lead_ms } => write!(
                f,
                "the maximum lead must be between 0 and {MAX_LEAD_LIMIT_MS} ms, not {max_lead_ms}"
            ),
            LeaseError::BadHolder { holder } => write!(
                f,
                "the lease holder name {holder:?} must be 1 to 200 characters with no control characters"
            ),
            LeaseError::NoRows { max_machine_id } => write!(
                f,
                "the machine id lease table has no row for ids 0 to {max_machine_id}: \
                 the lease keeper inserts them when the user it connects as may INSERT into it"
            ),
            LeaseError::AllLocked { max_machine_id } => write!(
                f,
                "every machine id (0 to {max_machine_id}) is held by another server or was locked on the central server by another session at this server's last try"
            ),
            LeaseError::AllHeld {
                count,
                max_machine_id,
                ..
            } => write!(
                f,
                "all {count} machine ids (0 to {max_machine_id}) are leased by servers that keep renewing"
            ),
            LeaseError::CentralClockFar {
                central_unix_ms,
                local_unix_ms,
            } => {
                // In whole minutes, so that the keeper logs it once, not at
                // every look.
                let gap = central_unix_ms.saturating_sub(*local_unix_ms);
                write!(
                    f,
                    "the central server's clock (read through pg_idgen.lease_clock_table) is {} min {} this \
                     server's, more than {} min apart, so no lease is claimed or renewed (set the clocks right \
                     with NTP, and check that the central view idgen_lease_clock reads clock_timestamp())",
                    gap.saturating_abs() / 60_000,
                    if gap > 0 { "ahead of" } else { "behind" },
                    MAX_CENTRAL_CLOCK_GAP_MS / 60_000
                )
            }
            LeaseError::LayoutMismatch {
                machine_id,
                holder,
                theirs,
                ours,
            } => write!(
                f,
                "machine id {machine_id} was leased{} under the layout \"{theirs}\", this server uses \"{ours}\": \
                 every server sharing the lease table needs the same epoch and bit widths (to change them \
                 for all, stop every server, then clear the rows' layouts as the README's \"Changing the \
                 layout under leases\" shows)",
                holder
                    .as_ref()
                    .map_or(String::new(), |h| format!(" by {h:?}"))
            ),
        }
    }
}

impl std::error::Error for LeaseError {}

/// What a keeper writes as its rows' holder: the server's name
/// (`pg_idgen.lease_holder`, or host, port and data directory) and a
/// token drawn at each start of the keeper. A row is this start's own only
/// with both, so a row left by an earlier start (a crash) is not taken
/// back while it may still look held, and two live servers given one name
/// — cloned machines, a standby copied with its settings — never take
/// rows from each other; each sees the other's rows renewed under its
/// name (`LeaseWatch::namesakes`) and says so.
pub fn holder_of_this_start(name: &str, token: u32) -> String {
    format!("{name} #{token:08x}")
}

/// The name part of a holder `holder_of_this_start` wrote; a holder
/// without a token (written by pg_idgen 0.2.0) is all name.
pub fn holder_name(holder: &str) -> &str {
    match holder.rsplit_once(" #") {
        Some((name, token)) if token.len() == 8 && token.chars().all(|c| c.is_ascii_hexdigit()) => {
            name
        }
        _ => holder,
    }
}

/// A lease holder's name: the server's identity in the table. It must be
/// unique among live servers for the *timing* promise (the IDs stay unique
/// regardless, see the header); printable, 1 to 200 characters.
pub fn check_holder(holder: &str) -> Result<(), LeaseError> {
    let chars = holder.chars().count();
    if (1..=200).contains(&chars) && !holder.chars().any(char::is_control) {
        Ok(())
    } else {
        Err(LeaseError::BadHolder {
            holder: holder.to_string(),
        })
    }
}

/// The settings of this server's leases, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseSettings {
    /// How long a lease lasts, from the moment its claim or renewal was
    /// sent.
    pub duration_ms: i64,
    /// How long before that the holder stops issuing.
    pub margin_ms: i64,
    /// How far the generator's time may run ahead of the wall clock
    /// (`pg_idgen.snowflake_max_lead`).
    pub max_lead_ms: i64,
}

impl LeaseSettings {
    pub fn new(
        duration_ms: i64,
        margin_ms: i64,
        max_lead_ms: i64,
    ) -> Result<LeaseSettings, LeaseError> {
        if !(MIN_DURATION_MS..=MAX_DURATION_MS).contains(&duration_ms) {
            return Err(LeaseError::BadDuration { duration_ms });
        }
        // INVARIANT: no two live holders — the clock-rate margin, `m >= 2ρD/(1 + ρ)`.
        let (min_ms, max_ms) = (Self::min_margin_ms(duration_ms), duration_ms / 2);
        if !(min_ms..=max_ms).contains(&margin_ms) {
            return Err(LeaseError::BadMargin {
                margin_ms,
                min_ms,
                max_ms,
            });
        }
        if !(0..=MAX_LEAD_LIMIT_MS).contains(&max_lead_ms) {
            return Err(LeaseError::BadMaxLead { max_lead_ms });
        }
        Ok(LeaseSettings {
            duration_ms,
            margin_ms,
            max_lead_ms,
        })
    }

    /// The smallest margin for a duration: `2ρD` rounded up (see the
    /// header), at least `MIN_MARGIN_MS`.
    pub fn min_margin_ms(duration_ms: i64) -> i64 {
        let drift = (duration_ms.max(0) * 2 * MAX_CLOCK_RATE_ERROR_PPM + 999_999) / 1_000_000;
        drift.max(MIN_MARGIN_MS)
    }

    /// How long after sending a claim or renewal the holder may issue IDs.
    pub fn usable_ms(&self) -> i64 {
        self.duration_ms - self.margin_ms
    }

    /// How long after sending a claim or renewal the holder renews.
    pub fn renew_after_ms(&self) -> i64 {
        self.duration_ms / RENEW_DIVISOR
    }

    /// The ceiling a claim or renewal sent at wall time `sent_unix_ms`
    /// records, with `central_unix_ms` the central clock read in its
    /// transaction before the CAS: no ID of the holder will have a later
    /// time. What its own clock allows (the deadline plus `max_lead`),
    /// held to the central clock by the restore fence.
    pub fn ceiling_unix_ms(&self, sent_unix_ms: i64, central_unix_ms: i64) -> i64 {
        // INVARIANT: unique IDs — the ceiling, held to the central clock by the restore fence.
        let own = sent_unix_ms
            .saturating_add(self.usable_ms())
            .saturating_add(self.max_lead_ms);
        let fenced = central_unix_ms
            .saturating_add(self.usable_ms())
            .saturating_add(CENTRAL_CLOCK_SLACK_MS);
        own.min(fenced)
    }

    /// `lease_until` for people: when the holder stops, by its wall clock.
    pub fn stops_by_unix_ms(&self, sent_unix_ms: i64) -> i64 {
        sent_unix_ms.saturating_add(self.usable_ms())
    }
}

/// Whether a reply to a claim or renewal sent at `sent_mono_ms` and
/// received at `received_mono_ms` (monotonic) grants any time at all: it
/// must come before the deadline it grants.
pub fn reply_in_time(settings: &LeaseSettings, sent_mono_ms: i64, received_mono_ms: i64) -> bool {
    received_mono_ms < sent_mono_ms.saturating_add(settings.usable_ms())
}

/// One row of the table, as `read_sql` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    pub machine_id: i32,
    pub holder: Option<String>,
    pub version: i64,
    pub lease_ms: i64,
    pub floor_unix_ms: Option<i64>,
    pub layout: Option<String>,
}

/// What a successful claim or renewal returned, with the monotonic
/// instants taken just before sending it and just after its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub sent_mono_ms: i64,
    pub received_mono_ms: i64,
    /// `RETURNING version`.
    pub version: i64,
    /// The ceiling it recorded (`LeaseSettings::ceiling_unix_ms`).
    pub ceiling_unix_ms: i64,
    /// The central clock read in its transaction, before the CAS (for a
    /// claim, `CentralClock::fence_base_ms` of it).
    pub central_unix_ms: i64,
}

/// The restore fence: the floor a claim whose transaction read the central
/// clock at `central_unix_ms` starts above, whatever the row says — above
/// every ceiling a holder whose write the table may have forgotten could
/// have used (see the header). `holder_lease_ms`: an expired row's
/// holder's duration (`Claim::holder_lease_ms`).
pub fn fence_floor_unix_ms(
    settings: &LeaseSettings,
    holder_lease_ms: Option<i64>,
    central_unix_ms: i64,
) -> i64 {
    // INVARIANT: unique IDs — the restore fence.
    let span = settings.duration_ms.max(holder_lease_ms.unwrap_or(0));
    central_unix_ms
        .saturating_add(span)
        .saturating_add(CENTRAL_CLOCK_SLACK_MS)
}

/// A `lease_ms` read from a row, as a claimer trusts it: a duration no
/// holder could have set is garbage, and counts as the longest.
pub fn trusted_lease_ms(lease_ms: i64) -> i64 {
    if (MIN_DURATION_MS..=MAX_DURATION_MS).contains(&lease_ms) {
        lease_ms
    } else {
        MAX_DURATION_MS
    }
}

/// The central clock as one keeper has read it: the highest reading, so
/// that a clock that went back is told, and claims still fence above it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CentralClock {
    high_ms: Option<i64>,
}

impl CentralClock {
    /// Records a reading.
    pub fn observe(&mut self, central_unix_ms: i64) {
        self.high_ms = self.high_ms.max(Some(central_unix_ms));
    }

    /// The central time a claim that read `central_unix_ms` fences above:
    /// the highest reading seen (a clock that went back would lower the
    /// fence by as much).
    pub fn fence_base_ms(&self, central_unix_ms: i64) -> i64 {
        // INVARIANT: unique IDs — the restore fence, above the highest reading.
        self.high_ms
            .map_or(central_unix_ms, |high| high.max(central_unix_ms))
    }

    /// How far a reading is behind the highest one, when by more than
    /// `CENTRAL_CLOCK_BACK_TOLERANCE_MS`: the central clock went back.
    pub fn went_back_ms(&self, central_unix_ms: i64) -> Option<i64> {
        let behind = self.high_ms? - central_unix_ms;
        (behind > CENTRAL_CLOCK_BACK_TOLERANCE_MS).then_some(behind)
    }
}

/// How far apart the central clock and this server's may be before the
/// keeper refuses to claim or renew: a reading further off is taken for a
/// broken clock (or a broken view), not a time to fence by — a glitch
/// of a day would hold every later claim a day ahead.
pub const MAX_CENTRAL_CLOCK_GAP_MS: i64 = 3_600_000;

/// Whether a central clock reading may be used, this server's clock
/// reading `local_unix_ms`.
pub fn check_central_reading(central_unix_ms: i64, local_unix_ms: i64) -> Result<(), LeaseError> {
    // INVARIANT: unique IDs — the restore fence trusts no reading this far off.
    let gap = central_unix_ms.saturating_sub(local_unix_ms);
    if gap.saturating_abs() <= MAX_CENTRAL_CLOCK_GAP_MS {
        Ok(())
    } else {
        Err(LeaseError::CentralClockFar {
            central_unix_ms,
            local_unix_ms,
        })
    }
}

/// How far this server's clock, read when it sent a write, was ahead of
/// the central clock read in that write's transaction, when by more than
/// `CENTRAL_CLOCK_SLACK_MS`: its ceiling is then lower than its own clock
/// would allow (it issues less far ahead, and stalls if it is ahead by
/// more than the usable time less the time between renewals).
pub fn clock_ahead_of_central_ms(written: &Written, sent_unix_ms: i64) -> Option<i64> {
    let ahead = sent_unix_ms - written.central_unix_ms;
    (ahead > CENTRAL_CLOCK_SLACK_MS).then_some(ahead)
}

/// A lease this server holds: all the generator needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub machine_id: i32,
    /// The row's version after this holder's last successful write.
    pub version: i64,
    /// Issue only IDs with a time above this (Unix ms; `None`: no floor):
    /// the row's floor and the restore fence.
    pub floor_unix_ms: Option<i64>,
    /// The row's floor as the claim read it: what every earlier holder
    /// issued below. The give-up leaves no less (the fence it adds is each
    /// claimer's own to derive).
    pub row_floor_unix_ms: Option<i64>,
    /// Issue no ID with a time above this (Unix ms).
    pub ceiling_unix_ms: i64,
    /// Issue no ID from this monotonic instant on.
    pub stop_at_mono_ms: i64,
    /// Renew from this monotonic instant on (and keep trying until it
    /// succeeds or the lease is lost).
    pub renew_at_mono_ms: i64,
}

impl Held {
    /// The lease a successful claim (`claim_sql` returned a row) gives:
    /// above the row's floor and the restore fence (this server's own
    /// floor from its state file is the generator's, which starts above
    /// both). A reply that came too late gives no time: renew at once.
    pub fn claimed(settings: &LeaseSettings, claim: &Claim, written: &Written) -> Held {
        let (stop_at, renew_at) =
            grant(settings, written).unwrap_or((written.sent_mono_ms, written.received_mono_ms));
        // INVARIANT: unique IDs — above the floor the version CAS read, and the restore fence.
        let fence = fence_floor_unix_ms(settings, claim.holder_lease_ms, written.central_unix_ms);
        Held {
            machine_id: claim.machine_id,
            version: written.version,
            floor_unix_ms: Some(claim.floor_unix_ms.map_or(fence, |row| row.max(fence))),
            row_floor_unix_ms: claim.floor_unix_ms,
            ceiling_unix_ms: written.ceiling_unix_ms,
            stop_at_mono_ms: stop_at,
            renew_at_mono_ms: renew_at,
        }
    }

    /// Whether a successful renewal whose reply came at `received_mono_ms`
    /// came at or after the deadline in force: then it counts as a claim
    /// (`renewed` fences its floor anew; the generators, stopped by the
    /// deadline, get the lease again only when it allows).
    pub fn lapses(&self, received_mono_ms: i64) -> bool {
        received_mono_ms >= self.stop_at_mono_ms
    }

    /// The lease after a successful renewal (`renew_sql` returned a row).
    /// The version and ceiling are taken even from a late reply; the
    /// deadline moves only with one in time. A reply that `lapses` fences
    /// the floor above the central clock it read (the keeper passes
    /// `CentralClock::fence_base_ms` of it), as a claim does.
    pub fn renewed(&self, settings: &LeaseSettings, written: &Written) -> Held {
        // INVARIANT: no two live holders — the clock-rate margin: a deadline only from `grant`.
        let (stop_at, renew_at) = match grant(settings, written) {
            Some((stop_at, renew_at)) => (stop_at.max(self.stop_at_mono_ms), renew_at),
            None => (self.stop_at_mono_ms, written.received_mono_ms),
        };
        // INVARIANT: unique IDs — the restore fence: a reply at or after the deadline is a claim.
        let floor_unix_ms = if self.lapses(written.received_mono_ms) {
            let fence = fence_floor_unix_ms(settings, None, written.central_unix_ms);
            Some(self.floor_unix_ms.map_or(fence, |floor| floor.max(fence)))
        } else {
            self.floor_unix_ms
        };
        Held {
            floor_unix_ms,
            version: written.version,
            ceiling_unix_ms: self.ceiling_unix_ms.max(written.ceiling_unix_ms),
            stop_at_mono_ms: stop_at,
            renew_at_mono_ms: renew_at,
            ..self.clone()
        }
    }

    /// Whether a renewal is due at `now_mono_ms`.
    pub fn renew_due(&self, now_mono_ms: i64) -> bool {
        now_mono_ms >= self.renew_at_mono_ms
    }

    /// Whether the generators may be given this lease at wall time
    /// `now_unix_ms` with `max_lead_ms`: `None` once the first time above
    /// the floor is within `max_lead_ms` of the clock and below the
    /// ceiling; else how long to wait (ms) — until the clock is near
    /// enough, or, when the ceiling is not above the floor yet, until the
    /// next renewal raises it (`WaitForCeiling`).
    pub fn wait_before_issuing_ms(&self, now_unix_ms: i64, max_lead_ms: i64) -> Option<IssueWait> {
        let first = self.floor_unix_ms.map_or(i64::MIN, |f| f.saturating_add(1));
        if first > self.ceiling_unix_ms {
            return Some(IssueWait::ForCeiling);
        }
        let lead = first.saturating_sub(now_unix_ms);
        (lead > max_lead_ms).then(|| IssueWait::ForClock {
            ms: lead - max_lead_ms,
            until_unix_ms: first - max_lead_ms,
        })
    }

    /// The floor to leave in the row when giving the lease up, given the
    /// time of the last ID issued under it (`None`: none): exactly what
    /// was issued, and never below the row's floor as claimed (every
    /// earlier holder's IDs). Not the fence: a central clock that read
    /// far ahead once must not stay in the row.
    pub fn give_up_floor_unix_ms(&self, last_issued_unix_ms: Option<i64>) -> Option<i64> {
        // INVARIANT: unique IDs — no lower than any ID this or an earlier holder issued.
        self.row_floor_unix_ms.max(last_issued_unix_ms)
    }
}

/// Why a claimed lease is not given to the generators yet
/// (`Held::wait_before_issuing_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueWait {
    /// The clock plus `max_lead` reaches the first time above the floor
    /// in `ms`, at wall time `until_unix_ms`.
    ForClock { ms: i64, until_unix_ms: i64 },
    /// The ceiling is not above the floor: a renewal must raise it.
    ForCeiling,
}

/// `(stop_at, renew_at)` a write grants, if its reply came in time.
fn grant(settings: &LeaseSettings, written: &Written) -> Option<(i64, i64)> {
    // INVARIANT: no two live holders — the clock-rate margin: counted from before the send.
    reply_in_time(settings, written.sent_mono_ms, written.received_mono_ms).then(|| {
        (
            written.sent_mono_ms.saturating_add(settings.usable_ms()),
            written
                .sent_mono_ms
                .saturating_add(settings.renew_after_ms()),
        )
    })
}

/// Who is claiming: this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimant<'a> {
    /// This start's holder (`holder_of_this_start`).
    pub holder: &'a str,
    /// The id this server held last, if it remembers one.
    pub previous_machine_id: Option<i32>,
    /// Its epoch and bit widths, as text (compared as a whole).
    pub layout: &'a str,
    /// The largest machine id of its layout.
    pub max_machine_id: i32,
    /// Ids not to claim now: their row was locked on the central server at
    /// this server's last try (a session holds it), so the claim would
    /// only fail again.
    pub avoid: &'a [i32],
}

/// Why a row may be claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimReason {
    /// Never held, or given up.
    Free,
    /// Held by this start of this server (its renewal's reply was lost,
    /// or it lost the lease and its row still names it).
    Own,
    /// Its version has not changed for the holder's `lease_ms`.
    Expired,
}

/// A row to claim with `claim_sql`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub machine_id: i32,
    /// The version read: the CAS.
    pub version: i64,
    /// The row's floor as read.
    pub floor_unix_ms: Option<i64>,
    /// An expired row's holder's `lease_ms` (`trusted_lease_ms`), for the
    /// restore fence; `None` for a free row or this start's own.
    pub holder_lease_ms: Option<i64>,
    pub reason: ClaimReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimChoice {
    Take(Claim),
    /// Nothing to claim yet; a held row may expire at this monotonic
    /// instant (read the table again then).
    WaitUntil {
        mono_ms: i64,
    },
}

/// What a claimer has seen of the table: per row, since when its current
/// version is known. A row is expired once that is the row's `lease_ms`
/// ago.
#[derive(Debug, Clone, Default)]
pub struct LeaseWatch {
    rows: BTreeMap<i32, Watched>,
}

#[derive(Debug, Clone)]
struct Watched {
    row: LeaseRow,
    /// When the current version was first seen (a read that returned it).
    since_mono_ms: i64,
    /// When the row was first seen at all.
    watched_from_mono_ms: i64,
}

enum RowState {
    Claimable(ClaimReason),
    Held {
        expires_at_mono_ms: i64,
        seen_renewing: bool,
    },
}

impl LeaseWatch {
    pub fn new() -> LeaseWatch {
        LeaseWatch::default()
    }

    /// Records a read of the table; `returned_mono_ms` is the monotonic
    /// instant taken *after* the read returned. Rows not in `rows` are
    /// forgotten.
    pub fn observe(&mut self, rows: Vec<LeaseRow>, returned_mono_ms: i64) {
        let mut previous = std::mem::take(&mut self.rows);
        for row in rows {
            let known = previous.remove(&row.machine_id);
            let watched_from = known
                .as_ref()
                .map_or(returned_mono_ms, |k| k.watched_from_mono_ms);
            // INVARIANT: no two live holders — expiry by observation: since first seen.
            let since = match known {
                Some(k) if k.row.version == row.version => k.since_mono_ms,
                _ => returned_mono_ms,
            };
            self.rows.insert(
                row.machine_id,
                Watched {
                    row,
                    since_mono_ms: since,
                    watched_from_mono_ms: watched_from,
                },
            );
        }
    }

    fn state(&self, watched: &Watched, me: &Claimant, now_mono_ms: i64) -> RowState {
        match &watched.row.holder {
            None => RowState::Claimable(ClaimReason::Free),
            Some(holder) if holder == me.holder => RowState::Claimable(ClaimReason::Own),
            Some(_) => {
                // INVARIANT: no two live holders — expiry by observation.
                let lease_ms = trusted_lease_ms(watched.row.lease_ms);
                let expires_at = watched.since_mono_ms.saturating_add(lease_ms);
                if now_mono_ms >= expires_at {
                    RowState::Claimable(ClaimReason::Expired)
                } else {
                    RowState::Held {
                        expires_at_mono_ms: expires_at,
                        seen_renewing: watched.since_mono_ms > watched.watched_from_mono_ms,
                    }
                }
            }
        }
    }

    /// The rows in range another live server holds: held by another start
    /// (the state is `Held`, not this start's `Own`) and seen renewing.
    fn held_by_live_others<'w>(
        &'w self,
        me: &'w Claimant,
        now_mono_ms: i64,
    ) -> impl Iterator<Item = &'w LeaseRow> + 'w {
        self.rows
            .range(0..=me.max_machine_id)
            .map(|(_, watched)| watched)
            .filter(move |w| {
                matches!(
                    self.state(w, me, now_mono_ms),
                    RowState::Held {
                        seen_renewing: true,
                        ..
                    }
                )
            })
            .map(|w| &w.row)
    }

    /// The rows in range that another live server holds under this
    /// server's name: held by another start (`holder_of_this_start`) and
    /// seen renewing. Two servers given one name, or a clone.
    pub fn namesakes(&self, me: &Claimant, now_mono_ms: i64) -> Vec<i32> {
        let my_name = holder_name(me.holder);
        self.held_by_live_others(me, now_mono_ms)
            .filter(|row| row.holder.as_deref().map(holder_name) == Some(my_name))
            .map(|row| row.machine_id)
            .collect()
    }

    /// The rows in range another live server holds under a lease duration
    /// other than `duration_ms`, with that duration: the restore fence
    /// needs one duration for every server sharing the table (a claim
    /// covers its own, or a held row's, but not that of a holder the table
    /// forgot).
    pub fn other_durations(
        &self,
        me: &Claimant,
        duration_ms: i64,
        now_mono_ms: i64,
    ) -> Vec<(i32, i64)> {
        self.held_by_live_others(me, now_mono_ms)
            .map(|row| (row.machine_id, trusted_lease_ms(row.lease_ms)))
            .filter(|&(_, lease_ms)| lease_ms != duration_ms)
            .collect()
    }

    /// Which row to claim at `now_mono_ms`: the previous id if claimable;
    /// else the lowest row this start holds; else the lowest
    /// free or expired one; else wait for the earliest a held row can
    /// expire. Refuses a table with no rows, one where every row is held
    /// by a server seen renewing, and rows of another layout.
    pub fn choose(&self, me: &Claimant, now_mono_ms: i64) -> Result<ClaimChoice, LeaseError> {
        let in_range = || {
            self.rows
                .range(0..=me.max_machine_id)
                .map(|(_, watched)| watched)
        };
        if in_range().next().is_none() {
            return Err(LeaseError::NoRows {
                max_machine_id: me.max_machine_id,
            });
        }
        // INVARIANT: unique IDs — the `layout` check: one epoch and bit widths for all.
        if let Some(other) =
            in_range().find(|w| w.row.layout.as_deref().is_some_and(|l| l != me.layout))
        {
            return Err(LeaseError::LayoutMismatch {
                machine_id: other.row.machine_id,
                holder: other.row.holder.clone(),
                theirs: other.row.layout.clone().unwrap_or_default(),
                ours: me.layout.to_string(),
            });
        }
        let take = |watched: &Watched, reason| {
            Ok(ClaimChoice::Take(Claim {
                machine_id: watched.row.machine_id,
                version: watched.row.version,
                floor_unix_ms: watched.row.floor_unix_ms,
                holder_lease_ms: (reason == ClaimReason::Expired)
                    .then(|| trusted_lease_ms(watched.row.lease_ms)),
                reason,
            }))
        };
        let avoided = |w: &&Watched| me.avoid.contains(&w.row.machine_id);
        if let Some(previous) = me
            .previous_machine_id
            .filter(|id| (0..=me.max_machine_id).contains(id) && !me.avoid.contains(id))
            .and_then(|id| self.rows.get(&id))
        {
            if let RowState::Claimable(reason) = self.state(previous, me, now_mono_ms) {
                return take(previous, reason);
            }
        }
        if let Some(own) = in_range()
            .filter(|w| !avoided(w))
            .find(|w| w.row.holder.as_deref() == Some(me.holder))
        {
            return take(own, ClaimReason::Own);
        }
        // Nothing claimable: every row in range (there is one) is held.
        let mut earliest = i64::MAX;
        let mut all_seen_renewing = true;
        for watched in in_range().filter(|w| !avoided(w)) {
            match self.state(watched, me, now_mono_ms) {
                RowState::Claimable(reason) => return take(watched, reason),
                RowState::Held {
                    expires_at_mono_ms,
                    seen_renewing,
                } => {
                    earliest = earliest.min(expires_at_mono_ms);
                    all_seen_renewing &= seen_renewing;
                }
            }
        }
        if in_range().all(|w| avoided(&w)) {
            return Err(LeaseError::AllLocked {
                max_machine_id: me.max_machine_id,
            });
        }
        if all_seen_renewing {
            return Err(LeaseError::AllHeld {
                count: in_range().count(),
                max_machine_id: me.max_machine_id,
                retry_at_mono_ms: earliest,
            });
        }
        Ok(ClaimChoice::WaitUntil { mono_ms: earliest })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn leases_use_at_most_1024_ids_and_seed_again_when_rows_are_missing() {
        assert_eq!(leased_max_machine_id(0), 0);
        assert_eq!(leased_max_machine_id(255), 255);
        assert_eq!(leased_max_machine_id(1023), 1023);
        assert_eq!(leased_max_machine_id((1 << 20) - 1), 1023);
        assert!(needs_seeding(0, 0));
        assert!(!needs_seeding(1, 0));
        assert!(needs_seeding(1023, 1023));
        assert!(!needs_seeding(1024, 1023));
    }

    impl Held {
        /// Whether IDs may be issued at monotonic instant `now_mono_ms`.
        pub(crate) fn may_issue(&self, now_mono_ms: i64) -> bool {
            now_mono_ms < self.stop_at_mono_ms
        }
    }

    /// A wall clock around mid-2027, in Unix ms.
    pub(crate) const WALL: i64 = 1_800_000_000_000;

    pub(crate) fn settings() -> LeaseSettings {
        LeaseSettings::new(DEFAULT_DURATION_MS, DEFAULT_MARGIN_MS, 5_000).unwrap()
    }

    /// The ceiling a write sent at wall time `wall` records when the
    /// central clock reads the same.
    pub(crate) fn in_step(s: &LeaseSettings, wall: i64) -> i64 {
        s.ceiling_unix_ms(wall, wall)
    }

    /// A claim of the never-held row `machine_id` (version 0, no floor).
    pub(crate) fn free_claim(machine_id: i32) -> Claim {
        Claim {
            machine_id,
            version: 0,
            floor_unix_ms: None,
            holder_lease_ms: None,
            reason: ClaimReason::Free,
        }
    }

    #[test]
    fn settings_are_checked_and_the_errors_say_what_is_allowed() {
        for duration in [
            0,
            -1,
            -20_000,
            MIN_DURATION_MS - 1,
            MAX_DURATION_MS + 1,
            i64::MIN,
        ] {
            let err = LeaseSettings::new(duration, 100, 0).unwrap_err();
            assert_eq!(
                err,
                LeaseError::BadDuration {
                    duration_ms: duration
                }
            );
            assert!(
                err.to_string().contains("between 1000 and 600000 ms"),
                "{err}"
            );
        }
        // The margin: at least MIN_MARGIN_MS and 2ρD, below the duration
        // (at most half of it, so renewals have time to retry).
        assert_eq!(LeaseSettings::min_margin_ms(20_000), MIN_MARGIN_MS);
        assert_eq!(LeaseSettings::min_margin_ms(MAX_DURATION_MS), 1_200);
        assert_eq!(LeaseSettings::min_margin_ms(100_001), 201);
        for (duration, margin) in [
            (20_000, 0),
            (20_000, -5),
            (20_000, 99),
            (20_000, 10_001),
            (20_000, 20_000),
            (20_000, 30_000),
            (MAX_DURATION_MS, 1_199),
        ] {
            let err = LeaseSettings::new(duration, margin, 0).unwrap_err();
            assert!(matches!(err, LeaseError::BadMargin { margin_ms, .. } if margin_ms == margin));
            assert!(err.to_string().contains("lease margin"), "{err}");
        }
        let err = LeaseSettings::new(20_000, 20_000, 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the lease margin must be between 100 and 10000 ms for this duration (at least 100 ms \
             and 2/1000 of it for clock rates 1000 ppm off, at most half of it), not 20000"
        );
        for lead in [-1, MAX_LEAD_LIMIT_MS + 1] {
            assert_eq!(
                LeaseSettings::new(20_000, 1_000, lead),
                Err(LeaseError::BadMaxLead { max_lead_ms: lead })
            );
        }
        let s = LeaseSettings::new(MAX_DURATION_MS, 1_200, MAX_LEAD_LIMIT_MS).unwrap();
        assert_eq!(in_step(&s, i64::MAX - 5), i64::MAX, "saturates");
        let s = settings();
        assert_eq!(s.usable_ms(), 19_000);
        assert_eq!(s.renew_after_ms(), 6_666);
        // The lease's end plus max_lead, held to the central clock plus the
        // lease's end plus the slack.
        assert_eq!(
            s.ceiling_unix_ms(WALL, WALL + 60_000),
            WALL + 19_000 + 5_000
        );
        assert_eq!(s.ceiling_unix_ms(WALL, WALL), WALL + 19_000 + 1_000);
        assert_eq!(
            s.ceiling_unix_ms(WALL, WALL - 60_000),
            WALL - 60_000 + 20_000
        );
        assert_eq!(s.stops_by_unix_ms(WALL), WALL + 19_000);
    }

    #[test]
    fn holder_names_are_printable_and_bounded() {
        assert!(check_holder("pg-3.orders:5432").is_ok());
        assert!(check_holder(&"é".repeat(200)).is_ok());
        for bad in ["", "a\nb", "tab\there", &"x".repeat(201)] {
            let err = check_holder(bad).unwrap_err();
            assert!(err.to_string().contains("1 to 200 characters"), "{err}");
        }
    }

    #[test]
    fn renewals_are_due_at_a_third_and_issuing_stops_a_margin_before_the_end() {
        let s = settings();
        let claim = Claim {
            machine_id: 4,
            version: 9,
            floor_unix_ms: Some(WALL - 1),
            holder_lease_ms: None,
            reason: ClaimReason::Free,
        };
        let written = |sent, received, version, ceiling_unix_ms| Written {
            sent_mono_ms: sent,
            received_mono_ms: received,
            version,
            ceiling_unix_ms,
            central_unix_ms: WALL + sent,
        };
        let held = Held::claimed(&s, &claim, &written(1_000, 1_050, 10, WALL + 24_000));
        assert_eq!(
            held.floor_unix_ms,
            Some(WALL + 1_000 + 20_000 + 1_000),
            "the restore fence, above the row's floor"
        );
        let high_row = Claim {
            floor_unix_ms: Some(WALL + 60_000),
            ..claim
        };
        let above = Held::claimed(&s, &high_row, &written(1_000, 1_050, 10, WALL + 24_000));
        assert_eq!(above.floor_unix_ms, Some(WALL + 60_000), "the row's floor");
        assert_eq!(held.renew_at_mono_ms, 1_000 + 6_666);
        assert_eq!(held.stop_at_mono_ms, 1_000 + 19_000);
        assert!(!held.renew_due(7_665) && held.renew_due(7_666));
        assert!(held.may_issue(19_999) && !held.may_issue(20_000));
        // A renewal in time moves both instants from when it was sent.
        let renewed = held.renewed(&s, &written(7_700, 7_800, 11, WALL + 30_700));
        assert_eq!(renewed.version, 11);
        assert_eq!(renewed.ceiling_unix_ms, WALL + 30_700);
        assert_eq!(renewed.stop_at_mono_ms, 7_700 + 19_000);
        assert_eq!(renewed.renew_at_mono_ms, 7_700 + 6_666);
        // A reply that comes after the deadline it grants gives no time,
        // but its version is kept, and renewing is due at once.
        assert!(reply_in_time(&s, 7_700, 26_699));
        assert!(!reply_in_time(&s, 7_700, 26_700));
        let late = held.renewed(&s, &written(7_700, 26_700, 11, WALL + 30_700));
        assert_eq!(late.version, 11);
        assert_eq!(late.stop_at_mono_ms, held.stop_at_mono_ms);
        assert!(late.renew_due(26_700));
        // A late claim reply: held in the table, but nothing may be issued.
        let late = Held::claimed(&s, &claim, &written(1_000, 20_000, 10, WALL + 24_000));
        assert!(!late.may_issue(20_000) && late.renew_due(20_000));
        // The ceiling never moves down, also when the wall clock did.
        let back = renewed.renewed(&s, &written(14_400, 14_420, 12, WALL + 20_000));
        assert_eq!(back.ceiling_unix_ms, WALL + 30_700);
    }

    #[test]
    fn the_central_clock_is_watched_for_steps_back_and_claims_fence_above_its_highest_reading() {
        let mut clock = CentralClock::default();
        assert_eq!(clock.went_back_ms(WALL), None, "nothing read yet");
        assert_eq!(clock.fence_base_ms(WALL), WALL);
        clock.observe(WALL);
        assert_eq!(
            clock.went_back_ms(WALL - CENTRAL_CLOCK_BACK_TOLERANCE_MS),
            None
        );
        assert_eq!(
            clock.went_back_ms(WALL - 15_000),
            Some(15_000),
            "15 s back is told"
        );
        assert_eq!(clock.fence_base_ms(WALL - 15_000), WALL, "the highest");
        clock.observe(WALL - 15_000);
        assert_eq!(clock.fence_base_ms(WALL + 1), WALL + 1);
        assert_eq!(clock.went_back_ms(WALL + 1), None, "caught up");
    }

    #[test]
    fn a_clock_ahead_of_the_central_one_is_told_beyond_the_slack() {
        let written = |central_unix_ms| Written {
            sent_mono_ms: 0,
            received_mono_ms: 5,
            version: 1,
            ceiling_unix_ms: 0,
            central_unix_ms,
        };
        assert_eq!(clock_ahead_of_central_ms(&written(WALL), WALL), None);
        assert_eq!(
            clock_ahead_of_central_ms(&written(WALL - CENTRAL_CLOCK_SLACK_MS), WALL),
            None
        );
        assert_eq!(
            clock_ahead_of_central_ms(&written(WALL - 30_000), WALL),
            Some(30_000)
        );
        // Behind is no problem: its own clock bounds its ceiling.
        assert_eq!(
            clock_ahead_of_central_ms(&written(WALL + 30_000), WALL),
            None
        );
    }

    #[test]
    fn a_claimed_lease_reaches_the_generators_once_the_clock_is_near_the_floor_and_the_ceiling_above_it(
    ) {
        let held = |floor_unix_ms, ceiling_unix_ms| Held {
            machine_id: 0,
            version: 1,
            floor_unix_ms,
            row_floor_unix_ms: None,
            ceiling_unix_ms,
            stop_at_mono_ms: 100_000,
            renew_at_mono_ms: 10_000,
        };
        // No floor: at once.
        assert_eq!(held(None, WALL).wait_before_issuing_ms(WALL, 0), None);
        // The first time above the floor is 21 s ahead, max_lead 5 s.
        let h = held(Some(WALL + 21_000), WALL + 30_000);
        assert_eq!(
            h.wait_before_issuing_ms(WALL, 5_000),
            Some(IssueWait::ForClock {
                ms: 16_001,
                until_unix_ms: WALL + 16_001
            })
        );
        assert_eq!(
            h.wait_before_issuing_ms(WALL + 16_000, 5_000),
            Some(IssueWait::ForClock {
                ms: 1,
                until_unix_ms: WALL + 16_001
            })
        );
        assert_eq!(h.wait_before_issuing_ms(WALL + 16_001, 5_000), None);
        assert_eq!(h.wait_before_issuing_ms(WALL, 21_001), None);
        // A ceiling not above the floor waits for a renewal, whatever the
        // clock.
        for ceiling in [WALL + 20_000, WALL + 21_000] {
            assert_eq!(
                held(Some(WALL + 21_000), ceiling).wait_before_issuing_ms(WALL + 60_000, 5_000),
                Some(IssueWait::ForCeiling)
            );
        }
        assert_eq!(
            held(Some(WALL + 21_000), WALL + 21_001).wait_before_issuing_ms(WALL + 60_000, 5_000),
            None
        );
        // With defaults and clocks in step: a claim's own ceiling is below
        // its fence, the first renewal lifts it above, and the clock is
        // near enough duration + slack - max_lead after the claim.
        let s = settings();
        let claim = free_claim(0);
        let written = |sent: i64, version| Written {
            sent_mono_ms: sent,
            received_mono_ms: sent + 5,
            version,
            ceiling_unix_ms: in_step(&s, WALL + sent),
            central_unix_ms: WALL + sent,
        };
        let claimed = Held::claimed(&s, &claim, &written(0, 1));
        assert_eq!(
            claimed.wait_before_issuing_ms(WALL, s.max_lead_ms),
            Some(IssueWait::ForCeiling)
        );
        let renewed = claimed.renewed(&s, &written(s.renew_after_ms(), 2));
        let wait = s.duration_ms + CENTRAL_CLOCK_SLACK_MS - s.max_lead_ms + 1;
        assert_eq!(
            renewed.wait_before_issuing_ms(WALL + s.renew_after_ms(), s.max_lead_ms),
            Some(IssueWait::ForClock {
                ms: wait - s.renew_after_ms(),
                until_unix_ms: WALL + wait
            })
        );
        assert_eq!(
            renewed.wait_before_issuing_ms(WALL + wait, s.max_lead_ms),
            None
        );
    }

    #[test]
    fn a_central_reading_more_than_an_hour_off_is_refused() {
        assert_eq!(check_central_reading(WALL + 3_600_000, WALL), Ok(()));
        assert_eq!(check_central_reading(WALL - 3_600_000, WALL), Ok(()));
        for far in [WALL + 3_600_001, WALL - 86_400_000, i64::MAX, i64::MIN, 0] {
            let err = check_central_reading(far, WALL).unwrap_err();
            assert!(
                err.to_string().contains("no lease is claimed or renewed"),
                "{err}"
            );
        }
        // Told in whole minutes: readings a moment apart say the same, so
        // the keeper logs it once.
        let text = |central| {
            check_central_reading(central, WALL)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(text(WALL + 7_200_000), text(WALL + 7_200_900));
        assert!(text(WALL + 7_200_000).contains("is 120 min ahead of this server's"));
        assert!(text(WALL - 7_200_000).contains("is 120 min behind this server's"));
    }

    #[test]
    fn a_renewal_whose_reply_comes_after_the_deadline_is_fenced_like_a_claim() {
        let s = settings();
        let claim = free_claim(0);
        let written = |sent: i64, received: i64, version| Written {
            sent_mono_ms: sent,
            received_mono_ms: received,
            version,
            ceiling_unix_ms: in_step(&s, WALL + sent),
            central_unix_ms: WALL + received,
        };
        let held = Held::claimed(&s, &claim, &written(0, 5, 1));
        assert_eq!(held.stop_at_mono_ms, 19_000);
        // In time: the floor stays.
        let renewed = held.renewed(&s, &written(6_666, 18_999, 2));
        assert!(!held.lapses(18_999));
        assert_eq!(renewed.floor_unix_ms, held.floor_unix_ms);
        // Sent before the deadline, its reply after it (a link that held
        // it): fenced above the central clock it read.
        for (sent, received) in [(18_000, 19_000), (18_999, 25_000), (30_000, 30_010)] {
            assert!(held.lapses(received));
            let revived = held.renewed(&s, &written(sent, received, 2));
            assert_eq!(
                revived.floor_unix_ms,
                Some(WALL + received + s.duration_ms + CENTRAL_CLOCK_SLACK_MS)
            );
        }
    }
}
