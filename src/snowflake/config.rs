//! The snowflake settings, read and checked once: the layout (epoch and
//! bits), the machine id (a number, from the host name, or leased) and the
//! lease keeper's settings (its timings and this server's holder name).
//! `load_config` runs in the postmaster's `_PG_init`, so a bad value stops
//! the server start with an ERROR naming the setting; every process forked
//! from the postmaster inherits the parsed value (`config()`).
//!
//! Settings that may change on reload (`snowflake_max_lead`,
//! `snowflake_max_wait`, `snowflake_persist_ahead`) are read where they are
//! used, not here.

use super::clock::now_unix_ms;
use super::layout::{
    hostname_machine_id_doubt, machine_id_from_setting, parse_epoch, Layout, LAST_FORMATTABLE_MS,
};
use super::lease::{check_holder, LeaseError, LeaseSettings};
use crate::errors::IdgenError;
use crate::gucs;
use pgrx::{pg_guard, pg_sys};

/// The settings the generators are built from, checked; computed in
/// `_PG_init` (the postmaster), so a bad value stops the server from
/// starting.
#[derive(Debug, Clone, Copy)]
pub struct SnowflakeConfig {
    pub layout: Layout,
    pub machine: i64,
    /// `pg_idgen.machine_id = 'lease'`: the machine id comes from the lease
    /// keeper (`lease_keeper.rs`).
    pub lease: bool,
    /// `pg_idgen.machine_id = 'citus'`: the machine id is the node's Citus
    /// group, which the snowflake keeper reads (`keeper.rs`, `citus.rs`).
    pub citus: bool,
    /// `pg_idgen.machine_id` was set (a number, `hostname`, `lease` or
    /// `citus`).
    /// Unset, no snowflake ID is issued: two servers that both forgot it
    /// would share machine id 0.
    pub machine_set: bool,
}

/// The settings, once `load_config` has run (in every process).
pub fn config() -> Option<&'static SnowflakeConfig> {
    CONFIG.get()
}

/// Parsed once, in the postmaster's `_PG_init`; every process forked from
/// it inherits the value.
static CONFIG: once_cell::sync::OnceCell<SnowflakeConfig> = once_cell::sync::OnceCell::new();

/// The text of a string setting (empty when unset).
pub fn setting_text(setting: &pgrx::guc::GucSetting<Option<std::ffi::CString>>) -> String {
    setting
        .get()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// This machine's host name (the one place that reads it).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
}

/// Whether `pg_idgen.machine_id` was set on this server (read at server
/// start; the setting takes effect only then).
pub fn machine_id_is_set() -> bool {
    config().is_some_and(|c| c.machine_set)
}

/// What is wrong with `pg_idgen.snowflake_epoch = text`, if anything.
fn epoch_problem(text: &str) -> Result<i64, IdgenError> {
    let Some(epoch_ms) = parse_epoch(text) else {
        return Err(IdgenError::BadSetting {
            name: "pg_idgen.snowflake_epoch",
            value: text.to_string(),
            problem: "not a UTC timestamp".into(),
            hint: "Write it as YYYY-MM-DD HH:MM:SS+00, e.g. '2025-01-01 00:00:00+00'.".into(),
        });
    };
    let now = now_unix_ms();
    if epoch_ms > now {
        return Err(IdgenError::BadSetting {
            name: "pg_idgen.snowflake_epoch",
            value: text.to_string(),
            problem: format!("it is {} ms in the future", epoch_ms - now),
            hint: "Use an epoch in the past, e.g. the default '2025-01-01 00:00:00+00' (if the server's clock is wrong, fix the clock): no ID can be issued before the epoch.".into(),
        });
    }
    Ok(epoch_ms)
}

/// Whether `pg_idgen.machine_id = text` gives the machine id at run time
/// rather than at start: `lease` or `citus`.
fn given_at_run_time(text: &str) -> bool {
    let trimmed = text.trim();
    trimmed.eq_ignore_ascii_case("lease") || trimmed.eq_ignore_ascii_case("citus")
}

