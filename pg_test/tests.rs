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

    /// The tags `tag_uses` reads in a table's column default `default`.
    fn tags_in_default(default: &str) -> Vec<String> {
        Spi::run(&format!(
            "CREATE TABLE pgtest_uses (id bigint DEFAULT {default})"
        ))
        .unwrap();
        let oid = |sql: &str| Spi::get_one::<pg_sys::Oid>(sql).unwrap().unwrap().to_u32();
        let table = oid("SELECT 'id_segment'::regclass::oid");
        let relid = oid("SELECT 'pgtest_uses'::regclass::oid");
        let uses = crate::segment::default_check::tag_uses(table, Some(&[relid]));
        Spi::run("DROP TABLE pgtest_uses").unwrap();
        uses.into_iter().map(|u| u.tag).collect()
    }

    #[pg_test]
    fn a_default_s_tag_is_read_from_its_stored_expression_tree() {
        let schema = Spi::get_one::<String>(
            "SELECT quote_ident(extnamespace::regnamespace::text) FROM pg_extension WHERE extname = 'pg_idgen'",
        )
        .unwrap()
        .unwrap();
        for (default, tag) in [
            ("segment_nextval('o''brien')", "o'brien"),
            ("segment_nextval('x'::text)", "x"),
            ("segment_nextval('x'::varchar)", "x"),
            ("segment_nextval('x' COLLATE \"C\")", "x"),
            (
                "segment_nextval(('x'::varchar)::text COLLATE \"POSIX\")",
                "x",
            ),
            ("segment_nextval(tag => 'x')", "x"),
            (&format!("{schema}.segment_nextval('x')"), "x"),
            (r"segment_nextval(E'a\\b')", r"a\b"),
            ("segment_nextval('日本')", "日本"),
            // The text the call receives: bpchar's cast to text trims, a
            // length cuts, a number is printed.
            ("segment_nextval('x '::bpchar)", "x"),
            ("segment_nextval('x'::name)", "x"),
            ("segment_nextval('abcdef'::varchar(3))", "abc"),
            ("segment_nextval(5::text)", "5"),
        ] {
            assert_eq!(tags_in_default(default), [tag], "{default}");
        }
        assert_eq!(
            tags_in_default("segment_nextval('a') + segment_nextval('b')"),
            ["a", "b"]
        );
    }

    #[pg_test]
    fn a_default_without_a_constant_tag_of_the_extension_is_not_a_use() {
        Spi::run("CREATE SCHEMA pgtest_other").unwrap();
        Spi::run(
            "CREATE FUNCTION pgtest_other.segment_nextval(tag text) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'",
        )
        .unwrap();
        for default in [
            "segment_nextval(current_setting('app.tag'))",
            "segment_nextval('a' || 'b')",
            "segment_nextval(NULL)",
            "segment_nextval(now()::text)",
            // timestamptz's output depends on DateStyle: not folded.
            "segment_nextval('2025-01-01'::timestamptz::text)",
            "pgtest_other.segment_nextval('x')",
        ] {
            assert!(tags_in_default(default).is_empty(), "{default}");
        }
    }

    #[pg_test]
    fn a_domain_s_default_is_a_use() {
        Spi::run("CREATE DOMAIN pgtest_id AS bigint DEFAULT segment_nextval('pgtest_dom')")
            .unwrap();
        let table = Spi::get_one::<pg_sys::Oid>("SELECT 'id_segment'::regclass::oid")
            .unwrap()
            .unwrap()
            .to_u32();
        let uses: Vec<_> = crate::segment::default_check::tag_uses(table, None)
            .into_iter()
            .filter(|u| u.tag == "pgtest_dom")
            .map(|u| u.user.describe())
            .collect();
        assert_eq!(uses, ["the default of domain pgtest_id"]);
    }

    #[pg_test]
    fn the_state_file_is_renamed_into_place_by_durable_rename_and_a_failure_is_returned() {
        use crate::snowflake::keeper::write_durably;
        use crate::snowflake::layout::{Layout, DEFAULT_EPOCH_MS};
        use crate::snowflake::state_file::{
            read, render, HighWater, Saved, STATE_FILE, STATE_FILE_TMP,
        };
        let dir =
            std::env::temp_dir().join(format!("pg_idgen-pgtest-state-file-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let first = HighWater {
            layout: Layout::new(DEFAULT_EPOCH_MS, 41, 10, 12, 63).unwrap(),
            main: 42,
            javascript: -1,
        };
        write_durably(&dir, &render(&first)).unwrap();
        assert_eq!(read(&dir), Ok(Some(Saved::HighWater(first))));
        assert!(!dir.join(STATE_FILE_TMP).exists());
        let later = HighWater {
            main: 4242,
            ..first
        };
        write_durably(&dir, &render(&later)).unwrap();
        assert_eq!(read(&dir), Ok(Some(Saved::HighWater(later))));
        // durable_rename cannot open the old file to fsync it: its ERROR
        // comes back as the error, and this transaction goes on.
        std::fs::remove_file(dir.join(STATE_FILE)).unwrap();
        std::fs::create_dir(dir.join(STATE_FILE)).unwrap();
        let failed = write_durably(&dir, &render(&first))
            .unwrap_err()
            .to_string();
        assert!(
            failed.contains("could not open file") && failed.contains("Is a directory"),
            "{failed}"
        );
        assert_eq!(Spi::get_one::<i32>("SELECT 1"), Ok(Some(1)));
        // The temporary file cannot be written: its OS error is kept.
        std::fs::remove_dir(dir.join(STATE_FILE)).unwrap();
        std::fs::remove_file(dir.join(STATE_FILE_TMP)).unwrap();
        std::fs::create_dir(dir.join(STATE_FILE_TMP)).unwrap();
        let failed = write_durably(&dir, &render(&first)).unwrap_err();
        assert_eq!(failed.raw_os_error(), Some(libc::EISDIR));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[pg_test]
    fn pg_idgen_s_locks_are_the_locks_of_its_named_tranche() {
        use crate::shmem::{lock, Lock, LOCKS};
        // SAFETY: the library is preloaded in this server; the locks are
        // only looked at, and the registry's taken through its own API.
        unsafe {
            let locks = LOCKS.map(|which| lock(which));
            for (which, &l) in LOCKS.iter().zip(&locks) {
                let name = std::ffi::CStr::from_ptr(pg_sys::GetLWLockIdentifier(
                    pg_sys::PG_WAIT_LWLOCK,
                    (*l).tranche,
                ));
                assert_eq!(name, c"pg_idgen", "{which:?}");
                assert!(!pg_sys::LWLockHeldByMe(l), "{which:?}");
            }
            assert_ne!(locks[0], locks[1]);
            // pg_idgen's is the only named tranche of this server, and
            // lwlock.c lays out its table of named tranches right after
            // their locks: a lock used but not requested would lie there.
            let end = (lock(LOCKS[LOCKS.len() - 1]) as *mut pg_sys::LWLockPadded).add(1);
            assert!(end as usize <= pg_sys::NamedLWLockTrancheArray as usize);
            let registry = crate::segment::registry::registry().unwrap();
            let held = registry.lock(true);
            assert!(pg_sys::LWLockHeldByMe(lock(Lock::Registry)));
            assert!(!pg_sys::LWLockHeldByMe(lock(Lock::Layout)));
            drop(held);
        }
    }
}
