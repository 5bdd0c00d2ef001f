//! Whether a central server is still where this database left it: pure
//! checks of what the central server reports now (its `id_segment_origin`)
//! against what this database recorded at its refills from central
//! servers.
//!
//! # What is recorded
//!
//! A central server is known by its identity (`Central`): its cluster (the
//! system identifier), the OIDs of its database and of its `id_segment` —
//! together a *central table* — and its WAL timeline. `id_segment_central`
//! has a row per identity this database refilled from, through whichever
//! postgres_fdw server and for whichever tag, with the WAL position and
//! the central clock that the latest refill (or `segment_attach`) from it
//! saw (`Seen`). A tag keeps only which identity it last refilled from:
//! attached, in `id_segment_remote.central_*`; dropped, in
//! `id_segment_detached.central_*` (a row per tag and server).
//! `distributor::recorded_of_server` reads them (`Records`).
//!
//! # Invariants
//!
//! A central server that went back lost ranges it had handed out, to this
//! shard or to others; a shard that took nothing after the point it went
//! back to finds the central row above its own mark, so the row cannot
//! tell. Every refill and every `segment_attach` checks, before anything
//! is written (`refusal`):
//!
//! 1. **A central cluster's WAL position never goes back on a timeline,
//!    through any route**: on the system identifier and timeline the
//!    central server reports, its WAL position is at or past that of every
//!    row of that cluster and timeline, whichever database, table, server
//!    or tag it was recorded for. Else `WalWentBack`: a cold copy, or a
//!    backup restored without recovery to the end — of the whole cluster,
//!    so of each of its databases.
//! 2. **A central table stays on the timeline it was seen on**: no row has
//!    the table reached now (cluster, database, table) on another
//!    timeline. Else `OtherTimeline`: a failover, a point-in-time recovery.
//!    Another table's timeline says nothing of this one (a copy of the
//!    cluster promoted apart may serve other databases of it).
//! 3. **A route leads to the central table it last refilled from**: the
//!    identities kept by the tag itself (for `segment_attach`: where it
//!    was dropped, under any server name) and by the other tags of the
//!    same postgres_fdw server (attached through it; registered under its
//!    name and dropped, or with their foreign table gone) name the
//!    cluster and the table reached now. Else `OtherCluster` (a dump
//!    restored into a new cluster, `pg_upgrade`, `initdb`) or `OtherTable`
//!    (a dump restored into the same cluster, or the server pointed at
//!    another copy of the database).
//!
//! **Unless accepted**: a broken invariant refuses until
//! `segment_central_accept()` runs on the central server (after the DBA
//! raised its rows) on the cluster and timeline it is on now, later by its
//! clock than the row that shows the move (the latest refill from that
//! identity). One made before that refill is older than the move (a
//! restored copy brings back only acceptances from before it); one made
//! on another timeline is about another move (an acceptance after a first
//! failover says nothing about a second one); the central view offers
//! only an acceptance made in its own database for its own `id_segment`,
//! so one restored with a dump does not count for the table the restore
//! made.
//!
//! Nothing recorded, nothing refused: what the central server reports at
//! the first refill from it is taken. A shard attached after the central
//! server went back, or whose rows were deleted by hand, cannot tell
//! (docs/many-servers.md, "What a shard cannot see").

use std::fmt;

/// A central `id_segment`: the cluster (its system identifier) and the
/// OIDs of the database and the table there, which a restore into the same
/// cluster, or another copy of the database, does not keep. (A central
/// view that answers no OID reads as 0.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CentralTable {
    pub system_identifier: i64,
    pub database_oid: i64,
    pub table_oid: i64,
}

impl CentralTable {
    /// (database OID, table OID).
    fn oids(&self) -> (i64, i64) {
        (self.database_oid, self.table_oid)
    }
}

/// A central server's identity: its table, on a WAL timeline (the key of
/// `id_segment_central`, and what a tag keeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Central {
    pub table: CentralTable,
    pub timeline: i64,
}

/// Where a central server was at the latest refill from it (a row of
/// `id_segment_central`), or is now (what `id_segment_origin` reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub central: Central,
    pub wal_lsn: u64,
    /// The central server's clock, in microseconds since 1970.
    pub clock_us: i64,
}

/// What a refill (or an attach) checks the central server against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Records {
    /// Every central identity this database refilled from.
    pub seen: Vec<Seen>,
    /// The identities kept by the route: the tag itself and the other tags
    /// of the same postgres_fdw server (invariant 3).
    pub route: Vec<Central>,
}

