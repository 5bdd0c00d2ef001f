"""The calling-context matrix of segment_nextval (issue 9, point 1; design
§2.1 and §6): every place a user can call it from, each with the tag
changing between calls inside one statement or one transaction; after
each, segment_currval of both tags in the same session.

Two tags: 'a' (start 1, step 10) and 'b' (start 1e9, step 10); the worker
takes one step per refill (max_ids_ahead = 1), so every context crosses
several refills of both tags. The matrix runs twice: with both tags local,
and with 'b' attached to a central server (segment_attach), so that every
context also crosses remote refills through postgres_fdw. Every ID is checked against the tag it was
asked for: an 'a' ID is below 1e9 and at most a's max_id, a 'b' ID is at
least 1e9 and at most b's max_id; within one session each tag's IDs strictly
increase; no ID of a tag comes out twice, in one context or across all of
them (the module keeps every ID it received).

What it attacks: the call-site cache in fn_extra. A call site may skip the
tag comparison only when its argument cannot change while the cache lives;
PL/pgSQL variables, function parameters and NEW fields are Params that
`get_fn_expr_arg_stable` calls stable, yet PL/pgSQL keeps the same
expression state (and fn_extra) while their values change.
"""

import pytest

from helpers import PINNED, duplicates

A_START, B_START, STEP = 1, 1_000_000_000, 10
TAGS = ("a", "b")

# Every ID received in this module, by matrix and tag, to find repeats
# across contexts.
SEEN = {}
REPEATS = []

CREATE_A = f"SELECT segment_create('a', start => {A_START}, step => {STEP})"
CREATE_B = f"SELECT segment_create('b', start => {B_START}, step => {STEP})"

SETUP = """

-- Issue 9's reproduction, as written there.
CREATE FUNCTION next_id(t text) RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RETURN segment_nextval(t); END $$;
CREATE TABLE ev (id bigint, kind text);
CREATE FUNCTION set_id() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.id := segment_nextval(NEW.kind); RETURN NEW; END $$;
CREATE TRIGGER t BEFORE INSERT ON ev FOR EACH ROW EXECUTE FUNCTION set_id();

-- 50 rows, kinds alternating a, b, a, b ... in insertion (= scan) order.
CREATE TABLE kinds (ord int, kind text);
INSERT INTO kinds SELECT g, CASE WHEN g % 2 = 1 THEN 'a' ELSE 'b' END FROM generate_series(1, 50) g;

CREATE TABLE with_default_a (id bigint DEFAULT segment_nextval('a'), v int);
CREATE TABLE with_default_b (id bigint DEFAULT segment_nextval('b'), v int);

-- SQL functions: inlinable, and three that are not (STRICT over a non-strict
-- body, a SET clause, SECURITY DEFINER).
CREATE FUNCTION sql_next(t text) RETURNS bigint LANGUAGE sql VOLATILE AS 'SELECT segment_nextval(t)';
CREATE FUNCTION sql_next_strict(t text) RETURNS bigint LANGUAGE sql STRICT VOLATILE AS 'SELECT segment_nextval(t)';
CREATE FUNCTION sql_next_set(t text) RETURNS bigint LANGUAGE sql VOLATILE SET work_mem = '4MB'
    AS 'SELECT segment_nextval(t)';
CREATE FUNCTION sql_next_definer(t text) RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER
    AS 'SELECT segment_nextval(t)';

-- PL/pgSQL: a variable, a record field, a CASE over the loop counter,
-- dynamic SQL with USING, and a statement that is not a simple expression.
CREATE FUNCTION pl_variable(n int) RETURNS TABLE (out_tag text, out_id bigint) LANGUAGE plpgsql AS $$
DECLARE t text;
BEGIN
    FOR i IN 1..n LOOP
        t := CASE WHEN i % 2 = 1 THEN 'a' ELSE 'b' END;
        out_tag := t;
        out_id := segment_nextval(t);
        RETURN NEXT;
    END LOOP;
END $$;
CREATE FUNCTION pl_record_field() RETURNS TABLE (out_tag text, out_id bigint) LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT kind FROM kinds ORDER BY ord LOOP
        out_tag := r.kind;
        out_id := segment_nextval(r.kind);
        RETURN NEXT;
    END LOOP;
END $$;
CREATE FUNCTION pl_case(n int) RETURNS TABLE (out_tag text, out_id bigint) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        out_tag := CASE WHEN i % 2 = 1 THEN 'a' ELSE 'b' END;
        out_id := segment_nextval(CASE WHEN i % 2 = 1 THEN 'a' ELSE 'b' END);
        RETURN NEXT;
    END LOOP;
END $$;
CREATE FUNCTION pl_execute_using(n int) RETURNS TABLE (out_tag text, out_id bigint) LANGUAGE plpgsql AS $$
DECLARE t text;
BEGIN
    FOR i IN 1..n LOOP
        t := CASE WHEN i % 2 = 1 THEN 'a' ELSE 'b' END;
        out_tag := t;
        EXECUTE 'SELECT segment_nextval($1)' INTO out_id USING t;
        RETURN NEXT;
    END LOOP;
END $$;
CREATE FUNCTION pl_statement(n int) RETURNS TABLE (out_tag text, out_id bigint) LANGUAGE plpgsql AS $$
DECLARE t text;
BEGIN
    FOR i IN 1..n LOOP
        t := CASE WHEN i % 2 = 1 THEN 'a' ELSE 'b' END;
        out_tag := t;
        SELECT segment_nextval(t) INTO out_id FROM (VALUES (1)) AS one (x);
        RETURN NEXT;
    END LOOP;
END $$;
-- PL/pgSQL calling PL/pgSQL: the tag passes through a parameter twice.
CREATE FUNCTION pl_nested(n int) RETURNS TABLE (out_tag text, out_id bigint) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        out_tag := CASE WHEN i % 2 = 1 THEN 'a' ELSE 'b' END;
        out_id := next_id(out_tag);
        RETURN NEXT;
    END LOOP;
END $$;

CREATE TABLE proc_out (ord serial, tag text, id bigint);
CREATE PROCEDURE proc_commit(n int) LANGUAGE plpgsql AS $$
DECLARE t text; got bigint;
BEGIN
    FOR i IN 1..n LOOP
        t := CASE WHEN i % 2 = 1 THEN 'a' ELSE 'b' END;
        got := segment_nextval(t);
        INSERT INTO proc_out (tag, id) VALUES (t, got);
        IF i % 3 = 0 THEN COMMIT; END IF;
    END LOOP;
END $$;

CREATE TABLE do_out (ord serial, tag text, id bigint);
"""


