//! Whether a central server is still the one a shard left: pure checks on
//! the position the central server reports (`id_segment_origin` there:
//! its system identifier, the OIDs of its database and `id_segment`, its
//! WAL timeline and its WAL insert position), against the ones the shard
//! recorded at its last refills from it (`id_segment_remote.central_*` of
//! every tag attached through the same server or reaching the same central
//! table, and `id_segment_detached.central_*` of the tags dropped since:
//! `distributor::recorded_of_server` reads them, `relevant` picks them).
//!
//! A central server that went back lost ranges it had handed out, and a
//! shard cannot always see that from the row: one that took nothing after
//! the point it went back to finds the row above its own mark. The
//! position catches what the row cannot, for every shard that recorded one:
//!
//! * another system identifier: a different cluster (a dump restored into
//!   a new one, `initdb` again);
//! * another database or `id_segment` on the same cluster: a dump restored
//!   into a database made anew, or the server pointed at another copy
//!   (`ALTER SERVER ... OPTIONS (SET dbname ...)`);
//! * another timeline: a promoted standby or a point-in-time recovery,
//!   either of which may have lost commits of the old timeline;
//! * a WAL position below the recorded one on the same timeline: a cold
//!   copy of the data directory, or a backup restored without recovery to
//!   the end.
//!
//! A change is refused until the DBA has raised the central rows above
//! what every attached server took and run `segment_central_accept()`
//! there (README, "Running the central server"). The last acceptance
//! counts for a shard when it was made on the cluster and timeline the
//! central server is on now, and its clock stamped it later than the
//! shard's last refill (`id_segment_remote.central_clock`): one made
//! before the shard's last refill is older than the move (a restored copy
//! brings back only acceptances from before it), and one made on another
//! timeline is about another move (an acceptance after a first failover
//! says nothing about a second one). The central view offers only an
//! acceptance made in its own database for its own `id_segment`, so one
//! restored with a dump does not count for the table made by the restore.
//!
//! Every record counts: a tag whose own last refill came before the point
//! the central server went back to sees nothing wrong with its own record,
//! while another tag's (or a dropped tag's) later one shows the move.

use std::fmt;

/// Where a central server was (or is): what `id_segment_origin` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CentralPosition {
    pub system_identifier: i64,
    /// Its database and `id_segment` (`None` in a record made before the
    /// OIDs were recorded: not compared).
    pub table: Option<CentralTable>,
    pub timeline: i64,
    pub wal_lsn: u64,
}

/// Which database and which `id_segment` table of a central cluster: the
/// OIDs a restore into the same cluster, or another copy of the database,
/// does not keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CentralTable {
    pub database_oid: i64,
    pub table_oid: i64,
}

/// The last `segment_central_accept()` on a central server: when (its
/// clock, in microseconds since 1970), and where it was then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acceptance {
    pub at_us: i64,
    pub system_identifier: i64,
    pub timeline: i64,
}

/// What a shard recorded at its last refill from a central server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub position: CentralPosition,
    /// The central server's clock then, in microseconds since 1970.
    pub clock_us: i64,
}

/// A record that may be about the central server a refill reaches: one
/// made through the same postgres_fdw server (or, for a dropped tag,
/// through a server of the same name, or the tag being attached itself)
/// counts whatever it says; any other only if it reached the same
/// cluster as the server reports now (through whichever server, at
/// whichever address: a host spelt another way, a server dropped since, a
/// libpq service file) — whole if it reached the same database and table,
/// and for the cluster's WAL position only if it reached another database
/// of it on the same timeline (the WAL is the cluster's: one database's
/// record shows a copy of the whole cluster put back; each database has
/// its own id_segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub record: Recorded,
    pub of_this_server: bool,
}

