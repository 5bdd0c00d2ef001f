//! What a postgres_fdw server must pin on the central server's session
//! before a shard takes ranges (`segment_attach`, every remote refill) or
//! a machine-id lease (the lease keeper, before every claim and renewal)
//! through it, read from the server's libpq `options` option (`-c
//! name=value ...`). Pure but for reading a time value, which is
//! PostgreSQL's (below).
//!
//! postgres_fdw runs the remote transaction with the central server's own
//! defaults; a worker's `SET LOCAL`s stay on the shard. So the settings
//! that make a remote refill (or a lease's write, whose ceiling a lost
//! commit would forget) safe travel in the connection:
//!
//! - `synchronous_commit` `on`, `remote_write` or `remote_apply` (not
//!   `off`, not `local`): a range is handed out only after the central
//!   server flushed its commit (and, with a synchronous standby, the
//!   standby has it), so neither a crash nor a failover of the central
//!   server can hand the same range to another shard.
//! - `lock_timeout` between 1 ms and [`MAX_LOCK_TIMEOUT_MS`]: a locked
//!   central row delays a refill no longer than a locked local row does.
//! - `idle_in_transaction_session_timeout` between 1 ms and
//!   [`MAX_IDLE_TIMEOUT_MS`]: a shard cut off mid-refill does not leave the
//!   central row locked by an orphaned session.
//!
//! [`SERVER_OPTIONS_SQL`] reads the option from the catalog, for every
//! caller alike.
//!
//! The backend splits `options` at unescaped ASCII white space (a
//! backslash escapes the next character) and reads the words as command
//! line switches with getopt, so `-ec x=y` is `-e` then `-c x=y`; the last
//! setting of a name wins. This module reads `-c name=value`,
//! `-cname=value` and `--name=value` the same way, and refuses every other
//! word (a bundled switch, a stray value), so that what it checks is what
//! the backend applies. PostgreSQL has no helper for that syntax outside
//! the backend's startup, so the words and the checks are this module's
//! own, pure, in [`problem_with`].
//!
//! A time setting's value (`10ms`, `0.01s`, `10000`) is read by
//! PostgreSQL's own parser, `parse_int` with the unit of both settings
//! (milliseconds), as `SET` reads it: [`problem`] passes it to
//! [`problem_with`], and is the one function here that needs a server
//! (its readings are checked in `pg_test/tests.rs`).

use pgrx::pg_sys;

/// The longest remote row-lock wait allowed: the local rule's.
pub const MAX_LOCK_TIMEOUT_MS: i32 = 10;

/// The longest a central session may sit idle in a transaction.
pub const MAX_IDLE_TIMEOUT_MS: i32 = 10_000;

/// The `options` option of the foreign server `s` (a `pg_foreign_server`
/// row in the caller's query), or NULL: an SQL expression.
pub const SERVER_OPTIONS_SQL: &str =
    "(SELECT o.option_value FROM pg_catalog.pg_options_to_table(s.srvoptions) o \
     WHERE o.option_name OPERATOR(pg_catalog.=) 'options')";

/// What the hint appends to a server's `options`.
pub const PINNED_OPTIONS: &str =
    "-c synchronous_commit=on -c lock_timeout=10ms -c idle_in_transaction_session_timeout=5s";

/// Why a server's `options` do not make a remote refill safe, as a user
/// reads it after "server \"x\" ...".
pub fn problem(options: Option<&str>) -> Option<String> {
    problem_with(options, milliseconds)
}

/// A time setting's value in milliseconds as PostgreSQL reads it when the
/// setting is set (`lock_timeout` and `idle_in_transaction_session_timeout`
/// are integers in milliseconds): a number, fractions rounded, optionally
/// followed by a unit; `None` for what PostgreSQL refuses.
pub(crate) fn milliseconds(value: &str) -> Option<i32> {
    let value = std::ffi::CString::new(value).ok()?;
    let mut ms = 0;
    // SAFETY: parse_int reads the NUL-terminated text and writes the int;
    // a null hint pointer is allowed. It allocates nothing and raises no
    // error, in any server process.
    let parsed = unsafe {
        pg_sys::parse_int(
            value.as_ptr(),
            &mut ms,
            pg_sys::GUC_UNIT_MS as i32,
            std::ptr::null_mut(),
        )
    };
    parsed.then_some(ms)
}

