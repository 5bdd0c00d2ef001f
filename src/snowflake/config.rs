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
use pgrx::pg_sys;

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

/// Checks the snowflake settings; raises an ERROR (fatal at server start)
/// naming the bad setting.
/// Whether `pg_idgen.machine_id` was set anywhere (postgresql.conf, the
/// command line, ALTER SYSTEM) rather than left at its default 0. Read
/// from `pg_settings` once per backend, in a transaction (the setting
/// takes effect only at server start, so the answer never changes).
pub fn machine_id_set_explicitly() -> bool {
    static EXPLICIT: once_cell::sync::OnceCell<bool> = once_cell::sync::OnceCell::new();
    *EXPLICIT.get_or_init(|| {
        pgrx::Spi::get_one::<bool>(
            "SELECT source OPERATOR(pg_catalog.<>) 'default' FROM pg_catalog.pg_settings \
              WHERE name OPERATOR(pg_catalog.=) 'pg_idgen.machine_id'",
        )
        .ok()
        .flatten()
        .unwrap_or(false)
    })
}

pub fn load_config() {
    let epoch_text = setting_text(&gucs::SNOWFLAKE_EPOCH);
    let Some(epoch_ms) = parse_epoch(&epoch_text) else {
        IdgenError::BadSetting {
            name: "pg_idgen.snowflake_epoch",
            value: epoch_text,
            problem: "not a UTC timestamp".into(),
            hint: "Write it as YYYY-MM-DD HH:MM:SS+00, e.g. '2025-01-01 00:00:00+00'.".into(),
        }
        .raise()
    };
    let now = now_unix_ms();
    if epoch_ms > now {
        IdgenError::BadSetting {
            name: "pg_idgen.snowflake_epoch",
            value: epoch_text,
            problem: format!("it is {} ms in the future", epoch_ms - now),
            hint: "Use an epoch in the past, e.g. the default '2025-01-01 00:00:00+00' (if the server's clock is wrong, fix the clock): no ID can be issued before the epoch.".into(),
        }
        .raise()
    }
    let (time, machine_bits, sequence) = (
        gucs::SNOWFLAKE_TIME_BITS.get() as u32,
        gucs::SNOWFLAKE_MACHINE_BITS.get() as u32,
        gucs::SNOWFLAKE_SEQUENCE_BITS.get() as u32,
    );
    let layout = Layout::new(epoch_ms, time, machine_bits, sequence, 63).unwrap_or_else(|_| {
        IdgenError::BadSetting {
            name: "pg_idgen.snowflake_time_bits",
            value: format!("{time}"),
            problem: format!(
                "pg_idgen.snowflake_time_bits ({time}) + pg_idgen.snowflake_machine_bits ({machine_bits}) + pg_idgen.snowflake_sequence_bits ({sequence}) must add up to 63, with time and sequence at least 1"
            ),
            hint: "The default layout is 41 + 10 + 12.".into(),
        }
        .raise()
    });
    if layout.last_unix_ms() > LAST_FORMATTABLE_MS {
        IdgenError::BadSetting {
            name: "pg_idgen.snowflake_time_bits",
            value: format!("{time}"),
            problem: format!(
                "{time} bits of milliseconds from pg_idgen.snowflake_epoch reach past the year 9999, which snowflake_format() cannot write"
            ),
            hint: format!(
                "Use at most {} time bits with this epoch, and give the rest to the machine id or the sequence.",
                Layout::max_formattable_time_bits(epoch_ms)
            ),
        }
        .raise()
    }
    let machine_text = setting_text(&gucs::MACHINE_ID);
    if machine_text.trim().eq_ignore_ascii_case("lease") {
        check_lease_settings();
        let _ = CONFIG.set(SnowflakeConfig {
            layout,
            machine: 0,
            lease: true,
        });
        return;
    }
    let host = hostname();
    let machine = machine_id_from_setting(&machine_text, &host).unwrap_or_else(|problem| {
        IdgenError::BadSetting {
            name: "pg_idgen.machine_id",
            value: machine_text.clone(),
            problem,
            hint: "Set it to a number, to 'hostname' on hosts named like pg-3, or to 'lease' to lease one from a central server.".into(),
        }
        .raise()
    });
    if layout.check_machine(machine).is_err() {
        IdgenError::BadSetting {
            name: "pg_idgen.machine_id",
            value: machine_text,
            problem: format!(
                "{machine} does not fit in pg_idgen.snowflake_machine_bits = {machine_bits}"
            ),
            hint: format!("Use a machine id from 0 to {}.", layout.max_machine()),
        }
        .raise();
    }
    if machine_text.trim().eq_ignore_ascii_case("hostname") {
        let in_kubernetes = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
        if let Some(doubt) = hostname_machine_id_doubt(&host, in_kubernetes) {
            IdgenError::HostnameMachineIdDoubt { machine, doubt }.warn();
        }
    }
    // A second call (never made) would keep the first value.
    let _ = CONFIG.set(SnowflakeConfig {
        layout,
        machine,
        lease: false,
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