/// The machine id `pg_idgen.machine_id = text` gives under `layout`
/// (`None`: unset, `lease` or `citus`), or what is wrong with it.
fn machine_problem(text: &str, layout: Option<&Layout>) -> Result<Option<i64>, IdgenError> {
    let trimmed = text.trim();
    if trimmed.is_empty() || given_at_run_time(trimmed) {
        return Ok(None);
    }
    let machine = machine_id_from_setting(trimmed, &hostname()).map_err(|problem| {
        IdgenError::BadSetting {
            name: "pg_idgen.machine_id",
            value: text.to_string(),
            problem,
            hint: "Set it to a number, to 'hostname' on hosts named like pg-3, to 'lease' to lease one from a central server, or to 'citus' for the node's Citus group.".into(),
        }
    })?;
    if let Some(layout) = layout {
        if layout.check_machine(machine).is_err() {
            return Err(IdgenError::BadSetting {
                name: "pg_idgen.machine_id",
                value: text.to_string(),
                problem: format!(
                    "{machine} does not fit in pg_idgen.snowflake_machine_bits = {}",
                    layout.machine_bits
                ),
                hint: format!("Use a machine id from 0 to {}.", layout.max_machine()),
            });
        }
    }
    Ok(Some(machine))
}

/// Refuses a value in a check hook, with the message and hint
/// `IdgenError::BadSetting` gives at server start (what `GUC_check_errmsg`
/// and `GUC_check_errhint` do in C).
fn refuse_in_check_hook(error: &IdgenError) -> bool {
    let error = error.stored();
    let message = std::ffi::CString::new(error.message).unwrap_or_default();
    let hint = std::ffi::CString::new(error.hint).unwrap_or_default();
    // SAFETY: inside a GUC check hook: PostgreSQL reads these (palloc'd in
    // the current context) when the hook returns false.
    unsafe {
        pg_sys::GUC_check_errcode(error.sqlstate);
        pg_sys::GUC_check_errmsg_string = pg_sys::pstrdup(message.as_ptr());
        pg_sys::GUC_check_errhint_string = pg_sys::pstrdup(hint.as_ptr());
    }
    false
}

/// Whether a check hook runs at the postmaster's start or reload, where
/// `load_config` checks the settings together (and a refusal would only
/// be a WARNING that drops the value).
fn in_postmaster() -> bool {
    // SAFETY: plain read of a global set at process start.
    !unsafe { pg_sys::IsUnderPostmaster }
}

/// The current layout settings, if they make a layout.
fn current_layout() -> Option<Layout> {
    let epoch_ms = parse_epoch(&setting_text(&gucs::SNOWFLAKE_EPOCH))?;
    Layout::new(
        epoch_ms,
        gucs::SNOWFLAKE_TIME_BITS.get() as u32,
        gucs::SNOWFLAKE_MACHINE_BITS.get() as u32,
        gucs::SNOWFLAKE_SEQUENCE_BITS.get() as u32,
        63,
    )
    .ok()
}

/// The body of a string setting's check hook: outside the postmaster,
/// `problem` of the text given decides; a refusal carries its message.
///
/// # Safety
/// `newval` is the hook's argument: a pointer to a NUL-terminated string
/// or to NULL.
unsafe fn check_text<T>(
    newval: *mut *mut std::ffi::c_char,
    problem: impl FnOnce(&str) -> Result<T, IdgenError>,
) -> bool {
    if in_postmaster() {
        return true;
    }
    // SAFETY: the caller's contract.
    let text = unsafe {
        match newval.as_ref().filter(|p| !p.is_null()) {
            Some(&p) => std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned(),
            None => String::new(),
        }
    };
    match problem(&text) {
        Ok(_) => true,
        Err(e) => refuse_in_check_hook(&e),
    }
}

/// Check hook of `pg_idgen.machine_id`: `SET`, `ALTER SYSTEM` and a
/// reload refuse a value the next start would refuse, with the start's
/// message (against the layout settings in effect now).
#[pg_guard]
pub unsafe extern "C-unwind" fn check_machine_id(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: the hook's own argument.
    unsafe {
        check_text(newval, |text| {
            machine_problem(text, current_layout().as_ref())
        })
    }
}

/// Check hook of `pg_idgen.snowflake_epoch`.
#[pg_guard]
pub unsafe extern "C-unwind" fn check_epoch(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: the hook's own argument.
    unsafe { check_text(newval, epoch_problem) }
}

/// Check hook of `pg_idgen.snowflake_fallback`: it cannot be turned on
/// while this server's machine id is unset (servers that forgot it would
/// fall back to the same IDs).
#[pg_guard]
pub unsafe extern "C-unwind" fn check_fallback(
    newval: *mut bool,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: the hook's own argument.
    let on = unsafe { !newval.is_null() && *newval };
    if !on || in_postmaster() || machine_id_is_set() {
        return true;
    }
    refuse_in_check_hook(&IdgenError::FallbackNeedsMachineId)
}

