//! The format of `pg_idgen_snowflake.state`, the file that carries the
//! snowflake high-water marks across restarts, what a start makes of it,
//! and reading it. No PostgreSQL here: text in, text out, and `std::fs`
//! for the file in a directory the caller names (the data directory: a
//! server process's working directory). The keeper writes it
//! (`keeper::write_durably`, with PostgreSQL's `durable_rename`).
//!
//! # What the file promises
//!
//! For each generator, a *high-water ID*: no ID that generator ever issued
//! (or could issue before the file is written again) is numerically above
//! it. A start requires every new ID to be above it, whatever the layout and
//! epoch are now, so no settings change can make an ID come out twice. The
//! file also names the layout and epoch it was written under, so a start
//! can say what changed.
//!
//! ```text
//! pg_idgen snowflake state 2
//! epoch_ms 1735689600000
//! layout 41 10 12
//! default 1234567890123
//! javascript -1
//! end
//! ```
//!
//! `-1` means "nothing issued yet". The `end` line makes a truncated file
//! unparsable instead of a smaller number. Version 0.1.0 wrote one line: a
//! Unix time in ms no ID had reached, for both generators; it is still read
//! (an upgrade leaves it behind), as written under today's settings.
//!
//! Only a missing file means a first start. Anything else that cannot be
//! read — empty, garbage, a directory, no permission — is an error: a start
//! without the mark could repeat IDs.

use super::layout::{Layout, UnixMs};
use std::path::Path;

/// The file's name, in the data directory.
pub const STATE_FILE: &str = "pg_idgen_snowflake.state";
/// Where a new content is written before it is renamed over the old one.
pub const STATE_FILE_TMP: &str = "pg_idgen_snowflake.state.tmp";

const MAGIC: &str = "pg_idgen snowflake state 2";

/// Why the state file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    pub problem: String,
    /// The file could not be read at all (as opposed to: read, but not a
    /// state file).
    pub io: bool,
}

/// Reads and parses the file in `dir`: `Ok(None)` only when it does not
/// exist (a first start).
pub fn read(dir: &Path) -> Result<Option<Saved>, ReadError> {
    let bytes = match std::fs::read(dir.join(STATE_FILE)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ReadError {
                problem: format!("could not read it: {e}"),
                io: true,
            })
        }
    };
    let text = String::from_utf8(bytes).map_err(|_| ReadError {
        problem: "it is not text".into(),
        io: false,
    })?;
    parse(&text)
        .map(Some)
        .map_err(|problem| ReadError { problem, io: false })
}