MATRICES = ["both tags local", "b attached to a central server"]


@pytest.fixture(scope="module", params=MATRICES)
def matrix(request, make_module_cluster):
    """A cluster whose worker takes one step (10 IDs) per refill, and one
    database with the two tags and every function and table used below;
    'b' on a central server of its own in the second matrix. Returns the
    cluster, the database, and where each tag's max_id is read."""
    c = make_module_cluster(conf=["pg_idgen.max_ids_ahead = 1"])
    c.start()
    db = c.new_database()
    c.sql(CREATE_A, dbname=db)
    rows = {"a": (c, db), "b": (c, db)}
    if request.param == MATRICES[1]:
        central = make_module_cluster()
        central.start()
        central_db = central.new_database()
        central.sql(CREATE_B, dbname=central_db)
        for statement in [
            "CREATE EXTENSION postgres_fdw",
            f"CREATE SERVER central FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{central.dir}', "
            f"port '{central.port}', dbname '{central_db}', connect_timeout '2', options '{PINNED}')",
            "CREATE USER MAPPING FOR CURRENT_USER SERVER central OPTIONS (user 'postgres')",
            "SELECT segment_attach('b', 'central')",
        ]:
            c.sql(statement, dbname=db)
        rows["b"] = (central, central_db)
    else:
        c.sql(CREATE_B, dbname=db)
    with c.connect(db) as conn:
        conn.execute(SETUP)
    SEEN[request.param] = {"a": set(), "b": set()}
    return c, db, rows, SEEN[request.param]


def alternating(n):
    return ["a" if i % 2 == 0 else "b" for i in range(n)]


def one(conn, query, params=None, prepare=None):
    return conn.execute(query, params, prepare=prepare).fetchone()[0]


# ---------------------------------------------------------------------------
# The contexts. Each takes a connection (in a transaction unless it needs
# autocommit) and returns [(tag asked for, ID received)] in the order the
# IDs were handed out.

def ctx_constant(conn):
    pairs = []
    for a, b in conn.execute("SELECT segment_nextval('a'), segment_nextval('b') FROM generate_series(1, 15)"):
        pairs += [("a", a), ("b", b)]
    for tag in alternating(20):
        pairs.append((tag, one(conn, f"SELECT segment_nextval('{tag}')")))
    return pairs


