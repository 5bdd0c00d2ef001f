-- pg_idgen 0.1.0 -> 0.2.0: ALTER EXTENSION pg_idgen UPDATE TO '0.2.0'.
-- Every change to the SQL surface after release 0.1.0 goes here, in the
-- order it landed; tests/integration/test_upgrade.py updates a 0.1.0
-- database in place.
\echo Use "ALTER EXTENSION pg_idgen UPDATE TO '0.2.0'" to load this file. \quit

-- max_id never moves back (src/segment/guard.rs): the refusal that 0.1.0
-- kept in shared memory only, now durable.
CREATE FUNCTION id_segment_guard() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'id_segment_guard_wrapper';
CREATE TRIGGER id_segment_max_id_never_decreases
    BEFORE UPDATE OF max_id ON id_segment
    FOR EACH ROW WHEN (NEW.max_id < OLD.max_id)
    EXECUTE FUNCTION id_segment_guard();
