"""No role gains anything through pg_idgen: the attacks of issue 34, each on
a real server, as the roles a deployment has — the bootstrap superuser, an
application role with the grants the docs give it, and an attacker with
LOGIN plus CREATE on a schema or on the database.

A trap records every call of the attacker's function (the role it ran as,
and whether it could make the attacker a superuser); each test asserts the
trap stayed empty, or recorded only the role it should, after the worker
it aims at had its chance (a lease renewal, a refill, a new mark)."""

import time

import psycopg
import pytest
from psycopg import errors

from helpers import PINNED, session, wait_for
from test_lease import CLOCK_VIEW, LEASE_CONF, LEASE_DDL, central_server, lease_of, server_db

ATTACKER = "mallory"

# The attacker's function: records who runs it, then tries to make the
# attacker a superuser (which only a superuser's call can).
TRAP = f"""
CREATE TABLE public.trap_log (ran_as text, session_as text, promoted boolean);
GRANT INSERT, SELECT ON public.trap_log TO PUBLIC;
CREATE FUNCTION public.trap() RETURNS int8 LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        EXECUTE 'ALTER ROLE {ATTACKER} SUPERUSER';
        INSERT INTO public.trap_log VALUES (current_user, session_user, true);
    EXCEPTION WHEN OTHERS THEN
        INSERT INTO public.trap_log VALUES (current_user, session_user, false);
    END;
    RETURN (extract(epoch FROM clock_timestamp()) * 1000)::int8;
END $$;
"""


def attacker_connection(server, dbname="postgres"):
    return psycopg.connect(host=server.dir, port=server.port, user=ATTACKER, dbname=dbname,
                           autocommit=True)


def make_attacker(server, *grants, dbname="postgres"):
    server.sql(f"CREATE ROLE {ATTACKER} LOGIN")
    for grant in grants:
        server.sql(grant.format(role=ATTACKER), dbname=dbname)


def trapped(server, dbname="postgres"):
    return server.sql("SELECT ran_as, session_as, promoted FROM public.trap_log", dbname=dbname)