def ctx_bind_parameter(conn):
    # psycopg binds on the server side: segment_nextval($1).
    pairs = [(tag, one(conn, "SELECT segment_nextval(%s)", (tag,))) for tag in alternating(24)]
    # One statement, the tag chosen per row between two bound parameters.
    pairs += conn.execute(
        "SELECT CASE WHEN mod(g, 2) = 1 THEN %s ELSE %s END, "
        "       segment_nextval(CASE WHEN mod(g, 2) = 1 THEN %s ELSE %s END) "
        "  FROM generate_series(1, 20) g", ("a", "b", "a", "b")).fetchall()
    return pairs


def ctx_bind_parameter_prepared(conn):
    # psycopg's server-side prepared statements, executed again and again.
    pairs = [(tag, one(conn, "SELECT segment_nextval(%s)", (tag,), prepare=True)) for tag in alternating(24)]
    pairs += [(tag, one(conn, "SELECT next_id(%s)", (tag,), prepare=True)) for tag in alternating(24)]
    return pairs


def ctx_column(conn):
    pairs = conn.execute("SELECT kind, segment_nextval(kind) FROM kinds").fetchall()
    pairs += conn.execute(
        "SELECT v.k, segment_nextval(v.k) FROM (VALUES ('a'), ('b'), ('a'), ('b'), ('b'), ('a')) v (k)").fetchall()
    return pairs


def ctx_issue9_plpgsql_next_id(conn):
    # BEGIN; SELECT next_id('a'); SELECT next_id('b'); COMMIT;  -- 'b' returned an ID of 'a'
    pairs = []
    for _ in range(10):
        pairs.append(("a", one(conn, "SELECT next_id('a')")))
        pairs.append(("b", one(conn, "SELECT next_id('b')")))
    conn.commit()
    # The parameter changing within one statement.
    pairs += conn.execute("SELECT kind, next_id(kind) FROM kinds").fetchall()
    return pairs


def ctx_issue9_trigger(conn):
    # INSERT INTO ev(kind) VALUES ('a'),('b'),('a'),('b');  -- every 'b' row got an ID of 'a'
    pairs = conn.execute("INSERT INTO ev(kind) VALUES ('a'),('b'),('a'),('b') RETURNING kind, id").fetchall()
    pairs += conn.execute("INSERT INTO ev(kind) SELECT kind FROM kinds RETURNING kind, id").fetchall()
    for tag in alternating(12):
        pairs += conn.execute("INSERT INTO ev(kind) VALUES (%s) RETURNING kind, id", (tag,)).fetchall()
    return pairs


def ctx_plpgsql_variable(conn):
    return conn.execute("SELECT out_tag, out_id FROM pl_variable(50)").fetchall()


def ctx_plpgsql_record_field(conn):
    return conn.execute("SELECT out_tag, out_id FROM pl_record_field()").fetchall()


def ctx_plpgsql_case_expression(conn):
    return conn.execute("SELECT out_tag, out_id FROM pl_case(50)").fetchall()


def ctx_plpgsql_execute_using(conn):
    return conn.execute("SELECT out_tag, out_id FROM pl_execute_using(50)").fetchall()


def ctx_plpgsql_sql_statement(conn):
    return conn.execute("SELECT out_tag, out_id FROM pl_statement(50)").fetchall()


def ctx_plpgsql_nested_call(conn):
    return conn.execute("SELECT out_tag, out_id FROM pl_nested(50)").fetchall()


def ctx_column_default(conn):
    pairs = []
    for tag in alternating(24):
        pairs.append((tag, one(conn, f"INSERT INTO with_default_{tag} (v) VALUES (1) RETURNING id")))
    for tag in ("a", "b", "a"):
        pairs += [(tag, r[0]) for r in conn.execute(
            f"INSERT INTO with_default_{tag} (v) SELECT generate_series(1, 12) RETURNING id")]
    return pairs


def _sql_function(conn, name):
    pairs = conn.execute(f"SELECT kind, {name}(kind) FROM kinds").fetchall()
    pairs += [(tag, one(conn, f"SELECT {name}(%s)", (tag,))) for tag in alternating(10)]
    pairs += [(tag, one(conn, f"SELECT {name}('{tag}')")) for tag in alternating(10)]
    return pairs


def ctx_sql_function_inlined(conn):
    return _sql_function(conn, "sql_next")


def ctx_sql_function_strict(conn):
    return _sql_function(conn, "sql_next_strict")


def ctx_sql_function_set_clause(conn):
    return _sql_function(conn, "sql_next_set")


def ctx_sql_function_security_definer(conn):
    return _sql_function(conn, "sql_next_definer")