/// Whether the file is missing from `dir` (removed under a running
/// server); an error other than "not found" does not count as missing.
pub fn is_missing(dir: &Path) -> bool {
    matches!(
        std::fs::symlink_metadata(dir.join(STATE_FILE)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound
    )
}

/// What a start found in the state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved {
    /// Version 0.1.0's single number: no ID's time reached this Unix ms.
    UnixMark(UnixMs),
    /// The current format.
    HighWater(HighWater),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HighWater {
    /// The main layout (and epoch) the file was written under.
    pub layout: Layout,
    /// No ID of the main generator is above this (-1: none issued).
    pub main: i64,
    /// No ID of the JavaScript-safe generator is above this (-1: none).
    pub javascript: i64,
}

impl HighWater {
    /// The marks of `self` above those of `ours`, the others -1 (nothing to
    /// raise); all of them when there is no `ours`.
    pub fn above(&self, ours: Option<&HighWater>) -> HighWater {
        let Some(ours) = ours else { return *self };
        let higher = |mine: i64, theirs: i64| if mine > theirs { mine } else { -1 };
        HighWater {
            main: higher(self.main, ours.main),
            javascript: higher(self.javascript, ours.javascript),
            ..*self
        }
    }
}

/// When the WAL-logged mark is missing at a start (its row deleted, or the
/// extension dropped and created again): the time (Unix ms) no ID in the
/// data can be above, or `None` when nothing was ever issued from this data
/// directory (no commit replayed and no state file: a first start).
///
/// Every ID in the data was issued before its row's commit, and no further
/// ahead of the clock than `max_lead_ms` (if it was never set higher). A
/// commit replayed since the start bounds the ones after the last
/// checkpoint; the checkpoint's time (whole seconds, so one more is added)
/// bounds those before it, which a standby restarted after a restartpoint
/// does not replay again.
pub fn floor_without_a_mark(
    last_replayed_commit_unix_ms: Option<i64>,
    checkpoint_unix_s: Option<i64>,
    file_had_a_mark: bool,
    max_lead_ms: i64,
) -> Option<i64> {
    if last_replayed_commit_unix_ms.is_none() && !file_had_a_mark {
        return None;
    }
    let checkpoint_ms = checkpoint_unix_s.map(|s| s.saturating_add(1).saturating_mul(1000));
    let known = last_replayed_commit_unix_ms.max(checkpoint_ms)?;
    Some(known.saturating_add(max_lead_ms))
}

/// Whether a primary's start can trust its marks to cover every ID of
/// its machine id: its own row of `snowflake_high_water` was committed on
/// the timeline it is on now (a crash recovery replayed all of it — not a
/// promotion or a point-in-time restore, which start a new timeline and
/// may lack the old primary's last commits), and the state file was there
/// at the start (which carries what this server issued in any database:
/// without it, a `pg_idgen.snowflake_database` changed and changed back
/// leaves only a stale row).
pub fn marks_are_current(
    row_timeline: Option<i64>,
    timeline_now: i64,
    state_file_found: bool,
) -> bool {
    state_file_found && row_timeline == Some(timeline_now)
}

/// Where a start that cannot trust its marks (`marks_are_current`) begins
/// (Unix ms): above anything the server before it could have issued with
/// this machine id — its clock, at most `clock_skew_ms` ahead of this
/// one's now, plus the `max_lead_ms` snowflake time may run ahead of it.
/// The first ID then waits about `clock_skew_ms` for this server's clock.
pub fn floor_above_any_predecessor(now_unix_ms: i64, max_lead_ms: i64, clock_skew_ms: i64) -> i64 {
    now_unix_ms
        .saturating_add(max_lead_ms)
        .saturating_add(clock_skew_ms)
}

/// Renders the file's content.
pub fn render(state: &HighWater) -> String {
    let l = &state.layout;
    format!(
        "{MAGIC}\nepoch_ms {}\nlayout {} {} {}\ndefault {}\njavascript {}\nend\n",
        l.epoch_ms, l.time_bits, l.machine_bits, l.sequence_bits, state.main, state.javascript
    )
}

/// Parses the file's content, strictly: any deviation is an error that
/// says what is wrong.
pub fn parse(text: &str) -> Result<Saved, String> {
    if text.is_empty() {
        return Err("the file is empty".into());
    }
    if let Some(number) = text.strip_suffix('\n') {
        if !number.is_empty() && number.len() <= 18 && number.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(Saved::UnixMark(number.parse().map_err(|_| "bad number")?));
        }
    }
    let Some(body) = text.strip_suffix("end\n") else {
        return Err(
            "it is not a pg_idgen snowflake state file (or it was cut short: no \"end\" line)"
                .into(),
        );
    };
    let lines: Vec<&str> = body.lines().collect();
    let [magic, epoch, layout, main, javascript] = lines[..] else {
        return Err(format!(
            "it has {} lines before \"end\" instead of 5",
            lines.len()
        ));
    };
    if magic != MAGIC {
        return Err(format!("its first line is not \"{MAGIC}\""));
    }
    let field = |line: &str, key: &str| -> Result<i64, String> {
        let value = line
            .strip_prefix(key)
            .and_then(|rest| rest.strip_prefix(' '))
            .ok_or_else(|| format!("expected a line \"{key} <number>\", found {line:?}"))?;
        parse_integer(value).ok_or_else(|| format!("{key}: {value:?} is not an integer"))
    };
    let epoch_ms = field(epoch, "epoch_ms")?;
    let bits: Vec<&str> = layout
        .strip_prefix("layout ")
        .map(|rest| rest.split(' ').collect())
        .unwrap_or_default();
    let [time, machine, sequence] = bits[..] else {
        return Err(format!(
            "expected a line \"layout <time> <machine> <sequence>\", found {layout:?}"
        ));
    };
    let width = |text: &str| {
        parse_integer(text)
            .filter(|b| (0..=63).contains(b))
            .map(|b| b as u32)
            .ok_or_else(|| format!("layout: {text:?} is not a bit width"))
    };
    let layout = Layout::new(
        epoch_ms,
        width(time)?,
        width(machine)?,
        width(sequence)?,
        63,
    )
    .map_err(|_| format!("layout {time} {machine} {sequence} does not add up to 63 bits"))?;
    let high = |line: &str, key: &str| {
        field(line, key).and_then(|v| {
            (v >= -1)
                .then_some(v)
                .ok_or_else(|| format!("{key}: {v} is below -1"))
        })
    };
    Ok(Saved::HighWater(HighWater {
        layout,
        main: high(main, "default")?,
        javascript: high(javascript, "javascript")?,
    }))
}