/// The records of `candidates` that are about the central server at
/// `now`.
pub fn relevant(candidates: &[Candidate], now: CentralPosition) -> Vec<Recorded> {
    candidates
        .iter()
        .filter_map(|c| {
            let record = c.record;
            if c.of_this_server || record.position.table == now.table {
                (c.of_this_server || record.position.system_identifier == now.system_identifier)
                    .then_some(record)
            } else if record.position.system_identifier == now.system_identifier
                && record.position.timeline == now.timeline
            {
                // Another database (or table) of the same cluster, on the
                // same timeline: its WAL position only. (On another
                // timeline it may be a cluster split by promoting a copy,
                // each side serving its own databases: not a move.)
                Some(Recorded {
                    position: CentralPosition {
                        table: None,
                        ..record.position
                    },
                    ..record
                })
            } else {
                None
            }
        })
        .collect()
}

/// How a central server moved since a shard's last refill from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moved {
    OtherCluster {
        was: i64,
        now: i64,
    },
    OtherTable {
        was: CentralTable,
        now: CentralTable,
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

/// Why a refill (or an attach) does not trust the central server now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub moved: Moved,
    /// The latest central clock (µs since 1970) of the records that show
    /// the move: an acceptance counts once made after it.
    pub accept_after_us: i64,
    /// The central server's clock now, when it is not past that yet (a
    /// restored or new central server whose clock runs behind the old
    /// one's): the acceptance cannot count until it is.
    pub clock_now_us: Option<i64>,
}

/// What keeps a refill (or an attach) from trusting the central server
/// now, if anything: it moved since one of `recorded` (none before the
/// first refill that records a position: whatever the server reports is
/// taken), and was not accepted where it is now since that record
/// (`accepted`: its last `segment_central_accept()`). `clock_now_us` is
/// the central server's clock now.
pub fn refusal(
    recorded: &[Recorded],
    now: CentralPosition,
    clock_now_us: i64,
    accepted: Option<Acceptance>,
) -> Option<Refusal> {
    let mut refusing = recorded
        .iter()
        .filter_map(|record| Some((refusal_by(record, now, accepted)?, record.clock_us)));
    let (moved, first_clock_us) = refusing.next()?;
    let accept_after_us =
        refusing.fold(first_clock_us, |latest, (_, clock_us)| latest.max(clock_us));
    Some(Refusal {
        moved,
        accept_after_us,
        // (0: a view that answered no clock, which says nothing of it.)
        clock_now_us: (clock_now_us > 0 && clock_now_us <= accept_after_us).then_some(clock_now_us),
    })
}

/// `refusal` by one record.
fn refusal_by(
    recorded: &Recorded,
    now: CentralPosition,
    accepted: Option<Acceptance>,
) -> Option<Moved> {
    let moved = moved_since(recorded.position, now)?;
    match accepted {
        Some(a)
            if a.system_identifier == now.system_identifier
                && a.timeline == now.timeline
                && a.at_us > recorded.clock_us =>
        {
            None
        }
        _ => Some(moved),
    }
}

/// How the central server moved from `was` to `now`, if it did.
pub fn moved_since(was: CentralPosition, now: CentralPosition) -> Option<Moved> {
    if was.system_identifier != now.system_identifier {
        Some(Moved::OtherCluster {
            was: was.system_identifier,
            now: now.system_identifier,
        })
    } else if let Some(moved) = other_table(was.table, now.table) {
        Some(moved)
    } else if was.timeline != now.timeline {
        Some(Moved::OtherTimeline {
            was: was.timeline,
            now: now.timeline,
        })
    } else if now.wal_lsn < was.wal_lsn {
        Some(Moved::WalWentBack {
            was: was.wal_lsn,
            now: now.wal_lsn,
        })
    } else {
        None
    }
}

/// Another database or `id_segment` on the same cluster, when both sides
/// know theirs.
fn other_table(was: Option<CentralTable>, now: Option<CentralTable>) -> Option<Moved> {
    match (was, now) {
        (Some(was), Some(now)) if was != now => Some(Moved::OtherTable { was, now }),
        _ => None,
    }
}