def is_superuser(server, role):
    return server.sql("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,))[0][0]


def lease_problem(server):
    return lease_of(server)[3] or ""


def test_the_lease_keeper_never_touches_a_table_or_view_a_role_planted_before_set_up(make_cluster):
    """Finding 1, first form: the lease tables do not exist yet; a role with
    CREATE on public makes its own, a table and a view over a function that
    tries to make it a superuser. The keeper refuses both (not foreign
    tables) and never reads them."""
    server = make_cluster(conf=(*LEASE_CONF, "log_error_verbosity = verbose"))
    server.start()
    server.sql("CREATE EXTENSION pg_idgen")
    make_attacker(server, "GRANT CREATE ON SCHEMA public TO {role}")
    with attacker_connection(server) as conn:
        conn.execute(TRAP)
        conn.execute(LEASE_DDL.replace("CREATE TABLE idgen_machine_lease", "CREATE TABLE public.idgen_machine_lease"))
        conn.execute("CREATE VIEW public.idgen_lease_clock AS SELECT public.trap() AS unix_ms")
        # A trap in the table too: a trigger on any write.
        conn.execute("CREATE FUNCTION public.trap_trigger() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$ BEGIN PERFORM public.trap(); RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER t BEFORE INSERT OR UPDATE ON public.idgen_machine_lease "
                     "FOR EACH ROW EXECUTE FUNCTION public.trap_trigger()")
    server_db(server)
    assert wait_for(lambda: "not a foreign table" in lease_problem(server), timeout=30), lease_of(server)
    problem = lease_problem(server)
    assert "public.idgen_machine_lease" in problem and f'"{ATTACKER}"' in problem, problem
    # The keeper looks again every second while it has no lease: give it
    # a few more passes (a check that can only pass falsely when slow).
    time.sleep(3)
    assert trapped(server) == []
    assert not is_superuser(server, ATTACKER)
    assert server.sql("SELECT count(*) FROM public.idgen_machine_lease") == [(0,)]
    assert lease_of(server)[0] is None, "the keeper leased a machine id from the attacker's table"
    # Told once, as a WARNING with its SQLSTATE (log_error_verbosity =
    # verbose prints it), not at every pass.
    warnings = [line for line in server.log().splitlines() if "not a foreign table" in line]
    assert len(warnings) == 1 and "WARNING:  42809:" in warnings[0], warnings


def test_a_foreign_table_a_role_without_trust_owns_is_refused(make_cluster):
    """A role allowed to use a foreign server makes the foreign tables
    itself: owned by neither a superuser nor the extension's owner, they
    are refused (42501), never read as that role or any other."""
    central = central_server(make_cluster)
    server = make_cluster(conf=LEASE_CONF)
    server.start()
    server.sql("CREATE EXTENSION pg_idgen")
    make_attacker(server, "GRANT CREATE ON SCHEMA public TO {role}")
    for statement in [
        "CREATE EXTENSION postgres_fdw",
        f"CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{central.dir}', "
        f"port '{central.port}', dbname 'postgres', options '{PINNED}')",
        f"GRANT USAGE ON FOREIGN SERVER central TO {ATTACKER}",
        f"CREATE USER MAPPING FOR {ATTACKER} SERVER central OPTIONS (user 'postgres')",
        "CREATE USER MAPPING FOR postgres SERVER central OPTIONS (user 'postgres')",
    ]:
        server.sql(statement)
    with attacker_connection(server) as conn:
        conn.execute("CREATE FOREIGN TABLE public.idgen_machine_lease (machine_id int4 NOT NULL, holder text, "
                     "version int8 NOT NULL, lease_ms int8 NOT NULL, floor_unix_ms int8, layout text, "
                     "lease_until timestamptz) SERVER central OPTIONS (table_name 'idgen_machine_lease')")
        conn.execute("CREATE FOREIGN TABLE public.idgen_lease_clock (unix_ms int8) SERVER central "
                     "OPTIONS (table_name 'idgen_lease_clock')")
    server_db(server)
    assert wait_for(lambda: "neither a superuser nor the owner of pg_idgen" in lease_problem(server),
                    timeout=30), lease_of(server)
    assert central.sql("SELECT count(*) FROM idgen_machine_lease") == [(0,)], \
        "the keeper wrote through a table the attacker owns"
    # The fix the hint names, by a superuser: the same tables now serve.
    server.sql("ALTER FOREIGN TABLE public.idgen_machine_lease OWNER TO CURRENT_USER")
    server.sql("ALTER FOREIGN TABLE public.idgen_lease_clock OWNER TO CURRENT_USER")
    assert wait_for(lambda: lease_of(server)[0] is not None, timeout=60), lease_of(server)


def test_a_schema_named_after_the_superuser_does_not_redirect_the_lease_keeper(make_cluster):
    """Finding 1, second form: after a correct set-up, the owner of the
    lease database (CREATE on the database) makes a schema named after the
    bootstrap superuser — first on the default search path — with its own
    table and a view over the trap. The keeper keeps renewing through the
    central table and never runs the trap."""
    central = central_server(make_cluster)
    from test_lease import start_leased
    server = make_cluster(conf=LEASE_CONF)
    start_leased(server, central)
    server_db(server)
    assert wait_for(lambda: lease_of(server)[0] is not None, timeout=60), lease_of(server)
    machine = lease_of(server)[0]
    make_attacker(server, "GRANT CREATE ON DATABASE postgres TO {role}")
    with attacker_connection(server) as conn:
        conn.execute("CREATE SCHEMA postgres")
        conn.execute(TRAP.replace("public.", "postgres."))
        conn.execute(LEASE_DDL.replace("CREATE TABLE idgen_machine_lease", "CREATE TABLE postgres.idgen_machine_lease"))
        conn.execute("CREATE VIEW postgres.idgen_lease_clock AS SELECT postgres.trap() AS unix_ms")
    version = lambda: central.sql(  # noqa: E731
        "SELECT version FROM idgen_machine_lease WHERE machine_id = %s", (machine,))[0][0]
    seen = version()
    # Three renewals (every second with a 3 s lease) after the schema.
    assert wait_for(lambda: version() >= seen + 3, timeout=30), (version(), lease_of(server))
    assert server.sql("SELECT ran_as, promoted FROM postgres.trap_log") == []
    assert not is_superuser(server, ATTACKER)
    assert server.sql("SELECT count(*) FROM postgres.idgen_machine_lease") == [(0,)]
    assert lease_of(server)[0] == machine


def test_a_lease_table_setting_without_a_schema_is_refused(make_cluster):
    central = central_server(make_cluster)
    from test_lease import start_leased
    server = make_cluster(conf=(*LEASE_CONF, "pg_idgen.lease_table = 'idgen_machine_lease'"))
    start_leased(server, central)
    server_db(server)
    assert wait_for(lambda: "not a schema-qualified name" in lease_problem(server), timeout=30), \
        lease_of(server)
    assert "'public.idgen_machine_lease'" in lease_problem(server)
    assert central.sql("SELECT count(*) FROM idgen_machine_lease") == [(0,)]


def test_the_snowflake_keeper_writes_its_mark_as_the_tables_owner(make_cluster):
    """Finding 5: the keeper's commits of snowflake_high_water run as the
    table's owner, in a security-restricted operation, with the pinned
    search path — a trigger on the table sees that role, not the bootstrap
    superuser, and cannot change roles."""
    server = make_cluster()
    server.start()
    server.sql("CREATE EXTENSION pg_idgen")
    server.sql("CREATE ROLE mark_owner")
    server.sql("CREATE TABLE public.mark_log (ran_as text, path text, could_set_role boolean)")
    server.sql("GRANT INSERT ON public.mark_log TO mark_owner")
    server.sql("""CREATE FUNCTION public.mark_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE could boolean := true;
        BEGIN
            BEGIN
                SET LOCAL ROLE postgres;
            EXCEPTION WHEN OTHERS THEN could := false;
            END;
            INSERT INTO public.mark_log VALUES (current_user, current_setting('search_path'), could);
            RETURN NEW;
        END $$""")
    server.sql("ALTER TABLE snowflake_high_water OWNER TO mark_owner")
    server.sql("CREATE TRIGGER spy BEFORE INSERT OR UPDATE ON snowflake_high_water "
               "FOR EACH ROW EXECUTE FUNCTION public.mark_trigger()")
    server.sql("GRANT EXECUTE ON FUNCTION snowflake_nextval() TO postgres")
    with server.connect() as conn:
        conn.execute("SELECT snowflake_nextval() FROM generate_series(1, 10000)").fetchall()
    assert wait_for(lambda: server.sql("SELECT count(*) FROM public.mark_log")[0][0] > 0, timeout=30)
    rows = set(server.sql("SELECT ran_as, path, could_set_role FROM public.mark_log"))
    assert rows == {("mark_owner", "pg_catalog, pg_temp", False)}, rows


def test_no_role_can_make_tag_ddl_wait_with_an_advisory_lock(lc):
    """Finding 3: the key the tag lock used to be (id_segment's OID and
    hashtext(tag)) is an advisory lock any LOGIN role can take. Holding it
    now delays nothing."""
    db = lc.new_database()
    lc.sql(f"DROP ROLE IF EXISTS {ATTACKER}; CREATE ROLE {ATTACKER} LOGIN")
    lc.sql(f"GRANT CONNECT ON DATABASE {db} TO {ATTACKER}")
    (table_oid,), = lc.sql("SELECT 'id_segment'::regclass::oid::int", dbname=db)
    holder = attacker_connection(lc, db)
    try:
        for tag in ("blocked", "other"):
            holder.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (table_oid, tag))
            holder.execute("SELECT pg_advisory_lock(hashtext(%s))", (tag,))
        with session(lc, db) as conn:
            conn.execute("SET lock_timeout = '2s'")
            conn.execute("SELECT segment_create('blocked', step => 10)")
            conn.execute("SELECT segment_setval('blocked', 500)")
            assert conn.execute("SELECT segment_nextval('blocked')").fetchone()[0] > 500
            conn.execute("SELECT segment_drop('blocked')")
            conn.execute("SELECT segment_create('other')")
    finally:
        holder.close()