fn parse_integer(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The high-water ID a persisted limit (ms since the layout's epoch) stands
/// for: the largest ID any machine could have at that time. -1 for none.
pub fn high_water_id(layout: &Layout, limit_ms: i64) -> i64 {
    if limit_ms < 0 {
        return -1;
    }
    let limit_ms = limit_ms.min(layout.max_time_ms());
    let below = layout.machine_bits + layout.sequence_bits;
    (limit_ms << below) | ((1i64 << below) - 1)
}

/// The time (ms since `layout`'s epoch) a generator must start above so that
/// every ID it issues is numerically above `high_id`: the time part of
/// `high_id` read in `layout`. `None` when nothing was issued.
pub fn floor_for(layout: &Layout, high_id: i64) -> Option<i64> {
    (high_id >= 0).then(|| high_id >> (layout.machine_bits + layout.sequence_bits))
}

/// A one-number mark (the 0.1.0 format: a Unix time in ms no ID reached)
/// from before the epoch was never written by pg_idgen — its keeper wrote
/// times ahead of a clock that was past the epoch — and would read as "no
/// ID yet". Most likely seconds were written instead of milliseconds. One
/// past the layout's last millisecond was never written either (its
/// keeper only writes times it can still issue IDs at) and would leave the
/// generator used up: microseconds, most likely.
pub fn check_mark(saved: &Saved, epoch_ms: i64, last_ms: i64) -> Result<(), String> {
    match saved {
        Saved::UnixMark(mark) if *mark < epoch_ms => Err(format!(
            "its time {mark} is before pg_idgen.snowflake_epoch ({epoch_ms} ms since 1970), which pg_idgen never writes (a time in seconds instead of milliseconds?)"
        )),
        Saved::UnixMark(mark) if *mark > last_ms => Err(format!(
            "its time {mark} is after the last millisecond the snowflake layout can hold ({last_ms} ms since 1970), which pg_idgen never writes (a time in microseconds instead of milliseconds?)"
        )),
        _ => Ok(()),
    }
}

/// The floors of the main and the JavaScript-safe generator under today's
/// settings, from what the file holds.
pub fn floors(saved: &Saved, main: &Layout, javascript: &Layout) -> (Option<i64>, Option<i64>) {
    match saved {
        Saved::UnixMark(mark) => {
            let since = |layout: &Layout| {
                let t = mark - layout.epoch_ms;
                (t >= 0).then_some(t.min(layout.max_time_ms()))
            };
            (since(main), since(javascript))
        }
        Saved::HighWater(h) => (floor_for(main, h.main), floor_for(javascript, h.javascript)),
    }
}

/// When the settings changed since the file was written: a sentence saying
/// how, for the log and for errors.
pub fn settings_change(saved: &Saved, main: &Layout) -> Option<String> {
    let Saved::HighWater(h) = saved else {
        return None;
    };
    let (old, new) = (&h.layout, main);
    let mut changes = Vec::new();
    if old.epoch_ms != new.epoch_ms {
        changes.push(format!(
            "the epoch moved from {} to {} (Unix ms)",
            old.epoch_ms, new.epoch_ms
        ));
    }
    if (old.time_bits, old.machine_bits, old.sequence_bits)
        != (new.time_bits, new.machine_bits, new.sequence_bits)
    {
        changes.push(format!(
            "the layout changed from {}+{}+{} to {}+{}+{} bits",
            old.time_bits,
            old.machine_bits,
            old.sequence_bits,
            new.time_bits,
            new.machine_bits,
            new.sequence_bits
        ));
    }
    (!changes.is_empty()).then(|| changes.join(" and "))
}

#[cfg(test)]
mod mark_tests {
    use super::*;

    #[test]
    fn a_one_number_mark_outside_the_layout_is_refused() {
        let epoch = 1_735_689_600_000; // 2025-01-01
        let last = epoch + (1 << 41) - 1; // 41 time bits
        assert!(check_mark(&Saved::UnixMark(0), epoch, last).is_err());
        // `date +%s` instead of `date +%s%3N`.
        let seconds = Saved::UnixMark(1_764_500_000);
        assert!(check_mark(&seconds, epoch, last)
            .unwrap_err()
            .contains("seconds"));
        // `date +%s%6N`, and a run of nines.
        let micros = Saved::UnixMark(1_764_500_000_000_000);
        assert!(check_mark(&micros, epoch, last)
            .unwrap_err()
            .contains("microseconds"));
        let nines = Saved::UnixMark(999_999_999_999_999_999);
        assert!(check_mark(&nines, epoch, last).is_err());
        assert!(check_mark(&Saved::UnixMark(epoch), epoch, last).is_ok());
        assert!(check_mark(&Saved::UnixMark(1_764_500_000_000), epoch, last).is_ok());
        assert!(check_mark(&Saved::UnixMark(last), epoch, last).is_ok());
        assert!(check_mark(&Saved::UnixMark(last + 1), epoch, last).is_err());
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn only_a_restart_on_the_timeline_of_the_row_with_the_file_trusts_the_marks() {
        assert!(super::marks_are_current(Some(1), 1, true));
        // Promoted, or restored to a point in time: a later timeline.
        assert!(!super::marks_are_current(Some(1), 2, true));
        // No state file: the row may be a stale one.
        assert!(!super::marks_are_current(Some(1), 1, false));
        // A row from before 0.4.0, or none.
        assert!(!super::marks_are_current(None, 1, true));
    }

    #[test]
    fn an_untrusted_start_begins_above_the_predecessors_clock_and_lead() {
        assert_eq!(
            super::floor_above_any_predecessor(1_000_000, 5_000, 1_000),
            1_006_000
        );
        assert_eq!(
            super::floor_above_any_predecessor(i64::MAX - 1, 5, 5),
            i64::MAX
        );
    }

    use super::*;
    use crate::snowflake::layout::{Parts, DEFAULT_EPOCH_MS};

    fn main_layout() -> Layout {
        Layout::new(DEFAULT_EPOCH_MS, 41, 10, 12, 63).unwrap()
    }

    fn sample() -> HighWater {
        HighWater {
            layout: main_layout(),
            main: 123_456_789_012,
            javascript: -1,
        }
    }

    /// A fresh directory of this test's own under the system's temp dir.
    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("pg_idgen-state-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn without_a_mark_the_floor_is_above_the_last_commit_and_checkpoint_known() {
        let lead = 5_000;
        // A first start: nothing replayed, no file.
        assert_eq!(
            floor_without_a_mark(None, Some(1_764_000_000), false, lead),
            None
        );
        // A promotion or crash recovery: the later of the two.
        let commit = 1_764_000_000_500;
        assert_eq!(
            floor_without_a_mark(Some(commit), Some(1_763_999_000), true, lead),
            Some(commit + lead)
        );
        assert_eq!(
            floor_without_a_mark(Some(commit), Some(1_764_000_003), false, lead),
            Some(1_764_000_004_000 + lead)
        );
        // A standby restarted after its restartpoint replays no commit: the
        // checkpoint's time, rounded up to the next second.
        assert_eq!(
            floor_without_a_mark(None, Some(1_764_000_003), true, lead),
            Some(1_764_000_004_000 + lead)
        );
        assert_eq!(floor_without_a_mark(None, None, true, lead), None);
    }

    #[test]
    fn only_marks_above_our_own_are_kept_to_raise_the_floors() {
        let row = HighWater {
            javascript: 5_000,
            ..sample()
        };
        assert_eq!(row.above(None), row);
        assert_eq!(
            row.above(Some(&row)),
            HighWater {
                main: -1,
                javascript: -1,
                ..row
            }
        );
        let ours = HighWater {
            main: row.main - 1,
            javascript: 9_000,
            ..row
        };
        assert_eq!(
            row.above(Some(&ours)),
            HighWater {
                javascript: -1,
                ..row
            }
        );
    }

    /// (The keeper's durable write of it is tested in `pg_test/tests.rs`:
    /// it needs a server.)
    #[test]
    fn a_file_written_reads_back_and_a_missing_one_is_a_first_start() {
        let dir = temp_dir("round-trip");
        assert_eq!(read(&dir), Ok(None));
        assert!(is_missing(&dir));
        std::fs::write(dir.join(STATE_FILE), render(&sample())).unwrap();
        assert_eq!(read(&dir), Ok(Some(Saved::HighWater(sample()))));
        assert!(!is_missing(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_empty_binary_or_unreadable_file_is_an_error_not_a_first_start() {
        let dir = temp_dir("damaged");
        std::fs::write(dir.join(STATE_FILE), "").unwrap();
        assert!(matches!(read(&dir), Err(ReadError { io: false, .. })));
        std::fs::write(dir.join(STATE_FILE), [0xff, 0xfe, 0x00]).unwrap();
        assert_eq!(
            read(&dir),
            Err(ReadError {
                problem: "it is not text".into(),
                io: false
            })
        );
        std::fs::remove_file(dir.join(STATE_FILE)).unwrap();
        std::fs::create_dir(dir.join(STATE_FILE)).unwrap();
        assert!(matches!(read(&dir), Err(ReadError { io: true, .. })));
        assert!(!is_missing(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_file_round_trips() {
        let text = render(&sample());
        assert_eq!(parse(&text), Ok(Saved::HighWater(sample())));
        assert!(text.ends_with("end\n"));
    }

    #[test]
    fn the_old_one_number_format_is_still_read() {
        assert_eq!(
            parse("1750000000000\n"),
            Ok(Saved::UnixMark(1_750_000_000_000))
        );
        let (main, js) = floors(
            &Saved::UnixMark(DEFAULT_EPOCH_MS + 5000),
            &main_layout(),
            &Layout::javascript_safe(DEFAULT_EPOCH_MS),
        );
        assert_eq!((main, js), (Some(5000), Some(5000)));
    }

    #[test]
    fn anything_damaged_is_an_error_not_a_first_start() {
        let good = render(&sample());
        let cut = &good[..good.len() - 6];
        let mut damaged = vec![
            String::new(),
            "garbage".into(),
            "garbage\n".into(),
            "1750000000000".into(),
            " 1750000000000\n".into(),
            "-5\n".into(),
            cut.to_string(),
            good.replace("default 123456789012", "default 12345x"),
            good.replace("default 123456789012", "default -7"),
            good.replace("layout 41 10 12", "layout 41 10 11"),
            good.replace("state 2", "state 3"),
            good.replace("javascript -1\n", ""),
        ];
        damaged.push(format!("{good}extra\n"));
        for text in damaged {
            assert!(parse(&text).is_err(), "{text:?} was accepted");
        }
    }

    #[test]
    fn every_new_id_is_above_the_high_water_whatever_the_layout() {
        let old = main_layout();
        let issued = old.compose(Parts {
            time_ms: 10_000_000,
            machine: 1023,
            sequence: 4095,
        });
        let high = high_water_id(&old, 10_000_000);
        assert!(high >= issued);
        for (time, machine, sequence) in [(41, 10, 12), (43, 10, 10), (39, 4, 20), (50, 12, 1)] {
            for epoch in [DEFAULT_EPOCH_MS, DEFAULT_EPOCH_MS + 86_400_000, 0] {
                let new = Layout::new(epoch, time, machine, sequence, 63).unwrap();
                let floor = floor_for(&new, high).unwrap();
                // The smallest ID a generator starting above `floor` issues.
                let first = new.compose(Parts {
                    time_ms: floor + 1,
                    machine: 0,
                    sequence: 0,
                });
                assert!(first > high, "{new:?}: {first} <= {high}");
                // And the high water written from that floor never drops.
                assert!(high_water_id(&new, floor) >= high);
            }
        }
        assert_eq!(floor_for(&old, -1), None);
        assert_eq!(high_water_id(&old, -1), -1);
    }

    #[test]
    fn a_settings_change_is_named() {
        let saved = Saved::HighWater(sample());
        assert_eq!(settings_change(&saved, &main_layout()), None);
        let later = Layout::new(DEFAULT_EPOCH_MS + 1000, 43, 10, 10, 63).unwrap();
        let said = settings_change(&saved, &later).unwrap();
        assert!(said.contains("epoch moved"), "{said}");
        assert!(said.contains("41+10+12 to 43+10+10"), "{said}");
    }
}