/// [`problem`], with `milliseconds` reading the value of a time setting
/// (`None`: not a time).
pub fn problem_with(
    options: Option<&str>,
    milliseconds: impl Fn(&str) -> Option<i32>,
) -> Option<String> {
    let settings = match settings(options.unwrap_or("")) {
        Ok(settings) => settings,
        Err(word) => {
            return Some(format!(
                "has \"{word}\" in its options, which is not -c name=value"
            ))
        }
    };
    let value = |name: &str| {
        settings
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    match value("synchronous_commit") {
        None => return Some("does not set synchronous_commit in its options".into()),
        Some(v) if !waits_for_flush(v) => {
            return Some(format!(
                "sets synchronous_commit={v} in its options, but it must be on, remote_write or remote_apply"
            ))
        }
        Some(_) => {}
    }
    for (name, max_ms) in [
        ("lock_timeout", MAX_LOCK_TIMEOUT_MS),
        ("idle_in_transaction_session_timeout", MAX_IDLE_TIMEOUT_MS),
    ] {
        match value(name) {
            None => return Some(format!("does not set {name} in its options")),
            Some(v) => match milliseconds(v) {
                Some(ms) if (1..=max_ms).contains(&ms) => {}
                _ => {
                    return Some(format!(
                        "sets {name}={v} in its options, but it must be between 1ms and {max_ms}ms"
                    ))
                }
            },
        }
    }
    None
}

/// The `options` value that keeps the settings the server has, less its
/// own values of the pinned ones and every word `problem` cannot read
/// (a dangling `-c`, a bundled switch), and pins those.
pub fn fixed_options(existing: Option<&str>) -> String {
    let words = split_words(existing.unwrap_or(""));
    let mut kept = Vec::new();
    let mut words = words.iter();
    while let Some(word) = words.next() {
        let (setting, taken) = if word == "-c" {
            (words.next().cloned(), 2)
        } else if let Some(rest) = word.strip_prefix("--").or_else(|| word.strip_prefix("-c")) {
            (Some(rest.to_string()), 1)
        } else {
            (None, 1)
        };
        let name = setting
            .as_deref()
            .and_then(|s| s.split_once('='))
            .map(|(name, _)| name.to_ascii_lowercase().replace('-', "_"))
            .filter(|name| !name.is_empty());
        let keep = name.is_some_and(|name| !PINNED_NAMES.contains(&name.as_str()));
        if keep {
            kept.push(escape(word));
            if taken == 2 {
                kept.extend(setting.as_deref().map(escape));
            }
        }
    }
    kept.push(PINNED_OPTIONS.to_string());
    kept.join(" ")
}

/// The settings `PINNED_OPTIONS` sets.
const PINNED_NAMES: [&str; 3] = [
    "synchronous_commit",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
];

/// A word as `options` spells it: backslashes and white space escaped.
fn escape(word: &str) -> String {
    let mut escaped = String::with_capacity(word.len());
    for c in word.chars() {
        if c == '\\' || c.is_ascii_whitespace() || c == '\u{0b}' {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The `synchronous_commit` values that flush the commit (and wait for a
/// synchronous standby, if there is one) before it returns; PostgreSQL
/// reads `true`, `yes`, `1` and their prefixes as `on`.
fn waits_for_flush(value: &str) -> bool {
    matches!(
        value.to_ascii_lowercase().as_str(),
        "on" | "true"
            | "tr"
            | "tru"
            | "t"
            | "yes"
            | "ye"
            | "y"
            | "1"
            | "remote_write"
            | "remote_apply"
    )
}

/// The `name=value` settings in an `options` string, in order; names are
/// lower-cased and `-` becomes `_`, as the backend does for `--name`. A
/// word that is not one of the three spellings is returned as the error.
fn settings(options: &str) -> Result<Vec<(String, String)>, String> {
    let words = split_words(options);
    let mut found = Vec::new();
    let mut words = words.iter();
    while let Some(word) = words.next() {
        let setting = if word == "-c" {
            words.next().map(String::as_str)
        } else if let Some(rest) = word.strip_prefix("--") {
            Some(rest)
        } else {
            word.strip_prefix("-c")
        };
        match setting.and_then(|s| s.split_once('=')) {
            Some((name, value)) if !name.is_empty() => found.push((
                name.to_ascii_lowercase().replace('-', "_"),
                value.to_string(),
            )),
            _ => return Err(word.clone()),
        }
    }
    Ok(found)
}

/// The words of `options`: split at unescaped ASCII white space (as the
/// backend's `isspace` in the C locale: no-break and other Unicode spaces
/// are part of a word), a backslash taking the next character literally.
fn split_words(options: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                word.push(next);
            }
        } else if c.is_ascii_whitespace() || c == '\u{0b}' {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// Time values and the milliseconds PostgreSQL's `parse_int` reads in
/// them (`None`: refused): the plain tests below take their times from
/// here, and `pg_test/tests.rs` checks every line against the server.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) const TIMES_AS_POSTGRES_READS_THEM: &[(&str, Option<i32>)] = &[
    ("10ms", Some(10)),
    ("5s", Some(5_000)),
    ("1s", Some(1_000)),
    ("2s", Some(2_000)),
    ("5", Some(5)),
    ("0.01s", Some(10)),
    ("10000", Some(10_000)),
    ("1000us", Some(1)),
    ("1min", Some(60_000)),
    ("1h", Some(3_600_000)),
    ("1d", Some(86_400_000)),
    ("0", Some(0)),
    ("11ms", Some(11)),
    ("-5", Some(-5)),
    ("0.4ms", Some(0)),
    ("5parsecs", None),
    ("10MS", None),
    ("", None),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The module's `problem`, with times read from
    /// `TIMES_AS_POSTGRES_READS_THEM` instead of the server's parser.
    fn problem(options: Option<&str>) -> Option<String> {
        problem_with(options, |value| {
            TIMES_AS_POSTGRES_READS_THEM
                .iter()
                .find(|(v, _)| *v == value)
                .unwrap_or_else(|| panic!("{value:?} is not in TIMES_AS_POSTGRES_READS_THEM"))
                .1
        })
    }

    #[test]
    fn the_pinned_options_pass_and_each_missing_one_is_named() {
        assert_eq!(problem(Some(PINNED_OPTIONS)), None);
        assert_eq!(
            problem(None).as_deref(),
            Some("does not set synchronous_commit in its options")
        );
        assert_eq!(
            problem(Some("-c synchronous_commit=on -c lock_timeout=10ms")).as_deref(),
            Some("does not set idle_in_transaction_session_timeout in its options")
        );
        assert_eq!(
            problem(Some(
                "-c synchronous_commit=remote_apply -c idle_in_transaction_session_timeout=1s"
            ))
            .as_deref(),
            Some("does not set lock_timeout in its options")
        );
    }

    #[test]
    fn every_spelling_the_backend_reads_is_read() {
        assert_eq!(
            problem(Some(
                "-csynchronous_commit=remote_apply --lock-timeout=5 -c Idle_In_Transaction_Session_Timeout=2s"
            )),
            None
        );
        assert_eq!(
            problem(Some("-c synchronous_commit=on -c lock_timeout=0.01s -c idle_in_transaction_session_timeout=10000")),
            None
        );
    }

    #[test]
    fn unsafe_values_are_refused_and_the_last_setting_wins() {
        let off = "-c synchronous_commit=off -c lock_timeout=10ms -c idle_in_transaction_session_timeout=5s";
        assert_eq!(
            problem(Some(off)).as_deref(),
            Some("sets synchronous_commit=off in its options, but it must be on, remote_write or remote_apply")
        );
        // `local` flushes on the central server but skips its synchronous
        // standby: a failover would lose the range.
        let local = off.replace("=off", "=local");
        assert!(problem(Some(&local))
            .unwrap()
            .contains("synchronous_commit=local"));
        for on in [
            "on",
            "ON",
            "true",
            "yes",
            "1",
            "remote_write",
            "remote_apply",
        ] {
            assert_eq!(
                problem(Some(&off.replace("=off", &format!("={on}")))),
                None,
                "{on}"
            );
        }
        assert_eq!(problem(Some(&fixed_options(Some(off)))), None);
        assert_eq!(
            problem(Some(&format!(
                "{PINNED_OPTIONS} -c synchronous_commit=false"
            )))
            .as_deref(),
            Some("sets synchronous_commit=false in its options, but it must be on, remote_write or remote_apply")
        );
        for bad in ["0", "11ms", "1s", "-5", "5parsecs", "", "0.4ms", "10MS"] {
            let options = format!("-c synchronous_commit=on -c lock_timeout={bad} -c idle_in_transaction_session_timeout=5s");
            let said = problem(Some(&options)).expect(bad);
            assert!(said.contains("lock_timeout"), "{bad}: {said}");
        }
        let idle = "-c synchronous_commit=on -c lock_timeout=10ms -c idle_in_transaction_session_timeout=1min";
        assert!(problem(Some(idle))
            .unwrap()
            .contains("between 1ms and 10000ms"));
    }

    #[test]
    fn words_the_backend_reads_otherwise_are_refused_not_guessed() {
        // A no-break space is part of a word for the backend: the setting
        // after it is a value of x.y, not synchronous_commit=on.
        let nbsp = format!(
            "-c synchronous_commit=off -c x.y=a\u{a0}-c\u{a0}synchronous_commit=on {}",
            "-c lock_timeout=10ms -c idle_in_transaction_session_timeout=5s"
        );
        assert_eq!(
            split_words(&nbsp)[3],
            "x.y=a\u{a0}-c\u{a0}synchronous_commit=on"
        );
        assert!(problem(Some(&nbsp))
            .unwrap()
            .contains("synchronous_commit=off"));
        // getopt reads -ec x=y as -e, then -c x=y.
        let bundled = format!("{PINNED_OPTIONS} -ec synchronous_commit=off");
        assert_eq!(
            problem(Some(&bundled)).as_deref(),
            Some("has \"-ec\" in its options, which is not -c name=value")
        );
        assert_eq!(fixed_options(Some(&bundled)), PINNED_OPTIONS);
        for stray in ["-c", "-c =x", "-cfoo", "--", "value"] {
            let options = format!("{PINNED_OPTIONS} {stray}");
            assert!(problem(Some(&options)).is_some(), "{stray}");
            assert_eq!(
                problem(Some(&fixed_options(Some(&options)))),
                None,
                "{stray}"
            );
        }
    }

    #[test]
    fn backslashes_escape_white_space_as_the_backend_reads_them() {
        assert_eq!(
            split_words(r"-c application_name=a\ b  -c x=\\y"),
            vec!["-c", "application_name=a b", "-c", r"x=\y"]
        );
        assert_eq!(fixed_options(Some("  ")), PINNED_OPTIONS);
        assert_eq!(fixed_options(None), PINNED_OPTIONS);
        assert_eq!(
            fixed_options(Some(
                r"-c work_mem=8MB -c synchronous_commit=off --lock-timeout=1s -capplication_name=a\ b -c"
            )),
            format!(r"-c work_mem=8MB -capplication_name=a\ b {PINNED_OPTIONS}")
        );
    }
}