/// A `pg_lsn` as PostgreSQL prints it (`16/B374D848`).
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    let high = u32::from_str_radix(high, 16).ok()?;
    let low = u32::from_str_radix(low, 16).ok()?;
    Some((u64::from(high) << 32) | u64::from(low))
}

/// A WAL position printed as PostgreSQL prints a `pg_lsn`.
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
                now.database_oid, now.table_oid, was.database_oid, was.table_oid
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
        database_oid: 16384,
        table_oid: 16390,
    };

    fn at(system_identifier: i64, timeline: i64, wal_lsn: u64) -> CentralPosition {
        CentralPosition {
            system_identifier,
            table: Some(TABLE),
            timeline,
            wal_lsn,
        }
    }

    /// `refusal`'s move, with the central clock long past every record.
    fn refused(
        recorded: &[Recorded],
        now: CentralPosition,
        accepted: Option<Acceptance>,
    ) -> Option<Moved> {
        refusal(recorded, now, i64::MAX, accepted).map(|r| r.moved)
    }

    fn recorded(position: CentralPosition, clock_us: i64) -> [Recorded; 1] {
        [Recorded { position, clock_us }]
    }

    #[test]
    fn nothing_recorded_takes_whatever_the_server_reports() {
        assert_eq!(refused(&[], at(7, 3, 10), None), None);
    }

    #[test]
    fn any_record_that_shows_a_move_refuses() {
        // One tag last refilled before the point the server went back to
        // (its record is fine), another after it (its record shows it).
        let before = Recorded {
            position: at(7, 1, 10),
            clock_us: 100,
        };
        let after = Recorded {
            position: at(7, 1, 50),
            clock_us: 200,
        };
        let now = at(7, 1, 20);
        assert_eq!(refused(&[before], now, None), None);
        let moved = Some(Moved::WalWentBack { was: 50, now: 20 });
        assert_eq!(refused(&[before, after], now, None), moved);
        assert_eq!(refused(&[after, before], now, None), moved);
        // An acceptance must come after every record that shows the move.
        assert_eq!(refused(&[before, after], now, accepted(150, 7, 1)), moved);
        assert_eq!(refused(&[before, after], now, accepted(201, 7, 1)), None);
    }

    #[test]
    fn records_of_other_servers_count_only_for_the_same_central_table() {
        let candidate = |position, clock_us, of_this_server| Candidate {
            record: Recorded { position, clock_us },
            of_this_server,
        };
        let mine = candidate(at(7, 1, 10), 1, true);
        let same_table = candidate(at(7, 1, 50), 2, false);
        let other_cluster = candidate(at(8, 1, 90), 3, false);
        let unknown_table = candidate(
            CentralPosition {
                table: None,
                ..at(7, 1, 90)
            },
            4,
            false,
        );
        let all = [mine, same_table, other_cluster, unknown_table];
        assert_eq!(
            relevant(&all, at(7, 1, 20)),
            vec![mine.record, same_table.record, unknown_table.record]
        );
        // Through this server, a record counts whatever the server is now.
        assert_eq!(relevant(&all, at(9, 1, 20)), vec![mine.record]);
        // Another database of the same cluster: a record there shows the
        // cluster's WAL went back, never "another table".
        let other_database = CentralPosition {
            table: Some(CentralTable {
                database_oid: 99,
                table_oid: 100,
            }),
            ..at(7, 1, 20)
        };
        let others = [same_table, other_cluster, unknown_table];
        let picked = relevant(&others, other_database);
        assert_eq!(picked.len(), 2);
        assert_eq!(
            refused(&picked, other_database, None),
            Some(Moved::WalWentBack { was: 50, now: 20 })
        );
        let further = CentralPosition {
            wal_lsn: 95,
            ..other_database
        };
        assert_eq!(refused(&relevant(&others, further), further, None), None);
        // A copy promoted apart (same system identifier, another
        // timeline), each side serving its own databases: not a move.
        let split = CentralPosition {
            timeline: 2,
            ..other_database
        };
        assert_eq!(refused(&relevant(&others, split), split, None), None);
        // Two clusters made apart have the same OIDs more often than not.
        assert_eq!(relevant(&[other_cluster], at(7, 1, 20)), vec![]);
        // Another server's record of the same table shows a copy put back.
        assert_eq!(
            refused(&relevant(&all, at(7, 1, 20)), at(7, 1, 20), None),
            Some(Moved::WalWentBack { was: 50, now: 20 })
        );
    }

    #[test]
    fn a_central_clock_behind_the_records_is_named() {
        let records = [
            Recorded {
                position: at(7, 1, 50),
                clock_us: 9_000_000,
            },
            Recorded {
                position: at(7, 1, 60),
                clock_us: 5_000_000,
            },
        ];
        let now = at(7, 1, 20);
        let refused = refusal(&records, now, 3_500_000, None).unwrap();
        assert_eq!(refused.accept_after_us, 9_000_000);
        assert_eq!(refused.clock_now_us, Some(3_500_000));
        assert!(refused.to_string().contains("its clock is 6 s behind"));
        // An acceptance before the later record does not count, even
        // though it is after the earlier one.
        assert!(refusal(&records, now, 10_000_000, accepted(7_000_000, 7, 1)).is_some());
        let ahead = refusal(&records, now, 9_000_001, None).unwrap();
        assert_eq!(ahead.clock_now_us, None);
        assert!(!ahead.to_string().contains("clock"));
        assert_eq!(
            refusal(&records, now, 11_000_000, accepted(9_000_001, 7, 1)),
            None
        );
        assert_eq!(refusal(&records, now, 0, None).unwrap().clock_now_us, None);
    }

    #[test]
    fn another_database_or_table_on_the_same_cluster_is_refused() {
        let other = CentralTable {
            database_oid: 16384,
            table_oid: 24600,
        };
        let restored = CentralPosition {
            table: Some(other),
            ..at(7, 1, 99)
        };
        let moved = Some(Moved::OtherTable {
            was: TABLE,
            now: other,
        });
        assert_eq!(moved_since(at(7, 1, 10), restored), moved);
        assert_eq!(refused(&recorded(at(7, 1, 10), 500), restored, None), moved);
        assert_eq!(
            refused(&recorded(at(7, 1, 10), 500), restored, accepted(501, 7, 1)),
            None
        );
        // A record made before the OIDs were kept compares the rest only.
        let unknown = CentralPosition {
            table: None,
            ..at(7, 1, 10)
        };
        assert_eq!(moved_since(unknown, restored), None);
        assert_eq!(
            moved_since(
                unknown,
                CentralPosition {
                    table: None,
                    ..at(7, 1, 9)
                }
            ),
            Some(Moved::WalWentBack { was: 10, now: 9 })
        );
        assert!(Moved::OtherTable {
            was: TABLE,
            now: other
        }
        .to_string()
        .contains("database OID 16384, table OID 24600; was 16384 and 16390"));
    }

    #[test]
    fn the_same_server_further_along_is_trusted() {
        assert_eq!(moved_since(at(7, 1, 10), at(7, 1, 10)), None);
        assert_eq!(
            refused(&recorded(at(7, 1, 10), 500), at(7, 1, 11), None),
            None
        );
    }

    fn accepted(at_us: i64, system_identifier: i64, timeline: i64) -> Option<Acceptance> {
        Some(Acceptance {
            at_us,
            system_identifier,
            timeline,
        })
    }

    #[test]
    fn a_move_is_refused_until_accepted_there_after_the_last_refill() {
        let last = &recorded(at(7, 1, 10), 500);
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

    #[test]
    fn lsns_read_and_print_as_postgresql_does() {
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(parse_lsn("0/0"), Some(0));
        assert_eq!(parse_lsn("16B374D848"), None);
        assert_eq!(parse_lsn("G/0"), None);
        assert_eq!(Lsn(0x16_B374_D848).to_string(), "16/B374D848");
        assert_eq!(Lsn(parse_lsn("0/1A").unwrap()).to_string(), "0/1A");
    }
}
