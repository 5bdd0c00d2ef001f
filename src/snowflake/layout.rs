//! The bit layout of snowflake IDs and everything computed from it alone:
//! composing and taking apart IDs, the friendly text form
//! `{yyyyMMddHHmmssSSS}-{machine}-{sequence}`, and the epoch setting's
//! text. Pure: no PostgreSQL, no clock.
//!
//! An ID is `0 | ms since epoch | machine id | sequence`, most significant
//! first, in `time_bits + machine_bits + sequence_bits` bits (63 for the
//! default layout, 53 for the JavaScript-safe one).

/// Milliseconds since the Unix epoch.
pub type UnixMs = i64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub epoch_ms: UnixMs,
    pub time_bits: u32,
    pub machine_bits: u32,
    pub sequence_bits: u32,
}

/// The parts of an ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// Milliseconds since the layout's epoch.
    pub time_ms: i64,
    pub machine: i64,
    pub sequence: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// The bit widths do not add up to `total`.
    BadWidths {
        time: u32,
        machine: u32,
        sequence: u32,
        total: u32,
    },
    MachineTooLarge {
        machine: i64,
        machine_bits: u32,
    },
    /// A sequence beyond the layout's sequence bits.
    SequenceTooLarge {
        sequence: i64,
        sequence_bits: u32,
    },
    NegativeId(i64),
    /// The ID has bits set above the layout's width.
    TooWide {
        id: i64,
        bits: u32,
    },
    BeforeEpoch {
        unix_ms: UnixMs,
    },
    PastEnd {
        unix_ms: UnixMs,
        last_ms: UnixMs,
    },
    BadText(String),
}

/// The default layout's epoch, 2025-01-01 00:00:00 UTC.
pub const DEFAULT_EPOCH_MS: UnixMs = 1_735_689_600_000;

/// 9999-12-31 23:59:59.999 UTC: the last millisecond the friendly text form
/// (a four-digit year) can write. A layout whose time bits reach past it is
/// refused at start, so `snowflake_format` and `snowflake_from_format`
/// always round-trip, and every ID's time is a valid `timestamptz`.
pub const LAST_FORMATTABLE_MS: UnixMs = 253_402_300_799_999;

impl Layout {
    pub fn new(
        epoch_ms: UnixMs,
        time_bits: u32,
        machine_bits: u32,
        sequence_bits: u32,
        total: u32,
    ) -> Result<Layout, LayoutError> {
        if time_bits + machine_bits + sequence_bits != total || time_bits == 0 || sequence_bits == 0
        {
            return Err(LayoutError::BadWidths {
                time: time_bits,
                machine: machine_bits,
                sequence: sequence_bits,
                total,
            });
        }
        Ok(Layout {
            epoch_ms,
            time_bits,
            machine_bits,
            sequence_bits,
        })
    }

    /// The JavaScript-safe layout: 41-bit milliseconds, 4-bit machine id,
    /// 8-bit sequence — 53 bits, below `Number.MAX_SAFE_INTEGER`.
    pub fn javascript_safe(epoch_ms: UnixMs) -> Layout {
        Layout {
            epoch_ms,
            time_bits: 41,
            machine_bits: 4,
            sequence_bits: 8,
        }
    }

    pub fn total_bits(&self) -> u32 {
        self.time_bits + self.machine_bits + self.sequence_bits
    }

    pub fn max_sequence(&self) -> i64 {
        (1 << self.sequence_bits) - 1
    }

    pub fn max_machine(&self) -> i64 {
        (1 << self.machine_bits) - 1
    }

    pub fn max_time_ms(&self) -> i64 {
        (1i64 << self.time_bits) - 1
    }

    /// The last millisecond of the layout (Unix ms), saturating.
    pub fn last_unix_ms(&self) -> UnixMs {
        self.epoch_ms.saturating_add(self.max_time_ms())
    }

    /// The most time bits a layout from `epoch_ms` may have so that its
    /// last millisecond is not after `LAST_FORMATTABLE_MS`.
    pub fn max_formattable_time_bits(epoch_ms: UnixMs) -> u32 {
        (1..=62u32)
            .rev()
            .find(|bits| epoch_ms.saturating_add((1i64 << bits) - 1) <= LAST_FORMATTABLE_MS)
            .unwrap_or(0)
    }

    pub fn check_machine(&self, machine: i64) -> Result<(), LayoutError> {
        if machine < 0 || machine > self.max_machine() {
            return Err(LayoutError::MachineTooLarge {
                machine,
                machine_bits: self.machine_bits,
            });
        }
        Ok(())
    }