/// The layout the widths and the epoch make, or the start's refusal.
fn layout_problem(
    epoch_ms: i64,
    time: u32,
    machine_bits: u32,
    sequence: u32,
) -> Result<Layout, IdgenError> {
    let layout = Layout::new(epoch_ms, time, machine_bits, sequence, 63).map_err(|_| {
        IdgenError::BadSetting {
            name: "pg_idgen.snowflake_time_bits",
            value: format!("{time}"),
            problem: format!(
                "pg_idgen.snowflake_time_bits ({time}) + pg_idgen.snowflake_machine_bits ({machine_bits}) + pg_idgen.snowflake_sequence_bits ({sequence}) must add up to 63, with time and sequence at least 1"
            ),
            hint: "The default layout is 41 + 10 + 12.".into(),
        }
    })?;
    if layout.last_unix_ms() > LAST_FORMATTABLE_MS {
        return Err(IdgenError::BadSetting {
            name: "pg_idgen.snowflake_time_bits",
            value: format!("{time}"),
            problem: format!(
                "{time} bits of milliseconds from pg_idgen.snowflake_epoch reach past the year 9999, which snowflake_format() cannot write"
            ),
            hint: format!(
                "Use at most {} time bits with this epoch, and give the rest to the machine id or the sequence.",
                Layout::max_formattable_time_bits(epoch_ms)
            ),
        });
    }
    Ok(layout)
}

/// The refusal the next start would raise, if any, for the settings the
/// configuration files (and the command line) hold now — `setting(name)`,
/// `None` when unset: the checks of `load_config`. The widths and the
/// epoch change only at a start, and each is in range when set; whether
/// they make a layout together (and the machine id fits it) is a rule
/// between settings that a single `ALTER SYSTEM` cannot judge, since a
/// layout change takes several. The keeper runs this after every reload.
pub fn next_start_problem(setting: impl Fn(&str) -> Option<String>) -> Option<IdgenError> {
    let text = |name: &str| setting(name).unwrap_or_default();
    let epoch_ms = match epoch_problem(&text("pg_idgen.snowflake_epoch")) {
        Ok(epoch_ms) => epoch_ms,
        Err(e) => return Some(e),
    };
    let width = |name: &str| text(name).trim().parse::<u32>().unwrap_or(0);
    let layout = match layout_problem(
        epoch_ms,
        width("pg_idgen.snowflake_time_bits"),
        width("pg_idgen.snowflake_machine_bits"),
        width("pg_idgen.snowflake_sequence_bits"),
    ) {
        Ok(layout) => layout,
        Err(e) => return Some(e),
    };
    let machine_text = text("pg_idgen.machine_id");
    if given_at_run_time(&machine_text) {
        return None;
    }
    machine_problem(&machine_text, Some(&layout)).err()
}

/// Checks the snowflake settings; raises an ERROR (fatal at server start)
/// naming the bad setting.
pub fn load_config() {
    let epoch_ms =
        epoch_problem(&setting_text(&gucs::SNOWFLAKE_EPOCH)).unwrap_or_else(|e| e.raise());
    let (time, machine_bits, sequence) = (
        gucs::SNOWFLAKE_TIME_BITS.get() as u32,
        gucs::SNOWFLAKE_MACHINE_BITS.get() as u32,
        gucs::SNOWFLAKE_SEQUENCE_BITS.get() as u32,
    );
    let layout =
        layout_problem(epoch_ms, time, machine_bits, sequence).unwrap_or_else(|e| e.raise());
    let machine_text = setting_text(&gucs::MACHINE_ID);
    if machine_text.trim().eq_ignore_ascii_case("lease") {
        check_lease_settings();
        let _ = CONFIG.set(SnowflakeConfig {
            layout,
            machine: 0,
            lease: true,
            citus: false,
            machine_set: true,
        });
        return;
    }
    if machine_text.trim().eq_ignore_ascii_case("citus") {
        let _ = CONFIG.set(SnowflakeConfig {
            layout,
            machine: 0,
            lease: false,
            citus: true,
            machine_set: true,
        });
        return;
    }
    let machine = machine_problem(&machine_text, Some(&layout)).unwrap_or_else(|e| e.raise());
    if machine_text.trim().eq_ignore_ascii_case("hostname") {
        let in_kubernetes = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
        if let Some(doubt) = hostname_machine_id_doubt(&hostname(), in_kubernetes) {
            IdgenError::HostnameMachineIdDoubt {
                machine: machine.unwrap_or(0),
                doubt,
            }
            .warn();
        }
    }
    if machine.is_none() && gucs::SNOWFLAKE_FALLBACK.get() {
        IdgenError::FallbackNeedsMachineId.warn();
    }
    // A second call (never made) would keep the first value.
    let _ = CONFIG.set(SnowflakeConfig {
        layout,
        machine: machine.unwrap_or(0),
        lease: false,
        citus: false,
        machine_set: machine.is_some(),
    });
}