def _prepared(conn, plan_cache_mode):
    conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
    conn.execute("PREPARE p_one(text) AS SELECT segment_nextval($1)")
    conn.execute("PREPARE p_pl(text) AS SELECT next_id($1)")
    conn.execute("PREPARE p_rows(text, text) AS SELECT CASE WHEN mod(g, 2) = 1 THEN $1 ELSE $2 END, "
                 "segment_nextval(CASE WHEN mod(g, 2) = 1 THEN $1 ELSE $2 END) FROM generate_series(1, 4) g")
    pairs = []
    # Well past the fifth execution, where `auto` may switch to a generic plan.
    for tag in alternating(16):
        pairs.append((tag, one(conn, f"EXECUTE p_one('{tag}')")))
    for tag in alternating(16):
        pairs.append((tag, one(conn, f"EXECUTE p_pl('{tag}')")))
    for i in range(8):
        first, second = ("a", "b") if i % 2 == 0 else ("b", "a")
        pairs += conn.execute(f"EXECUTE p_rows('{first}', '{second}')").fetchall()
    return pairs


def ctx_prepared_statement(conn):
    return _prepared(conn, "auto")


def ctx_prepared_statement_generic_plan(conn):
    return _prepared(conn, "force_generic_plan")


def ctx_prepared_statement_custom_plan(conn):
    return _prepared(conn, "force_custom_plan")


def _cursor(conn, over):
    """Two cursors open at once, FETCHes interleaved with direct calls for
    the other tag."""
    conn.execute("DECLARE ca NO SCROLL CURSOR FOR SELECT segment_nextval('a') FROM generate_series(1, 1000)")
    conn.execute(f"DECLARE ck NO SCROLL CURSOR FOR SELECT kind, {over}(kind) FROM kinds")
    pairs = []
    for _ in range(8):
        pairs += [("a", r[0]) for r in conn.execute("FETCH 3 FROM ca")]
        pairs.append(("b", one(conn, "SELECT segment_nextval('b')")))
        pairs += conn.execute("FETCH 2 FROM ck").fetchall()
        pairs.append(("b", one(conn, "SELECT segment_nextval('b')")))
        pairs.append(("a", one(conn, "SELECT segment_nextval('a')")))
        pairs += conn.execute("FETCH 3 FROM ck").fetchall()
    return pairs


def ctx_cursor(conn):
    return _cursor(conn, "segment_nextval")


def ctx_cursor_over_plpgsql(conn):
    return _cursor(conn, "next_id")


def ctx_lateral(conn):
    pairs = conn.execute(
        "SELECT k.kind, x.id FROM kinds k CROSS JOIN LATERAL (SELECT segment_nextval(k.kind) AS id) x").fetchall()
    pairs += conn.execute(
        "SELECT k.kind, x.id FROM kinds k CROSS JOIN LATERAL "
        "(SELECT segment_nextval(k.kind) AS id FROM generate_series(1, 2)) x WHERE k.ord <= 10").fetchall()
    pairs += conn.execute(
        "SELECT k.kind, x FROM kinds k CROSS JOIN LATERAL segment_nextval(k.kind, 2) x WHERE k.ord <= 10").fetchall()
    return pairs


def ctx_do_block(conn):
    conn.execute("""
        DO $$
        DECLARE t text; got bigint;
        BEGIN
            FOR i IN 1..50 LOOP
                t := CASE WHEN i % 2 = 1 THEN 'a' ELSE 'b' END;
                got := segment_nextval(t);
                INSERT INTO do_out (tag, id) VALUES (t, got);
            END LOOP;
        END $$""")
    return conn.execute("SELECT tag, id FROM do_out ORDER BY ord").fetchall()


def ctx_procedure_with_commit(conn):
    # Autocommit: CALL may COMMIT only outside a transaction block.
    conn.execute("CALL proc_commit(50)")
    return conn.execute("SELECT tag, id FROM proc_out ORDER BY ord").fetchall()


def ctx_setof_select_list(conn):
    pairs = conn.execute(
        "SELECT v.tag, segment_nextval(v.tag, 3) FROM (VALUES (1, 'a'), (2, 'b'), (3, 'a'), (4, 'b'), "
        "(5, 'b'), (6, 'a'), (7, 'a'), (8, 'b')) v (o, tag)").fetchall()
    for a, b in conn.execute("SELECT segment_nextval('a', 12), segment_nextval('b', 12)"):
        pairs += [("a", a), ("b", b)]
    return pairs