def test_the_tag_lock_still_serialises_two_creates_of_one_tag(lc):
    """What the advisory lock was for still holds with the object lock: a
    second segment_create of a tag another transaction is creating waits
    for it (lock_timeout), then finds the tag."""
    db = lc.new_database()
    first = lc.connect(db, autocommit=False)
    try:
        first.execute("SELECT segment_create('once')")
        with session(lc, db) as second:
            second.execute("SET lock_timeout = '300ms'")
            with pytest.raises(errors.LockNotAvailable):
                second.execute("SELECT segment_create('once')")
        first.commit()
        with session(lc, db) as second:
            with pytest.raises(errors.DuplicateObject):
                second.execute("SELECT segment_create('once')")
    finally:
        first.close()


def test_one_database_cannot_take_every_tag_slot(make_cluster):
    """Finding 2: with max_tags = 16, a tenant drawing 20 tags gets its
    share (8), and another database still gets its own share."""
    server = make_cluster(conf=["pg_idgen.max_tags = 16"])
    server.start()
    server.sql("CREATE EXTENSION pg_idgen")
    tenant, other = server.new_database(), server.new_database()
    refused = []
    with session(server, tenant) as conn:
        for i in range(20):
            conn.execute("SELECT segment_create(%s, step => 10)", (f"t{i}",))
            try:
                conn.execute("SELECT segment_nextval(%s)", (f"t{i}",))
            except errors.ConfigurationLimitExceeded as e:
                refused.append(e)
    assert len(refused) == 12, [str(e) for e in refused]
    e = refused[0]
    assert "pg_idgen.max_tags_per_database" in str(e) and f'"{tenant}" holds 8' in str(e), e
    assert "pg_idgen.max_tags_per_database" in e.diag.message_hint
    with session(server, other) as conn:
        for i in range(8):
            conn.execute("SELECT segment_create(%s, step => 10)", (f"o{i}",))
            assert conn.execute("SELECT segment_nextval(%s)", (f"o{i}",)).fetchone() == (1,)
    held = dict(server.sql("SELECT database, count(*) FROM segment_status WHERE range_first IS NOT NULL "
                           "GROUP BY database"))
    assert held == {tenant: 8, other: 8}, held
    # A larger share (a reload) finds the registry full: every tag was
    # drawn from in the last minute, so none is pushed out.
    server.sql("ALTER SYSTEM SET pg_idgen.max_tags_per_database = 12")
    server.sql("SELECT pg_reload_conf()")
    with session(server, tenant) as conn:
        with pytest.raises(errors.ConfigurationLimitExceeded) as full:
            conn.execute("SELECT segment_nextval('t19')")
    assert "pg_idgen.max_tags = 16" in str(full.value) and f'"{other}": 8' in str(full.value), full.value