/// The lease timings, checked against each other (`lease.rs`).
pub fn lease_settings() -> Result<LeaseSettings, LeaseError> {
    LeaseSettings::new(
        i64::from(gucs::LEASE_DURATION_MS.get()),
        i64::from(gucs::LEASE_MARGIN_MS.get()),
        i64::from(gucs::SNOWFLAKE_MAX_LEAD_MS.get()),
    )
}

/// This server's name in the lease table: `pg_idgen.lease_holder`, or
/// `host:port:data directory`.
pub fn lease_holder() -> String {
    let configured = setting_text(&gucs::LEASE_HOLDER);
    if !configured.trim().is_empty() {
        return configured;
    }
    let host = hostname();
    // SAFETY: plain reads of globals set at postmaster start.
    let (port, data_dir) = unsafe {
        (
            pg_sys::PostPortNumber,
            std::ffi::CStr::from_ptr(pg_sys::DataDir)
                .to_string_lossy()
                .into_owned(),
        )
    };
    format!("{host}:{port}:{data_dir}")
}

/// Checks the lease settings at server start (raises: the start fails).
fn check_lease_settings() {
    if let Err(e) = lease_settings() {
        IdgenError::BadSetting {
            name: "pg_idgen.lease_duration",
            value: format!(
                "{} ms (margin {} ms)",
                gucs::LEASE_DURATION_MS.get(),
                gucs::LEASE_MARGIN_MS.get()
            ),
            problem: e.to_string(),
            hint: "The default is 20 s with a margin of 1 s.".into(),
        }
        .raise();
    }
    let configured = setting_text(&gucs::LEASE_HOLDER);
    if !configured.is_empty() {
        if let Err(e) = check_holder(&configured) {
            IdgenError::BadSetting {
                name: "pg_idgen.lease_holder",
                value: configured,
                problem: e.to_string(),
                hint: "Use 1 to 200 printable characters, unique among the servers.".into(),
            }
            .raise();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::next_start_problem;
    use crate::errors::IdgenError;

    /// What a start reads, the defaults but for `changed` (`name = value`
    /// lines, as postgresql.conf would have them).
    fn start_with(changed: &[(&str, &str)]) -> Option<IdgenError> {
        let defaults = [
            ("pg_idgen.snowflake_epoch", "2025-01-01 00:00:00+00"),
            ("pg_idgen.snowflake_time_bits", "41"),
            ("pg_idgen.snowflake_machine_bits", "10"),
            ("pg_idgen.snowflake_sequence_bits", "12"),
            ("pg_idgen.machine_id", "0"),
        ];
        next_start_problem(|name: &str| {
            changed
                .iter()
                .chain(defaults.iter())
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    /// Each bad setting stops the start with 22023 naming it (the server's
    /// side of it, a FATAL at start, is `test_snowflake.py`'s).
    #[test]
    fn bad_settings_refuse_the_start_naming_the_setting() {
        let cases: [(&[(&str, &str)], &str); 6] = [
            (
                &[("pg_idgen.snowflake_sequence_bits", "11")],
                "pg_idgen.snowflake_time_bits",
            ),
            (&[("pg_idgen.machine_id", "1024")], "pg_idgen.machine_id"),
            (
                &[("pg_idgen.machine_id", "db-primary")],
                "pg_idgen.machine_id",
            ),
            (
                &[("pg_idgen.snowflake_epoch", "yesterday")],
                "pg_idgen.snowflake_epoch",
            ),
            (
                &[("pg_idgen.snowflake_epoch", "2999-01-01 00:00:00+00")],
                "pg_idgen.snowflake_epoch",
            ),
            (
                &[
                    ("pg_idgen.snowflake_time_bits", "48"),
                    ("pg_idgen.snowflake_machine_bits", "3"),
                ],
                "pg_idgen.snowflake_time_bits",
            ),
        ];
        for (changed, named) in cases {
            match start_with(changed) {
                Some(IdgenError::BadSetting { name, hint, .. }) => {
                    assert_eq!(name, named, "{changed:?}");
                    assert!(!hint.is_empty(), "{changed:?}");
                }
                other => panic!("{changed:?} gave {other:?}"),
            }
        }
        assert_eq!(start_with(&[]), None);
        for runtime in ["lease", "citus", "LEASE"] {
            assert_eq!(start_with(&[("pg_idgen.machine_id", runtime)]), None);
        }
    }
}
