//! Whether this primary may be a copy running beside its original: it
//! started from a base backup (PostgreSQL renames the copy's `backup_label`
//! to `backup_label.old` once it has recovered) and it still runs on the
//! backup's timeline.
//!
//! A standby promoted after a failover, and a restore to a point in time
//! (`recovery.signal`), both end recovery on a new timeline: they take over
//! from their original and are not copies. A `pg_basebackup` started as a
//! primary of its own stays on the timeline it was copied from; with the
//! same fixed machine id as a server still running, both issue the same
//! snowflake IDs, which neither can see. Moving a server to new hardware
//! this way looks the same, so the keeper warns and goes on.
//!
//! Pure: the caller reads the file and the timeline.

/// The file a server started from a base backup keeps in its data directory.
pub const BACKUP_LABEL_OLD: &str = "backup_label.old";

/// The timeline a base backup was taken on, from its `backup_label`
/// (`START TIMELINE: 1`, written by PostgreSQL 11 and later).
pub fn start_timeline(label: &str) -> Option<u32> {
    label.lines().find_map(|line| {
        line.strip_prefix("START TIMELINE:")
            .and_then(|rest| rest.trim().parse().ok())
    })
}

/// Whether a primary on `timeline`, whose data directory holds `label`
/// (the text of `backup_label.old`, if any), still runs on the timeline
/// the backup was taken on.
pub fn is_on_the_backups_timeline(label: Option<&str>, timeline: u32) -> bool {
    label.and_then(start_timeline) == Some(timeline)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABEL: &str = "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\n\
        CHECKPOINT LOCATION: 0/2000060\n\
        BACKUP METHOD: streamed\n\
        BACKUP FROM: primary\n\
        START TIME: 2026-12-02 04:40:00 UTC\n\
        LABEL: pg_basebackup base backup\n\
        START TIMELINE: 3\n";

    #[test]
    fn the_backups_timeline_is_read_from_its_label() {
        assert_eq!(start_timeline(LABEL), Some(3));
        assert_eq!(start_timeline("START TIMELINE: 12\n"), Some(12));
        assert_eq!(start_timeline("LABEL: x\n"), None);
        assert_eq!(start_timeline("START TIMELINE: three\n"), None);
        assert_eq!(start_timeline(""), None);
    }

    #[test]
    fn only_a_copy_still_on_the_backups_timeline_is_suspect() {
        // Started from the backup as a primary: same timeline.
        assert!(is_on_the_backups_timeline(Some(LABEL), 3));
        // Promoted, or restored with recovery.signal: a new timeline.
        assert!(!is_on_the_backups_timeline(Some(LABEL), 4));
        // Never started from a base backup, or a label it cannot read.
        assert!(!is_on_the_backups_timeline(None, 3));
        assert!(!is_on_the_backups_timeline(Some("garbage"), 3));
    }
}