/// The last `segment_central_accept()` on a central server: when (its
/// clock, in microseconds since 1970), and where it was then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acceptance {
    pub at_us: i64,
    pub system_identifier: i64,
    pub timeline: i64,
}

impl Acceptance {
    /// Whether it lifts a move shown by a row of central clock
    /// `clock_us`, for a central server at `now`.
    fn lifts(&self, now: Central, clock_us: i64) -> bool {
        self.system_identifier == now.table.system_identifier
            && self.timeline == now.timeline
            && self.at_us > clock_us
    }
}

/// How a central server moved since a refill from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moved {
    OtherCluster {
        was: i64,
        now: i64,
    },
    /// (database OID, table OID).
    OtherTable {
        was: (i64, i64),
        now: (i64, i64),
    },
    OtherTimeline {
        was: i64,
        now: i64,
    },
    WalWentBack {
        was: u64,
        now: u64,
    },
}

impl Moved {
    /// Which move a refusal names when records show several: the widest.
    fn rank(&self) -> u8 {
        match self {
            Moved::OtherCluster { .. } => 0,
            Moved::OtherTable { .. } => 1,
            Moved::OtherTimeline { .. } => 2,
            Moved::WalWentBack { .. } => 3,
        }
    }
}

/// A move one record shows, and the central clock of the row that shows
/// it (an acceptance must be later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shown {
    pub moved: Moved,
    pub clock_us: i64,
}

/// The moves `records` show against the central server at `now`, one per
/// record that breaks an invariant (the module header's 1 to 3).
pub fn moves(records: &Records, now: &Seen) -> Vec<Shown> {
    let here = now.central;
    let mut shown = Vec::new();
    for seen in &records.seen {
        let was = seen.central;
        // 1. The cluster's WAL position on this timeline.
        if was.table.system_identifier == here.table.system_identifier
            && was.timeline == here.timeline
            && seen.wal_lsn > now.wal_lsn
        {
            shown.push(Shown {
                moved: Moved::WalWentBack {
                    was: seen.wal_lsn,
                    now: now.wal_lsn,
                },
                clock_us: seen.clock_us,
            });
        }
        // 2. This table's timeline.
        if was.table == here.table && was.timeline != here.timeline {
            shown.push(Shown {
                moved: Moved::OtherTimeline {
                    was: was.timeline,
                    now: here.timeline,
                },
                clock_us: seen.clock_us,
            });
        }
    }
    // 3. The route's table.
    for kept in &records.route {
        let moved = if kept.table.system_identifier != here.table.system_identifier {
            Moved::OtherCluster {
                was: kept.table.system_identifier,
                now: here.table.system_identifier,
            }
        } else if kept.table != here.table {
            Moved::OtherTable {
                was: kept.table.oids(),
                now: here.table.oids(),
            }
        } else {
            continue;
        };
        // Its latest refill (0: its row is gone, any acceptance follows it).
        let clock_us = records
            .seen
            .iter()
            .filter(|seen| seen.central == *kept)
            .map(|seen| seen.clock_us)
            .max()
            .unwrap_or(0);
        shown.push(Shown { moved, clock_us });
    }
    shown
}

/// Why a refill (or an attach) does not trust the central server now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub moved: Moved,
    /// The latest central clock (µs since 1970) of the records that show
    /// a move: an acceptance counts once made after it.
    pub accept_after_us: i64,
    /// The central server's clock now, when it is not past that yet (a
    /// restored or new central server whose clock runs behind the old
    /// one's): the acceptance cannot count until it is.
    pub clock_now_us: Option<i64>,
}

/// What keeps a refill (or an attach) from trusting the central server at
/// `now`, if anything: a move `records` show (`moves`) that `accepted`
/// (its last `segment_central_accept()`) does not lift. It names the widest
/// such move, of the latest record.
pub fn refusal(records: &Records, now: &Seen, accepted: Option<Acceptance>) -> Option<Refusal> {
    let refusing: Vec<Shown> = moves(records, now)
        .into_iter()
        .filter(|shown| !accepted.is_some_and(|a| a.lifts(now.central, shown.clock_us)))
        .collect();
    let named = refusing
        .iter()
        .min_by_key(|shown| (shown.moved.rank(), std::cmp::Reverse(shown.clock_us)))?;
    let accept_after_us = refusing.iter().map(|shown| shown.clock_us).max()?;
    Some(Refusal {
        moved: named.moved,
        accept_after_us,
        // (0: a view that answered no clock, which says nothing of it.)
        clock_now_us: (now.clock_us > 0 && now.clock_us <= accept_after_us).then_some(now.clock_us),
    })
}