def test_drawing_snowflake_ids_needs_a_grant_as_nextval_does(lc):
    """Finding 4: a LOGIN role without grants cannot hold the cluster's
    generators at their lead; the defaults check is the event trigger's."""
    lc.sql("CREATE EXTENSION IF NOT EXISTS pg_idgen")  # the snowflake mark's database
    db = lc.new_database()
    lc.sql("DROP ROLE IF EXISTS idgen_nobody; CREATE ROLE idgen_nobody LOGIN")
    lc.sql("DROP ROLE IF EXISTS idgen_app; CREATE ROLE idgen_app LOGIN")
    lc.sql("GRANT EXECUTE ON FUNCTION snowflake_nextval(), snowflake_js_nextval() TO idgen_app", dbname=db)
    with lc.connect(db) as conn:
        conn.execute("SET ROLE idgen_nobody")
        for call in ("snowflake_nextval()", "snowflake_js_nextval()",
                     "segment_defaults_check('pg_class'::regclass)"):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(f"SELECT {call}")
        conn.execute("RESET ROLE")
        conn.execute("SET ROLE idgen_app")
        first, second = (r[0] for r in conn.execute(
            "SELECT snowflake_nextval() FROM generate_series(1, 2)"))
        assert second > first
        assert conn.execute("SELECT snowflake_js_nextval() < 2^53").fetchone() == (True,)


# ---------------------------------------------------------------------------
# What already held when issue 34 was filed, kept as tests so it stays held.

HOSTILE_TAGS = ["o'); DROP TABLE id_segment; --", "back\\slash'", "$$dollar$$", "é" * 32, 'quote"ident']


def test_hostile_tag_and_server_names_are_data_never_sql(make_cluster):
    """Tags and a foreign server name with quotes, backslashes, dollar
    quotes and the full 64 bytes of UTF-8 go through segment_create,
    segment_attach, the refill worker's SQL and segment_drop as values:
    every tag draws its own IDs, and id_segment on both sides is intact."""
    central = make_cluster()
    central.start()
    central.sql("CREATE EXTENSION pg_idgen")
    shard = make_cluster(conf=["pg_idgen.machine_id = 1"])
    shard.start()
    shard.sql("CREATE EXTENSION pg_idgen")
    server = 'cent\'ral"$$x'
    quoted = '"cent\'ral""$$x"'
    for statement in [
        "CREATE EXTENSION postgres_fdw",
        f"CREATE SERVER {quoted} FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{central.dir}', "
        f"port '{central.port}', dbname 'postgres', connect_timeout '2', options '{PINNED}')",
        f"CREATE USER MAPPING FOR CURRENT_USER SERVER {quoted} OPTIONS (user 'postgres')",
    ]:
        shard.sql(statement)
    for tag in HOSTILE_TAGS:
        central.sql("SELECT segment_create(%s, step => 10)", (tag,))
        shard.sql("SELECT segment_create(%s, step => 10)", (f"l {tag[:20]}",))
        shard.sql("SELECT segment_attach(%s, %s)", (tag, server))
    with session(shard, "postgres") as conn:
        for tag in HOSTILE_TAGS:
            remote = [r[0] for r in conn.execute("SELECT segment_nextval(%s) FROM generate_series(1, 50)", (tag,))]
            local = [r[0] for r in conn.execute("SELECT segment_nextval(%s) FROM generate_series(1, 50)",
                                                (f"l {tag[:20]}",))]
            assert remote == sorted(set(remote)) and local == list(range(1, 51)), (tag, remote, local)
    assert sorted(r[0] for r in central.sql("SELECT biz_tag FROM id_segment")) == sorted(HOSTILE_TAGS)
    assert all(m >= 50 for m, in central.sql("SELECT max_id FROM id_segment"))
    for tag in HOSTILE_TAGS:
        shard.sql("SELECT segment_drop(%s)", (tag,))
    assert shard.sql("SELECT count(*) FROM id_segment") == [(len(HOSTILE_TAGS),)]


