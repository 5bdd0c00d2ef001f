//! Who gets a slot of the shared-memory registry when a tag needs one: the
//! fair-share rule between the databases of a cluster. Pure: the registry
//! (`registry.rs`) gathers what each slot looks like and applies the
//! answer under its exclusive lock; nothing here touches PostgreSQL.
//!
//! # Rule
//!
//! `pg_idgen.max_tags` slots serve every database of the cluster. So that
//! one database (a tenant creating tags in a loop, say) cannot take the
//! slots another needs:
//!
//! * a database holds at most `quota` slots (`pg_idgen.max_tags_per_database`);
//!   at its quota, a new tag of it may only take the place of one of its
//!   own tags that is idle or was never served;
//! * below its quota, a new tag takes a free slot; else the slot of a tag
//!   that never got a range (its refill failed: a mistyped tag, say); else
//!   the slot of the tag idle longest, of any database, once it has been
//!   idle `idle_after_ms` — so a cluster whose slots are all in use by
//!   tags being drawn refuses a new tag rather than take a busy one's.
//!
//! Idle means no ID was taken from the slot since the registry last looked
//! at it, that long ago (`Registry` stamps the look). A tag whose slot is
//! taken loses its cached IDs (a gap, as after a restart), never repeats
//! one: the slot's generation changes first.

/// What the rule needs to know of one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotFacts {
    pub active: bool,
    pub database: u32,
    /// Its tag never got a range, and its last refill failed.
    pub never_served: bool,
    /// How long no ID was taken from it (ms).
    pub idle_ms: i64,
}

/// Where a new tag of a database goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Slot `index`: free, or its tag is pushed out.
    Take(usize),
    /// The database holds `held` slots, its quota, none of them idle.
    QuotaReached { held: usize },
    /// Every slot is in use by a tag drawn from lately.
    Full,
}

/// The slot for a new tag of `database` (see the module header).
pub fn choose(slots: &[SlotFacts], database: u32, quota: usize, idle_after_ms: i64) -> Choice {
    let held = slots
        .iter()
        .filter(|s| s.active && s.database == database)
        .count();
    let of =
        |mine_only: bool| move |s: &&SlotFacts| s.active && (!mine_only || s.database == database);
    let at_quota = held >= quota;
    let never_served = slots
        .iter()
        .enumerate()
        .find(|(_, s)| of(at_quota)(s) && s.never_served)
        .map(|(i, _)| i);
    let idlest = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| of(at_quota)(s) && s.idle_ms >= idle_after_ms)
        .max_by_key(|(_, s)| s.idle_ms)
        .map(|(i, _)| i);
    let free = match at_quota {
        true => None,
        false => slots.iter().position(|s| !s.active),
    };
    match free.or(never_served).or(idlest) {
        Some(index) => Choice::Take(index),
        // A share as large as the registry restricts nothing: it is full.
        None if at_quota && held < slots.len() => Choice::QuotaReached { held },
        None => Choice::Full,
    }
}

/// The quota `pg_idgen.max_tags_per_database` means: itself, or half of
/// `max_tags` (at least one) when it is 0 or -1; never above `max_tags`.
pub fn quota(max_tags: usize, setting: i32) -> usize {
    match usize::try_from(setting) {
        Ok(n) if n > 0 => n.min(max_tags.max(1)),
        _ => (max_tags / 2).max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: i64 = 60_000;

    fn busy(database: u32) -> SlotFacts {
        SlotFacts {
            active: true,
            database,
            never_served: false,
            idle_ms: 5,
        }
    }

    fn idle(database: u32, idle_ms: i64) -> SlotFacts {
        SlotFacts {
            idle_ms,
            ..busy(database)
        }
    }

    fn free() -> SlotFacts {
        SlotFacts {
            active: false,
            database: 0,
            never_served: false,
            idle_ms: 0,
        }
    }

    #[test]
    fn a_database_at_its_quota_cannot_take_a_free_slot() {
        let slots = [busy(1), busy(1), free(), free()];
        assert_eq!(choose(&slots, 1, 2, IDLE), Choice::QuotaReached { held: 2 });
        assert_eq!(choose(&slots, 2, 2, IDLE), Choice::Take(2));
    }

    #[test]
    fn a_flood_from_one_database_leaves_the_rest_to_the_others() {
        let max_tags = 16;
        let quota = quota(max_tags, -1);
        let mut slots = vec![free(); max_tags];
        let mut taken = 0;
        for _ in 0..20 {
            match choose(&slots, 1, quota, IDLE) {
                Choice::Take(i) => {
                    slots[i] = busy(1);
                    taken += 1;
                }
                Choice::QuotaReached { held } => assert_eq!(held, quota),
                Choice::Full => panic!("the flood filled the registry"),
            }
        }
        assert_eq!(taken, 8);
        for _ in 0..8 {
            let Choice::Take(i) = choose(&slots, 2, quota, IDLE) else {
                panic!("another database found no slot");
            };
            slots[i] = busy(2);
        }
    }

    #[test]
    fn at_its_quota_a_database_replaces_its_own_idle_or_unserved_tag_only() {
        let never = SlotFacts {
            never_served: true,
            ..busy(2)
        };
        let slots = [busy(1), idle(2, IDLE * 10), never, idle(1, IDLE)];
        assert_eq!(choose(&slots, 1, 2, IDLE), Choice::Take(3));
        let slots = [busy(1), idle(2, IDLE * 10), never, busy(1)];
        assert_eq!(choose(&slots, 1, 2, IDLE), Choice::QuotaReached { held: 2 });
    }

    #[test]
    fn below_its_quota_a_tag_takes_free_then_unserved_then_the_idlest_slot() {
        let never = SlotFacts {
            never_served: true,
            ..busy(3)
        };
        assert_eq!(choose(&[busy(2), free()], 1, 4, IDLE), Choice::Take(1));
        assert_eq!(
            choose(&[idle(2, IDLE * 2), never], 1, 4, IDLE),
            Choice::Take(1)
        );
        assert_eq!(
            choose(&[idle(2, IDLE), idle(3, IDLE * 3), busy(2)], 1, 4, IDLE),
            Choice::Take(1)
        );
    }

    #[test]
    fn no_busy_tag_is_ever_pushed_out() {
        let slots = [busy(2), idle(3, IDLE - 1), busy(1)];
        assert_eq!(choose(&slots, 1, 4, IDLE), Choice::Full);
    }

    #[test]
    fn a_database_holding_every_slot_finds_the_registry_full() {
        let slots = [busy(1), busy(1)];
        assert_eq!(choose(&slots, 1, 2, IDLE), Choice::Full);
        assert_eq!(choose(&slots, 2, 2, IDLE), Choice::Full);
    }

    #[test]
    fn the_quota_setting_reads_as_the_docs_say() {
        assert_eq!(quota(1024, -1), 512);
        assert_eq!(quota(16, -1), 8);
        assert_eq!(quota(1, -1), 1);
        assert_eq!(quota(16, 100), 16);
        assert_eq!(quota(16, 3), 3);
        assert_eq!(quota(16, 0), 8);
    }
}