/// A WAL position printed as PostgreSQL prints a `pg_lsn` (SQL hands it
/// over as a number: `wal_lsn - '0/0'`).
pub struct Lsn(pub u64);

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.moved)?;
        if let Some(now_us) = self.clock_now_us {
            let behind_s = (self.accept_after_us - now_us) / 1_000_000 + 1;
            write!(
                f,
                "; and its clock is {behind_s} s behind this server's last refill from it: segment_central_accept() counts only when run after that by its clock (set its clock right)"
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for Moved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Moved::OtherCluster { was, now } => write!(
                f,
                "it is another cluster now (system identifier {now}, was {was})"
            ),
            Moved::OtherTable { was, now } => write!(
                f,
                "its id_segment is another table now (database OID {}, table OID {}; was {} and {}): a dump restored, or the server pointed at another copy of the database",
                now.0, now.1, was.0, was.1
            ),
            Moved::OtherTimeline { was, now } => write!(
                f,
                "it is on WAL timeline {now} now, was {was} (a failover or a point-in-time recovery)"
            ),
            Moved::WalWentBack { was, now } => write!(
                f,
                "its WAL position went back to {}, this server saw it at {} (a restored copy)",
                Lsn(*now),
                Lsn(*was)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: CentralTable = CentralTable {
        system_identifier: 7,
        database_oid: 16384,
        table_oid: 16390,
    };

    /// `TABLE` of cluster `system_identifier`, on `timeline` at `wal_lsn`,
    /// the central clock at 0.
    fn at(system_identifier: i64, timeline: i64, wal_lsn: u64) -> Seen {
        Seen {
            central: Central {
                table: CentralTable {
                    system_identifier,
                    ..TABLE
                },
                timeline,
            },
            wal_lsn,
            clock_us: 0,
        }
    }

    /// `seen`, at central clock `clock_us`.
    fn clocked(seen: Seen, clock_us: i64) -> Seen {
        Seen { clock_us, ..seen }
    }

    /// `seen`, in another database (and table) of its cluster.
    fn in_database(seen: Seen, database_oid: i64) -> Seen {
        Seen {
            central: Central {
                table: CentralTable {
                    database_oid,
                    table_oid: database_oid + 1,
                    ..seen.central.table
                },
                ..seen.central
            },
            ..seen
        }
    }

    /// Rows seen, and no route.
    fn rows(seen: &[Seen]) -> Records {
        Records {
            seen: seen.to_vec(),
            route: vec![],
        }
    }

    /// Each row seen, and kept by the route too: the records of one tag
    /// refilled through the server checked.
    fn own(seen: &[Seen]) -> Records {
        Records {
            seen: seen.to_vec(),
            route: seen.iter().map(|s| s.central).collect(),
        }
    }

    /// `refusal`'s move, the central clock long past every record.
    fn refused(records: &Records, now: Seen, accepted: Option<Acceptance>) -> Option<Moved> {
        refusal(records, &clocked(now, i64::MAX), accepted).map(|r| r.moved)
    }

    /// How the central server moved from `was` (the one record of the
    /// route's tag) to `now`, if it did.
    fn moved_since(was: Seen, now: Seen) -> Option<Moved> {
        refused(&own(&[was]), now, None)
    }

    fn accepted(at_us: i64, system_identifier: i64, timeline: i64) -> Option<Acceptance> {
        Some(Acceptance {
            at_us,
            system_identifier,
            timeline,
        })
    }

    #[test]
    fn nothing_recorded_takes_whatever_the_server_reports() {
        assert_eq!(refused(&Records::default(), at(7, 3, 10), None), None);
    }

    #[test]
    fn any_record_that_shows_a_move_refuses() {
        // One table last refilled before the point the server went back to
        // (its record is fine), another after it (its record shows it).
        // (Another database of the cluster: one row per central table.)
        let before = clocked(at(7, 1, 10), 100);
        let after = in_database(clocked(at(7, 1, 50), 200), 99);
        let now = at(7, 1, 20);
        let with = |seen: &[Seen]| Records {
            seen: seen.to_vec(),
            route: vec![before.central],
        };
        assert_eq!(refused(&with(&[before]), now, None), None);
        let moved = Some(Moved::WalWentBack { was: 50, now: 20 });
        assert_eq!(refused(&with(&[before, after]), now, None), moved);
        assert_eq!(refused(&with(&[after, before]), now, None), moved);
        // An acceptance must come after every record that shows the move.
        assert_eq!(
            refused(&with(&[before, after]), now, accepted(150, 7, 1)),
            moved
        );
        assert_eq!(
            refused(&with(&[before, after]), now, accepted(201, 7, 1)),
            None
        );
    }

    #[test]
    fn records_of_other_routes_count_by_the_central_identity() {
        // The tag's own route kept TABLE at WAL 10; another server's tag
        // refilled from the same table later, at 50; another cluster with
        // the same OIDs is at 90; another database of this cluster at 30.
        let mine = clocked(at(7, 1, 10), 1);
        let same_table = clocked(at(7, 1, 50), 2);
        let other_cluster = clocked(at(8, 1, 90), 3);
        let other_database = in_database(clocked(at(7, 1, 30), 1), 99);
        let all = Records {
            seen: vec![same_table, other_cluster, other_database],
            route: vec![mine.central],
        };
        assert_eq!(
            moves(&all, &at(7, 1, 20)),
            vec![
                Shown {
                    moved: Moved::WalWentBack { was: 50, now: 20 },
                    clock_us: 2
                },
                Shown {
                    moved: Moved::WalWentBack { was: 30, now: 20 },
                    clock_us: 1
                },
            ]
        );
        // Through this route, a record counts whatever the server is now.
        assert_eq!(
            moves(&all, &at(9, 1, 20)),
            vec![Shown {
                moved: Moved::OtherCluster { was: 7, now: 9 },
                clock_us: 2
            }]
        );
        // Another database of the same cluster, not this route's: a record
        // there shows the cluster's WAL went back, never "another table".
        let others = rows(&[same_table, other_cluster, other_database]);
        let elsewhere = in_database(at(7, 1, 20), 500);
        assert_eq!(
            refused(&others, elsewhere, None),
            Some(Moved::WalWentBack { was: 50, now: 20 })
        );
        let further = Seen {
            wal_lsn: 95,
            ..elsewhere
        };
        assert_eq!(refused(&others, further, None), None);
        // A copy promoted apart (same system identifier, another
        // timeline), each side serving its own databases: not a move.
        let split = Seen {
            central: Central {
                timeline: 2,
                ..elsewhere.central
            },
            ..elsewhere
        };
        assert_eq!(refused(&others, split, None), None);
        // Two clusters made apart have the same OIDs more often than not.
        assert_eq!(moves(&rows(&[other_cluster]), &at(7, 1, 20)), vec![]);
        // Another server's record of the same table shows a copy put back.
        assert_eq!(
            refused(&all, at(7, 1, 20), None),
            Some(Moved::WalWentBack { was: 50, now: 20 })
        );
    }

    #[test]
    fn a_central_clock_behind_the_records_is_named() {
        let records = rows(&[
            clocked(at(7, 1, 50), 9_000_000),
            in_database(clocked(at(7, 1, 60), 5_000_000), 99),
        ]);
        let now = at(7, 1, 20);
        let refused = refusal(&records, &clocked(now, 3_500_000), None).unwrap();
        assert_eq!(refused.accept_after_us, 9_000_000);
        assert_eq!(refused.clock_now_us, Some(3_500_000));
        assert!(refused.to_string().contains("its clock is 6 s behind"));
        // An acceptance before the later record does not count, even
        // though it is after the earlier one.
        assert!(refusal(
            &records,
            &clocked(now, 10_000_000),
            accepted(7_000_000, 7, 1)
        )
        .is_some());
        let ahead = refusal(&records, &clocked(now, 9_000_001), None).unwrap();
        assert_eq!(ahead.clock_now_us, None);
        assert!(!ahead.to_string().contains("clock"));
        assert_eq!(
            refusal(
                &records,
                &clocked(now, 11_000_000),
                accepted(9_000_001, 7, 1)
            ),
            None
        );
        assert_eq!(
            refusal(&records, &clocked(now, 0), None)
                .unwrap()
                .clock_now_us,
            None
        );
    }

    #[test]
    fn another_database_or_table_on_the_same_cluster_is_refused() {
        let other = CentralTable {
            table_oid: 24600,
            ..TABLE
        };
        let restored = Seen {
            central: Central {
                table: other,
                timeline: 1,
            },
            wal_lsn: 99,
            clock_us: 0,
        };
        let moved = Some(Moved::OtherTable {
            was: TABLE.oids(),
            now: other.oids(),
        });
        assert_eq!(moved_since(at(7, 1, 10), restored), moved);
        let last = own(&[clocked(at(7, 1, 10), 500)]);
        assert_eq!(refused(&last, restored, None), moved);
        assert_eq!(refused(&last, restored, accepted(501, 7, 1)), None);
        // A view that answers no OIDs (0): a table of its own, which still
        // counts for its cluster's WAL position. (Before 0.4.0 a record
        // without OIDs compared the rest only; no release made one.)
        let unknown = Seen {
            central: Central {
                table: CentralTable {
                    database_oid: 0,
                    table_oid: 0,
                    ..TABLE
                },
                timeline: 1,
            },
            wal_lsn: 10,
            clock_us: 0,
        };
        assert_eq!(moved_since(unknown, unknown), None);
        assert_eq!(
            refused(
                &rows(&[unknown]),
                Seen {
                    wal_lsn: 9,
                    ..unknown
                },
                None
            ),
            Some(Moved::WalWentBack { was: 10, now: 9 })
        );
        assert_eq!(
            refused(&rows(&[unknown]), restored, None),
            None,
            "another table, not kept by the route: its WAL only"
        );
        assert!(Moved::OtherTable {
            was: TABLE.oids(),
            now: other.oids(),
        }
        .to_string()
        .contains("database OID 16384, table OID 24600; was 16384 and 16390"));
    }

    #[test]
    fn the_same_server_further_along_is_trusted() {
        assert_eq!(moved_since(at(7, 1, 10), at(7, 1, 10)), None);
        assert_eq!(
            refused(&own(&[clocked(at(7, 1, 10), 500)]), at(7, 1, 11), None),
            None
        );
    }

    #[test]
    fn a_move_is_refused_until_accepted_there_after_the_last_refill() {
        let last = &own(&[clocked(at(7, 1, 10), 500)]);
        let moved = Some(Moved::OtherTimeline { was: 1, now: 2 });
        assert_eq!(refused(last, at(7, 2, 5), None), moved);
        // An acceptance older than the shard's last refill predates the
        // move (or came back with a restored copy): it does not count.
        assert_eq!(refused(last, at(7, 2, 5), accepted(400, 7, 2)), moved);
        assert_eq!(refused(last, at(7, 2, 5), accepted(500, 7, 2)), moved);
        assert_eq!(refused(last, at(7, 2, 5), accepted(501, 7, 2)), None);
        // One made on another timeline or cluster is about another move:
        // accepted after a first failover, it says nothing of a second.
        let third = Some(Moved::OtherTimeline { was: 1, now: 3 });
        assert_eq!(refused(last, at(7, 3, 5), accepted(900, 7, 2)), third);
        assert_eq!(
            refused(last, at(8, 1, 5), accepted(900, 7, 1)),
            Some(Moved::OtherCluster { was: 7, now: 8 })
        );
        // A copy put back on the same timeline, accepted after.
        assert_eq!(refused(last, at(7, 1, 9), accepted(900, 7, 1)), None);
    }

    #[test]
    fn another_cluster_a_new_timeline_or_wal_going_back_is_refused() {
        assert_eq!(
            moved_since(at(7, 1, 10), at(8, 1, 99)),
            Some(Moved::OtherCluster { was: 7, now: 8 })
        );
        // A new timeline is refused even when its WAL is further along:
        // the standby may have missed commits that came before its switch.
        assert_eq!(
            moved_since(at(7, 1, 10), at(7, 2, 99)),
            Some(Moved::OtherTimeline { was: 1, now: 2 })
        );
        assert_eq!(
            moved_since(at(7, 1, 10), at(7, 1, 9)),
            Some(Moved::WalWentBack { was: 10, now: 9 })
        );
    }

    // The invariants of the module header, one by one.

    #[test]
    fn invariant_1_a_clusters_wal_never_goes_back_on_a_timeline_through_any_route() {
        // Rows of any table of the cluster, recorded through any server or
        // tag (none of them this route's), on the timeline reported now.
        let table_a = clocked(at(7, 1, 40), 10);
        let table_b = in_database(clocked(at(7, 1, 70), 20), 99);
        let seen = rows(&[table_a, table_b]);
        assert_eq!(
            moves(&seen, &at(7, 1, 60)),
            vec![Shown {
                moved: Moved::WalWentBack { was: 70, now: 60 },
                clock_us: 20
            }]
        );
        // At or past every row: nothing to see.
        assert_eq!(moves(&seen, &at(7, 1, 70)), vec![]);
        // Another timeline or cluster is not this WAL.
        assert_eq!(moves(&seen, &in_database(at(7, 2, 5), 500)), vec![]);
        assert_eq!(moves(&seen, &at(8, 1, 5)), vec![]);
        // Lifted by an acceptance after the row that shows it, only.
        assert_eq!(
            refused(&seen, at(7, 1, 60), accepted(20, 7, 1)),
            Some(Moved::WalWentBack { was: 70, now: 60 })
        );
        assert_eq!(refused(&seen, at(7, 1, 60), accepted(21, 7, 1)), None);
    }

    #[test]
    fn invariant_2_a_central_table_stays_on_the_timeline_it_was_seen_on() {
        // The table seen on timelines 1 (long ago) and 2 (lately), through
        // routes that are not this one; another database only on 1.
        let first = clocked(at(7, 1, 10), 100);
        let second = clocked(at(7, 2, 30), 300);
        let other_database = in_database(clocked(at(7, 1, 500), 400), 99);
        let seen = rows(&[first, second, other_database]);
        // Now on timeline 3: both of its rows show it; the latest is named.
        let now = at(7, 3, 40);
        assert_eq!(
            moves(&seen, &now)
                .iter()
                .map(|s| s.moved)
                .collect::<Vec<_>>(),
            vec![
                Moved::OtherTimeline { was: 1, now: 3 },
                Moved::OtherTimeline { was: 2, now: 3 }
            ]
        );
        assert_eq!(
            refused(&seen, now, None),
            Some(Moved::OtherTimeline { was: 2, now: 3 })
        );
        // An acceptance on timeline 3 after both lifts it; one on 2 does not.
        assert_eq!(refused(&seen, now, accepted(301, 7, 3)), None);
        assert!(refused(&seen, now, accepted(301, 7, 2)).is_some());
        // Another database on timeline 1 (a copy promoted apart, say):
        // nothing about this table's timeline.
        assert_eq!(moves(&rows(&[other_database]), &at(7, 2, 600)), vec![]);
    }

    #[test]
    fn invariant_3_a_route_leads_to_the_central_table_it_last_refilled_from() {
        // Kept by the route, with its row's clock; the rows of other
        // tables say nothing of another cluster or table.
        let kept = clocked(at(7, 1, 10), 100);
        let route = own(&[kept]);
        let dump = Seen {
            central: Central {
                table: CentralTable {
                    database_oid: 20000,
                    table_oid: 20006,
                    ..TABLE
                },
                timeline: 1,
            },
            wal_lsn: 50,
            clock_us: 0,
        };
        assert_eq!(
            moves(&route, &dump),
            vec![Shown {
                moved: Moved::OtherTable {
                    was: TABLE.oids(),
                    now: dump.central.table.oids()
                },
                clock_us: 100
            }]
        );
        assert_eq!(moves(&rows(&[kept]), &dump), vec![]);
        assert_eq!(
            moves(&route, &at(8, 1, 50)),
            vec![Shown {
                moved: Moved::OtherCluster { was: 7, now: 8 },
                clock_us: 100
            }]
        );
        // The widest move is named: another cluster before anything else.
        let mixed = Records {
            seen: vec![kept, clocked(at(8, 1, 90), 200)],
            route: vec![kept.central],
        };
        assert_eq!(
            refused(&mixed, at(8, 1, 50), None),
            Some(Moved::OtherCluster { was: 7, now: 8 })
        );
        // A kept identity whose row is gone (deleted by hand): any
        // acceptance where the central server is now lifts it.
        let gone = Records {
            seen: vec![],
            route: vec![kept.central],
        };
        assert_eq!(
            refused(&gone, dump, None),
            Some(Moved::OtherTable {
                was: TABLE.oids(),
                now: dump.central.table.oids()
            })
        );
        assert_eq!(refused(&gone, dump, accepted(1, 7, 1)), None);
    }

    #[test]
    fn lsns_print_as_postgresql_does() {
        assert_eq!(Lsn(0x16_B374_D848).to_string(), "16/B374D848");
        assert_eq!(Lsn(0).to_string(), "0/0");
        assert_eq!(Lsn(0x1A).to_string(), "0/1A");
        // SQL hands a position over as its distance from 0/0, in digits.
        assert_eq!(
            "97500059720".parse::<u64>().map(Lsn).unwrap().to_string(),
            "16/B374D848"
        );
    }
}
