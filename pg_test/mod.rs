//! What `cargo pgrx test` asks of the crate: a `pg_test` module at its root
//! with `setup` and the server settings for the throwaway cluster it starts
//! (`shared_preload_libraries`, so shared memory and workers exist).

pub fn setup(_options: Vec<&str>) {}

#[must_use]
pub fn postgresql_conf_options() -> Vec<&'static str> {
    vec![
        "shared_preload_libraries = 'pg_idgen'",
        "pg_idgen.machine_id = 0",
        "pg_idgen.refill_timeout = '5s'",
    ]
}