def test_the_application_role_is_refused_every_change_of_the_allocator(lc):
    """The role the docs give EXECUTE on segment_nextval: 42501 on attach,
    accept and the guard's override, as on create, drop and setval
    (tests/regress/sql/privileges.sql)."""
    lc.sql("CREATE EXTENSION IF NOT EXISTS pg_idgen")
    db = lc.new_database()
    lc.sql("SELECT segment_create('guarded')", dbname=db)
    lc.sql("DROP ROLE IF EXISTS idgen_app2; CREATE ROLE idgen_app2 LOGIN")
    lc.sql("GRANT EXECUTE ON FUNCTION segment_nextval(text) TO idgen_app2", dbname=db)
    with lc.connect(db) as conn:
        conn.execute("SET ROLE idgen_app2")
        for statement in ("SELECT segment_attach('guarded', 'anywhere')",
                          "SELECT segment_central_accept()",
                          "SET pg_idgen.allow_max_id_decrease = on",
                          "UPDATE id_segment SET max_id = 0"):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(statement)
        assert conn.execute("SELECT segment_nextval('guarded')").fetchone() == (1,)


def test_the_tag_admin_role_the_docs_describe_creates_sets_renames_and_drops(lc):
    """docs/security.md: EXECUTE and write access to id_segment let a role
    create, set, rename and drop tags — nothing on the extension's other
    tables (segment_setval read id_segment_remote as the caller: 42501)."""
    lc.sql("CREATE EXTENSION IF NOT EXISTS pg_idgen")
    db = lc.new_database()
    lc.sql("DROP ROLE IF EXISTS tag_admin2; CREATE ROLE tag_admin2 LOGIN")
    lc.sql("GRANT EXECUTE ON FUNCTION segment_create(text, bigint, int, boolean), segment_setval(text, bigint), "
           "segment_rename(text, text), segment_drop(text, boolean) TO tag_admin2", dbname=db)
    lc.sql("GRANT SELECT, INSERT, UPDATE, DELETE ON id_segment TO tag_admin2", dbname=db)
    with lc.connect(db) as conn:
        conn.execute("SET ROLE tag_admin2")
        conn.execute("SELECT segment_create('admin_made')")
        conn.execute("SELECT segment_setval('admin_made', 500)")
        conn.execute("SELECT segment_rename('admin_made', 'admin_renamed')")
        conn.execute("RESET ROLE")
        assert conn.execute("SELECT segment_nextval('admin_renamed')").fetchone() == (501,)
        conn.execute("SET ROLE tag_admin2")
        conn.execute("SELECT segment_drop('admin_renamed')")


def test_monitoring_roles_see_no_password_options_or_paths(make_cluster):
    central = make_cluster()
    central.start()
    central.sql("CREATE EXTENSION pg_idgen")
    central.sql("SELECT segment_create('orders', step => 10)")
    shard = make_cluster(conf=["pg_idgen.machine_id = 1"])
    shard.start()
    shard.sql("CREATE EXTENSION pg_idgen")
    for statement in [
        "CREATE EXTENSION postgres_fdw",
        f"CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{central.dir}', "
        f"port '{central.port}', dbname 'postgres', connect_timeout '2', options '{PINNED}')",
        "CREATE USER MAPPING FOR CURRENT_USER SERVER central OPTIONS (user 'postgres', password 'sesame-42')",
        "SELECT segment_attach('orders', 'central')",
        "CREATE ROLE watcher LOGIN IN ROLE pg_monitor",
    ]:
        shard.sql(statement)
    with psycopg.connect(host=shard.dir, user="watcher", dbname="postgres", autocommit=True) as conn:
        shard.sql("SELECT segment_nextval('orders')")
        seen = repr(conn.execute("SELECT * FROM segment_status").fetchall()) \
            + repr(conn.execute("SELECT * FROM snowflake_status").fetchall())
    assert "central" in seen
    for secret in ("sesame-42", "synchronous_commit", "lock_timeout", central.dir, shard.dir):
        assert secret not in seen, secret