    pub fn compose(&self, parts: Parts) -> i64 {
        (parts.time_ms << (self.machine_bits + self.sequence_bits))
            | (parts.machine << self.sequence_bits)
            | parts.sequence
    }

    pub fn decompose(&self, id: i64) -> Result<Parts, LayoutError> {
        if id < 0 {
            return Err(LayoutError::NegativeId(id));
        }
        if self.total_bits() < 63 && id >> self.total_bits() != 0 {
            return Err(LayoutError::TooWide {
                id,
                bits: self.total_bits(),
            });
        }
        Ok(Parts {
            time_ms: id >> (self.machine_bits + self.sequence_bits),
            machine: (id >> self.sequence_bits) & self.max_machine(),
            sequence: id & self.max_sequence(),
        })
    }

    /// The smallest ID at `unix_ms` (machine 0, sequence 0): a bound for
    /// range scans and partitions.
    pub fn smallest_id_at(&self, unix_ms: UnixMs) -> Result<i64, LayoutError> {
        let time_ms = self.time_since_epoch(unix_ms)?;
        Ok(self.compose(Parts {
            time_ms,
            machine: 0,
            sequence: 0,
        }))
    }

    pub fn time_since_epoch(&self, unix_ms: UnixMs) -> Result<i64, LayoutError> {
        if unix_ms < self.epoch_ms {
            return Err(LayoutError::BeforeEpoch { unix_ms });
        }
        let time_ms = unix_ms.saturating_sub(self.epoch_ms);
        if time_ms > self.max_time_ms() {
            return Err(LayoutError::PastEnd {
                unix_ms,
                last_ms: self.epoch_ms + self.max_time_ms(),
            });
        }
        Ok(time_ms)
    }

    /// `20250623131730192-1-0`: UTC time to the millisecond, machine,
    /// sequence.
    pub fn format(&self, id: i64) -> Result<String, LayoutError> {
        let parts = self.decompose(id)?;
        let stamp = format_utc_compact(self.epoch_ms + parts.time_ms);
        Ok(format!("{stamp}-{}-{}", parts.machine, parts.sequence))
    }

    /// The inverse of `format`. Strict: no surrounding white space, no
    /// sign, no leading zeros in the machine id and sequence, exactly 17
    /// digits of time; so every ID has exactly one text form.
    pub fn parse_friendly(&self, text: &str) -> Result<i64, LayoutError> {
        let bad = || LayoutError::BadText(text.to_string());
        let mut fields = text.split('-');
        let (Some(stamp), Some(machine), Some(sequence), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(bad());
        };
        let unix_ms = parse_utc_compact(stamp).ok_or_else(bad)?;
        let machine: i64 = parse_canonical(machine).ok_or_else(bad)?;
        let sequence: i64 = parse_canonical(sequence).ok_or_else(bad)?;
        self.check_machine(machine)?;
        if sequence > self.max_sequence() {
            return Err(LayoutError::SequenceTooLarge {
                sequence,
                sequence_bits: self.sequence_bits,
            });
        }
        let time_ms = self.time_since_epoch(unix_ms)?;
        Ok(self.compose(Parts {
            time_ms,
            machine,
            sequence,
        }))
    }
}

/// A non-negative decimal number as `format` writes it: digits only, no
/// leading zero (except `0` itself).
fn parse_canonical(text: &str) -> Option<i64> {
    if text.len() > 1 && text.starts_with('0') {
        return None;
    }
    parse_digits(text)
}

fn parse_digits(text: &str) -> Option<i64> {
    if text.is_empty() || text.len() > 18 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of `days_from_civil`.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    days_from_civil(
        if month == 12 { year + 1 } else { year },
        if month == 12 { 1 } else { month + 1 },
        1,
    ) - days_from_civil(year, month, 1)
}

fn unix_ms_of(
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    milli: i64,
) -> Option<UnixMs> {
    let valid = (1..=9999).contains(&year)
        && (1..=12).contains(&month)
        && day >= 1
        && day <= days_in_month(year, month)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0..60).contains(&second)
        && (0..1000).contains(&milli);
    valid.then(|| {
        (((days_from_civil(year, month, day) * 24 + hour) * 60 + minute) * 60 + second) * 1000
            + milli
    })
}

fn format_utc_compact(unix_ms: UnixMs) -> String {
    let (days, ms_of_day) = (
        unix_ms.div_euclid(86_400_000),
        unix_ms.rem_euclid(86_400_000),
    );
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60);
    let (second, milli) = (ms_of_day / 1000 % 60, ms_of_day % 1000);
    format!("{year:04}{month:02}{day:02}{hour:02}{minute:02}{second:02}{milli:03}")
}