def ctx_setof_from(conn):
    pairs = []
    for tag in alternating(6):
        pairs += [(tag, r[0]) for r in conn.execute("SELECT * FROM segment_nextval(%s, 7)", (tag,))]
    for a, b in conn.execute("SELECT * FROM ROWS FROM (segment_nextval('a', 9), segment_nextval('b', 9))"):
        pairs += [("a", a), ("b", b)]
    return pairs


CONTEXTS = {name[len("ctx_"):]: fn for name, fn in list(globals().items()) if name.startswith("ctx_")}
AUTOCOMMIT = {"procedure_with_commit"}


def check_pairs(rows, seen, context, pairs):
    """Every ID against its own tag, in order, and against every ID of every
    context before it (`seen`: this matrix's); `rows`: where each tag's row
    is, as (cluster, database)."""
    by_tag = {tag: [i for t, i in pairs if t == tag] for tag in TAGS}
    assert not [t for t, _ in pairs if t not in TAGS], "a context returned a tag it was not asked for"
    # Record first, so later contexts are checked against these too.
    repeated = {tag: sorted(seen[tag].intersection(ids)) for tag, ids in by_tag.items()}
    for tag, ids in by_tag.items():
        seen[tag].update(ids)
    REPEATS.extend((context, tag, i) for tag, ids in repeated.items() for i in ids)

    for tag in TAGS:
        assert len(by_tag[tag]) > 2 * STEP, \
            f"only {len(by_tag[tag])} IDs of '{tag}': the context did not cross a refill"
    max_ids = {tag: cluster.sql("SELECT max_id FROM id_segment WHERE biz_tag = %s", (tag,),
                                dbname=db)[0][0]
               for tag, (cluster, db) in rows.items()}
    a_ids, b_ids = by_tag["a"], by_tag["b"]
    foreign_in_a = [i for i in a_ids if not A_START <= i <= max_ids["a"]]
    foreign_in_b = [i for i in b_ids if not B_START <= i <= max_ids["b"]]
    assert max_ids["a"] < B_START
    assert not foreign_in_b, (
        f"{len(foreign_in_b)} of {len(b_ids)} IDs asked for 'b' are not from b's row "
        f"[{B_START}, {max_ids['b']}], e.g. {foreign_in_b[:5]}: they belong to 'a'")
    assert not foreign_in_a, (
        f"{len(foreign_in_a)} of {len(a_ids)} IDs asked for 'a' are not from a's row "
        f"[{A_START}, {max_ids['a']}], e.g. {foreign_in_a[:5]}")
    for tag in TAGS:
        dups = duplicates(by_tag[tag])
        assert not dups, f"'{tag}': {len(dups)} IDs handed out twice in this context, e.g. {dups[:5]}"
        bad = [(x, y) for x, y in zip(by_tag[tag], by_tag[tag][1:]) if not x < y]
        assert not bad, f"'{tag}': IDs of one session not strictly increasing, e.g. {bad[:3]}"
        assert not repeated[tag], \
            f"'{tag}': {len(repeated[tag])} IDs already handed out in an earlier context, e.g. {repeated[tag][:5]}"


@pytest.mark.parametrize("context", list(CONTEXTS))
def test_segment_nextval_keeps_each_tag_apart_in_every_calling_context(matrix, context):
    """Calls segment_nextval from one calling context, alternating tags 'a'
    and 'b' within one statement or transaction, and checks every ID
    against the tag it was asked for (see the module docstring)."""
    cluster, db, rows, seen = matrix
    with cluster.connect(db, autocommit=context in AUTOCOMMIT) as conn:
        conn.execute("SET statement_timeout = '60s'")
        pairs = CONTEXTS[context](conn)
        if not conn.autocommit:
            conn.commit()
        # segment_currval: the last ID of each tag this session got, from
        # whatever context it came (IDs of a session increase).
        for tag in TAGS:
            ids = [i for t, i in pairs if t == tag]
            (current,), = conn.execute("SELECT segment_currval(%s)", (tag,)).fetchall()
            assert current == max(ids), f"segment_currval('{tag}') = {current}, last drawn {max(ids)}"
    check_pairs(rows, seen, context, pairs)


def test_no_id_repeats_across_all_contexts(matrix):
    """Across every context that ran on this matrix: each tag's IDs are
    unique, and both tags' ranges never met."""
    seen = matrix[3]
    assert seen["a"] and seen["b"], "no context ran"
    assert not REPEATS, f"{len(REPEATS)} IDs repeated across contexts, e.g. {REPEATS[:5]}"
    assert not seen["a"].intersection(seen["b"]), "an ID was handed out for both 'a' and 'b'"
