//! `#[pg_test]`s: SQL functions inside a real server started by
//! `cargo pgrx test` with `shared_preload_libraries = 'pg_idgen'`. Each test
//! runs in a transaction that is rolled back, so they only see what their
//! own transaction does (the refill worker commits in its own, which is
//! fine: a range it commits is never rolled back).

use pgrx::prelude::*;

#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn ids(sql: &str) -> Vec<i64> {
        Spi::connect(|client| {
            client
                .select(sql, None, &[])
                .unwrap()
                .map(|row| row.get::<i64>(1).unwrap().unwrap())
                .collect()
        })
    }

    #[pg_test]
    fn id_segment_exists_and_is_dumped() {
        let exists = Spi::get_one::<bool>("SELECT to_regclass('id_segment') IS NOT NULL").unwrap();
        assert_eq!(exists, Some(true));
        let dumped = Spi::get_one::<bool>(
            "SELECT count(*) = 1 FROM pg_extension e, unnest(e.extconfig) AS c(oid) WHERE e.extname = 'pg_idgen' AND c.oid = 'id_segment'::regclass",
        )
        .unwrap();
        assert_eq!(
            dumped,
            Some(true),
            "id_segment is registered with pg_extension_config_dump"
        );
    }

    #[pg_test]
    fn segment_create_writes_the_row_leaf_describes() {
        Spi::run("SELECT segment_create('pgtest_create', start => 500, step => 25)").unwrap();
        let row = Spi::get_three::<i64, i32, i64>(
            "SELECT max_id, step, version FROM id_segment WHERE biz_tag = 'pgtest_create'",
        )
        .unwrap();
        assert_eq!(row, (Some(499), Some(25), Some(0)));
    }

    #[pg_test(error = "segment tag \"pgtest_dup\" already exists")]
    fn segment_create_refuses_a_duplicate() {
        Spi::run("SELECT segment_create('pgtest_dup')").unwrap();
        Spi::run("SELECT segment_create('pgtest_dup')").unwrap();
    }

    #[pg_test(error = "step must be positive, got 0")]
    fn segment_create_refuses_step_zero() {
        Spi::run("SELECT segment_create('pgtest_step', step => 0)").unwrap();
    }

    #[pg_test(error = "segment tag must not be empty")]
    fn nextval_refuses_an_empty_tag() {
        Spi::run("SELECT segment_nextval('')").unwrap();
    }

    #[pg_test(error = "segment tag \"pgtest_missing\" does not exist")]
    fn nextval_of_an_unknown_tag_fails_with_a_hint() {
        Spi::run("SELECT segment_nextval('pgtest_missing')").unwrap();
    }

    #[pg_test(error = "cannot execute segment_nextval() in a read-only transaction")]
    fn nextval_refuses_read_only_transactions() {
        Spi::run("SET TRANSACTION READ ONLY").unwrap();
        Spi::run("SELECT segment_nextval('anything')").unwrap();
    }

    #[pg_test]
    fn segment_drop_removes_the_row() {
        Spi::run("SELECT segment_create('pgtest_drop')").unwrap();
        Spi::run("SELECT segment_drop('pgtest_drop')").unwrap();
        let left =
            Spi::get_one::<i64>("SELECT count(*) FROM id_segment WHERE biz_tag = 'pgtest_drop'")
                .unwrap();
        assert_eq!(left, Some(0));
    }

    #[pg_test]
    fn nextval_many_of_zero_is_empty() {
        assert!(ids("SELECT segment_nextval('whatever', 0)").is_empty());
    }

    #[pg_test]
    fn times_in_a_servers_options_are_read_by_postgres_own_parser() {
        use crate::remote_session::{
            milliseconds, problem, PINNED_OPTIONS, TIMES_AS_POSTGRES_READS_THEM,
        };
        for (value, ms) in TIMES_AS_POSTGRES_READS_THEM {
            assert_eq!(milliseconds(value), *ms, "{value:?}");
        }
        for good in [
            PINNED_OPTIONS,
            "-csynchronous_commit=remote_apply --lock-timeout=5 -c Idle_In_Transaction_Session_Timeout=2s",
            "-c synchronous_commit=on -c lock_timeout=0.01s -c idle_in_transaction_session_timeout=10000",
        ] {
            assert_eq!(problem(Some(good)), None, "{good}");
        }
        for bad in ["0", "11ms", "1s", "-5", "5parsecs", "", "0.4ms", "10MS"] {
            let options = format!(
                "-c synchronous_commit=on -c lock_timeout={bad} -c idle_in_transaction_session_timeout=5s"
            );
            let said = problem(Some(&options)).expect(bad);
            assert!(
                said.contains(&format!(
                    "sets lock_timeout={bad} in its options, but it must be between 1ms and 10ms"
                )),
                "{bad}: {said}"
            );
        }
        let idle = "-c synchronous_commit=on -c lock_timeout=10ms -c idle_in_transaction_session_timeout=1min";
        assert_eq!(
            problem(Some(idle)).as_deref(),
            Some("sets idle_in_transaction_session_timeout=1min in its options, but it must be between 1ms and 10000ms")
        );
    }
}