fn parse_utc_compact(stamp: &str) -> Option<UnixMs> {
    if stamp.len() != 17 || !stamp.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |from: usize, to: usize| stamp[from..to].parse::<i64>().ok();
    unix_ms_of(
        field(0, 4)?,
        field(4, 6)?,
        field(6, 8)?,
        field(8, 10)?,
        field(10, 12)?,
        field(12, 14)?,
        field(14, 17)?,
    )
}

/// Parses the epoch setting: `YYYY-MM-DD`, optionally followed by
/// ` HH:MM[:SS[.fff]]` and a UTC marker (`+00`, `+00:00`, `Z` or `UTC`).
/// Only UTC is accepted, so the epoch never depends on the server's time
/// zone.
pub fn parse_epoch(text: &str) -> Option<UnixMs> {
    let text = text.trim();
    let text = ["+00:00", "+00", "Z", " UTC", "UTC"]
        .iter()
        .find_map(|suffix| text.strip_suffix(suffix))
        .unwrap_or(text)
        .trim();
    let (date, time) = match text.split_once([' ', 'T']) {
        Some((date, time)) => (date, time.trim()),
        None => (text, "00:00:00"),
    };
    let mut date_fields = date.split('-');
    let (Some(year), Some(month), Some(day), None) = (
        date_fields.next(),
        date_fields.next(),
        date_fields.next(),
        date_fields.next(),
    ) else {
        return None;
    };
    let (clock, milli) = match time.split_once('.') {
        Some((clock, fraction)) if !fraction.is_empty() && fraction.len() <= 3 => {
            (clock, format!("{fraction:0<3}").parse::<i64>().ok()?)
        }
        Some(_) => return None,
        None => (time, 0),
    };
    let mut clock_fields = clock.split(':');
    let hour = clock_fields.next()?;
    let minute = clock_fields.next()?;
    let second = clock_fields.next().unwrap_or("0");
    if clock_fields.next().is_some() {
        return None;
    }
    let number = |s: &str| parse_digits(s);
    unix_ms_of(
        number(year)?,
        number(month)?,
        number(day)?,
        number(hour)?,
        number(minute)?,
        number(second)?,
        milli,
    )
}

/// Resolves the `pg_idgen.machine_id` setting: a number, or `hostname` for
/// the trailing number of `hostname` (a StatefulSet pod `pg-3` is 3).
pub fn machine_id_from_setting(setting: &str, hostname: &str) -> Result<i64, String> {
    let setting = setting.trim();
    if setting.eq_ignore_ascii_case("hostname") {
        let digits: String = hostname
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let digits: String = digits.chars().rev().collect();
        return parse_digits(&digits)
            .ok_or_else(|| format!("the host name \"{hostname}\" does not end in a number"));
    }
    parse_digits(setting)
        .ok_or_else(|| format!("\"{setting}\" is neither a non-negative integer nor 'hostname'"))
}

/// Whether a host name looks like a pod of a Kubernetes StatefulSet,
/// `<name>-<ordinal>`: the only naming where `hostname` gives each server
/// its own machine id. Returns why not, if it does not. Names such as
/// `ip-10-0-9-17` (numbers taken from an address) or two StatefulSets
/// (`orders-db-0`, `users-db-0`) share trailing numbers with other hosts.
pub fn hostname_machine_id_doubt(hostname: &str, in_kubernetes: bool) -> Option<String> {
    if !in_kubernetes {
        return Some(format!(
            "\"{hostname}\" is not a Kubernetes pod (KUBERNETES_SERVICE_HOST is not set); only the pods of one StatefulSet are sure to end in distinct numbers"
        ));
    }
    let Some((name, ordinal)) = hostname.rsplit_once('-') else {
        return Some(format!(
            "\"{hostname}\" is not named like a StatefulSet pod (<name>-<ordinal>)"
        ));
    };
    if parse_canonical(ordinal).is_none() || name.is_empty() {
        return Some(format!(
            "\"{hostname}\" is not named like a StatefulSet pod (<name>-<ordinal>)"
        ));
    }
    if name.split('-').any(|part| parse_digits(part).is_some()) {
        return Some(format!(
            "\"{hostname}\" holds other numbers besides its trailing one, as names made from addresses do"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_layout() -> Layout {
        Layout::new(DEFAULT_EPOCH_MS, 41, 10, 12, 63).unwrap()
    }

    #[test]
    fn the_default_epoch_is_2025_01_01_utc() {
        assert_eq!(
            parse_epoch("2025-01-01 00:00:00+00"),
            Some(DEFAULT_EPOCH_MS)
        );
        assert_eq!(parse_epoch("2025-01-01"), Some(DEFAULT_EPOCH_MS));
        assert_eq!(parse_epoch("2025-01-01T00:00Z"), Some(DEFAULT_EPOCH_MS));
        assert_eq!(parse_epoch("1970-01-01 00:00:00.5 UTC"), Some(500));
        assert_eq!(parse_epoch("2024-02-29 12:00:00"), Some(1_709_208_000_000));
    }

    #[test]
    fn the_epoch_refuses_what_it_cannot_read_exactly() {
        for bad in [
            "",
            "2025",
            "2025-13-01",
            "2023-02-29",
            "2025-01-01 24:00",
            "2025-01-01 00:00:00+08",
            "yesterday",
            "2025-01-01 00:00:00.1234",
        ] {
            assert_eq!(parse_epoch(bad), None, "{bad}");
        }
    }

    #[test]
    fn civil_dates_round_trip_over_ten_thousand_years() {
        for days in (-719_162..2_932_896).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn widths_must_add_up() {
        assert_eq!(
            Layout::new(0, 41, 10, 11, 63),
            Err(LayoutError::BadWidths {
                time: 41,
                machine: 10,
                sequence: 11,
                total: 63
            })
        );
        assert!(Layout::new(0, 0, 51, 12, 63).is_err());
        assert!(Layout::new(0, 39, 0, 24, 63).is_ok());
        assert_eq!(Layout::javascript_safe(0).total_bits(), 53);
    }

    #[test]
    fn compose_and_decompose_are_inverse_over_the_whole_range() {
        let layout = default_layout();
        let corners = [0, 1, layout.max_time_ms() / 2, layout.max_time_ms()];
        for time_ms in corners {
            for machine in [0, 1, 512, 1023] {
                for sequence in [0, 1, 2048, 4095] {
                    let parts = Parts {
                        time_ms,
                        machine,
                        sequence,
                    };
                    let id = layout.compose(parts);
                    assert!(id >= 0);
                    assert_eq!(layout.decompose(id), Ok(parts));
                }
            }
        }
        assert_eq!(
            layout.compose(Parts {
                time_ms: layout.max_time_ms(),
                machine: 1023,
                sequence: 4095
            }),
            i64::MAX
        );
    }

    #[test]
    fn javascript_safe_ids_stay_below_2_to_the_53() {
        let layout = Layout::javascript_safe(DEFAULT_EPOCH_MS);
        let largest = layout.compose(Parts {
            time_ms: layout.max_time_ms(),
            machine: 15,
            sequence: 255,
        });
        assert_eq!(largest, (1 << 53) - 1);
        assert_eq!(
            layout.decompose(1 << 53),
            Err(LayoutError::TooWide {
                id: 1 << 53,
                bits: 53
            })
        );
    }

    #[test]
    fn friendly_text_round_trips_over_the_whole_range() {
        let layout = default_layout();
        assert_eq!(
            layout
                .format(layout.compose(Parts {
                    time_ms: 0,
                    machine: 1,
                    sequence: 0
                }))
                .unwrap(),
            "20250101000000000-1-0"
        );
        let mut time_ms = 0;
        while time_ms <= layout.max_time_ms() {
            for (machine, sequence) in [(0, 0), (1023, 4095), (7, 42)] {
                let id = layout.compose(Parts {
                    time_ms,
                    machine,
                    sequence,
                });
                let text = layout.format(id).unwrap();
                assert_eq!(layout.parse_friendly(&text), Ok(id), "{text}");
            }
            time_ms += 123_456_789_013;
        }
        let last = layout.compose(Parts {
            time_ms: layout.max_time_ms(),
            machine: 1023,
            sequence: 4095,
        });
        assert_eq!(
            layout.parse_friendly(&layout.format(last).unwrap()),
            Ok(last)
        );
    }

    #[test]
    fn friendly_text_refuses_malformed_input() {
        let layout = default_layout();
        for bad in [
            "",
            "20250101000000000-1",
            "20250101000000000-1-0-0",
            "2025010100000000-1-0",
            "20251301000000000-1-0",
            "20250101000000000-1024-0",
            "20250101000000000-1-4096",
            "20250101000000000-a-0",
            "20250101000000000--1-0",
        ] {
            assert!(layout.parse_friendly(bad).is_err(), "{bad}");
        }
        assert_eq!(
            layout.parse_friendly("20241231235959999-0-0"),
            Err(LayoutError::BeforeEpoch {
                unix_ms: DEFAULT_EPOCH_MS - 1
            })
        );
    }

    #[test]
    fn smallest_id_at_a_time_bounds_the_ids_of_that_millisecond() {
        let layout = default_layout();
        let at = DEFAULT_EPOCH_MS + 86_400_000;
        let low = layout.smallest_id_at(at).unwrap();
        let next = layout.smallest_id_at(at + 1).unwrap();
        let inside = layout.compose(Parts {
            time_ms: 86_400_000,
            machine: 1023,
            sequence: 4095,
        });
        assert!(low <= inside && inside < next);
        assert!(matches!(
            layout.smallest_id_at(DEFAULT_EPOCH_MS - 1),
            Err(LayoutError::BeforeEpoch { .. })
        ));
        assert!(matches!(
            layout.smallest_id_at(DEFAULT_EPOCH_MS + layout.max_time_ms() + 1),
            Err(LayoutError::PastEnd { .. })
        ));
    }

    #[test]
    fn machine_ids_come_from_a_number_or_the_host_name() {
        assert_eq!(machine_id_from_setting("7", "db"), Ok(7));
        assert_eq!(machine_id_from_setting(" 0 ", "db"), Ok(0));
        assert_eq!(machine_id_from_setting("hostname", "pg-3"), Ok(3));
        assert_eq!(machine_id_from_setting("HOSTNAME", "orders-db-12"), Ok(12));
        assert!(machine_id_from_setting("hostname", "db")
            .unwrap_err()
            .contains("does not end in a number"));
        assert!(machine_id_from_setting("-1", "db").is_err());
        assert!(machine_id_from_setting("x", "db").is_err());
    }

    #[test]
    fn friendly_text_is_strict_and_names_out_of_range_fields() {
        let layout = default_layout();
        for loose in [
            " 20250101000000000-1-0",
            "20250101000000000-1-0 ",
            "20250101000000000-01-0",
            "20250101000000000-1-00",
            "20250101000000000-+1-0",
        ] {
            assert_eq!(
                layout.parse_friendly(loose),
                Err(LayoutError::BadText(loose.into())),
                "{loose:?}"
            );
        }
        assert_eq!(
            layout.parse_friendly("20250101000000000-1024-0"),
            Err(LayoutError::MachineTooLarge {
                machine: 1024,
                machine_bits: 10
            })
        );
        assert_eq!(
            layout.parse_friendly("20250101000000000-0-4096"),
            Err(LayoutError::SequenceTooLarge {
                sequence: 4096,
                sequence_bits: 12
            })
        );
        assert!(layout.parse_friendly("20250101000000000-0-0").is_ok());
    }

    #[test]
    fn layouts_reaching_past_the_year_9999_are_known() {
        assert_eq!(Layout::max_formattable_time_bits(DEFAULT_EPOCH_MS), 47);
        let wide = Layout::new(DEFAULT_EPOCH_MS, 48, 3, 12, 63).unwrap();
        assert!(wide.last_unix_ms() > LAST_FORMATTABLE_MS);
        let ok = Layout::new(DEFAULT_EPOCH_MS, 47, 4, 12, 63).unwrap();
        assert!(ok.last_unix_ms() <= LAST_FORMATTABLE_MS);
        // Every ID of the widest allowed layout formats and parses back.
        let last = ok.compose(Parts {
            time_ms: ok.max_time_ms(),
            machine: 15,
            sequence: 4095,
        });
        assert_eq!(ok.parse_friendly(&ok.format(last).unwrap()), Ok(last));
        assert_eq!(format_utc_compact(LAST_FORMATTABLE_MS), "99991231235959999");
    }

    #[test]
    fn the_host_name_suits_machine_ids_only_in_one_statefulset() {
        assert_eq!(hostname_machine_id_doubt("orders-db-3", true), None);
        assert_eq!(hostname_machine_id_doubt("pg-0", true), None);
        for (host, k8s) in [
            ("pg-3", false),
            ("ip-10-0-9-17", true),
            ("ip-172-31-5-17", true),
            ("db17", true),
            ("pg-03", true),
            ("-3", true),
        ] {
            assert!(
                hostname_machine_id_doubt(host, k8s).is_some(),
                "{host} {k8s}"
            );
        }
    }

    #[test]
    fn negative_ids_are_refused() {
        assert_eq!(
            default_layout().decompose(-1),
            Err(LayoutError::NegativeId(-1))
        );
    }
}
